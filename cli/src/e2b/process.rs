//! envd's process service (`/process.Process/*`). A `Start` that needs neither stdin nor a
//! terminal and has a deadline runs as one streaming foreground call ([`super::foreground`]);
//! any other runs as a Paddock background process: `terminal(background=true)`, streaming
//! what the `process` tool's `output` action reads (stdout and stderr apart, as written)
//! until the exit. `Connect` re-attaches from the current offsets; input (`SendInput`,
//! `StreamInput`), stdin closing, signals and a terminal's size (`Update`) are `process`
//! actions (a foreground command has none of these but the signal). A `Start` with `pty` runs
//! on a terminal (`terminal(pty=true)`, then `process resize`): its output, stdout and stderr
//! together, comes as `pty` data. As in envd, a process lives until it exits or the stream's
//! `Connect-Timeout-Ms` passes (then it is killed), not until the client disconnects. While
//! the sandbox is paused nothing is read (a read would thaw the session): the streams only
//! keep alive.

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
/// How often a stream looks again whether its paused sandbox was resumed.
const PAUSED_RECHECK: Duration = Duration::from_millis(200);

#[derive(Deserialize, Default)]
#[serde(default)]
struct ProcessConfig {
    cmd: String,
    args: Vec<String>,
    envs: BTreeMap<String, String>,
    cwd: Option<String>,
}

/// envd's `PTY.Size`.
#[derive(Deserialize, Default, Clone, Copy)]
#[serde(default)]
struct PtySize {
    rows: u32,
    cols: u32,
}

