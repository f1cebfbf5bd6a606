//! The ssh backend: commands on another host through the system OpenSSH client.
//!
//! One ControlMaster connection per backend (not per session) carries every command, so a
//! command costs one round trip instead of a handshake; the master is started by the first
//! command (`ControlMaster=auto`) and stays `ControlPersist` seconds after the last. Closing a
//! session removes only that session's state on the host, never the shared master.
//! `BatchMode=yes`: ssh never prompts; host keys are checked strictly unless the policy says
//! otherwise.

pub mod section;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::agent::{AgentHost, AgentPlacement, check_started, placed_agent_socket, run_collecting};
use crate::remote::client::run_client;
use crate::remote::script::shell_quote;
use crate::remote::{ClientArgv, ExitFuture, OutputSink, TargetRun, Transport};
use crate::{BackendError, BackendFuture, Result};

/// What the remote login shell prints on ssh's stderr channel once the command ended:
/// `paddock-exit:STATUS`. The command's own stderr is merged into stdout on the far side, so
/// this line is how a command that exited 255 is told apart from a connection that died (ssh
/// answers 255 then too, and with `LogLevel=ERROR` often says nothing).
const EXIT_MARKER: &str = "paddock-exit:";

/// `[backends.NAME]` of kind ssh.
#[derive(Debug, Clone)]
pub struct SshConfig {
    pub name: String,
    pub host: String,
    pub user: Option<String>,
    pub port: Option<u16>,
    pub identity_file: Option<PathBuf>,
    pub known_hosts_file: Option<PathBuf>,
    /// `yes` (default: unknown or changed keys are refused), `accept-new`, or `no`.
    pub host_key_checking: String,
    pub connect_timeout_seconds: u64,
    /// Where sessions start; default the remote home.
    pub workdir: Option<String>,
    pub env: BTreeMap<String, String>,
    /// The ssh program.
    pub program: PathBuf,
    /// Commands go through the agent, copied to the host (`agent = true`, the default).
    pub agent: Option<AgentPlacement>,
}

/// Commands over OpenSSH.
pub struct SshTransport {
    config: SshConfig,
    /// Directory of the ControlMaster socket (short: sockets paths are limited to 104 bytes).
    control_dir: PathBuf,
}

impl SshTransport {
    pub fn new(config: SshConfig, state_root: &Path) -> Self {
        let preferred = state_root.join("ssh");
        // `%C` expands to 40 hex characters; keep the whole path within sun_path.
        let control_dir = if preferred.as_os_str().len() + 42 < 100 {
            preferred
        } else {
            PathBuf::from(format!(
                "/tmp/paddock-ssh-{}",
                rustix::process::getuid().as_raw()
            ))
        };
        Self {
            config,
            control_dir,
        }
    }

    fn destination(&self) -> String {
        match &self.config.user {
            Some(user) => format!("{user}@{}", self.config.host),
            None => self.config.host.clone(),
        }
    }

    fn describe(&self) -> String {
        format!("{}:{}", self.destination(), self.config.port.unwrap_or(22))
    }

    /// The ssh arguments before the destination.
    fn options(&self, pty: bool) -> Vec<String> {
        let c = &self.config;
        let mut args = vec![
            "-o".into(),
            "BatchMode=yes".into(),
            "-o".into(),
            "ControlMaster=auto".into(),
            "-o".into(),
            format!("ControlPath={}/%C", self.control_dir.display()),
            "-o".into(),
            "ControlPersist=600".into(),
            "-o".into(),
            format!("StrictHostKeyChecking={}", c.host_key_checking),
            "-o".into(),
            format!("ConnectTimeout={}", c.connect_timeout_seconds),
            "-o".into(),
            "ServerAliveInterval=10".into(),
            "-o".into(),
            "ServerAliveCountMax=3".into(),
            "-o".into(),
            "LogLevel=ERROR".into(),
        ];
        if let Some(port) = c.port {
            args.extend(["-p".into(), port.to_string()]);
        }
        if let Some(key) = &c.identity_file {
            args.extend([
                "-i".into(),
                key.display().to_string(),
                "-o".into(),
                "IdentitiesOnly=yes".into(),
            ]);
        }
        if let Some(file) = &c.known_hosts_file {
            args.extend([
                "-o".into(),
                format!("UserKnownHostsFile={}", file.display()),
            ]);
        }
        args.push(if pty { "-tt".into() } else { "-T".into() });
        args
    }

