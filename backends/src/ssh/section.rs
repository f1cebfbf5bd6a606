//! `kind = "ssh"`: its policy keys, their checks and defaults, and its constructor.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{SshConfig, SshTransport};
use crate::Environment;
use crate::section::{BackendSection, BuildContext, SectionError, Spanned, one_of, text, value};

/// `[backends.NAME] kind = "ssh"`: commands on a host over OpenSSH.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SshSection {
    /// The host (required), user, port and key.
    pub host: Option<Spanned<String>>,
    pub user: Option<Spanned<String>>,
    pub port: Option<Spanned<u16>>,
    pub identity_file: Option<Spanned<String>>,
    /// A known_hosts file, and how unknown host keys are treated: `yes` (default),
    /// `accept-new` or `no`.
    pub known_hosts_file: Option<Spanned<String>>,
    pub host_key_checking: Option<Spanned<String>>,
    /// Default 10.
    pub connect_timeout_seconds: Option<Spanned<u64>>,
    /// Where sessions start; default the remote home.
    pub workdir: Option<Spanned<String>>,
    /// Commands go through the agent copied to the host (default true).
    pub agent: Option<Spanned<bool>>,
    /// Refused with its reason: an ssh host keeps its own network.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<Spanned<String>>,
    /// Environment variables set for every command.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

const OWN_NETWORK: &str = "an ssh host keeps its own network, which Paddock cannot take away \
     from its commands; use a docker, apptainer or sandboxed local backend for proxied commands";

impl BackendSection for SshSection {
    const KIND: &'static str = "ssh";

    fn check(&self) -> Result<(), SectionError> {
        if let Some(network) = &self.network {
            return Err(SectionError::at(
                network,
                "network",
                format!("does not apply to a ssh backend: {OWN_NETWORK}"),
            ));
        }
        if self.host.is_none() {
            return Err(SectionError::missing(Self::KIND, "host"));
        }
        one_of(
            &self.host_key_checking,
            "host_key_checking",
            &["yes", "accept-new", "no"],
        )
    }

    fn network(&self) -> Option<&Spanned<String>> {
        self.network.as_ref()
    }

    fn proxy_refusal(&self) -> Option<&'static str> {
        Some(OWN_NETWORK)
    }

    fn env(&self) -> &BTreeMap<String, String> {
        &self.env
    }

    fn build(&self, ctx: &BuildContext<'_>) -> Arc<dyn Environment> {
        let agent = ctx.agent(&self.agent);
        let path = |v: &Option<Spanned<String>>| v.as_ref().map(|v| ctx.host_path(v.get_ref()));
        let transport = SshTransport::new(
            SshConfig {
                name: ctx.name.to_owned(),
                host: text(&self.host).unwrap_or_default(),
                user: text(&self.user),
                port: value(&self.port),
                identity_file: path(&self.identity_file),
                known_hosts_file: path(&self.known_hosts_file),
                host_key_checking: text(&self.host_key_checking).unwrap_or_else(|| "yes".into()),
                connect_timeout_seconds: value(&self.connect_timeout_seconds).unwrap_or(10),
                workdir: text(&self.workdir),
                env: ctx.command_env(&self.env, None),
                program: PathBuf::from("ssh"),
                agent: ctx.placement(&agent),
            },
            ctx.state_root,
        );
        ctx.remote(transport, agent)
    }
}
