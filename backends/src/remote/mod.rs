//! What the docker, ssh and apptainer backends share: a [`Transport`] knows how to run a program
//! on its target (a container, a remote host, an instance); [`RemoteEnvironment`] turns any
//! transport into a full [`Environment`] with the local backend's semantics:
//!
//! - session state (cwd, exports, functions, aliases) kept on the target by the same kind of
//!   shell wrapper as the local backend ([`script::command_script`]);
//! - a timeout ends the command's whole process tree on the target: every process there carries
//!   the command's run id in its environment, and a second command signals them all
//!   ([`script::kill_script`]), TERM then KILL;
//! - background processes run under the same detached supervisor and registry as local ones;
//!   the supervisor runs the transport's client (`ssh`, `apptainer exec`, `paddock
//!   __docker-attach`) and the registry kills through the transport;
//! - a target that cannot be reached is an error naming it, never a fallback.

mod changes;
pub mod client;
#[cfg(test)]
mod fake;
pub mod script;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::ids::new_run_id;
use crate::kill::TIMEOUT_EXIT_CODE;
use crate::launch::RemoteLaunch;
use crate::processes::{ProcessRecord, ProcessRegistry, ProcessSpec};
use crate::shell::check_command;
use crate::snapshot::SavedEnvironment;
use crate::{
    BackendError, BackendFuture, BackgroundRequest, Environment, ExecOutput, ExecRequest,
    RemoteFile, Result,
};

pub use crate::stream::OutputSink;

/// How long the kill command may take before the engine gives up on it.
const KILL_COMMAND_TIMEOUT: Duration = Duration::from_secs(15);
/// After the kill command, how long the timed-out client may take to notice.
const CLIENT_END_GRACE: Duration = Duration::from_secs(3);

/// A program's exit status on the target, once it has run ([`Transport::run`]).
pub type ExitFuture<'a> = BackendFuture<'a, i32>;

/// What a background supervisor runs on this machine for a program on the target
/// ([`Transport::attach_argv`]): the client's argv, and whether the client itself needs a
/// terminal.
pub type ClientArgv = (Vec<String>, bool);

/// One program to run on a target.
#[derive(Debug, Clone)]
pub struct TargetRun {
    pub argv: Vec<String>,
    pub stdin: Option<Vec<u8>>,
    pub pty: bool,
    /// See [`crate::ExecRequest::keep_detached`].
    pub keep_detached: bool,
}

