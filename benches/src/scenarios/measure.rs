//! The measuring loops the scenarios share: repeated samples, Paddock interleaved with its
//! peers (and the report rows that come of it), rates over a time window, and a `terminal`
//! command's cost from one script and per call.

use std::time::{Duration, Instant};

use paddock_engine::codemode::Limits;
use paddock_engine::engine::Engine;
use serde_json::{Value, json};

use crate::error::{BenchError, Result};
use crate::harness::{Bench, ms};
use crate::peers::{PeerRequest, PeerSamples};
use crate::report::{Outcome, Role, ScenarioReport};

/// `count` samples of `sample`, taken one after another.
pub async fn repeat(
    count: usize,
    mut sample: impl AsyncFnMut() -> Result<f64>,
) -> Result<Vec<f64>> {
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        out.push(sample().await?);
    }
    Ok(out)
}

/// Host wall time of `op` in ms, with what it returned: the clock stops before the caller
/// checks the result, so the check is never part of the sample.
pub async fn timed<T>(op: impl Future<Output = Result<T>>) -> Result<(f64, T)> {
    let t = Instant::now();
    let out = op.await?;
    Ok((ms(t.elapsed()), out))
}

/// `warmup` untimed runs of Paddock's `paddock` and its bare floor `bare`, then `samples` of
/// each, alternating sample by sample (the floor first): Paddock's samples and the floor's.
pub async fn alternate(
    warmup: usize,
    samples: usize,
    mut paddock: impl AsyncFnMut() -> Result<f64>,
    mut bare: impl AsyncFnMut() -> Result<f64>,
) -> Result<(Vec<f64>, Vec<f64>)> {
    for _ in 0..warmup {
        paddock().await?;
        bare().await?;
    }
    let (mut mine, mut floor) = (Vec::new(), Vec::new());
    for _ in 0..samples {
        floor.push(bare().await?);
        mine.push(paddock().await?);
    }
    Ok((mine, floor))
}

/// Host wall time of `code` through the bench's engine, from call to result; fails unless the
/// script succeeded and `accept` takes its result (`what` names the script in errors).
pub async fn script_sample(
    b: &Bench,
    what: &str,
    code: &str,
    accept: impl FnOnce(&Value) -> bool,
) -> Result<f64> {
    let (elapsed, result) = timed(b.script(what, code)).await?;
    if !accept(&result) {
        return Err(BenchError::unexpected(what, &result));
    }
    Ok(elapsed)
}

/// Paddock against the peers of `plans` at `x`: `rounds` [`interleaved`] rounds of Paddock's
/// chunk (`paddock`) and each peer's, then the report's rows: `paddock` measured as `method`,
/// then each peer.
pub async fn versus_peers(
    b: &Bench,
    report: &mut ScenarioReport,
    x: Option<f64>,
    rounds: usize,
    plans: &[PeerPlan<'_>],
    method: impl Into<String>,
    paddock: impl AsyncFnMut() -> Result<Vec<f64>>,
) -> Result<()> {
    let (samples, peers) = interleaved(b, rounds, paddock, plans).await?;
    report.push_measured("paddock", Role::Paddock, x, method, samples);
    push_peers(report, plans, peers, x);
    Ok(())
}

/// Operations finished per second by `tasks` concurrent tasks over `window`: task `i` awaits
/// `op(i)` over and over until the window closes (`what` names a task that failed to join).
pub async fn rate_over<F, Fut>(tasks: usize, window: Duration, what: &str, op: F) -> Result<f64>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<()>> + Send + 'static,
{
    let op = std::sync::Arc::new(op);
    let started = Instant::now();
    let until = started + window;
    let handles: Vec<_> = (0..tasks)
        .map(|i| {
            let op = op.clone();
            tokio::spawn(async move {
                let mut done = 0u64;
                while Instant::now() < until {
                    op(i).await?;
                    done += 1;
                }
                Ok::<u64, BenchError>(done)
            })
        })
        .collect();
    let mut total = 0;
    for handle in handles {
        total += joined(handle.await, what)??;
    }
    Ok(total as f64 / started.elapsed().as_secs_f64())
}

/// One peer measured in rounds between Paddock's samples.
pub struct PeerPlan<'a> {
    /// Its name in the report.
    pub contender: &'a str,
    /// `samples` is per round.
    pub request: PeerRequest<'a>,
    /// Multiplies every sample (the driver reports ms; e.g. 1000 for µs).
    pub scale: f64,
}

