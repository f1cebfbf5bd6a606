//! `terminal` on each docker/ssh/apptainer backend of a policy (`--backends POLICY`, e.g. the
//! file scripts/test-services.sh prints), through the in-environment agent and with
//! `agent = false` (a copy of the backend's section), against the bare tool doing the same
//! (`docker exec`, `ssh` over a ControlMaster, `apptainer exec instance://`), interleaved
//! sample by sample; on docker also a whole `paddock call terminal` process per command, and,
//! when the policy's docker backends differ in `runtime` (runc and gVisor's runsc, say), every
//! one of them in one loop (`backend_docker_runtimes`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use paddock_engine::engine::{CallExtras, Engine, EngineOptions};
use paddock_engine::policy::{BackendConfig, Policy};
use paddock_engine::registry::Registry;
use serde_json::json;
use toml::Spanned;

use super::measure::{
    TerminalSamples, alternate, bare_process, json_answer, script_method, terminal_once,
    terminal_script_once, timed,
};
use crate::error::{BenchError, Result};
use crate::harness::Bench;
use crate::report::{Better, Outcome, Role, ScenarioReport};

/// The session every backend scenario runs in; closed at the end.
const SESSION: &str = "bench-backends";

/// The container or instance the engine makes for [`SESSION`] on backend `name` (named after
/// this process's state directory, as the engine names it).
fn environment(name: &str) -> String {
    let owner =
        paddock_backends::naming::owner_of(&paddock_engine::tools::environment::state_root());
    paddock_backends::naming::environment_name(name, &owner, SESSION)
}

/// The bare tool's argv for backend `name`, or `None` for a kind without one (local).
fn bare_argv(name: &str, config: &BackendConfig) -> Option<Vec<String>> {
    bare_argv_in(name, config, &environment(name))
}

/// The bare tool's argv running `true` in container or instance `environment` (the host for
/// ssh) of backend `name`; the last word is the command, to be replaced.
pub(super) fn bare_argv_in(
    name: &str,
    config: &BackendConfig,
    environment: &str,
) -> Option<Vec<String>> {
    match config {
        BackendConfig::Docker(_) => Some(vec![
            "docker".into(),
            "exec".into(),
            environment.to_owned(),
            "true".into(),
        ]),
        BackendConfig::Ssh(config) => {
            let mut argv: Vec<String> = [
                "ssh",
                "-o",
                "BatchMode=yes",
                "-o",
                "ControlMaster=auto",
                "-o",
            ]
            .map(str::to_owned)
            .to_vec();
            argv.push(format!("ControlPath=/tmp/paddock-bench-{name}-%C"));
            argv.extend(["-o", "ControlPersist=60", "-o", "LogLevel=ERROR"].map(str::to_owned));
            if let Some(port) = &config.port {
                argv.extend(["-p".into(), port.get_ref().to_string()]);
            }
            if let Some(key) = &config.identity_file {
                argv.extend(["-i".into(), key.get_ref().clone()]);
            }
            if let Some(file) = &config.known_hosts_file {
                argv.extend([
                    "-o".into(),
                    format!("UserKnownHostsFile={}", file.get_ref()),
                ]);
            }
            let host = config
                .host
                .as_ref()
                .map(|h| h.get_ref().clone())
                .unwrap_or_default();
            argv.push(match &config.user {
                Some(user) => format!("{}@{host}", user.get_ref()),
                None => host,
            });
            argv.push("true".into());
            Some(argv)
        }
        BackendConfig::Apptainer(config) => Some(vec![
            config
                .binary
                .as_ref()
                .map_or_else(|| "apptainer".to_owned(), |b| b.get_ref().clone()),
            "exec".into(),
            format!("instance://{environment}"),
            "true".into(),
        ]),
        _ => None,
    }
}