/// A way to run programs on one backend's target.
pub trait Transport: Send + Sync + 'static {
    fn kind(&self) -> &'static str;
    fn name(&self) -> &str;
    /// Where session state and python_execute's directories live on the target (relative
    /// paths are under the directory a command starts in, e.g. the remote home).
    fn state_root(&self) -> &str;
    /// The directory a session starts in ("" = wherever the target starts commands).
    fn home(&self) -> &str;
    /// Environment every command gets (the policy's `env`).
    fn env(&self) -> &BTreeMap<String, String>;
    /// Whether the target is a container or instance of its own (see
    /// [`crate::Environment::is_container`]).
    fn is_container(&self) -> bool {
        false
    }
    /// Brings up the session's target before a background command is handed to a client
    /// (foreground runs bring it up themselves).
    fn ensure<'a>(&'a self, session: &'a str) -> BackendFuture<'a, ()> {
        let _ = session;
        Box::pin(async { Ok(()) })
    }
    /// Runs `run` on the session's target, output into `sink`; answers its exit status. An
    /// error means the target could not be reached or lost, never that the program failed.
    fn run<'a>(&'a self, session: &'a str, run: TargetRun, sink: OutputSink) -> ExitFuture<'a>;
    /// One file operation on the session's target, by its agent. A transport without one
    /// serves no file tools.
    fn files<'a>(
        &'a self,
        session: &'a str,
        request: paddock_agent::protocol::FilesRequest,
    ) -> BackendFuture<'a, crate::FileAnswer> {
        let _ = (session, request);
        Box::pin(async move {
            Err(BackendError::Unavailable {
                kind: self.kind().to_owned(),
                name: self.name().to_owned(),
                reason: "this backend has no agent in its environment to serve file tools".into(),
            })
        })
    }
    /// One action on the session's CPython contexts, by its agent ([`Environment::python_context`]).
    fn context<'a>(
        &'a self,
        session: &'a str,
        request: paddock_agent::protocol::ContextRequest,
        chunks: Option<crate::ChunkSender>,
    ) -> BackendFuture<'a, crate::ContextAnswer> {
        let _ = (session, request, chunks);
        Box::pin(async move {
            Err(BackendError::Unavailable {
                kind: self.kind().to_owned(),
                name: self.name().to_owned(),
                reason: "this backend has no agent in its environment to keep Python contexts \
                         (`agent = false`): run python_execute without `context`"
                    .into(),
            })
        })
    }
    /// Whether the command sees a new size of the terminal a background client runs on here
    /// ([`ClientArgv`]'s `true`): the client forwards it to the command's own terminal.
    fn terminal_follows_resize(&self) -> bool {
        false
    }
    /// The host program a background supervisor runs for `argv` on the session's target.
    fn attach_argv(&self, session: &str, argv: &[String], pty: bool) -> Result<ClientArgv>;
    fn health(&self) -> BackendFuture<'_, ()>;
    /// Ends what the session holds on the target (its container or instance; for ssh, its
    /// state directory: the shared connection stays for other sessions).
    fn close_session<'a>(&'a self, session: &'a str) -> BackendFuture<'a, ()>;
    /// Removes this backend's containers or instances that no live session owns; answers how
    /// many went.
    fn sweep_orphans<'a>(&'a self, live_sessions: &'a [String]) -> BackendFuture<'a, usize> {
        let _ = live_sessions;
        Box::pin(async { Ok(0) })
    }
    /// Freezes the session's container or instance ([`crate::Environment::pause_session`]);
    /// `None`: this transport offers no pause.
    fn pause_session<'a>(&'a self, session: &'a str) -> Option<BackendFuture<'a, bool>> {
        let _ = session;
        None
    }
    /// Thaws what [`Transport::pause_session`] froze.
    fn resume_session<'a>(&'a self, session: &'a str) -> BackendFuture<'a, ()> {
        let _ = session;
        Box::pin(async { Ok(()) })
    }
    /// Commits the session's environment to an image for snapshot `tag`; answers the image
    /// and its size. `None`: this transport keeps no snapshot.
    fn commit_session<'a>(
        &'a self,
        session: &'a str,
        tag: &'a str,
    ) -> Option<BackendFuture<'a, (String, u64)>> {
        let _ = (session, tag);
        None
    }
    /// Makes the (new) session's environment from a snapshot's `image`.
    fn start_from_image<'a>(
        &'a self,
        session: &'a str,
        image: &'a str,
    ) -> Option<BackendFuture<'a, ()>> {
        let _ = (session, image);
        None
    }
    /// The agent program inside the environment that keeps a snapshot's files as the
    /// environment's changed files (`changes-save`, `changes-restore`): an environment with no
    /// image to commit, in a PID namespace of its own, with the agent bound in (apptainer).
    /// `None`: this transport keeps them otherwise, or not at all.
    fn changes_agent(&self) -> Option<&'static str> {
        None
    }
    /// Removes a snapshot's image.
    fn remove_image<'a>(&'a self, image: &'a str) -> BackendFuture<'a, ()> {
        let _ = image;
        Box::pin(async { Ok(()) })
    }
    /// Starts filling the warm pool, if the backend has one.
    fn prewarm(&self) {}
    /// See [`crate::Environment::keep_alive`].
    fn keep_alive(&self, session: &str, until: std::time::SystemTime) {
        let _ = (session, until);
    }
}

