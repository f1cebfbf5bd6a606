//! The host side of the in-environment agent (`paddock-agent`, crate `agent/`).
//!
//! A backend whose environment can host the agent implements [`AgentHost`]: where the agent's
//! socket appears on this machine, and the one command (run through the backend's own client:
//! `docker exec`, `apptainer exec`, `ssh`) that starts it detached. [`AgentTransport`] wraps such
//! a transport: every run goes over the socket (a connection and a fork, no client process),
//! and the backend's own client is used only to start the agent, to bring up the environment and
//! for background processes.
//!
//! Faults: a socket nobody answers on means the agent is gone: it is started again and the run
//! goes on. An agent that speaks another protocol version is told to shut down and replaced. A
//! run whose connection breaks is a `backend` error naming the agent; the next run starts a new
//! agent. An agent that cannot start (missing binary, noexec mount, other architecture) is an
//! error saying so, never a quiet switch to per-command exec: that is `agent = false`.

pub mod binary;
pub mod detached;
pub mod link;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::remote::{ClientArgv, ExitFuture, OutputSink, TargetRun, Transport};
use crate::{BackendError, BackendFuture, Result};
use binary::{AgentBinary, NotFound};
use link::{Link, LinkError};

pub use paddock_agent::protocol::{PROTOCOL_VERSION, RunRequest, SOCKET_NAME};

/// Where the agent binary is placed inside a container or instance.
pub const AGENT_PATH_INSIDE: &str = "/.paddock/bin/paddock-agent";
/// The directory, inside, that is the host's per-environment agent directory.
pub const AGENT_DIR_INSIDE: &str = "/.paddock/run";

/// How long an agent told to shut down may take to let go of its socket.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(3);

/// Where a container or instance backend places the agent: the binary bound read-only at
/// [`AGENT_PATH_INSIDE`], a per-environment directory of `runtime_dir` at [`AGENT_DIR_INSIDE`].
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct AgentPlacement {
    pub binary: PathBuf,
    /// Changes when the binary is rebuilt: part of a container's settings digest, so that a
    /// container holding an old binary is replaced.
    pub identity: String,
    /// Not part of what a container is made with (its digest); carried apart where needed.
    #[serde(skip)]
    pub runtime_dir: PathBuf,
}

impl AgentPlacement {
    pub fn new(binary: &AgentBinary, runtime_dir: PathBuf) -> Self {
        Self {
            binary: binary.path.clone(),
            identity: binary.identity.clone(),
            runtime_dir,
        }
    }

    /// The bind mounts (`host:inside[:ro]`) for the environment keyed `key`.
    pub fn binds(&self, key: &str) -> Vec<String> {
        vec![
            format!("{}:{AGENT_PATH_INSIDE}:ro", self.binary.display()),
            format!(
                "{}:{AGENT_DIR_INSIDE}",
                agent_dir(&self.runtime_dir, key).display()
            ),
        ]
    }
}

/// A transport whose environment can run the agent.
pub trait AgentHost: Transport {
    /// The socket on this machine through which the session's agent is reached (its directory
    /// exists when this returns).
    fn agent_socket(&self, session: &str) -> Result<PathBuf>;
    /// Starts the session's agent detached and answers once it listens on
    /// [`AgentHost::agent_socket`]. The default runs [`AgentHost::agent_start_argv`] through
    /// the transport's own client.
    fn start_agent<'a>(&'a self, session: &'a str) -> BackendFuture<'a, ()> {
        Box::pin(async move {
            let run = TargetRun {
                argv: self.agent_start_argv(session),
                stdin: None,
                pty: false,
                keep_detached: false,
            };
            let (status, output) = run_collecting(self, session, run).await?;
            check_started(self, status, &output)
        })
    }
    /// Gives the session an environment kept ready (a warm pool), its agent already
    /// listening on [`AgentHost::agent_socket`]; `false` when there is none to claim.
    fn claim_warm<'a>(&'a self, session: &'a str) -> BackendFuture<'a, bool> {
        let _ = session;
        Box::pin(async { Ok(false) })
    }

