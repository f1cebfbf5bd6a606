//! The named scenarios, and how Paddock's samples are interleaved with the peers'.
//!
//! Interleaving: a peer driven through `peer_driver.py` cannot alternate with Paddock sample by
//! sample (each driver call starts a Python and its peer), so those scenarios run in rounds:
//! a chunk of Paddock's samples, then a chunk of each peer's, again. Peers run by the bench
//! itself (bare `bash -c`, a bare `python3`, the bare backend tools) alternate sample by sample.

mod approval;
mod backends;
mod calls;
mod cpu;
mod e2b;
mod files;
mod growth;
mod mcp;
mod measure;
mod memory;
mod network;
mod notebook;
mod pause;
mod relay;
mod scale;
mod scripts;
mod session_api;
mod snapshot;
mod snapshot_notebook;
mod terminal;

use std::time::Instant;

use paddock_engine::engine::Engine;

use crate::error::{BenchError, Result};
use crate::harness::Bench;
use crate::report::ScenarioReport;

/// Every scenario, in the order a full run takes them, with what it measures.
pub const SCENARIOS: &[(&str, &str)] = &[
    (
        "trivial",
        "latency of a trivial script through the warm pool (p50/p90/p99)",
    ),
    (
        "nested_call",
        "one tool call from inside a script, round trip",
    ),
    ("gather", "asyncio.gather of 10, 50, 100, 500 tool calls"),
    (
        "cpu",
        "a CPU-bound loop in the sandbox against CPython and Monty",
    ),
    ("script_size", "scripts of 10, 100, 1000, 10000 lines"),
    ("output", "scripts printing 100, 10k, 1M characters"),
    (
        "throughput",
        "scripts per second at concurrency 1, 2, 8, 32",
    ),
    (
        "notebook",
        "latency of a trivial script in a notebook session (keep_state)",
    ),
    (
        "notebook_throughput",
        "scripts per second in 1, 2, 8 concurrent notebook sessions",
    ),
    (
        "batch",
        "200 trivial scripts through one fresh `paddock run` process, with and without \
         --keep-state",
    ),
    ("idle_memory", "private memory of an idle pre-forked child"),
    (
        "startup",
        "a fresh `paddock run` process, and an engine built to its first script",
    ),
    (
        "terminal",
        "`terminal` per-command overhead (unconfined, workspace-write with and without the \
         agent) against a bare `bash -c` and Hermes",
    ),
    (
        "terminal_burst",
        "100 concurrent `terminal` commands (unconfined)",
    ),
    (
        "python_execute",
        "`python_execute` (unconfined) against a bare `python3`",
    ),
    (
        "mcp",
        "an MCP `tools/call` round trip over stdio to `paddock serve`",
    ),
    (
        "approval",
        "`paddock policy explain` of one command from a cold process",
    ),
    (
        "scale",
        "8, 32, 128 concurrent sessions of commands, a background process and python_execute, \
         on the local backend and each docker backend of --backends (the quick set: 8)",
    ),
    (
        "files",
        "read_file, write_file, apply_patch and grep on local (unconfined and sandboxed) and \
         each docker/ssh/apptainer backend of --backends, against cat and rg/grep there",
    ),
    (
        "network",
        "the egress proxy: a 10 MiB download and small requests (new and kept connections) \
         from the sandbox and each docker backend of --backends, against this machine direct",
    ),
    (
        "pause",
        "`sessions pause` and resume of a session with a background process, in the sandbox \
         and on each docker backend of --backends",
    ),
    (
        "snapshot",
        "`sessions snapshot`, a fork of 16 sessions and a forked session's first command, in \
         the sandbox and on each docker backend of --backends, against building the state from \
         scratch; a notebook's names dumped and loaded",
    ),
    (
        "session_api",
        "what SDK clients wait for: a written line to the output callback, `1+1` in a warm and \
         a new Python context (sandbox and each docker backend of --backends), and \
         `session.run(\"true\")` from Python against `subprocess.run`",
    ),
    (
        "e2b",
        "the e2b SDK against `paddock serve --e2b`: `commands.run(\"true\")` against \
         Paddock's own `session.run`, and `Sandbox.create` to the first answer on each docker \
         backend of --backends with a warm pool",
    ),
    (
        "relay",
        "a command on an agent on another node through the relay against a same-node agent, \
         and 100 at once, on the slurm backends of --backends (nothing without them)",
    ),
    (
        "backends",
        "`terminal` on each docker/ssh/apptainer backend, with and without the agent, and \
         `paddock call terminal` on docker, against the bare tool (--backends POLICY)",
    ),
];

