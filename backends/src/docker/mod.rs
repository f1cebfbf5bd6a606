//! The docker backend: one long-lived container per (session, backend), every command an exec
//! into it through the Engine API (bollard), the API version negotiated with the daemon (the
//! one on Debian 12 speaks 1.41 only).
//!
//! Containers are labelled (`paddock.managed`, `paddock.backend`, `paddock.session` and a hash
//! of the settings they were made with), named `paddock-<backend>-<owner>-<session>` (the owner:
//! 8 hex digits of the state directory's digest), and found again by name after an engine
//! restart. One that vanished or stopped is recreated or restarted; one
//! made with other settings is replaced; stopped ones of the backend are removed on first use.
//!
//! Secure defaults: every capability dropped but the few a shell needs, no-new-privileges, a
//! pids limit, memory and CPU limits, no network unless the policy names one, a size-limited
//! tmpfs on /tmp, optionally a read-only root and a workspace bind mount.
//!
//! Files go in and out through exec's stdin and stdout rather than the archive endpoint, which
//! cannot write into tmpfs mounts (/tmp here) nor into a read-only root.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Mutex;

use bollard::Docker;
use bollard::errors::Error as DockerError;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use bollard::models::{ContainerCreateBody, ContainerSummary, HostConfig};
use bollard::query_parameters::{
    CreateContainerOptions, InspectContainerOptions, ListContainersOptions, RemoveContainerOptions,
    StartContainerOptions,
};
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

pub mod section;
mod snapshot;
mod warm;

use crate::agent::{
    AGENT_DIR_INSIDE, AgentHost, AgentPlacement, agent_dir, placed_agent_socket, prepare_agent_dir,
};
use crate::naming::{self, OWNER_CHARS, base_session};
use crate::remote::{ClientArgv, ExitFuture, OutputSink, TargetRun, Transport};
use crate::{BackendError, BackendFuture, Result};

/// The hidden subcommand background supervisors run: `paddock __docker-attach JSON`.
pub const ATTACH_SUBCOMMAND: &str = "__docker-attach";

/// Capabilities a shell needs for ordinary work as root in its container (file ownership,
/// permission bits, switching user, signalling its own processes).
pub(crate) const SHELL_CAPABILITIES: &[&str] = &[
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
];

/// Whether `name` can name a runtime registered with dockerd (`runsc`, `kata-runtime`,
/// `io.containerd.runsc.v1`): what the policy check accepts before the daemon is asked.
pub(crate) fn is_runtime_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// Where the settings digest a container was made with ([`DockerConfig::digest`]) is kept, for
/// an engine that finds its agent running to compare: beside its agent directory, not in it
/// (the container can write there, and must not keep itself from being replaced), and for a
/// claimed warm container beside the directory its session's directory links to.
fn made_with_path(runtime_dir: &std::path::Path, container: &str) -> PathBuf {
    let dir = agent_dir(runtime_dir, container);
    std::fs::read_link(&dir)
        .unwrap_or(dir)
        .with_extension("made-with")
}

/// Longer than any command may run: bollard's timeout covers a whole attached exec.
const CLIENT_TIMEOUT_S: u64 = 4 * 3600;

/// PID 1 of a session container: reaps orphans (bash reaps every child on SIGCHLD), ends on
/// `docker stop`, and ends by itself once the time the engine last kept the session until has
/// passed ([`crate::lifetime`]; the file is in the agent directory, so a container without the
/// agent waits for ever, as before). The container is made to be removed when PID 1 exits.
fn keepalive_script() -> String {
    format!(
        "trap 'exit 0' TERM; {}",
        crate::lifetime::watchdog_script(
            &format!("{AGENT_DIR_INSIDE}/{}", crate::lifetime::EXPIRES_FILE),
            "exit 0"
        )
    )
}

/// A docker backend's settings, from its policy section ([`section::DockerSection`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DockerConfig {
    pub name: String,
    pub image: String,
    /// `none` (default) or the name of a docker network (`bridge`, `host`, ...).
    pub network: String,
    /// `network = "proxy"`: no network (`network` is `none`), the agent carrying connections
    /// to the egress proxy ([`crate::egress`]).
    #[serde(default)]
    pub egress: bool,
    pub memory_mb: Option<u64>,
    pub cpus: Option<f64>,
    pub pids_limit: i64,
    pub read_only: bool,
    pub tmp_size_mb: u64,
    /// A host directory mounted read-write at `workdir`.
    pub workspace: Option<PathBuf>,
    pub workdir: Option<String>,
    pub env: BTreeMap<String, String>,
    /// The daemon's socket (`DOCKER_HOST=unix://...` or /var/run/docker.sock).
    pub socket: String,
    /// Commands go through the in-environment agent placed so (`agent = true`, the default).
    pub agent: Option<AgentPlacement>,
    /// Containers kept ready (agent running) for new sessions (`warm = N`); needs the agent.
    pub warm: usize,
    /// A digest of the engine's state directory: containers are bound to its agent
    /// directories, so engines with another `PADDOCK_HOME` neither sweep nor claim them.
    pub home: String,
    #[serde(default)]
    /// The capabilities the container keeps: [`SHELL_CAPABILITIES`] less the policy's
    /// `drop_capabilities`.
    pub capabilities: Vec<String>,
    /// The OCI runtime the container runs with (`runtime = "runsc"`); the daemon's default
    /// when `None`. Left out of the digest's text when unset, so containers made before the
    /// key existed are not replaced for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
}

