//! The slurm backend: a session is one Slurm job (`salloc --no-shell`, so the allocation
//! lasts until the session closes, its time limit, or Slurm ends it). Inside it one *holder
//! step* (`srun --jobid=J --overlap`) runs the session's agent in the foreground; with `image`
//! the step first starts an Apptainer instance of the image and runs the agent inside it.
//! Every command then goes over the agent's socket, as on docker and apptainer.
//!
//! Why a holder step: with `proctrack/cgroup` (the usual setting) Slurm ends every process of a
//! step when the step's first process exits, daemons included. The agent therefore is that
//! first process, and the `srun` that relays its step runs detached on this machine (the login
//! node), so that it outlives an engine restart; background processes run in steps of their own
//! (`srun --overlap` under their supervisor).
//!
//! Faults: a job that waits in the queue longer than `queue_timeout_seconds` is cancelled and
//! the command fails saying so; the wait is reported (MCP progress, a stderr line in the CLI).
//! A job that Slurm ends (time limit, `scancel`, preemption, node failure) makes the command
//! that was running, or else the next one, fail naming the job and its end state; the command
//! after that gets a fresh allocation. Closing the session cancels the job.
//!
//! How the agent is reached:
//! - by default at the path the agent listens on: the allocated node must see this machine's
//!   `PADDOCK_HOME` at the same path and share its socket namespace, which holds when the
//!   engine runs on the cluster node itself (single-node clusters, an engine started inside an
//!   allocation);
//! - with `relay = "tcp"` or `"srun"` (a login-node engine, compute nodes elsewhere), through a
//!   relay around the holder step ([`relay`]): the node needs neither this machine's files nor
//!   the agent binary; connections go to a token-checked port of the node's agent (`tcp`) or
//!   through the step's own standard input and output (`srun`, no port on the node).

pub mod jobs;
pub mod relay;
pub mod section;

use std::collections::{BTreeMap, HashMap};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::agent::detached::log_tail;
use crate::agent::{
    AGENT_DIR_INSIDE, AGENT_PATH_INSIDE, AgentHost, AgentPlacement, SOCKET_NAME, agent_dir,
    prepare_agent_dir,
};
use crate::apptainer::ApptainerTransport;
use crate::naming::{self, base_session};
use crate::remote::client::run_client;
use crate::remote::{ClientArgv, ExitFuture, OutputSink, TargetRun, Transport};
use crate::{BackendError, BackendFuture, Result};
use jobs::{AllocationError, JobState, SlurmClient};

/// How long a holder step may take until its agent listens (an image's instance included).
const HOLDER_START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a holder start waits before trying again when another process holds the session's
/// lock.
const LOCK_RETRY: Duration = Duration::from_millis(200);
/// The queue wait allowed when the policy says nothing.
pub const DEFAULT_QUEUE_TIMEOUT: Duration = Duration::from_secs(300);

/// `[backends.NAME]` of kind slurm.
#[derive(Debug, Clone)]
pub struct SlurmConfig {
    pub name: String,
    pub partition: Option<String>,
    /// Slurm's `--time` (`MM`, `HH:MM:SS`, `D-HH:MM`).
    pub time_limit: Option<String>,
    /// CPUs per task (`-c`).
    pub cpus: Option<u32>,
    pub memory_mb: Option<u64>,
    pub gres: Option<String>,
    pub account: Option<String>,
    /// More `salloc` options, passed as given.
    pub extra_args: Vec<String>,
    pub queue_timeout: Duration,
    /// Where Slurm's client programs are (PATH when not set).
    pub bin_dir: Option<PathBuf>,
    /// Where a session's commands start.
    pub workdir: Option<String>,
    pub env: BTreeMap<String, String>,
    /// Commands run in an Apptainer instance of this image (`image` and the apptainer keys).
    pub apptainer: Option<crate::apptainer::ApptainerConfig>,
    pub agent: Option<AgentPlacement>,
    /// How the agent on the job's node is reached when the node does not share this
    /// machine's file system ([`relay`]); `None`: through the file system.
    pub relay: Option<RelayPath>,
    /// This user's home, for the state directory of bare sessions.
    pub home: String,
    /// The state directory's part of job names ([`crate::naming::owner_of`]).
    pub owner: String,
}

/// `relay = "tcp"` or `"srun"`: how a relayed agent's connections travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelayPath {
    /// Directly to a listener of the node's agent, with a per-session token.
    Direct,
    /// Through the holder step's standard input and output.
    Stream,
}

