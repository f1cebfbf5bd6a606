//! `kind = "local"`: its policy keys, their checks and defaults, and its constructor.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{LocalCeilings, LocalEnvironment, LocalSandbox, PROTECTED_PATHS, SandboxMode};
use crate::Environment;
use crate::section::{
    BackendSection, BuildContext, SectionError, Spanned, at_least_one, one_of, positive_cpus, text,
    value,
};

/// `max_processes` of the built-in local backend (and of `policies/default.toml`).
pub const DEFAULT_MAX_PROCESSES: u64 = 1024;

/// `[backends.NAME] kind = "local"`: commands on this machine, in a sandbox by default.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LocalSection {
    /// `none`, `read-only` or `workspace-write` (the default); `none` runs commands
    /// unconfined.
    pub sandbox: Option<Spanned<String>>,
    /// The directory commands may change (relative to where Paddock runs; default `.`, or the
    /// MCP client's root).
    pub workspace: Option<Spanned<String>>,
    /// Accepted for every kind; commands of the local backend start in the workspace.
    pub workdir: Option<Spanned<String>>,
    /// `none` (the sandbox's default), `host` or `proxy`.
    pub network: Option<Spanned<String>>,
    /// A sandboxed session's commands share one confined environment served by an agent
    /// (default true).
    pub agent: Option<Spanned<bool>>,
    /// Processes and threads of a whole session (a pids cgroup).
    pub max_processes: Option<Spanned<u64>>,
    pub cpus: Option<Spanned<f64>>,
    pub memory_mb: Option<Spanned<u64>>,
    /// The session's private /tmp as a tmpfs of this size.
    pub tmp_size_mb: Option<Spanned<u64>>,
    /// What one workspace-write command may add to the workspace (RLIMIT_FSIZE, and a watcher
    /// that ends the command past it).
    pub workspace_write_mb: Option<Spanned<u64>>,
    /// Accepted for every kind; the local backend's commands inherit the engine's environment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

impl LocalSection {
    /// The `local` backend of a policy that declares none (the built-in policy among them):
    /// `policies/default.toml`'s, the workspace-write sandbox over the directory Paddock runs
    /// in, with no network. A kernel that cannot give the sandbox makes the first command fail,
    /// naming the policy key that turns it off.
    pub fn implicit() -> Self {
        let text = |value: &str| Some(Spanned::new(0..0, value.to_owned()));
        Self {
            sandbox: text("workspace-write"),
            workspace: text("."),
            network: text("none"),
            // A newcomer's fork bomb is bounded too: 1024 processes and threads per session is
            // far above what builds and test runners use here, far below what hurts the machine.
            max_processes: Some(Spanned::new(0..0, DEFAULT_MAX_PROCESSES)),
            ..Self::default()
        }
    }

    fn sandbox(&self) -> Option<&str> {
        self.sandbox.as_ref().map(|s| s.get_ref().as_str())
    }
}

impl BackendSection for LocalSection {
    const KIND: &'static str = "local";

    fn check(&self) -> Result<(), SectionError> {
        at_least_one(&[
            ("max_processes", &self.max_processes),
            ("memory_mb", &self.memory_mb),
            ("tmp_size_mb", &self.tmp_size_mb),
            ("workspace_write_mb", &self.workspace_write_mb),
        ])?;
        positive_cpus(&self.cpus)?;
        let sandbox = self.sandbox();
        if let (Some(tmp), Some("none")) = (&self.tmp_size_mb, sandbox) {
            return Err(SectionError::at(
                tmp,
                "tmp_size_mb",
                "sizes the session's private /tmp, which only a sandboxed backend has (with \
                 `sandbox = \"none\"` commands use the host's /tmp): remove it, or choose a \
                 sandbox",
            ));
        }
        if let Some(limit) = &self.workspace_write_mb
            && matches!(sandbox, Some("none" | "read-only"))
        {
            return Err(SectionError::at(
                limit,
                "workspace_write_mb",
                "bounds what a workspace-write command adds to the workspace; this backend's \
                 commands do not write a workspace it could measure (`sandbox` is not \
                 workspace-write): remove it",
            ));
        }
        // An unconfined local backend runs commands itself (on a spare shell); its agent
        // exists to hold a session's sandbox. Saying `agent = true` there would be a no-op.
        if let Some(agent) = &self.agent
            && *agent.get_ref()
            && sandbox == Some("none")
        {
            return Err(SectionError::at(
                agent,
                "agent",
                "the local agent holds a sandboxed session's sandbox; with `sandbox = \"none\"` \
                 commands run directly (on a spare shell): remove `agent`, or choose a sandbox",
            ));
        }
        one_of(&self.network, "network", &["none", "host", "proxy"])?;
        one_of(
            &self.sandbox,
            "sandbox",
            &["none", "read-only", "workspace-write"],
        )
    }

    fn network(&self) -> Option<&Spanned<String>> {
        self.network.as_ref()
    }

    fn proxy_refusal(&self) -> Option<&'static str> {
        if self.sandbox() == Some("none") {
            return Some(
                "with sandbox = \"none\" commands run on this machine's own network, which \
                 Paddock cannot take away; keep the sandbox (read-only or workspace-write)",
            );
        }
        self.agent
            .as_ref()
            .is_some_and(|a| !*a.get_ref())
            .then_some(crate::section::PROXY_NEEDS_AGENT)
    }

    fn env(&self) -> &BTreeMap<String, String> {
        &self.env
    }

    fn build(&self, ctx: &BuildContext<'_>) -> Arc<dyn Environment> {
        // An MCP client's roots name each session's workspace unless the policy names one.
        let local = LocalEnvironment::new(
            ctx.name,
            ctx.state_root.to_path_buf(),
            ctx.exe.to_path_buf(),
        )
        .with_client_workspaces(self.workspace.is_none())
        .with_ceilings(LocalCeilings {
            max_processes: value(&self.max_processes),
            cpus: value(&self.cpus),
            memory_mb: value(&self.memory_mb),
            tmp_size_mb: value(&self.tmp_size_mb),
            workspace_write_mb: value(&self.workspace_write_mb),
        });
        let mode = text(&self.sandbox).unwrap_or_else(|| "workspace-write".into());
        if mode == "none" {
            return Arc::new(local.with_spare_shells());
        }
        // Checked when the policy loaded; a value it let through is still no sandbox-less
        // fallback: the strictest mode.
        let mode: SandboxMode = mode.parse().unwrap_or_else(|err: String| {
            tracing::error!(backend = ctx.name, %err, "using the read-only sandbox");
            SandboxMode::ReadOnly
        });
        // The workspace is relative to where Paddock runs (the project), not to the policy.
        let workspace = self.workspace.as_ref().map_or(".", |w| w.get_ref());
        let workspace = if workspace.starts_with('/') || workspace.starts_with("~/") {
            ctx.host_path(workspace)
        } else {
            std::env::current_dir()
                .unwrap_or_else(|_| PathBuf::from("/"))
                .join(workspace)
        };
        // A sandboxed session's commands share one confined environment, served by an agent,
        // unless the policy says `agent = false`.
        let agent = self.agent.as_ref().is_none_or(|v| *v.get_ref());
        let local = match ctx.egress.clone() {
            Some(egress) => local.with_egress(egress),
            None => local,
        };
        Arc::new(local.with_agent(agent).with_sandbox(LocalSandbox {
            mode,
            workspace,
            network: self.network.as_ref().is_some_and(|n| n.get_ref() == "host"),
            protected: PROTECTED_PATHS.iter().map(|p| (*p).to_owned()).collect(),
        }))
    }
}
