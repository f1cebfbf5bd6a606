//! The local backend: commands on this machine, each in its own process group.

pub mod section;
mod snapshot;

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use std::sync::Arc;

use crate::agent::RunRequest;
use crate::agent::detached::DetachedAgent;
use crate::agent::link::{Link, LinkError};
use crate::kill::{TIMEOUT_EXIT_CODE, terminate_group};
use crate::output::Utf8Capped;
use crate::processes::{ProcessRecord, ProcessRegistry, ProcessSpec};
use crate::shell::{WRAPPER, check_command, session_dir};
use crate::stream::{OutputSink, OutputStream};
use crate::{
    BackendError, BackendFuture, BackgroundRequest, Environment, ExecOutput, ExecRequest,
    RemoteFile, Result,
};
use paddock_agent::live_shell::{LiveJob, LiveShells};
use paddock_agent::spare::SparePool;

use crate::tmp_mount::{mount_points_under, mount_tmp, unmount_tmp};

/// How long output is still read after the shell exited (a backgrounded grandchild may hold
/// the pipe open; it is killed right after).
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(150);

/// The exit code of a command ended for adding more than `workspace_write_mb` to the
/// workspace.
pub const WORKSPACE_LIMIT_EXIT_CODE: i32 = 1;

/// Commands on this machine.
pub struct LocalEnvironment {
    name: String,
    state_root: PathBuf,
    /// The `paddock` binary, re-executed as `paddock __supervise DIR` for background commands
    /// and as `paddock __sandbox-exec` for sandboxed ones.
    supervisor_exe: PathBuf,
    sandbox: Option<LocalSandbox>,
    /// Sandboxed commands go through one confined agent per session (`agent = true`).
    agent: bool,
    /// Spare shells for unconfined commands (started ahead of need, off the critical path).
    spares: Option<Arc<SparePool>>,
    /// Each session's live shell (unconfined backend only, as the spares).
    live: Option<Arc<LiveShells>>,
    /// Per-session ceilings (`max_processes`, `cpus`, `tmp_size_mb`, `workspace_write_mb`).
    ceilings: LocalCeilings,
    /// Whether a client may name a session's workspace (an MCP client's roots): not when the
    /// policy names one, which wins.
    client_workspaces: bool,
    /// The workspace a client named, per session.
    session_workspaces: std::sync::Mutex<BTreeMap<String, PathBuf>>,
    /// `network = "proxy"`: who serves the sandboxed agent's egress socket.
    egress: Option<Arc<dyn crate::egress::EgressHost>>,
    /// Each session's sandboxed agent as [`Self::sandboxed_agent`] made it, by session: its
    /// directories are made and its launch line built once, not before every command (they
    /// were a third of the engine's system calls per command), and a connection the agent
    /// kept open after a command carries the next one.
    kept_agents: std::sync::Mutex<BTreeMap<String, KeptAgent>>,
    /// [`Self::cgroup_owner`], computed once (it canonicalizes the state directory).
    cgroup_owner: std::sync::OnceLock<String>,
}

/// A session's sandboxed agent, kept between commands (see `LocalEnvironment::kept_agents`).
struct KeptAgent {
    /// The sandbox it was made for (its `Debug` text): another sandbox gets another agent.
    sandbox: String,
    agent: DetachedAgent,
    /// A connection the agent kept open after the last command, for the next one.
    idle: Option<Link>,
}

/// A local backend's per-session ceilings; `None` is no ceiling.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LocalCeilings {
    /// Processes and threads of the whole session: a pids cgroup (binds root too), else
    /// RLIMIT_NPROC with a warning.
    pub max_processes: Option<u64>,
    /// A CPU quota for the whole session (a cpu cgroup; refused where none can be made).
    pub cpus: Option<f64>,
    /// Memory of the whole session, swap included (a memory cgroup; refused where none can
    /// be made): past it the kernel kills the session's largest process.
    pub memory_mb: Option<u64>,
    /// The session's private /tmp as a tmpfs of this size.
    pub tmp_size_mb: Option<u64>,
    /// What one workspace-write command may add to the workspace: RLIMIT_FSIZE at this size,
    /// and a watcher that ends the command when the workspace grew by more.
    pub workspace_write_mb: Option<u64>,
}

impl LocalCeilings {
    fn any_process_ceiling(&self) -> bool {
        self.max_processes.is_some() || self.cpus.is_some() || self.memory_mb.is_some()
    }

    fn cgroup_limits(&self) -> crate::cgroup::Limits {
        crate::cgroup::Limits {
            max_processes: self.max_processes,
            cpus: self.cpus,
            memory_mb: self.memory_mb,
        }
    }
}

/// Where one session's ceilings go on this machine (no side effects to compute).
#[derive(Debug, Default)]
struct CeilingPlan {
    /// The session's cgroup directories.
    cgroups: Vec<PathBuf>,
    /// RLIMIT_NPROC, where no pids cgroup can be made.
    nproc: Option<u64>,
    /// The sandbox's /tmp is its own tmpfs of this size (an engine that is not root cannot
    /// mount one over the session's directory): it lasts as long as that sandbox.
    tmp_in_sandbox_mb: Option<u64>,
    /// Why the session's commands cannot run under their ceilings (`cpus` without a cgroup).
    refused: Option<String>,
}

/// The ceilings made real for one command.
#[derive(Debug, Default)]
struct AppliedCeilings {
    groups: crate::cgroup::SessionGroups,
    /// `pids.events`' `max` count before the command.
    hits_before: Option<u64>,
    /// The memory group's `oom_kill` count before the command.
    kills_before: Option<u64>,
    /// The session's /tmp is a tmpfs mounted by this engine.
    tmp_mounted: bool,
}

/// Where each cgroup controller is, read once.
/// Locks `m`, taking a poisoned lock over: the maps it guards hold plain values, consistent
/// after any panic.
fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn cgroup_layout() -> &'static crate::cgroup::Layout {
    static LAYOUT: std::sync::OnceLock<crate::cgroup::Layout> = std::sync::OnceLock::new();
    LAYOUT.get_or_init(crate::cgroup::Layout::detect)
}

/// Logs a fallback once per engine process (not once per command).
fn warn_once(flag: &'static std::sync::atomic::AtomicBool, message: &str) {
    if !flag.swap(true, std::sync::atomic::Ordering::Relaxed) {
        tracing::warn!("{message}");
    }
}

/// The unconfined command's prefix that puts it under the session's ceilings without
/// `unsafe`: `sh` joins each cgroup (`0` into `cgroup.procs` moves `sh` itself, so all it
/// execs and forks is inside), sets the RLIMIT_NPROC fallback, and execs the command.
const JOIN_CEILINGS: &str = r#"n=$1; shift
if [ "$n" != - ]; then ulimit -u "$n" || exit 125; fi
while [ "$1" != -- ]; do
  echo 0 > "$1/cgroup.procs" || { echo "paddock: cannot join the session's cgroup $1" >&2; exit 125; }
  shift
done
shift
exec "$@""#;

/// Measures how much a command added to the workspace (allocated bytes of every file, walked
/// without following links), for `workspace_write_mb`.
struct WorkspaceWatch {
    root: PathBuf,
    baseline: u64,
    limit_bytes: u64,
}

/// The allocated bytes of everything under `root` (not following links, not crossing into
/// other filesystems).
fn allocated_bytes(root: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(top) = std::fs::symlink_metadata(root) else {
        return 0;
    };
    let device = top.dev();
    let mut total = top.blocks() * 512;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            if meta.dev() != device {
                continue;
            }
            total += meta.blocks() * 512;
            if meta.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    total
}

impl WorkspaceWatch {
    async fn start(root: PathBuf, limit_mb: u64) -> Self {
        let walked = root.clone();
        let baseline = tokio::task::spawn_blocking(move || allocated_bytes(&walked))
            .await
            .unwrap_or(0);
        Self {
            root,
            baseline,
            limit_bytes: limit_mb.saturating_mul(1 << 20),
        }
    }

    /// Resolves once the workspace grew past the limit (with the growth in bytes). It walks
    /// every 250 ms, or every 4 walks' time when a walk takes longer (a large workspace), so
    /// that the walks take at most a fifth of one core.
    async fn exceeded(&self) -> u64 {
        let mut interval = Duration::from_millis(250);
        loop {
            tokio::time::sleep(interval).await;
            let root = self.root.clone();
            let started = Instant::now();
            let now = tokio::task::spawn_blocking(move || allocated_bytes(&root))
                .await
                .unwrap_or(0);
            interval = Duration::from_millis(250).max(started.elapsed() * 4);
            let grown = now.saturating_sub(self.baseline);
            if grown > self.limit_bytes {
                return grown;
            }
        }
    }

    fn message(&self, grown: u64, backend: &str) -> String {
        format!(
            "\n[paddock: the command added {} MB to the workspace, over its limit of {} MB \
             (workspace_write_mb in [backends.{backend}]), and was ended]",
            grown >> 20,
            self.limit_bytes >> 20
        )
    }
}

/// Waits on a watch, or forever without one.
async fn watch_exceeded(watch: Option<&WorkspaceWatch>) -> u64 {
    match watch {
        Some(watch) => watch.exceeded().await,
        None => std::future::pending().await,
    }
}

/// How much a sandboxed local command may write (`sandbox = "none"` is no sandbox at all).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// Nothing but the session's private /tmp.
    ReadOnly,
    /// The workspace too (its protected paths excepted).
    WorkspaceWrite,
}

impl std::str::FromStr for SandboxMode {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<Self, Self::Err> {
        match text {
            "read-only" => Ok(SandboxMode::ReadOnly),
            "workspace-write" => Ok(SandboxMode::WorkspaceWrite),
            other => Err(format!(
                "sandbox \"{other}\" is not one of none, read-only, workspace-write"
            )),
        }
    }
}

