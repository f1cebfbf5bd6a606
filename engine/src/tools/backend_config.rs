//! From a policy's `[backends.NAME]` section to a running [`Environment`]: the one place that
//! knows each kind's keys and defaults.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use paddock_backends::Environment;
use paddock_backends::agent::binary as agent_binary;
use paddock_backends::agent::{AgentPlacement, AgentTransport};
use paddock_backends::apptainer::{ApptainerConfig, ApptainerTransport};
use paddock_backends::docker::{DockerConfig, DockerTransport};
use paddock_backends::egress::EgressHost;
use paddock_backends::local::{
    LocalCeilings, LocalEnvironment, LocalSandbox, PROTECTED_PATHS, SandboxMode,
};
use paddock_backends::remote::RemoteEnvironment;
use paddock_backends::slurm::{DEFAULT_QUEUE_TIMEOUT, RelayPath, SlurmConfig, SlurmTransport};
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
    egress: Option<Arc<dyn EgressHost>>,
) -> Arc<dyn Environment> {
    match agent {
        Some(binary) => Arc::new(RemoteEnvironment::new(
            {
                let transport = AgentTransport::new(transport, binary);
                match egress {
                    Some(egress) => transport.with_egress(egress),
                    None => transport,
                }
            },
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

/// The name of the backend every policy has: declared, or else [`implicit_local`].
pub const LOCAL: &str = "local";

/// `max_processes` of the built-in local backend (and of `policies/default.toml`).
pub const DEFAULT_LOCAL_MAX_PROCESSES: u64 = 1024;

/// The `local` backend of a policy that declares none (the built-in policy among them):
/// `policies/default.toml`'s, the workspace-write sandbox over the directory Paddock runs in,
/// with no network. It is built like a declared one; a kernel that cannot give the sandbox
/// makes the first command fail, naming the policy key that turns it off.
pub fn implicit_local() -> BackendConfig {
    let text = |value: &str| Some(Spanned::new(0..0, value.to_owned()));
    BackendConfig {
        kind: Spanned::new(0..0, LOCAL.to_owned()),
        sandbox: text("workspace-write"),
        workspace: text("."),
        network: text("none"),
        image: None,
        memory_mb: None,
        cpus: None,
        host: None,
        user: None,
        port: None,
        identity_file: None,
        known_hosts_file: None,
        host_key_checking: None,
        connect_timeout_seconds: None,
        pids_limit: None,
        // A newcomer's fork bomb is bounded too: 1024 processes and threads per session is far
        // above what builds and test runners use here, far below what hurts the machine.
        max_processes: Some(Spanned::new(0..0, DEFAULT_LOCAL_MAX_PROCESSES)),
        workspace_write_mb: None,
        read_only: None,
        tmp_size_mb: None,
        socket: None,
        binds: Vec::new(),
        binary: None,
        writable_tmpfs: None,
        overlay: None,
        workdir: None,
        agent: None,
        warm: None,
        partition: None,
        time_limit: None,
        gres: None,
        account: None,
        extra_args: Vec::new(),
        queue_timeout_seconds: None,
        slurm_bin_dir: None,
        relay: None,
        env: std::collections::BTreeMap::new(),
    }
}

/// Every backend of `policy` with its name: the declared ones, and [`implicit_local`] when
/// none is named `local`.
pub fn backends_of(policy: &Policy) -> Vec<(String, BackendConfig)> {
    let mut all: Vec<(String, BackendConfig)> = policy
        .backends
        .iter()
        .map(|(name, config)| (name.clone(), config.clone()))
        .collect();
    if !policy.backends.contains_key(LOCAL) {
        all.push((LOCAL.to_owned(), implicit_local()));
    }
    all
}

fn string(value: &Option<Spanned<String>>) -> Option<String> {
    value.as_ref().map(|v| v.get_ref().clone())
}

/// `network = "proxy"`: the environment itself gets no network; its agent carries connections
/// to the egress proxy.
fn proxied(config: &BackendConfig) -> bool {
    config
        .network
        .as_ref()
        .is_some_and(|n| n.get_ref() == "proxy")
}

/// The network a container or instance is made with: none when proxied.
fn network_of(config: &BackendConfig) -> String {
    match string(&config.network) {
        Some(network) if network != "proxy" => network,
        _ => "none".into(),
    }
}

/// An apptainer backend's settings, or a slurm backend's with `image`.
fn apptainer_config(
    policy: &Policy,
    name: &str,
    config: &BackendConfig,
    image: &str,
    env: std::collections::BTreeMap<String, String>,
    agent: Option<AgentPlacement>,
    state_root: &Path,
) -> ApptainerConfig {
    ApptainerConfig {
        name: name.to_owned(),
        image: host_path(policy, image).display().to_string(),
        binary: config
            .binary
            .as_ref()
            .map(|v| host_path(policy, v.get_ref())),
        binds: config.binds.iter().map(|b| b.get_ref().clone()).collect(),
        network: network_of(config),
        egress: proxied(config),
        writable_tmpfs: config.writable_tmpfs.as_ref().is_none_or(|v| *v.get_ref()),
        overlay: config
            .overlay
            .as_ref()
            .map(|v| host_path(policy, v.get_ref()).display().to_string()),
        memory_mb: config.memory_mb.as_ref().map(|v| *v.get_ref()),
        cpus: config.cpus.as_ref().map(|v| *v.get_ref()),
        max_processes: config.max_processes.as_ref().map(|v| *v.get_ref()),
        workdir: string(&config.workdir),
        env,
        agent,
        owner: paddock_backends::naming::owner_of(state_root),
    }
}

/// The environment for one backend section (its kind was checked when the policy loaded).
pub fn build(
    policy: &Policy,
    name: &str,
    config: &BackendConfig,
    state_root: &Path,
    exe: &Path,
    egress: Option<&Arc<crate::network::Egress>>,
) -> Arc<dyn Environment> {
    let kind = config.kind.get_ref().as_str();
    let mut env = config.env.clone();
    let egress = egress
        .filter(|_| proxied(config))
        .map(|egress| egress.for_backend(name));
    if let Some(egress) = &egress {
        // Every way a command starts (the agent, a background supervisor) exports these.
        env.extend(paddock_backends::egress::proxy_env());
        if egress.terminates_tls() && kind != "local" {
            // Containers and instances see their agent's directory at one path; the local
            // sandbox's is per session, added where its commands start.
            env.extend(paddock_backends::egress::ca_env(
                paddock_backends::agent::AGENT_DIR_INSIDE,
            ));
        }
    }
    // Container and instance backends go through the in-environment agent unless told not to.
    let agent = matches!(
        kind,
        "docker" | "apptainer" | "singularity" | "ssh" | "slurm"
    )
    .then(|| config.agent.as_ref().is_none_or(|v| *v.get_ref()))
    .filter(|on| *on)
    .map(|_| agent_binary::find(exe));
    match kind {
        "docker" => {
            let transport = DockerTransport::new(
                DockerConfig {
                    name: name.to_owned(),
                    image: string(&config.image).unwrap_or_default(),
                    network: network_of(config),
                    egress: proxied(config),
                    memory_mb: config.memory_mb.as_ref().map(|v| *v.get_ref()),
                    cpus: config.cpus.as_ref().map(|v| *v.get_ref()),
                    // `max_processes`, or its older name.
                    pids_limit: config
                        .max_processes
                        .as_ref()
                        .or(config.pids_limit.as_ref())
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
            remote(transport, agent, state_root, exe, egress)
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
            remote(transport, agent, state_root, exe, egress)
        }
        "slurm" => {
            let placement = agent
                .as_ref()
                .and_then(|found| found.as_ref().ok())
                .map(|binary| AgentPlacement::new(binary, state_root.join("agents")));
            // With an image, commands run in an Apptainer instance on the allocated node, made
            // with the apptainer backend's options; the job bounds memory and CPUs.
            let apptainer = string(&config.image).map(|image| ApptainerConfig {
                memory_mb: None,
                cpus: None,
                max_processes: None,
                ..apptainer_config(
                    policy,
                    name,
                    config,
                    &image,
                    env.clone(),
                    placement.clone(),
                    state_root,
                )
            });
            let transport = SlurmTransport::new(SlurmConfig {
                name: name.to_owned(),
                partition: string(&config.partition),
                time_limit: string(&config.time_limit),
                // Checked to be a whole number when the policy loaded.
                cpus: config.cpus.as_ref().map(|v| *v.get_ref() as u32),
                memory_mb: config.memory_mb.as_ref().map(|v| *v.get_ref()),
                gres: string(&config.gres),
                account: string(&config.account),
                extra_args: config
                    .extra_args
                    .iter()
                    .map(|a| a.get_ref().clone())
                    .collect(),
                queue_timeout: config
                    .queue_timeout_seconds
                    .as_ref()
                    .map_or(DEFAULT_QUEUE_TIMEOUT, |v| {
                        std::time::Duration::from_secs(*v.get_ref())
                    }),
                bin_dir: config
                    .slurm_bin_dir
                    .as_ref()
                    .map(|v| host_path(policy, v.get_ref())),
                workdir: string(&config.workdir),
                env,
                apptainer,
                agent: placement,
                relay: match config.relay.as_ref().map(|r| r.get_ref().as_str()) {
                    Some("tcp") => Some(RelayPath::Direct),
                    Some("srun") => Some(RelayPath::Stream),
                    _ => None,
                },
                home: std::env::var("HOME").unwrap_or_else(|_| "/tmp".into()),
                owner: paddock_backends::naming::owner_of(state_root),
            });
            remote(transport, agent, state_root, exe, egress)
        }
        "apptainer" | "singularity" => {
            let image = string(&config.image).unwrap_or_default();
            let placement = agent
                .as_ref()
                .and_then(|found| found.as_ref().ok())
                .map(|binary| AgentPlacement::new(binary, state_root.join("agents")));
            let transport = ApptainerTransport::new(apptainer_config(
                policy, name, config, &image, env, placement, state_root,
            ));
            remote(transport, agent, state_root, exe, egress)
        }
        _ => {
            // An MCP client's roots name each session's workspace unless the policy names one.
            let local = LocalEnvironment::new(name, state_root.to_path_buf(), exe.to_path_buf())
                .with_client_workspaces(config.workspace.is_none())
                .with_ceilings(LocalCeilings {
                    max_processes: config.max_processes.as_ref().map(|v| *v.get_ref()),
                    cpus: config.cpus.as_ref().map(|v| *v.get_ref()),
                    memory_mb: config.memory_mb.as_ref().map(|v| *v.get_ref()),
                    tmp_size_mb: config.tmp_size_mb.as_ref().map(|v| *v.get_ref()),
                    workspace_write_mb: config.workspace_write_mb.as_ref().map(|v| *v.get_ref()),
                });
            let mode = string(&config.sandbox).unwrap_or_else(|| "workspace-write".into());
            if mode == "none" {
                return Arc::new(local.with_spare_shells());
            }
            // Checked when the policy loaded; a value it let through is still no sandbox-less
            // fallback: the strictest mode.
            let mode: SandboxMode = mode.parse().unwrap_or_else(|err: String| {
                tracing::error!(backend = name, %err, "using the read-only sandbox");
                SandboxMode::ReadOnly
            });
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
            let local = match egress {
                Some(egress) => local.with_egress(egress),
                None => local,
            };
            Arc::new(local.with_agent(agent).with_sandbox(LocalSandbox {
                mode,
                workspace,
                network: string(&config.network).is_some_and(|n| n == "host"),
                protected: PROTECTED_PATHS.iter().map(|p| (*p).to_owned()).collect(),
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    /// The keys of a local backend section that are set, with their values.
    fn local_keys(config: &BackendConfig) -> Vec<(&'static str, String)> {
        let text = |v: &Option<Spanned<String>>| v.as_ref().map(|s| s.get_ref().clone());
        [
            ("kind", Some(config.kind.get_ref().clone())),
            ("sandbox", text(&config.sandbox)),
            ("workspace", text(&config.workspace)),
            ("network", text(&config.network)),
            ("workdir", text(&config.workdir)),
            (
                "agent",
                config.agent.as_ref().map(|v| v.get_ref().to_string()),
            ),
            (
                "max_processes",
                config
                    .max_processes
                    .as_ref()
                    .map(|v| v.get_ref().to_string()),
            ),
            (
                "cpus",
                config.cpus.as_ref().map(|v| v.get_ref().to_string()),
            ),
            (
                "tmp_size_mb",
                config.tmp_size_mb.as_ref().map(|v| v.get_ref().to_string()),
            ),
            (
                "workspace_write_mb",
                config
                    .workspace_write_mb
                    .as_ref()
                    .map(|v| v.get_ref().to_string()),
            ),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k, v)))
        .chain(config.env.iter().map(|(k, v)| ("env", format!("{k}={v}"))))
        .collect()
    }

    #[test]
    fn the_implicit_local_backend_is_the_one_of_policies_default_toml() {
        let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies/default.toml");
        let shipped = Policy::load(&file).unwrap();
        let declared = &shipped.backends[LOCAL];
        assert_eq!(local_keys(&implicit_local()), local_keys(declared));
        assert_eq!(
            local_keys(&implicit_local()),
            vec![
                ("kind", "local".to_owned()),
                ("sandbox", "workspace-write".to_owned()),
                ("workspace", ".".to_owned()),
                ("network", "none".to_owned()),
                ("max_processes", "1024".to_owned()),
            ]
        );
    }

    #[test]
    fn a_policy_without_a_local_backend_gets_the_sandboxed_one() {
        let names = |p: &Policy| {
            backends_of(p)
                .into_iter()
                .map(|(name, config)| (name, local_keys(&config)))
                .collect::<Vec<_>>()
        };
        let builtin = names(&Policy::builtin());
        assert_eq!(
            builtin,
            vec![("local".to_owned(), local_keys(&implicit_local()))]
        );
        // Another backend declared: `local` is still the sandboxed one.
        let p = Policy::parse(
            "[backends.box]\nkind = \"docker\"\nimage = \"debian\"\n",
            "p.toml",
        )
        .unwrap();
        let all = names(&p);
        assert_eq!(all.len(), 2, "{all:?}");
        assert_eq!(all[1], ("local".to_owned(), local_keys(&implicit_local())));
        // A declared `local` is taken as written, `sandbox = "none"` included.
        let p = Policy::parse(
            "[backends.local]\nkind = \"local\"\nsandbox = \"none\"\n",
            "p.toml",
        )
        .unwrap();
        assert_eq!(
            names(&p),
            vec![(
                "local".to_owned(),
                vec![("kind", "local".to_owned()), ("sandbox", "none".to_owned())]
            )]
        );
    }

    /// The ceilings' keys: where they apply, zero and nonsense refused, the reasons named.
    #[test]
    fn ceiling_keys_are_checked_with_their_line() {
        let err = |text: &str| Policy::parse(text, "p.toml").unwrap_err().to_string();
        let local = "[backends.local]\nkind = \"local\"\n";
        let p = Policy::parse(
            &format!(
                "{local}max_processes = 64\ncpus = 0.5\ntmp_size_mb = 16\nworkspace_write_mb = 8\n"
            ),
            "p.toml",
        )
        .unwrap();
        let c = &p.backends["local"];
        assert_eq!(c.max_processes.as_ref().map(|v| *v.get_ref()), Some(64));
        assert_eq!(c.workspace_write_mb.as_ref().map(|v| *v.get_ref()), Some(8));
        let e = err(&format!("{local}max_processes = 0\n"));
        assert!(
            e.starts_with("p.toml:3: backends.local.max_processes: must be at least 1"),
            "{e}"
        );
        let e = err(&format!("{local}cpus = -1.0\n"));
        assert!(
            e.starts_with("p.toml:3: backends.local.cpus: must be a positive"),
            "{e}"
        );
        let e = err(&format!("{local}sandbox = \"none\"\ntmp_size_mb = 16\n"));
        assert!(
            e.starts_with("p.toml:4: backends.local.tmp_size_mb: sizes the session's private /tmp"),
            "{e}"
        );
        let e = err(&format!(
            "{local}sandbox = \"read-only\"\nworkspace_write_mb = 8\n"
        ));
        assert!(
            e.starts_with("p.toml:4: backends.local.workspace_write_mb:"),
            "{e}"
        );
        let docker = "[backends.d]\nkind = \"docker\"\nimage = \"x\"\n";
        let e = err(&format!("{docker}pids_limit = 10\nmax_processes = 20\n"));
        assert!(
            e.starts_with("p.toml:5: backends.d.max_processes: `pids_limit` is the older name"),
            "{e}"
        );
        let apptainer = "[backends.a]\nkind = \"apptainer\"\nimage = \"x.sif\"\n";
        let e = err(&format!("{apptainer}tmp_size_mb = 16\n"));
        assert!(
            e.starts_with("p.toml:4: backends.a.tmp_size_mb: Apptainer has no flag for it"),
            "{e}"
        );
        Policy::parse(&format!("{apptainer}max_processes = 64\n"), "p.toml").unwrap();
        let ssh = "[backends.s]\nkind = \"ssh\"\nhost = \"h\"\n";
        let e = err(&format!("{ssh}max_processes = 64\n"));
        assert!(e.contains("does not apply to a ssh backend"), "{e}");
    }
}
