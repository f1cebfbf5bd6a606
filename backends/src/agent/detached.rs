//! An agent on this machine (the local backend's sandbox): started detached by the engine
//! itself, inside `paddock __sandbox-exec PROFILE`, so that one confined environment (its own
//! mount, PID, IPC, UTS and network namespaces, Landlock, seccomp) serves all of a session's
//! commands instead of being built again for each.
//!
//! The sandbox's init is PID 1 of the namespace: when the agent exits (idle, shutdown, killed)
//! the kernel ends everything left in the session's sandbox.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use super::link::{Link, LinkError};
use crate::{BackendError, Result};

/// How long a starting sandboxed agent may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// How to start one detached agent and where it listens.
#[derive(Debug, Clone)]
pub struct DetachedAgent {
    /// The socket (its directory exists).
    pub socket: PathBuf,
    /// The program and its arguments (the sandbox helper, then the agent's `serve` argv).
    pub program: PathBuf,
    pub args: Vec<String>,
    /// The whole environment it starts with (commands get theirs with each request).
    pub env: std::collections::BTreeMap<String, String>,
    /// Where the sandbox's and the agent's stderr go.
    pub log: PathBuf,
    /// For errors: `local`, and the backend's name.
    pub kind: &'static str,
    pub name: String,
}

impl DetachedAgent {
    fn unavailable(&self, reason: String) -> BackendError {
        BackendError::Unavailable {
            kind: self.kind.to_owned(),
            name: self.name.clone(),
            reason,
        }
    }

    /// A greeted connection, starting the agent when none answers.
    pub async fn connect(&self) -> Result<Link> {
        let mut replaced = false;
        for attempt in 0..2 {
            match Link::open(&self.socket).await {
                Ok((link, Ok(()))) => return Ok(link),
                Ok((link, Err(LinkError::Version { found, agent }))) if !replaced => {
                    tracing::info!(backend = %self.name, found, %agent, "replacing an agent of another protocol version");
                    let _ = link.shutdown().await;
                    super::wait_until_gone(&self.socket).await;
                    replaced = true;
                }
                Ok((_, Err(err))) | Err(err) => {
                    if attempt == 1 {
                        return Err(self.unavailable(format!(
                            "the session's sandboxed agent was started but does not answer on {}: {err}",
                            self.socket.display()
                        )));
                    }
                }
            }
            self.start().await?;
        }
        Err(self.unavailable("the session's sandboxed agent could not be reached".into()))
    }

    async fn start(&self) -> Result<()> {
        let started = Instant::now();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| self.unavailable(format!("cannot open {}: {e}", self.log.display())))?;
        let mut child = std::process::Command::new(&self.program)
            .args(&self.args)
            .env_clear()
            .envs(&self.env)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            // Not in the engine's process group: it outlives this engine (a later `paddock call`
            // finds it again) and ends on its own when idle.
            .process_group(0)
            .spawn()
            .map_err(|e| {
                self.unavailable(format!("cannot start {}: {e}", self.program.display()))
            })?;
        loop {
            if tokio::net::UnixStream::connect(&self.socket).await.is_ok() {
                // Reaped by a thread: the engine may live on for hours.
                std::thread::spawn(move || child.wait());
                tracing::debug!(backend = %self.name, ms = started.elapsed().as_millis() as u64, "sandboxed agent started");
                return Ok(());
            }
            if let Ok(Some(status)) = child.try_wait()
                && status.code() != Some(paddock_agent::EXIT_ALREADY_RUNNING)
            {
                return Err(self.unavailable(format!(
                    "the sandboxed agent exited at start ({status}): {}",
                    log_tail(&self.log)
                )));
            }
            if started.elapsed() > START_TIMEOUT {
                let _ = child.kill();
                return Err(self.unavailable(format!(
                    "the sandboxed agent did not listen within {} s: {}",
                    START_TIMEOUT.as_secs(),
                    log_tail(&self.log)
                )));
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

/// The last lines of a log, for an error message.
pub(crate) fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(5)..].join(" | ")
}