impl<'a> PeerPlan<'a> {
    pub fn new(
        contender: &'a str,
        peer: &'a str,
        scenario: &'a str,
        samples: usize,
        warmup: usize,
    ) -> Self {
        Self {
            contender,
            request: PeerRequest {
                peer,
                scenario,
                params: Vec::new(),
                samples,
                warmup,
            },
            scale: 1.0,
        }
    }

    pub fn param(mut self, key: &'a str, value: impl ToString) -> Self {
        self.request.params.push((key, value.to_string()));
        self
    }

    pub fn scale(mut self, scale: f64) -> Self {
        self.scale = scale;
        self
    }
}

/// Runs `rounds` rounds of (Paddock's chunk, then each peer's chunk) and returns Paddock's
/// samples and each peer's outcome, in `plans` order. A peer that fails or is missing is not
/// asked again.
pub async fn interleaved(
    b: &Bench,
    rounds: usize,
    mut paddock: impl AsyncFnMut() -> Result<Vec<f64>>,
    plans: &[PeerPlan<'_>],
) -> Result<(Vec<f64>, Vec<Outcome>)> {
    let mut mine = Vec::new();
    let mut theirs: Vec<PeerSamples> = plans.iter().map(|_| PeerSamples::default()).collect();
    for _ in 0..rounds.max(1) {
        mine.extend(paddock().await?);
        for (plan, samples) in plans.iter().zip(theirs.iter_mut()) {
            if !samples.gave_up() {
                samples.add(b.peers.run(&plan.request).await);
            }
        }
    }
    let outcomes = theirs
        .into_iter()
        .zip(plans)
        .map(|(samples, plan)| samples.outcome(plan.scale))
        .collect();
    Ok((mine, outcomes))
}

/// Adds each peer's outcome to the report, at `x`.
pub fn push_peers(
    report: &mut ScenarioReport,
    plans: &[PeerPlan<'_>],
    outcomes: Vec<Outcome>,
    x: Option<f64>,
) {
    for (plan, outcome) in plans.iter().zip(outcomes) {
        report.push(plan.contender, Role::Peer, x, outcome);
    }
}

/// Commands per "from one script" sample.
pub const SCRIPT_COMMANDS: usize = 20;

/// One `run_tools_script` that awaits `tools.terminal(command="true")` [`SCRIPT_COMMANDS`]
/// times in sequence (each must exit 0); host wall time of the whole script divided by
/// [`SCRIPT_COMMANDS`], so script start-up is charged to the commands.
pub async fn terminal_script_once(engine: &Engine, limits: &Limits, what: &str) -> Result<f64> {
    let code = format!(
        "for _ in range({SCRIPT_COMMANDS}):\n    r = await tools.terminal(command=\"true\")\n    \
         if r[\"exit_code\"] != 0:\n        raise RuntimeError(str(r))\n{SCRIPT_COMMANDS}\n"
    );
    let t = Instant::now();
    let result = engine.run_script(&code, limits).await?;
    let elapsed = ms(t.elapsed());
    if result["ok"] != json!(true) || result["result"] != json!(SCRIPT_COMMANDS) {
        return Err(BenchError::unexpected(
            format!("{what}: {SCRIPT_COMMANDS} terminal calls from one script"),
            &result,
        ));
    }
    Ok(elapsed / SCRIPT_COMMANDS as f64)
}

/// The method text of a "from one script" sample.
pub fn script_method(what: &str) -> String {
    format!(
        "one `run_tools_script` awaiting `tools.terminal(command=\"true\")` \
         {SCRIPT_COMMANDS} times in sequence ({what}); sample = host wall time of the whole \
         script (start-up included) / {SCRIPT_COMMANDS}."
    )
}

/// `terminal` through the registry; fails unless the command exited 0 (`what` names the call
/// in errors).
pub async fn terminal_once(engine: &Engine, command: &str, what: &str) -> Result<f64> {
    let (elapsed, out) = timed(async {
        engine
            .call_tool("terminal", json!({"command": command}))
            .await
            .map_err(BenchError::tool(what))
    })
    .await?;
    if out["exit_code"] != json!(0) {
        return Err(BenchError::unexpected(what, &out));
    }
    Ok(elapsed)
}

/// `terminal true` samples of one Paddock configuration: per command from one script, and one
/// call.
#[derive(Default)]
pub struct TerminalSamples {
    pub script: Vec<f64>,
    pub call: Vec<f64>,
}

impl TerminalSamples {
    /// One sample of each; `script_what` and `call_what` name them in errors.
    pub async fn take(
        &mut self,
        engine: &Engine,
        limits: &Limits,
        script_what: &str,
        call_what: &str,
    ) -> Result<()> {
        self.script
            .push(terminal_script_once(engine, limits, script_what).await?);
        self.call
            .push(terminal_once(engine, "true", call_what).await?);
        Ok(())
    }

    /// The report's rows of these samples: `paddock` (per command from one script on the
    /// backend `what` describes) and `paddock, one call`.
    pub fn push_rows(self, report: &mut ScenarioReport, what: &str) {
        report.push_measured(
            "paddock",
            Role::Paddock,
            None,
            script_method(what),
            self.script,
        );
        report.push_measured(
            "paddock, one call",
            Role::Variant,
            None,
            CALL_METHOD,
            self.call,
        );
    }
}

/// The method text of a `terminal true` call sample.
const CALL_METHOD: &str = "Engine::call_tool(\"terminal\", {\"command\": \"true\"}) on the same \
                           backend: host wall time from call to result.";

/// A bare process (the floor a tool is measured against): host wall time from spawn to exit,
/// stdin null and output captured through pipes as a tool would; fails unless it exited 0.
/// `spawn_what` names a failed spawn in errors, `exit_what` a failed exit.
pub async fn bare_process(
    mut command: tokio::process::Command,
    spawn_what: String,
    exit_what: String,
) -> Result<f64> {
    let (elapsed, out) = timed(async {
        command
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .map_err(BenchError::io(spawn_what))
    })
    .await?;
    if !out.status.success() {
        return Err(BenchError::unexpected(
            exit_what,
            &json!({"status": out.status.code(), "stderr": String::from_utf8_lossy(&out.stderr)}),
        ));
    }
    Ok(elapsed)
}

/// A fresh process of `command`, stdout and stderr piped and killed if dropped, given `input`
/// on stdin when there is one: host wall time from spawn to exit, with its output. An error
/// after `seconds`; `what` names the process in errors.
pub async fn timed_process(
    command: &mut tokio::process::Command,
    input: Option<&[u8]>,
    seconds: u64,
    what: &str,
) -> Result<(f64, std::process::Output)> {
    use std::process::Stdio;
    use tokio::io::AsyncWriteExt;

    let stdin = if input.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    };
    timed(async {
        let mut child = command
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(BenchError::io(what))?;
        if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
            stdin
                .write_all(input)
                .await
                .map_err(BenchError::io(format!("{what}: writing the script")))?;
        }
        tokio::time::timeout(Duration::from_secs(seconds), child.wait_with_output())
            .await
            .map_err(|_| BenchError::Timeout {
                what: what.into(),
                seconds,
            })?
            .map_err(BenchError::io(what))
    })
    .await
}