/// envd's `PTY`: a terminal, of this size.
#[derive(Deserialize, Default)]
#[serde(default)]
struct Pty {
    size: Option<PtySize>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct StartRequest {
    process: ProcessConfig,
    tag: Option<String>,
    stdin: Option<bool>,
    pty: Option<Pty>,
}

/// `Update`: a terminal's new size.
#[derive(Deserialize, Default)]
#[serde(default)]
struct UpdateRequest {
    process: Selector,
    pty: Option<Pty>,
}

/// One message of a `StreamInput` client stream: the first names the process, then data.
#[derive(Deserialize, Default)]
#[serde(default)]
struct StreamInputMessage {
    start: Option<StreamInputStart>,
    data: Option<StreamInputData>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct StreamInputStart {
    process: Selector,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct StreamInputData {
    input: BTreeMap<String, String>,
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
        "Update" => update(sandbox, body).await,
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
        .filter(|(_, p)| p.foreground.is_some() || running.contains(&p.process_id.as_str()))
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
    write_input(sandbox, &proc, &request.input.unwrap_or_default()).await?;
    Ok(json!({}))
}

/// The answer to input for a process started without stdin, as envd's.
fn no_stdin() -> RpcError {
    RpcError::new(
        Code::FailedPrecondition,
        "the process was started without stdin: start it with stdin=True to send it input",
    )
}

/// Writes envd's `ProcessInput` (`stdin` or `pty`, base64) to the process: a terminal's input
/// goes to its terminal, which is the process's stdin.
async fn write_input(
    sandbox: &Sandbox,
    proc: &Proc,
    input: &BTreeMap<String, String>,
) -> Result<(), RpcError> {
    if proc.foreground.is_some() {
        return Err(no_stdin());
    }
    let Some((kind, data)) = input.get_key_value("stdin").or(input.get_key_value("pty")) else {
        return Err(RpcError::new(
            Code::InvalidArgument,
            "input: neither `stdin` nor `pty` given",
        ));
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(|e| RpcError::new(Code::InvalidArgument, format!("{kind}: not base64: {e}")))?;
    // The `process` tool writes text: binary input is refused rather than mangled.
    let text = String::from_utf8(bytes).map_err(|_| {
        RpcError::new(
            Code::InvalidArgument,
            format!("{kind}: only UTF-8 text is accepted"),
        )
    })?;
    call(
        sandbox,
        "process",
        json!({"action": "write", "session_id": proc.process_id, "data": text}),
    )
    .await?;
    Ok(())
}

/// `Update`: the terminal's new size (its programs get SIGWINCH).
async fn update(sandbox: &Sandbox, body: &[u8]) -> Result<Value, RpcError> {
    let request: UpdateRequest = parse(body)?;
    let (_, proc) = select(sandbox, &request.process)?;
    let Some(size) = request.pty.and_then(|p| p.size) else {
        return Ok(json!({}));
    };
    if proc.foreground.is_some() {
        return Err(RpcError::new(
            Code::FailedPrecondition,
            "the process was started without a terminal (pty): it has no size",
        ));
    }
    resize(sandbox, &proc.process_id, size).await?;
    Ok(json!({}))
}

/// Where a terminal process records its terminal's device (in the sandbox's own `/tmp`),
/// followed by a key of its own.
const TTY_FILE_PREFIX: &str = "/tmp/.paddock-e2b-tty-";

/// The command line of a terminal process: it records its terminal in [`TTY_FILE_PREFIX`]`key`
/// and gives it `size` (a terminal starts at 40x120), then runs `command`.
fn pty_command_line(key: &str, size: Option<PtySize>, command: &str) -> String {
    let mut out = format!("tty > {TTY_FILE_PREFIX}{key} 2>/dev/null; ");
    if let Some(size) = size {
        let (rows, cols) = terminal_size(size);
        out.push_str(&format!("stty rows {rows} cols {cols} 2>/dev/null; "));
    }
    out.push_str(command);
    out
}

/// The key of a terminal process's command line ([`pty_command_line`]).
fn tty_key(command: &str) -> Option<&str> {
    let rest = command.split_once(TTY_FILE_PREFIX)?.1;
    rest.split(' ')
        .next()
        .filter(|k| !k.is_empty() && k.chars().all(|c| c.is_ascii_hexdigit()))
}

/// Rows and columns kept within 1..=1000, the `process` tool's range.
fn terminal_size(size: PtySize) -> (u32, u32) {
    (size.rows.clamp(1, 1000), size.cols.clamp(1, 1000))
}

/// Gives process `process_id`'s terminal `size`: `process resize` where the backend holds the
/// terminal (the local sandbox, srun); otherwise (docker, ssh, apptainer: the terminal is on
/// the far side of their client) `stty -F` of the device the process recorded, run in the
/// session. Either way the kernel sends its programs SIGWINCH.
async fn resize(sandbox: &Sandbox, process_id: &str, size: PtySize) -> Result<(), RpcError> {
    let (rows, cols) = terminal_size(size);
    let native = call(
        sandbox,
        "process",
        json!({"action": "resize", "session_id": process_id, "rows": rows, "cols": cols}),
    )
    .await;
    let Err(refused) = native else {
        return Ok(());
    };
    let listed = call(sandbox, "process", json!({"action": "list"})).await?;
    let key = listed["processes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["session_id"] == process_id)
        .and_then(|p| p["command"].as_str())
        .and_then(tty_key)
        .map(str::to_owned);
    let Some(key) = key else {
        return Err(refused);
    };
    let made = call(
        sandbox,
        "terminal",
        json!({"command": format!(
            "stty -F \"$(cat {TTY_FILE_PREFIX}{key})\" rows {rows} cols {cols}"
        )}),
    )
    .await?;
    if made["exit_code"] != json!(0) {
        return Err(RpcError::new(
            Code::Internal,
            format!(
                "the terminal could not be resized: {}",
                made["output"].as_str().unwrap_or_default().trim()
            ),
        ));
    }
    Ok(())
}

/// `StreamInput`: the client stream's messages, in order (the request body is read whole
/// first, so its input is written when the client ends the stream).
async fn stream_input(sandbox: &Sandbox, body: &[u8]) -> Result<(), RpcError> {
    let envelopes = super::connect::read_envelopes(body)
        .map_err(|e| RpcError::new(Code::InvalidArgument, e.to_string()))?;
    let mut target: Option<Proc> = None;
    for (_, message) in envelopes {
        let message: StreamInputMessage = parse(message)?;
        if let Some(start) = message.start {
            target = Some(select(sandbox, &start.process)?.1);
        }
        if let Some(data) = message.data {
            let Some(proc) = &target else {
                return Err(RpcError::new(
                    Code::InvalidArgument,
                    "input came before the stream's start message",
                ));
            };
            write_input(sandbox, proc, &data.input).await?;
        }
    }
    if target.is_none() {
        return Err(RpcError::new(
            Code::InvalidArgument,
            "the stream named no process",
        ));
    }
    Ok(())
}

async fn close_stdin(sandbox: &Sandbox, body: &[u8]) -> Result<Value, RpcError> {
    let request: Selected = parse(body)?;
    let (_, proc) = select(sandbox, &request.process)?;
    if proc.foreground.is_some() {
        // Started without stdin: it is closed already.
        return Ok(json!({}));
    }
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
    let (pid, proc) = select(sandbox, &request.process)?;
    if let Some(run) = &proc.foreground {
        // envd's signals are KILL and TERM; either ends a foreground call's command (and
        // what it started) with SIGKILL. Gone from `List` at once, as envd's killed process.
        sandbox.procs().remove(&pid);
        run.kill();
        return Ok(json!({}));
    }
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
    if method == "StreamInput" {
        // A client stream: one answer message, then the end.
        match stream_input(&sandbox, body).await {
            Ok(()) => {
                let _ = tx.send(envelope(0, &json!({})));
                let _ = tx.send(end_envelope(None));
            }
            Err(err) => {
                let _ = tx.send(end_envelope(Some(&err)));
            }
        }
        drop(tx);
        return response(
            200,
            "application/connect+json",
            Body::from_stream(chunks(rx)),
        );
    }
    let started = match method {
        "Start" => start(&sandbox, body, deadline, &tx).await,
        "Connect" => attach(&sandbox, body, &tx).await,
        other => Err(RpcError::new(
            Code::Unimplemented,
            format!("process.Process/{other} is not served by Paddock yet"),
        )),
    };
    match started {
        // A foreground call streams to `tx` by itself.
        Ok(None) => {}
        Ok(Some((pid, proc, from))) => {
            let deadline = deadline.map(|d| Instant::now() + d);
            tokio::spawn(pump(sandbox, pid, proc, from, deadline, tx));
        }
        Err(err) => {
            let _ = tx.send(end_envelope(Some(&err)));
        }
    }
    response(
        200,
        "application/connect+json",
        Body::from_stream(chunks(rx)),
    )
}

/// The response body of a stream: the envelopes as they are sent, those already queued
/// together in one chunk (one write: a command's end and the stream's end go out at once).
pub(crate) fn chunks(
    rx: tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>,
) -> impl futures_util::Stream<Item = Result<Bytes, std::convert::Infallible>> {
    futures_util::stream::unfold(rx, |mut rx| async move {
        let mut chunk = rx.recv().await?;
        while let Ok(more) = rx.try_recv() {
            chunk.extend_from_slice(&more);
        }
        Some((Ok(Bytes::from(chunk)), rx))
    })
}

/// What a started or re-attached background process streams: its pid, record and where its
/// output starts; `None` for a foreground call, which streams by itself.
type Followed = Option<(u32, Proc, (u64, u64))>;

/// Starts the process: as a foreground call when it can be (`foreground::fits`), else as a
/// background process.
async fn start(
    sandbox: &Arc<Sandbox>,
    body: &[u8],
    deadline: Option<Duration>,
    tx: &tokio::sync::mpsc::UnboundedSender<Vec<u8>>,
) -> Result<Followed, RpcError> {
    let envelopes = super::connect::read_envelopes(body)
        .map_err(|e| RpcError::new(Code::InvalidArgument, e.to_string()))?;
    let Some((_, message)) = envelopes.first() else {
        return Err(RpcError::new(Code::InvalidArgument, "no request message"));
    };
    let request: StartRequest = parse(message)?;
    let config = request.process;
    let mut command = command_line(&config.cmd, &config.args);
    if let Some(pty) = &request.pty {
        let key = super::state::random_hex(8)
            .map_err(|e| RpcError::new(Code::Internal, e.to_string()))?;
        command = pty_command_line(&key, pty.size, &command);
    }
    let mut args = json!({"command": command});
    if let Some(cwd) = config.cwd.as_deref().filter(|c| !c.is_empty()) {
        args["workdir"] = json!(super::wire::absolute(&sandbox.cwd, cwd));
    }
    if !config.envs.is_empty() {
        args["env"] = json!(config.envs);
    }
    let foreground = super::foreground::fits(request.stdin, request.pty.is_some(), deadline);
    let mut proc = Proc {
        process_id: String::new(),
        cmd: config.cmd,
        args: config.args,
        envs: config.envs,
        cwd: config.cwd,
        tag: request.tag,
        foreground: None,
    };
    if let (true, Some(deadline)) = (foreground, deadline) {
        super::foreground::start(sandbox.clone(), args, proc, deadline, tx.clone());
        return Ok(None);
    }
    args["background"] = json!(true);
    if request.pty.is_some() {
        args["pty"] = json!(true);
    }
    let answer = call(sandbox, "terminal", args).await?;
    let Some(process_id) = answer["session_id"].as_str().map(str::to_owned) else {
        return Err(RpcError::new(Code::Internal, "terminal gave no process id"));
    };
    if request.stdin != Some(true) && request.pty.is_none() {
        // envd closes the stdin of a process started without `stdin: true` (a terminal's
        // input stays open: closing it would send ^D).
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
        .unwrap_or_else(|| sandbox.new_pid());
    proc.process_id = process_id;
    // A reused pid gets a new record: an old exit is never reported for it.
    sandbox.procs().insert(pid, proc.clone());
    Ok(Some((pid, proc, (0, 0))))
}

/// Re-attaches to a started process, from what it has written so far.
async fn attach(
    sandbox: &Sandbox,
    body: &[u8],
    tx: &tokio::sync::mpsc::UnboundedSender<Vec<u8>>,
) -> Result<Followed, RpcError> {
    let envelopes = super::connect::read_envelopes(body)
        .map_err(|e| RpcError::new(Code::InvalidArgument, e.to_string()))?;
    let Some((_, message)) = envelopes.first() else {
        return Err(RpcError::new(Code::InvalidArgument, "no request message"));
    };
    let request: Selected = parse(message)?;
    let (pid, proc) = select(sandbox, &request.process)?;
    if let Some(run) = &proc.foreground {
        return if run.follow(pid, tx.clone()) {
            Ok(None)
        } else {
            Err(RpcError::new(
                Code::NotFound,
                "the process had already ended",
            ))
        };
    }
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
    Ok(Some((pid, proc, offsets)))
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
        if sandbox.paused.load(Ordering::Relaxed) {
            // Reading would thaw the session: only keep the stream alive until resumed.
            if quiet_since.elapsed() >= KEEPALIVE_AFTER {
                send(json!({"event": {"keepalive": {}}}));
                quiet_since = Instant::now();
            }
            tokio::time::sleep(PAUSED_RECHECK).await;
            continue;
        }
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
                let _ = tx.send(end_envelope(Some(&sandbox.stream_error(err))));
                return;
            }
        };
        // A terminal's output (stdout and stderr together) is `pty` data.
        let terminal = read["pty"] == Value::Bool(true);
        for stream in ["stdout", "stderr"] {
            if let Some(text) = read[stream].as_str().filter(|t| !t.is_empty()) {
                let kind = if terminal { "pty" } else { stream };
                send(json!({"event": {"data": {kind: b64(text.as_bytes())}}}));
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
    fn a_terminal_records_its_device_and_takes_its_size() {
        let size = PtySize {
            rows: 0,
            cols: 2000,
        };
        let line = pty_command_line("00ff", Some(size), "'/bin/bash' '-i' '-l'");
        assert_eq!(
            line,
            "tty > /tmp/.paddock-e2b-tty-00ff 2>/dev/null; stty rows 1 cols 1000 2>/dev/null; \
             '/bin/bash' '-i' '-l'"
        );
        assert_eq!(tty_key(&line), Some("00ff"));
        assert_eq!(tty_key("sleep 1"), None);
        assert_eq!(tty_key("echo /tmp/.paddock-e2b-tty-; x"), None);
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
