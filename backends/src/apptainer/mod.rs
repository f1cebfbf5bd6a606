//! The apptainer backend (Singularity is the same program under its old name): one instance
//! per (session, backend), started with `--containall --no-home --cleanenv` and no network by
//! default, and every command an `apptainer exec instance://NAME`.
//!
//! The instance is not looked up before each command (a `instance list` costs as much as the
//! command): the exec is tried, and when apptainer answers that no such instance exists it is
//! started and the exec retried once.

pub mod section;

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::agent::{
    AGENT_DIR_INSIDE, AGENT_PATH_INSIDE, AgentHost, AgentPlacement, agent_dir, placed_agent_socket,
    prepare_agent_dir,
};
use crate::naming;
use crate::remote::client::run_client;
use crate::remote::{ClientArgv, ExitFuture, OutputSink, TargetRun, Transport};
use crate::{BackendError, BackendFuture, Result};

/// `[backends.NAME]` of kind apptainer (or singularity).
#[derive(Debug, Clone)]
pub struct ApptainerConfig {
    pub name: String,
    /// A SIF file or a sandbox directory.
    pub image: String,
    /// The apptainer or singularity program; found on PATH when not set.
    pub binary: Option<PathBuf>,
    /// `src:dst[:ro]`.
    pub binds: Vec<String>,
    /// `none` (default: loopback only) or `host`.
    pub network: String,
    /// `network = "proxy"`: no network (`network` is `none`), the agent carrying connections
    /// to the egress proxy ([`crate::egress`]).
    pub egress: bool,
    /// A writable tmpfs over the image (default), unless an overlay is given.
    pub writable_tmpfs: bool,
    pub overlay: Option<String>,
    pub memory_mb: Option<u64>,
    pub cpus: Option<f64>,
    /// `--pids-limit`: processes of the instance (`max_processes`).
    pub max_processes: Option<u64>,
    pub workdir: Option<String>,
    pub env: BTreeMap<String, String>,
    /// Commands go through the in-environment agent placed so (`agent = true`, the default).
    pub agent: Option<AgentPlacement>,
    /// The state directory's part of instance names ([`crate::naming::owner_of`]).
    pub owner: String,
}

/// Commands in Apptainer instances.
pub struct ApptainerTransport {
    config: ApptainerConfig,
    binary: Result<PathBuf>,
}

/// What apptainer prints when `instance://NAME` does not exist.
fn is_missing_instance(stderr: &str) -> bool {
    let lower = stderr.to_ascii_lowercase();
    lower.contains("no instance found") || lower.contains("instance not found")
}

impl ApptainerTransport {
    pub fn new(config: ApptainerConfig) -> Self {
        let binary = match &config.binary {
            Some(path) => Ok(path.clone()),
            None => find_on_path(&["apptainer", "singularity"]).ok_or_else(|| {
                BackendError::Unavailable {
                    kind: "apptainer".into(),
                    name: config.name.clone(),
                    reason: "neither apptainer nor singularity is on PATH; install one or set \
                             `binary` in the backend's policy section"
                        .into(),
                }
            }),
        };
        Self { config, binary }
    }

    pub(crate) fn binary(&self) -> Result<&PathBuf> {
        self.binary.as_ref().map_err(|e| BackendError::Unavailable {
            kind: "apptainer".into(),
            name: self.config.name.clone(),
            reason: e.to_string(),
        })
    }

    /// Runs the apptainer program with `args` to its end; one that cannot be run makes the
    /// backend unavailable.
    async fn binary_output(&self, args: &[&str]) -> Result<std::process::Output> {
        let binary = self.binary()?;
        tokio::process::Command::new(binary)
            .args(args)
            .output()
            .await
            .map_err(|e| self.unavailable(format!("cannot run {}: {e}", binary.display())))
    }

    fn unavailable(&self, reason: impl Into<String>) -> BackendError {
        BackendError::Unavailable {
            kind: "apptainer".into(),
            name: self.config.name.clone(),
            reason: reason.into(),
        }
    }

    /// The instance of `session`, `paddock-<backend>-<owner>-<session>` (apptainer's names
    /// allow the session id's characters).
    pub fn instance_name(&self, session: &str) -> String {
        naming::environment_name(&self.config.name, &self.config.owner, session)
    }

