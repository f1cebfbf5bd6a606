//! The durable registry of background processes.
//!
//! Each process has a directory under the state root: `spec.json` (what to run, written by the
//! engine), `meta.json` (the [`ProcessRecord`]: PID and kernel start time of the command and of
//! its supervisor, written atomically by the supervisor), `log` (merged output), `stdin` and
//! `control` FIFOs, and when it ends `exit.json` and a `receipt.json` with secrets redacted.
//! Any later `paddock` process reads the same files: a process is adopted only when its PID and
//! start time both match the record, and a PID whose start time differs is never signalled.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::{BackendError, BackgroundRequest, Result};

/// What is known about a started background process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessRecord {
    pub id: String,
    pub session: String,
    pub command: String,
    pub pid: i32,
    pub start_time: u64,
    pub supervisor_pid: i32,
    pub supervisor_start_time: u64,
    pub started_at_ms: u64,
    pub pty: bool,
    pub notify_on_complete: bool,
}

/// How a background process ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExitRecord {
    pub exit_code: i32,
    pub ended_at_ms: u64,
    pub duration_ms: u64,
}

/// What stays after a process ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Receipt {
    pub id: String,
    pub session: String,
    pub command: String,
    pub exit_code: i32,
    pub started_at_ms: u64,
    pub ended_at_ms: u64,
    pub duration_ms: u64,
    /// The end of the output, secrets redacted.
    pub output_tail: String,
}

/// The engine's side of a spawn: what the supervisor reads.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProcessSpec {
    pub id: String,
    pub request: BackgroundRequest,
    /// The session's shell state directory (see `shell`).
    pub shell_state: PathBuf,
    pub env: std::collections::BTreeMap<String, String>,
    /// Set for the docker, ssh and apptainer backends: the host client to run instead of the
    /// local shell, and how to end the process tree on the target.
    #[serde(default)]
    pub remote: Option<crate::launch::RemoteLaunch>,
    /// Set for a sandboxed local backend: the whole argv (sandbox, then bash and the wrapper).
    #[serde(default)]
    pub local_argv: Option<Vec<String>>,
}

/// Where a process is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcessState {
    Running,
    Exited,
    /// Neither running nor an exit record: its supervisor died (machine reboot, kill -9).
    Lost,
}

/// A process as `process list` / `poll` show it.
#[derive(Debug, Clone, Serialize)]
pub struct ProcessStatus {
    #[serde(flatten)]
    pub record: ProcessRecord,
    pub state: ProcessState,
    pub exit_code: Option<i32>,
    pub log_bytes: u64,
    /// Completed with `notify_on_complete` and not yet seen by the agent.
    pub unread_completion: bool,
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Writes `value` as JSON to `path` atomically (temp file, fsync, rename).
pub fn write_json_atomic<T: Serialize>(path: &Path, value: &T) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    {
        let mut file = std::fs::File::create(&tmp)?;
        serde_json::to_writer_pretty(&mut file, value).map_err(std::io::Error::other)?;
        file.write_all(b"\n")?;
        file.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Option<T> {
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
}

/// The registry rooted at one state directory.
#[derive(Debug, Clone)]
pub struct ProcessRegistry {
    root: PathBuf,
}

impl ProcessRegistry {
    pub fn new(root: PathBuf) -> Self {
        Self { root }
    }

    fn dir(&self, id: &str) -> Result<PathBuf> {
        if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(BackendError::UnknownProcess(id.to_owned()));
        }
        Ok(self.root.join(id))
    }

    /// A fresh process id.
    pub fn new_id() -> String {
        let mut random = [0u8; 6];
        getrandom_fill(&mut random);
        format!("p_{}", hex::encode(random))
    }

    /// Starts the command `spec` describes under a detached supervisor (`exe __supervise DIR`).
    pub async fn start(&self, exe: &Path, spec: ProcessSpec) -> Result<ProcessRecord> {
        let id = spec.id.clone();
        let dir = self.root.join(&id);
        let state_err = |e: std::io::Error| BackendError::State {
            path: dir.display().to_string(),
            reason: e.to_string(),
        };
        std::fs::create_dir_all(&dir).map_err(state_err)?;
        write_json_atomic(&dir.join("spec.json"), &spec).map_err(state_err)?;
        for fifo in ["stdin", "control"] {
            nix::unistd::mkfifo(
                &dir.join(fifo),
                nix::sys::stat::Mode::from_bits_truncate(0o600),
            )
            .map_err(|e| state_err(e.into()))?;
        }
        let mut child = tokio::process::Command::new(exe)
            .arg(crate::launch::SUBCOMMAND)
            .arg(&dir)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(BackendError::Spawn)?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| BackendError::Spawn(std::io::Error::other("no supervisor pipe")))?;
        let mut lines = tokio::io::BufReader::new(stdout);
        let mut line = String::new();
        use tokio::io::AsyncBufReadExt;
        let read = tokio::time::timeout(Duration::from_secs(10), lines.read_line(&mut line)).await;
        // The supervisor detaches (setsid) and outlives us; reap it if it ends while we run.
        tokio::spawn(async move {
            let _ = child.wait().await;
        });
        match read {
            Ok(Ok(n)) if n > 0 => {
                serde_json::from_str::<ProcessRecord>(line.trim()).map_err(|_| {
                    BackendError::Process {
                        id: id.clone(),
                        reason: format!("the supervisor could not start it: {}", line.trim()),
                    }
                })
            }
            _ => Err(BackendError::Process {
                id,
                reason: "the supervisor did not report a start".into(),
            }),
        }
    }

