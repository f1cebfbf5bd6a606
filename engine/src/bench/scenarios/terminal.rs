//! The environment tools on the local backend: `terminal` per-command overhead against a bare
//! `bash -c` and Hermes Agent's terminal, a burst of concurrent commands, and `python_execute`
//! against a bare `python3`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};

use super::{PeerPlan, interleaved, push_peers};
use crate::bench::report::{Better, Outcome, Role, ScenarioReport};
use crate::bench::{Bench, BenchError, Result, bench_engine, ms};
use crate::engine::Engine;
use crate::policy::Policy;

/// `terminal` through the registry; fails unless the command exited 0.
async fn terminal_once(engine: &Engine, command: &str) -> Result<f64> {
    let t = Instant::now();
    let out = engine
        .call_tool("terminal", json!({"command": command}))
        .await
        .map_err(BenchError::tool("terminal"))?;
    let elapsed = ms(t.elapsed());
    if out["exit_code"] != json!(0) {
        return Err(BenchError::unexpected("terminal", &out));
    }
    Ok(elapsed)
}

/// A bare process, output captured through pipes as a tool would; fails unless it exited 0.
async fn bare_once(program: &str, args: &[&str], cwd: Option<&Path>) -> Result<f64> {
    let t = Instant::now();
    let mut command = tokio::process::Command::new(program);
    command.args(args).stdin(Stdio::null());
    if let Some(dir) = cwd {
        command.current_dir(dir);
    }
    let out = command
        .output()
        .await
        .map_err(BenchError::io(format!("{program} {}", args.join(" "))))?;
    let elapsed = ms(t.elapsed());
    if !out.status.success() {
        return Err(BenchError::unexpected(
            program,
            &json!({"status": out.status.code(), "stderr": String::from_utf8_lossy(&out.stderr)}),
        ));
    }
    Ok(elapsed)
}

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Result<Self> {
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

/// An engine whose local backend runs commands in the workspace-write sandbox.
fn sandboxed_engine(b: &Bench, scratch: &Scratch) -> Result<Engine> {
    let workspace = scratch.0.join("workspace");
    std::fs::create_dir_all(&workspace)
        .map_err(BenchError::io(format!("creating {}", workspace.display())))?;
    let policy_path = scratch.0.join("policy.toml");
    std::fs::write(
        &policy_path,
        format!(
            "[backends.local]\nkind = \"local\"\nsandbox = \"workspace-write\"\nworkspace = {}\n",
            Value::String(workspace.display().to_string())
        ),
    )
    .map_err(BenchError::io(format!("writing {}", policy_path.display())))?;
    bench_engine(b.exe.clone(), Policy::load(&policy_path)?)
}

pub async fn terminal(b: &Bench) -> Result<ScenarioReport> {
    let mut r = ScenarioReport::new(
        "terminal",
        "`terminal` per-command latency (`true`), local backend",
        "ms",
        Better::Lower,
    );
    let scratch = Scratch::new("terminal")?;
    let sandboxed = sandboxed_engine(b, &scratch)?;
    for _ in 0..3 {
        terminal_once(&b.engine, "true").await?;
        terminal_once(&sandboxed, "true").await?;
        bare_once("bash", &["-c", "true"], None).await?;
    }
    let rounds = b.pick(1, 3);
    let per_round = b.pick(30, 50);
    let plans = [PeerPlan::new("hermes", "hermes", "terminal", per_round, 3)];
    let (mut bare, mut confined) = (Vec::new(), Vec::new());
    let (samples, peers) = interleaved(
        b,
        rounds,
        async || {
            let mut out = Vec::with_capacity(per_round);
            for _ in 0..per_round {
                bare.push(bare_once("bash", &["-c", "true"], None).await?);
                out.push(terminal_once(&b.engine, "true").await?);
                confined.push(terminal_once(&sandboxed, "true").await?);
            }
            Ok(out)
        },
        &plans,
    )
    .await?;
    r.push(
        "paddock",
        Role::Paddock,
        None,
        Outcome::measured(
            "Engine::call_tool(\"terminal\", {\"command\": \"true\"}) on the local backend, \
             unconfined (the built-in policy): host wall time from call to result. Each \
             command is a fresh bash that restores and saves the session's state (cwd, env, \
             functions).",
            None,
            samples,
        ),
    );
    r.push(
        "paddock workspace-write sandbox",
        Role::Variant,
        None,
        Outcome::measured(
            "the same call on a local backend with sandbox = \"workspace-write\" (namespaces, \
             mounts, Landlock, seccomp per command).",
            None,
            confined,
        ),
    );
    r.push(
        "bash -c (bare)",
        Role::Peer,
        None,
        Outcome::measured(
            "a bare `bash -c true` spawned from this process with tokio, stdout and stderr \
             captured through pipes: host wall time from spawn to exit. The floor any \
             spawn-per-command terminal pays.",
            None,
            bare,
        ),
    );
    push_peers(&mut r, &plans, peers, None);
    r.note(format!(
        "Bare bash, Paddock and Paddock sandboxed alternate sample by sample; Hermes runs in \
         {rounds} round(s) of {per_round} between them."
    ));
    Ok(r)
}

pub async fn burst(b: &Bench) -> Result<ScenarioReport> {
    const COMMANDS: usize = 100;
    let mut r = ScenarioReport::new(
        "terminal_burst",
        "100 concurrent `terminal` commands (`echo i`): wall time",
        "ms",
        Better::Lower,
    );
    let samples_n = b.pick(2, 5);
    let (mut paddock, mut bare) = (Vec::new(), Vec::new());
    for _ in 0..samples_n {
        let t = Instant::now();
        let tasks: Vec<_> = (0..COMMANDS)
            .map(|i| {
                let engine = Arc::clone(&b.engine);
                tokio::spawn(async move { terminal_once(&engine, &format!("echo {i}")).await })
            })
            .collect();
        for task in tasks {
            task.await.map_err(|e| BenchError::Unexpected {
                what: "terminal burst task".into(),
                result: e.to_string(),
            })??;
        }
        paddock.push(ms(t.elapsed()));

        let t = Instant::now();
        let tasks: Vec<_> = (0..COMMANDS)
            .map(|i| {
                tokio::spawn(
                    async move { bare_once("bash", &["-c", &format!("echo {i}")], None).await },
                )
            })
            .collect();
        for task in tasks {
            task.await.map_err(|e| BenchError::Unexpected {
                what: "bash burst task".into(),
                result: e.to_string(),
            })??;
        }
        bare.push(ms(t.elapsed()));
    }
    r.push(
        "paddock",
        Role::Paddock,
        None,
        Outcome::measured(
            format!(
                "{COMMANDS} `terminal` calls started at once from {COMMANDS} tasks in this \
                 process, all in one session; sample = wall time until the last result (every \
                 command must exit 0)."
            ),
            None,
            paddock,
        ),
    );
    r.push(
        "bash -c (bare)",
        Role::Peer,
        None,
        Outcome::measured(
            format!("{COMMANDS} bare `bash -c 'echo i'` spawned at once from this process."),
            None,
            bare,
        ),
    );
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
    let mut r = ScenarioReport::new(
        "python_execute",
        "`python_execute` latency (`print(1)`), local backend",
        "ms",
        Better::Lower,
    );
    let scratch = Scratch::new("python")?;
    std::fs::write(scratch.0.join("main.py"), "print(1)\n")
        .map_err(BenchError::io("writing main.py"))?;
    let run = async || -> Result<f64> {
        let t = Instant::now();
        let out = b
            .engine
            .call_tool("python_execute", json!({"code": "print(1)\n"}))
            .await
            .map_err(BenchError::tool("python_execute"))?;
        let elapsed = ms(t.elapsed());
        if out["exit_code"] != json!(0) || !out["output"].as_str().unwrap_or("").contains('1') {
            return Err(BenchError::unexpected("python_execute", &out));
        }
        Ok(elapsed)
    };
    for _ in 0..3 {
        run().await?;
        bare_once("python3", &["-u", "main.py"], Some(&scratch.0)).await?;
    }
    let n = b.pick(15, 60);
    let (mut paddock, mut bare) = (Vec::new(), Vec::new());
    for _ in 0..n {
        bare.push(bare_once("python3", &["-u", "main.py"], Some(&scratch.0)).await?);
        paddock.push(run().await?);
    }
    r.push(
        "paddock",
        Role::Paddock,
        None,
        Outcome::measured(
            "Engine::call_tool(\"python_execute\", {\"code\": \"print(1)\"}) on the local \
             backend: writes main.py into a fresh working directory, runs `python3 -u main.py` \
             through the terminal machinery, collects artifacts; host wall time.",
            None,
            paddock,
        ),
    );
    r.push(
        "python3 (bare)",
        Role::Peer,
        None,
        Outcome::measured(
            "a bare `python3 -u main.py` (the same interpreter from PATH) spawned from this \
             process, output through pipes: host wall time from spawn to exit.",
            None,
            bare,
        ),
    );
    let python =
        on_path("python3").map_or_else(|| "not found".to_owned(), |p| p.display().to_string());
    r.note(format!(
        "Paddock and the bare python3 alternate sample by sample. `python3` on this PATH is \
         {python}; both contenders start the interpreter through it (a pyenv shim, for \
         one, costs a bash and `pyenv exec` per start, and varies a lot)."
    ));
    Ok(r)
}