/// The scenarios to run: `wanted` (validated) or every one; `backends` only when asked for by
/// name or when a backends policy was given.
pub fn select(wanted: &[String], have_backends: bool) -> Result<Vec<&'static str>> {
    if wanted.is_empty() {
        return Ok(SCENARIOS
            .iter()
            .map(|(name, _)| *name)
            .filter(|name| *name != "backends" || have_backends)
            .collect());
    }
    let mut out = Vec::new();
    for name in wanted {
        let Some((known, _)) = SCENARIOS.iter().find(|(n, _)| n == name) else {
            return Err(BenchError::UnknownScenario {
                name: name.clone(),
                known: SCENARIOS
                    .iter()
                    .map(|(n, _)| *n)
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        };
        if !out.contains(known) {
            out.push(*known);
        }
    }
    Ok(out)
}

/// Runs one scenario. A Paddock failure becomes the report's `error`, so the other scenarios
/// still run.
pub async fn run(name: &'static str, b: &Bench) -> Vec<ScenarioReport> {
    let started = Instant::now();
    let one = |r: Result<ScenarioReport>| r.map(|report| vec![report]);
    let result = match name {
        "trivial" => one(scripts::trivial(b).await),
        "nested_call" => one(calls::nested_call(b).await),
        "gather" => one(calls::gather(b).await),
        "cpu" => one(cpu::cpu(b).await),
        "script_size" => one(growth::script_size(b).await),
        "output" => one(growth::output(b).await),
        "throughput" => one(scripts::throughput(b).await),
        "notebook" => one(notebook::notebook(b).await),
        "notebook_throughput" => one(notebook::notebook_throughput(b).await),
        "batch" => one(notebook::batch(b).await),
        "idle_memory" => one(memory::idle_memory(b).await),
        "startup" => one(scripts::startup(b).await),
        // Several reports measured in one interleaved loop: each carries the loop's wall time.
        "terminal" => terminal::terminal(b).await,
        "terminal_burst" => one(terminal::burst(b).await),
        "python_execute" => one(terminal::python_execute(b).await),
        "mcp" => one(mcp::mcp(b).await),
        "approval" => one(approval::approval(b).await),
        "backends" => return backends::backends(b).await,
        "files" => files::files(b).await,
        "network" => network::network(b).await,
        "pause" => pause::pause(b).await,
        "snapshot" => snapshot::snapshot(b).await,
        "relay" => relay::relay(b).await,
        "session_api" => session_api::session_api(b).await,
        "e2b" => e2b::e2b(b).await,
        "scale" => return scale::scale(b).await,
        other => Err(BenchError::UnknownScenario {
            name: other.into(),
            known: String::new(),
        }),
    };
    let mut reports = result.unwrap_or_else(|err| {
        let title = SCENARIOS
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(name, |(_, about)| *about);
        let mut failed = ScenarioReport::new(name, title, "", crate::report::Better::Lower);
        failed.error = Some(err.to_string());
        vec![failed]
    });
    for report in &mut reports {
        report.wall_s = started.elapsed().as_secs_f64();
    }
    reports
}

/// An engine of `policy` whose calls run in `session` (on `backend`, when given).
pub fn session_engine(
    b: &Bench,
    policy: paddock_engine::policy::Policy,
    session: &str,
    backend: Option<&str>,
) -> Result<Engine> {
    Ok(Engine::with_options(
        policy,
        paddock_engine::registry::Registry::with_builtins(),
        std::sync::Arc::default(),
        paddock_engine::engine::EngineOptions {
            session: Some(session.into()),
            backend: backend.map(str::to_owned),
            exe: Some(b.exe.clone()),
        },
    )?)
}

/// One place a scenario measures: a backend's name, an engine on it, and whether it is docker.
pub struct Place {
    pub name: String,
    pub engine: Engine,
    pub docker: bool,
}

/// The sandboxed local backend over `workspace`, and each docker backend of `--backends`,
/// each with an engine whose session is `session` (`what` names the scenario in errors).
pub fn sandbox_and_docker(
    b: &Bench,
    workspace: &std::path::Path,
    session: &str,
    what: &str,
) -> Result<Vec<Place>> {
    let sandboxed = paddock_engine::policy::Policy::parse(
        &format!(
            "[backends.sandboxed]\nkind = \"local\"\nsandbox = \"workspace-write\"\nworkspace = {}\n",
            toml::Value::String(workspace.display().to_string())
        ),
        &format!("<bench {what}: sandboxed>"),
    )?;
    let mut out = vec![Place {
        name: "sandboxed".into(),
        engine: session_engine(b, sandboxed, session, Some("sandboxed"))?,
        docker: false,
    }];
    for (name, keys) in docker_keys(b)? {
        let policy = paddock_engine::policy::Policy::parse(
            &format!("[backends.{name}]\nkind = \"docker\"\n{keys}"),
            &format!("<bench {what}: docker>"),
        )?;
        out.push(Place {
            engine: session_engine(b, policy, session, Some(&name))?,
            name,
            docker: true,
        });
    }
    Ok(out)
}

/// The names of `policy`'s backends whose configuration `wanted` takes, in the policy's order.
pub fn backends_where(
    policy: &paddock_engine::policy::Policy,
    wanted: impl Fn(&paddock_engine::policy::BackendConfig) -> bool,
) -> Vec<String> {
    policy
        .backends
        .iter()
        .filter(|(_, config)| wanted(config))
        .map(|(name, _)| name.clone())
        .collect()
}

/// The docker backends of `--backends`, for scenarios that make their own: each one's name and
/// the keys of what its containers are (`image`, and `runtime` when it names one: a gVisor
/// backend measured as runc would be mislabelled), as TOML lines.
pub fn docker_keys(b: &Bench) -> Result<Vec<(String, String)>> {
    let Some(path) = &b.backends else {
        return Ok(Vec::new());
    };
    let given = paddock_engine::policy::Policy::load(path)?;
    Ok(given
        .backends
        .iter()
        .filter_map(|(name, config)| match config {
            paddock_engine::policy::BackendConfig::Docker(config) => {
                let image = config.image.as_ref()?.get_ref().clone();
                let mut keys = format!("image = {}\n", toml::Value::String(image));
                if let Some(runtime) = &config.runtime {
                    let runtime = toml::Value::String(runtime.get_ref().clone());
                    keys.push_str(&format!("runtime = {runtime}\n"));
                }
                Some((name.clone(), keys))
            }
            _ => None,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn selection_validates_names_and_keeps_backends_for_when_asked() {
        let all = select(&[], false).unwrap();
        assert!(!all.contains(&"backends"));
        assert_eq!(all.len(), SCENARIOS.len() - 1);
        assert!(select(&[], true).unwrap().contains(&"backends"));
        assert_eq!(
            select(&["cpu".into(), "trivial".into(), "cpu".into()], false).unwrap(),
            vec!["cpu", "trivial"]
        );
        let err = select(&["nope".into()], false).unwrap_err().to_string();
        assert!(err.contains("nope") && err.contains("trivial"), "{err}");
    }
}
