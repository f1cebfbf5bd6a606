//! The relay: an agent that is not on the engine's file system, reached over a byte stream the
//! engine already has to its machine (a Slurm step's standard input and output), with the agent
//! protocol unchanged.
//!
//! Two ends, both in this binary:
//! - the engine's side, `paddock-agent relay-listen --socket PATH [--send FILE] -- PROGRAM...`:
//!   a small detached process that runs PROGRAM (`srun --jobid=J --overlap ...`) with its
//!   standard input and output as the stream, waits for the far end's hello, then offers the
//!   usual Unix socket at PATH. Each connection to PATH becomes a channel of the stream, so the
//!   engine (a new `paddock call` each time, or a restarted engine) connects exactly as it
//!   connects to a local agent. When the stream ends (the job ended, srun was killed) the socket
//!   is removed and every open connection ends at once: the next command finds no relay and
//!   starts a new holder step, never a hang. `--send FILE` first writes FILE's bytes to
//!   PROGRAM's input (the agent binary, copied to the node per job).
//! - the node's side, `paddock-agent serve --socket PATH --relay-stdio`: the agent serving its
//!   socket on the node as usual, plus the relay on its standard input and output: each channel
//!   the engine opens is a connection to that socket, and nothing else (the stream reaches no
//!   other address, and carries only what the agent's socket says). When its input ends the
//!   agent exits, and with it the holder step.
//!
//! Authentication is the stream's own: only the job's owner can start a step in a Slurm job
//! (munge-signed), and the engine's socket lies in the home's agent directory, 0700.

pub mod direct;
pub mod liveness;
pub mod mux;
pub mod wire;

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::AgentError;
use crate::server::{ServeOptions, lock_path};
use liveness::Liveness;
use mux::{Mux, tracing_line};
use wire::{Frame, RELAY_VERSION};

/// What `relay-listen` was asked to do.
#[derive(Debug, Clone)]
pub struct ListenOptions {
    /// The socket offered on this machine.
    pub socket: PathBuf,
    /// A file written to the program's input before anything else.
    pub send: Option<PathBuf>,
    /// The program whose standard input and output are the stream.
    pub argv: Vec<String>,
    /// Connections go directly to this host (the node's address), at the port its agent
    /// offers, with a token sent over the stream ([`direct`]); `None`: over the stream itself.
    pub direct_host: Option<String>,
}

/// Reads the stream's lines, giving each frame to `each`; stray lines are reported. After a
/// batch (all that had arrived) holding more than acknowledgements, `mux` answers
/// [`Frame::Ack`]. Returns at the end of the stream, or when `each` answers `false`.
fn read_frames(
    reader: &mut BufReader<impl std::io::Read>,
    mux: Option<&Mux>,
    mut each: impl FnMut(Frame) -> bool,
) {
    let mut line = Vec::new();
    let mut unacknowledged = false;
    loop {
        if unacknowledged && reader.buffer().is_empty() {
            if let Some(mux) = mux {
                let _ = mux.send(&Frame::Ack);
            }
            unacknowledged = false;
        }
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches('\n');
        match Frame::decode(text) {
            Some(frame) => {
                unacknowledged |= frame != Frame::Ack;
                if !each(frame) {
                    return;
                }
            }
            None if text.is_empty() => {}
            None => tracing_line(&format!("the far end printed: {text}")),
        }
    }
}