    /// A process of `session`; another session's process is refused.
    pub fn get(&self, session: &str, id: &str) -> Result<ProcessRecord> {
        let dir = self.dir(id)?;
        let record: ProcessRecord = read_json(&dir.join("meta.json"))
            .ok_or_else(|| BackendError::UnknownProcess(id.to_owned()))?;
        if record.session != session {
            return Err(BackendError::OtherSession { id: id.to_owned() });
        }
        Ok(record)
    }

    pub fn status_of(&self, record: &ProcessRecord) -> ProcessStatus {
        let dir = self.root.join(&record.id);
        let exit: Option<ExitRecord> = read_json(&dir.join("exit.json"));
        let state = match &exit {
            Some(_) => ProcessState::Exited,
            None if crate::procfs::is_same_process(record.pid, record.start_time)
                || crate::procfs::is_same_process(
                    record.supervisor_pid,
                    record.supervisor_start_time,
                ) =>
            {
                ProcessState::Running
            }
            None => ProcessState::Lost,
        };
        let unread =
            record.notify_on_complete && exit.is_some() && !dir.join("completion_seen").exists();
        ProcessStatus {
            record: record.clone(),
            state,
            exit_code: exit.map(|e| e.exit_code),
            log_bytes: std::fs::metadata(dir.join("log"))
                .map(|m| m.len())
                .unwrap_or(0),
            unread_completion: unread,
        }
    }

    /// Marks a completion as seen by the agent.
    pub fn mark_seen(&self, record: &ProcessRecord) {
        let _ = std::fs::write(self.root.join(&record.id).join("completion_seen"), b"");
    }

