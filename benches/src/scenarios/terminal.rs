//! The environment tools on the local backend: `terminal` per-command overhead (from one script
//! and per call; unconfined, and in the workspace-write sandbox with and without the agent)
//! against a bare `bash -c` and Hermes Agent's terminal, a burst of concurrent commands, and
//! `python_execute` against a bare `python3`. "Unconfined" is a policy that says
//! `sandbox = "none"`: the built-in policy's local backend is sandboxed.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use paddock_engine::engine::{Engine, EngineOptions};
use paddock_engine::policy::Policy;
use paddock_engine::registry::Registry;
use serde_json::{Value, json};

use super::measure::{
    PeerPlan, TerminalSamples, all_at_once, alternate, bare_process, interleaved, push_peers,
    script_method, terminal_once, terminal_script_once, timed,
};
use crate::error::{BenchError, Result};
use crate::harness::Bench;
use crate::report::{Better, Outcome, Role, ScenarioReport};

/// A bare process, output captured through pipes as a tool would; fails unless it exited 0.
async fn bare_once(program: &str, args: &[&str], cwd: Option<&Path>) -> Result<f64> {
    let mut command = tokio::process::Command::new(program);
    command.args(args);
    if let Some(dir) = cwd {
        command.current_dir(dir);
    }
    bare_process(
        command,
        format!("{program} {}", args.join(" ")),
        program.into(),
    )
    .await
}

/// A scratch directory removed on drop.
pub(super) struct Scratch(pub(super) PathBuf);