/// The sandbox of a local backend.
#[derive(Debug, Clone)]
pub struct LocalSandbox {
    pub mode: SandboxMode,
    pub workspace: PathBuf,
    /// Keep the host's network (default: none).
    pub network: bool,
    /// Paths inside the workspace that stay read-only.
    pub protected: Vec<String>,
}

/// The engine binary's subcommand that is the agent (`paddock __agent serve ...`), used when no
/// `paddock-agent` lies beside it.
pub const AGENT_SUBCOMMAND: &str = "__agent";
/// A session's sandboxed agent ends after this long without a command (the session's sandbox
/// with it); the next command starts a new one, the shell state being kept on disk.
const LOCAL_AGENT_IDLE_EXIT: Duration = Duration::from_secs(1800);
/// How long past a command's timeout the engine waits for the agent's answer before it gives up
/// on the agent (which ends the command at the timeout itself, within a second).
const AGENT_ANSWER_GRACE: Duration = Duration::from_secs(10);

/// Where python_execute keeps the runs (script, output files, artifacts) of `session` and of
/// `SESSION.python` on this machine: `STATE/python/SESSION/`, removed when the session closes.
pub fn python_runs_dir(state_root: &Path, session: &str) -> PathBuf {
    state_root
        .join("python")
        .join(crate::naming::base_session(session))
}

/// A file that marks a directory as holding the workspaces of separate sessions, one each: a
/// sandboxed session whose workspace lies in it sees none of the others (the directory is
/// masked, its own workspace bound back).
pub const SEPARATE_WORKSPACES_MARKER: &str = ".paddock-separate-workspaces";

/// The name of the sandbox subcommand of the `paddock` binary.
pub const SANDBOX_SUBCOMMAND: &str = "__sandbox-exec";
/// The same sandbox as a small program of its own, looked for next to `paddock`.
pub const SANDBOX_PROGRAM: &str = "paddock-sandbox-exec";