    /// Every process of `session`, oldest first.
    pub fn list(&self, session: &str) -> Vec<ProcessStatus> {
        let mut out: Vec<ProcessStatus> = std::fs::read_dir(&self.root)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| read_json::<ProcessRecord>(&e.path().join("meta.json")))
            .filter(|r| r.session == session)
            .map(|r| self.status_of(&r))
            .collect();
        out.sort_by_key(|s| s.record.started_at_ms);
        out
    }

    /// Lines `offset..offset+limit` of the log (negative offset: from the end).
    pub fn log(
        &self,
        record: &ProcessRecord,
        offset: i64,
        limit: usize,
    ) -> Result<(Vec<String>, usize)> {
        let path = self.root.join(&record.id).join("log");
        let file = std::fs::File::open(&path).map_err(|e| BackendError::Process {
            id: record.id.clone(),
            reason: format!("no log: {e}"),
        })?;
        let lines: Vec<String> = std::io::BufReader::new(file)
            .split(b'\n')
            .map_while(std::result::Result::ok)
            .map(|l| {
                // A terminal ends lines with \r\n.
                let l = l.strip_suffix(b"\r").unwrap_or(&l);
                String::from_utf8_lossy(l).into_owned()
            })
            .collect();
        let total = lines.len();
        let start = if offset < 0 {
            total.saturating_sub(offset.unsigned_abs() as usize)
        } else {
            (offset as usize).min(total)
        };
        Ok((lines.into_iter().skip(start).take(limit).collect(), total))
    }

    /// Sends bytes to the process's stdin.
    pub fn write(&self, record: &ProcessRecord, data: &[u8]) -> Result<()> {
        self.write_fifo(record, "stdin", data)
    }

    /// Closes the process's stdin (EOF for the command).
    pub fn close_stdin(&self, record: &ProcessRecord) -> Result<()> {
        self.write_fifo(record, "control", b"close\n")
    }

    fn write_fifo(&self, record: &ProcessRecord, name: &str, data: &[u8]) -> Result<()> {
        if self.status_of(record).state != ProcessState::Running {
            return Err(BackendError::Process {
                id: record.id.clone(),
                reason: "is not running".into(),
            });
        }
        let path = self.root.join(&record.id).join(name);
        let mut fifo = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags_nonblock()
            .open(&path)
            .map_err(|e| BackendError::Process {
                id: record.id.clone(),
                reason: format!("its {name} is closed: {e}"),
            })?;
        fifo.write_all(data).map_err(|e| BackendError::Process {
            id: record.id.clone(),
            reason: format!("writing to {name}: {e}"),
        })
    }

    /// Ends the process's group (TERM, grace, KILL) after checking it is still the same process.
    /// On a remote backend the process tree on the target is ended first (through the
    /// transport), then the local client.
    pub async fn kill(&self, record: &ProcessRecord) -> Result<bool> {
        if !crate::procfs::is_same_process(record.pid, record.start_time) {
            return Ok(false);
        }
        let spec: Option<ProcessSpec> = read_json(&self.dir(&record.id)?.join("spec.json"));
        if let Some(launch) = spec.and_then(|s| s.remote)
            && let Some((program, args)) = launch.kill_argv.split_first()
        {
            let killed = tokio::time::timeout(
                Duration::from_secs(15),
                tokio::process::Command::new(program)
                    .args(args)
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::piped())
                    .kill_on_drop(true)
                    .output(),
            )
            .await;
            match killed {
                Ok(Ok(out)) if out.status.success() => {}
                Ok(Ok(out)) => tracing::warn!(
                    id = %record.id,
                    stderr = %String::from_utf8_lossy(&out.stderr),
                    "the kill command on the target failed"
                ),
                Ok(Err(err)) => {
                    tracing::warn!(id = %record.id, %err, "could not run the kill command")
                }
                Err(_) => tracing::warn!(id = %record.id, "the kill command timed out"),
            }
        }
        crate::kill::terminate_group(Some(record.pid)).await;
        Ok(true)
    }

    /// Waits up to `timeout` for the process to end; returns its status.
    pub async fn wait(&self, record: &ProcessRecord, timeout: Duration) -> ProcessStatus {
        let until = tokio::time::Instant::now() + timeout;
        let pidfd = if crate::procfs::is_same_process(
            record.supervisor_pid,
            record.supervisor_start_time,
        ) {
            rustix::process::Pid::from_raw(record.supervisor_pid).and_then(|pid| {
                rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
            })
        } else {
            None
        };
        if let Some(fd) = pidfd {
            // A pidfd is readable when the process exits; the supervisor exits right after
            // writing exit.json. The wait blocks one pool thread, not the runtime.
            let millis = until
                .saturating_duration_since(tokio::time::Instant::now())
                .as_millis();
            let millis = i32::try_from(millis).unwrap_or(i32::MAX);
            let _ = tokio::task::spawn_blocking(move || {
                use std::os::fd::AsFd;
                let mut fds = [nix::poll::PollFd::new(
                    fd.as_fd(),
                    nix::poll::PollFlags::POLLIN,
                )];
                let timeout =
                    nix::poll::PollTimeout::try_from(millis).unwrap_or(nix::poll::PollTimeout::MAX);
                let _ = nix::poll::poll(&mut fds, timeout);
            })
            .await;
        }
        self.status_of(record)
    }

    pub fn receipt(&self, record: &ProcessRecord) -> Option<Receipt> {
        read_json(&self.root.join(&record.id).join("receipt.json"))
    }

    /// Removes records of ended processes older than `max_age` and beyond the newest
    /// `max_receipts`. Running processes are never removed.
    pub fn prune(&self, max_age: Duration, max_receipts: usize) {
        let now = now_ms();
        let mut ended: Vec<(u64, PathBuf)> = std::fs::read_dir(&self.root)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                read_json::<ExitRecord>(&e.path().join("exit.json"))
                    .map(|x| (x.ended_at_ms, e.path()))
            })
            .collect();
        ended.sort_by_key(|(t, _)| std::cmp::Reverse(*t));
        for (i, (ended_at, path)) in ended.into_iter().enumerate() {
            if i >= max_receipts || now.saturating_sub(ended_at) > max_age.as_millis() as u64 {
                let _ = std::fs::remove_dir_all(path);
            }
        }
    }
}

trait NonBlockingOpen {
    fn custom_flags_nonblock(&mut self) -> &mut Self;
}

impl NonBlockingOpen for std::fs::OpenOptions {
    fn custom_flags_nonblock(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.custom_flags(libc_o_nonblock())
    }
}

fn libc_o_nonblock() -> i32 {
    nix::fcntl::OFlag::O_NONBLOCK.bits()
}

/// Random bytes from the kernel (ids must not collide across engine restarts).
fn getrandom_fill(buf: &mut [u8]) {
    let mut filled = 0;
    while filled < buf.len() {
        match rustix::rand::getrandom(&mut buf[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(_) => {
                // Fall back to time and pid; ids stay unique enough for one machine.
                let seed = now_ms() ^ (u64::from(std::process::id()) << 32);
                for (i, b) in buf.iter_mut().enumerate() {
                    *b = (seed >> ((i % 8) * 8)) as u8;
                }
                return;
            }
        }
    }
}
