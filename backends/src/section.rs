//! What every backend kind provides for its policy section `[backends.NAME]`: its typed keys
//! (a struct each backend module owns), their checks, what `network = "proxy"` needs there, and
//! the constructor of its [`Environment`]. The kinds themselves are listed once, in
//! [`crate::registry`].
//!
//! The construction boilerplate every agent host shares (finding the agent binary, placing it,
//! wrapping a transport in the agent and the egress proxy) lives here too, in [`BuildContext`].

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
pub use toml::Spanned;

use crate::Environment;
use crate::agent::binary::{self as agent_binary, AgentBinary, NotFound};
use crate::agent::{AgentHost, AgentPlacement, AgentTransport};
use crate::egress::EgressHost;
use crate::remote::RemoteEnvironment;

/// One backend kind's section of a policy: deserialized from `[backends.NAME]` (all keys but
/// `kind`, unknown keys refused), then checked once when the policy loads.
pub trait BackendSection:
    DeserializeOwned + Serialize + Clone + std::fmt::Debug + Send + Sync + 'static
{
    /// The `kind = "..."` that names it.
    const KIND: &'static str;
    /// Other names accepted for it (`singularity` for `apptainer`).
    const ALIASES: &'static [&'static str] = &[];

    /// Checks that need more than one key or a value's range. Keys are relative to the
    /// section (`"image"`); the engine adds `backends.NAME.` and the line.
    fn check(&self) -> Result<(), SectionError>;

    /// The `network` key as written, where the kind has one.
    fn network(&self) -> Option<&Spanned<String>> {
        None
    }

    /// Why `network = "proxy"` cannot be had on this section as configured (where Paddock
    /// cannot take the environment's own route away, or no agent inside carries connections to
    /// the proxy); `None`: it can.
    fn proxy_refusal(&self) -> Option<&'static str>;

    /// Environment variables set for every command.
    fn env(&self) -> &BTreeMap<String, String>;

    /// The environment this section describes (checked when the policy loaded).
    fn build(&self, ctx: &BuildContext<'_>) -> Arc<dyn Environment>;
}

/// A section's key that is wrong, and why.
#[derive(Debug, Clone, PartialEq)]
pub enum SectionError {
    /// `span`: where in the policy text; `None` for the section as a whole (a missing key).
    Invalid {
        span: Option<Range<usize>>,
        key: &'static str,
        message: String,
    },
    /// A value outside its closed set (the engine adds a "did you mean").
    NotOneOf {
        span: Range<usize>,
        key: &'static str,
        value: String,
        allowed: &'static [&'static str],
    },
}

impl SectionError {
    /// `key` at `value`'s place is wrong because of `message`.
    pub fn at<T>(value: &Spanned<T>, key: &'static str, message: impl Into<String>) -> Self {
        Self::Invalid {
            span: Some(value.span()),
            key,
            message: message.into(),
        }
    }

    /// The section as a whole lacks `key`.
    pub fn missing(kind: &str, key: &'static str) -> Self {
        Self::Invalid {
            span: None,
            key,
            message: format!("a {kind} backend needs `{key}`"),
        }
    }
}

/// `value` must be one of `allowed`.
pub fn one_of(
    value: &Option<Spanned<String>>,
    key: &'static str,
    allowed: &'static [&'static str],
) -> Result<(), SectionError> {
    match value {
        Some(v) if !allowed.contains(&v.get_ref().as_str()) => Err(SectionError::NotOneOf {
            span: v.span(),
            key,
            value: v.get_ref().clone(),
            allowed,
        }),
        _ => Ok(()),
    }
}

