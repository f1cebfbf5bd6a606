//! Execution environments: where `terminal`, `process` and `python_execute` run.
//!
//! One trait, [`Environment`], implemented by [`local::LocalEnvironment`] and, through
//! [`remote::RemoteEnvironment`], by the [`docker`], [`ssh`], [`apptainer`] and [`slurm`] transports.
//! Background processes are run by a detached supervisor and recorded in a durable
//! [`processes::ProcessRegistry`], so they survive an engine restart.
//!
//! - [`output`] — capping text keeping start and end;
//! - [`stream`] — a command's output as it is written (chunks by stream) and the sink it goes to;
//! - [`local`] — the local backend (process groups, timeouts, PTY, shell state);
//! - [`remote`] — what docker, ssh and apptainer share: the wrapper run on the target, tree
//!   kills by run id, background processes through the transport's client;
//! - [`docker`] — containers through the Engine API (bollard), one per session;
//! - [`ssh`] — the system OpenSSH client with one ControlMaster per backend;
//! - [`apptainer`] — one Apptainer/Singularity instance per session;
//! - [`slurm`] — one Slurm job per session, its agent in a holder step (bare or in Apptainer);
//! - [`progress`] — where slow environment work (a queued job) reports to;
//! - [`shell`] — the wrapper that makes cwd, exports, functions and aliases persist;
//! - [`processes`] — durable registry of background processes and their receipts;
//! - [`supervisor`] — the detached process that owns one background command;
//! - [`procfs`] — process identity (PID + kernel start time) and process trees;
//! - [`redact`] — secrets out of receipts;
//! - [`kill`] — ending a timed-out command's process group, and the exit code it answers;
//! - [`ids`] — random ids for runs and background processes;
//! - [`naming`] — names of containers, instances and jobs (`paddock-<backend>-<owner>-<session>`);
//! - [`launch`] — how a background command's supervisor is started, locally or on a target.

#![forbid(unsafe_code)]
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod agent;
pub mod apptainer;
pub mod cgroup;
pub mod docker;
pub mod egress;
pub mod freeze;
pub mod ids;
pub mod kill;
pub mod launch;
pub mod lifetime;
pub mod local;
pub mod naming;
pub mod output;
pub mod processes;
pub mod procfs;
pub mod progress;
pub mod redact;
pub mod registry;
pub mod remote;
pub mod section;
pub mod shell;
pub mod slurm;
pub mod snapshot;
pub mod ssh;
pub mod stream;
pub mod supervisor;
mod tmp_mount;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use stream::{ChunkSender, OutputChunk, OutputStream};

/// Errors of an environment.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("invalid command: {0}")]
    InvalidCommand(String),
    #[error("working directory {path}: {reason}")]
    Workdir { path: String, reason: String },
    #[error("could not start the command: {0}")]
    Spawn(std::io::Error),
    #[error("i/o error while running the command: {0}")]
    Io(#[from] std::io::Error),
    #[error("the {kind} backend '{name}' is not available: {reason}")]
    Unavailable {
        kind: String,
        name: String,
        reason: String,
    },
    #[error("no process '{0}' in this session")]
    UnknownProcess(String),
    #[error("process '{id}' belongs to another session")]
    OtherSession { id: String },
    #[error("process '{id}': {reason}")]
    Process { id: String, reason: String },
    #[error("state directory {path}: {reason}")]
    State { path: String, reason: String },
}

pub type Result<T> = std::result::Result<T, BackendError>;

/// What `paddock sessions pause` answers for a backend that cannot freeze a session.
pub fn pause_not_offered(kind: &str, name: &str) -> BackendError {
    BackendError::Unavailable {
        kind: kind.to_owned(),
        name: name.to_owned(),
        reason: "pausing a session is offered on docker and the local backend only".into(),
    }
}

/// What a file operation answers: its JSON, or the file error the tool reports
/// (`file:not_found`, `file:no_match`, ...). A backend fault is the future's own error.
pub type FileAnswer = std::result::Result<serde_json::Value, paddock_files::FileError>;

/// What a context action answers: its JSON, or the context error the tool reports
/// (`context:not_found`, ...). A backend fault is the future's own error.
pub type ContextAnswer = std::result::Result<serde_json::Value, ContextFailure>;

/// A context action the agent refused: its code and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextFailure {
    pub code: String,
    pub message: String,
}

/// The boxed future every trait method returns (dyn-compatible).
pub type BackendFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

