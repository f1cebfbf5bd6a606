//! Notebook sessions (`[codemode] keep_state`): a trivial cell in a kept session, cells per
//! second over several sessions, and a batch of scripts through one `paddock run` process.

use std::sync::Arc;
use std::time::Duration;

use paddock_engine::codemode::RUN_TOOLS_SCRIPT;
use paddock_engine::engine::{CallExtras, Engine};
use paddock_engine::policy::Policy;
use serde_json::{Value, json};

use super::measure::{
    PeerPlan, interleaved, push_peers, rate_over, repeat, timed, timed_process, versus_peers,
};
use crate::error::{BenchError, Result};
use crate::harness::{Bench, PREFORK, bench_engine};
use crate::report::{Better, Role, ScenarioReport};

const TRIVIAL: &str = "1 + 1";

/// An engine whose scripts keep their state per session.
fn notebook_engine(b: &Bench) -> Result<Arc<Engine>> {
    let mut policy = Policy::builtin();
    policy.codemode.keep_state = true;
    policy.codemode.prefork = toml::Spanned::new(0..0, PREFORK);
    Ok(Arc::new(bench_engine(b.exe.clone(), policy)?))
}

/// One cell of `session`; its whole result when it returned 2.
async fn cell(engine: &Engine, session: &str) -> Result<Value> {
    let extras = CallExtras {
        session: Some(session.to_owned()),
        ..CallExtras::default()
    };
    let result = engine
        .call_tool_with(RUN_TOOLS_SCRIPT, json!({"code": TRIVIAL}), extras)
        .await
        .map_err(|source| BenchError::Tool {
            what: "notebook cell".into(),
            source,
        })?;
    if result["result"] != json!(2) || result["notebook"]["state_kept"] != json!(true) {
        return Err(BenchError::unexpected("notebook cell", &result));
    }
    Ok(result)
}

pub async fn notebook(b: &Bench) -> Result<ScenarioReport> {
    let mut r = ScenarioReport::new(
        "notebook",
        "Trivial script (`1 + 1`) latency in a notebook session",
        "ms",
        Better::Lower,
    );
    let engine = notebook_engine(b)?;
    let rounds = b.pick(1, 4);
    let per_round = b.pick(300, 1000);
    for _ in 0..20 {
        cell(&engine, "bench-notebook").await?;
    }
    let plans = [
        PeerPlan::new("monty (session reused)", "monty", "trivial", per_round, 20)
            .param("session", "reuse"),
    ];
    let method = format!(
        "`run_tools_script` of `{TRIVIAL}` in one session of an engine with `[codemode] \
         keep_state = true` (the session's child kept between scripts): host wall time from \
         call to result."
    );
    let sample = async || Ok(timed(cell(&engine, "bench-notebook")).await?.0);
    versus_peers(b, &mut r, None, rounds, &plans, method, async || {
        repeat(per_round, &sample).await
    })
    .await?;
    r.note(format!(
        "{rounds} round(s): Paddock's samples, then Monty's, again."
    ));
    Ok(r)
}

/// Cells finished per second by `sessions` concurrent sessions over `window`.
async fn sessions_window(engine: &Arc<Engine>, sessions: usize, window: Duration) -> Result<f64> {
    let engine = engine.clone();
    rate_over(sessions, window, "notebook throughput task", move |i| {
        let engine = engine.clone();
        async move {
            cell(&engine, &format!("bench-notebook-{i}"))
                .await
                .map(drop)
        }
    })
    .await
}