/// `relay-listen`: runs until the stream ends; answers the program's exit status.
pub fn listen(options: &ListenOptions) -> Result<i32, AgentError> {
    let socket_error = |e: std::io::Error| AgentError::Socket {
        path: options.socket.clone(),
        source: e,
    };
    // One relay per socket: a second start for the same session gives way.
    let lock_file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(lock_path(&options.socket))
        .map_err(socket_error)?;
    match rustix::fs::flock(
        &lock_file,
        rustix::fs::FlockOperation::NonBlockingLockExclusive,
    ) {
        Ok(()) => {}
        Err(rustix::io::Errno::WOULDBLOCK) => return Err(AgentError::AlreadyRunning),
        Err(e) => return Err(socket_error(e.into())),
    }
    let Some((program, args)) = options.argv.split_first() else {
        return Err(AgentError::Usage("relay-listen: no program given".into()));
    };
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| AgentError::StartFailed(format!("cannot run {program}: {e}")))?;
    let (Some(mut input), Some(output)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(AgentError::StartFailed(
            "the program's pipes are missing".into(),
        ));
    };
    if let Some(file) = &options.send {
        let mut source = std::fs::File::open(file)
            .map_err(|e| AgentError::StartFailed(format!("cannot read {}: {e}", file.display())))?;
        std::io::copy(&mut source, &mut input)
            .and_then(|_| input.flush())
            .map_err(|e| {
                AgentError::StartFailed(format!(
                    "the far end did not take {} ({e}): {}",
                    file.display(),
                    ended(&mut child)
                ))
            })?;
    }
    let token = match &options.direct_host {
        Some(_) => {
            let token = direct::new_token()?;
            let line = Frame::Token {
                token: token.clone(),
            }
            .encode();
            input
                .write_all(line.as_bytes())
                .and_then(|()| input.flush())
                .map_err(|e| {
                    AgentError::StartFailed(format!(
                        "the far end did not take its token ({e}): {}",
                        ended(&mut child)
                    ))
                })?;
            Some(token)
        }
        None => None,
    };
    let mut reader = BufReader::with_capacity(256 * 1024, output);
    let mut hello = None;
    read_frames(&mut reader, None, |frame| {
        if let Frame::Hello { version, port } = frame {
            hello = Some((version, port));
            return false;
        }
        true
    });
    let direct = match (hello, &options.direct_host, token) {
        (Some((RELAY_VERSION, _)), None, _) => None,
        (Some((RELAY_VERSION, Some(port))), Some(host), Some(token)) => {
            Some((host.clone(), port, token))
        }
        (Some((RELAY_VERSION, None)), Some(_), _) => {
            let _ = child.kill();
            return Err(AgentError::StartFailed(
                "the far end offers no direct port (it was not started with --relay-direct)".into(),
            ));
        }
        (Some((RELAY_VERSION, Some(_))), Some(_), None) => {
            return Err(AgentError::StartFailed("no token was made".into()));
        }
        (Some((other, _)), _, _) => {
            let _ = child.kill();
            return Err(AgentError::StartFailed(format!(
                "the far end speaks relay version {other}, this end {RELAY_VERSION}"
            )));
        }
        (None, _, _) => {
            return Err(AgentError::StartFailed(format!(
                "the far end ended before its agent listened: {}",
                ended(&mut child)
            )));
        }
    };
    // Holding the lock, a socket file left here is a dead relay's.
    let _ = std::fs::remove_file(&options.socket);
    let listener = UnixListener::bind(&options.socket).map_err(socket_error)?;
    let _ = std::fs::set_permissions(&options.socket, std::fs::Permissions::from_mode(0o600));
    let mux = Mux::new(Box::new(input))?;
    // Shared with the accept thread, which ends it when the node's end is gone.
    let child = Arc::new(Mutex::new(child));
    // Every byte on the stream: a node that falls silent is found by the beat (the direct
    // connections watch themselves).
    let liveness = direct.is_none().then(Liveness::new);
    if let Some(liveness) = &liveness {
        let (mux, child, socket) = (mux.clone(), child.clone(), options.socket.clone());
        liveness.watch(mux.clone(), move |silent| {
            tracing_line(&format!(
                "the far end sent nothing for {} s (a node cut off or gone): the relay ends",
                silent.as_secs()
            ));
            let _ = std::fs::remove_file(&socket);
            mux.shut_all();
            if let Ok(mut child) = child.lock() {
                let _ = child.kill();
            }
        })?;
    }
    {
        let mux = mux.clone();
        let child = child.clone();
        let socket = options.socket.clone();
        std::thread::Builder::new()
            .name("relay-accept".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    match conn {
                        Ok(conn) => {
                            let carried = match &direct {
                                None => mux.open(conn),
                                Some((host, port, token)) => {
                                    let (host, port, token) = (host.clone(), *port, token.clone());
                                    let (child, socket) = (child.clone(), socket.clone());
                                    std::thread::Builder::new()
                                        .name("relay-direct-conn".into())
                                        .spawn(move || match direct::dial_node(&host, port, &token) {
                                            Ok(node) => {
                                                if let Err(err) = direct::carry_to_node(conn, node) {
                                                    tracing_line(&format!(
                                                        "a connection to {host}:{port} failed: {err}"
                                                    ));
                                                }
                                            }
                                            Err(err) => node_gone(&host, port, &err, &socket, &child),
                                        })
                                        .map(drop)
                                }
                            };
                            if let Err(err) = carried {
                                tracing_line(&format!("a connection was not carried: {err}"));
                            }
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(_) => return,
                    }
                }
            })?;
    }
    read_frames(&mut reader, Some(&mux), |frame| {
        if let Some(liveness) = &liveness {
            liveness.heard();
        }
        mux.route(frame, &|_| {
            Err(std::io::Error::other(
                "the engine's end opens no connection",
            ))
        });
        true
    });
    if let Some(liveness) = &liveness {
        liveness.stop();
    }
    // The stream is over: nothing may connect to a relay that carries nowhere.
    let _ = std::fs::remove_file(&options.socket);
    mux.shut_all();
    let status = match child.lock() {
        Ok(mut child) => ended(&mut child),
        Err(_) => "the relayed program's state was lost".to_owned(),
    };
    tracing_line(&format!("the stream ended: {status}"));
    drop(lock_file);
    Ok(0)
}

