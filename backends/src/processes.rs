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

/// The files of a command's stdout and stderr beside its log (the supervisor writes them).
pub const STDOUT_FILE: &str = "stdout";
pub const STDERR_FILE: &str = "stderr";

/// One read of a process's stream ([`ProcessRegistry::read_stream`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamRead {
    pub text: String,
    /// Where the next read starts.
    pub next_offset: u64,
    /// The stream's size so far.
    pub total_bytes: u64,
}

/// How many of `bytes` end on a whole UTF-8 character: an incomplete sequence at the end (at
/// most 3 bytes) waits for the next read; invalid bytes elsewhere are taken as they are.
fn whole_utf8_prefix(bytes: &[u8]) -> usize {
    match std::str::from_utf8(bytes) {
        Ok(_) => bytes.len(),
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        Err(_) => {
            // Invalid somewhere: only a sequence cut at the very end is held back.
            let tail_start = bytes.len().saturating_sub(3);
            (tail_start..bytes.len())
                .find(|&i| {
                    std::str::from_utf8(&bytes[i..])
                        .err()
                        .is_some_and(|e| e.valid_up_to() == 0 && e.error_len().is_none())
                })
                .unwrap_or(bytes.len())
        }
    }
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
        let file = match std::fs::File::open(&path) {
            Ok(file) => file,
            // A supervisor of an older build opens it a moment after the record is written:
            // nothing printed yet.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), 0)),
            Err(e) => {
                return Err(BackendError::Process {
                    id: record.id.clone(),
                    reason: format!("no log: {e}"),
                });
            }
        };
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

    /// What the process wrote on `stream` (`"stdout"` or `"stderr"`) from byte `offset`, at
    /// most `max_bytes`, ending on a whole UTF-8 character (a character split across the
    /// limit, or still being written, is in the next read). A process of an older build, with
    /// only the merged log, has it all as stdout and nothing on stderr.
    pub fn read_stream(
        &self,
        record: &ProcessRecord,
        stream: &str,
        offset: u64,
        max_bytes: usize,
    ) -> Result<StreamRead> {
        use std::io::{Read, Seek};
        let dir = self.root.join(&record.id);
        let mut path = dir.join(stream);
        if !path.exists() {
            if stream != STDERR_FILE {
                path = dir.join("log");
            }
            if !path.exists() {
                return Ok(StreamRead {
                    text: String::new(),
                    next_offset: offset,
                    total_bytes: 0,
                });
            }
        }
        let io = |e: std::io::Error| BackendError::Process {
            id: record.id.clone(),
            reason: format!("cannot read its {stream}: {e}"),
        };
        let mut file = std::fs::File::open(&path).map_err(io)?;
        let total_bytes = file.metadata().map_err(io)?.len();
        let offset = offset.min(total_bytes);
        file.seek(std::io::SeekFrom::Start(offset)).map_err(io)?;
        let mut bytes = Vec::new();
        file.take(max_bytes as u64)
            .read_to_end(&mut bytes)
            .map_err(io)?;
        let whole = whole_utf8_prefix(&bytes);
        bytes.truncate(whole);
        Ok(StreamRead {
            text: String::from_utf8_lossy(&bytes).into_owned(),
            next_offset: offset + whole as u64,
            total_bytes,
        })
    }

    /// Sends bytes to the process's stdin.
    pub fn write(&self, record: &ProcessRecord, data: &[u8]) -> Result<()> {
        self.write_fifo(record, "stdin", data)
    }

    /// Closes the process's stdin (EOF for the command).
    pub fn close_stdin(&self, record: &ProcessRecord) -> Result<()> {
        self.write_fifo(record, "control", b"close\n")
    }

    /// Gives a terminal process's terminal a new size (its programs get SIGWINCH). A process
    /// started without `pty`, or whose terminal is on the far side of a remote client, has
    /// none here to resize: said so.
    pub fn resize(&self, record: &ProcessRecord, rows: u16, cols: u16) -> Result<()> {
        if rows == 0 || cols == 0 {
            return Err(BackendError::Process {
                id: record.id.clone(),
                reason: format!(
                    "a terminal of {rows} rows and {cols} columns: both must be at least 1"
                ),
            });
        }
        let spec: Option<ProcessSpec> = read_json(&self.dir(&record.id)?.join("spec.json"));
        let local_terminal = spec.is_some_and(|s| s.remote.as_ref().is_none_or(|r| r.resizable));
        if !record.pty || !local_terminal {
            return Err(BackendError::Process {
                id: record.id.clone(),
                reason: "has no terminal to resize: start it with `pty: true` (a remote \
                         process's terminal is resized only where its client holds one)"
                    .into(),
            });
        }
        self.write_fifo(
            record,
            "control",
            format!("resize {rows} {cols}\n").as_bytes(),
        )
    }

    /// Sends `signal` to the process and what it started (its group here; on a remote
    /// backend, every process of its run on the target). Answers false when it had ended.
    pub async fn signal(
        &self,
        record: &ProcessRecord,
        signal: nix::sys::signal::Signal,
    ) -> Result<bool> {
        if !crate::procfs::is_same_process(record.pid, record.start_time)
            || self.status_of(record).state != ProcessState::Running
        {
            return Ok(false);
        }
        let spec: Option<ProcessSpec> = read_json(&self.dir(&record.id)?.join("spec.json"));
        if let Some(launch) = spec.and_then(|s| s.remote) {
            let argv: Vec<String> = launch
                .signal_argv
                .iter()
                .map(|a| a.replace(crate::launch::SIGNAL_PLACEHOLDER, signal.as_str()))
                .collect();
            let Some((program, args)) = argv.split_first() else {
                return Err(BackendError::Process {
                    id: record.id.clone(),
                    reason: "it was started by an engine without `process signal` (its launch \
                             names no way to signal it on the target); `kill` still ends it"
                        .into(),
                });
            };
            let out = tokio::time::timeout(
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
            return match out {
                Ok(Ok(out)) if out.status.success() => Ok(true),
                Ok(Ok(out)) => Err(BackendError::Process {
                    id: record.id.clone(),
                    reason: format!(
                        "signalling it on the target failed: {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    ),
                }),
                Ok(Err(err)) => Err(BackendError::Process {
                    id: record.id.clone(),
                    reason: format!("could not run the signal command: {err}"),
                }),
                Err(_) => Err(BackendError::Process {
                    id: record.id.clone(),
                    reason: "the signal command got no answer within 15 s".into(),
                }),
            };
        }
        nix::sys::signal::killpg(nix::unistd::Pid::from_raw(record.pid), signal).map_err(|e| {
            BackendError::Process {
                id: record.id.clone(),
                reason: format!("signalling its process group: {e}"),
            }
        })?;
        Ok(true)
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

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;
    use std::io::Read;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt, PermissionsExt};
    use std::os::unix::process::{CommandExt, ExitStatusExt};

    use pretty_assertions::assert_eq;

    use super::*;

    /// A stream read stops before a UTF-8 character cut at its end (the rest comes with the
    /// next read), never inside one, and takes invalid bytes elsewhere as they are.
    #[test]
    fn a_stream_read_ends_on_a_whole_character() {
        let euro = "\u{20ac}".as_bytes();
        assert_eq!(whole_utf8_prefix(b"abc"), 3);
        assert_eq!(whole_utf8_prefix(&[b'a', euro[0], euro[1]]), 1);
        assert_eq!(whole_utf8_prefix(&[b'a', euro[0], euro[1], euro[2]]), 4);
        assert_eq!(whole_utf8_prefix(&[0xff, b'a', euro[0]]), 2);
        assert_eq!(whole_utf8_prefix(&[b'a', 0xff]), 2);
        assert_eq!(whole_utf8_prefix(b""), 0);
    }

    /// A [`ProcessRecord`] as JSON, the one line a supervisor prints (`$id` works in
    /// [`fake_supervisor`]).
    pub(crate) fn record_json(id: &str, session: &str) -> String {
        format!(
            r#"{{"id":"{id}","session":"{session}","command":"sleep 1","pid":7,"start_time":8,"supervisor_pid":9,"supervisor_start_time":10,"started_at_ms":11,"pty":false,"notify_on_complete":true}}"#
        )
    }

    /// A stand-in for `paddock __supervise DIR`: notes its arguments in `DIR/supervisor-args`,
    /// prints `line` (if any; `$id` is the process id) and exits.
    pub(crate) fn fake_supervisor(dir: &Path, line: Option<&str>) -> PathBuf {
        let path = dir.join("fake-supervisor");
        let print = line
            .map(|l| format!("cat <<EOF\n{l}\nEOF\n"))
            .unwrap_or_default();
        std::fs::write(
            &path,
            format!(
                "#!/bin/sh\nprintf '%s\\n' \"$@\" > \"$2/supervisor-args\"\nid=${{2##*/}}\n{print}"
            ),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    /// No process has this pid (above any `pid_max`).
    const NO_PID: i32 = i32::MAX;

    fn me() -> (i32, u64) {
        let pid = std::process::id() as i32;
        (pid, crate::procfs::start_time(pid).unwrap())
    }

    /// A record of a process and supervisor that are gone.
    fn gone(id: &str, session: &str, started_at_ms: u64) -> ProcessRecord {
        ProcessRecord {
            id: id.to_owned(),
            session: session.to_owned(),
            command: format!("run {id}"),
            pid: NO_PID,
            start_time: 1,
            supervisor_pid: NO_PID,
            supervisor_start_time: 1,
            started_at_ms,
            pty: false,
            notify_on_complete: false,
        }
    }

    /// A record whose command is this test process (it runs, and nothing is signalled).
    fn running(id: &str) -> ProcessRecord {
        let (pid, start_time) = me();
        ProcessRecord {
            pid,
            start_time,
            ..gone(id, "s1", 1)
        }
    }

    struct Registry {
        registry: ProcessRegistry,
        root: PathBuf,
        _dir: tempfile::TempDir,
    }

    fn registry() -> Registry {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("processes");
        std::fs::create_dir_all(&root).unwrap();
        Registry {
            registry: ProcessRegistry::new(root.clone()),
            root,
            _dir: dir,
        }
    }

    impl Registry {
        fn put(&self, record: &ProcessRecord) -> PathBuf {
            let dir = self.root.join(&record.id);
            std::fs::create_dir_all(&dir).unwrap();
            write_json_atomic(&dir.join("meta.json"), record).unwrap();
            dir
        }

        fn exit(&self, id: &str, exit_code: i32, ended_at_ms: u64) {
            write_json_atomic(
                &self.root.join(id).join("exit.json"),
                &ExitRecord {
                    exit_code,
                    ended_at_ms,
                    duration_ms: 1,
                },
            )
            .unwrap();
        }

        fn fifo(&self, id: &str, name: &str) -> std::fs::File {
            let path = self.root.join(id).join(name);
            nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc_o_nonblock())
                .open(path)
                .unwrap()
        }
    }

    fn spec(id: &str, remote: Option<crate::launch::RemoteLaunch>) -> ProcessSpec {
        ProcessSpec {
            id: id.to_owned(),
            request: BackgroundRequest {
                command: "sleep 30".into(),
                session: "s1".into(),
                workdir: None,
                env: BTreeMap::new(),
                pty: false,
                notify_on_complete: false,
            },
            shell_state: PathBuf::from("/nonexistent/state"),
            env: BTreeMap::from([("PATH".to_owned(), "/usr/bin:/bin".to_owned())]),
            remote,
            local_argv: None,
        }
    }

    fn ids(statuses: &[ProcessStatus]) -> Vec<&str> {
        statuses.iter().map(|s| s.record.id.as_str()).collect()
    }

    fn reason(result: Result<()>) -> String {
        match result {
            Err(BackendError::Process { reason, .. }) => reason,
            other => panic!("expected a process error, got {other:?}"),
        }
    }

    #[test]
    fn json_is_replaced_whole_and_no_temporary_stays_behind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta.json");
        write_json_atomic(&path, &gone("p_1", "s1", 1)).unwrap();
        write_json_atomic(&path, &gone("p_2", "s1", 2)).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.ends_with("}\n"), "{text}");
        assert_eq!(
            serde_json::from_str::<ProcessRecord>(&text).unwrap(),
            gone("p_2", "s1", 2)
        );
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["meta.json"]);
    }

    #[test]
    fn a_record_is_read_back_by_its_own_session_only() {
        let r = registry();
        r.put(&gone("p_1", "s1", 1));
        assert_eq!(r.registry.get("s1", "p_1").unwrap(), gone("p_1", "s1", 1));
        let other = r.registry.get("s2", "p_1");
        assert!(
            matches!(&other, Err(BackendError::OtherSession { id }) if id == "p_1"),
            "{other:?}"
        );
    }

    #[test]
    fn unknown_ids_and_ids_that_are_not_plain_names_are_unknown_processes() {
        let r = registry();
        // A record beside the registry root, which `../escape` would name.
        let beside = r.root.with_file_name("escape");
        std::fs::create_dir_all(&beside).unwrap();
        write_json_atomic(&beside.join("meta.json"), &gone("escape", "s1", 1)).unwrap();
        for id in ["p_missing", "../escape", "", "p-1", "a/b", "."] {
            let result = r.registry.get("s1", id);
            assert!(
                matches!(&result, Err(BackendError::UnknownProcess(got)) if got == id),
                "{id:?}: {result:?}"
            );
        }
    }

    #[test]
    fn a_corrupt_or_half_written_meta_is_an_unknown_process() {
        let r = registry();
        let full = serde_json::to_string(&gone("p_1", "s1", 1)).unwrap();
        for text in ["", "not json", &full[..full.len() / 2]] {
            let dir = r.root.join("p_1");
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("meta.json"), text).unwrap();
            let result = r.registry.get("s1", "p_1");
            assert!(
                matches!(&result, Err(BackendError::UnknownProcess(id)) if id == "p_1"),
                "{text:?}: {result:?}"
            );
        }
    }

    #[test]
    fn a_listing_shows_one_session_oldest_first_and_skips_unreadable_records() {
        let r = registry();
        r.put(&gone("p_b", "s1", 200));
        r.put(&gone("p_a", "s1", 300));
        r.put(&gone("p_c", "s1", 100));
        r.put(&gone("p_other", "s2", 50));
        std::fs::create_dir_all(r.root.join("p_starting")).unwrap();
        let corrupt = r.root.join("p_corrupt");
        std::fs::create_dir_all(&corrupt).unwrap();
        std::fs::write(corrupt.join("meta.json"), "{\"id\":").unwrap();
        std::fs::write(r.root.join("stray-file"), "x").unwrap();
        assert_eq!(ids(&r.registry.list("s1")), vec!["p_c", "p_b", "p_a"]);
        assert_eq!(ids(&r.registry.list("s2")), vec!["p_other"]);
        assert_eq!(
            ids(&ProcessRegistry::new(r.root.join("missing")).list("s1")),
            Vec::<&str>::new()
        );
    }

    #[test]
    fn an_exit_record_makes_a_process_exited_with_its_code_and_log_size() {
        let r = registry();
        let record = ProcessRecord {
            notify_on_complete: true,
            ..running("p_1")
        };
        let dir = r.put(&record);
        std::fs::write(dir.join("log"), "hello").unwrap();
        r.exit("p_1", 3, now_ms());
        let status = r.registry.status_of(&record);
        assert_eq!(
            (
                status.state,
                status.exit_code,
                status.log_bytes,
                status.unread_completion
            ),
            (ProcessState::Exited, Some(3), 5, true)
        );
    }

    #[test]
    fn without_an_exit_a_process_runs_while_its_command_or_supervisor_is_the_recorded_one() {
        let r = registry();
        let (pid, start_time) = me();
        let cases = [
            (running("p_1"), ProcessState::Running),
            (
                ProcessRecord {
                    supervisor_pid: pid,
                    supervisor_start_time: start_time,
                    ..gone("p_2", "s1", 1)
                },
                ProcessState::Running,
            ),
            (gone("p_3", "s1", 1), ProcessState::Lost),
            // Our pid, but another start time: a recycled pid is not the process.
            (
                ProcessRecord {
                    pid,
                    start_time: start_time + 1,
                    ..gone("p_4", "s1", 1)
                },
                ProcessState::Lost,
            ),
        ];
        for (record, state) in cases {
            r.put(&record);
            let status = r.registry.status_of(&record);
            assert_eq!(
                (status.state, status.exit_code, status.log_bytes),
                (state, None, 0),
                "{}",
                record.id
            );
        }
    }

    #[test]
    fn a_completion_is_unread_until_seen_and_only_when_notify_was_asked() {
        let r = registry();
        let notify = ProcessRecord {
            notify_on_complete: true,
            ..gone("p_1", "s1", 1)
        };
        let quiet = gone("p_2", "s1", 1);
        let still_running = ProcessRecord {
            notify_on_complete: true,
            ..running("p_3")
        };
        for record in [&notify, &quiet, &still_running] {
            r.put(record);
        }
        r.exit("p_1", 0, now_ms());
        r.exit("p_2", 0, now_ms());
        let unread = |record: &ProcessRecord| r.registry.status_of(record).unread_completion;
        assert_eq!(
            (unread(&notify), unread(&quiet), unread(&still_running)),
            (true, false, false)
        );
        r.registry.mark_seen(&notify);
        assert!(!unread(&notify));
    }

    #[test]
    fn the_log_pages_lines_from_either_end_without_terminal_returns() {
        let r = registry();
        let record = gone("p_1", "s1", 1);
        let dir = r.put(&record);
        std::fs::write(dir.join("log"), "one\ntwo\r\nthree\nfour").unwrap();
        let page = |offset, limit| r.registry.log(&record, offset, limit).unwrap();
        let lines = |words: &[&str]| words.iter().map(|w| (*w).to_owned()).collect::<Vec<_>>();
        assert_eq!(page(0, 100), (lines(&["one", "two", "three", "four"]), 4));
        assert_eq!(page(1, 2), (lines(&["two", "three"]), 4));
        assert_eq!(page(-2, 100), (lines(&["three", "four"]), 4));
        assert_eq!(page(-10, 1), (lines(&["one"]), 4));
        assert_eq!(page(9, 10), (lines(&[]), 4));
    }

    /// The id is answered as soon as the record is written; a supervisor of an older build
    /// opened the log a moment later: asked in between, the process has printed nothing.
    #[test]
    fn a_process_whose_log_is_not_there_yet_has_printed_nothing() {
        let r = registry();
        let record = gone("p_1", "s1", 1);
        r.put(&record);
        assert_eq!(r.registry.log(&record, 0, 10).unwrap(), (Vec::new(), 0));
    }

    #[test]
    fn input_and_close_reach_the_fifos_of_a_running_process() {
        let r = registry();
        let record = running("p_1");
        r.put(&record);
        let mut stdin = r.fifo("p_1", "stdin");
        let mut control = r.fifo("p_1", "control");
        r.registry.write(&record, b"hello\n").unwrap();
        r.registry.close_stdin(&record).unwrap();
        let mut got = String::new();
        stdin.read_to_string(&mut got).unwrap();
        assert_eq!(got, "hello\n");
        got.clear();
        control.read_to_string(&mut got).unwrap();
        assert_eq!(got, "close\n");
    }

    #[test]
    fn input_to_a_process_that_is_not_running_is_refused_unwritten() {
        let r = registry();
        let record = gone("p_1", "s1", 1);
        r.put(&record);
        let mut stdin = r.fifo("p_1", "stdin");
        assert_eq!(reason(r.registry.write(&record, b"x")), "is not running");
        r.exit("p_1", 0, now_ms());
        let exited = running("p_1");
        assert_eq!(reason(r.registry.close_stdin(&exited)), "is not running");
        let mut got = String::new();
        // Nothing was written: a read finds no data (EOF: no writer).
        stdin.read_to_string(&mut got).unwrap();
        assert_eq!(got, "");
    }

    #[test]
    fn input_nobody_reads_is_refused_instead_of_blocking() {
        let r = registry();
        let record = running("p_1");
        let dir = r.put(&record);
        nix::unistd::mkfifo(
            &dir.join("stdin"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        assert!(
            reason(r.registry.write(&record, b"x")).starts_with("its stdin is closed: "),
            "no reader"
        );
        // No FIFO at all (a supervisor that never made it).
        let reason = reason(r.registry.close_stdin(&record));
        assert!(reason.starts_with("its control is closed: "), "{reason}");
    }

    /// `sleep 30` in a process group of its own, and its record.
    fn sleeper() -> (std::process::Child, ProcessRecord) {
        let child = std::process::Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let record = ProcessRecord {
            pid,
            start_time: crate::procfs::start_time(pid).unwrap(),
            ..gone("p_1", "s1", 1)
        };
        (child, record)
    }

    #[tokio::test]
    async fn kill_ends_the_recorded_process_group() {
        let r = registry();
        let (mut child, record) = sleeper();
        r.put(&record);
        assert!(r.registry.kill(&record).await.unwrap());
        assert_eq!(child.wait().unwrap().signal(), Some(libc_sigterm()));
    }

    #[tokio::test]
    async fn kill_ends_the_tree_on_the_target_before_the_local_client() {
        let r = registry();
        let (mut child, record) = sleeper();
        let dir = r.put(&record);
        let marker = dir.join("target-kill");
        let launch = crate::launch::RemoteLaunch {
            argv: vec!["unused".into()],
            kill_argv: vec![
                "/bin/sh".into(),
                "-c".into(),
                format!(
                    "kill -0 {} && echo client-alive > {}",
                    record.pid,
                    marker.display()
                ),
            ],
            signal_argv: Vec::new(),
            local_pty: false,
            resizable: false,
        };
        write_json_atomic(&dir.join("spec.json"), &spec("p_1", Some(launch))).unwrap();
        assert!(r.registry.kill(&record).await.unwrap());
        assert_eq!(std::fs::read_to_string(&marker).unwrap(), "client-alive\n");
        assert_eq!(child.wait().unwrap().signal(), Some(libc_sigterm()));
    }

    #[tokio::test]
    async fn kill_never_signals_a_pid_whose_start_time_differs() {
        let r = registry();
        let (mut child, record) = sleeper();
        let recycled = ProcessRecord {
            start_time: record.start_time + 1,
            ..record.clone()
        };
        let dir = r.put(&recycled);
        let marker = dir.join("target-kill");
        let launch = crate::launch::RemoteLaunch {
            argv: vec!["unused".into()],
            kill_argv: vec!["touch".into(), marker.display().to_string()],
            signal_argv: Vec::new(),
            local_pty: false,
            resizable: false,
        };
        write_json_atomic(&dir.join("spec.json"), &spec("p_1", Some(launch))).unwrap();
        assert!(!r.registry.kill(&recycled).await.unwrap());
        assert!(!marker.exists());
        assert_eq!(child.try_wait().unwrap(), None);
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[tokio::test]
    async fn wait_returns_once_the_supervisor_exits() {
        let r = registry();
        let dir = r.root.join("p_1");
        std::fs::create_dir_all(&dir).unwrap();
        let exit = serde_json::to_string(&ExitRecord {
            exit_code: 4,
            ended_at_ms: 1,
            duration_ms: 1,
        })
        .unwrap();
        // The supervisor writes exit.json, then exits.
        let mut supervisor = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(format!(
                "sleep 0.3; printf '%s' '{exit}' > {}",
                dir.join("exit.json").display()
            ))
            .spawn()
            .unwrap();
        let pid = supervisor.id() as i32;
        let record = ProcessRecord {
            supervisor_pid: pid,
            supervisor_start_time: crate::procfs::start_time(pid).unwrap(),
            ..gone("p_1", "s1", 1)
        };
        r.put(&record);
        let started = std::time::Instant::now();
        let status = r.registry.wait(&record, Duration::from_secs(20)).await;
        assert!(started.elapsed() < Duration::from_secs(10));
        assert_eq!(
            (status.state, status.exit_code),
            (ProcessState::Exited, Some(4))
        );
        supervisor.wait().unwrap();
    }

    #[tokio::test]
    async fn wait_gives_up_after_its_timeout_with_the_process_still_running() {
        let r = registry();
        let (mut supervisor, command) = sleeper();
        let record = ProcessRecord {
            supervisor_pid: command.pid,
            supervisor_start_time: command.start_time,
            ..gone("p_1", "s1", 1)
        };
        r.put(&record);
        let started = std::time::Instant::now();
        let status = r.registry.wait(&record, Duration::from_millis(300)).await;
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(250) && waited < Duration::from_secs(5),
            "{waited:?}"
        );
        assert_eq!(status.state, ProcessState::Running);
        supervisor.kill().unwrap();
        supervisor.wait().unwrap();
    }

    #[test]
    fn a_receipt_is_read_back_once_written() {
        let r = registry();
        let record = gone("p_1", "s1", 1);
        let dir = r.put(&record);
        assert_eq!(r.registry.receipt(&record), None);
        let receipt = Receipt {
            id: "p_1".into(),
            session: "s1".into(),
            command: "make".into(),
            exit_code: 2,
            started_at_ms: 1,
            ended_at_ms: 5,
            duration_ms: 4,
            output_tail: "error\n".into(),
        };
        write_json_atomic(&dir.join("receipt.json"), &receipt).unwrap();
        assert_eq!(r.registry.receipt(&record), Some(receipt));
    }

    #[test]
    fn pruning_drops_old_and_surplus_ended_records_and_keeps_those_without_an_exit() {
        let r = registry();
        let now = now_ms();
        let hour = 3_600_000;
        for (id, ended) in [
            ("p_new", now - 1_000),
            ("p_recent", now - 2_000),
            ("p_surplus", now - 3_000),
            ("p_old", now - 2 * hour),
        ] {
            r.put(&gone(id, "s1", 1));
            r.exit(id, 0, ended);
        }
        r.put(&running("p_running"));
        // Its supervisor died without an exit record: kept as well (only exit.json is read).
        r.put(&gone("p_lost", "s1", 1));
        r.registry.prune(Duration::from_millis(hour), 2);
        let mut left: Vec<String> = std::fs::read_dir(&r.root)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, vec!["p_lost", "p_new", "p_recent", "p_running"]);
    }

    #[test]
    fn new_ids_are_fresh_and_name_a_record() {
        let a = ProcessRegistry::new_id();
        let b = ProcessRegistry::new_id();
        assert_ne!(a, b);
        let hex = a.strip_prefix("p_").unwrap();
        assert!(
            hex.len() == 12 && hex.chars().all(|c| c.is_ascii_hexdigit()),
            "{a}"
        );
        let r = registry();
        r.put(&gone(&a, "s1", 1));
        assert_eq!(r.registry.get("s1", &a).unwrap().id, a);
    }

    #[tokio::test]
    async fn start_hands_the_supervisor_its_directory_and_returns_the_record_it_prints() {
        let r = registry();
        let exe = fake_supervisor(r.root.parent().unwrap(), Some(&record_json("$id", "s1")));
        let spec = spec("p_1", None);
        let record = r.registry.start(&exe, spec.clone()).await.unwrap();
        assert_eq!(
            record,
            serde_json::from_str::<ProcessRecord>(&record_json("p_1", "s1")).unwrap()
        );
        let dir = r.root.join("p_1");
        assert_eq!(
            std::fs::read_to_string(dir.join("supervisor-args")).unwrap(),
            format!("__supervise\n{}\n", dir.display())
        );
        let written: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("spec.json")).unwrap()).unwrap();
        assert_eq!(written, serde_json::to_value(&spec).unwrap());
        for fifo in ["stdin", "control"] {
            let meta = std::fs::metadata(dir.join(fifo)).unwrap();
            assert!(meta.file_type().is_fifo(), "{fifo}");
            assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{fifo}");
        }
    }

    #[tokio::test]
    async fn the_line_a_failing_supervisor_prints_is_the_reason_start_reports() {
        let r = registry();
        let exe = fake_supervisor(r.root.parent().unwrap(), Some("cannot read the spec"));
        let result = r.registry.start(&exe, spec("p_1", None)).await;
        let Err(BackendError::Process { id, reason }) = result else {
            panic!("expected a process error, got {result:?}");
        };
        assert_eq!(
            (id.as_str(), reason.as_str()),
            (
                "p_1",
                "the supervisor could not start it: cannot read the spec"
            )
        );
    }

    #[tokio::test]
    async fn a_supervisor_that_prints_nothing_did_not_report_a_start() {
        let r = registry();
        let exe = fake_supervisor(r.root.parent().unwrap(), None);
        let result = r.registry.start(&exe, spec("p_1", None)).await;
        let Err(BackendError::Process { id, reason }) = result else {
            panic!("expected a process error, got {result:?}");
        };
        assert_eq!(
            (id.as_str(), reason.as_str()),
            ("p_1", "the supervisor did not report a start")
        );
    }

    fn libc_sigterm() -> i32 {
        nix::sys::signal::Signal::SIGTERM as i32
    }
}