    /// ssh's arguments for running `argv` remotely (one quoted command line), optionally
    /// followed by the exit marker.
    fn args_for(&self, argv: &[String], pty: bool, marker: bool) -> Vec<String> {
        let mut args = self.options(pty);
        args.push(self.destination());
        args.push("--".into());
        // `env NAME=VALUE cmd` becomes the remote shell's own `NAME=VALUE cmd`: one exec less
        // per command (the value is a hex run id, safe unquoted).
        let argv = match argv {
            [env, assignment, rest @ ..]
                if env == "env"
                    && assignment.split_once('=').is_some_and(|(name, value)| {
                        !name.is_empty()
                            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                            && value.chars().all(|c| c.is_ascii_alphanumeric())
                    }) =>
            {
                std::iter::once(assignment.clone())
                    .chain(rest.iter().map(|w| shell_quote(w)))
                    .collect::<Vec<_>>()
            }
            _ => argv.iter().map(|w| shell_quote(w)).collect(),
        };
        let mut line = argv.join(" ");
        if marker {
            line.push_str(&format!("; echo \"{EXIT_MARKER}$?\" >&2"));
        }
        args.push(line);
        args
    }

    fn unavailable(&self, reason: impl Into<String>) -> BackendError {
        BackendError::Unavailable {
            kind: "ssh".into(),
            name: self.config.name.clone(),
            reason: format!("{}: {}", self.describe(), reason.into()),
        }
    }

    fn prepare(&self) -> Result<()> {
        std::fs::create_dir_all(&self.control_dir).map_err(|e| BackendError::State {
            path: self.control_dir.display().to_string(),
            reason: e.to_string(),
        })?;
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&self.control_dir, std::fs::Permissions::from_mode(0o700));
        Ok(())
    }
}

/// What the agent start script prints when the host lacks this agent binary.
const AGENT_MISSING: &str = "paddock-agent-missing";
/// What it prints before the remote socket's path.
const AGENT_SOCKET: &str = "paddock-agent-socket:";

impl SshTransport {
    fn agent(&self) -> Result<&AgentPlacement> {
        self.config
            .agent
            .as_ref()
            .ok_or_else(|| self.unavailable("this backend runs without the agent (agent = false)"))
    }

    /// The agent directory's key: one agent per (backend, session), python_execute's
    /// `SESSION.python` sharing the session's.
    fn agent_key(&self, session: &str) -> String {
        let base = session.strip_suffix(".python").unwrap_or(session);
        format!("ssh\0{}\0{base}", self.config.name)
    }

    /// The agent binary's place on the host: named by its content, so a new build is copied
    /// once and never overwrites one that runs.
    fn remote_agent_path(binary: &[u8]) -> String {
        use sha2::Digest;
        let digest = hex::encode(&sha2::Sha256::digest(binary)[..8]);
        format!("$HOME/{}/agent/paddock-agent-{digest}", ".cache/paddock")
    }