/// Any [`Transport`] as an [`Environment`].
pub struct RemoteEnvironment<T: Transport> {
    transport: Arc<T>,
    /// The engine's state directory (process registry, supervisors' files).
    state_root: PathBuf,
    supervisor_exe: PathBuf,
}

impl<T: Transport> RemoteEnvironment<T> {
    pub fn new(transport: T, state_root: PathBuf, supervisor_exe: PathBuf) -> Self {
        Self {
            transport: Arc::new(transport),
            state_root,
            supervisor_exe,
        }
    }

    pub fn transport(&self) -> &T {
        &self.transport
    }

    fn command_argv(
        &self,
        run_id: &str,
        request_command: &str,
        session: &str,
        workdir: &str,
        env: &BTreeMap<String, String>,
    ) -> Vec<String> {
        let mut argv = vec![
            "env".to_owned(),
            format!("PADDOCK_RUN={run_id}"),
            "bash".to_owned(),
            "-c".to_owned(),
            script::command_script(),
            "paddock".to_owned(),
            self.transport.state_root().to_owned(),
            session.to_owned(),
            run_id.to_owned(),
            request_command.to_owned(),
            workdir.to_owned(),
            self.transport.home().to_owned(),
        ];
        let mut all = self.transport.env().clone();
        all.extend(env.iter().map(|(k, v)| (k.clone(), v.clone())));
        all.insert("PADDOCK_SESSION".into(), session.to_owned());
        argv.extend(all.iter().map(|(k, v)| format!("{k}={v}")));
        argv
    }

    fn kill_argv(run_id: &str) -> Vec<String> {
        vec![
            "bash".to_owned(),
            "-c".to_owned(),
            script::kill_script(),
            "paddock".to_owned(),
            run_id.to_owned(),
        ]
    }

    /// Ends every process of `run_id` on the target; answers why it could not.
    async fn kill_run(&self, session: &str, run_id: &str) -> std::result::Result<(), String> {
        Self::kill_run_on(&self.transport, session, run_id).await
    }

    async fn kill_run_on(
        transport: &Arc<T>,
        session: &str,
        run_id: &str,
    ) -> std::result::Result<(), String> {
        let sink = OutputSink::new(4096);
        let run = TargetRun {
            argv: Self::kill_argv(run_id),
            stdin: None,
            pty: false,
            keep_detached: false,
        };
        let why =
            match tokio::time::timeout(KILL_COMMAND_TIMEOUT, transport.run(session, run, sink))
                .await
            {
                Ok(Ok(_)) => return Ok(()),
                Ok(Err(err)) => err.to_string(),
                Err(_) => format!(
                    "the kill command got no answer within {} s",
                    KILL_COMMAND_TIMEOUT.as_secs()
                ),
            };
        tracing::warn!(backend = transport.name(), %why, "could not end a timed-out command");
        Err(why)
    }

