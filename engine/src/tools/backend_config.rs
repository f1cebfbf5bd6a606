//! From a policy's `[backends.NAME]` section to a running [`Environment`]: the one place that
//! knows each kind's keys and defaults.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use paddock_backends::Environment;
use paddock_backends::agent::binary as agent_binary;
use paddock_backends::agent::{AgentPlacement, AgentTransport};
use paddock_backends::apptainer::{ApptainerConfig, ApptainerTransport};
use paddock_backends::docker::{DockerConfig, DockerTransport};
use paddock_backends::local::{LocalEnvironment, LocalSandbox, PROTECTED_PATHS};
use paddock_backends::remote::RemoteEnvironment;
use paddock_backends::ssh::{SshConfig, SshTransport};
use toml::Spanned;

use crate::policy::{BackendConfig, Policy};

/// A host path from a policy: `~/` is the home directory, and a relative path is relative to
/// the policy file (the current directory for the built-in policy).
fn host_path(policy: &Policy, value: &str) -> PathBuf {
    if let Some(rest) = value.strip_prefix("~/")
        && let Some(home) = std::env::var_os("HOME")
    {
        return PathBuf::from(home).join(rest);
    }
    let path = Path::new(value);
    if path.is_absolute() {
        return path.to_path_buf();
    }
    let base = policy
        .source
        .as_deref()
        .and_then(Path::parent)
        .filter(|p| !p.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    base.join(path)
}

/// A remote transport as an environment, through the agent when one was asked for (its binary
/// found or not: a missing binary is an error on use, never a quiet per-command fallback).
fn remote<T: paddock_backends::agent::AgentHost>(
    transport: T,
    agent: Option<Result<agent_binary::AgentBinary, agent_binary::NotFound>>,
    state_root: &Path,
    exe: &Path,
) -> Arc<dyn Environment> {
    match agent {
        Some(binary) => Arc::new(RemoteEnvironment::new(
            AgentTransport::new(transport, binary),
            state_root.to_path_buf(),
            exe.to_path_buf(),
        )),
        None => Arc::new(RemoteEnvironment::new(
            transport,
            state_root.to_path_buf(),
            exe.to_path_buf(),
        )),
    }
}

fn string(value: &Option<Spanned<String>>) -> Option<String> {
    value.as_ref().map(|v| v.get_ref().clone())
}

/// The environment for one backend section (its kind was checked when the policy loaded).
pub fn build(
    policy: &Policy,
    name: &str,
    config: &BackendConfig,
    state_root: &Path,
    exe: &Path,
) -> Arc<dyn Environment> {
    let kind = config.kind.get_ref().as_str();
    let env = config.env.clone();
    // Container and instance backends go through the in-environment agent unless told not to.
    let agent = matches!(kind, "docker" | "apptainer" | "singularity" | "ssh")
        .then(|| config.agent.as_ref().is_none_or(|v| *v.get_ref()))
        .filter(|on| *on)
        .map(|_| agent_binary::find(exe));
    match kind {
        "docker" => {
            let transport = DockerTransport::new(
                DockerConfig {
                    name: name.to_owned(),
                    image: string(&config.image).unwrap_or_default(),
                    network: string(&config.network).unwrap_or_else(|| "none".into()),
                    memory_mb: config.memory_mb.as_ref().map(|v| *v.get_ref()),
                    cpus: config.cpus.as_ref().map(|v| *v.get_ref()),
                    pids_limit: config
                        .pids_limit
                        .as_ref()
                        .map_or(512, |v| i64::try_from(*v.get_ref()).unwrap_or(i64::MAX)),
                    read_only: config.read_only.as_ref().is_some_and(|v| *v.get_ref()),
                    tmp_size_mb: config.tmp_size_mb.as_ref().map_or(512, |v| *v.get_ref()),
                    workspace: config
                        .workspace
                        .as_ref()
                        .map(|w| host_path(policy, w.get_ref())),
                    workdir: string(&config.workdir),
                    env,
                    socket: string(&config.socket).unwrap_or_else(DockerConfig::default_socket),
                    agent: agent
                        .as_ref()
                        .and_then(|found| found.as_ref().ok())
                        .map(|binary| AgentPlacement::new(binary, state_root.join("agents"))),
                    home: DockerConfig::home_of(state_root),
                    warm: config
                        .warm
                        .as_ref()
                        .map_or(0, |v| usize::try_from(*v.get_ref()).unwrap_or(usize::MAX)),
                },
                exe.to_path_buf(),
            );
            remote(transport, agent, state_root, exe)
        }
        "ssh" => {
            let transport = SshTransport::new(
                SshConfig {
                    name: name.to_owned(),
                    host: string(&config.host).unwrap_or_default(),
                    user: string(&config.user),
                    port: config.port.as_ref().map(|v| *v.get_ref()),
                    identity_file: config
                        .identity_file
                        .as_ref()
                        .map(|v| host_path(policy, v.get_ref())),
                    known_hosts_file: config
                        .known_hosts_file
                        .as_ref()
                        .map(|v| host_path(policy, v.get_ref())),
                    host_key_checking: string(&config.host_key_checking)
                        .unwrap_or_else(|| "yes".into()),
                    connect_timeout_seconds: config
                        .connect_timeout_seconds
                        .as_ref()
                        .map_or(10, |v| *v.get_ref()),
                    workdir: string(&config.workdir),
                    env,
                    program: PathBuf::from("ssh"),
                    agent: agent
                        .as_ref()
                        .and_then(|found| found.as_ref().ok())
                        .map(|binary| AgentPlacement::new(binary, state_root.join("agents"))),
                },
                state_root,
            );
            remote(transport, agent, state_root, exe)
        }
        "apptainer" | "singularity" => {
            let image = string(&config.image).unwrap_or_default();
            let transport = ApptainerTransport::new(ApptainerConfig {
                name: name.to_owned(),
                image: host_path(policy, &image).display().to_string(),
                binary: config
                    .binary
                    .as_ref()
                    .map(|v| host_path(policy, v.get_ref())),
                binds: config.binds.iter().map(|b| b.get_ref().clone()).collect(),
                network: string(&config.network).unwrap_or_else(|| "none".into()),
                writable_tmpfs: config.writable_tmpfs.as_ref().is_none_or(|v| *v.get_ref()),
                overlay: config
                    .overlay
                    .as_ref()
                    .map(|v| host_path(policy, v.get_ref()).display().to_string()),
                memory_mb: config.memory_mb.as_ref().map(|v| *v.get_ref()),
                cpus: config.cpus.as_ref().map(|v| *v.get_ref()),
                workdir: string(&config.workdir),
                env,
                agent: agent
                    .as_ref()
                    .and_then(|found| found.as_ref().ok())
                    .map(|binary| AgentPlacement::new(binary, state_root.join("agents"))),
            });
            remote(transport, agent, state_root, exe)
        }
        _ => {
            let local = LocalEnvironment::new(name, state_root.to_path_buf(), exe.to_path_buf());
            let mode = string(&config.sandbox).unwrap_or_else(|| "workspace-write".into());
            if mode == "none" {
                return Arc::new(local.with_spare_shells());
            }
            // The workspace is relative to where Paddock runs (the project), not to the policy.
            let workspace = config.workspace.as_ref().map_or(".", |w| w.get_ref());
            let workspace = if workspace.starts_with('/') || workspace.starts_with("~/") {
                host_path(policy, workspace)
            } else {
                std::env::current_dir()
                    .unwrap_or_else(|_| PathBuf::from("/"))
                    .join(workspace)
            };
            // A sandboxed session's commands share one confined environment, served by an
            // agent, unless the policy says `agent = false`.
            let agent = config.agent.as_ref().is_none_or(|v| *v.get_ref());
            Arc::new(local.with_agent(agent).with_sandbox(LocalSandbox {
                mode,
                workspace,
                network: string(&config.network).is_some_and(|n| n == "host"),
                protected: PROTECTED_PATHS.iter().map(|p| (*p).to_owned()).collect(),
            }))
        }
    }
}