/// A foreground command.
#[derive(Debug, Clone)]
pub struct ExecRequest {
    pub command: String,
    /// Session whose cwd, exports, functions and aliases the command sees and updates.
    pub session: String,
    /// Overrides the session's cwd for this call only.
    pub workdir: Option<PathBuf>,
    pub env: BTreeMap<String, String>,
    pub stdin: Option<Vec<u8>>,
    pub timeout: Duration,
    pub pty: bool,
    /// Output cap (characters), keeping start and end.
    pub max_output_chars: usize,
    /// Where the command's stdout and stderr go, apart and chunk by chunk, as they are
    /// written (the merged `output` is answered as well).
    pub chunks: Option<ChunkSender>,
    /// Processes the command detached from its process group (`setsid`, a daemon's double
    /// fork) live on until the session ends instead of ending with the command, as in a
    /// terminal. Honoured where the in-environment agent runs the command; elsewhere they
    /// end with the command as usual.
    pub keep_detached: bool,
}

/// What a foreground command produced. stdout and stderr are merged, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecOutput {
    pub output: String,
    /// The command's status; 124 after a timeout (like coreutils `timeout`).
    pub exit_code: i32,
    pub timed_out: bool,
    /// Characters of output in all (before capping).
    pub output_chars: usize,
    pub duration_ms: f64,
    /// After a timeout: why the command could not be ended on the target (a node cut off, a
    /// daemon down), so it may still be running there. `None` when it was ended, or did not
    /// time out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_ended: Option<String>,
}

/// A background command.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BackgroundRequest {
    pub command: String,
    pub session: String,
    pub workdir: Option<PathBuf>,
    pub env: BTreeMap<String, String>,
    pub pty: bool,
    pub notify_on_complete: bool,
}

/// A request's `workdir` as the command wrapper takes it: `""` keeps the session's own cwd.
pub(crate) fn workdir_arg(workdir: Option<&std::path::Path>) -> String {
    workdir.map(|p| p.display().to_string()).unwrap_or_default()
}

/// A file found on a backend (python_execute's artifacts).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RemoteFile {
    /// Relative to the directory that was listed.
    pub path: String,
    pub size: u64,
    pub sha256: String,
    /// The content, when it is small enough to bring back.
    #[serde(default)]
    pub content_base64: Option<String>,
}

/// One backend capability set. Implementations keep this contract:
/// - a command runs in its own process group; a timeout ends the whole group (TERM, a short
///   grace, KILL) and answers exit code 124 saying so; nothing the command started outlives a
///   foreground call;
/// - stdout and stderr are merged in order and capped keeping start and end; with
///   [`ExecRequest::chunks`] each chunk also goes there as it is written, stderr apart where
///   the transport can keep it apart (pipes through the agent or on this machine);
/// - cwd, exported variables, functions and aliases persist between commands of one session;
/// - a backend that is down is an error, never a quiet fallback to another backend.
pub trait Environment: Send + Sync {
    /// The policy name of this backend (`[backends.NAME]`).
    fn name(&self) -> &str;

    /// `local`, `docker`, `ssh`, `apptainer` or `slurm`.
    fn kind(&self) -> &'static str;

    /// Whether commands run inside a container or instance of their own, apart from the host
    /// (`[approval] skip_for_containers` trusts that isolation instead of asking).
    fn is_container(&self) -> bool {
        false
    }

    /// Runs a foreground command.
    fn exec(&self, request: ExecRequest) -> BackendFuture<'_, ExecOutput>;

    /// Starts a background command; returns its record.
    fn spawn_background(
        &self,
        request: BackgroundRequest,
    ) -> BackendFuture<'_, processes::ProcessRecord>;

    /// Checks the backend can run commands.
    fn health(&self) -> BackendFuture<'_, ()>;

    /// The directory under which python_execute makes the run directories of `session` (and
    /// of `SESSION.python`, which shares it), as the backend's commands see it (a relative
    /// path is under the directory commands start in). Never shared by two sessions: a
    /// session's sandbox sees its own runs and no other's.
    fn scratch_dir(&self, session: &str) -> String;