/// Per-session ceilings: a zero would stop every command.
pub fn at_least_one(
    ceilings: &[(&'static str, &Option<Spanned<u64>>)],
) -> Result<(), SectionError> {
    for (key, value) in ceilings {
        if let Some(value) = value
            && *value.get_ref() == 0
        {
            return Err(SectionError::at(value, key, "must be at least 1"));
        }
    }
    Ok(())
}

/// `cpus`, where a backend has it: a positive, finite number.
pub fn positive_cpus(cpus: &Option<Spanned<f64>>) -> Result<(), SectionError> {
    match cpus {
        Some(cpus) if !(*cpus.get_ref() > 0.0 && cpus.get_ref().is_finite()) => {
            Err(SectionError::at(
                cpus,
                "cpus",
                format!("must be a positive number of CPUs, got {}", cpus.get_ref()),
            ))
        }
        _ => Ok(()),
    }
}

/// `network = "proxy"`: the environment itself gets no network; its agent carries connections
/// to the egress proxy.
pub fn is_proxy(network: &Option<Spanned<String>>) -> bool {
    network.as_ref().is_some_and(|n| n.get_ref() == "proxy")
}

/// The network a container or instance is made with: none when proxied.
pub fn network_of(network: &Option<Spanned<String>>) -> String {
    match network.as_ref().map(|n| n.get_ref().as_str()) {
        Some(network) if network != "proxy" => network.to_owned(),
        _ => "none".into(),
    }
}

/// The refusal shared by agent hosts: the proxy is reached through the agent.
pub const PROXY_NEEDS_AGENT: &str = "the proxy is reached through the agent inside the \
     environment, and this backend has agent = false; remove it";

/// A string key's value.
pub fn text(value: &Option<Spanned<String>>) -> Option<String> {
    value.as_ref().map(|v| v.get_ref().clone())
}

/// A copied key's value.
pub fn value<T: Copy>(value: &Option<Spanned<T>>) -> Option<T> {
    value.as_ref().map(|v| *v.get_ref())
}

/// What building any backend's environment needs from the engine.
pub struct BuildContext<'a> {
    /// The backend's name (`[backends.NAME]`).
    pub name: &'a str,
    /// The policy file's directory: relative host paths are relative to it (`.` for the
    /// built-in policy).
    pub policy_dir: PathBuf,
    /// The engine's state directory (`$PADDOCK_HOME`).
    pub state_root: &'a Path,
    /// The `paddock` binary (background supervisors; the agent is found beside it).
    pub exe: &'a Path,
    /// The egress proxy's side for this backend, when its `network = "proxy"`.
    pub egress: Option<Arc<dyn EgressHost>>,
}

impl BuildContext<'_> {
    /// A host path from a policy: `~/` is the home directory, and a relative path is relative
    /// to the policy file.
    pub fn host_path(&self, value: &str) -> PathBuf {
        if let Some(rest) = value.strip_prefix("~/")
            && let Some(home) = std::env::var_os("HOME")
        {
            return PathBuf::from(home).join(rest);
        }
        let path = Path::new(value);
        if path.is_absolute() {
            return path.to_path_buf();
        }
        self.policy_dir.join(path)
    }

    /// The section's environment variables, with the proxy's when proxied; `agent_dir`: where
    /// the environment sees its agent's directory, for the proxy's CA (containers and
    /// instances see it at one path; the local sandbox's is per session, added where its
    /// commands start).
    pub fn command_env(
        &self,
        env: &BTreeMap<String, String>,
        agent_dir: Option<&str>,
    ) -> BTreeMap<String, String> {
        let mut env = env.clone();
        if let Some(egress) = &self.egress {
            // Every way a command starts (the agent, a background supervisor) exports these.
            env.extend(crate::egress::proxy_env());
            if let Some(dir) = agent_dir
                && egress.terminates_tls()
            {
                env.extend(crate::egress::ca_env(dir));
            }
        }
        env
    }

    /// The agent of an agent host when `agent` (its key, default on) asks for one: found or
    /// not (a missing binary is an error on use, never a quiet per-command fallback).
    pub fn agent(&self, agent: &Option<Spanned<bool>>) -> Option<Result<AgentBinary, NotFound>> {
        agent
            .as_ref()
            .is_none_or(|v| *v.get_ref())
            .then(|| agent_binary::find(self.exe, self.state_root))
    }

    /// Where a found agent binary is placed for environments to see it.
    pub fn placement(
        &self,
        agent: &Option<Result<AgentBinary, NotFound>>,
    ) -> Option<AgentPlacement> {
        agent
            .as_ref()
            .and_then(|found| found.as_ref().ok())
            .map(|binary| AgentPlacement::new(binary, self.state_root.join("agents")))
    }

    /// A transport as an environment: through its agent when one was asked for, with the
    /// egress proxy when proxied.
    pub fn remote<T: AgentHost>(
        &self,
        transport: T,
        agent: Option<Result<AgentBinary, NotFound>>,
    ) -> Arc<dyn Environment> {
        let state_root = self.state_root.to_path_buf();
        let exe = self.exe.to_path_buf();
        match agent {
            Some(binary) => {
                let transport = AgentTransport::new(transport, binary);
                let transport = match self.egress.clone() {
                    Some(egress) => transport.with_egress(egress),
                    None => transport,
                };
                Arc::new(RemoteEnvironment::new(transport, state_root, exe))
            }
            None => Arc::new(RemoteEnvironment::new(transport, state_root, exe)),
        }
    }

    /// The owner part of environment names, from the engine's state directory.
    pub fn owner(&self) -> String {
        crate::naming::owner_of(self.state_root)
    }
}