    /// Whether the session's environment, when it exists, was made with the backend's current
    /// settings. A running agent is used without asking the backend otherwise, so an
    /// environment made with settings the policy has changed since (another runtime, say)
    /// would serve on; one that is not current is closed and made again before its agent is
    /// used. The default: always current (nothing recorded to compare).
    fn made_with_current_settings(&self, session: &str) -> bool {
        let _ = session;
        true
    }

    /// Whether the agent binary the environment holds speaks another protocol than this
    /// engine (asked when a start failed). The default asks [`AGENT_PATH_INSIDE`] `version`.
    fn agent_is_stale<'a>(
        &'a self,
        session: &'a str,
    ) -> Pin<Box<dyn Future<Output = bool> + Send + 'a>> {
        Box::pin(async move {
            let run = TargetRun {
                argv: vec![AGENT_PATH_INSIDE.to_owned(), "version".to_owned()],
                stdin: None,
                pty: false,
                keep_detached: false,
            };
            match run_collecting(self, session, run).await {
                Ok((0, output)) => !output.contains(&format!("protocol {PROTOCOL_VERSION}")),
                _ => false,
            }
        })
    }

    /// Why the session's agent was lost, when the environment knows better than a broken
    /// connection (a Slurm job that ended, its node gone); `None` otherwise. `what` says what
    /// happened to the agent, for the answer ("was lost in the middle of the command").
    fn explain_loss<'a>(
        &'a self,
        session: &'a str,
        what: &'a str,
    ) -> Pin<Box<dyn Future<Output = Option<String>> + Send + 'a>> {
        let _ = (session, what);
        Box::pin(async { None })
    }

    /// Where the agent binary lies as the target sees it, for runs outside a served connection
    /// (background commands) to commit their session state with `paddock-agent commit-state`
    /// (`$HOME/...` is expanded on the target); `None`: they keep the plain commit.
    fn agent_program(&self) -> Option<String> {
        Some(AGENT_PATH_INSIDE.to_owned())
    }

    /// `network = "proxy"`: the environment's only way out is the agent's egress port.
    fn egress(&self) -> bool {
        false
    }

    /// The program, run through this transport's own client, that starts the agent detached.
    fn agent_start_argv(&self, session: &str) -> Vec<String> {
        let _ = session;
        let mut argv = vec![
            AGENT_PATH_INSIDE.to_owned(),
            "serve".to_owned(),
            "--socket".to_owned(),
            format!("{AGENT_DIR_INSIDE}/{SOCKET_NAME}"),
            "--daemon".to_owned(),
        ];
        if self.egress() {
            argv.extend(crate::egress::agent_args());
        }
        argv
    }
}

/// The per-environment directory under `runtime_dir` that holds an agent's socket, named by a
/// digest of `key` (socket paths are limited to 107 bytes, session ids are not).
pub fn agent_dir(runtime_dir: &Path, key: &str) -> PathBuf {
    runtime_dir.join(hex::encode(&Sha256::digest(key.as_bytes())[..8]))
}

/// The socket of the agent of the environment keyed `key` (a container, an instance, a host's
/// session) of `host`'s backend, placed by `placement`; `None`: the backend runs without the
/// agent.
pub fn placed_agent_socket(
    host: &impl Transport,
    placement: Option<&AgentPlacement>,
    key: &str,
) -> Result<PathBuf> {
    let (kind, backend) = (host.kind(), host.name());
    let Some(agent) = placement else {
        return Err(BackendError::Unavailable {
            kind: kind.to_owned(),
            name: backend.to_owned(),
            reason: "this backend runs without the agent (agent = false)".to_owned(),
        });
    };
    prepare_agent_dir(&agent_dir(&agent.runtime_dir, key), kind, backend)
}