impl DockerConfig {
    /// The value of [`DockerConfig::home`] for a state directory.
    pub fn home_of(state_root: &std::path::Path) -> String {
        hex::encode(&Sha256::digest(state_root.as_os_str().as_encoded_bytes())[..8])
    }

    /// The daemon socket from `DOCKER_HOST` (unix only), else the default.
    pub fn default_socket() -> String {
        std::env::var("DOCKER_HOST")
            .ok()
            .and_then(|h| h.strip_prefix("unix://").map(str::to_owned))
            .unwrap_or_else(|| "/var/run/docker.sock".into())
    }

    /// What a container was made with; the size of the warm pool is not part of it. The
    /// state directory is: the container's agent directory is bound from it, so a container
    /// another `PADDOCK_HOME` made under the same name is replaced, not reused.
    fn digest(&self) -> String {
        let made_with = Self {
            warm: 0,
            ..self.clone()
        };
        let text = serde_json::to_string(&made_with).unwrap_or_default();
        // PID 1's program too: a container made with an older one (that never ended by
        // itself) is replaced.
        let text = format!("{text}\0{}", keepalive_script());
        hex::encode(&Sha256::digest(text.as_bytes())[..8])
    }
}

/// Commands in per-session containers.
pub struct DockerTransport {
    config: DockerConfig,
    config_digest: String,
    exe: PathBuf,
    client: tokio::sync::OnceCell<Docker>,
    /// Containers this engine saw running (checked again when an exec fails).
    running: Mutex<HashSet<String>>,
    swept: tokio::sync::OnceCell<()>,
    /// The daemon was found to know [`DockerConfig::runtime`] (asked once, before the first
    /// container is made).
    runtime_known: tokio::sync::OnceCell<()>,
    /// Containers of forked sessions (name → the snapshot image they are made from), until
    /// they are made.
    from_snapshot: Mutex<std::collections::HashMap<String, String>>,
}

/// What `paddock __docker-attach` runs.
#[derive(Debug, Serialize, Deserialize)]
struct AttachSpec {
    socket: String,
    container: String,
    argv: Vec<String>,
    tty: bool,
}