    pub(crate) fn start_args(&self, session: &str) -> Vec<String> {
        let agent_binds = self
            .config
            .agent
            .as_ref()
            .map(|agent| agent.binds(&self.instance_name(session)))
            .unwrap_or_default();
        self.start_args_binding(session, agent_binds)
    }

    /// [`ApptainerTransport::start_args`] with the agent bound from elsewhere (`host:inside`
    /// binds): a Slurm node's own copy, when the engine's files are not on the node.
    pub(crate) fn start_args_binding(
        &self,
        session: &str,
        agent_binds: Vec<String>,
    ) -> Vec<String> {
        let c = &self.config;
        let mut args: Vec<String> = vec![
            "instance".into(),
            "start".into(),
            "--containall".into(),
            "--no-home".into(),
            "--cleanenv".into(),
        ];
        match &c.overlay {
            Some(overlay) => args.extend(["--overlay".into(), overlay.clone()]),
            None if c.writable_tmpfs => args.push("--writable-tmpfs".into()),
            None => {}
        }
        if c.network != "host" {
            args.extend(["--net".into(), "--network".into(), c.network.clone()]);
        }
        for bind in &c.binds {
            args.extend(["--bind".into(), bind.clone()]);
        }
        for bind in agent_binds {
            args.extend(["--bind".into(), bind]);
        }
        if let Some(mb) = c.memory_mb {
            args.extend(["--memory".into(), format!("{mb}M")]);
        }
        if let Some(cpus) = c.cpus {
            args.extend(["--cpus".into(), cpus.to_string()]);
        }
        if let Some(max) = c.max_processes {
            args.extend(["--pids-limit".into(), max.to_string()]);
        }
        args.push(c.image.clone());
        args.push(self.instance_name(session));
        args
    }

    /// Starts the session's instance; an instance that already exists is fine.
    async fn start_instance(&self, session: &str) -> Result<()> {
        let binary = self.binary()?;
        if let Some(agent) = &self.config.agent {
            // The bind source must exist before the instance does.
            prepare_agent_dir(
                &agent_dir(&agent.runtime_dir, &self.instance_name(session)),
                "apptainer",
                &self.config.name,
            )?;
        }
        let sink = crate::stream::OutputSink::new(16 * 1024);
        let exit = run_client(binary, &self.start_args(session), None, false, sink.clone())
            .await
            .map_err(|e| self.unavailable(e.to_string()))?;
        if exit.status == 0 {
            self.start_watchdog(session).await;
            return Ok(());
        }
        if exit.stderr.contains("already exists") {
            return Ok(());
        }
        let stdout = sink.finish().0;
        Err(self.unavailable(format!(
            "starting instance {} from {} failed (exit {}): {} {}",
            self.instance_name(session),
            self.config.image,
            exit.status,
            exit.stderr.trim(),
            stdout.trim()
        )))
    }

    /// Starts the instance's watchdog ([`crate::lifetime`]), detached inside it: it stops the
    /// instance (a TERM to the instance's init, which `instance stop` sends too) once the
    /// time the engine last kept the session until has passed. Only with the agent, whose
    /// directory holds that time. A watchdog that cannot start leaves the instance to the
    /// engine's idle sweep, as before: logged, not an error of the command.
    async fn start_watchdog(&self, session: &str) {
        if self.config.agent.is_none() {
            return;
        }
        let Ok(binary) = self.binary() else {
            return;
        };
        let watchdog = crate::lifetime::watchdog_script(
            &format!("{AGENT_DIR_INSIDE}/{}", crate::lifetime::EXPIRES_FILE),
            "kill -TERM 1",
        );
        // In the background with no descriptor of the exec's: the exec returns at once, and
        // the loop lives on under the instance's init.
        let argv = [
            "/bin/sh".to_owned(),
            "-c".to_owned(),
            format!("( {watchdog} ) </dev/null >/dev/null 2>&1 &"),
        ];
        let sink = crate::stream::OutputSink::new(4096);
        let started = run_client(binary, &self.exec_args(session, &argv), None, false, sink).await;
        match started {
            Ok(exit) if exit.status == 0 => {}
            Ok(exit) => {
                tracing::warn!(backend = %self.config.name, session, status = exit.status, stderr = %exit.stderr.trim(), "the instance's watchdog did not start")
            }
            Err(err) => {
                tracing::warn!(backend = %self.config.name, session, %err, "the instance's watchdog did not start")
            }
        }
    }