impl Scratch {
    pub(super) fn new(name: &str) -> Result<Self> {
        let dir = std::env::temp_dir().join(format!("paddock-bench-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .map_err(BenchError::io(format!("creating {}", dir.display())))?;
        Ok(Self(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The keys of the built-in default's local backend besides its sandbox and workspace
/// (`LocalSection::implicit`, policies/default.toml): what a newcomer's commands pay for.
const DEFAULT_LOCAL_KEYS: &str = "network = \"none\"\nmax_processes = 1024\n";

/// An engine on its own session whose local backend runs commands in the workspace-write
/// sandbox, through the in-environment agent (`agent`) or one sandbox helper per command,
/// with the built-in default's other keys (`as_default`: its process ceiling, a pids cgroup
/// per session; no network) or without them.
fn sandboxed_engine(
    b: &Bench,
    scratch: &Scratch,
    session: &str,
    agent: bool,
    as_default: bool,
) -> Result<Engine> {
    let workspace = scratch.0.join(format!("workspace-{session}"));
    std::fs::create_dir_all(&workspace)
        .map_err(BenchError::io(format!("creating {}", workspace.display())))?;
    let policy_path = scratch.0.join(format!("policy-{session}.toml"));
    std::fs::write(
        &policy_path,
        format!(
            "[backends.local]\nkind = \"local\"\n\
             sandbox = \"workspace-write\"\nworkspace = {}\nagent = {agent}\n{}",
            Value::String(workspace.display().to_string()),
            if as_default { DEFAULT_LOCAL_KEYS } else { "" }
        ),
    )
    .map_err(BenchError::io(format!("writing {}", policy_path.display())))?;
    session_engine(b, Policy::load(&policy_path)?, session)
}

/// The policy of the unconfined contenders: the local backend with `sandbox = "none"`.
const UNCONFINED_POLICY: &str = "[backends.local]\nkind = \"local\"\nsandbox = \"none\"\n";

/// An engine on its own session whose local backend runs commands unconfined
/// ([`UNCONFINED_POLICY`]), as Hermes Agent's local terminal does.
fn unconfined_engine(b: &Bench, session: &str) -> Result<Engine> {
    let policy = Policy::parse(UNCONFINED_POLICY, "<bench: sandbox = \"none\">")?;
    session_engine(b, policy, session)
}

/// An engine over `policy` on session `session` (the bench's own engine has session `bench`).
fn session_engine(b: &Bench, policy: Policy, session: &str) -> Result<Engine> {
    Ok(Engine::with_options(
        policy,
        Registry::with_builtins(),
        Arc::default(),
        EngineOptions {
            session: Some(session.into()),
            backend: None,
            exe: Some(b.exe.clone()),
        },
    )?)
}

/// Ends the sessions this scenario made (their agents, their state), whatever happened.
async fn close_sessions(engines: &[(&Engine, &str)]) {
    for (engine, session) in engines {
        if let Err(err) = engine.close_session(session).await {
            tracing::warn!(%session, %err, "bench: closing a session");
        }
    }
}

/// The local `terminal` reports: `terminal` (unconfined: `sandbox = "none"`),
/// `terminal_sandboxed` (workspace-write, agent) and `terminal_sandboxed_no_agent`
/// (workspace-write, one sandbox helper per command), each against a bare `bash -c true`;
/// Hermes beside the first.
pub async fn terminal(b: &Bench) -> Result<Vec<ScenarioReport>> {
    let scratch = Scratch::new("terminal")?;
    let unconfined = unconfined_engine(b, "bench-unconfined")?;
    let sandboxed = sandboxed_engine(b, &scratch, "bench-sandboxed", true, true)?;
    let without_ceiling = sandboxed_engine(b, &scratch, "bench-sandboxed-bare", true, false)?;
    let per_command = sandboxed_engine(b, &scratch, "bench-sandboxed-exec", false, true)?;
    let result = terminal_measure(b, &unconfined, &sandboxed, &without_ceiling, &per_command).await;
    close_sessions(&[
        (&unconfined, "bench-unconfined"),
        (&sandboxed, "bench-sandboxed"),
        (&without_ceiling, "bench-sandboxed-bare"),
        (&per_command, "bench-sandboxed-exec"),
    ])
    .await;
    result
}

async fn terminal_measure(
    b: &Bench,
    unconfined: &Engine,
    sandboxed: &Engine,
    without_ceiling: &Engine,
    per_command: &Engine,
) -> Result<Vec<ScenarioReport>> {
    let limits = &b.limits;
    for _ in 0..2 {
        for engine in [unconfined, sandboxed, without_ceiling, per_command] {
            terminal_once(engine, "true", "terminal").await?;
            terminal_script_once(engine, limits, "warm-up").await?;
        }
        bare_once("bash", &["-c", "true"], None).await?;
    }
    let rounds = b.pick(1, 3);
    let per_round = b.pick(10, 25);
    let plans = [PeerPlan::new("hermes", "hermes", "terminal", per_round, 3)];
    let mut bare = Vec::new();
    let mut no_ceiling = Vec::new();
    let (mut open, mut confined, mut exec) = (
        TerminalSamples::default(),
        TerminalSamples::default(),
        TerminalSamples::default(),
    );
    let (script, peers) = interleaved(
        b,
        rounds,
        async || {
            let mut out = Vec::with_capacity(per_round);
            for _ in 0..per_round {
                bare.push(bare_once("bash", &["-c", "true"], None).await?);
                out.push(terminal_script_once(unconfined, limits, "local unconfined").await?);
                open.call
                    .push(terminal_once(unconfined, "true", "terminal").await?);
                confined
                    .take(sandboxed, limits, "local workspace-write", "terminal")
                    .await?;
                no_ceiling.push(
                    terminal_script_once(
                        without_ceiling,
                        limits,
                        "local workspace-write, no ceiling",
                    )
                    .await?,
                );
                exec.take(
                    per_command,
                    limits,
                    "local workspace-write, agent = false",
                    "terminal",
                )
                .await?;
            }
            Ok(out)
        },
        &plans,
    )
    .await?;
    open.script = script;

    let bare_outcome = || {
        Outcome::measured(
            "a bare `bash -c true` spawned from this process with tokio, stdout and stderr \
             captured through pipes: host wall time from spawn to exit. The floor any \
             spawn-per-command terminal pays.",
            None,
            bare.clone(),
        )
    };
    let interleaving = format!(
        "Bare bash and the three Paddock configurations (each from one script, then one \
         call) alternate sample by sample; Hermes runs in {rounds} round(s) of {per_round} \
         between them. The reports `terminal`, `terminal_sandboxed` and \
         `terminal_sandboxed_no_agent` come from this one loop and share its bare-bash \
         samples (and its wall time)."
    );

    // Each report: its configuration's rows, then bare bash.
    let local_report = |name: &str, title: &str, main: TerminalSamples, what: &str| {
        let mut r = ScenarioReport::new(name, title, "ms", Better::Lower);
        main.push_rows(&mut r, what);
        r.push("bash -c (bare)", Role::Peer, None, bare_outcome());
        r
    };
    let mut r = local_report(
        "terminal",
        "`terminal` per command (`true`), local backend, unconfined (`sandbox = \"none\"`)",
        open,
        "local backend, unconfined: a policy with `sandbox = \"none\"`; the built-in policy's \
         is sandboxed",
    );
    push_peers(&mut r, &plans, peers, None);
    r.note(interleaving.clone());

    let exec_script = exec.script.clone();
    let mut s = local_report(
        "terminal_sandboxed",
        "`terminal` per command (`true`), local backend, workspace-write sandbox, agent",
        confined,
        "local backend as the built-in default has it (sandbox = \"workspace-write\", \
         network = \"none\", max_processes = 1024: a pids cgroup per session), over a scratch \
         workspace: commands go to the session's confined agent",
    );
    s.push_measured(
        "paddock, no process ceiling",
        Role::Variant,
        None,
        script_method(
            "the same sandbox without the built-in default's `max_processes` and `network` \
             keys (no pids cgroup): what this report measured before it followed the default",
        ),
        no_ceiling,
    );
    let exec_method = script_method(
        "the same sandbox with agent = false: one sandbox helper (namespaces, mounts, Landlock, \
         seccomp) per command",
    );
    s.push_measured(
        "paddock, agent = false",
        Role::Peer,
        None,
        exec_method,
        exec_script,
    );
    s.note(interleaving.clone());
    let mut e = local_report(
        "terminal_sandboxed_no_agent",
        "`terminal` per command (`true`), local backend, workspace-write sandbox, agent = false",
        exec,
        "local backend with sandbox = \"workspace-write\" and agent = false: one sandbox \
         helper (namespaces, mounts, Landlock, seccomp) per command",
    );
    e.note(interleaving);
    Ok(vec![r, s, e])
}

pub async fn burst(b: &Bench) -> Result<ScenarioReport> {
    let engine = Arc::new(unconfined_engine(b, "bench-burst")?);
    let result = burst_measure(b, &engine).await;
    close_sessions(&[(&engine, "bench-burst")]).await;
    result
}

async fn burst_measure(b: &Bench, engine: &Arc<Engine>) -> Result<ScenarioReport> {
    const COMMANDS: usize = 100;
    let mut r = ScenarioReport::new(
        "terminal_burst",
        "100 concurrent `terminal` commands (`echo i`), local backend, unconfined \
         (`sandbox = \"none\"`): wall time",
        "ms",
        Better::Lower,
    );
    let samples_n = b.pick(2, 5);
    let (mut paddock, mut bare) = (Vec::new(), Vec::new());
    for _ in 0..samples_n {
        paddock.push(
            all_at_once(COMMANDS, "terminal burst task", |i| {
                let engine = Arc::clone(engine);
                async move { terminal_once(&engine, &format!("echo {i}"), "terminal").await }
            })
            .await?,
        );
        bare.push(
            all_at_once(COMMANDS, "bash burst task", |i| async move {
                bare_once("bash", &["-c", &format!("echo {i}")], None).await
            })
            .await?,
        );
    }
    let paddock_method = format!(
        "{COMMANDS} `terminal` calls started at once from {COMMANDS} tasks in this process, all \
         in one session of a local backend with `sandbox = \"none\"`; sample = wall time until \
         the last result (every command must exit 0)."
    );
    let bare_method =
        format!("{COMMANDS} bare `bash -c 'echo i'` spawned at once from this process.");
    r.push_measured("paddock", Role::Paddock, None, paddock_method, paddock);
    r.push_measured("bash -c (bare)", Role::Peer, None, bare_method, bare);
    r.note("Paddock's burst and the bare one alternate.");
    Ok(r)
}

/// Where `program` resolves on PATH, as a spawn would find it.
fn on_path(program: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|path| path.is_file())
}

pub async fn python_execute(b: &Bench) -> Result<ScenarioReport> {
    let engine = unconfined_engine(b, "bench-python")?;
    let result = python_execute_measure(b, &engine).await;
    close_sessions(&[(&engine, "bench-python")]).await;
    result
}

async fn python_execute_measure(b: &Bench, engine: &Engine) -> Result<ScenarioReport> {
    let mut r = ScenarioReport::new(
        "python_execute",
        "`python_execute` latency (`print(1)`), local backend, unconfined (`sandbox = \"none\"`)",
        "ms",
        Better::Lower,
    );
    let scratch = Scratch::new("python")?;
    std::fs::write(scratch.0.join("main.py"), "print(1)\n")
        .map_err(BenchError::io("writing main.py"))?;
    let run = async || -> Result<f64> {
        let (elapsed, out) = timed(async {
            engine
                .call_tool("python_execute", json!({"code": "print(1)\n"}))
                .await
                .map_err(BenchError::tool("python_execute"))
        })
        .await?;
        if out["exit_code"] != json!(0) || !out["output"].as_str().unwrap_or("").contains('1') {
            return Err(BenchError::unexpected("python_execute", &out));
        }
        Ok(elapsed)
    };
    let bare = async || bare_once("python3", &["-u", "main.py"], Some(&scratch.0)).await;
    let (paddock, bare) = alternate(3, b.pick(15, 60), run, bare).await?;
    let paddock_method = "Engine::call_tool(\"python_execute\", {\"code\": \"print(1)\"}) on the \
                          local backend with `sandbox = \"none\"`: writes main.py into a fresh \
                          working directory, runs `python3 -u main.py` through the terminal \
                          machinery, collects artifacts; host wall time.";
    let bare_method = "a bare `python3 -u main.py` (the same interpreter from PATH) spawned from \
                       this process, output through pipes: host wall time from spawn to exit.";
    r.push_measured("paddock", Role::Paddock, None, paddock_method, paddock);
    r.push_measured("python3 (bare)", Role::Peer, None, bare_method, bare);
    let python =
        on_path("python3").map_or_else(|| "not found".to_owned(), |p| p.display().to_string());
    r.note(format!(
        "Paddock and the bare python3 alternate sample by sample. `python3` on this PATH is \
         {python}; both contenders start the interpreter through it (a pyenv shim, for \
         one, costs a bash and `pyenv exec` per start, and varies a lot)."
    ));
    Ok(r)
}