/// The node's listener does not answer (its agent, or the whole node, is gone): the relay
/// carries nowhere. Its socket goes first, so the next command finds no relay and starts a new
/// holder instead of connecting into nothing; ending the program ends the stream, and `listen`
/// returns.
fn node_gone(
    host: &str,
    port: u16,
    err: &std::io::Error,
    socket: &Path,
    child: &Mutex<std::process::Child>,
) {
    tracing_line(&format!(
        "the node's agent at {host}:{port} does not answer ({err}): the relay ends"
    ));
    let _ = std::fs::remove_file(socket);
    if let Ok(mut child) = child.lock() {
        let _ = child.kill();
    }
}

/// The program's end, as words.
fn ended(child: &mut std::process::Child) -> String {
    // The stream's end comes first; its program follows within moments, or is ended.
    for _ in 0..200 {
        if let Ok(Some(status)) = child.try_wait() {
            return format!("the relayed program exited ({status})");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
    "the relayed program did not exit with its stream and was killed".into()
}

/// Takes this process's standard input and output as the stream. It is this process's alone:
/// children (the agent's shells and commands, a relayed agent) must never write into it or hold
/// it open. Private, close-on-exec copies carry it; descriptors 0 and 1 become /dev/null and
/// standard error.
fn take_stdio() -> Result<(OwnedFd, OwnedFd), AgentError> {
    let stream_in = std::io::stdin().as_fd().try_clone_to_owned()?;
    let stream_out = std::io::stdout().as_fd().try_clone_to_owned()?;
    let null = std::fs::File::open("/dev/null")?;
    rustix::stdio::dup2_stdin(&null).map_err(std::io::Error::from)?;
    rustix::stdio::dup2_stdout(std::io::stderr().as_fd()).map_err(std::io::Error::from)?;
    Ok((stream_in, stream_out))
}

/// Waits until `socket` accepts; `gone` says why the agent will never listen, if it will not.
fn wait_listening(
    socket: &Path,
    mut gone: impl FnMut() -> Option<AgentError>,
) -> Result<(), AgentError> {
    loop {
        if UnixStream::connect(socket).is_ok() {
            return Ok(());
        }
        if let Some(err) = gone() {
            return Err(err);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The node's end of the stream, once the agent listens on `socket`: the token first when
/// `direct` (then the listener), the hello, then channels until the stream ends. Without
/// `direct` the stream beats, and an engine's end silent past [`liveness::SILENCE_LIMIT`] (this
/// node cut off) runs `lost`, which must end the process: the stream's reader cannot be woken.
fn carry_stdio(
    stream_in: OwnedFd,
    stream_out: OwnedFd,
    socket: &Path,
    direct: bool,
    lost: impl FnOnce() + Send + 'static,
) -> Result<(), AgentError> {
    let mut reader = BufReader::with_capacity(256 * 1024, std::fs::File::from(stream_in));
    let port = if direct {
        // The token comes first on the stream; only then is anything listened for.
        let mut token = None;
        read_frames(&mut reader, None, |frame| {
            if let Frame::Token { token: given } = frame {
                token = Some(given);
                return false;
            }
            true
        });
        let token = token.ok_or_else(|| {
            AgentError::StartFailed("the stream ended before the relay's token came".into())
        })?;
        Some(direct::listen_on_node(token, socket.to_path_buf())?)
    } else {
        None
    };
    let mux = Mux::new(Box::new(std::fs::File::from(stream_out)))?;
    mux.send(&Frame::Hello {
        version: RELAY_VERSION,
        port,
    })?;
    let liveness = (!direct).then(Liveness::new);
    if let Some(liveness) = &liveness {
        let carried = mux.clone();
        liveness.watch(mux.clone(), move |silent| {
            tracing_line(&format!(
                "the engine's end sent nothing for {} s (this node cut off): the relay ends",
                silent.as_secs()
            ));
            carried.shut_all();
            lost();
        })?;
    }
    read_frames(&mut reader, Some(&mux), |frame| {
        if let Some(liveness) = &liveness {
            liveness.heard();
        }
        mux.route(frame, &|_| UnixStream::connect(socket));
        true
    });
    if let Some(liveness) = &liveness {
        liveness.stop();
    }
    mux.shut_all();
    Ok(())
}

/// `serve --relay-stdio [--relay-direct]`: the agent serves `options.socket` and carries the
/// stream's connections to it. Returns only on an error before the agent listened; at the end
/// of the stream the process exits.
pub fn serve_stdio(options: ServeOptions, direct: bool) -> Result<(), AgentError> {
    let (stream_in, stream_out) = take_stdio()?;
    let socket = options.socket.clone();
    let (done, serving) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("agent-serve".into())
        .spawn(move || {
            let _ = done.send(crate::server::serve(&options));
        })?;
    wait_listening(&socket, || match serving.try_recv() {
        Ok(Err(err)) => Some(err),
        Ok(Ok(())) | Err(std::sync::mpsc::TryRecvError::Disconnected) => {
            Some(AgentError::StartFailed("the agent stopped at start".into()))
        }
        Err(std::sync::mpsc::TryRecvError::Empty) => None,
    })?;
    let silent_socket = socket.clone();
    carry_stdio(stream_in, stream_out, &socket, direct, move || {
        let _ = std::fs::remove_file(&silent_socket);
        std::process::exit(0)
    })?;
    // The engine's end is gone: so is this agent (its socket first, so nothing new connects).
    let _ = std::fs::remove_file(&socket);
    tracing_line("the stream ended; the agent exits");
    std::process::exit(0)
}

/// `relay-node --socket PATH [--direct] -- PROGRAM...`: the node's end for an agent that runs in
/// another program (an Apptainer instance, whose network namespace is empty): PROGRAM serves
/// `socket`, this process carries the stream to it, and ends PROGRAM when the stream ends.
pub fn relay_node(socket: &Path, direct: bool, argv: &[String]) -> Result<i32, AgentError> {
    let Some((program, args)) = argv.split_first() else {
        return Err(AgentError::Usage("relay-node: no program given".into()));
    };
    let (stream_in, stream_out) = take_stdio()?;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .spawn()
        .map_err(|e| AgentError::StartFailed(format!("cannot run {program}: {e}")))?;
    wait_listening(socket, || {
        child.try_wait().ok().flatten().map(|status| {
            AgentError::StartFailed(format!("{program} ended before it listened ({status})"))
        })
    })?;
    let child = Arc::new(Mutex::new(child));
    let silent_child = child.clone();
    let carried = carry_stdio(stream_in, stream_out, socket, direct, move || {
        if let Ok(mut child) = silent_child.lock() {
            let _ = child.kill();
            let _ = child.wait();
        }
        std::process::exit(0)
    });
    if let Ok(mut child) = child.lock() {
        let _ = child.kill();
        let _ = child.wait();
    }
    tracing_line("the stream ended; the relayed agent was ended");
    carried.map(|()| 0)
}