fn status_of(err: &DockerError) -> Option<u16> {
    match err {
        DockerError::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

/// Removes a container whether it runs or not.
async fn force_remove(docker: &Docker, container: &str) -> std::result::Result<(), DockerError> {
    let options = RemoveContainerOptions {
        force: true,
        ..Default::default()
    };
    docker.remove_container(container, Some(options)).await
}

/// The containers that carry every one of `labels` (`key=value`); stopped ones too when `all`.
async fn labelled_containers(
    docker: &Docker,
    labels: Vec<String>,
    all: bool,
) -> std::result::Result<Vec<ContainerSummary>, DockerError> {
    let options = ListContainersOptions {
        all,
        filters: Some(HashMap::from([("label".to_owned(), labels)])),
        ..Default::default()
    };
    docker.list_containers(Some(options)).await
}

/// An exec of `argv` in a container, its output attached; on a terminal when `tty`, its input
/// attached when `stdin`.
/// A `docker exec` of `argv`. `split_stderr`: the daemon keeps the streams apart anyway; the
/// command script is told not to merge them.
fn exec_options(
    argv: &[String],
    tty: bool,
    stdin: bool,
    split_stderr: bool,
) -> CreateExecOptions<String> {
    let mut env = Vec::new();
    if tty {
        env.push("TERM=xterm-256color".to_owned());
    }
    if split_stderr {
        env.push(format!("{}=1", crate::remote::script::SPLIT_STDERR_VAR));
    }
    CreateExecOptions {
        attach_stdin: Some(stdin),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(tty),
        env: (!env.is_empty()).then_some(env),
        cmd: Some(argv.to_vec()),
        ..Default::default()
    }
}

async fn connect(socket: &str) -> std::result::Result<Docker, DockerError> {
    Docker::connect_with_unix(socket, CLIENT_TIMEOUT_S, bollard::API_DEFAULT_VERSION)?
        .negotiate_version()
        .await
}

impl DockerTransport {
    pub fn new(config: DockerConfig, exe: PathBuf) -> Self {
        Self {
            config_digest: config.digest(),
            config,
            exe,
            client: tokio::sync::OnceCell::new(),
            running: Mutex::new(HashSet::new()),
            swept: tokio::sync::OnceCell::new(),
            runtime_known: tokio::sync::OnceCell::new(),
            from_snapshot: Mutex::default(),
        }
    }

    fn unavailable(&self, reason: impl Into<String>) -> BackendError {
        BackendError::Unavailable {
            kind: "docker".into(),
            name: self.config.name.clone(),
            reason: reason.into(),
        }
    }

    fn lost(&self, err: DockerError) -> BackendError {
        self.unavailable(format!(
            "dockerd at {} failed or went away: {err}",
            self.config.socket
        ))
    }

    async fn client(&self) -> Result<&Docker> {
        self.client
            .get_or_try_init(|| async {
                connect(&self.config.socket).await.map_err(|e| {
                    self.unavailable(format!(
                        "cannot reach dockerd at {}: {e} (is it running? scripts/test-services.sh \
                         starts one for the tests)",
                        self.config.socket
                    ))
                })
            })
            .await
    }

    /// The container of `session`: `paddock-<backend>-<owner>-<session>`, where the owner is
    /// the start of the state directory's digest, so engines with different `PADDOCK_HOME`s
    /// (two users of one dockerd, say) using the same backend and session names never find,
    /// replace or sweep each other's containers.
    pub fn container_name(&self, session: &str) -> String {
        format!("{}{}", self.name_prefix(), base_session(session))
    }

    /// What every container name of this backend and state directory starts with (the owner
    /// is the start of `home`, the same digest of the state directory).
    fn name_prefix(&self) -> String {
        let home = &self.config.home;
        naming::name_prefix(&self.config.name, home.get(..OWNER_CHARS).unwrap_or(home))
    }

    fn labels(&self, session: &str) -> HashMap<String, String> {
        HashMap::from([
            ("paddock.managed".to_owned(), "true".to_owned()),
            ("paddock.backend".to_owned(), self.config.name.clone()),
            (
                "paddock.session".to_owned(),
                base_session(session).to_owned(),
            ),
            ("paddock.config".to_owned(), self.config_digest.clone()),
            ("paddock.home".to_owned(), self.config.home.clone()),
        ])
        .into_iter()
        .chain(
            session
                .starts_with(warm::WARM_MARK)
                .then(|| ("paddock.warm".to_owned(), self.config.name.clone())),
        )
        .collect()
    }

    fn create_body(&self, session: &str) -> ContainerCreateBody {
        let c = &self.config;
        let workdir = c.workdir.clone().unwrap_or_else(|| {
            if c.workspace.is_some() {
                "/workspace".into()
            } else {
                "/tmp".into()
            }
        });
        let mut binds: Vec<String> = c
            .workspace
            .as_ref()
            .map(|host| format!("{}:{workdir}:rw", host.display()))
            .into_iter()
            .collect();
        if let Some(agent) = &c.agent {
            binds.extend(agent.binds(&self.container_name(session)));
        }
        let binds = (!binds.is_empty()).then_some(binds);
        let host_config = HostConfig {
            cap_drop: Some(vec!["ALL".into()]),
            cap_add: Some(c.capabilities.clone()),
            security_opt: Some(vec!["no-new-privileges".into()]),
            pids_limit: Some(c.pids_limit),
            memory: c.memory_mb.map(|mb| (mb * 1024 * 1024) as i64),
            nano_cpus: c.cpus.map(|cpus| (cpus * 1e9) as i64),
            network_mode: Some(c.network.clone()),
            readonly_rootfs: Some(c.read_only),
            tmpfs: Some(HashMap::from([(
                "/tmp".to_owned(),
                // `exec`: Docker mounts a tmpfs noexec unless told; agents run what they build in /tmp.
                format!("rw,exec,nosuid,nodev,size={}m", c.tmp_size_mb),
            )])),
            binds,
            // PID 1 ends when the session has been idle too long: nothing of it is left then.
            auto_remove: Some(true),
            runtime: c.runtime.clone(),
            ..Default::default()
        };
        let image = self
            .from_snapshot
            .lock()
            .ok()
            .and_then(|from| from.get(&self.container_name(session)).cloned())
            .unwrap_or_else(|| c.image.clone());
        ContainerCreateBody {
            image: Some(image),
            cmd: Some(vec!["bash".into(), "-c".into(), keepalive_script()]),
            labels: Some(self.labels(session)),
            working_dir: Some(workdir),
            env: Some(c.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
            network_disabled: Some(c.network == "none"),
            host_config: Some(host_config),
            ..Default::default()
        }
    }

    /// The labels of every container of this backend in this state directory.
    fn managed_labels(&self) -> Vec<String> {
        vec![
            "paddock.managed=true".to_owned(),
            format!("paddock.home={}", self.config.home),
            format!("paddock.backend={}", self.config.name),
        ]
    }

    /// Removes this backend's containers that stopped or were made with other settings. A
    /// container just created by another engine (state `created`) is left alone.
    async fn sweep(&self, docker: &Docker) {
        let Ok(list) = labelled_containers(docker, self.managed_labels(), true).await else {
            return;
        };
        for container in list {
            let state = container
                .state
                .as_ref()
                .map(|s| s.as_ref().to_owned())
                .unwrap_or_default();
            let ended = state == "exited" || state == "dead";
            let current = container
                .labels
                .as_ref()
                .and_then(|l| l.get("paddock.config"))
                .is_some_and(|d| *d == self.config_digest);
            if !ended && current {
                continue;
            }
            if let Some(id) = container.id {
                tracing::info!(backend = %self.config.name, container = %id, "removing a stale container");
                let _ = force_remove(docker, &id).await;
            }
        }
    }

    /// Fails unless dockerd knows the policy's `runtime`: a daemon given a runtime it does not
    /// know refuses the container anyway, but in words that name neither the policy key nor
    /// the fix. Asked once per transport; nothing to ask without the key.
    async fn check_runtime(&self, docker: &Docker) -> Result<()> {
        let Some(runtime) = &self.config.runtime else {
            return Ok(());
        };
        self.runtime_known
            .get_or_try_init(|| async {
                let info = docker.info().await.map_err(|e| self.lost(e))?;
                let known = info.runtimes.unwrap_or_default();
                if known.contains_key(runtime) {
                    return Ok(());
                }
                let mut names: Vec<&str> = known.keys().map(String::as_str).collect();
                names.sort_unstable();
                Err(self.unavailable(format!(
                    "`runtime = \"{runtime}\"`: dockerd at {} has no runtime of that name (it \
                     knows {}); register it in the daemon's daemon.json (`\"runtimes\": \
                     {{\"{runtime}\": {{\"path\": \"/usr/bin/{runtime}\"}}}}`) and reload dockerd \
                     (SIGHUP) or restart it; Paddock does not fall back to the default runtime",
                    self.config.socket,
                    if names.is_empty() {
                        "none".to_owned()
                    } else {
                        names.join(", ")
                    }
                )))
            })
            .await
            .map(|_| ())
    }

    /// Makes sure the session's container runs; answers its name.
    async fn ensure_container(&self, session: &str) -> Result<String> {
        let name = self.container_name(session);
        if self.running.lock().is_ok_and(|r| r.contains(&name)) {
            return Ok(name);
        }
        let docker = self.client().await?;
        self.swept.get_or_init(|| self.sweep(docker)).await;
        match docker
            .inspect_container(&name, None::<InspectContainerOptions>)
            .await
        {
            Ok(info) => {
                let current = info
                    .config
                    .as_ref()
                    .and_then(|c| c.labels.as_ref())
                    .and_then(|l| l.get("paddock.config"))
                    .is_some_and(|d| *d == self.config_digest);
                let running = info.state.as_ref().and_then(|s| s.running).unwrap_or(false);
                if !current {
                    force_remove(docker, &name)
                        .await
                        .map_err(|e| self.lost(e))?;
                    self.create(docker, session, &name).await?;
                } else if !running {
                    self.start(docker, &name).await?;
                }
            }
            Err(e) if status_of(&e) == Some(404) => self.create(docker, session, &name).await?,
            Err(e) => return Err(self.lost(e)),
        }
        if let Ok(mut running) = self.running.lock() {
            running.insert(name.clone());
        }
        Ok(name)
    }

    async fn create(&self, docker: &Docker, session: &str, name: &str) -> Result<()> {
        self.check_runtime(docker).await?;
        if let Some(agent) = &self.config.agent {
            // The bind source must exist before the container does.
            prepare_agent_dir(
                &agent_dir(&agent.runtime_dir, name),
                "docker",
                &self.config.name,
            )?;
        }
        let options = CreateContainerOptions {
            name: Some(name.to_owned()),
            ..Default::default()
        };
        match docker
            .create_container(Some(options), self.create_body(session))
            .await
        {
            Ok(_) => {}
            // Another engine, or another call of this one, is creating it: docker reserves the
            // name before the container exists, and until it does a start by name is a 404.
            Err(e) if status_of(&e) == Some(409) => self.wait_until_created(docker, name).await?,
            // A request the daemon refuses (a runtime unregistered since it was checked, a
            // setting this daemon does not support): its words, not "went away".
            Err(e) if status_of(&e) == Some(400) => {
                return Err(
                    self.unavailable(format!("dockerd refused to create container {name}: {e}"))
                );
            }
            Err(e) if status_of(&e) == Some(404) => {
                return Err(self.unavailable(format!(
                    "the image {} is not on this docker host (no registry is pulled from: load or \
                     build it first): {e}",
                    self.config.image
                )));
            }
            Err(e) => return Err(self.lost(e)),
        }
        if let Some(agent) = &self.config.agent {
            // Best effort: without it the container counts as current.
            let made_with = made_with_path(&agent.runtime_dir, name);
            if let Err(err) = std::fs::write(&made_with, &self.config_digest) {
                tracing::warn!(path = %made_with.display(), %err, "the container's settings digest was not recorded");
            }
        }
        self.start(docker, name).await
    }

    /// Waits (up to 5 s) for a container whose name another create reserved to exist.
    async fn wait_until_created(&self, docker: &Docker, name: &str) -> Result<()> {
        for _ in 0..50 {
            match docker
                .inspect_container(name, None::<InspectContainerOptions>)
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) if status_of(&e) == Some(404) => {
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                Err(e) => return Err(self.lost(e)),
            }
        }
        Err(self.unavailable(format!(
            "container {name} was being created by another call and did not appear within 5 s"
        )))
    }

    async fn start(&self, docker: &Docker, name: &str) -> Result<()> {
        match docker
            .start_container(name, None::<StartContainerOptions>)
            .await
        {
            Ok(()) => Ok(()),
            Err(e) if status_of(&e) == Some(304) => Ok(()),
            Err(e) => Err(self.unavailable(match &self.config.runtime {
                // The runtime's own failure (gVisor refusing this kernel, say) comes back
                // through dockerd: say which runtime, and how to try it outside Paddock.
                Some(runtime) => format!(
                    "starting container {name} with runtime `{runtime}` failed: {e} (check \
                     that the runtime works on this host: `docker run --rm --runtime {runtime} \
                     {} true`)",
                    self.config.image
                ),
                None => format!("starting container {name} failed: {e}"),
            })),
        }
    }

    fn forget(&self, name: &str) {
        if let Ok(mut running) = self.running.lock() {
            running.remove(name);
        }
    }

    async fn exec_once(
        &self,
        name: &str,
        run: &TargetRun,
        sink: &OutputSink,
    ) -> std::result::Result<i32, DockerError> {
        let docker = self.client.get().ok_or_else(|| DockerError::IOError {
            err: std::io::Error::other("not connected"),
        })?;
        let exec = docker
            .create_exec(
                name,
                exec_options(
                    &run.argv,
                    run.pty,
                    run.stdin.is_some(),
                    sink.splits() && !run.pty,
                ),
            )
            .await?;
        let started = docker
            .start_exec(
                &exec.id,
                Some(StartExecOptions {
                    detach: false,
                    tty: run.pty,
                    output_capacity: Some(1024 * 1024),
                }),
            )
            .await?;
        if let StartExecResults::Attached {
            mut output,
            mut input,
        } = started
        {
            if let Some(data) = run.stdin.clone() {
                tokio::spawn(async move {
                    let _ = input.write_all(&data).await;
                    let _ = input.shutdown().await;
                });
            }
            while let Some(item) = output.next().await {
                match item? {
                    bollard::container::LogOutput::StdErr { message } => {
                        sink.push_from(crate::stream::OutputStream::Stderr, &message);
                    }
                    other => sink.push(&other.into_bytes()),
                }
            }
        }
        let inspected = docker.inspect_exec(&exec.id).await?;
        Ok(inspected.exit_code.map_or(-1, |c| c as i32))
    }
}

impl DockerTransport {
    /// Containers of this backend whose session is not live, made more than a minute ago (a
    /// session's record is written before its container, but another engine may be between
    /// the two).
    async fn remove_orphans(&self, live: &[String]) -> Result<usize> {
        let docker = self.client().await?;
        let list = labelled_containers(docker, self.managed_labels(), true)
            .await
            .map_err(|e| self.lost(e))?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let mut removed = 0;
        let prefix = self.name_prefix();
        for container in list {
            let young = container.created.is_some_and(|c| now - c < 60);
            let Some(name) = container
                .names
                .as_ref()
                .and_then(|n| n.first())
                .map(|n| n.trim_start_matches('/').to_owned())
            else {
                continue;
            };
            // The name tells the session (a claimed warm container keeps its first labels).
            match name.strip_prefix(&prefix) {
                Some(session) => {
                    // Warm containers belong to the pool while it is wanted (its filler trims
                    // it).
                    let pooled = session.starts_with(warm::WARM_MARK) && self.config.warm > 0;
                    if young || pooled || live.iter().any(|s| s == session) {
                        continue;
                    }
                }
                // Labelled as this state directory's but named without its owner: made by a
                // Paddock before names carried one, and nothing looks it up by that name now.
                None if young => continue,
                None => {}
            }
            let Some(id) = container.id else { continue };
            tracing::info!(backend = %self.config.name, container = %id, %name, "removing a container no session owns");
            if force_remove(docker, &id).await.is_ok() {
                removed += 1;
                if let Some(agent) = &self.config.agent {
                    let _ = std::fs::remove_file(made_with_path(&agent.runtime_dir, &name));
                    let _ = std::fs::remove_dir_all(agent_dir(&agent.runtime_dir, &name));
                }
                self.forget(&name);
            }
        }
        Ok(removed)
    }
}

pub use warm::{WARM_SUBCOMMAND, warm_main};

impl AgentHost for DockerTransport {
    fn egress(&self) -> bool {
        self.config.egress
    }

    fn claim_warm<'a>(&'a self, session: &'a str) -> BackendFuture<'a, bool> {
        Box::pin(self.claim_warm(session))
    }

    fn made_with_current_settings(&self, session: &str) -> bool {
        let Some(agent) = &self.config.agent else {
            return true;
        };
        match std::fs::read_to_string(made_with_path(
            &agent.runtime_dir,
            &self.container_name(session),
        )) {
            Ok(digest) => digest.trim() == self.config_digest,
            // None recorded (no container yet, or one made before digests were kept): the
            // container's own label is compared when it is next made sure of.
            Err(_) => true,
        }
    }

    fn agent_socket(&self, session: &str) -> Result<PathBuf> {
        placed_agent_socket(
            self,
            self.config.agent.as_ref(),
            &self.container_name(session),
        )
    }
}

impl Transport for DockerTransport {
    fn kind(&self) -> &'static str {
        "docker"
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
        match &self.config.workdir {
            Some(dir) => dir,
            None if self.config.workspace.is_some() => "/workspace",
            None => "/tmp",
        }
    }

    fn env(&self) -> &BTreeMap<String, String> {
        &self.config.env
    }

    fn ensure<'a>(&'a self, session: &'a str) -> BackendFuture<'a, ()> {
        Box::pin(async move { self.ensure_container(session).await.map(|_| ()) })
    }

    fn run<'a>(&'a self, session: &'a str, run: TargetRun, sink: OutputSink) -> ExitFuture<'a> {
        Box::pin(async move {
            let mut attempt = 0;
            loop {
                let name = self.ensure_container(session).await?;
                match self.exec_once(&name, &run, &sink).await {
                    Ok(status) => return Ok(status),
                    // The container vanished (404) or stopped (409) since we saw it: bring it
                    // back once.
                    Err(e) if attempt == 0 && matches!(status_of(&e), Some(404 | 409)) => {
                        tracing::info!(container = %name, error = %e, "the session's container is gone; recreating it");
                        self.forget(&name);
                        attempt += 1;
                    }
                    Err(e) => {
                        self.forget(&name);
                        return Err(self.lost(e));
                    }
                }
            }
        })
    }

    fn attach_argv(&self, session: &str, argv: &[String], pty: bool) -> Result<ClientArgv> {
        // Under a runtime of the policy's choosing, the terminal is opened inside by the
        // agent's `terminal` (as in an apptainer instance): gVisor's exec console is the
        // host's terminal imported into the sandbox, a terminal with no /dev/pts/N there, so
        // `tty` answers "not a tty". runc's console is a node of the container's devpts.
        let (argv, tty) = match (&self.config.runtime, &self.config.agent) {
            (Some(_), Some(_)) if pty => {
                let mut inside = vec![
                    crate::agent::AGENT_PATH_INSIDE.to_owned(),
                    "terminal".to_owned(),
                    "--".to_owned(),
                ];
                inside.extend(argv.iter().cloned());
                (inside, false)
            }
            _ => (argv.to_vec(), pty),
        };
        let spec = AttachSpec {
            socket: self.config.socket.clone(),
            container: self.container_name(session),
            argv,
            tty,
        };
        let json =
            serde_json::to_string(&spec).map_err(|e| BackendError::Io(std::io::Error::other(e)))?;
        Ok((
            vec![
                self.exe.display().to_string(),
                ATTACH_SUBCOMMAND.to_owned(),
                json,
            ],
            false,
        ))
    }

    fn health(&self) -> BackendFuture<'_, ()> {
        Box::pin(async move {
            let docker = self.client().await?;
            docker.ping().await.map_err(|e| self.lost(e))?;
            docker
                .inspect_image(&self.config.image)
                .await
                .map_err(|e| self.unavailable(format!("image {}: {e}", self.config.image)))?;
            self.check_runtime(docker).await
        })
    }

    fn sweep_orphans<'a>(&'a self, live_sessions: &'a [String]) -> BackendFuture<'a, usize> {
        Box::pin(self.remove_orphans(live_sessions))
    }

    fn keep_alive(&self, session: &str, until: std::time::SystemTime) {
        let Some(agent) = &self.config.agent else {
            return;
        };
        // Written before the container exists too (the call that makes it marks the session
        // active first): its PID 1 then finds a time from the start. A claimed warm container's
        // directory is a link to the one bound into it, so the time reaches it.
        let dir = agent_dir(&agent.runtime_dir, &self.container_name(session));
        let written = prepare_agent_dir(&dir, "docker", &self.config.name)
            .and_then(|_| crate::lifetime::write_expiry(&dir, until).map_err(BackendError::from));
        if let Err(err) = written {
            tracing::warn!(backend = %self.config.name, session, %err, "the container's expiry was not written");
        }
    }

    fn prewarm(&self) {
        if self.config.warm > 0 && self.config.agent.is_some() {
            // The detached filler counts what is ready and makes only what is missing.
            self.spawn_refill();
        }
    }

    fn commit_session<'a>(
        &'a self,
        session: &'a str,
        tag: &'a str,
    ) -> Option<BackendFuture<'a, (String, u64)>> {
        Some(Box::pin(self.commit(session, tag)))
    }

    fn start_from_image<'a>(
        &'a self,
        session: &'a str,
        image: &'a str,
    ) -> Option<BackendFuture<'a, ()>> {
        Some(Box::pin(self.start_from(session, image)))
    }

    fn remove_image<'a>(&'a self, image: &'a str) -> BackendFuture<'a, ()> {
        Box::pin(self.remove_snapshot_image(image))
    }

    fn pause_session<'a>(&'a self, session: &'a str) -> Option<BackendFuture<'a, bool>> {
        Some(Box::pin(async move {
            crate::shell::check_session(session)?;
            let docker = self.client().await?;
            match docker.pause_container(&self.container_name(session)).await {
                Ok(()) => Ok(true),
                Err(e) if status_of(&e) == Some(404) => Ok(false),
                // A second pause (`ID.python` shares the container): dockerd says so in words.
                Err(e) if e.to_string().contains("already paused") => Ok(true),
                Err(e) => Err(self.lost(e)),
            }
        }))
    }

    fn resume_session<'a>(&'a self, session: &'a str) -> BackendFuture<'a, ()> {
        Box::pin(async move {
            crate::shell::check_session(session)?;
            let docker = self.client().await?;
            match docker
                .unpause_container(&self.container_name(session))
                .await
            {
                Ok(()) => Ok(()),
                // Gone, or not paused (thawed already, through `ID.python`): nothing to thaw.
                Err(e) if status_of(&e) == Some(404) || e.to_string().contains("not paused") => {
                    Ok(())
                }
                Err(e) => Err(self.lost(e)),
            }
        })
    }

    fn close_session<'a>(&'a self, session: &'a str) -> BackendFuture<'a, ()> {
        Box::pin(async move {
            crate::shell::check_session(session)?;
            let docker = self.client().await?;
            let name = self.container_name(session);
            self.forget(&name);
            if let Some(agent) = &self.config.agent {
                let _ = std::fs::remove_file(made_with_path(&agent.runtime_dir, &name));
            }
            // A claimed warm container's agent directory is where the session's links to.
            if let Some(agent) = &self.config.agent
                && let Ok(target) = std::fs::read_link(agent_dir(&agent.runtime_dir, &name))
            {
                let _ = std::fs::remove_dir_all(target);
            }
            match force_remove(docker, &name).await {
                Ok(()) => Ok(()),
                Err(e) if status_of(&e) == Some(404) => Ok(()),
                Err(e) => Err(self.lost(e)),
            }
        })
    }
}

