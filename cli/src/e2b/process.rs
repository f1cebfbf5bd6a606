//! envd's process service (`/process.Process/*`) on Paddock's background processes: `Start`
//! runs the command with `terminal(background=true)` and streams what the `process` tool's
//! `output` action reads (stdout and stderr apart, as written) until the exit; `Connect`
//! re-attaches from the current offsets; input, stdin closing and signals are `process`
//! actions. As in envd, a process lives until it exits or the stream's `Connect-Timeout-Ms`
//! passes (then it is killed), not until the client disconnects.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::response::Response;
use base64::Engine as _;
use paddock_engine::engine::CallExtras;
use serde::Deserialize;
use serde_json::{Value, json};

use super::connect::{Code, RpcError, end_envelope, envelope};
use super::state::{Proc, Sandbox};
use super::wire::{json_response, response, rpc_error, rpc_of_tool};

/// How long one `output` read waits for new text before the loop looks at the deadline.
const READ_WAIT_S: f64 = 1.0;
/// A keepalive event after this long without output, so proxies keep the stream open.
const KEEPALIVE_AFTER: Duration = Duration::from_secs(20);

#[derive(Deserialize, Default)]
#[serde(default)]
struct ProcessConfig {
    cmd: String,
    args: Vec<String>,
    envs: BTreeMap<String, String>,
    cwd: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct StartRequest {
    process: ProcessConfig,
    tag: Option<String>,
    stdin: Option<bool>,
    pty: Option<Value>,
}

/// `{"pid": N}` or `{"tag": "..."}`.
#[derive(Deserialize, Default)]
#[serde(default)]
struct Selector {
    pid: Option<Value>,
    tag: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Selected {
    process: Selector,
    input: Option<BTreeMap<String, String>>,
    signal: Option<String>,
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Calls a tool in the sandbox's session.
async fn call(sandbox: &Sandbox, tool: &str, args: Value) -> Result<Value, RpcError> {
    let extras = CallExtras {
        session: Some(sandbox.id.clone()),
        ..CallExtras::default()
    };
    sandbox
        .engine
        .call_tool_with(tool, args, extras)
        .await
        .map_err(|e| rpc_of_tool(&e))
}

/// The command line `terminal` runs for envd's `cmd` and `args`: the SDK's `/bin/bash -l -c
/// SCRIPT` is SCRIPT in the session's shell; anything else is its argv, quoted.
fn command_line(cmd: &str, args: &[String]) -> String {
    let shell = matches!(cmd.rsplit('/').next(), Some("bash" | "sh" | "zsh" | "dash"));
    if shell {
        let flags: Vec<&String> = args.iter().take_while(|a| a.starts_with('-')).collect();
        if let (Some(last), Some(script)) = (flags.last(), args.get(flags.len()))
            && last.ends_with('c')
            && args.len() == flags.len() + 1
        {
            return script.clone();
        }
    }
    std::iter::once(cmd)
        .chain(args.iter().map(String::as_str))
        .map(super::rest::shell_quote)
        .collect::<Vec<_>>()
        .join(" ")
}

fn parse<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, RpcError> {
    serde_json::from_slice(body)
        .map_err(|e| RpcError::new(Code::InvalidArgument, format!("bad request: {e}")))
}

/// The pid a selector names, and its record.
fn select(sandbox: &Sandbox, selector: &Selector) -> Result<(u32, Proc), RpcError> {
    let procs = sandbox.procs();
    let found = match (&selector.pid, &selector.tag) {
        (Some(pid), _) => {
            let pid = match pid {
                Value::Number(n) => n.as_u64(),
                Value::String(s) => s.parse().ok(),
                _ => None,
            }
            .and_then(|p| u32::try_from(p).ok());
            pid.and_then(|p| procs.get(&p).map(|r| (p, r.clone())))
        }
        (None, Some(tag)) => procs
            .iter()
            .find(|(_, p)| p.tag.as_deref() == Some(tag.as_str()))
            .map(|(pid, p)| (*pid, p.clone())),
        (None, None) => None,
    };
    found.ok_or_else(|| RpcError::new(Code::NotFound, "process not found"))
}

/// A unary method of the process service.
pub(crate) async fn unary(sandbox: &Arc<Sandbox>, method: &str, body: &[u8]) -> Response {
    let answer = match method {
        "List" => list(sandbox).await,
        "SendInput" => send_input(sandbox, body).await,
        "CloseStdin" => close_stdin(sandbox, body).await,
        "SendSignal" => send_signal(sandbox, body).await,
        other => Err(RpcError::new(
            Code::Unimplemented,
            format!("process.Process/{other} is not served by Paddock yet"),
        )),
    };
    match answer {
        Ok(value) => json_response(200, &value),
        Err(err) => rpc_error(&err),
    }
}

async fn list(sandbox: &Sandbox) -> Result<Value, RpcError> {
    let listed = call(sandbox, "process", json!({"action": "list"})).await?;
    let running: Vec<&str> = listed["processes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["state"] == "running")
        .filter_map(|p| p["session_id"].as_str())
        .collect();
    let processes: Vec<Value> = sandbox
        .procs()
        .iter()
        .filter(|(_, p)| running.contains(&p.process_id.as_str()))
        .map(|(pid, p)| {
            let mut info = json!({
                "config": {"cmd": p.cmd, "args": p.args, "envs": p.envs},
                "pid": pid,
            });
            if let Some(cwd) = &p.cwd {
                info["config"]["cwd"] = json!(cwd);
            }
            if let Some(tag) = &p.tag {
                info["tag"] = json!(tag);
            }
            info
        })
        .collect();
    Ok(json!({"processes": processes}))
}

async fn send_input(sandbox: &Sandbox, body: &[u8]) -> Result<Value, RpcError> {
    let request: Selected = parse(body)?;
    let (_, proc) = select(sandbox, &request.process)?;
    let input = request.input.unwrap_or_default();
    let Some(data) = input.get("stdin") else {
        return Err(RpcError::new(
            Code::Unimplemented,
            "PTY input is not served by Paddock yet",
        ));
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(|e| RpcError::new(Code::InvalidArgument, format!("stdin: not base64: {e}")))?;
    // The `process` tool writes text: binary stdin is refused rather than mangled.
    let text = String::from_utf8(bytes)
        .map_err(|_| RpcError::new(Code::InvalidArgument, "stdin: only UTF-8 text is accepted"))?;
    call(
        sandbox,
        "process",
        json!({"action": "write", "session_id": proc.process_id, "data": text}),
    )
    .await?;
    Ok(json!({}))
}

async fn close_stdin(sandbox: &Sandbox, body: &[u8]) -> Result<Value, RpcError> {
    let request: Selected = parse(body)?;
    let (_, proc) = select(sandbox, &request.process)?;
    call(
        sandbox,
        "process",
        json!({"action": "close", "session_id": proc.process_id}),
    )
    .await?;
    Ok(json!({}))
}

async fn send_signal(sandbox: &Sandbox, body: &[u8]) -> Result<Value, RpcError> {
    let request: Selected = parse(body)?;
    let (_, proc) = select(sandbox, &request.process)?;
    let signal = request.signal.unwrap_or_else(|| "SIGNAL_SIGKILL".into());
    let name = signal
        .trim_start_matches("SIGNAL_")
        .trim_start_matches("SIG");
    let args = if name == "KILL" {
        json!({"action": "kill", "session_id": proc.process_id})
    } else {
        json!({"action": "signal", "session_id": proc.process_id, "name": name})
    };
    let answer = call(sandbox, "process", args).await?;
    // envd answers not_found for a process that is gone; the SDK's kill() then says False.
    if answer.get("killed") == Some(&Value::Bool(false))
        || answer.get("sent") == Some(&Value::Bool(false))
    {
        return Err(RpcError::new(
            Code::NotFound,
            "the process had already ended",
        ));
    }
    Ok(json!({}))
}

/// A server-streaming method (`Start`, `Connect`): the response streams envelopes.
pub(crate) async fn stream(
    sandbox: Arc<Sandbox>,
    method: &str,
    body: &[u8],
    deadline: Option<Duration>,
) -> Response {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    let started = match method {
        "Start" => start(&sandbox, body).await,
        "Connect" => attach(&sandbox, body).await,
        other => Err(RpcError::new(
            Code::Unimplemented,
            format!("process.Process/{other} is not served by Paddock yet"),
        )),
    };
    match started {
        Ok((pid, proc, from)) => {
            let deadline = deadline.map(|d| Instant::now() + d);
            tokio::spawn(pump(sandbox, pid, proc, from, deadline, tx));
        }
        Err(err) => {
            let _ = tx.send(end_envelope(Some(&err)));
        }
    }
    let chunks = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|chunk| (Ok::<_, std::convert::Infallible>(Bytes::from(chunk)), rx))
    });
    response(200, "application/connect+json", Body::from_stream(chunks))
}

/// Starts the process: its pid, record and where its output starts.
async fn start(sandbox: &Sandbox, body: &[u8]) -> Result<(u32, Proc, (u64, u64)), RpcError> {
    let envelopes = super::connect::read_envelopes(body)
        .map_err(|e| RpcError::new(Code::InvalidArgument, e.to_string()))?;
    let Some((_, message)) = envelopes.first() else {
        return Err(RpcError::new(Code::InvalidArgument, "no request message"));
    };
    let request: StartRequest = parse(message)?;
    if request.pty.is_some() {
        return Err(RpcError::new(
            Code::Unimplemented,
            "PTY processes are not served by Paddock's E2B front end yet",
        ));
    }
    let config = request.process;
    let mut args = json!({
        "command": command_line(&config.cmd, &config.args),
        "background": true,
    });
    if let Some(cwd) = config.cwd.as_deref().filter(|c| !c.is_empty()) {
        args["workdir"] = json!(super::wire::absolute(&sandbox.cwd, cwd));
    }
    if !config.envs.is_empty() {
        args["env"] = json!(config.envs);
    }
    let answer = call(sandbox, "terminal", args).await?;
    let Some(process_id) = answer["session_id"].as_str().map(str::to_owned) else {
        return Err(RpcError::new(Code::Internal, "terminal gave no process id"));
    };
    if request.stdin != Some(true) {
        // envd closes the stdin of a process started without `stdin: true`.
        call(
            sandbox,
            "process",
            json!({"action": "close", "session_id": process_id}),
        )
        .await?;
    }
    let pid = answer["pid"]
        .as_u64()
        .and_then(|p| u32::try_from(p).ok())
        .unwrap_or_else(|| {
            u32::try_from(sandbox.next_pid.fetch_add(1, Ordering::Relaxed)).unwrap_or(u32::MAX)
        });
    let proc = Proc {
        process_id,
        cmd: config.cmd,
        args: config.args,
        envs: config.envs,
        cwd: config.cwd,
        tag: request.tag,
    };
    // A reused pid gets a new record: an old exit is never reported for it.
    sandbox.procs().insert(pid, proc.clone());
    Ok((pid, proc, (0, 0)))
}

/// Re-attaches to a started process, from what it has written so far.
async fn attach(sandbox: &Sandbox, body: &[u8]) -> Result<(u32, Proc, (u64, u64)), RpcError> {
    let envelopes = super::connect::read_envelopes(body)
        .map_err(|e| RpcError::new(Code::InvalidArgument, e.to_string()))?;
    let Some((_, message)) = envelopes.first() else {
        return Err(RpcError::new(Code::InvalidArgument, "no request message"));
    };
    let request: Selected = parse(message)?;
    let (pid, proc) = select(sandbox, &request.process)?;
    // Skip to the end of what is there: Connect streams what comes next, as envd does.
    let mut offsets = (0u64, 0u64);
    loop {
        let read = call(
            sandbox,
            "process",
            json!({"action": "output", "session_id": proc.process_id,
                   "stdout_offset": offsets.0, "stderr_offset": offsets.1}),
        )
        .await?;
        offsets = (
            read["stdout_offset"].as_u64().unwrap_or(offsets.0),
            read["stderr_offset"].as_u64().unwrap_or(offsets.1),
        );
        if read["more"] != Value::Bool(true) {
            break;
        }
    }
    Ok((pid, proc, offsets))
}

/// Streams a process's output from `from` to its end (or the deadline) as envelopes. Keeps
/// going when the client has left, so the deadline still ends the process.
async fn pump(
    sandbox: Arc<Sandbox>,
    pid: u32,
    proc: Proc,
    from: (u64, u64),
    deadline: Option<Instant>,
    tx: tokio::sync::mpsc::UnboundedSender<Vec<u8>>,
) {
    let send = |message: Value| {
        let _ = tx.send(envelope(0, &message));
    };
    send(json!({"event": {"start": {"pid": pid}}}));
    let mut offsets = from;
    let mut quiet_since = Instant::now();
    loop {
        let wait = match deadline {
            Some(at) => at
                .saturating_duration_since(Instant::now())
                .as_secs_f64()
                .min(READ_WAIT_S),
            None => READ_WAIT_S,
        };
        let read = call(
            &sandbox,
            "process",
            json!({"action": "output", "session_id": proc.process_id,
                   "stdout_offset": offsets.0, "stderr_offset": offsets.1, "timeout": wait}),
        )
        .await;
        let read = match read {
            Ok(r) => r,
            Err(err) => {
                let _ = tx.send(end_envelope(Some(&err)));
                return;
            }
        };
        for stream in ["stdout", "stderr"] {
            if let Some(text) = read[stream].as_str().filter(|t| !t.is_empty()) {
                send(json!({"event": {"data": {stream: b64(text.as_bytes())}}}));
                quiet_since = Instant::now();
            }
        }
        offsets = (
            read["stdout_offset"].as_u64().unwrap_or(offsets.0),
            read["stderr_offset"].as_u64().unwrap_or(offsets.1),
        );
        if read["more"] == Value::Bool(true) {
            continue;
        }
        if read["state"] != "running" {
            let code = read["exit_code"].as_i64().unwrap_or(-1);
            let mut end = json!({"exitCode": code, "exited": read["state"] == "exited",
                                 "status": format!("exit status {code}")});
            if read["state"] == "lost" {
                end["error"] = json!("the process's supervisor is gone");
            }
            send(json!({"event": {"end": end}}));
            let _ = tx.send(end_envelope(None));
            return;
        }
        if deadline.is_some_and(|at| Instant::now() >= at) {
            let _ = call(
                &sandbox,
                "process",
                json!({"action": "kill", "session_id": proc.process_id}),
            )
            .await;
            let err = RpcError::new(
                Code::DeadlineExceeded,
                "the command ran past the request's timeout and was killed",
            );
            let _ = tx.send(end_envelope(Some(&err)));
            return;
        }
        if quiet_since.elapsed() >= KEEPALIVE_AFTER {
            send(json!({"event": {"keepalive": {}}}));
            quiet_since = Instant::now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn the_sdks_shell_call_runs_its_script() {
        let args = [
            "-l".to_owned(),
            "-c".to_owned(),
            "echo hi; exit 3".to_owned(),
        ];
        assert_eq!(command_line("/bin/bash", &args), "echo hi; exit 3");
        let args = ["-lc".to_owned(), "ls".to_owned()];
        assert_eq!(command_line("bash", &args), "ls");
    }

    #[test]
    fn other_commands_are_their_quoted_argv() {
        let args = ["a b".to_owned(), "it's".to_owned()];
        assert_eq!(
            command_line("/usr/bin/printf", &args),
            "'/usr/bin/printf' 'a b' 'it'\\''s'"
        );
        assert_eq!(
            command_line("/bin/bash", &["-x".to_owned()]),
            "'/bin/bash' '-x'"
        );
    }
}
