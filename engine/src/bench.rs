//! `paddock bench`: throughput figures of the sandbox pool, measured inside one process (no
//! CLI start-up), plus the CPython loop ratio measured side by side in the same run.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::codemode::Limits;
use crate::engine::Engine;
use crate::engine::EngineOptions;
use crate::policy::Policy;
use crate::registry::{CallContext, Registry, Tool, ToolFuture, ToolSpec};

/// A tool that does nothing: measures the call path itself.
pub struct Noop;

impl Tool for Noop {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "noop",
            "bench",
            "Does nothing; returns an empty object.",
            json!({"type": "object", "properties": {}}),
        )
    }

    fn call(&self, _args: Value, _ctx: CallContext) -> ToolFuture {
        Box::pin(async { Ok(json!({})) })
    }
}

const LOOP: &str = "s = 0\nfor i in range(10**6):\n    s += i\n";

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn script(engine: &Engine, code: &str, limits: &Limits) -> Result<Value, String> {
    let result = engine
        .run_script(code, limits)
        .await
        .map_err(|e| e.to_string())?;
    if result["ok"] != json!(true) {
        return Err(format!("bench script failed: {result}"));
    }
    Ok(result["result"].clone())
}

/// Private (not shared) memory of a process in kB, from smaps_rollup.
pub fn private_kb(pid: i32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let field = |name: &str| -> u64 {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Some(field("Private_Clean:") + field("Private_Dirty:"))
}

/// Runs every measurement and returns the figures. `exe` is the `paddock` binary the sandbox
/// zygote is started from.
pub async fn run(
    exe: std::path::PathBuf,
    iterations: usize,
    seconds: f64,
) -> Result<Value, String> {
    let mut registry = Registry::with_builtins();
    registry
        .register(Arc::new(Noop))
        .map_err(|e| e.to_string())?;
    let mut policy = Policy::builtin();
    policy.codemode.prefork = toml::Spanned::new(0..0, 4);
    let options = EngineOptions {
        session: Some("bench".into()),
        backend: None,
        exe: Some(exe.clone()),
    };
    let engine = Arc::new(
        Engine::with_options(policy, registry, Arc::default(), options)
            .map_err(|e| e.to_string())?,
    );
    let limits = Limits {
        max_tool_calls: 1000,
        timeout: Duration::from_secs(120),
        ..Limits::default()
    };
    engine.pool().warm_up().await.map_err(|e| e.to_string())?;
    for _ in 0..20 {
        script(&engine, "1", &limits).await?;
    }

    // Trivial script latency through the warm pool, one at a time.
    let mut latencies = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let t = Instant::now();
        script(&engine, "1", &limits).await?;
        latencies.push(ms(t.elapsed()));
        // Let the pool refill between samples: this measures the warm path.
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    latencies.sort_by(f64::total_cmp);

    // Nested call round trip, measured inside the script.
    let per_call_us = script(
        &engine,
        "import time\nfor _ in range(20):\n    await tools.noop()\nt = time.perf_counter()\n\
         for _ in range(500):\n    await tools.noop()\n(time.perf_counter() - t) / 500 * 1e6",
        &limits,
    )
    .await?;
    let gather = |n: usize| {
        format!(
            "import time, asyncio\nawait asyncio.gather(*[tools.noop() for _ in range(10)])\n\
             t = time.perf_counter()\nawait asyncio.gather(*[tools.noop() for _ in range({n})])\n\
             (time.perf_counter() - t) * 1000"
        )
    };
    let gather_50_ms = script(&engine, &gather(50), &limits).await?;
    let gather_500_ms = script(&engine, &gather(500), &limits).await?;

    // Throughput at several concurrency levels.
    let mut throughput = serde_json::Map::new();
    for concurrency in [1usize, 2, 8] {
        let until = Instant::now() + Duration::from_secs_f64(seconds);
        let started = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..concurrency {
            let engine = engine.clone();
            let limits = limits.clone();
            tasks.push(tokio::spawn(async move {
                let mut done = 0u64;
                while Instant::now() < until {
                    if script(&engine, "1", &limits).await.is_ok() {
                        done += 1;
                    }
                }
                done
            }));
        }
        let mut total = 0;
        for t in tasks {
            total += t.await.unwrap_or(0);
        }
        throughput.insert(
            format!("concurrency_{concurrency}"),
            json!(total as f64 / started.elapsed().as_secs_f64()),
        );
    }

    // Memory of idle pre-forked children.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let idle: Vec<u64> = engine
        .pool()
        .idle_pids()
        .into_iter()
        .filter_map(private_kb)
        .collect();
    let zygote_kb = match engine.pool().zygote_pid().await {
        Some(pid) => i32::try_from(pid).ok().and_then(private_kb),
        None => None,
    };

    // terminal through the registry against a bare `bash -c true`, interleaved.
    let mut bare = Vec::new();
    let mut terminal = Vec::new();
    for _ in 0..60 {
        let t = Instant::now();
        let _ = tokio::process::Command::new("bash")
            .args(["-c", "true"])
            .status()
            .await;
        bare.push(ms(t.elapsed()));
        let t = Instant::now();
        let out = engine
            .call_tool("terminal", json!({"command": "true"}))
            .await
            .map_err(|e| e.to_string())?;
        if out["exit_code"] != json!(0) {
            return Err(format!("terminal bench command failed: {out}"));
        }
        terminal.push(ms(t.elapsed()));
    }
    // The same command in the workspace-write sandbox, interleaved with the unconfined one.
    let sandbox_dir = std::env::temp_dir().join(format!("paddock-bench-{}", std::process::id()));
    let workspace = sandbox_dir.join("workspace");
    std::fs::create_dir_all(&workspace).map_err(|e| e.to_string())?;
    let policy_path = sandbox_dir.join("policy.toml");
    std::fs::write(
        &policy_path,
        format!(
            "[backends.local]\nkind = \"local\"\nsandbox = \"workspace-write\"\nworkspace = \"{}\"\n",
            workspace.display()
        ),
    )
    .map_err(|e| e.to_string())?;
    let sandboxed_engine = Engine::with_options(
        Policy::load(&policy_path).map_err(|e| e.to_string())?,
        Registry::with_builtins(),
        Arc::default(),
        EngineOptions {
            session: Some("bench".into()),
            backend: None,
            exe: Some(exe.clone()),
        },
    )
    .map_err(|e| e.to_string())?;
    let (mut unconfined, mut sandboxed) = (Vec::new(), Vec::new());
    for _ in 0..40 {
        let t = Instant::now();
        engine
            .call_tool("terminal", json!({"command": "true"}))
            .await
            .map_err(|e| e.to_string())?;
        unconfined.push(ms(t.elapsed()));
        let t = Instant::now();
        let out = sandboxed_engine
            .call_tool("terminal", json!({"command": "true"}))
            .await
            .map_err(|e| e.to_string())?;
        if out["exit_code"] != json!(0) {
            return Err(format!("sandboxed terminal failed: {out}"));
        }
        sandboxed.push(ms(t.elapsed()));
    }
    let _ = std::fs::remove_dir_all(&sandbox_dir);
    unconfined.sort_by(f64::total_cmp);
    sandboxed.sort_by(f64::total_cmp);
    let (unconfined_p50, sandboxed_p50) =
        (percentile(&unconfined, 0.5), percentile(&sandboxed, 0.5));
    bare.sort_by(f64::total_cmp);
    terminal.sort_by(f64::total_cmp);
    let (bare_p50, terminal_p50) = (percentile(&bare, 0.5), percentile(&terminal, 0.5));
    let burst_started = Instant::now();
    let burst: Vec<_> = (0..100)
        .map(|i| {
            let engine = engine.clone();
            tokio::spawn(async move {
                engine
                    .call_tool("terminal", json!({"command": format!("echo {i}")}))
                    .await
            })
        })
        .collect();
    let mut burst_ok = 0;
    for task in burst {
        if let Ok(Ok(v)) = task.await
            && v["exit_code"] == json!(0)
        {
            burst_ok += 1;
        }
    }
    let burst_ms = ms(burst_started.elapsed());

    // The same loop in the sandbox and in CPython, back to back.
    let timed_loop =
        format!("import time\nt = time.perf_counter()\n{LOOP}(time.perf_counter() - t) * 1000");
    let sandbox_loop_ms = script(&engine, &timed_loop, &limits).await?;
    let cpython_loop_ms = std::process::Command::new("python3")
        .args(["-c", &format!("import time\nt = time.perf_counter()\n{LOOP}print((time.perf_counter() - t) * 1000)")])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok());
    let ratio = match (sandbox_loop_ms.as_f64(), cpython_loop_ms) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    };

    Ok(json!({
        "trivial_script_ms": {"p50": percentile(&latencies, 0.5), "p99": percentile(&latencies, 0.99), "samples": latencies.len()},
        "nested_call_round_trip_us": per_call_us,
        "gather_50_noop_ms": gather_50_ms,
        "gather_500_noop_ms": gather_500_ms,
        "scripts_per_second": throughput,
        "idle_child_private_kb": idle,
        "zygote_private_kb": zygote_kb,
        "loop_1e6_ms": {"sandbox": sandbox_loop_ms, "cpython": cpython_loop_ms, "ratio": ratio},
        "terminal_ms": {"bare_bash_p50": bare_p50, "terminal_p50": terminal_p50,
                        "overhead_ratio": terminal_p50 / bare_p50,
                        "burst_100_concurrent": {"ok": burst_ok, "wall_ms": burst_ms}},
        "terminal_workspace_write_ms": {"unconfined_p50": unconfined_p50, "sandboxed_p50": sandboxed_p50,
                                        "added_ms": sandboxed_p50 - unconfined_p50},
    }))
}