/// Makes `dir` (world-writable: an image's user may not be ours; the state directory above it
/// is the user's own) and answers the socket path in it.
pub fn prepare_agent_dir(dir: &Path, kind: &str, name: &str) -> Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let unavailable = |reason: String| BackendError::Unavailable {
        kind: kind.to_owned(),
        name: name.to_owned(),
        reason,
    };
    // The directory of all agent directories is the user's alone: another user of this
    // machine can neither reach a socket (and read what the engine sends) nor plant one. The
    // per-environment directories below are open to any user *inside* the environment (an
    // image's user need not be ours), who reaches them through the bind mount only.
    // Makes `path`, then sets `mode` on it (best effort).
    let make_dir = |path: &Path, mode: u32| -> Result<()> {
        std::fs::create_dir_all(path).map_err(|e| {
            unavailable(format!(
                "cannot make the agent directory {}: {e}",
                path.display()
            ))
        })?;
        let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode));
        Ok(())
    };
    if let Some(parent) = dir.parent() {
        make_dir(parent, 0o700)?;
    }
    make_dir(dir, 0o777)?;
    let socket = dir.join(SOCKET_NAME);
    if socket.as_os_str().len() > 107 {
        return Err(unavailable(format!(
            "the agent socket path {} is longer than a Unix socket allows (107 bytes): use a \
             shorter PADDOCK_HOME",
            socket.display()
        )));
    }
    Ok(socket)
}

/// The run id a remote command carries (`env PADDOCK_RUN=<id> ...`), so that the agent can end
/// its whole tree if the engine hangs up.
fn run_id_of(argv: &[String]) -> Option<String> {
    argv.iter()
        .take(3)
        .find_map(|a| a.strip_prefix("PADDOCK_RUN=").map(str::to_owned))
}

/// The agent's request for a target run. A wrapper run (a command with the session's state)
/// has its `env PADDOCK_RUN=ID` prefix turned into the request's environment (one exec less),
/// writes its state under run-tagged names the agent renames into place, and leaves the
/// leftover kill to the agent (a /proc scan in Rust, not in bash).
fn agent_request(argv: Vec<String>, pty: bool) -> RunRequest {
    let mut request = RunRequest {
        run_id: run_id_of(&argv),
        argv,
        env: BTreeMap::new(),
        clear_env: false,
        cwd: None,
        timeout_ms: None,
        renames: Vec::new(),
        pty,
        stdin: false,
        split_stderr: false,
        keep_detached: false,
        keep_connection: false,
    };
    if let Some(wrapper) = crate::remote::script::wrapper_run(&request.argv) {
        request.argv.drain(..2);
        request
            .env
            .insert("PADDOCK_RUN".into(), wrapper.run_id.clone());
        request
            .env
            .insert("PADDOCK_AGENT_COMMIT".into(), "1".into());
        let dir = &wrapper.state_dir;
        request.renames = ["env.sh", "cwd"]
            .iter()
            .map(|name| {
                (
                    format!("{dir}/{name}.{}", wrapper.run_id),
                    format!("{dir}/{name}"),
                )
            })
            .collect();
    }
    request
}

/// Any [`AgentHost`] with its runs going through the agent.
pub struct AgentTransport<T: AgentHost> {
    inner: T,
    binary: std::result::Result<AgentBinary, NotFound>,
    /// The inner transport's environment, and where the agent lies on the target
    /// (`PADDOCK_STATE_COMMIT`, read by the wrapper of runs outside a connection); made on
    /// first use (finding the path may read the binary).
    env: std::sync::OnceLock<BTreeMap<String, String>>,
    /// Serves the egress socket of a `network = "proxy"` environment.
    egress: Option<Arc<dyn crate::egress::EgressHost>>,
}

impl<T: AgentHost> AgentTransport<T> {
    pub fn new(inner: T, binary: std::result::Result<AgentBinary, NotFound>) -> Self {
        Self {
            inner,
            binary,
            env: std::sync::OnceLock::new(),
            egress: None,
        }
    }

