//! `kind = "docker"`: its policy keys, their checks and defaults, and its constructor.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{DockerConfig, DockerTransport};
use crate::Environment;
use crate::agent::AGENT_DIR_INSIDE;
use crate::section::{
    BackendSection, BuildContext, PROXY_NEEDS_AGENT, SectionError, Spanned, at_least_one, is_proxy,
    network_of, positive_cpus, text, value,
};

/// `[backends.NAME] kind = "docker"`: one container per session.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DockerSection {
    /// The image (required).
    pub image: Option<Spanned<String>>,
    /// `none` (default), `proxy` or the name of a docker network.
    pub network: Option<Spanned<String>>,
    pub memory_mb: Option<Spanned<u64>>,
    pub cpus: Option<Spanned<f64>>,
    /// A host directory mounted as the container's workspace.
    pub workspace: Option<Spanned<String>>,
    /// Where commands start.
    pub workdir: Option<Spanned<String>>,
    /// The older name of `max_processes`.
    pub pids_limit: Option<Spanned<u64>>,
    /// Processes and threads of the container (`--pids-limit`, default 512).
    pub max_processes: Option<Spanned<u64>>,
    /// A read-only root filesystem (/tmp stays writable).
    pub read_only: Option<Spanned<bool>>,
    /// Size of the /tmp tmpfs (default 512).
    pub tmp_size_mb: Option<Spanned<u64>>,
    /// The daemon socket (default: `DOCKER_HOST` or /var/run/docker.sock).
    pub socket: Option<Spanned<String>>,
    /// Commands go through the in-container agent (default true); false: one `docker exec`
    /// per command.
    pub agent: Option<Spanned<bool>>,
    /// Containers kept ready, agent running, for new sessions (default 0).
    pub warm: Option<Spanned<u64>>,
    /// Capabilities the container goes without, of those its root keeps by default
    /// ([`super::SHELL_CAPABILITIES`]): `["DAC_OVERRIDE"]` makes root respect a file's
    /// permission bits, as an ordinary user does.
    pub drop_capabilities: Option<Spanned<Vec<String>>>,
    /// The OCI runtime dockerd runs the container with (`runtime = "runsc"`: gVisor); the
    /// daemon's default (runc) when unset. It must be registered with the daemon
    /// (`runtimes` in its daemon.json): one it does not know is an error, never runc instead.
    pub runtime: Option<Spanned<String>>,
    /// Environment variables set for every command.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

impl BackendSection for DockerSection {
    const KIND: &'static str = "docker";

    fn check(&self) -> Result<(), SectionError> {
        at_least_one(&[
            ("max_processes", &self.max_processes),
            ("memory_mb", &self.memory_mb),
            ("pids_limit", &self.pids_limit),
            ("tmp_size_mb", &self.tmp_size_mb),
        ])?;
        positive_cpus(&self.cpus)?;
        if let (Some(_), Some(max)) = (&self.pids_limit, &self.max_processes) {
            return Err(SectionError::at(
                max,
                "max_processes",
                "`pids_limit` is the older name of `max_processes`: keep one of them",
            ));
        }
        if self.image.is_none() {
            return Err(SectionError::missing(Self::KIND, "image"));
        }
        if let Some(drop) = &self.drop_capabilities
            && let Some(unknown) = drop
                .get_ref()
                .iter()
                .find(|c| !super::SHELL_CAPABILITIES.contains(&c.as_str()))
        {
            return Err(SectionError::at(
                drop,
                "drop_capabilities",
                format!(
                    "`{unknown}` is not one of the capabilities a container keeps ({}); the rest \
                     are dropped already",
                    super::SHELL_CAPABILITIES.join(", ")
                ),
            ));
        }
        if let Some(runtime) = &self.runtime
            && !super::is_runtime_name(runtime.get_ref())
        {
            return Err(SectionError::at(
                runtime,
                "runtime",
                format!(
                    "`{}` is not a runtime name: name one registered with dockerd (its \
                     daemon.json `runtimes`), such as \"runsc\" for gVisor",
                    runtime.get_ref()
                ),
            ));
        }
        if let (Some(warm), Some(agent)) = (&self.warm, &self.agent)
            && *warm.get_ref() > 0
            && !*agent.get_ref()
        {
            return Err(SectionError::at(
                warm,
                "warm",
                "a warm pool keeps environments with their agent running: it needs `agent = \
                 true` (the default)",
            ));
        }
        Ok(())
    }

    fn network(&self) -> Option<&Spanned<String>> {
        self.network.as_ref()
    }

    fn proxy_refusal(&self) -> Option<&'static str> {
        self.agent
            .as_ref()
            .is_some_and(|a| !*a.get_ref())
            .then_some(PROXY_NEEDS_AGENT)
    }

    fn env(&self) -> &BTreeMap<String, String> {
        &self.env
    }

    fn build(&self, ctx: &BuildContext<'_>) -> Arc<dyn Environment> {
        let agent = ctx.agent(&self.agent);
        let transport = DockerTransport::new(
            DockerConfig {
                name: ctx.name.to_owned(),
                image: text(&self.image).unwrap_or_default(),
                network: network_of(&self.network),
                egress: is_proxy(&self.network),
                memory_mb: value(&self.memory_mb),
                cpus: value(&self.cpus),
                // `max_processes`, or its older name.
                pids_limit: self
                    .max_processes
                    .as_ref()
                    .or(self.pids_limit.as_ref())
                    .map_or(512, |v| i64::try_from(*v.get_ref()).unwrap_or(i64::MAX)),
                read_only: value(&self.read_only).unwrap_or(false),
                tmp_size_mb: value(&self.tmp_size_mb).unwrap_or(512),
                workspace: self.workspace.as_ref().map(|w| ctx.host_path(w.get_ref())),
                workdir: text(&self.workdir),
                env: ctx.command_env(&self.env, Some(AGENT_DIR_INSIDE)),
                socket: text(&self.socket).unwrap_or_else(DockerConfig::default_socket),
                agent: ctx.placement(&agent),
                home: DockerConfig::home_of(ctx.state_root),
                warm: value(&self.warm).map_or(0, |v| usize::try_from(v).unwrap_or(usize::MAX)),
                capabilities: super::SHELL_CAPABILITIES
                    .iter()
                    .filter(|c| {
                        !self
                            .drop_capabilities
                            .as_ref()
                            .is_some_and(|d| d.get_ref().iter().any(|x| x == *c))
                    })
                    .map(|c| (*c).to_owned())
                    .collect(),
                runtime: text(&self.runtime),
            },
            ctx.exe.to_path_buf(),
        );
        ctx.remote(transport, agent)
    }
}