    async fn run_command(&self, request: ExecRequest) -> Result<ExecOutput> {
        check_command(&request.command)?;
        crate::shell::check_session(&request.session)?;
        let started = Instant::now();
        let run_id = new_run_id("r");
        let workdir = crate::workdir_arg(request.workdir.as_deref());
        let argv = self.command_argv(
            &run_id,
            &request.command,
            &request.session,
            &workdir,
            &request.env,
        );
        let sink = OutputSink::streaming(request.max_output_chars, request.chunks.clone());
        let run = TargetRun {
            argv,
            stdin: request.stdin.clone(),
            pty: request.pty,
            keep_detached: request.keep_detached,
        };
        let transport = self.transport.clone();
        let session = request.session.clone();
        let task_sink = sink.clone();
        // The client runs as its own task: after a timeout it must go on until the kill command
        // has ended the tree (its end is how we know the output is complete).
        // The run keeps reporting to this call's progress sink (a queued Slurm job).
        let progress = crate::progress::current();
        let mut task = tokio::spawn(crate::progress::scope(progress, async move {
            transport.run(&session, run, task_sink).await
        }));
        // A caller that stops waiting (an MCP client cancelled the call) ends the run on the
        // target, as a timeout would.
        let mut cancel_guard = CancelGuard {
            armed: Some((
                self.transport.clone(),
                request.session.clone(),
                run_id.clone(),
            )),
            client: task.abort_handle(),
        };
        let mut timed_out = false;
        let mut not_ended = None;
        let status = match tokio::time::timeout(request.timeout, &mut task).await {
            Ok(joined) => {
                // The run has ended, failed ones included: nothing is left to end on the
                // target (a kill would start the agent, or a Slurm allocation, again).
                cancel_guard.armed = None;
                joined.map_err(|e| BackendError::Io(std::io::Error::other(e)))??
            }
            Err(_) => {
                timed_out = true;
                let killed = self.kill_run(&request.session, &run_id).await;
                // The command's own run answering its status is the other proof of its end;
                // a run that only lost its connection is not.
                let answered = match tokio::time::timeout(CLIENT_END_GRACE, &mut task).await {
                    Ok(joined) => matches!(joined, Ok(Ok(_))),
                    Err(_) => {
                        task.abort();
                        false
                    }
                };
                // Neither the kill nor the command's own run confirmed the end: its fate on the
                // target is unknown (a node cut off, a daemon down), and saying it was killed
                // would be a guess.
                not_ended = match killed {
                    Err(why) if !answered => Some(why),
                    _ => None,
                };
                TIMEOUT_EXIT_CODE
            }
        };
        cancel_guard.armed = None;
        let (mut text, chars) = sink.finish();
        if request.pty {
            text = text.replace("\r\n", "\n");
        }
        if !timed_out && status == 126 && text.contains("paddock: cannot change into workdir") {
            return Err(BackendError::Workdir {
                path: workdir,
                reason: "does not exist or is not a directory on the backend".into(),
            });
        }
        if timed_out {
            text.push_str(&match &not_ended {
                None => format!(
                    "\n[paddock: command timed out after {} s and was killed]",
                    request.timeout.as_secs_f64()
                ),
                Some(why) => format!(
                    "\n[paddock: command timed out after {} s and could not be ended there \
                     ({why}); it may still be running]",
                    request.timeout.as_secs_f64()
                ),
            });
        }
        Ok(ExecOutput {
            output: text,
            exit_code: status,
            timed_out,
            output_chars: chars,
            duration_ms: started.elapsed().as_secs_f64() * 1000.0,
            not_ended,
        })
    }