/// `paddock __docker-attach JSON`: runs one exec with this process's stdin, stdout and exit
/// status attached (what a background supervisor runs for a docker backend).
pub fn attach_main(spec_json: &str) -> ExitCode {
    let result = (|| -> std::result::Result<i32, String> {
        let spec: AttachSpec =
            serde_json::from_str(spec_json).map_err(|e| format!("bad attach spec: {e}"))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        runtime.block_on(attach(spec))
    })();
    match result {
        Ok(code) => ExitCode::from(u8::try_from(code.clamp(0, 255)).unwrap_or(255)),
        Err(err) => {
            tracing::error!("docker attach: {err}");
            ExitCode::from(255)
        }
    }
}

async fn attach(spec: AttachSpec) -> std::result::Result<i32, String> {
    let docker = connect(&spec.socket)
        .await
        .map_err(|e| format!("cannot reach dockerd at {}: {e}", spec.socket))?;
    let exec = docker
        .create_exec(
            &spec.container,
            exec_options(&spec.argv, spec.tty, true, false),
        )
        .await
        .map_err(|e| format!("exec in {}: {e}", spec.container))?;
    let started = docker
        .start_exec(
            &exec.id,
            Some(StartExecOptions {
                detach: false,
                tty: spec.tty,
                output_capacity: Some(1024 * 1024),
            }),
        )
        .await
        .map_err(|e| e.to_string())?;
    if let StartExecResults::Attached {
        mut output,
        mut input,
    } = started
    {
        // stdin: a blocking reader thread feeds the exec; EOF half-closes it.
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(16);
        std::thread::spawn(move || {
            use std::io::Read;
            let mut stdin = std::io::stdin();
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                match stdin.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        if tx.blocking_send(buf[..n].to_vec()).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        tokio::spawn(async move {
            while let Some(chunk) = rx.recv().await {
                if input.write_all(&chunk).await.is_err() {
                    return;
                }
                let _ = input.flush().await;
            }
            let _ = input.shutdown().await;
        });
        // The supervisor reads our stdout and stderr through pipes: blocking writes are fine
        // here. The daemon keeps the exec's streams apart; so do we.
        let mut stdout = std::io::stdout();
        let mut stderr = std::io::stderr();
        while let Some(item) = output.next().await {
            let item = item.map_err(|e| format!("dockerd went away: {e}"))?;
            let to: &mut dyn std::io::Write = match item {
                bollard::container::LogOutput::StdErr { .. } => &mut stderr,
                _ => &mut stdout,
            };
            let _ = to.write_all(&item.into_bytes());
            let _ = to.flush();
        }
    }
    let inspected = docker
        .inspect_exec(&exec.id)
        .await
        .map_err(|e| e.to_string())?;
    Ok(inspected.exit_code.map_or(255, |c| c as i32))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(runtime: Option<&str>) -> DockerConfig {
        DockerConfig {
            name: "box".into(),
            image: "img".into(),
            network: "none".into(),
            egress: false,
            memory_mb: None,
            cpus: None,
            pids_limit: 512,
            read_only: false,
            tmp_size_mb: 512,
            workspace: None,
            workdir: None,
            env: BTreeMap::new(),
            socket: "/var/run/docker.sock".into(),
            agent: None,
            warm: 0,
            home: "0011223344556677".into(),
            capabilities: Vec::new(),
            runtime: runtime.map(str::to_owned),
        }
    }

    #[test]
    fn runtime_names_are_what_dockerd_registers() {
        for good in [
            "runsc",
            "kata-runtime",
            "io.containerd.runsc.v1",
            "runsc_ptrace",
        ] {
            assert!(is_runtime_name(good), "{good}");
        }
        for bad in [
            "",
            "run sc",
            "/usr/bin/runsc",
            "runsc;true",
            &"r".repeat(129),
        ] {
            assert!(!is_runtime_name(bad), "{bad}");
        }
    }

    /// The runtime is part of what a container was made with: changing it replaces the
    /// session's container, and a policy without the key keeps the digest it had before the
    /// key existed.
    #[test]
    fn the_runtime_is_part_of_the_settings_digest() {
        let plain = config(None);
        let text = serde_json::to_string(&plain).unwrap();
        assert!(!text.contains("runtime"), "{text}");
        let runsc = config(Some("runsc"));
        assert_ne!(plain.digest(), runsc.digest());
        assert_ne!(runsc.digest(), config(Some("kata-runtime")).digest());
        assert_eq!(runsc.digest(), config(Some("runsc")).digest());
    }

    #[test]
    fn the_container_is_made_with_the_policys_runtime() {
        for runtime in [None, Some("runsc")] {
            let transport = DockerTransport::new(config(runtime), PathBuf::from("/bin/paddock"));
            let body = transport.create_body("s1");
            let host = body.host_config.unwrap();
            pretty_assertions::assert_eq!(host.runtime.as_deref(), runtime);
        }
    }
}
