//! `kind = "apptainer"` (or `"singularity"`): its policy keys, their checks and defaults, and
//! its constructor. A slurm backend with `image` shares the image keys ([`ImageKeys`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{ApptainerConfig, ApptainerTransport};
use crate::Environment;
use crate::agent::{AGENT_DIR_INSIDE, AgentPlacement};
use crate::section::{
    BackendSection, BuildContext, PROXY_NEEDS_AGENT, SectionError, Spanned, at_least_one, is_proxy,
    network_of, one_of, positive_cpus, text, value,
};

/// `[backends.NAME] kind = "apptainer"`: one Apptainer/Singularity instance per session.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ApptainerSection {
    /// A SIF file or a sandbox directory (required).
    pub image: Option<Spanned<String>>,
    /// `none` (default: loopback only), `host` or `proxy`.
    pub network: Option<Spanned<String>>,
    /// Bind mounts `src:dst[:ro]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub binds: Vec<Spanned<String>>,
    /// Where commands start.
    pub workdir: Option<Spanned<String>>,
    pub memory_mb: Option<Spanned<u64>>,
    pub cpus: Option<Spanned<f64>>,
    /// Processes and threads of the instance (`--pids-limit`).
    pub max_processes: Option<Spanned<u64>>,
    /// The apptainer or singularity program (default: found on PATH).
    pub binary: Option<Spanned<String>>,
    /// A writable tmpfs over the image (default true), or an overlay image or directory.
    pub writable_tmpfs: Option<Spanned<bool>>,
    pub overlay: Option<Spanned<String>>,
    /// Commands go through the in-instance agent (default true).
    pub agent: Option<Spanned<bool>>,
    /// Refused with its reason: Apptainer has no flag for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tmp_size_mb: Option<Spanned<u64>>,
    /// Environment variables set for every command.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

/// The keys of an instance's image, shared with a slurm backend that has `image`.
pub(crate) struct ImageKeys<'a> {
    pub image: &'a str,
    pub network: &'a Option<Spanned<String>>,
    pub binds: &'a [Spanned<String>],
    pub binary: &'a Option<Spanned<String>>,
    pub writable_tmpfs: &'a Option<Spanned<bool>>,
    pub overlay: &'a Option<Spanned<String>>,
    pub workdir: &'a Option<Spanned<String>>,
    pub env: &'a BTreeMap<String, String>,
}

impl ImageKeys<'_> {
    /// The instance's settings, without ceilings (the caller adds its own).
    pub(crate) fn instance(
        &self,
        ctx: &BuildContext<'_>,
        agent: Option<AgentPlacement>,
    ) -> ApptainerConfig {
        ApptainerConfig {
            name: ctx.name.to_owned(),
            image: ctx.host_path(self.image).display().to_string(),
            binary: self.binary.as_ref().map(|v| ctx.host_path(v.get_ref())),
            binds: self.binds.iter().map(|b| b.get_ref().clone()).collect(),
            network: network_of(self.network),
            egress: is_proxy(self.network),
            writable_tmpfs: value(self.writable_tmpfs).unwrap_or(true),
            overlay: self
                .overlay
                .as_ref()
                .map(|v| ctx.host_path(v.get_ref()).display().to_string()),
            memory_mb: None,
            cpus: None,
            max_processes: None,
            workdir: text(self.workdir),
            env: ctx.command_env(self.env, Some(AGENT_DIR_INSIDE)),
            agent,
            owner: ctx.owner(),
        }
    }
}

impl BackendSection for ApptainerSection {
    const KIND: &'static str = "apptainer";
    const ALIASES: &'static [&'static str] = &["singularity"];

    fn check(&self) -> Result<(), SectionError> {
        if let Some(tmp) = &self.tmp_size_mb {
            return Err(SectionError::at(
                tmp,
                "tmp_size_mb",
                "Apptainer has no flag for it: an instance's /tmp is a tmpfs without a size, \
                 bounded only by the instance's memory (`memory_mb`, whose limit OOM-kills \
                 inside the instance when /tmp fills it); remove it, and set `memory_mb`",
            ));
        }
        at_least_one(&[
            ("max_processes", &self.max_processes),
            ("memory_mb", &self.memory_mb),
        ])?;
        positive_cpus(&self.cpus)?;
        if self.image.is_none() {
            return Err(SectionError::missing(Self::KIND, "image"));
        }
        one_of(&self.network, "network", &["none", "host", "proxy"])
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
        let keys = ImageKeys {
            image: self.image.as_ref().map_or("", |i| i.get_ref()),
            network: &self.network,
            binds: &self.binds,
            binary: &self.binary,
            writable_tmpfs: &self.writable_tmpfs,
            overlay: &self.overlay,
            workdir: &self.workdir,
            env: &self.env,
        };
        let transport = ApptainerTransport::new(ApptainerConfig {
            memory_mb: value(&self.memory_mb),
            cpus: value(&self.cpus),
            max_processes: value(&self.max_processes),
            ..keys.instance(ctx, ctx.placement(&agent))
        });
        ctx.remote(transport, agent)
    }
}