    async fn start_remote_agent(&self, session: &str) -> Result<()> {
        let agent = self.agent()?;
        let local = self.agent_socket(session)?;
        let dir_name = local
            .parent()
            .and_then(Path::file_name)
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let binary = std::fs::read(&agent.binary).map_err(|e| {
            self.unavailable(format!(
                "cannot read the agent {}: {e}",
                agent.binary.display()
            ))
        })?;
        let remote_bin = Self::remote_agent_path(&binary);
        let start = format!(
            r#"b="{remote_bin}"; s="$HOME/.cache/paddock/agents/{dir_name}"
mkdir -p "$s" || exit 1; chmod 700 "$s"
[ -x "$b" ] || {{ echo {AGENT_MISSING}; exit 0; }}
"$b" serve --socket "$s/agent.sock" --daemon --idle-exit 1800 || exit $?
echo "{AGENT_SOCKET}$s/agent.sock""#
        );
        let start_run = || TargetRun {
            argv: vec!["sh".into(), "-c".into(), start.clone()],
            stdin: None,
            pty: false,
            keep_detached: false,
        };
        let (mut status, mut output) = run_collecting(self, session, start_run()).await?;
        if status == 0 && output.contains(AGENT_MISSING) {
            let upload = format!(
                r#"b="{remote_bin}"; mkdir -p "$(dirname "$b")" && cat > "$b.part.$$" && chmod 755 "$b.part.$$" && mv -f "$b.part.$$" "$b""#
            );
            let size = binary.len();
            let (copied, said) = run_collecting(
                self,
                session,
                TargetRun {
                    argv: vec!["sh".into(), "-c".into(), upload],
                    stdin: Some(binary),
                    pty: false,
                    keep_detached: false,
                },
            )
            .await?;
            if copied != 0 {
                return Err(self.unavailable(format!(
                    "copying the agent ({size} bytes) to the host failed (exit {copied}): {}",
                    said.trim()
                )));
            }
            (status, output) = run_collecting(self, session, start_run()).await?;
        }
        check_started(self, status, &output)?;
        let remote = output
            .lines()
            .find_map(|l| l.trim().strip_prefix(AGENT_SOCKET))
            .ok_or_else(|| {
                self.unavailable(format!(
                    "the agent start said nothing of its socket: {output}"
                ))
            })?
            .to_owned();
        // The master forwards a socket here to the agent's there. A stale file (a master that
        // ended) is removed first, and an old forward of the same pair cancelled.
        let pair = format!("{}:{remote}", local.display());
        let mut cancel = self.options(false);
        cancel.extend([
            "-O".into(),
            "cancel".into(),
            "-L".into(),
            pair.clone(),
            self.destination(),
        ]);
        let _ = tokio::process::Command::new(&self.config.program)
            .args(&cancel)
            .stdin(std::process::Stdio::null())
            .output()
            .await;
        let _ = std::fs::remove_file(&local);
        let mut forward = self.options(false);
        forward.extend([
            "-O".into(),
            "forward".into(),
            "-L".into(),
            pair,
            self.destination(),
        ]);
        let out = tokio::process::Command::new(&self.config.program)
            .args(&forward)
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .map_err(|e| self.unavailable(format!("cannot run ssh -O forward: {e}")))?;
        if !out.status.success() {
            return Err(self.unavailable(format!(
                "the master connection would not forward the agent's socket (is \
                 AllowStreamLocalForwarding off on the host?): {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(())
    }
}

impl AgentHost for SshTransport {
    fn agent_program(&self) -> Option<String> {
        let binary = std::fs::read(&self.agent().ok()?.binary).ok()?;
        Some(Self::remote_agent_path(&binary))
    }

    fn agent_socket(&self, session: &str) -> Result<PathBuf> {
        placed_agent_socket(self, self.config.agent.as_ref(), &self.agent_key(session))
    }

    fn start_agent<'a>(&'a self, session: &'a str) -> BackendFuture<'a, ()> {
        Box::pin(self.start_remote_agent(session))
    }

    fn agent_is_stale<'a>(
        &'a self,
        _session: &'a str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send + 'a>> {
        // Copied under its content's name: a host never runs an old build by mistake.
        Box::pin(async { false })
    }
}

impl Transport for SshTransport {
    fn kind(&self) -> &'static str {
        "ssh"
    }

    fn name(&self) -> &str {
        &self.config.name
    }

    fn state_root(&self) -> &str {
        ".cache/paddock"
    }

    fn home(&self) -> &str {
        self.config.workdir.as_deref().unwrap_or("")
    }

    fn env(&self) -> &BTreeMap<String, String> {
        &self.config.env
    }

    fn run<'a>(&'a self, _session: &'a str, run: TargetRun, sink: OutputSink) -> ExitFuture<'a> {
        Box::pin(async move {
            self.prepare()?;
            // With a terminal (-tt) the far side's stderr is the terminal too: the marker would
            // land in the output. There ssh's 255 is taken as its own failure (a command that
            // itself exits 255 in PTY mode is reported as such an error, saying so).
            let args = self.args_for(&run.argv, run.pty, !run.pty);
            let exit = run_client(&self.config.program, &args, run.stdin, false, sink)
                .await
                .map_err(|e| {
                    self.unavailable(format!("cannot run {}: {e}", self.config.program.display()))
                })?;
            if run.pty {
                return if exit.status == 255 {
                    Err(self.unavailable(format!(
                        "ssh answered 255: the connection failed (or the command itself exited \
                         255) {}",
                        exit.stderr.trim()
                    )))
                } else {
                    Ok(exit.status)
                };
            }
            let reported = exit
                .stderr
                .lines()
                .filter_map(|l| l.trim().strip_prefix(EXIT_MARKER))
                .filter_map(|n| n.parse::<i32>().ok())
                .next_back();
            match reported {
                Some(status) => Ok(status),
                None => {
                    let said = exit.stderr.trim();
                    Err(self.unavailable(if said.is_empty() {
                        format!(
                            "the connection ended before the command did (ssh exit {})",
                            exit.status
                        )
                    } else {
                        said.to_owned()
                    }))
                }
            }
        })
    }

    fn attach_argv(&self, _session: &str, argv: &[String], pty: bool) -> Result<ClientArgv> {
        self.prepare()?;
        let mut full = vec![self.config.program.display().to_string()];
        full.extend(self.args_for(argv, pty, false));
        Ok((full, false))
    }

    /// Makes sure the backend's master connection exists before a background client starts:
    /// a client that becomes the master itself (`ControlMaster=auto`, `ControlPersist`)
    /// forks into the background and can swallow stdin written during that start.
    fn ensure<'a>(&'a self, _session: &'a str) -> BackendFuture<'a, ()> {
        Box::pin(async move {
            self.prepare()?;
            let mut check = self.options(false);
            check.extend(["-O".into(), "check".into(), self.destination()]);
            let alive = tokio::process::Command::new(&self.config.program)
                .args(&check)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .await
                .is_ok_and(|s| s.success());
            if alive {
                return Ok(());
            }
            let sink = crate::stream::OutputSink::new(4096);
            let run = TargetRun {
                argv: vec!["true".into()],
                stdin: None,
                pty: false,
                keep_detached: false,
            };
            self.run("ensure", run, sink).await.map(|_| ())
        })
    }

    fn health(&self) -> BackendFuture<'_, ()> {
        Box::pin(async move {
            let sink = crate::stream::OutputSink::new(4096);
            let run = TargetRun {
                argv: vec!["bash".into(), "-c".into(), "echo paddock-ok".into()],
                stdin: None,
                pty: false,
                keep_detached: false,
            };
            let status = self.run("health", run, sink.clone()).await?;
            let text = sink.finish().0;
            if status == 0 && text.contains("paddock-ok") {
                Ok(())
            } else {
                Err(self.unavailable(format!(
                    "bash on the host answered {status}: {}",
                    text.trim()
                )))
            }
        })
    }

    fn close_session<'a>(&'a self, session: &'a str) -> BackendFuture<'a, ()> {
        Box::pin(async move {
            crate::shell::check_session(session)?;
            let sink = crate::stream::OutputSink::new(4096);
            let dir = format!("{}/sessions/{session}", self.state_root());
            let run = TargetRun {
                argv: vec!["rm".into(), "-rf".into(), "--".into(), dir],
                stdin: None,
                pty: false,
                keep_detached: false,
            };
            self.run(session, run, sink).await.map(|_| ())
        })
    }
}