    /// Who serves the environment's egress socket when the inner transport is proxied.
    pub fn with_egress(mut self, egress: Arc<dyn crate::egress::EgressHost>) -> Self {
        self.egress = Some(egress);
        self
    }

    /// Before a command on a proxied environment: its way out is served.
    async fn serve_egress(&self, session: &str, socket: &Path) -> Result<()> {
        if !self.inner.egress() {
            return Ok(());
        }
        let Some(egress) = &self.egress else {
            return Err(self.unavailable(
                "network = \"proxy\" needs the engine's egress proxy, and this engine has none",
            ));
        };
        let listen = socket.with_file_name(crate::egress::EGRESS_SOCKET);
        egress.serve(session, &listen).await
    }

    pub fn inner(&self) -> &T {
        &self.inner
    }

    fn unavailable(&self, reason: impl Into<String>) -> BackendError {
        BackendError::Unavailable {
            kind: self.inner.kind().to_owned(),
            name: self.inner.name().to_owned(),
            reason: reason.into(),
        }
    }

    /// The error for a session whose agent `what` ("was lost in the middle of the command"):
    /// the environment's own explanation when it has one (a Slurm job ended, its node gone),
    /// else `fallback`'s.
    async fn lost(
        &self,
        session: &str,
        what: &str,
        fallback: impl FnOnce() -> String,
    ) -> BackendError {
        let why = self.inner.explain_loss(session, what).await;
        self.unavailable(why.unwrap_or_else(fallback))
    }

    /// A greeted connection to the session's agent, starting (or replacing) the agent first
    /// when needed.
    async fn connect(&self, session: &str) -> Result<Link> {
        if let Err(missing) = &self.binary {
            return Err(self.unavailable(missing.explain()));
        }
        let socket = self.inner.agent_socket(session)?;
        if !self.inner.made_with_current_settings(session) {
            tracing::info!(
                backend = self.inner.name(),
                session,
                "the environment was made with other settings than the policy's; replacing it"
            );
            self.inner.close_session(session).await?;
        }
        let mut old_versions = 0;
        let mut silent = 0;
        let mut tried_warm = false;
        loop {
            match Link::open(&socket).await {
                Ok((link, Ok(()))) => {
                    self.serve_egress(session, &socket).await?;
                    return Ok(link);
                }
                Ok((link, Err(LinkError::Version { found, agent }))) => {
                    old_versions += 1;
                    tracing::info!(backend = self.inner.name(), found, %agent, "replacing an agent of another protocol version");
                    let _ = link.shutdown().await;
                    wait_until_gone(&socket).await;
                    match old_versions {
                        1 => {}
                        // The environment itself holds the old binary (a container or instance
                        // made before the engine was rebuilt): it is replaced, its state lost.
                        2 => {
                            tracing::warn!(
                                backend = self.inner.name(),
                                session,
                                "the environment holds an old agent binary; replacing the environment"
                            );
                            self.inner.close_session(session).await?;
                        }
                        _ => {
                            return Err(self.unavailable(format!(
                                "the agent still speaks protocol {found} (agent {agent}) after \
                                 the environment was replaced, this engine \
                                 {PROTOCOL_VERSION}: is PADDOCK_AGENT_BIN an old build?"
                            )));
                        }
                    }
                }
                Ok((_, Err(other))) | Err(other) => {
                    silent += 1;
                    if silent == 3 {
                        // A relay whose far end went silent looks like this too: the
                        // environment may know why (a node cut off).
                        return Err(self
                            .lost(session, "does not answer its relay", || {
                                format!(
                                    "the agent was started but does not answer on {}: {other}",
                                    socket.display()
                                )
                            })
                            .await);
                    }
                    tracing::debug!(backend = self.inner.name(), error = %other, "no agent answers; starting one");
                    if !tried_warm {
                        tried_warm = true;
                        if self.inner.claim_warm(session).await? {
                            continue;
                        }
                    }
                }
            }
            if let Err(err) = self.start(session).await {
                // An environment made before the engine was rebuilt holds an old agent binary,
                // which may not even start: replace the environment, once.
                if old_versions >= 2 || !self.inner.agent_is_stale(session).await {
                    return Err(err);
                }
                tracing::warn!(backend = self.inner.name(), session, %err, "the environment holds an old agent binary; replacing the environment");
                old_versions = 2;
                self.inner.close_session(session).await?;
                self.start(session).await?;
            }
        }
    }