    /// `argv` run on a terminal that the instance allocates itself, when `pty` asks for one
    /// and the agent is bound in (`None` otherwise: the client's terminal is used).
    ///
    /// A terminal allocated outside (the supervisor's PTY around `apptainer exec`, `srun
    /// --pty`) belongs to the host's devpts; `--containall` gives the instance a devpts of its
    /// own at `/dev/pts` (apptainer.conf `mount devpts = yes`), where that terminal has no
    /// node, so `tty` answers "not a tty". The agent's `terminal` opens the instance's own
    /// `/dev/ptmx` instead; no host device enters the instance.
    pub(crate) fn terminal_argv(&self, argv: &[String], pty: bool) -> Option<Vec<String>> {
        if !pty || self.config.agent.is_none() {
            return None;
        }
        let mut inside = vec![
            AGENT_PATH_INSIDE.to_owned(),
            "terminal".to_owned(),
            "--".to_owned(),
        ];
        inside.extend(argv.iter().cloned());
        Some(inside)
    }

    pub(crate) fn exec_args(&self, session: &str, argv: &[String]) -> Vec<String> {
        // --pwd: otherwise apptainer tries this process's directory and warns when the
        // container lacks it (into the output, with a terminal).
        let mut args = vec![
            "exec".into(),
            "--cleanenv".into(),
            "--pwd".into(),
            "/".into(),
            format!("instance://{}", self.instance_name(session)),
        ];
        args.extend(argv.iter().cloned());
        args
    }
}

