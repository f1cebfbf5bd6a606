//! `session_api`: what SDK-style clients wait for (issue 44's targets), on the sandboxed local
//! backend and each docker backend of `--backends`:
//! - a line written by a command reaching the caller's output callback (the engine's
//!   streaming call, as the Python callbacks and MCP progress get it);
//! - `python_execute` with `context`: `1+1` in a warm context, and a new context's first
//!   execution;
//! - `session.run("true")` through the Python package against a bare `subprocess.run` (the
//!   package from the repository's `python/`, or `$PADDOCK_BENCH_PYTHONPATH`).

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use paddock_backends::OutputStream;
use paddock_engine::engine::CallExtras;
use serde_json::{Value, json};

use super::sandbox_and_docker;
use super::terminal::Scratch;
use crate::error::{BenchError, Result};
use crate::harness::{Bench, ms};
use crate::report::{Better, Outcome, Role, ScenarioReport};

const SESSION: &str = "bench-session-api";
/// The Python half, run with the machine's python3.
const SESSION_RUN_PY: &str = include_str!("../../python/session_run.py");

fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

pub async fn session_api(b: &Bench) -> Result<Vec<ScenarioReport>> {
    let scratch = Scratch::new("session-api")?;
    let places = sandbox_and_docker(b, &scratch.0, SESSION, "session_api")?;
    let rounds = b.pick(20, 100);
    let mut latency = ScenarioReport::new(
        "stream_latency",
        "a line written by a command, to the caller's output callback",
        "ms",
        Better::Lower,
    );
    let mut warm = ScenarioReport::new(
        "context_warm",
        "`1+1` in a warm Python context (python_execute with context)",
        "ms",
        Better::Lower,
    );
    let mut fresh = ScenarioReport::new(
        "context_new",
        "a new Python context's first execution (`1+1`)",
        "ms",
        Better::Lower,
    );
    for place in &places {
        let engine = &place.engine;
        // The session's environment exists before anything is timed.
        engine
            .call_tool("terminal", json!({"command": "true"}))
            .await
            .map_err(BenchError::tool(format!(
                "session_api: {}: start",
                place.name
            )))?;
        let mut lines = Vec::new();
        for _ in 0..rounds {
            // The first line, whole (a chunk may end inside it), and when it was complete.
            let mut line = String::new();
            let mut arrived: Option<f64> = None;
            let on_text = |stream: OutputStream, text: &str| {
                if stream == OutputStream::Stdout && arrived.is_none() {
                    line.push_str(text);
                    if line.contains('\n') {
                        arrived = Some(now_s());
                    }
                }
            };
            engine
                .call_tool_streaming(
                    "terminal",
                    json!({"command": "sleep 0.02; echo $EPOCHREALTIME; sleep 0.05"}),
                    CallExtras::default(),
                    on_text,
                )
                .await
                .map_err(BenchError::tool(format!(
                    "session_api: {}: stream",
                    place.name
                )))?;
            let written = line
                .lines()
                .next()
                .and_then(|l| l.trim().parse::<f64>().ok());
            match (arrived, written) {
                (Some(at), Some(then)) => lines.push((at - then) * 1000.0),
                _ => {
                    return Err(BenchError::Unexpected {
                        what: format!("session_api: {}: no timestamp streamed", place.name),
                        result: format!("{line:?}"),
                    });
                }
            }
        }
        latency.push(
            &place.name,
            Role::Paddock,
            None,
            Outcome::measured(
                format!(
                    "`terminal` of `sleep 0.02; echo $EPOCHREALTIME; sleep 0.05` through \
                     Engine::call_tool_streaming on `{}`: the callback's clock when the line \
                     is whole minus the time the line carries (one kernel clock)",
                    place.name
                ),
                None,
                lines,
            ),
        );
        let execute = async |context: &str| -> Result<f64> {
            let t = Instant::now();
            let v = engine
                .call_tool("python_execute", json!({"code": "1+1", "context": context}))
                .await
                .map_err(BenchError::tool(format!(
                    "session_api: {}: context",
                    place.name
                )))?;
            let took = ms(t.elapsed());
            if v["results"][0]["text/plain"] != json!("2") {
                return Err(BenchError::unexpected("session_api: context", &v));
            }
            Ok(took)
        };
        execute("warm").await?;
        let mut warm_ms = Vec::new();
        for _ in 0..rounds {
            warm_ms.push(execute("warm").await?);
        }
        let mut fresh_ms = Vec::new();
        for i in 0..b.pick(5, 15) {
            let id = format!("new-{i}");
            fresh_ms.push(execute(&id).await?);
            engine
                .call_tool("python_contexts", json!({"action": "remove", "id": id}))
                .await
                .map_err(BenchError::tool(format!(
                    "session_api: {}: remove",
                    place.name
                )))?;
        }
        let method = |what: &str| {
            format!(
                "`python_execute` of `1+1` with `context` on `{}` ({what}), through \
                 Engine::call_tool: host wall time",
                place.name
            )
        };
        warm.push(
            &place.name,
            Role::Paddock,
            None,
            Outcome::measured(method("a context used before"), None, warm_ms),
        );
        fresh.push(
            &place.name,
            Role::Paddock,
            None,
            Outcome::measured(method("a new id each time, removed after"), None, fresh_ms),
        );
        if let Err(err) = engine.close_session(SESSION).await {
            tracing::warn!(place = %place.name, %err, "bench: closing the session_api session");
        }
    }
    latency.note("Target: <= 10 ms median on the sandbox and docker.");
    warm.note("Target: <= 5 ms median on the sandbox and docker.");
    fresh.note("Target: <= 150 ms median on the sandbox and docker.");
    Ok(vec![
        latency,
        warm,
        fresh,
        session_run(b, rounds * 5).await?,
    ])
}