    /// Starts the session's agent (through the backend's own client).
    async fn start(&self, session: &str) -> Result<()> {
        let started = Instant::now();
        self.inner.start_agent(session).await?;
        tracing::debug!(
            backend = self.inner.name(),
            ms = started.elapsed().as_millis() as u64,
            "agent started"
        );
        Ok(())
    }

    async fn run_through_agent(
        &self,
        session: &str,
        run: TargetRun,
        sink: OutputSink,
    ) -> Result<i32> {
        let link = self.connect(session).await?;
        let mut request = agent_request(run.argv, run.pty);
        request.keep_detached = run.keep_detached;
        if sink.splits() && !run.pty {
            // The command script merges stderr into stdout unless told not to (it unsets the
            // variable at once: it never reaches the command or the session's state).
            request
                .env
                .insert(crate::remote::script::SPLIT_STDERR_VAR.into(), "1".into());
        }
        match link.run(request, run.stdin, &sink).await {
            Ok(end) => Ok(end.code),
            Err(LinkError::Refused(message)) => {
                Err(BackendError::Spawn(std::io::Error::other(message)))
            }
            Err(other) => Err(self
                .lost(session, "was lost in the middle of the command", || {
                    format!(
                        "the agent serving this session failed during the command ({other}); the \
                         next command starts a new agent"
                    )
                })
                .await),
        }
    }
}

/// Runs `run` on the target through `transport`'s own client; answers its status and output.
pub async fn run_collecting<T: Transport + ?Sized>(
    transport: &T,
    session: &str,
    run: TargetRun,
) -> Result<(i32, String)> {
    let sink = OutputSink::new(16 * 1024);
    let status = transport.run(session, run, sink.clone()).await?;
    let output = sink.finish().0;
    Ok((status, output))
}

/// The error for an agent start that answered `status`.
pub fn check_started<T: Transport + ?Sized>(
    transport: &T,
    status: i32,
    output: &str,
) -> Result<()> {
    let unavailable = |reason: String| BackendError::Unavailable {
        kind: transport.kind().to_owned(),
        name: transport.name().to_owned(),
        reason,
    };
    let output = output.trim();
    // Shells say 126; docker's runtime answers 1 with the kernel's words.
    let lower = output.to_ascii_lowercase();
    let not_executable = lower.contains("exec format error")
        || (lower.contains("permission denied") && lower.contains("paddock-agent"));
    match status {
        0 => Ok(()),
        _ if not_executable => Err(unavailable(format!(
            "the agent cannot be executed in this environment (a noexec mount, or not an \
             x86-64 Linux environment): {output}"
        ))),
        126 => Err(unavailable(format!(
            "the agent cannot be executed in this environment (a noexec mount, or not an \
             x86-64 Linux environment): {output}"
        ))),
        127 => Err(unavailable(format!(
            "the agent binary is missing in this environment (made before the agent was \
             placed there? close the session to get a new one): {output}"
        ))),
        other => Err(unavailable(format!(
            "the agent did not start (exit {other}): {output}"
        ))),
    }
}

/// Tells the agent on `socket`, if one answers, to exit (its runs end with it).
pub async fn shutdown_agent(socket: &Path) {
    let opened = tokio::time::timeout(Duration::from_secs(2), Link::open(socket)).await;
    if let Ok(Ok((link, _))) = opened {
        let _ = tokio::time::timeout(Duration::from_secs(2), link.shutdown()).await;
    }
}