/// Slurm jobs as a transport.
pub struct SlurmTransport {
    config: SlurmConfig,
    client: SlurmClient,
    apptainer: Option<ApptainerTransport>,
    state_root: String,
    /// The job of each of this engine's sessions (base session id → job id); the agent
    /// directory's `job` file keeps it across engine processes.
    jobs: Mutex<HashMap<String, String>>,
    /// One allocation or agent start at a time per session.
    starting: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl SlurmTransport {
    pub fn new(config: SlurmConfig) -> Self {
        let uid = std::fs::metadata("/proc/self").map_or(0, |m| {
            use std::os::unix::fs::MetadataExt;
            m.uid()
        });
        let client = SlurmClient {
            bin_dir: config.bin_dir.clone(),
            uid,
        };
        let state_root = match &config.apptainer {
            Some(_) => "/tmp/.paddock".to_owned(),
            // The engine's state directory is part of it: two homes (two engines, two
            // users of one account) with the same session id must not share, nor remove,
            // each other's shell state on the shared home directory.
            None => format!(
                "{}/.cache/paddock/slurm-{}-{}",
                config.home, config.name, config.owner
            ),
        };
        let apptainer = config.apptainer.clone().map(ApptainerTransport::new);
        Self {
            config,
            client,
            apptainer,
            state_root,
            jobs: Mutex::new(HashMap::new()),
            starting: Mutex::new(HashMap::new()),
        }
    }

    fn unavailable(&self, reason: impl Into<String>) -> BackendError {
        BackendError::Unavailable {
            kind: "slurm".into(),
            name: self.config.name.clone(),
            reason: reason.into(),
        }
    }

    /// The job (and apptainer instance) name of `session`,
    /// `paddock-<backend>-<owner>-<session>`.
    pub fn job_name(&self, session: &str) -> String {
        naming::environment_name(&self.config.name, &self.config.owner, session)
    }

    fn agent(&self) -> Result<&AgentPlacement> {
        self.config.agent.as_ref().ok_or_else(|| {
            self.unavailable(
                "the slurm backend runs its sessions through the agent (the agent binary was \
                 not found, or `agent = false`)",
            )
        })
    }

    fn session_dir(&self, session: &str) -> Result<PathBuf> {
        Ok(agent_dir(
            &self.agent()?.runtime_dir,
            &self.job_name(session),
        ))
    }

    /// The file that names the session's job, beside its agent's socket.
    fn record_path(&self, session: &str) -> Result<PathBuf> {
        Ok(self.session_dir(session)?.join("job"))
    }

    fn session_lock(&self, session: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut all = self
            .starting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        all.entry(base_session(session).to_owned())
            .or_default()
            .clone()
    }

    fn remember(&self, session: &str, job: &str) -> Result<()> {
        let path = self.record_path(session)?;
        prepare_agent_dir(&self.session_dir(session)?, "slurm", &self.config.name)?;
        std::fs::write(&path, job).map_err(|e| {
            self.unavailable(format!("cannot record the job in {}: {e}", path.display()))
        })?;
        self.jobs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(base_session(session).to_owned(), job.to_owned());
        Ok(())
    }

    fn forget(&self, session: &str) {
        self.jobs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(base_session(session));
        if let Ok(path) = self.record_path(session) {
            let _ = std::fs::remove_file(path);
        }
    }

    /// The job recorded for `session` (by this engine or an earlier one).
    fn recorded(&self, session: &str) -> Option<String> {
        if let Some(job) = self
            .jobs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(base_session(session))
        {
            return Some(job.clone());
        }
        let text = std::fs::read_to_string(self.record_path(session).ok()?).ok()?;
        let job = text.trim();
        (!job.is_empty() && job.chars().all(|c| c.is_ascii_digit())).then(|| job.to_owned())
    }

    fn ended(&self, session: &str, job: &str, state: Option<&JobState>) -> BackendError {
        self.unavailable(ended_reason(session, job, state))
    }

    /// When the node of `session`'s running `job` is gone (its slurmd does not answer), the
    /// job can start no step there again, though slurmctld still says RUNNING until
    /// `SlurmdTimeout`: the job is cancelled and forgotten, so that the next command gets a new
    /// allocation (Slurm places it on a node that answers: the lost one keeps the cancelled
    /// job's completion until its slurmd returns). Answers the error naming the node and the
    /// job's state; `None` when the node answers (the fault is elsewhere) or is unknown.
    async fn node_lost(&self, session: &str, job: &str, what: &str) -> Option<String> {
        let (address, node) = self.client.node_of(job).await.ok()?;
        let silent = self.client.slurmd_answers(&address).await.err()?;
        let cancelled = match self.client.cancel(&self.job_name(session), Some(job)).await {
            Ok(()) => "it is cancelled".to_owned(),
            Err(err) => format!("cancelling it failed ({err})"),
        };
        self.forget(session);
        tracing::warn!(backend = %self.config.name, session, job, node, %silent, "a job's node is gone");
        Some(format!(
            "the agent of session '{}' on node {node} {what}: the node's slurmd does not answer \
             ({silent}), so the node is down or cut off, while Slurm still has job {job} \
             RUNNING; {cancelled}, what ran in it is gone, and the next command gets a new \
             allocation on a node that answers",
            base_session(session)
        ))
    }

    /// Removes what a bare session kept on the node's file system (its shell state and its
    /// python_execute state); a session in an image keeps it in the instance, gone with it.
    fn remove_bare_state(&self, session: &str) {
        if self.apptainer.is_some() {
            return;
        }
        let base = base_session(session);
        let sessions = Path::new(&self.state_root).join("sessions");
        for dir in [sessions.join(base), sessions.join(format!("{base}.python"))] {
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    /// The running job of `session`: the recorded one while Slurm runs it, else a new
    /// allocation. A recorded job that Slurm ended is an error (once: it is forgotten).
    async fn running_job(&self, session: &str) -> Result<String> {
        if let Some(job) = self.recorded(session) {
            let state = self
                .client
                .job_state(&job)
                .await
                .map_err(|e| self.unavailable(e))?;
            match state {
                Some(s) if s.is_running() => return Ok(job),
                // An engine that stopped while its job waited: that wait is over.
                Some(s) if s.is_pending() => {
                    let _ = self
                        .client
                        .cancel(&self.job_name(session), Some(&job))
                        .await;
                    self.forget(session);
                }
                other => {
                    self.forget(session);
                    return Err(self.ended(session, &job, other.as_ref()));
                }
            }
        }
        self.allocate(session).await
    }

    fn salloc_args(&self, session: &str) -> Vec<String> {
        let c = &self.config;
        let mut args: Vec<String> = vec![
            "--no-shell".into(),
            format!("--job-name={}", self.job_name(session)),
            "--nodes=1".into(),
            "--ntasks=1".into(),
        ];
        if let Some(cpus) = c.cpus {
            args.push(format!("--cpus-per-task={cpus}"));
        }
        if let Some(mb) = c.memory_mb {
            args.push(format!("--mem={mb}M"));
        }
        if let Some(p) = &c.partition {
            args.push(format!("--partition={p}"));
        }
        if let Some(t) = &c.time_limit {
            args.push(format!("--time={t}"));
        }
        if let Some(a) = &c.account {
            args.push(format!("--account={a}"));
        }
        if let Some(g) = &c.gres {
            args.push(format!("--gres={g}"));
        }
        args.extend(c.extra_args.iter().cloned());
        args
    }

    async fn allocate(&self, session: &str) -> Result<String> {
        let started = Instant::now();
        // A new job is a new session environment: nothing of an ended job's shell state
        // (its cwd, its exports, SLURM_JOB_ID among them) carries over.
        self.remove_bare_state(session);
        let recorded = |job: &str| {
            if let Err(err) = self.remember(session, job) {
                tracing::warn!(backend = %self.config.name, %err, "job not recorded");
            }
        };
        let job = self
            .client
            .allocate(
                &self.salloc_args(session),
                self.config.queue_timeout,
                recorded,
            )
            .await
            .map_err(|err| {
                self.forget(session);
                match err {
                    AllocationError::Refused(said) => self.unavailable(format!(
                        "Slurm refused the allocation for session '{}': {said}",
                        base_session(session)
                    )),
                    AllocationError::QueueTimeout {
                        job,
                        waited,
                        reason,
                    } => self.unavailable(format!(
                        "Slurm job {job} did not start within queue_timeout_seconds = {} \
                         (waited {:.1} s{}); it was cancelled. Ask for fewer resources or \
                         raise `queue_timeout_seconds` in [backends.{}]",
                        self.config.queue_timeout.as_secs(),
                        waited.as_secs_f64(),
                        if reason.is_empty() {
                            String::new()
                        } else {
                            format!(", reason {reason}")
                        },
                        self.config.name
                    )),
                    AllocationError::Client(message) => self.unavailable(message),
                }
            })?;
        self.remember(session, &job)?;
        tracing::info!(backend = %self.config.name, session, job, ms = started.elapsed().as_millis() as u64, "Slurm allocation granted");
        Ok(job)
    }

    /// The environment a step's tasks start with (srun would otherwise pass on this engine's
    /// whole environment, secrets included). Commands get the policy's `env` per request.
    fn export_arg(&self) -> String {
        let mut vars = vec![
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_owned(),
            "LANG=C.UTF-8".to_owned(),
            format!("HOME={}", self.config.home),
        ];
        for name in ["USER", "LOGNAME"] {
            if let Ok(value) = std::env::var(name)
                && !value.contains(',')
            {
                vars.push(format!("{name}={value}"));
            }
        }
        vars.retain(|v| !v.contains(','));
        format!("--export={}", vars.join(","))
    }

    /// `srun` into `job`, sharing its resources with the session's other steps.
    fn srun_argv(&self, job: &str) -> Vec<String> {
        let mut argv = vec![
            self.client.program("srun").display().to_string(),
            format!("--jobid={job}"),
            "--overlap".into(),
            "--quiet".into(),
            "--nodes=1".into(),
            "--ntasks=1".into(),
            self.export_arg(),
        ];
        match &self.config.workdir {
            Some(dir) if self.apptainer.is_none() => argv.push(format!("--chdir={dir}")),
            // srun starts a step in its own working directory, which on another node may not
            // exist (slurmstepd then prints "Unable to return to working directory" into the
            // command's output): the home directory, which nodes share, does.
            _ if self.config.relay.is_some() => argv.push(format!("--chdir={}", self.config.home)),
            _ => {}
        }
        argv
    }

    /// What runs `argv` in the session's environment once inside the job's step: the program
    /// itself, or `apptainer exec instance://...`.
    fn inside(&self, session: &str, argv: &[String]) -> Result<Vec<String>> {
        match &self.apptainer {
            None => Ok(argv.to_vec()),
            Some(apptainer) => {
                let mut full = vec![apptainer.binary()?.display().to_string()];
                full.extend(apptainer.exec_args(session, argv));
                Ok(full)
            }
        }
    }

    /// The holder step's program: the agent in the foreground, in the image's instance when
    /// there is one.
    fn holder_argv(&self, session: &str, socket: &Path) -> Result<Vec<String>> {
        let agent = self.agent()?;
        // The job ends by itself once the session has been idle past its timeout, whether or
        // not an engine runs then ([`crate::lifetime`]): a watchdog beside the agent reads the
        // time the engine keeps the session until (the node sees the agent's directory at the
        // same path) and cancels the job. It ends with the step, as every process of it.
        let expires = socket.with_file_name(crate::lifetime::EXPIRES_FILE);
        let watchdog = format!(
            "( {} ) </dev/null >/dev/null 2>&1 &",
            crate::lifetime::watchdog_script(
                &expires.display().to_string(),
                r#"{ scancel "$SLURM_JOB_ID" || kill -TERM $$; exit 0; }"#,
            )
        );
        match &self.apptainer {
            None => Ok(vec![
                "/bin/bash".into(),
                "-c".into(),
                // `exec`: the agent stays the step's first process (its end ends the step).
                format!("{watchdog}\nexec \"$@\""),
                "paddock-holder".into(),
                agent.binary.display().to_string(),
                "serve".into(),
                "--socket".into(),
                socket.display().to_string(),
            ]),
            Some(apptainer) => {
                // An instance of an earlier holder (killed without its cgroup) is replaced.
                let script = format!(
                    r#"a=$1; n=$2; shift 2
{watchdog}
"$a" instance stop "$n" >/dev/null 2>&1
"$a" "$@" >&2 || exit 1
exec "$a" exec --cleanenv --pwd / "instance://$n" {AGENT_PATH_INSIDE} serve --socket {AGENT_DIR_INSIDE}/{SOCKET_NAME}{egress}"#,
                    // The instance has no network: the agent carries connections to the proxy.
                    egress = if self.egress() {
                        format!(" {}", crate::egress::agent_args().join(" "))
                    } else {
                        String::new()
                    }
                );
                let mut argv = vec![
                    "/bin/bash".into(),
                    "-c".into(),
                    script,
                    "paddock-holder".into(),
                    apptainer.binary()?.display().to_string(),
                    apptainer.instance_name(session),
                ];
                argv.extend(apptainer.start_args(session));
                Ok(argv)
            }
        }
    }

    /// `relay = "tcp"` or `"srun"`: the holder step started by a relay on this machine, which
    /// sends the agent binary to the node and offers `socket` here once the node's agent
    /// listens (with `tcp`, after looking up the node's address to connect to).
    async fn relayed_holder_argv(
        &self,
        session: &str,
        job: &str,
        socket: &Path,
        path: RelayPath,
    ) -> Result<Vec<String>> {
        let agent = self.agent()?;
        let direct_host = match path {
            RelayPath::Stream => None,
            RelayPath::Direct => {
                let (address, node) = self
                    .client
                    .node_of(job)
                    .await
                    .map_err(|e| self.unavailable(e))?;
                tracing::debug!(backend = %self.config.name, job, node, address, "the session's node");
                Some(address)
            }
        };
        let size = std::fs::metadata(&agent.binary)
            .map_err(|e| {
                self.unavailable(format!(
                    "cannot read the agent binary {} to send it to the node: {e}",
                    agent.binary.display()
                ))
            })?
            .len();
        let digest = socket
            .parent()
            .and_then(Path::file_name)
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        let node_dir = relay::node_dir(&digest);
        let instance = match &self.apptainer {
            None => None,
            Some(apptainer) => Some((
                apptainer.binary()?.display().to_string(),
                apptainer.instance_name(session),
                apptainer.start_args_binding(session, relay::instance_binds(&node_dir)),
            )),
        };
        Ok(relay::listen_argv(
            &agent.binary,
            size,
            socket,
            direct_host.as_deref(),
            self.srun_argv(job),
            &node_dir,
            instance,
        ))
    }

    /// Starts the session's holder step (allocating the job first when it has none) and
    /// answers once its agent listens.
    async fn start_holder(&self, session: &str) -> Result<()> {
        let lock = self.session_lock(session);
        let _starting = lock.lock().await;
        let socket = self.agent_socket(session)?;
        if tokio::net::UnixStream::connect(&socket).await.is_ok() {
            return Ok(());
        }
        let job = self.running_job(session).await?;
        let log_path = socket.with_file_name("holder.log");
        let argv = if let Some(path) = self.config.relay {
            self.relayed_holder_argv(session, &job, &socket, path)
                .await?
        } else {
            let mut argv = self.srun_argv(&job);
            argv.extend(self.holder_argv(session, &socket)?);
            argv
        };
        let started = Instant::now();
        let mut child = self.spawn_holder(&argv, &log_path)?;
        loop {
            if tokio::net::UnixStream::connect(&socket).await.is_ok() {
                // Reaped by a thread: the engine may live on for hours.
                std::thread::spawn(move || child.wait());
                tracing::debug!(backend = %self.config.name, session, job, ms = started.elapsed().as_millis() as u64, "agent step started");
                return Ok(());
            }
            if let Ok(Some(status)) = child.try_wait() {
                if status.code() == Some(paddock_agent::EXIT_ALREADY_RUNNING) {
                    // Another process holds the session's lock: a relay or agent starting for
                    // another engine (its socket comes in moments), or one going away (a relay
                    // that gave its lost stream up removes its socket first, then exits). Start
                    // again once the lock is free; a holder that never lets go meets the time
                    // limit below. Waiting for the socket alone would wait forever for one that
                    // is going away.
                    if started.elapsed() <= HOLDER_START_TIMEOUT {
                        tokio::time::sleep(LOCK_RETRY).await;
                        child = self.spawn_holder(&argv, &log_path)?;
                        continue;
                    }
                } else {
                    let state = self.client.job_state(&job).await.ok().flatten();
                    if !state.as_ref().is_some_and(JobState::is_running) {
                        self.forget(session);
                        return Err(self.ended(session, &job, state.as_ref()));
                    }
                    if let Some(reason) =
                        self.node_lost(session, &job, "could not start there").await
                    {
                        return Err(self.unavailable(reason));
                    }
                    return Err(self.unavailable(format!(
                        "the agent's step in Slurm job {job} ended at start ({status}): {}",
                        log_tail(&log_path)
                    )));
                }
            }
            if started.elapsed() > HOLDER_START_TIMEOUT {
                let _ = child.kill();
                if let Some(reason) = self.node_lost(session, &job, "did not start there").await {
                    return Err(self.unavailable(reason));
                }
                return Err(self.unavailable(format!(
                    "the agent's step in Slurm job {job} did not listen within {} s: {}",
                    HOLDER_START_TIMEOUT.as_secs(),
                    log_tail(&log_path)
                )));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Runs a holder step's program (`argv`), its output appended to `log_path`.
    fn spawn_holder(&self, argv: &[String], log_path: &Path) -> Result<std::process::Child> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log_path)
            .map_err(|e| self.unavailable(format!("cannot open {}: {e}", log_path.display())))?;
        let Some((program, args)) = argv.split_first() else {
            return Err(self.unavailable("the holder step has no program"));
        };
        std::process::Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_or_else(|_| Stdio::null(), Stdio::from))
            .stderr(log)
            // Not in the engine's process group: the step outlives this engine (a later
            // `paddock call` finds the agent again); it ends with the job.
            .process_group(0)
            .spawn()
            .map_err(|e| {
                self.unavailable(format!(
                    "cannot run {program}: {e} (is Slurm's client installed? set `slurm_bin_dir`)"
                ))
            })
    }

    /// Cancels this backend's jobs that no live session owns and that this state directory
    /// made (their agent directory is here, older than a minute), never another engine's.
    async fn cancel_orphans(&self, live: &[String]) -> Result<usize> {
        let Some(agent) = &self.config.agent else {
            return Ok(0);
        };
        let prefix = naming::name_prefix(&self.config.name, &self.config.owner);
        let backend_prefix = format!("paddock-{}-", self.config.name);
        let owner_part = format!("-{}-", self.config.owner);
        let jobs = self
            .client
            .own_jobs()
            .await
            .map_err(|e| self.unavailable(e))?;
        let mut cancelled = 0;
        for (id, name) in jobs {
            match name.strip_prefix(&prefix) {
                Some(session) if live.iter().any(|s| base_session(s) == session) => continue,
                Some(_) => {}
                // Named the way older versions did, without the owner (one with it is another
                // backend's whose name starts like this one's): the agent directory below
                // decides whether this state directory made it.
                None if name.starts_with(&backend_prefix) && !name.contains(&owner_part) => {}
                None => continue,
            }
            let dir = agent_dir(&agent.runtime_dir, &name);
            let old = std::fs::metadata(&dir)
                .and_then(|m| m.modified())
                .is_ok_and(|made| made.elapsed().is_ok_and(|age| age.as_secs() >= 60));
            if !old {
                continue;
            }
            tracing::info!(backend = %self.config.name, job = %id, "cancelling a Slurm job no session owns");
            if self.client.cancel(&name, Some(&id)).await.is_ok() {
                cancelled += 1;
                let _ = std::fs::remove_dir_all(dir);
            }
        }
        Ok(cancelled)
    }
}

/// Why a session's commands failed: its job ended.
fn ended_reason(session: &str, job: &str, state: Option<&JobState>) -> String {
    let how = match state {
        Some(s) if s.reason.is_empty() || s.reason == "None" => s.state.clone(),
        Some(s) => format!("{}, {}", s.state, s.reason),
        None => "no longer known to Slurm".to_owned(),
    };
    format!(
        "the Slurm job {job} of session '{}' ended ({how}): what ran in it is gone; the next \
         command gets a new allocation",
        base_session(session)
    )
}

impl AgentHost for SlurmTransport {
    fn agent_socket(&self, session: &str) -> Result<PathBuf> {
        prepare_agent_dir(&self.session_dir(session)?, "slurm", &self.config.name)
    }

    fn agent_program(&self) -> Option<String> {
        // In the image's instance, the bound binary; on the node, the binary itself (the
        // holder step runs it from the shared file system).
        match &self.apptainer {
            Some(_) => Some(AGENT_PATH_INSIDE.to_owned()),
            // The node's copy lies in the holder step's own directory, which a background
            // command's step does not know: it keeps the plain commit.
            None if self.config.relay.is_some() => None,
            None => self
                .config
                .agent
                .as_ref()
                .map(|agent| agent.binary.display().to_string()),
        }
    }

    fn start_agent<'a>(&'a self, session: &'a str) -> BackendFuture<'a, ()> {
        Box::pin(self.start_holder(session))
    }

    /// Proxied only in an image's instance, made with no network (a bare job keeps the node's).
    fn egress(&self) -> bool {
        // The proxy's sockets are on this machine; the policy refuses it with a relay.
        self.config.relay.is_none() && self.apptainer.as_ref().is_some_and(AgentHost::egress)
    }

    fn agent_is_stale<'a>(
        &'a self,
        _session: &'a str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send + 'a>> {
        // Every holder step runs (or binds) this engine's own agent binary.
        Box::pin(async { false })
    }

    fn explain_loss<'a>(
        &'a self,
        session: &'a str,
        what: &'a str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<String>> + Send + 'a>> {
        Box::pin(async move {
            let job = self.recorded(session)?;
            let state = self.client.job_state(&job).await.ok()?;
            if state.as_ref().is_some_and(JobState::is_running) {
                return self.node_lost(session, &job, what).await;
            }
            self.forget(session);
            Some(ended_reason(session, &job, state.as_ref()))
        })
    }
}

impl Transport for SlurmTransport {
    fn keep_alive(&self, session: &str, until: std::time::SystemTime) {
        // Through a relay the node does not see the agent's directory: no watchdog there (the
        // job waits for the engine's sweep, or its time limit).
        if self.config.relay.is_some() || self.config.agent.is_none() {
            return;
        }
        let written = self.agent_socket(session).and_then(|socket| {
            let dir = socket.parent().unwrap_or(Path::new("/")).to_path_buf();
            crate::lifetime::write_expiry(&dir, until).map_err(BackendError::from)
        });
        if let Err(err) = written {
            tracing::warn!(backend = %self.config.name, session, %err, "the job's expiry was not written");
        }
    }

    fn kind(&self) -> &'static str {
        "slurm"
    }

    fn is_container(&self) -> bool {
        self.apptainer.is_some()
    }

    fn changes_agent(&self) -> Option<&'static str> {
        // With an image, commands run in an Apptainer instance (a PID namespace of its own)
        // with the agent bound in; on the bare node there is nothing to tell apart.
        self.apptainer
            .is_some()
            .then_some(crate::agent::AGENT_PATH_INSIDE)
    }

    fn name(&self) -> &str {
        &self.config.name
    }

    fn state_root(&self) -> &str {
        &self.state_root
    }

    fn home(&self) -> &str {
        match (&self.config.workdir, &self.apptainer) {
            (Some(dir), _) => dir,
            (None, Some(_)) => "/tmp",
            (None, None) => "",
        }
    }

    fn env(&self) -> &BTreeMap<String, String> {
        &self.config.env
    }

    fn ensure<'a>(&'a self, session: &'a str) -> BackendFuture<'a, ()> {
        // A background command's step joins the image's instance, which lives in the holder
        // step: the job alone is not enough.
        Box::pin(self.start_holder(session))
    }

    fn run<'a>(&'a self, session: &'a str, run: TargetRun, sink: OutputSink) -> ExitFuture<'a> {
        Box::pin(async move {
            let job = {
                let lock = self.session_lock(session);
                let _starting = lock.lock().await;
                self.running_job(session).await?
            };
            let mut argv = self.srun_argv(&job);
            if run.pty {
                argv.push("--pty".into());
            }
            argv.extend(self.inside(session, &run.argv)?);
            let program = PathBuf::from(argv.remove(0));
            let exit = run_client(&program, &argv, run.stdin, run.pty, sink)
                .await
                .map_err(|e| self.unavailable(e.to_string()))?;
            if exit.status != 0
                && let Some(reason) = self
                    .explain_loss(session, "was lost in the middle of the command")
                    .await
            {
                return Err(self.unavailable(reason));
            }
            Ok(exit.status)
        })
    }

    fn terminal_follows_resize(&self) -> bool {
        // srun --pty forwards a window change to the node's terminal; in an instance the
        // command has a terminal of its own, which does not hear of it.
        self.apptainer.is_none()
    }

    fn attach_argv(&self, session: &str, argv: &[String], pty: bool) -> Result<ClientArgv> {
        let job = self.recorded(session).ok_or_else(|| {
            self.unavailable(format!(
                "session '{}' has no Slurm job yet",
                base_session(session)
            ))
        })?;
        let mut full = self.srun_argv(&job);
        if pty {
            full.push("--pty".into());
        }
        // srun's terminal is the node's; in an instance the command gets one of its own.
        let on_terminal = self
            .apptainer
            .as_ref()
            .and_then(|apptainer| apptainer.terminal_argv(argv, pty));
        full.extend(self.inside(session, on_terminal.as_deref().unwrap_or(argv))?);
        Ok((full, pty))
    }

    fn health(&self) -> BackendFuture<'_, ()> {
        Box::pin(async move {
            let mut args = vec!["-h", "-o", "%P %a"];
            let partition;
            if let Some(p) = &self.config.partition {
                partition = format!("--partition={p}");
                args.push(&partition);
            }
            let (ok, out, err) = self
                .client
                .command("sinfo", &args)
                .await
                .map_err(|e| self.unavailable(e))?;
            if !ok {
                return Err(
                    self.unavailable(format!("sinfo failed (is slurmctld up?): {}", err.trim()))
                );
            }
            if out.trim().is_empty() {
                return Err(self.unavailable(format!(
                    "Slurm has no partition {}",
                    self.config.partition.as_deref().unwrap_or("(default)")
                )));
            }
            if let Some(apptainer) = &self.apptainer {
                apptainer
                    .health()
                    .await
                    .map_err(|e| self.unavailable(e.to_string()))?;
            }
            Ok(())
        })
    }