async fn bare_once(argv: &[String], name: &str) -> Result<f64> {
    let mut command = tokio::process::Command::new(&argv[0]);
    command.args(&argv[1..]);
    bare_process(
        command,
        format!("{name}: {}", argv[0]),
        format!("{name}: the bare tool"),
    )
    .await
}

/// `terminal true` on `engine`'s backend `name`.
async fn terminal_true(engine: &Engine, name: &str) -> Result<f64> {
    terminal_once(engine, "true", &format!("{name}: terminal")).await
}

/// The name of backend `name`'s copy with `agent = false`.
fn exec_name(name: &str) -> String {
    format!("{name}-noagent")
}

/// `policy` with, beside each backend that has a bare tool, a copy of it under
/// [`exec_name`] with `agent = false` (one docker exec / apptainer exec / ssh per command).
fn with_exec_copies(policy: &Policy) -> Policy {
    let mut derived = policy.clone();
    for (name, config) in &policy.backends {
        if bare_argv(name, config).is_none() {
            continue;
        }
        let mut copy = config.clone();
        let off = Some(Spanned::new(0..0, false));
        match &mut copy {
            BackendConfig::Docker(c) => c.agent = off,
            BackendConfig::Ssh(c) => c.agent = off,
            BackendConfig::Apptainer(c) => c.agent = off,
            _ => continue,
        }
        derived.backends.insert(exec_name(name), copy);
    }
    derived
}

/// An engine over `policy` whose environment tools are forced onto backend `name`.
fn engine_on(b: &Bench, policy: &Policy, name: &str) -> Result<Engine> {
    Ok(Engine::with_options(
        policy.clone(),
        Registry::with_builtins(),
        Arc::default(),
        EngineOptions {
            session: Some(SESSION.into()),
            backend: Some(name.into()),
            exe: Some(b.exe.clone()),
        },
    )?)
}

/// What the bare tool is called in the report.
fn bare_label(kind: &str) -> &'static str {
    match kind {
        "ssh" => "ssh (ControlMaster)",
        "docker" => "docker exec",
        "apptainer" | "singularity" => "apptainer exec",
        _ => "bare tool",
    }
}