/// What a sandboxed command never sees: sockets (/run holds docker.sock and D-Bus), host keys,
/// password hashes, and the credentials of the user running Paddock.
pub fn masked_paths(home: &std::path::Path) -> Vec<PathBuf> {
    let mut masks: Vec<PathBuf> = [
        "/run",
        "/var/run",
        "/etc/shadow",
        "/etc/gshadow",
        "/etc/ssh",
        "/root/.ssh",
        "/var/lib/docker",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    for rel in [
        ".ssh",
        ".aws",
        ".azure",
        ".config/gcloud",
        ".kube",
        ".docker",
        ".gnupg",
        ".netrc",
        ".npmrc",
        ".pypirc",
        ".git-credentials",
        ".cargo/credentials.toml",
        ".config/gh",
    ] {
        masks.push(home.join(rel));
    }
    masks
}

/// Paths inside a workspace a sandboxed command may read but never change: what would run
/// later outside the sandbox (git hooks and config) and Paddock's own files.
pub const PROTECTED_PATHS: &[&str] = &[".git/hooks", ".git/config", ".paddock", "paddock.toml"];

impl LocalEnvironment {
    pub fn new(name: impl Into<String>, state_root: PathBuf, supervisor_exe: PathBuf) -> Self {
        Self {
            name: name.into(),
            state_root,
            supervisor_exe,
            sandbox: None,
            agent: false,
            spares: None,
            live: None,
            ceilings: LocalCeilings::default(),
            client_workspaces: false,
            session_workspaces: std::sync::Mutex::default(),
            egress: None,
            kept_agents: std::sync::Mutex::default(),
            cgroup_owner: std::sync::OnceLock::new(),
        }
    }

    /// `network = "proxy"` for the sandbox: no network but loopback and the agent's egress
    /// port, its connections carried to what `egress` serves.
    pub fn with_egress(mut self, egress: Arc<dyn crate::egress::EgressHost>) -> Self {
        self.egress = Some(egress);
        self
    }

    /// Before a command: the session's way out is served (proxied sandboxes only).
    async fn serve_egress(&self, session: &str, agent_socket: &Path) -> Result<()> {
        match &self.egress {
            Some(egress) => {
                let listen = agent_socket.with_file_name(crate::egress::EGRESS_SOCKET);
                egress.serve(session, &listen).await
            }
            None => Ok(()),
        }
    }

    /// Keeps a spare shell ready for the next unconfined command (an engine that runs many
    /// commands: `paddock run`, `paddock serve`); its boot files go under the state directory.
    pub fn with_spare_shells(mut self) -> Self {
        let dir = self.state_root.join("spares");
        if std::fs::create_dir_all(&dir).is_ok() {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
            // The first command starts the first spare: an engine that runs none pays nothing.
            self.spares = Some(SparePool::new(dir.clone(), true));
            // The same for each session's live shell (its first command warms it).
            self.live = Some(LiveShells::new(dir));
        }
        self
    }

    /// Sandboxed commands of a session share one confined environment served by an agent
    /// (except PTY commands, which keep a sandbox of their own).
    pub fn with_agent(mut self, on: bool) -> Self {
        self.agent = on;
        self
    }

    /// The sandbox's test switch reaches it (the command environment drops `PADDOCK_*`).
    fn sandbox_env(&self, mut env: BTreeMap<String, String>) -> BTreeMap<String, String> {
        const SIMULATE: &str = "PADDOCK_SANDBOX_SIMULATE_MISSING";
        if self.sandbox.is_some()
            && let Ok(value) = std::env::var(SIMULATE)
        {
            env.insert(SIMULATE.to_owned(), value);
        }
        if self.sandbox.is_some() && self.egress.is_some() {
            env.extend(crate::egress::proxy_env());
        }
        env
    }

    /// Lets a client name each session's workspace ([`Environment::set_session_workspace`]);
    /// the engine allows it when the policy names no `workspace`.
    pub fn with_client_workspaces(mut self, on: bool) -> Self {
        self.client_workspaces = on;
        self
    }

    /// The workspace a client named for `session`, if any.
    fn client_workspace(&self, session: &str) -> Option<PathBuf> {
        self.session_workspaces
            .lock()
            .ok()
            .and_then(|map| map.get(session).cloned())
            .or_else(|| self.forked_workspace(session))
    }

    /// The sandbox of `session`'s commands: the backend's, over the workspace its client named.
    fn sandbox_of(&self, session: &str) -> Option<LocalSandbox> {
        let mut sandbox = self.sandbox.clone()?;
        if let Some(workspace) = self.client_workspace(session) {
            sandbox.workspace = workspace;
        }
        Some(sandbox)
    }

    /// Puts every session of this backend under `ceilings`.
    pub fn with_ceilings(mut self, ceilings: LocalCeilings) -> Self {
        self.ceilings = ceilings;
        self
    }

    /// The session's private /tmp on the host (bound over /tmp in its sandbox).
    fn session_tmp(&self, session: &str) -> PathBuf {
        self.state_root.join("sandbox-tmp").join(session)
    }

    /// What every process of `session` here starts with ([`command_env`], the sandbox's
    /// variables), and the mark that names it as this backend's and this state directory's
    /// (`sessions pause` finds the session's processes by it, never another home's
    /// session of the same id, nor the docker clients of another backend).
    fn session_env(
        &self,
        extra: &BTreeMap<String, String>,
        session: &str,
    ) -> BTreeMap<String, String> {
        let mut env = self.sandbox_env(command_env(extra, session));
        env.insert(
            crate::freeze::SESSION_MARK.into(),
            self.freeze_mark(session),
        );
        env
    }

    /// The value of [`crate::freeze::SESSION_MARK`] for `session`.
    fn freeze_mark(&self, session: &str) -> String {
        format!("{}/{session}", self.cgroup_owner())
    }

    /// The directory under `<mount>/paddock` that holds this backend's session groups: its name
    /// and a digest of the state directory, since session ids (`default`) repeat across
    /// engines with different `PADDOCK_HOME`s, and one engine's orphan sweep must never touch
    /// another's sessions.
    fn cgroup_owner(&self) -> String {
        use sha2::Digest;
        self.cgroup_owner
            .get_or_init(|| {
                let home = std::fs::canonicalize(&self.state_root)
                    .unwrap_or_else(|_| self.state_root.clone());
                let digest = sha2::Sha256::digest(home.as_os_str().as_encoded_bytes());
                format!("{}.{}", self.name, hex::encode(&digest[..6]))
            })
            .clone()
    }

    /// Where the session's ceilings will be, computed without side effects (the sandbox's
    /// profile, and so its agent's key, come from it): its cgroup directories, else the
    /// RLIMIT_NPROC fallback, and whether the sandbox makes its own /tmp tmpfs.
    fn ceiling_plan(&self, session: &str) -> CeilingPlan {
        let c = self.ceilings;
        let root = nix::unistd::geteuid().is_root();
        let mut plan = CeilingPlan::default();
        if c.any_process_ceiling() {
            match crate::cgroup::plan(
                cgroup_layout(),
                &self.cgroup_owner(),
                session,
                c.cgroup_limits(),
                root,
            ) {
                Ok(paths) => plan.cgroups = paths,
                Err(err) if c.cpus.is_none() && c.memory_mb.is_none() => {
                    static NPROC_FALLBACK: std::sync::atomic::AtomicBool =
                        std::sync::atomic::AtomicBool::new(false);
                    warn_once(
                        &NPROC_FALLBACK,
                        &format!(
                            "[backends.{}] max_processes: no pids cgroup ({err}); falling back \
                             to RLIMIT_NPROC = {}, which counts all processes of this user and \
                             does not bind root",
                            self.name,
                            c.max_processes.unwrap_or_default()
                        ),
                    );
                    plan.nproc = c.max_processes;
                }
                Err(err) => {
                    let keys = match (c.cpus.is_some(), c.memory_mb.is_some()) {
                        (true, true) => "cpus and memory_mb need cpu and memory cgroups",
                        (true, false) => "cpus needs a cpu cgroup",
                        _ => "memory_mb needs a memory cgroup",
                    };
                    plan.refused = Some(format!(
                        "[backends.{}] {keys}, which cannot be made here: {err}",
                        self.name
                    ));
                }
            }
        }
        if let (Some(mb), Some(_), false) = (c.tmp_size_mb, &self.sandbox, root) {
            static TMP_FALLBACK: std::sync::atomic::AtomicBool =
                std::sync::atomic::AtomicBool::new(false);
            warn_once(
                &TMP_FALLBACK,
                &format!(
                    "[backends.{}] tmp_size_mb: the engine is not root and cannot mount the \
                     session's /tmp; each sandbox gets its own {mb} MB tmpfs instead, which lasts \
                     as long as the session's agent (one command with agent = false)",
                    self.name
                ),
            );
            plan.tmp_in_sandbox_mb = Some(mb);
        }
        plan
    }

    /// Makes the session's ceilings real before a command: its cgroups (created, limits
    /// written), its /tmp tmpfs (mounted once, by a root engine).
    fn apply_ceilings(&self, session: &str) -> Result<AppliedCeilings> {
        let c = self.ceilings;
        let plan = self.ceiling_plan(session);
        let unavailable = |reason: String| BackendError::Unavailable {
            kind: "local".into(),
            name: self.name.clone(),
            reason,
        };
        if let Some(reason) = plan.refused {
            return Err(unavailable(reason));
        }
        let mut applied = AppliedCeilings::default();
        if !plan.cgroups.is_empty() {
            applied.groups = crate::cgroup::SessionGroups::create(
                cgroup_layout(),
                &self.cgroup_owner(),
                session,
                c.cgroup_limits(),
            )
            .map_err(|err| unavailable(format!("[backends.{}] {err}", self.name)))?;
            applied.hits_before = applied.groups.process_ceiling_hits();
            applied.kills_before = applied.groups.memory_ceiling_kills();
        }
        if let (Some(mb), Some(_), None) = (c.tmp_size_mb, &self.sandbox, plan.tmp_in_sandbox_mb) {
            let tmp = self.session_tmp(session);
            std::fs::create_dir_all(&tmp).map_err(|e| BackendError::State {
                path: tmp.display().to_string(),
                reason: e.to_string(),
            })?;
            mount_tmp(&tmp, mb).map_err(|e| {
                unavailable(format!(
                    "[backends.{}] tmp_size_mb: cannot mount a {mb} MB tmpfs on {}: {e}",
                    self.name,
                    tmp.display()
                ))
            })?;
            applied.tmp_mounted = true;
        }
        Ok(applied)
    }

    /// What a command's output gets when it met a ceiling: the ceiling and its key.
    fn ceiling_notes(&self, session: &str, applied: &AppliedCeilings) -> String {
        let mut notes = String::new();
        if let (Some(before), Some(after)) =
            (applied.hits_before, applied.groups.process_ceiling_hits())
            && after > before
        {
            notes.push_str(&format!(
                "\n[paddock: the session reached its process ceiling: {} forks failed \
                 (max_processes = {} in [backends.{}])]",
                after - before,
                self.ceilings.max_processes.unwrap_or_default(),
                self.name
            ));
        }
        if let (Some(before), Some(after)) =
            (applied.kills_before, applied.groups.memory_ceiling_kills())
            && after > before
        {
            notes.push_str(&format!(
                "\n[paddock: the session reached its memory ceiling: the kernel killed {} \
                 process(es) (memory_mb = {} in [backends.{}])]",
                after - before,
                self.ceilings.memory_mb.unwrap_or_default(),
                self.name
            ));
        }
        if applied.tmp_mounted
            && let Ok(stat) = nix::sys::statvfs::statvfs(&self.session_tmp(session))
            && stat.blocks_available() == 0
        {
            notes.push_str(&format!(
                "\n[paddock: the session's /tmp is full (tmp_size_mb = {} in [backends.{}])]",
                self.ceilings.tmp_size_mb.unwrap_or_default(),
                self.name
            ));
        }
        notes
    }

    /// The watch of a workspace-write command's additions, when `workspace_write_mb` is set.
    async fn workspace_watch(&self, session: &str) -> Option<WorkspaceWatch> {
        let limit = self.ceilings.workspace_write_mb?;
        let sandbox = self
            .sandbox_of(session)
            .filter(|s| s.mode == SandboxMode::WorkspaceWrite)?;
        Some(WorkspaceWatch::start(sandbox.workspace, limit).await)
    }

    /// An unconfined command's argv under the session's ceilings (see [`JOIN_CEILINGS`]), or
    /// the argv itself when there are none.
    fn unconfined_argv(
        &self,
        session: &str,
        program: PathBuf,
        args: Vec<String>,
    ) -> (PathBuf, Vec<String>) {
        let plan = self.ceiling_plan(session);
        if plan.cgroups.is_empty() && plan.nproc.is_none() {
            return (program, args);
        }
        let mut argv = vec![
            "-c".to_owned(),
            JOIN_CEILINGS.to_owned(),
            "paddock-ceilings".to_owned(),
            plan.nproc.map_or_else(|| "-".to_owned(), |n| n.to_string()),
        ];
        argv.extend(plan.cgroups.iter().map(|p| p.display().to_string()));
        argv.push("--".to_owned());
        argv.push(program.display().to_string());
        argv.extend(args);
        (PathBuf::from("/bin/sh"), argv)
    }

    /// Removes the session's cgroups (killing what is left in them) and unmounts its /tmp.
    fn release_ceilings(&self, session: &str) {
        for path in self.ceiling_plan(session).cgroups {
            if let Err(err) = crate::cgroup::remove_group(&path) {
                tracing::warn!(backend = %self.name, %err, "a session's cgroup was not removed");
            }
        }
        unmount_tmp(&self.session_tmp(session));
    }

    /// Runs every command of this backend in the given sandbox.
    pub fn with_sandbox(mut self, sandbox: LocalSandbox) -> Self {
        self.sandbox = Some(sandbox);
        self
    }

    /// The program and arguments that run `bash -c WRAPPER ...` for one command: bash itself,
    /// or bash inside `paddock __sandbox-exec PROFILE`.
    fn shell_argv(
        &self,
        state: &std::path::Path,
        session: &str,
        command: &str,
        workdir: &str,
        tag: &str,
    ) -> Result<(PathBuf, Vec<String>)> {
        let bash = crate::shell::bash_path().to_path_buf();
        let shell_args = wrapper_args(state, command, workdir, tag);
        let Some(sandbox) = self.sandbox_of(session) else {
            return Ok(self.unconfined_argv(session, bash, shell_args));
        };
        let (program, mut args) = self.sandbox_launch(&sandbox, state, session, None)?;
        args.push(bash.display().to_string());
        args.extend(shell_args);
        Ok((program, args))
    }

    /// A background command of a sandbox with `network = "proxy"`: it runs in a sandbox of its
    /// own (a network namespace apart from the session agent's), so the agent's
    /// `egress-forward` listens on the egress port there and carries its connections to the
    /// session's `egress.sock`, as the session agent does for foreground commands.
    async fn proxied_background_argv(
        &self,
        sandbox: &LocalSandbox,
        state: &Path,
        request: &BackgroundRequest,
        workdir: &str,
        tag: &str,
        env: &mut BTreeMap<String, String>,
    ) -> Result<Vec<String>> {
        let agent = self.sandboxed_agent(sandbox, state, &request.session)?;
        self.serve_egress(&request.session, &agent.socket).await?;
        let dir = agent.socket.parent().unwrap_or(Path::new("/"));
        if self.egress.as_ref().is_some_and(|e| e.terminates_tls()) {
            env.extend(crate::egress::ca_env(&dir.display().to_string()));
        }
        let agent_argv = self.agent_argv();
        let program_dir = Path::new(&agent_argv[0])
            .parent()
            .unwrap_or(Path::new("/"))
            .to_path_buf();
        let (program, args) =
            self.sandbox_launch(sandbox, state, &request.session, Some((dir, &program_dir)))?;
        let forward = [
            "egress-forward".to_owned(),
            "--socket".to_owned(),
            dir.join(crate::egress::EGRESS_SOCKET).display().to_string(),
            "--port".to_owned(),
            crate::egress::EGRESS_PORT.to_string(),
            "--run".to_owned(),
            tag.to_owned(),
            "--".to_owned(),
            crate::shell::bash_path().display().to_string(),
        ];
        Ok(std::iter::once(program.display().to_string())
            .chain(args)
            .chain(agent_argv)
            .chain(forward)
            .chain(wrapper_args(state, &request.command, workdir, tag))
            .collect())
    }

    /// How the agent program is started here: the small `paddock-agent` beside the engine, or
    /// the engine's own agent subcommand.
    fn agent_argv(&self) -> Vec<String> {
        // A dynamically linked agent is fine here: it runs on this machine.
        let small = self.supervisor_exe.with_file_name("paddock-agent");
        if small.is_file() {
            vec![small.display().to_string()]
        } else {
            vec![
                self.supervisor_exe.display().to_string(),
                AGENT_SUBCOMMAND.to_owned(),
            ]
        }
    }

    /// The sandbox helper and its profile argument, before the program it confines.
    /// `agent_dir` is one more writable directory (the session agent's socket).
    fn sandbox_launch(
        &self,
        sandbox: &LocalSandbox,
        state: &std::path::Path,
        session: &str,
        agent: Option<(&std::path::Path, &std::path::Path)>,
    ) -> Result<(PathBuf, Vec<String>)> {
        // The session keeps its own /tmp between commands, apart from the host's.
        let tmp = self.state_root.join("sandbox-tmp").join(session);
        // Its own python_execute runs, never the directory that holds every session's.
        let python = python_runs_dir(&self.state_root, session);
        for dir in [&tmp, &python] {
            std::fs::create_dir_all(dir).map_err(|e| BackendError::State {
                path: dir.display().to_string(),
                reason: e.to_string(),
            })?;
        }
        let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from);
        let mut masked = masked_paths(&home);
        // Paddock's own state: other sessions, approvals, processes.
        masked.push(self.state_root.clone());
        // A directory of separate sessions' workspaces (the E2B front end's sandbox homes,
        // marked so): the session sees its own workspace there, never its neighbours'.
        if let Some(shared) = sandbox
            .workspace
            .parent()
            .filter(|dir| dir.join(SEPARATE_WORKSPACES_MARKER).is_file())
        {
            masked.push(shared.to_path_buf());
        }
        let mut writable = vec![state.to_path_buf(), python];
        let mut readable = vec![home.clone()];
        // The agent's socket directory, and the directory its program lies in (which the
        // sandbox's own /tmp would hide when the binary is under /tmp).
        if let Some((agent_dir, program_dir)) = agent {
            writable.push(agent_dir.to_path_buf());
            readable.push(program_dir.to_path_buf());
        }
        let plan = self.ceiling_plan(session);
        let mut profile = serde_json::json!({
            "mode": sandbox.mode,
            "workspace": sandbox.workspace,
            "writable": writable,
            "tmp_dir": tmp,
            "readable": readable,
            "protected": sandbox.protected,
            "masked": masked,
            "network": sandbox.network,
            "egress_port": self.egress.as_ref().map(|_| crate::egress::EGRESS_PORT),
            "backend": self.name,
            "cgroups": plan.cgroups,
            "nproc": plan.nproc,
            "fsize_mb": self.ceilings.workspace_write_mb,
        });
        if let Some(mb) = plan.tmp_in_sandbox_mb {
            profile["tmp_dir"] = serde_json::Value::Null;
            profile["tmp_mb"] = mb.into();
        }
        // The small `paddock-sandbox-exec` next to the binary starts faster than the engine's
        // own `__sandbox-exec` (same code, no interpreter linked in); either one confines.
        let small = self.supervisor_exe.with_file_name(SANDBOX_PROGRAM);
        let (program, mut args) = if small.is_file() {
            (small, Vec::new())
        } else {
            (
                self.supervisor_exe.clone(),
                vec![SANDBOX_SUBCOMMAND.to_owned()],
            )
        };
        args.push(profile.to_string());
        Ok((program, args))
    }

    /// A link to the session's sandboxed agent, started when it is not running. The agent's
    /// description is kept per session and sandbox; a kept one that no longer connects (its
    /// directories went, as when another process closed the session) is made afresh once.
    async fn connect_sandboxed_agent(
        &self,
        sandbox: &LocalSandbox,
        state: &std::path::Path,
        session: &str,
    ) -> Result<(DetachedAgent, Link)> {
        let key = format!("{sandbox:?}");
        let kept = {
            let mut kept_agents = lock(&self.kept_agents);
            match kept_agents.get_mut(session) {
                Some(kept) if kept.sandbox == key => {
                    // An open connection first; one the agent closed (it exited) goes.
                    if let Some(link) = kept.idle.take().filter(Link::reusable) {
                        return Ok((kept.agent.clone(), link));
                    }
                    Some(kept.agent.clone())
                }
                _ => None,
            }
        };
        if let Some(agent) = kept {
            match agent.connect().await {
                Ok(link) => return Ok((agent, link)),
                Err(err) => {
                    tracing::debug!(session, %err, "the kept agent description failed; making it afresh");
                    lock(&self.kept_agents).remove(session);
                }
            }
        }
        let agent = self.sandboxed_agent(sandbox, state, session)?;
        let link = agent.connect().await?;
        lock(&self.kept_agents).insert(
            session.to_owned(),
            KeptAgent {
                sandbox: key,
                agent: agent.clone(),
                idle: None,
            },
        );
        Ok((agent, link))
    }

    /// Keeps a connection the agent left open after a command for the session's next one
    /// (one per session: of two commands at once, the second's connection closes).
    fn keep_link(&self, session: &str, socket: &Path, link: Link) {
        if let Some(kept) = lock(&self.kept_agents).get_mut(session)
            && kept.agent.socket == socket
            && kept.idle.is_none()
        {
            kept.idle = Some(link);
        }
    }

    /// Forgets the session's kept agent description (its directories are going).
    fn forget_agent(&self, session: &str) {
        lock(&self.kept_agents).remove(session);
    }

    /// The session's sandboxed agent: where it listens and how it is started. Its directory is
    /// named by the session and the sandbox settings, so a changed policy gets a new agent.
    fn sandboxed_agent(
        &self,
        sandbox: &LocalSandbox,
        state: &std::path::Path,
        session: &str,
    ) -> Result<DetachedAgent> {
        let agent_argv = self.agent_argv();
        let program_dir = Path::new(&agent_argv[0])
            .parent()
            .unwrap_or(Path::new("/"))
            .to_path_buf();
        let (_, unkeyed) = self.sandbox_launch(sandbox, state, session, None)?;
        let key = format!(
            "local\0{}\0{session}\0{}\0{}",
            self.name,
            unkeyed.join("\0"),
            agent_argv.join("\0")
        );
        let dir = crate::agent::agent_dir(&self.state_root.join("agents"), &key);
        let socket = crate::agent::prepare_agent_dir(&dir, "local", &self.name)?;
        let (program, mut args) =
            self.sandbox_launch(sandbox, state, session, Some((&dir, &program_dir)))?;
        args.extend(agent_argv);
        args.extend([
            "serve".to_owned(),
            "--socket".to_owned(),
            socket.display().to_string(),
            "--idle-exit".to_owned(),
            LOCAL_AGENT_IDLE_EXIT.as_secs().to_string(),
        ]);
        if self.egress.is_some() {
            args.extend(crate::egress::agent_args());
        }
        Ok(DetachedAgent {
            socket,
            program,
            args,
            // What a sandboxed command got before the agent: never the engine's own
            // environment, whose secrets a command could read in /proc/PID/environ.
            env: self.session_env(&BTreeMap::new(), session),
            log: dir.join("agent.log"),
            kind: "local",
            name: self.name.clone(),
        })
    }

    /// The agent of an unconfined session: it keeps the session's Python contexts alive
    /// between calls (an engine that lives for one `paddock call` could not), in no sandbox,
    /// with the environment commands get. Ends with the session, or idle.
    fn unconfined_agent(&self, session: &str) -> Result<DetachedAgent> {
        let agent_argv = self.agent_argv();
        let dir = self.unconfined_agent_dir(session);
        let socket = crate::agent::prepare_agent_dir(&dir, "local", &self.name)?;
        let mut argv = agent_argv.into_iter();
        let program = PathBuf::from(argv.next().unwrap_or_default());
        let mut args: Vec<String> = argv.collect();
        args.extend([
            "serve".to_owned(),
            "--socket".to_owned(),
            socket.display().to_string(),
            "--idle-exit".to_owned(),
            LOCAL_AGENT_IDLE_EXIT.as_secs().to_string(),
        ]);
        Ok(DetachedAgent {
            socket,
            program,
            args,
            env: self.session_env(&BTreeMap::new(), session),
            log: dir.join("agent.log"),
            kind: "local",
            name: self.name.clone(),
        })
    }

    /// Where [`Self::unconfined_agent`] lives (named by the session, not made here).
    fn unconfined_agent_dir(&self, session: &str) -> PathBuf {
        let key = format!(
            "local-unconfined\0{}\0{session}\0{}",
            self.name,
            self.agent_argv().join("\0")
        );
        crate::agent::agent_dir(&self.state_root.join("agents"), &key)
    }

    /// One action on the session's Python contexts, through the agent that keeps them: the
    /// session's sandboxed agent, or its unconfined one.
    async fn context_action(
        &self,
        session: &str,
        mut request: paddock_agent::protocol::ContextRequest,
        chunks: Option<crate::ChunkSender>,
    ) -> Result<crate::ContextAnswer> {
        use paddock_agent::protocol::ContextRequest;
        crate::shell::check_session(session)?;
        self.check_workspace(session)?;
        let state = session_dir(&self.state_root, session)?;
        // A context starts where the session's commands are (its agent's own directory is
        // wherever it was started).
        if let ContextRequest::Execute { cwd, .. } | ContextRequest::Create { cwd, .. } =
            &mut request
            && cwd.is_none()
        {
            *cwd = self.current_dir(session).map(|d| d.display().to_string());
        }
        let agent = match self.sandbox_of(session).filter(|_| self.agent) {
            Some(sandbox) => {
                let _applied = self.apply_ceilings(session)?;
                let (agent, link) = self
                    .connect_sandboxed_agent(&sandbox, &state, session)
                    .await?;
                self.serve_egress(session, &agent.socket).await?;
                (agent, link)
            }
            None => {
                let agent = self.unconfined_agent(session)?;
                let link = agent.connect().await?;
                (agent, link)
            }
        };
        let (agent, link) = agent;
        link.context(request, chunks.as_ref())
            .await
            .map_err(|err| match err {
                LinkError::Refused(message) => BackendError::Spawn(std::io::Error::other(message)),
                other => BackendError::Unavailable {
                    kind: "local".into(),
                    name: self.name.clone(),
                    reason: format!(
                        "the session's agent failed during a Python context's execution \
                         ({other}); see {} for its log",
                        agent.log.display()
                    ),
                },
            })
    }

    /// One sandboxed command through the session's agent.
    /// Where a new session's commands start: the workspace its client named, else that of a
    /// sandboxed backend (the only place they may write), else the home directory.
    fn start_dir(&self, session: &str) -> PathBuf {
        if let Some(workspace) = self.client_workspace(session) {
            return workspace;
        }
        match &self.sandbox {
            Some(sandbox) => sandbox.workspace.clone(),
            None => home_dir(),
        }
    }

    async fn run_through_agent(
        &self,
        sandbox: &LocalSandbox,
        request: &ExecRequest,
        state: &std::path::Path,
        workdir: String,
        mut env: BTreeMap<String, String>,
    ) -> Result<ExecOutput> {
        let started = Instant::now();
        let (agent, link) = self
            .connect_sandboxed_agent(sandbox, state, &request.session)
            .await?;
        self.serve_egress(&request.session, &agent.socket).await?;
        if let Some(dir) = agent.socket.parent()
            && self.egress.as_ref().is_some_and(|e| e.terminates_tls())
        {
            // The proxy placed its CA beside the agent's socket, a directory the sandbox sees
            // at the same path.
            env.extend(crate::egress::ca_env(&dir.display().to_string()));
        }
        let tag = crate::ids::new_run_id("t");
        // Daemons the command starts carry the id: a timeout ends them too.
        env.insert("PADDOCK_RUN".into(), tag.clone());
        let run = RunRequest {
            argv: std::iter::once(crate::shell::bash_path().display().to_string())
                .chain(wrapper_args(state, &request.command, &workdir, &tag))
                .collect(),
            env,
            clear_env: true,
            cwd: Some(self.start_dir(&request.session).display().to_string()),
            timeout_ms: Some(u64::try_from(request.timeout.as_millis()).unwrap_or(u64::MAX)),
            renames: Vec::new(),
            run_id: Some(tag.clone()),
            pty: request.pty,
            stdin: false,
            split_stderr: false,
            keep_detached: request.keep_detached,
            keep_connection: false,
        };
        let sink = OutputSink::streaming(request.max_output_chars, request.chunks.clone());
        // The agent ends the command at its timeout; the engine bounds its own wait as well, so
        // that an agent that cannot act (a stopped or starved agent) never holds the caller.
        let bound = request.timeout.saturating_add(AGENT_ANSWER_GRACE);
        let answered =
            tokio::time::timeout(bound, link.run_keeping(run, request.stdin.clone(), &sink)).await;
        let Ok(answered) = answered else {
            // The link is dropped (a live agent ends the run when the engine hangs up); what
            // the command started goes too, found by its tag.
            let run_tag = tag.clone();
            let _ =
                tokio::task::spawn_blocking(move || paddock_agent::run::end_tagged(&run_tag)).await;
            return Err(BackendError::Unavailable {
                kind: "local".into(),
                name: self.name.clone(),
                reason: format!(
                    "the session's sandboxed agent did not answer within the command's timeout \
                     ({} s) and {} s more; the command's processes were killed (see {} for \
                     the agent's log)",
                    request.timeout.as_secs(),
                    AGENT_ANSWER_GRACE.as_secs(),
                    agent.log.display()
                ),
            });
        };
        let (end, kept) = answered.map_err(|err| match err {
            LinkError::Refused(message) => BackendError::Spawn(std::io::Error::other(message)),
            other => BackendError::Unavailable {
                kind: "local".into(),
                name: self.name.clone(),
                reason: format!(
                    "the session's sandboxed agent failed during the command ({other}); the \
                         next command starts a new one"
                ),
            },
        })?;
        if let Some(link) = kept {
            self.keep_link(&request.session, &agent.socket, link);
        }
        let (text, chars) = sink.finish();
        // A terminal ends lines with \r\n; the result reads as plain lines either way.
        let text = if request.pty {
            text.replace("\r\n", "\n")
        } else {
            text
        };
        let ended = Ended {
            pgid: None,
            tag,
            exit_code: end.code,
            timed_out: end.timed_out,
            started,
        };
        Ok(ended.finish(request, state, text, chars))
    }

    /// Starts `bash -c WRAPPER ...` for one foreground command with pipes: its process group,
    /// its exit (a task), and the reading end of its merged output.
    fn spawn_shell(&self, shell: &ForegroundShell<'_>) -> Result<StartedShell> {
        let ForegroundShell {
            request,
            state,
            workdir,
            tag,
            env,
        } = *shell;
        let (reader, writer) = std::io::pipe()?;
        // A caller listening to the output gets stderr apart: a pipe of its own.
        let (stderr_reader, writer_err) = if request.chunks.is_some() {
            let (reader, writer) = std::io::pipe()?;
            (Some(OwnedFd::from(reader)), writer)
        } else {
            (None, writer.try_clone()?)
        };
        let (program, args) =
            self.shell_argv(state, &request.session, &request.command, workdir, tag)?;
        let mut command = tokio::process::Command::new(program);
        command
            .args(&args)
            .env_clear()
            .envs(env)
            .current_dir(self.start_dir(&request.session))
            .stdin(crate::remote::client::stdin_pipe(request.stdin.is_some()))
            .stdout(Stdio::from(writer))
            .stderr(Stdio::from(writer_err))
            .process_group(0)
            .kill_on_drop(true);
        let mut child = command.spawn().map_err(BackendError::Spawn)?;
        // Our copies of the write end went into the Command and are closed now.
        drop(command);
        let pgid = child.id().map(|p| p as i32);
        if let (Some(data), Some(mut stdin)) = (request.stdin.clone(), child.stdin.take()) {
            tokio::spawn(async move {
                let _ = stdin.write_all(&data).await;
            });
        }
        let exit = tokio::spawn(async move { child.wait().await });
        Ok((pgid, exit, OwnedFd::from(reader), stderr_reader))
    }

    /// The same on a spare shell started ahead of need (unconfined backend only: a sandboxed
    /// one has its agent, which keeps spares of its own), or `None`. A new spare is started
    /// for the next command either way.
    fn take_spare(&self, shell: &ForegroundShell<'_>) -> Option<StartedShell> {
        let request = shell.request;
        let spares = self.spares.as_ref()?;
        // A spare started before its session was known: outside the session's cgroups. Its
        // one pipe carries both streams: a listener's command gets a shell of its own.
        if self.ceilings.any_process_ceiling() || request.chunks.is_some() {
            return None;
        }
        let run = self.wrapper_request(shell, shell.env.clone(), None);
        let (mut spare, boot) = spares.take(&run)?;
        let pgid = i32::try_from(spare.child.id()).ok();
        let stdin = spare.stdin.take();
        let data = request.stdin.clone();
        tokio::task::spawn_blocking(move || {
            use std::io::Write;
            if let (Some(mut stdin), Some(data)) = (stdin, data) {
                let _ = stdin.write_all(&data);
            }
        });
        let mut child = spare.child;
        let exit = tokio::task::spawn_blocking(move || {
            let status = child.wait();
            // The boot file goes once the shell has read it and ended.
            drop(boot);
            status
        });
        Some((pgid, exit, OwnedFd::from(spare.output), None))
    }

    /// The command as a job of its session's live shell (unconfined backend only, under the
    /// same conditions as a spare), or `None`.
    fn take_live(&self, shell: &ForegroundShell<'_>) -> Option<Box<LiveJob>> {
        let ForegroundShell {
            request, tag, env, ..
        } = *shell;
        let live = self.live.as_ref()?;
        // A shell started before its session's cgroups existed would be outside them.
        if self.ceilings.any_process_ceiling()
            || request.stdin.is_some()
            || request.chunks.is_some()
        {
            return None;
        }
        let mut env = env.clone();
        env.insert("PADDOCK_RUN".into(), tag.to_owned());
        let run = self.wrapper_request(shell, env, Some(tag));
        live.take(&run)
    }

    /// The wrapper run of one foreground command with pipes, as the agent's spare and live
    /// shells take it.
    fn wrapper_request(
        &self,
        shell: &ForegroundShell<'_>,
        env: BTreeMap<String, String>,
        run_id: Option<&str>,
    ) -> RunRequest {
        let ForegroundShell {
            request,
            state,
            workdir,
            tag,
            ..
        } = *shell;
        RunRequest {
            argv: std::iter::once(crate::shell::bash_path().display().to_string())
                .chain(wrapper_args(state, &request.command, workdir, tag))
                .collect(),
            env,
            clear_env: true,
            cwd: Some(self.start_dir(&request.session).display().to_string()),
            timeout_ms: None,
            renames: Vec::new(),
            run_id: run_id.map(str::to_owned),
            pty: false,
            stdin: false,
            split_stderr: false,
            keep_detached: request.keep_detached,
            keep_connection: false,
        }
    }

    pub fn registry(&self) -> ProcessRegistry {
        ProcessRegistry::new(self.state_root.join("processes"))
    }

    /// A workspace-write sandbox whose workspace is `/` confines nothing: refused, saying how
    /// to choose one (Paddock started in `/`, as some MCP clients start servers).
    fn check_workspace(&self, session: &str) -> Result<()> {
        match &self.sandbox_of(session) {
            Some(s)
                if s.mode == SandboxMode::WorkspaceWrite
                    && s.workspace == std::path::Path::new("/") =>
            {
                Err(BackendError::Unavailable {
                    kind: "local".into(),
                    name: self.name.clone(),
                    reason: format!(
                        "its workspace-write sandbox would have the whole filesystem as its \
                         workspace (paddock was started in /); start paddock in the project \
                         directory, or set [backends.{}] workspace = \"/path/to/project\" in a \
                         policy file (--policy FILE or PADDOCK_POLICY=FILE)",
                        self.name
                    ),
                })
            }
            _ => Ok(()),
        }
    }

    async fn run(&self, request: ExecRequest) -> Result<ExecOutput> {
        check_command(&request.command)?;
        self.check_workspace(&request.session)?;
        let state = session_dir(&self.state_root, &request.session)?;
        let workdir = match &request.workdir {
            Some(dir) => {
                if !dir.is_dir() {
                    return Err(BackendError::Workdir {
                        path: dir.display().to_string(),
                        reason: "does not exist or is not a directory".into(),
                    });
                }
                dir.display().to_string()
            }
            None => String::new(),
        };
        let env = self.session_env(&request.env, &request.session);
        let applied = self.apply_ceilings(&request.session)?;
        let watch = self.workspace_watch(&request.session).await;
        let started = Instant::now();
        // A command over the workspace limit is ended by dropping its future: the agent ends
        // the run's tree when its connection closes, a direct shell's group is killed.
        let mut output = tokio::select! {
            output = self.run_command(&request, &state, workdir, env) => output?,
            grown = watch_exceeded(watch.as_ref()) => {
                let message = watch
                    .as_ref()
                    .map(|w| w.message(grown, &self.name))
                    .unwrap_or_default();
                ExecOutput {
                    output_chars: message.chars().count(),
                    output: message.trim_start().to_owned(),
                    exit_code: WORKSPACE_LIMIT_EXIT_CODE,
                    timed_out: false,
                    duration_ms: started.elapsed().as_secs_f64() * 1000.0,
                    not_ended: None,
                }
            }
        };
        output
            .output
            .push_str(&self.ceiling_notes(&request.session, &applied));
        // bash's words for SIGXFSZ: the file-size rlimit that `workspace_write_mb` sets.
        if let Some(mb) = self.ceilings.workspace_write_mb
            && output.output.contains("File size limit exceeded")
        {
            output.output.push_str(&format!(
                "\n[paddock: a file reached the size limit of {mb} MB (workspace_write_mb in \
                 [backends.{}] caps every file a command writes, in /tmp too)]",
                self.name
            ));
        }
        Ok(output)
    }

    /// One foreground command, through the session's agent, on a terminal, or in a shell of
    /// its own.
    async fn run_command(
        &self,
        request: &ExecRequest,
        state: &Path,
        workdir: String,
        env: BTreeMap<String, String>,
    ) -> Result<ExecOutput> {
        let request = request.clone();
        let state = state.to_path_buf();
        // A terminal too is the session agent's: a PTY command shares the session's sandbox
        // (its /tmp, its egress port) like any other.
        if let Some(sandbox) = self.sandbox_of(&request.session).filter(|_| self.agent) {
            return self
                .run_through_agent(&sandbox, &request, &state, workdir, env)
                .await;
        }
        if request.pty {
            let tag = crate::ids::new_run_id("t");
            let argv =
                self.shell_argv(&state, &request.session, &request.command, &workdir, &tag)?;
            let start = self.start_dir(&request.session);
            return run_pty(&request, &state, argv, &tag, &env, &start).await;
        }
        let started = Instant::now();
        let tag = crate::ids::new_run_id("t");
        let shell = ForegroundShell {
            request: &request,
            state: &state,
            workdir: &workdir,
            tag: &tag,
            env: &env,
        };
        if let Some(job) = self.take_live(&shell) {
            return run_live(job, &request, &state, tag, started).await;
        }
        let (pgid, mut exit, reader, stderr_reader) = match self.take_spare(&shell) {
            Some(spare) => spare,
            None => self.spawn_shell(&shell)?,
        };
        // A caller that stops waiting (an MCP client cancelled the call) ends the command.
        let mut cancel_guard = GroupGuard { pgid };
        let mut pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(reader)?;
        let mut stderr_pipe = stderr_reader
            .map(tokio::net::unix::pipe::Receiver::from_owned_fd)
            .transpose()?;
        let output = OutputSink::streaming(request.max_output_chars, request.chunks.clone());
        let deadline = tokio::time::sleep(request.timeout);
        tokio::pin!(deadline);
        let mut buf = vec![0u8; 64 * 1024];
        let mut err_buf = vec![0u8; 64 * 1024];
        let mut timed_out = false;
        let joined = |j: std::result::Result<
            std::io::Result<std::process::ExitStatus>,
            tokio::task::JoinError,
        >| {
            j.map_err(|e| BackendError::Io(std::io::Error::other(e)))?
                .map_err(BackendError::Io)
        };
        let status = loop {
            tokio::select! {
                read = pipe.read(&mut buf) => match read {
                    Ok(0) => break joined((&mut exit).await)?,
                    Ok(n) => output.push(&buf[..n]),
                    Err(e) => return Err(e.into()),
                },
                read = read_some(stderr_pipe.as_mut(), &mut err_buf), if stderr_pipe.is_some() => {
                    match read {
                        Ok(n) if n > 0 => output.push_from(OutputStream::Stderr, &err_buf[..n]),
                        // Its end (or a failed read): stdout and the exit say when it is over.
                        _ => stderr_pipe = None,
                    }
                }
                status = &mut exit => break joined(status)?,
                () = &mut deadline, if !timed_out => {
                    timed_out = true;
                    terminate_group(pgid).await;
                }
            }
        };
        // The shell is done; read what is left for a moment, then end whatever it left behind.
        let drain_until = tokio::time::Instant::now() + DRAIN_AFTER_EXIT;
        loop {
            match tokio::time::timeout_at(drain_until, pipe.read(&mut buf)).await {
                Ok(Ok(n)) if n > 0 => output.push(&buf[..n]),
                _ => break,
            }
        }
        while let Some(stderr) = stderr_pipe.as_mut() {
            match tokio::time::timeout_at(drain_until, stderr.read(&mut err_buf)).await {
                Ok(Ok(n)) if n > 0 => output.push_from(OutputStream::Stderr, &err_buf[..n]),
                _ => stderr_pipe = None,
            }
        }
        let (text, chars) = output.finish();
        cancel_guard.pgid = None;
        let ended = Ended {
            pgid,
            tag,
            exit_code: exit_code_of(status),
            timed_out,
            started,
        };
        Ok(ended.finish(&request, &state, text, chars))
    }
}

