//! Whole scripts: latency of a trivial one, scripts per second under concurrency, and what it
//! costs to start from nothing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use paddock_engine::policy::Policy;
use serde_json::{Value, json};

use super::measure::{
    PeerPlan, interleaved, json_answer, push_peers, rate_over, repeat, script_sample,
    timed_process, versus_peers,
};
use crate::error::{BenchError, Result};
use crate::harness::{Bench, PREFORK, bench_engine, ms};
use crate::report::{Better, Role, ScenarioReport};

/// The trivial script of every contender.
const TRIVIAL: &str = "1 + 1";

fn is_two(result: &Value) -> bool {
    result["result"] == json!(2)
}

pub async fn trivial(b: &Bench) -> Result<ScenarioReport> {
    let mut r = ScenarioReport::new(
        "trivial",
        "Trivial script (`1 + 1`) latency",
        "ms",
        Better::Lower,
    );
    let rounds = b.pick(1, 4);
    let per_round = b.pick(150, 250);
    for _ in 0..20 {
        b.script("trivial warm-up", TRIVIAL).await?;
    }
    let plans = [
        PeerPlan::new("monty", "monty", "trivial", per_round, 20),
        PeerPlan::new(
            "cpython (new process)",
            "cpython",
            "trivial",
            b.pick(15, 40),
            2,
        ),
    ];
    let method = format!(
        "Engine::run_script(\"{TRIVIAL}\") in this process on the warm pool (built-in policy, \
         {PREFORK} pre-forked children), 3 ms pause between samples so each finds an idle \
         child: host wall time from call to result."
    );
    let sample = async || {
        let elapsed = script_sample(b, "trivial", TRIVIAL, is_two).await?;
        // Let the pool refill between samples: this measures the warm path, as an agent
        // that calls now and then sees it (throughput measures the other case).
        tokio::time::sleep(Duration::from_millis(3)).await;
        Ok(elapsed)
    };
    versus_peers(b, &mut r, None, rounds, &plans, method, async || {
        repeat(per_round, &sample).await
    })
    .await?;
    r.note(format!(
        "{rounds} round(s): Paddock's samples, then Monty's, then CPython's, again."
    ));
    Ok(r)
}

/// Scripts finished per second by `concurrency` tasks over `window`.
async fn paddock_window(b: &Bench, concurrency: usize, window: Duration) -> Result<f64> {
    let engine = Arc::clone(&b.engine);
    let limits = b.limits.clone();
    rate_over(concurrency, window, "throughput task", move |_| {
        let engine = engine.clone();
        let limits = limits.clone();
        async move {
            let result = engine.run_script(TRIVIAL, &limits).await?;
            if !is_two(&result) {
                return Err(BenchError::unexpected("throughput", &result));
            }
            Ok(())
        }
    })
    .await
}

pub async fn throughput(b: &Bench) -> Result<ScenarioReport> {
    let mut r = ScenarioReport::new(
        "throughput",
        "Trivial scripts per second by concurrency",
        "scripts/s",
        Better::Higher,
    )
    .curve("concurrent callers", true);
    let windows = b.pick(2, 3);
    let window = b.pick(0.6, 1.5);
    for concurrency in [1usize, 2, 8, 32] {
        let x = Some(concurrency as f64);
        let plans = [
            PeerPlan::new("monty", "monty", "throughput", windows, 1)
                .param("concurrency", concurrency)
                .param("window", window),
            PeerPlan::new("cpython (new process)", "cpython", "throughput", windows, 0)
                .param("concurrency", concurrency)
                .param("window", window),
        ];
        let method = format!(
            "{concurrency} tasks in this process each running `{TRIVIAL}` through \
             Engine::run_script over and over for {window} s (built-in policy: max_concurrency \
             {}, {PREFORK} pre-forked children); sample = scripts finished / window.",
            b.engine.policy().codemode.max_concurrency.get_ref()
        );
        versus_peers(b, &mut r, x, 1, &plans, method, async || {
            paddock_window(b, concurrency, Duration::from_secs_f64(0.2)).await?;
            let window = Duration::from_secs_f64(window);
            repeat(windows, async || {
                paddock_window(b, concurrency, window).await
            })
            .await
        })
        .await?;
    }
    r.note(format!(
        "{windows} windows of {window} s per contender and concurrency (after a 0.2 s warm-up \
         window); each system with its default limits (Paddock runs at most 8 scripts at once, \
         Monty's pool at most one worker per CPU). This machine has {} cores.",
        std::thread::available_parallelism().map_or(0, usize::from)
    ));
    Ok(r)
}

/// One fresh `paddock run -` process running the trivial script.
async fn paddock_run_once(b: &Bench) -> Result<f64> {
    let mut run = tokio::process::Command::new(&b.exe);
    run.args(["run", "-"]).env_remove("PADDOCK_POLICY");
    let (elapsed, out) =
        timed_process(&mut run, Some(TRIVIAL.as_bytes()), 60, "paddock run").await?;
    json_answer(&out, "paddock run", is_two)?;
    Ok(elapsed)
}

/// An engine built in this process, to the result of its first script.
async fn engine_first_script(b: &Bench) -> Result<f64> {
    let t = Instant::now();
    let engine = bench_engine(b.exe.clone(), Policy::builtin())?;
    let result = engine.run_script(TRIVIAL, &b.limits).await?;
    let elapsed = ms(t.elapsed());
    if !is_two(&result) {
        return Err(BenchError::unexpected("engine start-up", &result));
    }
    // Dropping the engine stops its zygote and children (outside the timing).
    drop(engine);
    Ok(elapsed)
}

pub async fn startup(b: &Bench) -> Result<ScenarioReport> {
    let mut r = ScenarioReport::new(
        "startup",
        "Start-up: from nothing to a first script's result",
        "ms",
        Better::Lower,
    );
    let rounds = b.pick(1, 3);
    let per_round = b.pick(4, 6);
    let plans = [
        PeerPlan::new("monty", "monty", "startup", per_round, 1),
        PeerPlan::new(
            "cpython (new process)",
            "cpython",
            "startup",
            per_round * 2,
            1,
        ),
    ];
    let mut in_process = Vec::new();
    paddock_run_once(b).await?; // page cache
    let chunk = async || {
        repeat(per_round, async || {
            let process = paddock_run_once(b).await?;
            in_process.push(engine_first_script(b).await?);
            Ok(process)
        })
        .await
    };
    let (samples, peers) = interleaved(b, rounds, chunk, &plans).await?;
    let process_method = format!(
        "a fresh `paddock run -` process given `{TRIVIAL}` on stdin (built-in policy): host wall \
         time from spawn to exit, which includes starting the sandbox zygote and forking the \
         first child."
    );
    let in_process_method = format!(
        "Engine::with_options (built-in policy) then run_script(\"{TRIVIAL}\") in this process, \
         to the result: what a Rust library user waits for once."
    );
    r.push_measured("paddock run", Role::Paddock, None, process_method, samples);
    r.push_measured(
        "paddock engine in-process",
        Role::Variant,
        None,
        in_process_method,
        in_process,
    );
    push_peers(&mut r, &plans, peers, None);
    r.note(format!(
        "{rounds} round(s) of Paddock's processes (each followed by one in-process engine), \
         then Monty's, then CPython's."
    ));
    Ok(r)
}