/// `backend_NAME` (the agent) and `backend_NAME_no_agent` (agent = false), both against the
/// bare tool, from one loop that alternates all of them sample by sample.
async fn one_backend(
    b: &Bench,
    policy: &Policy,
    agent: &Engine,
    name: &str,
    argv: &[String],
) -> Result<Vec<ScenarioReport>> {
    let kind = policy
        .backends
        .get(name)
        .map_or("?", BackendConfig::kind)
        .to_owned();
    let exec = exec_name(name);
    // Warm-up: brings up the container, the instance or the master connection, and the agent.
    for _ in 0..2 {
        terminal_true(agent, name).await?;
        terminal_script_once(agent, &b.limits, name).await?;
        let _ = bare_once(argv, name).await;
    }
    // agent = false: its own environment; a failure there is reported, not fatal.
    let mut exec_error = None;
    let per_command = match engine_on(b, policy, &exec) {
        Ok(engine) => {
            for _ in 0..2 {
                if let Err(err) = terminal_true(&engine, &exec).await {
                    exec_error = Some(err.to_string());
                }
            }
            Some(engine)
        }
        Err(err) => {
            exec_error = Some(err.to_string());
            None
        }
    };
    let samples = b.pick(5, 20);
    let mut bare = Vec::new();
    let (mut with_agent, mut without) = (TerminalSamples::default(), TerminalSamples::default());
    let mut remade = 0;
    for _ in 0..samples {
        bare.push(match bare_once(argv, name).await {
            Ok(ms) => ms,
            // Another Paddock on this machine (another PADDOCK_HOME) may sweep the container
            // or instance as an orphan: a terminal call makes it again, then one retry.
            Err(_) => {
                remade += 1;
                terminal_true(agent, name).await?;
                bare_once(argv, name).await?
            }
        });
        with_agent
            .take(agent, &b.limits, name, &format!("{name}: terminal"))
            .await?;
        if let (Some(engine), None) = (&per_command, &exec_error)
            && let Err(err) = without
                .take(engine, &b.limits, &exec, &format!("{exec}: terminal"))
                .await
        {
            exec_error = Some(err.to_string());
        }
    }
    let bare_outcome = || {
        Outcome::measured(
            format!("`{}`: host wall time from spawn to exit.", argv.join(" ")),
            None,
            bare.clone(),
        )
    };
    let exec_what = format!(
        "backend `{exec}`: `{name}` with agent = false, one {} per command",
        bare_label(&kind)
    );
    let exec_outcome = |samples: Vec<f64>| match &exec_error {
        Some(error) => Outcome::Failed {
            error: error.clone(),
        },
        None => Outcome::measured(script_method(&exec_what), None, samples),
    };
    let label = bare_label(&kind);
    let environment = environment(name);
    let interleaving = format!(
        "The bare tool, Paddock with the agent and Paddock with agent = false (each from one \
         script, then one call) alternate sample by sample; `backend_{name}` and \
         `backend_{name}_no_agent` come from this one loop and share the bare tool's samples. \
         The bare tool runs in the agent's environment (container or instance `{environment}`, \
         or the host)."
    );

    let mut r = ScenarioReport::new(
        &format!("backend_{name}"),
        &format!("`terminal` per command (`true`) on {kind} backend `{name}` (agent)"),
        "ms",
        Better::Lower,
    );
    with_agent.push_rows(
        &mut r,
        &format!("backend `{name}` ({kind}), commands through the in-environment agent"),
    );
    r.push(label, Role::Peer, None, bare_outcome());
    r.push(
        "paddock, agent = false",
        Role::Peer,
        None,
        exec_outcome(without.script.clone()),
    );
    r.note(interleaving.clone());
    if remade > 0 {
        r.note(format!(
            "The environment disappeared {remade} time(s) during the run (removed from outside \
             this bench) and was made again by a `terminal` call before the bare tool's sample \
             was retried."
        ));
    }

    let mut e = ScenarioReport::new(
        &format!("backend_{name}_no_agent"),
        &format!("`terminal` per command (`true`) on {kind} backend `{name}`, agent = false"),
        "ms",
        Better::Lower,
    );
    match &exec_error {
        Some(error) => e.error = Some(format!("backend `{exec}` (agent = false): {error}")),
        None => {
            without.push_rows(&mut e, &exec_what);
            e.push(label, Role::Peer, None, bare_outcome());
        }
    }
    e.note(interleaving);
    Ok(vec![r, e])
}

/// `backend_NAME_call`: a whole `paddock call terminal` process on the docker session the
/// agent engine already brought up, against `docker exec` into the same container.
async fn paddock_call(
    b: &Bench,
    policy_path: &Path,
    name: &str,
    argv: &[String],
) -> Result<ScenarioReport> {
    let mut r = ScenarioReport::new(
        &format!("backend_{name}_call"),
        &format!(
            "`paddock call terminal` (`true`), a new engine process per command, on an existing \
             docker session (backend `{name}`)"
        ),
        "ms",
        Better::Lower,
    );
    let call: Vec<String> = vec![
        b.exe.display().to_string(),
        "call".into(),
        "terminal".into(),
        "--args".into(),
        r#"{"command":"true"}"#.into(),
        "--policy".into(),
        policy_path.display().to_string(),
        "--session".into(),
        SESSION.into(),
        "--backend".into(),
        name.into(),
    ];
    let call_once = async || -> Result<f64> {
        let (elapsed, out) = timed(async {
            tokio::process::Command::new(&call[0])
                .args(&call[1..])
                .stdin(std::process::Stdio::null())
                .output()
                .await
                .map_err(BenchError::io(format!("{name}: paddock call")))
        })
        .await?;
        let what = format!("{name}: paddock call terminal");
        json_answer(&out, what, |answer| answer["exit_code"] == json!(0))?;
        Ok(elapsed)
    };
    let bare = async || bare_once(argv, name).await;
    let (paddock, bare) = alternate(2, b.pick(5, 20), call_once, bare).await?;
    let call_method = format!(
        "`paddock call terminal --args '{{\"command\":\"true\"}}' --policy POLICY --session \
         {SESSION} --backend {name}`: a new engine process (policy load, engine, agent \
         connection, one command), host wall time from spawn to exit."
    );
    let bare_method = format!("`{}`: host wall time from spawn to exit.", argv.join(" "));
    r.push_measured("paddock call", Role::Paddock, None, call_method, paddock);
    r.push_measured("docker exec", Role::Peer, None, bare_method, bare);
    r.note("`paddock call` and `docker exec` alternate sample by sample.");
    Ok(r)
}