/// One read of an optional pipe (`select!` only polls it while it is there).
async fn read_some(
    pipe: Option<&mut tokio::net::unix::pipe::Receiver>,
    buf: &mut [u8],
) -> std::io::Result<usize> {
    match pipe {
        Some(pipe) => pipe.read(buf).await,
        None => std::future::pending().await,
    }
}

/// One foreground command as a job of its session's live shell: the agent's own loop
/// ([`LiveJob::run`]) on a blocking thread, its output into the capped buffer as it comes; the
/// timeout and a caller that stops waiting end the job's tree as they end a shell's.
async fn run_live(
    mut job: Box<LiveJob>,
    request: &ExecRequest,
    state: &std::path::Path,
    tag: String,
    started: Instant,
) -> Result<ExecOutput> {
    use paddock_agent::live_shell::Ended as JobEnded;
    let pgid = job.pid();
    let cancel_guard = LiveGuard {
        pgid: i32::try_from(pgid).ok(),
    };
    let max_chars = request.max_output_chars;
    let timeout = request.timeout;
    let ran = tokio::task::spawn_blocking(move || {
        let mut output = Utf8Capped::new(max_chars);
        // Stderr is never asked apart here (a run with a listener takes another way).
        let mut collect = |_: paddock_agent::protocol::FrameKind, data: &[u8]| {
            output.push(data);
            true
        };
        let deadline = std::time::Instant::now() + timeout;
        let mut timed_out = false;
        let code = loop {
            match job.run(None, (!timed_out).then_some(deadline), &mut collect) {
                JobEnded::Exited(code) => break code,
                // As a spawned shell's: its process group, TERM then KILL (no scan of the
                // host's /proc, which the agent does in its sandbox's small PID namespace).
                JobEnded::Deadline | JobEnded::HungUp => {
                    timed_out = true;
                    paddock_agent::run::end_run(pgid, None);
                }
            }
        };
        // What the job left in its group goes before the rest of the output is read.
        if let Ok(group) = i32::try_from(pgid) {
            let _ = killpg(Pid::from_raw(group), Signal::SIGKILL);
        }
        job.drain(std::time::Instant::now() + DRAIN_AFTER_EXIT, &mut collect);
        let problems = job.finish();
        drop(job);
        (code, timed_out, output, problems)
    })
    .await
    .map_err(|e| BackendError::Io(std::io::Error::other(e)))?;
    let (code, timed_out, mut output, problems) = ran;
    for problem in problems {
        output.push(format!("paddock: {problem}\n").as_bytes());
    }
    drop(cancel_guard.disarm());
    let ended = Ended {
        pgid: i32::try_from(pgid).ok(),
        tag,
        exit_code: code,
        timed_out,
        started,
    };
    let chars = output.total_chars();
    Ok(ended.finish(request, state, output.finish(), chars))
}