/// `session.run("true")` from Python against `subprocess.run(["bash", "-c", "true"])`.
async fn session_run(b: &Bench, rounds: usize) -> Result<ScenarioReport> {
    let mut r = ScenarioReport::new(
        "python_session_run",
        "`session.run(\"true\")` from the Python package against a bare `subprocess.run`",
        "ms",
        Better::Lower,
    );
    let package = std::env::var_os("PADDOCK_BENCH_PYTHONPATH")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            // target/release/paddock -> the repository's python/.
            b.exe.ancestors().nth(3).map(|root| root.join("python"))
        })
        .filter(|dir| dir.join("paddock").join("__init__.py").is_file())
        .ok_or_else(|| BenchError::Unexpected {
            what: "session_api: the Python package".into(),
            result: "not found beside the binary's repository; set PADDOCK_BENCH_PYTHONPATH to \
                     the directory that holds `paddock/`"
                .into(),
        })?;
    let out = tokio::process::Command::new("python3")
        .args(["-c", SESSION_RUN_PY, &rounds.to_string()])
        .env("PYTHONPATH", &package)
        .env("PADDOCK_BIN", &b.exe)
        .output()
        .await
        .map_err(BenchError::io("session_api: running python3"))?;
    let answer: Value =
        serde_json::from_slice(&out.stdout).map_err(|_| BenchError::Unexpected {
            what: "session_api: the Python half".into(),
            result: format!(
                "exit {:?}: {}",
                out.status.code(),
                String::from_utf8_lossy(&out.stderr)
            ),
        })?;
    let samples = |key: &str| -> Vec<f64> {
        answer[key]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_f64).collect())
            .unwrap_or_default()
    };
    r.push(
        "paddock session.run",
        Role::Paddock,
        None,
        Outcome::measured(
            "`Session.run(\"true\")` of the package (a `paddock embed` engine, the built-in \
             default sandbox), alternated with the bare run in one loop: Python wall time",
            None,
            samples("session_run"),
        ),
    );
    r.push(
        "subprocess.run bash -c true",
        Role::Peer,
        None,
        Outcome::measured(
            "`subprocess.run([\"bash\", \"-c\", \"true\"])` in the same loop",
            None,
            samples("subprocess_run"),
        ),
    );
    r.note("Target: Paddock <= 2x the bare run, side by side in one run.");
    Ok(r)
}