/// Containers kept warm in the `backend_NAME_first` scenario.
const WARM: u64 = 2;

/// The policy file at `path` with a copy of backend `name`'s section as `NAME-warm` with
/// `warm = 2`, written beside the other temporary files; loaded as a policy. Done on the text
/// (not the struct) so that the bench builds and reports "skipped" where `warm` is unknown.
fn warm_policy(path: &Path, name: &str) -> std::result::Result<(Policy, PathBuf), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let mut section = doc["backends"][name].clone();
    section["warm"] = toml_edit::value(i64::try_from(WARM).unwrap_or(2));
    doc["backends"][&warm_name(name)] = section;
    let derived = std::env::temp_dir().join(format!(
        "paddock-bench-warm-{}-{name}.toml",
        std::process::id()
    ));
    std::fs::write(&derived, doc.to_string()).map_err(|e| format!("{}: {e}", derived.display()))?;
    let policy = Policy::load(&derived).map_err(|e| e.to_string());
    policy.map(|p| (p, derived))
}

fn warm_name(name: &str) -> String {
    format!("{name}-warm")
}

/// Ids of the running warm containers of backend `backend` (the label the pool puts on them).
async fn warm_containers(backend: &str) -> Result<Vec<String>> {
    let out = tokio::process::Command::new("docker")
        .args(["ps", "-q", "--filter"])
        .arg(format!("label=paddock.warm={backend}"))
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(BenchError::io("docker ps"))?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect())
}

