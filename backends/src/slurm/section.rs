//! `kind = "slurm"`: its policy keys, their checks and defaults, and its constructor.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{DEFAULT_QUEUE_TIMEOUT, RelayPath, SlurmConfig, SlurmTransport};
use crate::Environment;
use crate::apptainer::section::ImageKeys;
use crate::section::{
    BackendSection, BuildContext, PROXY_NEEDS_AGENT, SectionError, Spanned, at_least_one, one_of,
    text, value,
};

/// `[backends.NAME] kind = "slurm"`: one job per session, its agent in a holder step; with
/// `image`, commands in an Apptainer instance on the job's node (the apptainer keys apply).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SlurmSection {
    /// The job's partition.
    pub partition: Option<Spanned<String>>,
    /// `--time`: `MM`, `HH:MM:SS`, `D-HH:MM`, ...
    pub time_limit: Option<Spanned<String>>,
    /// CPUs per task: a whole number.
    pub cpus: Option<Spanned<f64>>,
    pub memory_mb: Option<Spanned<u64>>,
    /// Generic resources (`--gres`).
    pub gres: Option<Spanned<String>>,
    pub account: Option<Spanned<String>>,
    /// More `salloc` options, as given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_args: Vec<Spanned<String>>,
    /// How long a session's job may wait in the queue before it is cancelled and the command
    /// fails (default 300).
    pub queue_timeout_seconds: Option<Spanned<u64>>,
    /// The directory of `salloc`, `srun`, `scontrol`, `squeue`, `scancel`, `sinfo` (default:
    /// PATH).
    pub slurm_bin_dir: Option<Spanned<String>>,
    /// How the engine reaches the session's agent on the job's node: `"none"` (the default:
    /// through the file system, the engine on the node or sharing its `/tmp` and state
    /// directory), `"tcp"` (for an engine on a login node and jobs on other nodes: the holder
    /// step's standard input and output carry a per-session token, each connection goes to a
    /// listener of the node's agent) or `"srun"` (every byte through the holder step's standard
    /// input and output: no port on the node, slower).
    pub relay: Option<Spanned<String>>,
    /// Where commands start.
    pub workdir: Option<Spanned<String>>,
    /// Must stay on: the agent is the step that keeps the session's processes alive.
    pub agent: Option<Spanned<bool>>,
    /// Commands in Apptainer on the job's node: the image, and the apptainer keys below.
    pub image: Option<Spanned<String>>,
    pub network: Option<Spanned<String>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub binds: Vec<Spanned<String>>,
    pub binary: Option<Spanned<String>>,
    pub writable_tmpfs: Option<Spanned<bool>>,
    pub overlay: Option<Spanned<String>>,
    /// Environment variables set for every command.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

impl BackendSection for SlurmSection {
    const KIND: &'static str = "slurm";

    fn check(&self) -> Result<(), SectionError> {
        at_least_one(&[("memory_mb", &self.memory_mb)])?;
        // A session's processes live in the job only while a step holds them: the agent is
        // that step.
        if let Some(agent) = &self.agent
            && !*agent.get_ref()
        {
            return Err(SectionError::at(
                agent,
                "agent",
                "a slurm session runs in the job through its agent (the step that keeps the \
                 session's processes alive between commands): remove `agent = false`",
            ));
        }
        if let Some(cpus) = &self.cpus {
            let n = *cpus.get_ref();
            if !(n >= 1.0 && n.fract() == 0.0) {
                return Err(SectionError::at(
                    cpus,
                    "cpus",
                    format!("Slurm allocates whole CPUs: {n} is not a whole number ≥ 1"),
                ));
            }
        }
        if let Some(limit) = &self.time_limit
            && !limit
                .get_ref()
                .chars()
                .all(|c| c.is_ascii_digit() || c == ':' || c == '-')
        {
            return Err(SectionError::at(
                limit,
                "time_limit",
                format!(
                    "\"{}\" is not a Slurm time (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS)",
                    limit.get_ref()
                ),
            ));
        }
        one_of(&self.relay, "relay", &["none", "tcp", "srun"])?;
        at_least_one(&[("queue_timeout_seconds", &self.queue_timeout_seconds)])?;
        if self.image.is_none() {
            let apptainer_only = [
                ("network", self.network.as_ref().map(Spanned::span)),
                ("binds", self.binds.first().map(Spanned::span)),
                ("binary", self.binary.as_ref().map(Spanned::span)),
                (
                    "writable_tmpfs",
                    self.writable_tmpfs.as_ref().map(Spanned::span),
                ),
                ("overlay", self.overlay.as_ref().map(Spanned::span)),
            ];
            if let Some((key, Some(span))) = apptainer_only.into_iter().find(|(_, s)| s.is_some()) {
                return Err(SectionError::Invalid {
                    span: Some(span),
                    key,
                    message: "applies to a slurm backend with `image` (commands in Apptainer) \
                              only"
                        .to_owned(),
                });
            }
        }
        one_of(&self.network, "network", &["none", "host", "proxy"])
    }

    fn network(&self) -> Option<&Spanned<String>> {
        self.network.as_ref()
    }

    fn proxy_refusal(&self) -> Option<&'static str> {
        if self.image.is_none() {
            return Some(
                "a bare slurm job runs on the compute node's own network, which Paddock cannot \
                 take away; give the backend an `image` (commands in Apptainer) or use another \
                 backend",
            );
        }
        if self.relay.as_ref().is_some_and(|r| r.get_ref() != "none") {
            return Some(
                "the proxy listens on the engine's machine, and with a relay the job's node does \
                 not share its sockets (the relay does not carry proxied connections yet); leave \
                 the relay out or use network = \"none\"",
            );
        }
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
        let placement = ctx.placement(&agent);
        // With an image, commands run in an Apptainer instance on the allocated node, made with
        // the apptainer backend's options; the job bounds memory and CPUs.
        let apptainer = self.image.as_ref().map(|image| {
            ImageKeys {
                image: image.get_ref(),
                network: &self.network,
                binds: &self.binds,
                binary: &self.binary,
                writable_tmpfs: &self.writable_tmpfs,
                overlay: &self.overlay,
                workdir: &self.workdir,
                env: &self.env,
            }
            .instance(ctx, placement.clone())
        });
        let transport = SlurmTransport::new(SlurmConfig {
            name: ctx.name.to_owned(),
            partition: text(&self.partition),
            time_limit: text(&self.time_limit),
            // Checked to be a whole number when the policy loaded.
            cpus: value(&self.cpus).map(|n| n as u32),
            memory_mb: value(&self.memory_mb),
            gres: text(&self.gres),
            account: text(&self.account),
            extra_args: self
                .extra_args
                .iter()
                .map(|a| a.get_ref().clone())
                .collect(),
            queue_timeout: value(&self.queue_timeout_seconds)
                .map_or(DEFAULT_QUEUE_TIMEOUT, Duration::from_secs),
            bin_dir: self
                .slurm_bin_dir
                .as_ref()
                .map(|v| ctx.host_path(v.get_ref())),
            workdir: text(&self.workdir),
            env: ctx.command_env(&self.env, Some(crate::agent::AGENT_DIR_INSIDE)),
            apptainer,
            agent: placement,
            relay: match self.relay.as_ref().map(|r| r.get_ref().as_str()) {
                Some("tcp") => Some(RelayPath::Direct),
                Some("srun") => Some(RelayPath::Stream),
                _ => None,
            },
            home: std::env::var("HOME").unwrap_or_else(|_| "/tmp".into()),
            owner: ctx.owner(),
        });
        ctx.remote(transport, agent)
    }
}