impl ApptainerTransport {
    /// Instances of this backend (`paddock-<backend>-<session>`) whose session is not live.
    /// Instances carry no labels: only those this state directory made (their agent directory
    /// is here, older than a minute) are considered, never another engine's.
    async fn remove_orphans(&self, live: &[String]) -> Result<usize> {
        let Some(agent) = &self.config.agent else {
            return Ok(0);
        };
        let binary = self.binary()?;
        let out = self.binary_output(&["instance", "list", "--json"]).await?;
        if !out.status.success() {
            return Err(self.unavailable(format!(
                "instance list failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        let listed: serde_json::Value = serde_json::from_slice(&out.stdout)
            .map_err(|e| self.unavailable(format!("instance list --json: {e}")))?;
        let backend_prefix = format!("paddock-{}-", self.config.name);
        let own_prefix = naming::name_prefix(&self.config.name, &self.config.owner);
        let owner_part = format!("-{}-", self.config.owner);
        let orphans: Vec<String> = listed["instances"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| i["instance"].as_str())
            // This state directory's instances whose session is not live, and this backend's
            // named the way older versions did (without the owner; one with it is another
            // backend's whose name starts like this one's): the agent directory below decides
            // which of those this state directory made.
            .filter(|name| match name.strip_prefix(&own_prefix) {
                Some(session) => !live.iter().any(|s| s == session),
                None => name.starts_with(&backend_prefix) && !name.contains(&owner_part),
            })
            .filter(|name| {
                let dir = agent_dir(&agent.runtime_dir, name);
                std::fs::metadata(dir)
                    .and_then(|m| m.modified())
                    .is_ok_and(|made| made.elapsed().is_ok_and(|age| age.as_secs() >= 60))
            })
            .map(str::to_owned)
            .collect();
        let mut removed = 0;
        for name in orphans {
            tracing::info!(backend = %self.config.name, instance = %name, "stopping an instance no session owns");
            let stopped = tokio::process::Command::new(binary)
                .args(["instance", "stop", &name])
                .output()
                .await;
            if stopped.is_ok_and(|o| o.status.success()) {
                removed += 1;
                let _ = std::fs::remove_dir_all(agent_dir(&agent.runtime_dir, &name));
            }
        }
        Ok(removed)
    }
}

impl AgentHost for ApptainerTransport {
    fn egress(&self) -> bool {
        self.config.egress
    }

    fn agent_socket(&self, session: &str) -> Result<PathBuf> {
        placed_agent_socket(
            self,
            self.config.agent.as_ref(),
            &self.instance_name(session),
        )
    }
}

fn find_on_path(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    names.iter().find_map(|name| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    })
}

impl Transport for ApptainerTransport {
    fn kind(&self) -> &'static str {
        "apptainer"
    }

    fn is_container(&self) -> bool {
        true
    }

    fn name(&self) -> &str {
        &self.config.name
    }

    fn state_root(&self) -> &str {
        "/tmp/.paddock"
    }

    fn home(&self) -> &str {
        self.config.workdir.as_deref().unwrap_or("/tmp")
    }

    fn env(&self) -> &BTreeMap<String, String> {
        &self.config.env
    }

    fn ensure<'a>(&'a self, session: &'a str) -> BackendFuture<'a, ()> {
        Box::pin(self.start_instance(session))
    }

    fn changes_agent(&self) -> Option<&'static str> {
        // `--containall`: a PID namespace of its own; the agent does the saving.
        self.config.agent.is_some().then_some(AGENT_PATH_INSIDE)
    }

    fn run<'a>(&'a self, session: &'a str, run: TargetRun, sink: OutputSink) -> ExitFuture<'a> {
        Box::pin(async move {
            let binary = self.binary()?;
            let args = self.exec_args(session, &run.argv);
            for attempt in 0..2 {
                let exit = run_client(binary, &args, run.stdin.clone(), run.pty, sink.clone())
                    .await
                    .map_err(|e| self.unavailable(e.to_string()))?;
                // With a terminal, apptainer's complaint is in the output, not on stderr.
                let missing = exit.status != 0
                    && (is_missing_instance(&exit.stderr)
                        || (run.pty && is_missing_instance(&sink.peek())));
                if missing && attempt == 0 {
                    sink.clear();
                    self.start_instance(session).await?;
                    continue;
                }
                // apptainer's own failures say FATAL on its stderr (the command's stderr is
                // merged into stdout inside).
                if exit.status != 0 && exit.stderr.contains("FATAL") {
                    return Err(self.unavailable(exit.stderr.trim().to_owned()));
                }
                return Ok(exit.status);
            }
            Err(self.unavailable(format!(
                "instance {} vanished right after it was started",
                self.instance_name(session)
            )))
        })
    }

    fn attach_argv(&self, session: &str, argv: &[String], pty: bool) -> Result<ClientArgv> {
        let binary = self.binary()?;
        let mut full = vec![binary.display().to_string()];
        match self.terminal_argv(argv, pty) {
            // The terminal is made inside: the client runs on pipes.
            Some(inside) => {
                full.extend(self.exec_args(session, &inside));
                Ok((full, false))
            }
            None => {
                full.extend(self.exec_args(session, argv));
                Ok((full, pty))
            }
        }
    }

    fn health(&self) -> BackendFuture<'_, ()> {
        Box::pin(async move {
            let binary = self.binary()?;
            let out = self.binary_output(&["version"]).await?;
            if !out.status.success() {
                return Err(self.unavailable(format!(
                    "{} version failed: {}",
                    binary.display(),
                    String::from_utf8_lossy(&out.stderr).trim()
                )));
            }
            if !std::path::Path::new(&self.config.image).exists() {
                return Err(
                    self.unavailable(format!("the image {} does not exist", self.config.image))
                );
            }
            Ok(())
        })
    }

    fn sweep_orphans<'a>(&'a self, live_sessions: &'a [String]) -> BackendFuture<'a, usize> {
        Box::pin(self.remove_orphans(live_sessions))
    }

    fn keep_alive(&self, session: &str, until: std::time::SystemTime) {
        let Some(agent) = &self.config.agent else {
            return;
        };
        // Written before the instance starts too (the call that starts it marks the session
        // active first): its watchdog then finds a time from the start.
        let dir = agent_dir(&agent.runtime_dir, &self.instance_name(session));
        let written = prepare_agent_dir(&dir, "apptainer", &self.config.name)
            .and_then(|_| crate::lifetime::write_expiry(&dir, until).map_err(BackendError::from));
        if let Err(err) = written {
            tracing::warn!(backend = %self.config.name, session, %err, "the instance's expiry was not written");
        }
    }

    fn close_session<'a>(&'a self, session: &'a str) -> BackendFuture<'a, ()> {
        Box::pin(async move {
            crate::shell::check_session(session)?;
            let out = self
                .binary_output(&["instance", "stop", &self.instance_name(session)])
                .await?;
            let stderr = String::from_utf8_lossy(&out.stderr);
            if out.status.success() || is_missing_instance(&stderr) {
                Ok(())
            } else {
                Err(self.unavailable(format!("instance stop failed: {}", stderr.trim())))
            }
        })
    }
}