    async fn start_background(&self, request: BackgroundRequest) -> Result<ProcessRecord> {
        check_command(&request.command)?;
        let host_state = crate::shell::session_dir(&self.state_root, &request.session)?;
        self.transport.ensure(&request.session).await?;
        let id = ProcessRegistry::new_id();
        let workdir = crate::workdir_arg(request.workdir.as_deref());
        let mut argv = self.command_argv(
            &id,
            &request.command,
            &request.session,
            &workdir,
            &request.env,
        );
        if !request.pty {
            // The supervisor reads stdout and stderr apart (`process output`); the script
            // unsets the variable at once.
            argv.insert(2, format!("{}=1", script::SPLIT_STDERR_VAR));
        }
        let (argv, local_pty) = self
            .transport
            .attach_argv(&request.session, &argv, request.pty)?;
        let (kill_argv, _) =
            self.transport
                .attach_argv(&request.session, &Self::kill_argv(&id), false)?;
        let (signal_argv, _) = self.transport.attach_argv(
            &request.session,
            &script::signal_argv(&id, crate::launch::SIGNAL_PLACEHOLDER),
            false,
        )?;
        let launch = RemoteLaunch {
            argv,
            kill_argv,
            signal_argv,
            local_pty,
            resizable: local_pty && self.transport.terminal_follows_resize(),
        };
        // The client runs on this machine with a minimal environment; the command's own
        // environment travels in argv.
        let env = BTreeMap::from([
            (
                "PATH".to_owned(),
                std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into()),
            ),
            (
                "HOME".to_owned(),
                std::env::var("HOME").unwrap_or_else(|_| "/".into()),
            ),
        ]);
        ProcessRegistry::new(self.state_root.join("processes"))
            .start(
                &self.supervisor_exe,
                ProcessSpec {
                    id,
                    request,
                    shell_state: host_state,
                    env,
                    remote: Some(launch),
                    local_argv: None,
                },
            )
            .await
    }

    /// The session's shell state files ([`crate::snapshot::SHELL_FILES`]), read in a run of
    /// the session (the state its next command would start from).
    async fn read_shell(&self, session: &str) -> Result<BTreeMap<String, String>> {
        let command = crate::snapshot::SHELL_FILES
            .iter()
            .map(|f| {
                format!(
                    "if [ -f \"$__p_state/{f}\" ]; then printf '{f} '; base64 -w0 \"$__p_state/{f}\"; echo; fi"
                )
            })
            .collect::<Vec<_>>()
            .join("\n");
        let output = self
            .run_script(
                session,
                command,
                None,
                16 * 1024 * 1024,
                "reading the session's shell state",
            )
            .await?;
        use base64::Engine as _;
        let mut shell = BTreeMap::new();
        for line in output.lines() {
            if let Some((name, data)) = line.split_once(' ')
                && crate::snapshot::SHELL_FILES.contains(&name)
                && let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(data.trim())
            {
                shell.insert(
                    name.to_owned(),
                    String::from_utf8_lossy(&bytes).into_owned(),
                );
            }
        }
        Ok(shell)
    }

    /// Writes a snapshot's shell state as the (new) session's, through the environment's
    /// agent (a run of the wrapper would save its own state over it).
    async fn write_shell(&self, session: &str, shell: &BTreeMap<String, String>) -> Result<()> {
        let dir = format!("{}/sessions/{session}", self.transport.state_root());
        for (name, content) in shell {
            if !crate::snapshot::SHELL_FILES.contains(&name.as_str()) {
                continue;
            }
            let content = if name == "env.sh" {
                crate::snapshot::shell_for_new_session(content)
            } else {
                content.clone()
            };
            let request = paddock_files::FileRequest::Write {
                path: format!("{dir}/{name}"),
                content,
            };
            match Environment::files(self, session, request).await? {
                Ok(_) => {}
                Err(err) => {
                    return Err(BackendError::Io(std::io::Error::other(format!(
                        "writing the session's shell state ({name}) failed: {err}"
                    ))));
                }
            }
        }
        Ok(())
    }

    /// Runs `command` in the session through the wrapper (stdin `stdin`); answers its output,
    /// or an error saying `what` failed when it exits non-zero.
    async fn run_script(
        &self,
        session: &str,
        command: String,
        stdin: Option<Vec<u8>>,
        max_output_chars: usize,
        what: &str,
    ) -> Result<String> {
        let out = self
            .run_command(ExecRequest {
                command,
                session: session.to_owned(),
                workdir: None,
                env: BTreeMap::new(),
                stdin,
                timeout: Duration::from_secs(120),
                pty: false,
                max_output_chars,
                chunks: None,
                keep_detached: false,
            })
            .await?;
        if out.exit_code != 0 {
            return Err(BackendError::Io(std::io::Error::other(format!(
                "{what} on the {} backend failed (exit {}): {}",
                self.transport.kind(),
                out.exit_code,
                out.output.trim()
            ))));
        }
        Ok(out.output)
    }

    /// Files under `dir` on the target (python_execute's artifacts).
    async fn collect(
        &self,
        session: &str,
        dir: &str,
        max_files: usize,
        inline_bytes: u64,
    ) -> Result<Vec<RemoteFile>> {
        let command = format!(
            "__p_dir={}; case $__p_dir in /*) ;; *) __p_dir=$__p_start/$__p_dir ;; esac\nset -- \"$__p_dir\" {} {}\n{}",
            script::shell_quote(dir),
            max_files,
            inline_bytes,
            script::COLLECT_FILES_SCRIPT
        );
        let output = self
            .run_script(
                session,
                command,
                None,
                64 * 1024 * 1024,
                &format!("listing {dir}"),
            )
            .await?;
        output
            .lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| {
                serde_json::from_str(l).map_err(|e| {
                    BackendError::Io(std::io::Error::other(format!(
                        "unreadable file listing line ({e}): {l}"
                    )))
                })
            })
            .collect()
    }

    async fn write_file(&self, session: &str, path: &str, contents: Vec<u8>) -> Result<()> {
        let command = format!(
            "__p_file={}; case $__p_file in /*) ;; *) __p_file=$__p_start/$__p_file ;; esac; mkdir -p -- \"$(dirname -- \"$__p_file\")\" && cat > \"$__p_file\"",
            script::shell_quote(path)
        );
        self.run_script(
            session,
            command,
            Some(contents),
            4096,
            &format!("writing {path}"),
        )
        .await
        .map(drop)
    }
}