/// Ends a live job's process group when the future running it is dropped before it answered.
struct LiveGuard {
    pgid: Option<i32>,
}

impl LiveGuard {
    fn disarm(mut self) -> Self {
        self.pgid = None;
        self
    }
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid.and_then(|p| u32::try_from(p).ok()) {
            // Off the caller's thread: the end waits out a grace between TERM and KILL.
            std::thread::spawn(move || paddock_agent::run::end_run(pgid, None));
        }
    }
}

/// One foreground command with pipes as each way of starting it (the live shell, a spare, a
/// shell of its own) takes it: the request, its session's state directory, the workdir and
/// run tag the wrapper gets, and the command's environment.
#[derive(Clone, Copy)]
struct ForegroundShell<'a> {
    request: &'a ExecRequest,
    state: &'a Path,
    workdir: &'a str,
    tag: &'a str,
    env: &'a BTreeMap<String, String>,
}

/// A started foreground shell: its process group, its exit, its output (merged, or stdout
/// with stderr apart).
type StartedShell = (
    Option<i32>,
    tokio::task::JoinHandle<std::io::Result<std::process::ExitStatus>>,
    OwnedFd,
    Option<OwnedFd>,
);

/// Kills a foreground command's process group, and what escaped it, when the future running
/// the command is dropped before the command ended.
struct GroupGuard {
    pgid: Option<i32>,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid {
            let escaped = crate::procfs::descendants(pgid);
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
            for pid in escaped {
                let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
    }
}

/// A command that has exited (or was killed at its deadline).
struct Ended {
    pgid: Option<i32>,
    tag: String,
    exit_code: i32,
    timed_out: bool,
    started: Instant,
}

impl Ended {
    /// Ends the command's leftovers, commits its shell state and builds the answer.
    fn finish(
        self,
        request: &ExecRequest,
        state: &std::path::Path,
        mut text: String,
        chars: usize,
    ) -> ExecOutput {
        if let Some(pgid) = self.pgid {
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
        }
        crate::shell::commit_state(state, &self.tag);
        let exit_code = if self.timed_out {
            text.push_str(&format!(
                "\n[paddock: command timed out after {} s and was killed]",
                request.timeout.as_secs_f64()
            ));
            TIMEOUT_EXIT_CODE
        } else {
            self.exit_code
        };
        ExecOutput {
            output: text,
            exit_code,
            timed_out: self.timed_out,
            output_chars: chars,
            duration_ms: self.started.elapsed().as_secs_f64() * 1000.0,
            not_ended: None,
        }
    }
}

fn exit_code_of(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// A client's workspace becomes writable in a workspace-write sandbox: never the whole
/// filesystem, a system directory or a place inside Paddock's own state (a state directory
/// inside the workspace stays masked by the sandbox).
fn refuse_system_workspace(workspace: &Path, state_root: &Path) -> Result<()> {
    // Trees no project lives in; /var itself holds projects (/var/www, /var/tmp) beside
    // system state.
    const SYSTEM: &[&str] = &[
        "/bin",
        "/boot",
        "/dev",
        "/etc",
        "/lib",
        "/lib32",
        "/lib64",
        "/proc",
        "/run",
        "/sbin",
        "/sys",
        "/usr",
        "/var/lib",
        "/var/log",
        "/var/run",
        "/var/spool",
        "/var/cache",
        "/var/mail",
        "/var/backups",
    ];
    let state_root = std::fs::canonicalize(state_root).unwrap_or_else(|_| state_root.to_owned());
    let refused = workspace == Path::new("/")
        || workspace == Path::new("/var")
        || SYSTEM.iter().any(|dir| workspace.starts_with(dir))
        || workspace.starts_with(&state_root);
    if refused {
        return Err(BackendError::Workdir {
            path: workspace.display().to_string(),
            reason: "a client's workspace may not be /, a system directory or hold Paddock's \
                     state; open the project directory in the client, or set [backends.NAME] \
                     workspace in a policy"
                .into(),
        });
    }
    Ok(())
}

fn home_dir() -> PathBuf {
    std::env::var_os("HOME").map_or_else(|| PathBuf::from("/"), PathBuf::from)
}

/// The environment a command sees: ours minus anything that looks like a credential, plus the
/// request's own variables and the session id.
pub fn command_env(extra: &BTreeMap<String, String>, session: &str) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = std::env::vars()
        .filter(|(k, _)| !crate::redact::is_secret_name(k) && !k.starts_with("PADDOCK_"))
        .collect();
    env.entry("PATH".into())
        .or_insert_with(|| "/usr/local/bin:/usr/bin:/bin".into());
    env.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
    env.insert("PADDOCK_SESSION".into(), session.to_owned());
    env
}

/// The state-keeping wrapper's arguments after `bash`: one command of a session.
fn wrapper_args(state: &Path, command: &str, workdir: &str, tag: &str) -> Vec<String> {
    vec![
        "-c".to_owned(),
        WRAPPER.to_owned(),
        "paddock".to_owned(),
        state.display().to_string(),
        command.to_owned(),
        workdir.to_owned(),
        tag.to_owned(),
    ]
}

async fn run_pty(
    request: &ExecRequest,
    state: &std::path::Path,
    (program, args): (PathBuf, Vec<String>),
    tag: &str,
    env: &BTreeMap<String, String>,
    start: &std::path::Path,
) -> Result<ExecOutput> {
    let started = Instant::now();
    let (mut pty, pts) =
        pty_process::open().map_err(|e| BackendError::Spawn(std::io::Error::other(e)))?;
    pty.resize(pty_process::Size::new(40, 120))
        .map_err(|e| BackendError::Spawn(std::io::Error::other(e)))?;
    let mut child = pty_process::Command::new(program)
        .args(&args)
        .env_clear()
        .envs(env.iter().chain(std::iter::once((
            &"TERM".to_owned(),
            &"xterm-256color".to_owned(),
        ))))
        .current_dir(start)
        .kill_on_drop(true)
        .spawn(pts)
        .map_err(|e| BackendError::Spawn(std::io::Error::other(e)))?;
    let pgid = child.id().map(|p| p as i32);
    let mut cancel_guard = GroupGuard { pgid };
    if let Some(data) = &request.stdin {
        pty.write_all(data).await?;
    }
    let output = OutputSink::streaming(request.max_output_chars, request.chunks.clone());
    let deadline = tokio::time::sleep(request.timeout);
    tokio::pin!(deadline);
    let mut buf = vec![0u8; 64 * 1024];
    let mut timed_out = false;
    let mut status = None;
    loop {
        tokio::select! {
            read = pty.read(&mut buf) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => output.push(&buf[..n]),
            },
            s = child.wait(), if status.is_none() => {
                status = Some(s?);
                // Read the rest briefly; the terminal reports EIO once every writer is gone.
                let until = tokio::time::Instant::now() + DRAIN_AFTER_EXIT;
                while let Ok(Ok(n)) = tokio::time::timeout_at(until, pty.read(&mut buf)).await {
                    if n == 0 { break; }
                    output.push(&buf[..n]);
                }
                break;
            }
            () = &mut deadline, if !timed_out => {
                timed_out = true;
                terminate_group(pgid).await;
            }
        }
    }
    let status = match status {
        Some(s) => s,
        None => child.wait().await?,
    };
    cancel_guard.pgid = None;
    let (text, chars) = output.finish();
    let text = text.replace("\r\n", "\n");
    let ended = Ended {
        pgid,
        tag: tag.to_owned(),
        exit_code: exit_code_of(status),
        timed_out,
        started,
    };
    Ok(ended.finish(request, state, text, chars))
}