/// `paddock bench`.
pub async fn run_cli(
    iterations: usize,
    seconds: f64,
    json_only: bool,
    backends: Option<std::path::PathBuf>,
) -> ExitCode {
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(err) => {
            let _ = writeln!(
                std::io::stderr(),
                "paddock bench: cannot find this binary: {err}"
            );
            return ExitCode::from(2);
        }
    };
    let figures = match backends {
        Some(policy) => backend_latency(exe, &policy, iterations.clamp(10, 200)).await,
        None => run(exe, iterations.max(10), seconds.clamp(0.2, 60.0)).await,
    };
    match figures {
        Ok(figures) => {
            let mut out = std::io::stdout().lock();
            if json_only {
                let _ = writeln!(out, "{figures}");
            } else {
                let _ = writeln!(
                    out,
                    "{}",
                    serde_json::to_string_pretty(&figures).unwrap_or_default()
                );
            }
            ExitCode::SUCCESS
        }
        Err(err) => {
            let _ = writeln!(std::io::stderr(), "paddock bench: {err}");
            ExitCode::from(1)
        }
    }
}

/// Per-command latency of `terminal true` on each backend of `policy_path`, beside the bare
/// tool (`docker exec`, `ssh` over a ControlMaster, `apptainer exec instance://`), interleaved in
/// one run so both see the same machine load.
pub async fn backend_latency(
    exe: std::path::PathBuf,
    policy_path: &std::path::Path,
    samples: usize,
) -> Result<Value, String> {
    let policy = Policy::load(policy_path).map_err(|e| e.to_string())?;
    let mut figures = serde_json::Map::new();
    for (name, config) in &policy.backends {
        let kind = config.kind.get_ref().as_str();
        let session = "bench";
        let bare: Vec<String> = match kind {
            "docker" => vec![
                "docker".into(),
                "exec".into(),
                format!("paddock-{name}-{session}"),
                "true".into(),
            ],
            "ssh" => {
                let mut argv = vec![
                    "ssh".to_owned(),
                    "-o".into(),
                    "BatchMode=yes".into(),
                    "-o".into(),
                    "ControlMaster=auto".into(),
                    "-o".into(),
                    format!("ControlPath=/tmp/paddock-bench-{name}-%C"),
                    "-o".into(),
                    "ControlPersist=60".into(),
                    "-o".into(),
                    "LogLevel=ERROR".into(),
                ];
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
                argv
            }
            "apptainer" | "singularity" => vec![
                config
                    .binary
                    .as_ref()
                    .map_or_else(|| "apptainer".to_owned(), |b| b.get_ref().clone()),
                "exec".into(),
                format!("instance://paddock-{name}-{session}"),
                "true".into(),
            ],
            _ => continue,
        };
        let options = EngineOptions {
            session: Some(session.into()),
            backend: Some(name.clone()),
            exe: Some(exe.clone()),
        };
        let engine = Engine::with_options(
            policy.clone(),
            Registry::with_builtins(),
            Arc::default(),
            options,
        )
        .map_err(|e| e.to_string())?;
        // Warm-up: brings up the container, instance or master connection.
        for _ in 0..2 {
            let out = engine
                .call_tool("terminal", json!({"command": "true"}))
                .await
                .map_err(|e| format!("{name}: {e}"))?;
            if out["exit_code"] != json!(0) {
                return Err(format!("{name}: terminal failed: {out}"));
            }
            let _ = tokio::process::Command::new(&bare[0])
                .args(&bare[1..])
                .output()
                .await;
        }
        let (mut bare_ms, mut paddock_ms) = (Vec::new(), Vec::new());
        for _ in 0..samples {
            let t = Instant::now();
            let out = tokio::process::Command::new(&bare[0])
                .args(&bare[1..])
                .output()
                .await
                .map_err(|e| format!("{}: {e}", bare[0]))?;
            if !out.status.success() {
                return Err(format!(
                    "{name}: the bare tool failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            bare_ms.push(ms(t.elapsed()));
            let t = Instant::now();
            engine
                .call_tool("terminal", json!({"command": "true"}))
                .await
                .map_err(|e| format!("{name}: {e}"))?;
            paddock_ms.push(ms(t.elapsed()));
        }
        bare_ms.sort_by(f64::total_cmp);
        paddock_ms.sort_by(f64::total_cmp);
        let (b, p) = (percentile(&bare_ms, 0.5), percentile(&paddock_ms, 0.5));
        figures.insert(
            name.clone(),
            json!({
                "kind": kind,
                "bare_tool": bare.join(" "),
                "samples": samples,
                "bare_p50_ms": b,
                "paddock_p50_ms": p,
                "bare_p90_ms": percentile(&bare_ms, 0.9),
                "paddock_p90_ms": percentile(&paddock_ms, 0.9),
                "ratio": p / b,
            }),
        );
    }
    Ok(Value::Object(figures))
}
