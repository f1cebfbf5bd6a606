//! `serve --daemon`: start the agent detached and answer once its socket accepts connections, so
//! that the one command the engine runs through the backend's own client ends at once.

use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::AgentError;

/// How long a starting agent may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Starts `serve` (same arguments, without `--daemon`) detached, its stderr in `LOG`
/// (`<socket>.log`), and waits until the socket answers.
pub fn start_detached(socket: &Path, serve_args: &[String]) -> Result<(), AgentError> {
    // Not current_exe(): inside a container the bound binary may have been replaced on the
    // host, and only the kernel's own link still reaches the running one.
    let exe = std::path::PathBuf::from("/proc/self/exe");
    let mut log_name = socket.as_os_str().to_owned();
    log_name.push(".log");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_name)?;
    let mut child = Command::new(exe)
        .arg("serve")
        .args(serve_args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        // Its own group: the client that started us (docker exec, ssh) may signal ours.
        .process_group(0)
        .spawn()?;
    let started = Instant::now();
    loop {
        if UnixStream::connect(socket).is_ok() {
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            // Another agent holds the lock and may still be binding: give it the same time.
            if status.code() == Some(crate::EXIT_ALREADY_RUNNING) {
                if started.elapsed() > START_TIMEOUT {
                    return Err(AgentError::StartFailed(
                        "another agent holds the session's lock but does not answer".into(),
                    ));
                }
            } else {
                let text = std::fs::read_to_string(&log_name).unwrap_or_default();
                let tail: String = text.lines().rev().take(5).collect::<Vec<_>>().join(" | ");
                return Err(AgentError::StartFailed(format!(
                    "the agent exited ({status}): {tail}"
                )));
            }
        }
        if started.elapsed() > START_TIMEOUT {
            return Err(AgentError::StartFailed(format!(
                "no answer on {} after {} s",
                socket.display(),
                START_TIMEOUT.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}