    /// One file operation (the file tools) in the session's environment, done there without a
    /// shell: relative paths resolve against the session's current directory.
    fn files<'a>(
        &'a self,
        session: &'a str,
        operation: paddock_files::FileRequest,
    ) -> BackendFuture<'a, FileAnswer>;

    /// The session's current directory as this machine sees it, where the backend's files are
    /// this machine's (the local backend): the approvals judge a relative path where it lands.
    /// `None` where the environment's files are elsewhere.
    fn current_dir(&self, session: &str) -> Option<PathBuf> {
        let _ = session;
        None
    }

    /// One action on the session's long-lived CPython contexts, served by the agent in its
    /// environment (`python_execute` with `context`, `python_contexts`): an execution's output
    /// goes to `chunks` as it is written. The default: not offered by this backend.
    fn python_context<'a>(
        &'a self,
        session: &'a str,
        request: paddock_agent::protocol::ContextRequest,
        chunks: Option<ChunkSender>,
    ) -> BackendFuture<'a, ContextAnswer> {
        let _ = (session, request, chunks);
        Box::pin(async move {
            Err(BackendError::Unavailable {
                kind: self.kind().to_owned(),
                name: self.name().to_owned(),
                reason: "this backend has no agent in its environment to keep Python contexts \
                         (docker with `agent = false`): run python_execute without `context`"
                    .into(),
            })
        })
    }

    /// Writes a file where the backend's commands see it.
    fn write_file<'a>(
        &'a self,
        session: &'a str,
        path: &'a str,
        contents: Vec<u8>,
    ) -> BackendFuture<'a, ()>;

    /// Regular files under `dir` (at most `max_files`; contents up to `inline_bytes` each).
    fn collect_files<'a>(
        &'a self,
        session: &'a str,
        dir: &'a str,
        max_files: usize,
        inline_bytes: u64,
    ) -> BackendFuture<'a, Vec<RemoteFile>>;

    /// Ends what the session holds on this backend: its shell state, and its container or
    /// instance. Connections other sessions share are kept.
    fn close_session<'a>(&'a self, session: &'a str) -> BackendFuture<'a, ()>;

    /// Removes environments of this backend (containers, instances) that no live session owns.
    /// Answers how many were removed.
    fn sweep_orphans<'a>(&'a self, live_sessions: &'a [String]) -> BackendFuture<'a, usize> {
        let _ = live_sessions;
        Box::pin(async { Ok(0) })
    }

    /// Freezes every process the session has here (`paddock sessions pause`): they use no CPU
    /// until [`Environment::resume_session`]. Answers whether anything of the session was
    /// there to freeze. The default: not offered by this backend, said so.
    fn pause_session<'a>(&'a self, session: &'a str) -> BackendFuture<'a, bool> {
        let _ = session;
        Box::pin(async move { Err(pause_not_offered(self.kind(), self.name())) })
    }

    /// Thaws what [`Environment::pause_session`] froze (nothing frozen: nothing to do).
    fn resume_session<'a>(&'a self, session: &'a str) -> BackendFuture<'a, ()> {
        let _ = session;
        Box::pin(async { Ok(()) })
    }

    /// Saves what a new session needs to continue where `session` is on this backend
    /// (`paddock sessions snapshot`): its environment's files, kept under `dir` (the
    /// snapshot's directory, which exists) or as an image named for `tag`, and its shell
    /// state. The session goes on unchanged. Files that would take more than `budget_bytes`
    /// are refused before they are copied, where their size can be known first. The default:
    /// not offered by this backend.
    fn snapshot_session<'a>(
        &'a self,
        session: &'a str,
        dir: &'a std::path::Path,
        tag: &'a str,
        budget_bytes: u64,
    ) -> BackendFuture<'a, snapshot::SavedEnvironment> {
        let _ = (session, dir, tag, budget_bytes);
        Box::pin(async move { Err(snapshot::snapshot_not_offered(self.kind(), self.name())) })
    }

    /// Makes `session` (new: nothing of it here yet) start from `saved`, a part of the
    /// snapshot in `dir`: its files and its shell state; its environment is made now.
    fn start_from_snapshot<'a>(
        &'a self,
        session: &'a str,
        saved: &'a snapshot::SavedEnvironment,
        dir: &'a std::path::Path,
    ) -> BackendFuture<'a, ()> {
        let _ = (session, saved, dir);
        Box::pin(async move { Err(snapshot::snapshot_not_offered(self.kind(), self.name())) })
    }

    /// Removes what `saved` holds outside the snapshot's directory (a docker image).
    fn remove_snapshot<'a>(
        &'a self,
        saved: &'a snapshot::SavedEnvironment,
    ) -> BackendFuture<'a, ()> {
        let _ = saved;
        Box::pin(async { Ok(()) })
    }

    /// Starts filling this backend's warm pool, if it has one (a long-lived engine does so
    /// when it starts, so that its first sessions find environments ready).
    fn prewarm(&self) {}

    /// `session` is in use: its environment (a container, an instance, a Slurm job) must not
    /// end by itself before `until`, and ends by itself some seconds after it unless told
    /// again ([`lifetime`]), whether or not any engine runs then. Called whenever the session
    /// is marked active; cheap, and never fails the call it accompanies. The default keeps
    /// nothing: a backend whose environments do not end by themselves.
    fn keep_alive(&self, session: &str, until: std::time::SystemTime) {
        let _ = (session, until);
    }

    /// The workspace a client named for `session` (an MCP client's first root, a directory on
    /// this machine): the session's commands start there and a workspace-write sandbox lets
    /// them write there. Answers whether this backend took it: a backend whose files are not
    /// this machine's (a container, a remote host) or whose policy names its own `workspace`
    /// keeps its own.
    fn set_session_workspace<'a>(
        &'a self,
        session: &'a str,
        workspace: &'a std::path::Path,
    ) -> BackendFuture<'a, bool> {
        let _ = (session, workspace);
        Box::pin(async { Ok(false) })
    }
}