impl Environment for LocalEnvironment {
    fn name(&self) -> &str {
        &self.name
    }

    fn kind(&self) -> &'static str {
        "local"
    }

    fn exec(&self, request: ExecRequest) -> BackendFuture<'_, ExecOutput> {
        Box::pin(self.run(request))
    }

    fn spawn_background(&self, request: BackgroundRequest) -> BackendFuture<'_, ProcessRecord> {
        Box::pin(async move {
            check_command(&request.command)?;
            self.check_workspace(&request.session)?;
            let state = session_dir(&self.state_root, &request.session)?;
            if let Some(dir) = &request.workdir
                && !dir.is_dir()
            {
                return Err(BackendError::Workdir {
                    path: dir.display().to_string(),
                    reason: "does not exist or is not a directory".into(),
                });
            }
            let mut env = self.session_env(&request.env, &request.session);
            self.apply_ceilings(&request.session)?;
            let id = ProcessRegistry::new_id();
            let workdir = crate::workdir_arg(request.workdir.as_deref());
            let proxied = self
                .sandbox_of(&request.session)
                .filter(|_| self.egress.is_some());
            // Sandboxed, or under the session's ceilings: the supervisor runs this argv.
            let local_argv = if let Some(sandbox) = proxied {
                Some(
                    self.proxied_background_argv(
                        &sandbox, &state, &request, &workdir, &id, &mut env,
                    )
                    .await?,
                )
            } else if self.sandbox.is_some() || self.ceilings.any_process_ceiling() {
                let (program, args) =
                    self.shell_argv(&state, &request.session, &request.command, &workdir, &id)?;
                Some(
                    std::iter::once(program.display().to_string())
                        .chain(args)
                        .collect(),
                )
            } else {
                None
            };
            self.registry()
                .start(
                    &self.supervisor_exe,
                    ProcessSpec {
                        id,
                        request,
                        shell_state: state,
                        env,
                        remote: None,
                        local_argv,
                    },
                )
                .await
        })
    }

    fn health(&self) -> BackendFuture<'_, ()> {
        Box::pin(async move {
            let out = tokio::process::Command::new(crate::shell::bash_path())
                .args(["-c", "true"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .await
                .map_err(|e| BackendError::Unavailable {
                    kind: "local".into(),
                    name: self.name.clone(),
                    reason: format!("cannot run bash: {e}"),
                })?;
            if out.success() {
                Ok(())
            } else {
                Err(BackendError::Unavailable {
                    kind: "local".into(),
                    name: self.name.clone(),
                    reason: "bash -c true failed".into(),
                })
            }
        })
    }

    fn scratch_dir(&self, session: &str) -> String {
        python_runs_dir(&self.state_root, session)
            .display()
            .to_string()
    }

    fn files<'a>(
        &'a self,
        session: &'a str,
        operation: paddock_files::FileRequest,
    ) -> BackendFuture<'a, crate::FileAnswer> {
        Box::pin(self.file_operation(session, operation))
    }

    fn python_context<'a>(
        &'a self,
        session: &'a str,
        request: paddock_agent::protocol::ContextRequest,
        chunks: Option<crate::ChunkSender>,
    ) -> BackendFuture<'a, crate::ContextAnswer> {
        Box::pin(self.context_action(session, request, chunks))
    }

    fn current_dir(&self, session: &str) -> Option<PathBuf> {
        let state = session_dir(&self.state_root, session).ok()?;
        let request = paddock_agent::protocol::FilesRequest {
            operation: paddock_files::FileRequest::Info { path: ".".into() },
            cwd_file: Some(state.join("cwd").display().to_string()),
            start_dir: Some(self.start_dir(session).display().to_string()),
        };
        Some(paddock_agent::files::base_dir(&request))
    }

    fn write_file<'a>(
        &'a self,
        _session: &'a str,
        path: &'a str,
        contents: Vec<u8>,
    ) -> BackendFuture<'a, ()> {
        Box::pin(async move { Self::write_local_file(path, &contents) })
    }

    fn collect_files<'a>(
        &'a self,
        _session: &'a str,
        dir: &'a str,
        max_files: usize,
        inline_bytes: u64,
    ) -> BackendFuture<'a, Vec<RemoteFile>> {
        Box::pin(async move { Ok(Self::collect_local_files(dir, max_files, inline_bytes)) })
    }

    fn set_session_workspace<'a>(
        &'a self,
        session: &'a str,
        workspace: &'a Path,
    ) -> BackendFuture<'a, bool> {
        Box::pin(async move {
            crate::shell::check_session(session)?;
            if !self.client_workspaces {
                return Ok(false);
            }
            let workspace = std::fs::canonicalize(workspace)
                .ok()
                .filter(|dir| dir.is_dir())
                .ok_or_else(|| BackendError::Workdir {
                    path: workspace.display().to_string(),
                    reason: "the client's workspace does not exist or is not a directory".into(),
                })?;
            refuse_system_workspace(&workspace, &self.state_root)?;
            if self.client_workspace(session).as_ref() == Some(&workspace) {
                return Ok(true);
            }
            let state = session_dir(&self.state_root, session)?;
            // The session's sandboxed agent was confined to the old workspace: it ends, and the
            // next command starts one confined to the new one.
            if let Some(sandbox) = self.sandbox_of(session).filter(|_| self.agent)
                && let Ok(agent) = self.sandboxed_agent(&sandbox, &state, session)
            {
                crate::agent::shutdown_agent(&agent.socket).await;
                if let Some(agent_dir) = agent.socket.parent() {
                    let _ = std::fs::remove_dir_all(agent_dir);
                }
            }
            if let Ok(mut map) = self.session_workspaces.lock() {
                map.insert(session.to_owned(), workspace.clone());
            }
            // The session's next command starts in its new workspace.
            let cwd = state.join("cwd");
            std::fs::write(&cwd, format!("{}\n", workspace.display())).map_err(|e| {
                BackendError::State {
                    path: cwd.display().to_string(),
                    reason: e.to_string(),
                }
            })?;
            Ok(true)
        })
    }

    fn close_session<'a>(&'a self, session: &'a str) -> BackendFuture<'a, ()> {
        Box::pin(async move {
            crate::shell::check_session(session)?;
            if let Ok(mut map) = self.session_workspaces.lock() {
                map.remove(session);
            }
            self.forget_agent(session);
            let dir = self.state_root.join("sessions").join(session);
            if let Some(live) = &self.live {
                live.end_for_state(&dir);
            }
            // The session's sandboxed agent ends (and with it everything left in its sandbox),
            // then its socket directory and private /tmp go.
            // An unconfined session's agent (its Python contexts) ends with it.
            let unconfined = self.unconfined_agent_dir(session);
            if unconfined.is_dir() {
                let socket = unconfined.join(paddock_agent::protocol::SOCKET_NAME);
                crate::agent::shutdown_agent(&socket).await;
                let _ = std::fs::remove_dir_all(&unconfined);
            }
            if let Some(sandbox) = self.sandbox_of(session).filter(|_| self.agent)
                && dir.is_dir()
                && let Ok(agent) = self.sandboxed_agent(&sandbox, &dir, session)
            {
                crate::agent::shutdown_agent(&agent.socket).await;
                if let Some(egress) = &self.egress {
                    let listen = agent.socket.with_file_name(crate::egress::EGRESS_SOCKET);
                    let _ = egress.release(&listen).await;
                }
                if let Some(agent_dir) = agent.socket.parent() {
                    let _ = std::fs::remove_dir_all(agent_dir);
                }
            }
            // What still carries the session's mark (a daemon a command detached, which no
            // sandbox takes along on the unconfined backend) ends with it.
            let cgroups = self.ceiling_plan(session).cgroups;
            let mark = self.freeze_mark(session);
            let _ = tokio::task::spawn_blocking(move || {
                crate::freeze::end_session(&mark, &cgroups);
            })
            .await;
            // What is left in the session's cgroups (background processes, escapees) is
            // killed and the groups removed; its /tmp tmpfs is unmounted before it is removed.
            self.release_ceilings(session);
            let _ = std::fs::remove_dir_all(self.session_tmp(session));
            self.remove_fork(session);
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(BackendError::State {
                    path: dir.display().to_string(),
                    reason: e.to_string(),
                }),
            }
        })
    }

    fn snapshot_session<'a>(
        &'a self,
        session: &'a str,
        dir: &'a Path,
        _tag: &'a str,
        budget_bytes: u64,
    ) -> BackendFuture<'a, crate::snapshot::SavedEnvironment> {
        Box::pin(self.snapshot(session, dir, budget_bytes))
    }

    fn start_from_snapshot<'a>(
        &'a self,
        session: &'a str,
        saved: &'a crate::snapshot::SavedEnvironment,
        dir: &'a Path,
    ) -> BackendFuture<'a, ()> {
        Box::pin(self.start_from(session, saved, dir))
    }

    fn pause_session<'a>(&'a self, session: &'a str) -> BackendFuture<'a, bool> {
        Box::pin(async move {
            crate::shell::check_session(session)?;
            let cgroups = self.ceiling_plan(session).cgroups;
            let mark = self.freeze_mark(session);
            let stopped =
                tokio::task::spawn_blocking(move || crate::freeze::stop_session(&mark, &cgroups))
                    .await
                    .map_err(|e| BackendError::Io(std::io::Error::other(e)))?;
            Ok(stopped > 0)
        })
    }

    fn resume_session<'a>(&'a self, session: &'a str) -> BackendFuture<'a, ()> {
        Box::pin(async move {
            crate::shell::check_session(session)?;
            let cgroups = self.ceiling_plan(session).cgroups;
            let mark = self.freeze_mark(session);
            tokio::task::spawn_blocking(move || crate::freeze::continue_session(&mark, &cgroups))
                .await
                .map_err(|e| BackendError::Io(std::io::Error::other(e)))
        })
    }

    /// The cgroups and /tmp mounts of sessions that are gone (an engine killed before it
    /// closed them).
    fn sweep_orphans<'a>(&'a self, live_sessions: &'a [String]) -> BackendFuture<'a, usize> {
        Box::pin(async move {
            let mut removed =
                crate::cgroup::sweep(cgroup_layout(), &self.cgroup_owner(), live_sessions);
            let tmp_root = self.state_root.join("sandbox-tmp");
            for mount in mount_points_under(&tmp_root) {
                let orphaned = mount.parent() == Some(tmp_root.as_path())
                    && mount
                        .file_name()
                        .is_some_and(|name| !live_sessions.iter().any(|s| name == s.as_str()))
                    && !crate::cgroup::younger(&mount, crate::cgroup::YOUNG);
                if orphaned {
                    unmount_tmp(&mount);
                    let _ = std::fs::remove_dir_all(&mount);
                    removed += 1;
                }
            }
            Ok(removed)
        })
    }
}