    fn sweep_orphans<'a>(&'a self, live_sessions: &'a [String]) -> BackendFuture<'a, usize> {
        Box::pin(self.cancel_orphans(live_sessions))
    }

    fn close_session<'a>(&'a self, session: &'a str) -> BackendFuture<'a, ()> {
        Box::pin(async move {
            crate::shell::check_session(session)?;
            let job = self.recorded(session);
            let cancelled = self
                .client
                .cancel(&self.job_name(session), job.as_deref())
                .await
                .map_err(|e| self.unavailable(e));
            self.forget(session);
            self.remove_bare_state(session);
            cancelled
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transport(extra: impl FnOnce(&mut SlurmConfig)) -> SlurmTransport {
        let mut config = SlurmConfig {
            name: "hpc".into(),
            partition: Some("gpu".into()),
            time_limit: Some("30".into()),
            cpus: Some(4),
            memory_mb: Some(2048),
            gres: Some("gpu:1".into()),
            account: Some("lab".into()),
            extra_args: vec!["--qos=short".into()],
            queue_timeout: Duration::from_secs(60),
            bin_dir: Some(PathBuf::from("/opt/slurm/bin")),
            workdir: None,
            env: BTreeMap::new(),
            apptainer: None,
            agent: Some(AgentPlacement {
                binary: PathBuf::from("/x/paddock-agent"),
                identity: "i".into(),
                runtime_dir: PathBuf::from("/state/agents"),
            }),
            relay: None,
            home: "/home/u".into(),
            owner: "0123abcd".into(),
        };
        extra(&mut config);
        SlurmTransport::new(config)
    }

    #[test]
    fn the_allocation_carries_every_policy_key() {
        let t = transport(|_| {});
        assert_eq!(
            t.salloc_args("s1.python"),
            [
                "--no-shell",
                "--job-name=paddock-hpc-0123abcd-s1",
                "--nodes=1",
                "--ntasks=1",
                "--cpus-per-task=4",
                "--mem=2048M",
                "--partition=gpu",
                "--time=30",
                "--account=lab",
                "--gres=gpu:1",
                "--qos=short",
            ]
        );
    }

    #[test]
    fn steps_overlap_and_never_inherit_the_engines_environment() {
        let t = transport(|c| c.workdir = Some("/scratch/u".into()));
        let argv = t.srun_argv("17");
        assert_eq!(argv[0], "/opt/slurm/bin/srun");
        assert!(argv.contains(&"--jobid=17".to_owned()));
        assert!(argv.contains(&"--overlap".to_owned()));
        assert!(argv.contains(&"--chdir=/scratch/u".to_owned()));
        let export = argv.iter().find(|a| a.starts_with("--export=")).unwrap();
        assert!(!export.contains("ALL"), "{export}");
        assert!(export.contains("HOME=/home/u"), "{export}");
    }

    #[test]
    fn relayed_steps_start_in_the_home_directory_not_in_the_engines() {
        let t = transport(|c| c.relay = Some(RelayPath::Direct));
        assert!(t.srun_argv("17").contains(&"--chdir=/home/u".to_owned()));
        let t = transport(|c| {
            c.relay = Some(RelayPath::Direct);
            c.workdir = Some("/scratch/u".into());
        });
        assert!(t.srun_argv("17").contains(&"--chdir=/scratch/u".to_owned()));
        let t = transport(|_| {});
        assert!(!t.srun_argv("17").iter().any(|a| a.starts_with("--chdir")));
    }

    #[test]
    fn a_bare_holder_runs_the_agent_in_the_foreground() {
        let t = transport(|_| {});
        let argv = t
            .holder_argv("s1", Path::new("/state/agents/ab/agent.sock"))
            .unwrap();
        assert_eq!(
            argv[3..],
            [
                "paddock-holder",
                "/x/paddock-agent",
                "serve",
                "--socket",
                "/state/agents/ab/agent.sock"
            ]
        );
        // The agent replaces the shell (it is the step's first process); the watchdog beside
        // it cancels the job once the time in the agent directory's `expires` has passed.
        assert!(argv[2].ends_with("exec \"$@\""), "{}", argv[2]);
        assert!(argv[2].contains("/state/agents/ab/expires"), "{}", argv[2]);
        assert!(argv[2].contains("scancel \"$SLURM_JOB_ID\""), "{}", argv[2]);
        // No `--daemon`: a daemon would leave the step, and Slurm ends the step's strays.
        assert!(!argv.iter().any(|a| a == "--daemon"));
    }

    #[test]
    fn sessions_and_their_python_share_one_job_record() {
        let t = transport(|_| {});
        assert_eq!(t.job_name("a"), t.job_name("a.python"));
        assert_eq!(
            t.record_path("a").unwrap(),
            t.record_path("a.python").unwrap()
        );
        assert_ne!(t.record_path("a").unwrap(), t.record_path("b").unwrap());
    }
}