/// Waits (briefly) until nothing accepts on `socket`.
pub(crate) async fn wait_until_gone(socket: &Path) {
    let until = Instant::now() + SHUTDOWN_WAIT;
    while Instant::now() < until {
        if tokio::net::UnixStream::connect(socket).await.is_err() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl<T: AgentHost> Transport for AgentTransport<T> {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }

    fn is_container(&self) -> bool {
        self.inner.is_container()
    }

    fn name(&self) -> &str {
        self.inner.name()
    }

    fn state_root(&self) -> &str {
        self.inner.state_root()
    }

    fn home(&self) -> &str {
        self.inner.home()
    }

    fn env(&self) -> &BTreeMap<String, String> {
        self.env.get_or_init(|| {
            let mut env = self.inner.env().clone();
            if self.binary.is_ok()
                && let Some(program) = self.inner.agent_program()
            {
                env.insert("PADDOCK_STATE_COMMIT".into(), program);
            }
            env
        })
    }

    fn ensure<'a>(&'a self, session: &'a str) -> BackendFuture<'a, ()> {
        self.inner.ensure(session)
    }

    fn run<'a>(&'a self, session: &'a str, run: TargetRun, sink: OutputSink) -> ExitFuture<'a> {
        Box::pin(self.run_through_agent(session, run, sink))
    }

    fn files<'a>(
        &'a self,
        session: &'a str,
        request: paddock_agent::protocol::FilesRequest,
    ) -> BackendFuture<'a, crate::FileAnswer> {
        Box::pin(async move {
            let link = self.connect(session).await?;
            match link.files(request).await {
                Ok(answer) => Ok(answer),
                Err(LinkError::Refused(message)) => {
                    Err(self
                        .unavailable(format!("the agent refused the file operation: {message}")))
                }
                Err(other) => Err(self
                    .lost(session, "was lost during a file operation", || {
                        format!(
                            "the agent serving this session failed during a file operation \
                             ({other}); the next call starts a new agent"
                        )
                    })
                    .await),
            }
        })
    }

    fn context<'a>(
        &'a self,
        session: &'a str,
        request: paddock_agent::protocol::ContextRequest,
        chunks: Option<crate::ChunkSender>,
    ) -> BackendFuture<'a, crate::ContextAnswer> {
        Box::pin(async move {
            let link = self.connect(session).await?;
            match link.context(request, chunks.as_ref()).await {
                Ok(answer) => Ok(answer),
                Err(LinkError::Refused(message)) => {
                    Err(self
                        .unavailable(format!("the agent refused the context request: {message}")))
                }
                Err(other) => Err(self
                    .lost(
                        session,
                        "was lost during a Python context's execution",
                        || {
                            format!(
                                "the agent serving this session failed during a Python context's \
                             execution ({other}); the next call starts a new agent (the \
                             session's contexts are gone with the old one)"
                            )
                        },
                    )
                    .await),
            }
        })
    }

    fn attach_argv(&self, session: &str, argv: &[String], pty: bool) -> Result<ClientArgv> {
        self.inner.attach_argv(session, argv, pty)
    }

    fn health(&self) -> BackendFuture<'_, ()> {
        self.inner.health()
    }

    fn sweep_orphans<'a>(&'a self, live_sessions: &'a [String]) -> BackendFuture<'a, usize> {
        self.inner.sweep_orphans(live_sessions)
    }

    fn pause_session<'a>(&'a self, session: &'a str) -> Option<BackendFuture<'a, bool>> {
        self.inner.pause_session(session)
    }

    fn resume_session<'a>(&'a self, session: &'a str) -> BackendFuture<'a, ()> {
        self.inner.resume_session(session)
    }

    fn commit_session<'a>(
        &'a self,
        session: &'a str,
        tag: &'a str,
    ) -> Option<BackendFuture<'a, (String, u64)>> {
        self.inner.commit_session(session, tag)
    }

    fn start_from_image<'a>(
        &'a self,
        session: &'a str,
        image: &'a str,
    ) -> Option<BackendFuture<'a, ()>> {
        self.inner.start_from_image(session, image)
    }

    fn remove_image<'a>(&'a self, image: &'a str) -> BackendFuture<'a, ()> {
        self.inner.remove_image(image)
    }

    fn changes_agent(&self) -> Option<&'static str> {
        self.inner.changes_agent()
    }

    fn prewarm(&self) {
        if self.binary.is_ok() {
            self.inner.prewarm();
        }
    }

    fn keep_alive(&self, session: &str, until: std::time::SystemTime) {
        self.inner.keep_alive(session, until);
    }

    fn close_session<'a>(&'a self, session: &'a str) -> BackendFuture<'a, ()> {
        Box::pin(async move {
            // python_execute's `SESSION.python` shares the session's environment and agent.
            let base = session.strip_suffix(".python").is_none();
            let socket = if base {
                self.inner.agent_socket(session).ok()
            } else {
                None
            };
            if let Some(socket) = &socket {
                shutdown_agent(socket).await;
                if let Some(egress) = self.egress.as_ref().filter(|_| self.inner.egress()) {
                    let _ = egress
                        .release(&socket.with_file_name(crate::egress::EGRESS_SOCKET))
                        .await;
                }
            }
            let closed = self.inner.close_session(session).await;
            // The agent's directory (its socket, lock and log) goes with it; for a claimed warm
            // container it is a link, removed as such.
            if let Some(dir) = socket.as_deref().and_then(Path::parent) {
                let _ = match std::fs::symlink_metadata(dir) {
                    Ok(meta) if meta.file_type().is_symlink() => std::fs::remove_file(dir),
                    _ => std::fs::remove_dir_all(dir),
                };
            }
            closed
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrapper_run_commits_its_state_through_the_agent() {
        let mut argv: Vec<String> = vec![
            "env".into(),
            "PADDOCK_RUN=r9".into(),
            "bash".into(),
            "-c".into(),
            crate::remote::script::command_script(),
            "paddock".into(),
            "/tmp/.paddock".into(),
            "s1".into(),
            "r9".into(),
            "echo hi".into(),
        ];
        let request = agent_request(argv.clone(), false);
        assert_eq!(request.argv, argv[2..].to_vec());
        assert_eq!(request.env["PADDOCK_RUN"], "r9");
        assert_eq!(request.run_id.as_deref(), Some("r9"));
        assert_eq!(
            request.renames[0],
            (
                "/tmp/.paddock/sessions/s1/env.sh.r9".to_owned(),
                "/tmp/.paddock/sessions/s1/env.sh".to_owned()
            )
        );
        // Anything else (the kill script, an agent start) runs as given.
        argv[4] = "echo other".into();
        let plain = agent_request(argv.clone(), false);
        assert_eq!(plain.argv, argv);
        assert!(plain.renames.is_empty() && plain.env.is_empty());
    }

    #[test]
    fn the_run_id_is_read_from_the_wrapper_argv() {
        let argv: Vec<String> = ["env", "PADDOCK_RUN=r12", "bash", "-c", "x"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        assert_eq!(run_id_of(&argv).as_deref(), Some("r12"));
        assert_eq!(run_id_of(&argv[2..]), None);
    }

    #[test]
    fn agent_directories_are_short_and_distinct() {
        let a = agent_dir(
            Path::new("/s/agents"),
            "paddock-docker-session-with-a-very-long-id-0123456789-0123456789",
        );
        let b = agent_dir(Path::new("/s/agents"), "paddock-docker-other");
        assert_ne!(a, b);
        assert!(a.as_os_str().len() < 40);
    }
}