pub async fn notebook_throughput(b: &Bench) -> Result<ScenarioReport> {
    let mut r = ScenarioReport::new(
        "notebook_throughput",
        "Trivial scripts per second in notebook sessions, by concurrent sessions",
        "scripts/s",
        Better::Higher,
    )
    .curve("concurrent sessions", true);
    let engine = notebook_engine(b)?;
    let windows = b.pick(2, 3);
    let window = b.pick(0.6, 1.5);
    for sessions in [1usize, 2, 8] {
        let x = Some(sessions as f64);
        let plans = [
            PeerPlan::new("monty (session reused)", "monty", "throughput", windows, 1)
                .param("concurrency", sessions)
                .param("window", window)
                .param("session", "reuse"),
        ];
        let method = format!(
            "{sessions} sessions in this process, each running `{TRIVIAL}` through \
             `run_tools_script` over and over for {window} s with `[codemode] keep_state = \
             true` (one kept child per session); sample = scripts finished / window."
        );
        versus_peers(b, &mut r, x, 1, &plans, method, async || {
            sessions_window(&engine, sessions, Duration::from_secs_f64(0.2)).await?;
            let window = Duration::from_secs_f64(window);
            repeat(windows, async || {
                sessions_window(&engine, sessions, window).await
            })
            .await
        })
        .await?;
    }
    r.note(format!(
        "{windows} windows of {window} s per contender and session count (after a 0.2 s \
         warm-up window). This machine has {} cores.",
        std::thread::available_parallelism().map_or(0, usize::from)
    ));
    Ok(r)
}

/// Scripts of one `paddock run` in the `batch` scenario.
const BATCH: usize = 200;

/// One fresh `paddock run` process over [`BATCH`] trivial script files.
async fn paddock_batch_once(b: &Bench, files: &[String], keep_state: bool) -> Result<f64> {
    let mut command = tokio::process::Command::new(&b.exe);
    command.arg("run");
    if keep_state {
        command.arg("--keep-state");
    }
    command.args(files).env_remove("PADDOCK_POLICY");
    let (elapsed, out) = timed_process(&mut command, None, 120, "paddock run (batch)").await?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let twos = stdout
        .lines()
        .filter(|l| serde_json::from_str::<Value>(l).is_ok_and(|v| v["result"] == json!(2)))
        .count();
    if !out.status.success() || twos != files.len() {
        return Err(BenchError::unexpected(
            "paddock run (batch)",
            &json!({"status": out.status.code(), "results_of_2": twos,
                    "stderr": String::from_utf8_lossy(&out.stderr)}),
        ));
    }
    Ok(elapsed)
}

pub async fn batch(b: &Bench) -> Result<ScenarioReport> {
    let mut r = ScenarioReport::new(
        "batch",
        "200 trivial scripts through one fresh process",
        "ms",
        Better::Lower,
    );
    let dir = std::env::temp_dir().join(format!("paddock-bench-batch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(BenchError::io("batch: temporary directory"))?;
    let mut files = Vec::with_capacity(BATCH);
    for i in 0..BATCH {
        let path = dir.join(format!("s{i}.py"));
        std::fs::write(&path, TRIVIAL).map_err(BenchError::io("batch: writing a script"))?;
        files.push(path.display().to_string());
    }
    let measured = batch_rounds(b, &files, &mut r).await;
    let _ = std::fs::remove_dir_all(&dir);
    measured?;
    Ok(r)
}

async fn batch_rounds(b: &Bench, files: &[String], r: &mut ScenarioReport) -> Result<()> {
    let rounds = b.pick(1, 3);
    let per_round = b.pick(3, 5);
    let plans = [PeerPlan::new("monty", "monty", "batch", per_round, 1).param("scripts", BATCH)];
    let mut kept = Vec::new();
    paddock_batch_once(b, files, false).await?; // page cache
    let chunk = async || {
        repeat(per_round, async || {
            let independent = paddock_batch_once(b, files, false).await?;
            kept.push(paddock_batch_once(b, files, true).await?);
            Ok(independent)
        })
        .await
    };
    let (samples, peers) = interleaved(b, rounds, chunk, &plans).await?;
    let independent_method = format!(
        "`paddock run` of {BATCH} files of `{TRIVIAL}` (built-in policy: independent scripts, \
         one confined child each, at most 8 at once): host wall time from spawn to exit."
    );
    let kept_method = format!(
        "`paddock run --keep-state` of the same {BATCH} files: one notebook session, the \
         scripts one after another in one kept child."
    );
    r.push_measured(
        "paddock run",
        Role::Paddock,
        None,
        independent_method,
        samples,
    );
    r.push_measured(
        "paddock run --keep-state",
        Role::Variant,
        None,
        kept_method,
        kept,
    );
    push_peers(r, &plans, peers, None);
    r.note(format!(
        "{rounds} round(s): Paddock's samples (both ways, alternating), then Monty's, again."
    ));
    Ok(())
}
