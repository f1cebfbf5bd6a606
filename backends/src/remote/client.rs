//! Running a transport's client program on this machine (`ssh`, `apptainer exec`): its stdout
//! (or terminal) goes to the command's output, its own stderr is kept apart, because that is
//! where the client says the target could not be reached.

use std::path::Path;
use std::process::Stdio;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::OutputSink;
use crate::{BackendError, Result};

/// What a client run ended with.
#[derive(Debug)]
pub struct ClientExit {
    pub status: i32,
    /// The client's own stderr (without a terminal; with one it is part of the output).
    pub stderr: String,
}

fn push(sink: &OutputSink, bytes: &[u8]) {
    sink.push(bytes);
}

fn exit_code_of(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// A child's stdin: a pipe when there is input to write into it, else nothing (a child that
/// reads gets end of file at once instead of waiting).
pub fn stdin_pipe(has_input: bool) -> Stdio {
    if has_input {
        Stdio::piped()
    } else {
        Stdio::null()
    }
}

/// Runs `program args`, feeding `stdin` then closing it. With `local_pty` the client gets a
/// terminal of its own on this side (its stdin, stdout and stderr).
pub async fn run_client(
    program: &Path,
    args: &[String],
    stdin: Option<Vec<u8>>,
    local_pty: bool,
    sink: OutputSink,
) -> Result<ClientExit> {
    if local_pty {
        return run_client_pty(program, args, stdin, sink).await;
    }
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .stdin(stdin_pipe(stdin.is_some()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| spawn_error(program, e))?;
    if let (Some(data), Some(mut pipe)) = (stdin, child.stdin.take()) {
        tokio::spawn(async move {
            let _ = pipe.write_all(&data).await;
            let _ = pipe.shutdown().await;
        });
    }
    let mut stdout = child
        .stdout
        .take()
        .ok_or_else(|| BackendError::Spawn(std::io::Error::other("no stdout pipe")))?;
    let mut stderr = child
        .stderr
        .take()
        .ok_or_else(|| BackendError::Spawn(std::io::Error::other("no stderr pipe")))?;
    let errors = tokio::spawn(async move {
        let mut text = Vec::new();
        let _ = (&mut stderr).take(64 * 1024).read_to_end(&mut text).await;
        String::from_utf8_lossy(&text).into_owned()
    });
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match stdout.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => push(&sink, &buf[..n]),
        }
    }
    let status = child.wait().await?;
    let stderr = errors.await.unwrap_or_default();
    Ok(ClientExit {
        status: exit_code_of(status),
        stderr,
    })
}

async fn run_client_pty(
    program: &Path,
    args: &[String],
    stdin: Option<Vec<u8>>,
    sink: OutputSink,
) -> Result<ClientExit> {
    let (mut pty, pts) =
        pty_process::open().map_err(|e| BackendError::Spawn(std::io::Error::other(e)))?;
    pty.resize(pty_process::Size::new(40, 120))
        .map_err(|e| BackendError::Spawn(std::io::Error::other(e)))?;
    let mut child = pty_process::Command::new(program)
        .args(args)
        .env("TERM", "xterm-256color")
        .kill_on_drop(true)
        .spawn(pts)
        .map_err(|e| spawn_error(program, std::io::Error::other(e)))?;
    if let Some(data) = &stdin {
        pty.write_all(data).await?;
    }
    let mut buf = vec![0u8; 64 * 1024];
    let mut status = None;
    loop {
        tokio::select! {
            read = pty.read(&mut buf) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => push(&sink, &buf[..n]),
            },
            s = child.wait(), if status.is_none() => {
                status = Some(s?);
                let until = tokio::time::Instant::now() + std::time::Duration::from_millis(150);
                while let Ok(Ok(n)) = tokio::time::timeout_at(until, pty.read(&mut buf)).await {
                    if n == 0 { break; }
                    push(&sink, &buf[..n]);
                }
                break;
            }
        }
    }
    let status = match status {
        Some(s) => s,
        None => child.wait().await?,
    };
    Ok(ClientExit {
        status: exit_code_of(status),
        stderr: String::new(),
    })
}

fn spawn_error(program: &Path, err: std::io::Error) -> BackendError {
    BackendError::Spawn(std::io::Error::new(
        err.kind(),
        format!("{}: {err}", program.display()),
    ))
}