/// A process's stdout as JSON (null when it is not JSON) if it exited 0 and `accept` takes
/// it; otherwise an error named by `what` that carries its status, stdout and stderr.
pub fn json_answer(
    out: &std::process::Output,
    what: impl Into<String>,
    accept: impl FnOnce(&Value) -> bool,
) -> Result<Value> {
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    if !out.status.success() || !accept(&answer) {
        return Err(BenchError::unexpected(
            what,
            &json!({"status": out.status.code(), "stdout": answer,
                    "stderr": String::from_utf8_lossy(&out.stderr)}),
        ));
    }
    Ok(answer)
}

/// Host wall time until `tasks` tasks started at once, task `i` awaiting `op(i)`, are all done
/// (`what` names a task that failed to join).
pub async fn all_at_once<F, Fut, T>(tasks: usize, what: &str, op: F) -> Result<f64>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<T>> + Send + 'static,
    T: Send + 'static,
{
    let t = Instant::now();
    let handles: Vec<_> = (0..tasks).map(|i| tokio::spawn(op(i))).collect();
    for handle in handles {
        joined(handle.await, what)??;
    }
    Ok(ms(t.elapsed()))
}

/// A spawned task's result, its failure to join an error named by `what`.
fn joined<T>(result: std::result::Result<T, tokio::task::JoinError>, what: &str) -> Result<T> {
    result.map_err(|e| BenchError::Unexpected {
        what: what.to_owned(),
        result: e.to_string(),
    })
}