/// Ends a foreground run on the target when its future is dropped before the run ended.
struct CancelGuard<T: Transport> {
    armed: Option<(Arc<T>, String, String)>,
    client: tokio::task::AbortHandle,
}

impl<T: Transport> Drop for CancelGuard<T> {
    fn drop(&mut self) {
        let Some((transport, session, run_id)) = self.armed.take() else {
            return;
        };
        let client = self.client.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    let _ = RemoteEnvironment::kill_run_on(&transport, &session, &run_id).await;
                    client.abort();
                });
            }
            Err(_) => client.abort(),
        }
    }
}

impl<T: Transport> Environment for RemoteEnvironment<T> {
    fn name(&self) -> &str {
        self.transport.name()
    }

    fn is_container(&self) -> bool {
        self.transport.is_container()
    }

    fn kind(&self) -> &'static str {
        self.transport.kind()
    }

    fn exec(&self, request: ExecRequest) -> BackendFuture<'_, ExecOutput> {
        Box::pin(self.run_command(request))
    }

    fn spawn_background(&self, request: BackgroundRequest) -> BackendFuture<'_, ProcessRecord> {
        Box::pin(self.start_background(request))
    }

    fn health(&self) -> BackendFuture<'_, ()> {
        self.transport.health()
    }

    fn scratch_dir(&self, session: &str) -> String {
        format!(
            "{}/python/{}",
            self.transport.state_root(),
            crate::naming::base_session(session)
        )
    }

    fn python_context<'a>(
        &'a self,
        session: &'a str,
        request: paddock_agent::protocol::ContextRequest,
        chunks: Option<crate::ChunkSender>,
    ) -> BackendFuture<'a, crate::ContextAnswer> {
        Box::pin(async move {
            crate::shell::check_session(session)?;
            self.transport.context(session, request, chunks).await
        })
    }

    fn files<'a>(
        &'a self,
        session: &'a str,
        operation: paddock_files::FileRequest,
    ) -> BackendFuture<'a, crate::FileAnswer> {
        Box::pin(async move {
            crate::shell::check_session(session)?;
            // The wrapper's own paths: `ROOT/sessions/SESSION/cwd` (ROOT relative to where
            // the target starts commands, which is where its agent runs).
            let request = paddock_agent::protocol::FilesRequest {
                operation,
                cwd_file: Some(format!(
                    "{}/sessions/{session}/cwd",
                    self.transport.state_root()
                )),
                start_dir: Some(self.transport.home().to_owned()),
            };
            self.transport.files(session, request).await
        })
    }

    fn write_file<'a>(
        &'a self,
        session: &'a str,
        path: &'a str,
        contents: Vec<u8>,
    ) -> BackendFuture<'a, ()> {
        Box::pin(RemoteEnvironment::write_file(self, session, path, contents))
    }

    fn collect_files<'a>(
        &'a self,
        session: &'a str,
        dir: &'a str,
        max_files: usize,
        inline_bytes: u64,
    ) -> BackendFuture<'a, Vec<RemoteFile>> {
        Box::pin(self.collect(session, dir, max_files, inline_bytes))
    }

    fn close_session<'a>(&'a self, session: &'a str) -> BackendFuture<'a, ()> {
        self.transport.close_session(session)
    }

    fn sweep_orphans<'a>(&'a self, live_sessions: &'a [String]) -> BackendFuture<'a, usize> {
        self.transport.sweep_orphans(live_sessions)
    }

    fn keep_alive(&self, session: &str, until: std::time::SystemTime) {
        self.transport.keep_alive(session, until);
    }

    fn pause_session<'a>(&'a self, session: &'a str) -> BackendFuture<'a, bool> {
        match self.transport.pause_session(session) {
            Some(paused) => paused,
            None => Box::pin(async move {
                Err(crate::pause_not_offered(
                    self.transport.kind(),
                    self.transport.name(),
                ))
            }),
        }
    }

    fn resume_session<'a>(&'a self, session: &'a str) -> BackendFuture<'a, ()> {
        self.transport.resume_session(session)
    }

    fn snapshot_session<'a>(
        &'a self,
        session: &'a str,
        dir: &'a std::path::Path,
        tag: &'a str,
        budget_bytes: u64,
    ) -> BackendFuture<'a, SavedEnvironment> {
        Box::pin(async move {
            if let Some(agent) = self.transport.changes_agent() {
                return self.save_changes(agent, session, dir, budget_bytes).await;
            }
            let Some(commit) = self.transport.commit_session(session, tag) else {
                return Err(crate::snapshot::snapshot_not_offered(
                    self.transport.kind(),
                    self.transport.name(),
                ));
            };
            // The image first: a session with no environment here fails before anything runs.
            let (image, bytes) = commit.await?;
            let shell = match self.read_shell(session).await {
                Ok(shell) => shell,
                Err(err) => {
                    let _ = self.transport.remove_image(&image).await;
                    return Err(err);
                }
            };
            Ok(SavedEnvironment {
                kind: self.transport.kind().to_owned(),
                files: "docker commit".to_owned(),
                image: Some(image),
                archive: None,
                workspace: None,
                workspace_was: None,
                shell,
                bytes,
                not_carried: vec![
                    "/tmp outside the session's state (a tmpfs, not in the image)".to_owned(),
                ],
            })
        })
    }

    fn start_from_snapshot<'a>(
        &'a self,
        session: &'a str,
        saved: &'a SavedEnvironment,
        dir: &'a std::path::Path,
    ) -> BackendFuture<'a, ()> {
        Box::pin(async move {
            if let (Some(archive), Some(agent)) = (&saved.archive, self.transport.changes_agent()) {
                return self
                    .restore_changes(agent, session, saved, &dir.join(archive))
                    .await;
            }
            let (Some(image), Some(start)) = (
                saved.image.as_deref(),
                saved
                    .image
                    .as_deref()
                    .and_then(|image| self.transport.start_from_image(session, image)),
            ) else {
                return Err(crate::snapshot::snapshot_not_offered(
                    self.transport.kind(),
                    self.transport.name(),
                ));
            };
            tracing::debug!(session, image, "a session made from a snapshot");
            start.await?;
            self.write_shell(session, &saved.shell).await
        })
    }

    fn remove_snapshot<'a>(&'a self, saved: &'a SavedEnvironment) -> BackendFuture<'a, ()> {
        Box::pin(async move {
            match &saved.image {
                Some(image) => self.transport.remove_image(image).await,
                None => Ok(()),
            }
        })
    }

    fn prewarm(&self) {
        self.transport.prewarm();
    }
}
