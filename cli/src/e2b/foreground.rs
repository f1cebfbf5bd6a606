//! The quick way to run an envd `Start`: one streaming foreground `terminal` call instead of a
//! supervised background process. A background process costs a supervisor, its files and a
//! polled `process output` (about 50 ms for `true`); a foreground call streams the command's
//! output as it is written and answers at its exit (about 2 ms). It is taken when nothing
//! needs the background machinery: no stdin (`stdin: true` keeps it open for `SendInput`),
//! no terminal, and a deadline (`Connect-Timeout-Ms`) the foreground accepts, which every
//! `commands.run` with a timeout sends (the SDK's default is 60 s).
//!
//! Such a process is still one of the sandbox's processes: `List` shows it while it runs,
//! `Connect` by pid or tag streams what it writes next, `SendSignal` ends it (the call is
//! dropped, which kills the command's process group on every backend), and its end is told
//! to every stream that follows it. Its pid is one Paddock hands out, above the largest pid
//! Linux gives (`pid_max` is at most 2^22), so it never names another process.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use paddock_backends::OutputStream;
use paddock_engine::engine::CallExtras;
use serde_json::{Value, json};

use super::connect::{Code, RpcError, end_envelope, envelope};
use super::run::ForegroundRun;
use super::state::{Proc, Sandbox, now_ms};
use super::wire::rpc_of_tool;

/// The longest deadline a foreground `terminal` call takes (its `timeout` maximum).
const MAX_FOREGROUND: Duration = Duration::from_secs(3600);
/// A keepalive event this often while a command is running, so proxies keep the stream open.
const KEEPALIVE_EVERY: Duration = Duration::from_secs(20);

/// Whether a `Start` can run as a foreground call.
pub(crate) fn fits(stdin: Option<bool>, pty: bool, deadline: Option<Duration>) -> bool {
    stdin != Some(true) && !pty && deadline.is_some_and(|d| !d.is_zero() && d <= MAX_FOREGROUND)
}

/// Starts `command` (with the `terminal` arguments `args` besides it) as a foreground call
/// that streams to `tx` until its end.
pub(crate) fn start(
    sandbox: Arc<Sandbox>,
    mut args: Value,
    mut proc: Proc,
    deadline: Duration,
    tx: tokio::sync::mpsc::UnboundedSender<Vec<u8>>,
) {
    args["timeout"] = json!(deadline.as_secs_f64());
    let pid = sandbox.new_pid();
    let run = Arc::new(ForegroundRun::new(now_ms()));
    run.follow(pid, tx);
    proc.foreground = Some(run.clone());
    sandbox.procs().insert(pid, proc);
    tokio::spawn(async move {
        let ending = follow_to_end(&sandbox, &run, args).await;
        // Gone from `List` before its end is told: a client that saw the end no longer
        // finds it.
        sandbox.procs().remove(&pid);
        run.end(&ending);
    });
}

/// Runs the call, sending its output as it comes; the envelopes that end the stream.
async fn follow_to_end(sandbox: &Sandbox, run: &Arc<ForegroundRun>, args: Value) -> Vec<Vec<u8>> {
    let extras = CallExtras {
        session: Some(sandbox.id.clone()),
        ..CallExtras::default()
    };
    let forward = {
        let run = run.clone();
        move |stream: OutputStream, text: &str| {
            let kind = match stream {
                OutputStream::Stdout => "stdout",
                OutputStream::Stderr => "stderr",
            };
            let data = base64::engine::general_purpose::STANDARD.encode(text.as_bytes());
            run.send(&envelope(0, &json!({"event": {"data": {kind: data}}})));
        }
    };
    let mut call = Box::pin(
        sandbox
            .engine
            .call_tool_streaming("terminal", args, extras, forward),
    );
    let mut keepalive = tokio::time::interval_at(
        tokio::time::Instant::now() + KEEPALIVE_EVERY,
        KEEPALIVE_EVERY,
    );
    let answer = loop {
        tokio::select! {
            answer = &mut call => break Some(answer),
            () = run.killed() => break None,
            _ = keepalive.tick() => run.send(&envelope(0, &json!({"event": {"keepalive": {}}}))),
        }
    };
    // Dropping an unfinished call kills the command and what it started.
    drop(call);
    let ended = |end: Value| {
        vec![
            envelope(0, &json!({"event": {"end": end}})),
            end_envelope(None),
        ]
    };
    match answer {
        None => ended(json!({"exitCode": -1, "exited": false, "status": "signal: killed"})),
        Some(Err(err)) => vec![end_envelope(Some(&sandbox.stream_error(rpc_of_tool(&err))))],
        Some(Ok(answer)) if answer["timed_out"] == Value::Bool(true) => {
            vec![end_envelope(Some(&RpcError::new(
                Code::DeadlineExceeded,
                "the command ran past the request's timeout and was killed",
            )))]
        }
        Some(Ok(answer)) => {
            let code = answer["exit_code"].as_i64().unwrap_or(-1);
            ended(
                json!({"exitCode": code, "exited": true, "status": format!("exit status {code}")}),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_command_without_stdin_or_terminal_and_with_a_deadline_runs_in_the_foreground() {
        let minute = Some(Duration::from_secs(60));
        assert!(fits(None, false, minute));
        assert!(fits(Some(false), false, minute));
        assert!(!fits(Some(true), false, minute), "stdin needs SendInput");
        assert!(
            !fits(None, true, minute),
            "a terminal needs the background machinery"
        );
        assert!(!fits(None, false, None), "no deadline: it may run for ever");
        assert!(!fits(None, false, Some(Duration::ZERO)));
        assert!(!fits(None, false, Some(Duration::from_secs(7200))));
    }
}