impl LocalEnvironment {
    /// A file operation: in the session's sandbox by its agent (Landlock decides what may be
    /// written, as for a command; the agent serves it even where commands skip the agent), or
    /// here in the engine when the backend is unconfined. Both run `paddock-files`.
    async fn file_operation(
        &self,
        session: &str,
        operation: paddock_files::FileRequest,
    ) -> Result<crate::FileAnswer> {
        crate::shell::check_session(session)?;
        self.check_workspace(session)?;
        let state = session_dir(&self.state_root, session)?;
        let request = paddock_agent::protocol::FilesRequest {
            operation,
            cwd_file: Some(state.join("cwd").display().to_string()),
            start_dir: Some(self.start_dir(session).display().to_string()),
        };
        let Some(sandbox) = self.sandbox_of(session) else {
            // Unconfined: the engine's own thread does it (no ceilings apply to the engine).
            return tokio::task::spawn_blocking(move || {
                let base = paddock_agent::files::base_dir(&request);
                paddock_files::execute(&request.operation, &base)
            })
            .await
            .map_err(|e| BackendError::Io(std::io::Error::other(e)));
        };
        // The agent a file call starts is the one the session's commands use: it joins the
        // session's cgroups and sees its /tmp, which must exist first.
        let _applied = self.apply_ceilings(session)?;
        let (agent, link) = self
            .connect_sandboxed_agent(&sandbox, &state, session)
            .await?;
        self.serve_egress(session, &agent.socket).await?;
        link.files(request)
            .await
            .map_err(|err| BackendError::Unavailable {
                kind: "local".into(),
                name: self.name.clone(),
                reason: format!(
                    "the session's sandboxed agent failed during a file operation ({err}); see {} \
                 for its log",
                    agent.log.display()
                ),
            })
    }

    fn write_local_file(path: &str, contents: &[u8]) -> Result<()> {
        let path = std::path::Path::new(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(path, contents)?;
        Ok(())
    }

    fn collect_local_files(dir: &str, max_files: usize, inline_bytes: u64) -> Vec<RemoteFile> {
        use base64::Engine as _;
        use sha2::{Digest, Sha256};
        let root = std::path::Path::new(dir);
        let mut files = Vec::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(d) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&d) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                let Ok(meta) = entry.metadata() else { continue };
                if meta.is_dir() {
                    stack.push(path);
                    continue;
                }
                if !meta.is_file() || files.len() >= max_files {
                    continue;
                }
                let Ok(bytes) = std::fs::read(&path) else {
                    continue;
                };
                files.push(RemoteFile {
                    path: path
                        .strip_prefix(root)
                        .unwrap_or(&path)
                        .display()
                        .to_string(),
                    size: meta.len(),
                    sha256: hex::encode(Sha256::digest(&bytes)),
                    content_base64: (meta.len() <= inline_bytes)
                        .then(|| base64::engine::general_purpose::STANDARD.encode(&bytes)),
                });
            }
        }
        files.sort_by(|a, b| a.path.cmp(&b.path));
        files
    }
}