/// Waits until backend `backend`'s pool holds [`WARM`] running containers and no filler holds
/// its lock (the last one's agent is up); an error after 90 s.
async fn pool_ready(backend: &str) -> Result<()> {
    let lock = paddock_engine::tools::environment::state_root()
        .join("agents")
        .join(format!("warm-{backend}.lock"));
    let t = Instant::now();
    loop {
        let full = warm_containers(backend).await?.len() >= usize::try_from(WARM).unwrap_or(2);
        let filling = std::fs::File::open(&lock).is_ok_and(|file| file.try_lock_shared().is_err());
        if full && !filling {
            return Ok(());
        }
        if t.elapsed().as_secs() > 90 {
            return Err(BenchError::Timeout {
                what: format!("the warm pool of `{backend}` refilling to {WARM}"),
                seconds: 90,
            });
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// The first `terminal true` of a brand-new session on `engine`'s backend; the session is
/// closed afterwards (not timed).
async fn first_command(engine: &Engine, backend: &str, session: &str) -> Result<f64> {
    let extras = CallExtras {
        session: Some(session.into()),
        ..CallExtras::default()
    };
    let (elapsed, out) = timed(async {
        engine
            .call_tool_with("terminal", json!({"command": "true"}), extras)
            .await
            .map_err(BenchError::tool(format!(
                "{backend}: first terminal of {session}"
            )))
    })
    .await?;
    let closed = engine.close_session(session).await;
    if out["exit_code"] != json!(0) {
        return Err(BenchError::unexpected(format!("{backend}: terminal"), &out));
    }
    if let Err(err) = closed {
        tracing::warn!(%session, %err, "bench: closing a session");
    }
    Ok(elapsed)
}

/// `backend_NAME_first`: the first command of a new session on docker backend `name` with
/// `warm = 2` (a copy of its section), against the same with no warm pool and a bare
/// `docker run --rm IMAGE true`.
async fn first_of_session(
    b: &Bench,
    path: &Path,
    name: &str,
    config: &BackendConfig,
) -> Result<ScenarioReport> {
    let mut r = ScenarioReport::new(
        &format!("backend_{name}_first"),
        &format!(
            "the first `terminal` (`true`) of a new session on docker backend `{name}` with \
             warm = {WARM}"
        ),
        "ms",
        Better::Lower,
    );
    let warm = warm_name(name);
    let (policy, derived) = match warm_policy(path, name) {
        Ok(loaded) => loaded,
        Err(err) => {
            r.skipped = Some(format!("`warm = {WARM}` is not accepted here: {err}"));
            return Ok(r);
        }
    };
    let _ = std::fs::remove_file(&derived);
    let warm_engine = engine_on(b, &policy, &warm)?;
    let cold_engine = engine_on(b, &policy, name)?;
    let mut docker_run: Vec<String> = ["docker", "run", "--rm", "--network", "none"]
        .map(str::to_owned)
        .to_vec();
    // The bare tool makes its container with the backend's runtime too.
    if let BackendConfig::Docker(c) = config
        && let Some(runtime) = &c.runtime
    {
        docker_run.extend(["--runtime".to_owned(), runtime.get_ref().clone()]);
    }
    docker_run.push(
        match config {
            BackendConfig::Docker(c) => c.image.as_ref().map(|i| i.get_ref().clone()),
            _ => None,
        }
        .unwrap_or_default(),
    );
    docker_run.push("true".into());
    let pid = std::process::id();
    // Warm-up: the first claim finds the pool empty, makes the session's container the slow
    // way and starts the filler.
    first_command(&warm_engine, &warm, &format!("bench-first-{pid}-w")).await?;
    bare_once(&docker_run, name).await?;
    let samples = b.pick(3, 6);
    let (mut warm_samples, mut cold, mut bare) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..samples {
        pool_ready(&warm).await?;
        warm_samples
            .push(first_command(&warm_engine, &warm, &format!("bench-first-{pid}-{i}")).await?);
        cold.push(first_command(&cold_engine, name, &format!("bench-cold-{pid}-{i}")).await?);
        bare.push(bare_once(&docker_run, name).await?);
    }
    // The pool goes with the bench: let the last filler finish, then remove what it made.
    let cleanup = pool_ready(&warm).await;
    let leftovers = warm_containers(&warm).await.unwrap_or_default();
    if !leftovers.is_empty() {
        let _ = tokio::process::Command::new("docker")
            .args(["rm", "-f"])
            .args(&leftovers)
            .stdin(std::process::Stdio::null())
            .output()
            .await;
    }
    cleanup?;
    let warm_method = format!(
        "Engine::call_tool_with(\"terminal\", {{\"command\": \"true\"}}) in a new session on \
         backend `{warm}` (`{name}`'s section with warm = {WARM}), after waiting for the pool to \
         hold {WARM} ready containers: host wall time from call to result (claiming a \
         container, linking its agent, the command)."
    );
    let cold_method = format!(
        "the same on backend `{name}` (no warm pool): creating and starting the container, \
         placing and starting the agent, the command."
    );
    let bare_method = format!(
        "`{}`: a new container running one command, host wall time from spawn to exit.",
        docker_run.join(" ")
    );
    r.push_measured(
        "paddock, warm = 2",
        Role::Paddock,
        None,
        warm_method,
        warm_samples,
    );
    r.push_measured("paddock, warm = 0", Role::Peer, None, cold_method, cold);
    r.push_measured("docker run --rm", Role::Peer, None, bare_method, bare);
    r.note(
        "Each sample is a new session, closed (not timed) after its first command; the three \
         contenders alternate sample by sample. The warm pool's containers are removed at the \
         end.",
    );
    Ok(r)
}

/// The runtime a docker backend's containers run with, as the report names it.
fn runtime_label(config: &BackendConfig) -> String {
    match config {
        BackendConfig::Docker(c) => c.runtime.as_ref().map_or_else(
            || "the daemon's default, runc".to_owned(),
            |r| r.get_ref().clone(),
        ),
        _ => String::new(),
    }
}

/// `backend_docker_runtimes`: `terminal true` per command through the agent, and the bare
/// `docker exec`, on each of `docker` (name, bare argv; the first is the reference: the one
/// without a `runtime`), every contender taking one sample in turn in one loop, so that the
/// runtimes are compared under the same load.
async fn runtimes_side_by_side(
    b: &Bench,
    policy: &Policy,
    docker: &[(String, Vec<String>)],
) -> Result<ScenarioReport> {
    let mut r = ScenarioReport::new(
        "backend_docker_runtimes",
        "`terminal` per command (`true`) on docker backends with different runtimes, side by side",
        "ms",
        Better::Lower,
    );
    let mut engines = Vec::new();
    for (name, argv) in docker {
        let engine = engine_on(b, policy, name)?;
        // Warm-up: the container (made again if the per-backend scenario closed it) and agent.
        for _ in 0..2 {
            terminal_true(&engine, name).await?;
            terminal_script_once(&engine, &b.limits, name).await?;
            bare_once(argv, name).await?;
        }
        engines.push(engine);
    }
    let samples = b.pick(5, 20);
    let mut agent: Vec<TerminalSamples> = docker.iter().map(|_| Default::default()).collect();
    let mut bare: Vec<Vec<f64>> = vec![Vec::new(); docker.len()];
    for _ in 0..samples {
        for (i, (name, argv)) in docker.iter().enumerate() {
            agent[i]
                .take(&engines[i], &b.limits, name, &format!("{name}: terminal"))
                .await?;
            bare[i].push(bare_once(argv, name).await?);
        }
    }
    for (i, ((name, argv), samples)) in docker.iter().zip(agent).enumerate() {
        let runtime = policy
            .backends
            .get(name)
            .map(runtime_label)
            .unwrap_or_default();
        let what = format!("backend `{name}` (docker, runtime {runtime}), through the agent");
        let label = format!("{name} ({runtime})");
        let (role, call_role) = if i == 0 {
            (Role::Paddock, Role::Variant)
        } else {
            (Role::Peer, Role::Peer)
        };
        r.push_measured(&label, role, None, script_method(&what), samples.script);
        r.push_measured(
            &format!("{label}, one call"),
            call_role,
            None,
            format!("Engine::call_tool(\"terminal\", {{\"command\": \"true\"}}) on backend `{name}`: host wall time from call to result."),
            samples.call,
        );
        r.push_measured(
            &format!("docker exec ({runtime})"),
            Role::Peer,
            None,
            format!("`{}`: host wall time from spawn to exit.", argv.join(" ")),
            std::mem::take(&mut bare[i]),
        );
    }
    r.note(
        "Every contender (each backend through the agent from one script, then one call, then \
         the bare `docker exec` into the same container) takes one sample in turn, backend after \
         backend, in one loop. The first backend (no `runtime`: runc) is the reference.",
    );
    Ok(r)
}

fn failed(name: &str, title: &str, error: String) -> ScenarioReport {
    let mut report = ScenarioReport::new(name, title, "ms", Better::Lower);
    report.error = Some(error);
    report
}

pub async fn backends(b: &Bench) -> Vec<ScenarioReport> {
    let started = Instant::now();
    let mut skipped = ScenarioReport::new(
        "backends",
        "`terminal` on docker/ssh/apptainer backends against the bare tool",
        "ms",
        Better::Lower,
    );
    let Some(path) = &b.backends else {
        skipped.skipped = Some(
            "no --backends POLICY given (scripts/test-services.sh prints one for local test \
             services)"
                .into(),
        );
        return vec![skipped];
    };
    let policy = match Policy::load(path) {
        Ok(policy) => with_exec_copies(&policy),
        Err(err) => {
            skipped.error = Some(err.to_string());
            skipped.wall_s = started.elapsed().as_secs_f64();
            return vec![skipped];
        }
    };
    let mut out = Vec::new();
    let mut closer = None;
    // The docker backends (name, bare argv), the one without a `runtime` first.
    let mut docker: Vec<(String, Vec<String>)> = Vec::new();
    for (name, config) in &policy.backends {
        if name.ends_with("-noagent") {
            continue;
        }
        let Some(argv) = bare_argv(name, config) else {
            continue;
        };
        let t = Instant::now();
        let agent = match engine_on(b, &policy, name) {
            Ok(engine) => engine,
            Err(err) => {
                out.push(failed(
                    &format!("backend_{name}"),
                    &format!("`terminal` on backend `{name}`"),
                    err.to_string(),
                ));
                continue;
            }
        };
        let mut reports = match one_backend(b, &policy, &agent, name, &argv).await {
            Ok(reports) => reports,
            Err(err) => vec![failed(
                &format!("backend_{name}"),
                &format!("`terminal` on backend `{name}`"),
                err.to_string(),
            )],
        };
        for report in &mut reports {
            report.wall_s = t.elapsed().as_secs_f64();
        }
        out.extend(reports);
        if let BackendConfig::Docker(c) = config {
            if c.runtime.is_some() {
                docker.push((name.clone(), argv.clone()));
            } else {
                docker.insert(0, (name.clone(), argv.clone()));
            }
            let t = Instant::now();
            let title = format!("`paddock call terminal` on backend `{name}`");
            let mut report = paddock_call(b, path, name, &argv)
                .await
                .unwrap_or_else(|err| {
                    failed(&format!("backend_{name}_call"), &title, err.to_string())
                });
            report.wall_s = t.elapsed().as_secs_f64();
            out.push(report);
            let t = Instant::now();
            let title = format!("first command of a new session on backend `{name}`, warm");
            let mut report = first_of_session(b, path, name, config)
                .await
                .unwrap_or_else(|err| {
                    failed(&format!("backend_{name}_first"), &title, err.to_string())
                });
            report.wall_s = t.elapsed().as_secs_f64();
            out.push(report);
        }
        closer = Some(agent);
    }
    let runtimes: std::collections::BTreeSet<String> = docker
        .iter()
        .filter_map(|(name, _)| policy.backends.get(name).map(runtime_label))
        .collect();
    if runtimes.len() > 1 {
        let t = Instant::now();
        let mut report = runtimes_side_by_side(b, &policy, &docker)
            .await
            .unwrap_or_else(|err| {
                failed(
                    "backend_docker_runtimes",
                    "`terminal` on docker backends with different runtimes",
                    err.to_string(),
                )
            });
        report.wall_s = t.elapsed().as_secs_f64();
        out.push(report);
    }
    if out.is_empty() {
        skipped.skipped = Some(format!(
            "{} has no docker, ssh or apptainer backend",
            path.display()
        ));
        return vec![skipped];
    }
    // The bench's session ends with it: containers, instances, agents, remote state.
    if let Some(engine) = closer {
        match engine.close_session(SESSION).await {
            Ok(report) if report.all_ok() => {}
            Ok(report) => tracing::warn!(?report, "bench: closing the backends' session"),
            Err(err) => tracing::warn!(%err, "bench: closing the backends' session"),
        }
    }
    out
}
