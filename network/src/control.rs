//! The egress proxy's control socket (`$PADDOCK_HOME/network/proxy.sock`): what engines say to
//! the one proxy of their state directory, as JSON lines, and the client they say it with.
//!
//! - `register`: serve an environment's proxy socket (the agent's directory's `egress.sock`)
//!   for a session and backend, under a policy. Idempotent: engines register on first use in
//!   each process, so a proxy that was restarted is told again.
//! - `approver`: the connection stays open and the proxy asks, over it, about hosts in neither
//!   list (`unknown = "ask"`); the engine answers through its approver chain.
//! - `stats`: requests, refusals and bytes per session and backend.
//! - `unregister`: the session closed.
//!
//! The socket's directory is the owner's alone (0700): the registrations carry policies.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

use crate::proxy::Totals;

/// The control socket's name in `$PADDOCK_HOME/network/`.
pub const CONTROL_SOCKET: &str = "proxy.sock";
/// How long a starting proxy may take to answer.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// The directory of a state directory's proxy.
pub fn network_dir(home: &Path) -> PathBuf {
    home.join("network")
}

/// `[network]` as sent to the proxy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct WirePolicy {
    pub allow: Vec<String>,
    pub deny: Vec<String>,
    /// `deny` or `ask`.
    pub unknown: String,
    pub allow_private: bool,
    pub resolve: BTreeMap<String, String>,
    /// Headers added for hosts, their values expanded from the engine's environment.
    #[serde(default)]
    pub credentials: Vec<WireCredential>,
}

/// One `[[network.credentials]]` entry with its value resolved. Never printed.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireCredential {
    pub host: String,
    pub header: String,
    pub value: String,
}

impl std::fmt::Debug for WireCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WireCredential")
            .field("host", &self.host)
            .field("header", &self.header)
            .field("value", &"<redacted>")
            .finish()
    }
}

/// One environment's proxy socket and whose it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registration {
    pub session: String,
    pub backend: String,
    /// The Unix socket the proxy listens on (the environment's agent carries connections to it).
    pub listen: PathBuf,
    pub policy: WirePolicy,
    /// The registering engine's build ([`build_identity`]): a proxy of another build retires
    /// and a new one serves, so that an upgrade never leaves an old proxy in place.
    #[serde(default)]
    pub build: String,
}

/// The reply of a proxy of another build to `register` (it exits right after).
pub const STALE: &str = "stale proxy build";

/// What tells one build of the program from another: its version, size and modification time.
pub fn build_identity(exe: &Path) -> String {
    let meta = std::fs::metadata(exe).ok();
    let size = meta.as_ref().map_or(0, std::fs::Metadata::len);
    let modified = meta
        .and_then(|m| m.modified().ok())
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    format!("{}-{size}-{modified}", env!("CARGO_PKG_VERSION"))
}

/// What an engine says.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum ControlRequest {
    Ping,
    Register(Registration),
    Unregister {
        listen: PathBuf,
    },
    Stats,
    /// This connection answers the proxy's questions about `session`'s unknown hosts.
    Approver {
        session: String,
    },
}

/// One line of counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionTotals {
    pub session: String,
    pub backend: String,
    #[serde(flatten)]
    pub totals: Totals,
}

/// What the proxy answers a request.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ControlReply {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stats: Vec<SessionTotals>,
}

impl ControlReply {
    pub fn ok() -> Self {
        Self {
            ok: true,
            error: None,
            stats: Vec::new(),
        }
    }

    pub fn failed(error: String) -> Self {
        Self {
            ok: false,
            error: Some(error),
            stats: Vec::new(),
        }
    }
}

/// A question the proxy asks an approver connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostQuestion {
    pub id: u64,
    pub session: String,
    pub backend: String,
    pub host: String,
    pub port: u16,
    #[serde(default)]
    pub run_id: Option<String>,
}

/// The engine's answer. `remember`: the rest of the session may reach the host unasked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostAnswer {
    pub id: u64,
    pub allow: bool,
    #[serde(default)]
    pub remember: bool,
}

/// What went wrong talking to the proxy.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("the egress proxy of {home} could not be started: {reason}")]
    Start { home: String, reason: String },
    #[error("the egress proxy of {home} did not answer: {reason}")]
    Io { home: String, reason: String },
    #[error("the egress proxy refused: {0}")]
    Refused(String),
}

/// An engine's way to its state directory's proxy, started when none answers.
#[derive(Debug, Clone)]
pub struct ProxyClient {
    home: PathBuf,
    /// The program that becomes the proxy: `EXE __egress-proxy --home HOME`.
    exe: PathBuf,
}

impl ProxyClient {
    pub fn new(home: PathBuf, exe: PathBuf) -> Self {
        Self { home, exe }
    }

    fn socket(&self) -> PathBuf {
        network_dir(&self.home).join(CONTROL_SOCKET)
    }

    fn io(&self, err: impl std::fmt::Display) -> ControlError {
        ControlError::Io {
            home: self.home.display().to_string(),
            reason: err.to_string(),
        }
    }

    /// A connection to the proxy, starting it (detached, in its own process group) when the
    /// socket does not answer.
    pub async fn connect(&self) -> Result<UnixStream, ControlError> {
        if let Ok(stream) = UnixStream::connect(self.socket()).await {
            return Ok(stream);
        }
        self.start()?;
        let until = tokio::time::Instant::now() + START_TIMEOUT;
        loop {
            match UnixStream::connect(self.socket()).await {
                Ok(stream) => return Ok(stream),
                Err(err) if tokio::time::Instant::now() >= until => {
                    return Err(ControlError::Start {
                        home: self.home.display().to_string(),
                        reason: format!(
                            "it does not answer on {} after {} s ({err}); see {}",
                            self.socket().display(),
                            START_TIMEOUT.as_secs(),
                            self.log().display()
                        ),
                    });
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    }

    fn log(&self) -> PathBuf {
        self.home.join("logs").join("egress-proxy.log")
    }

    fn start(&self) -> Result<(), ControlError> {
        use std::os::unix::process::CommandExt;
        let failed = |reason: String| ControlError::Start {
            home: self.home.display().to_string(),
            reason,
        };
        let logs = self.home.join("logs");
        std::fs::create_dir_all(&logs)
            .map_err(|e| failed(format!("cannot make {}: {e}", logs.display())))?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log())
            .map_err(|e| failed(format!("cannot open {}: {e}", self.log().display())))?;
        let mut child = std::process::Command::new(&self.exe)
            .arg("__egress-proxy")
            .arg("--home")
            .arg(&self.home)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(log)
            // Its own process group: a Ctrl-C at the engine's terminal is not for it.
            .process_group(0)
            .spawn()
            .map_err(|e| failed(format!("cannot run {}: {e}", self.exe.display())))?;
        // Reaped by a thread so that it never lingers as a zombie of a long-lived engine; the
        // proxy itself lives on (it does not exit until its sessions are gone).
        std::thread::spawn(move || {
            let _ = child.wait();
        });
        Ok(())
    }

    /// Sends one request and reads its reply; once more to a new proxy when the one that
    /// answered the connection exited meanwhile (it had nothing left to serve).
    pub async fn request(&self, request: &ControlRequest) -> Result<ControlReply, ControlError> {
        match self.request_once(request).await {
            Err(ControlError::Io { .. }) => self.request_once(request).await,
            other => other,
        }
    }

    async fn request_once(&self, request: &ControlRequest) -> Result<ControlReply, ControlError> {
        let stream = self.connect().await?;
        let (reader, mut writer) = stream.into_split();
        let mut line = serde_json::to_string(request).map_err(|e| self.io(e))?;
        line.push('\n');
        writer
            .write_all(line.as_bytes())
            .await
            .map_err(|e| self.io(e))?;
        let mut answer = String::new();
        BufReader::new(reader)
            .read_line(&mut answer)
            .await
            .map_err(|e| self.io(e))?;
        let reply: ControlReply = serde_json::from_str(&answer)
            .map_err(|e| self.io(format!("unreadable reply {answer:?}: {e}")))?;
        if !reply.ok {
            return Err(ControlError::Refused(reply.error.unwrap_or_default()));
        }
        Ok(reply)
    }

    /// Registers an environment (with this client's build), replacing a proxy of another build.
    pub async fn register(&self, mut registration: Registration) -> Result<(), ControlError> {
        registration.build = build_identity(&self.exe);
        let request = ControlRequest::Register(registration);
        match self.request(&request).await {
            Err(ControlError::Refused(reason)) if reason.starts_with(STALE) => {
                tracing::info!(home = %self.home.display(), "replacing an egress proxy of another build");
                let until = tokio::time::Instant::now() + Duration::from_secs(3);
                while self.socket().exists() && tokio::time::Instant::now() < until {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                self.request(&request).await.map(drop)
            }
            other => other.map(drop),
        }
    }

    /// Counts per session and backend, from a proxy that is running (none is started).
    pub async fn stats_if_running(&self) -> Option<Vec<SessionTotals>> {
        let stream = UnixStream::connect(self.socket()).await.ok()?;
        drop(stream);
        self.request(&ControlRequest::Stats)
            .await
            .ok()
            .map(|r| r.stats)
    }

    /// A connection over which the proxy asks about `session`'s unknown hosts, accepted by the
    /// proxy when this returns (a question asked from then on reaches it).
    pub async fn approvals(&self, session: &str) -> Result<Approvals, ControlError> {
        let stream = self.connect().await?;
        let (reader, mut writer) = stream.into_split();
        let mut line = serde_json::to_string(&ControlRequest::Approver {
            session: session.to_owned(),
        })
        .map_err(|e| self.io(e))?;
        line.push('\n');
        writer
            .write_all(line.as_bytes())
            .await
            .map_err(|e| self.io(e))?;
        let mut lines = BufReader::new(reader).lines();
        let first = lines.next_line().await.map_err(|e| self.io(e))?;
        let accepted = first
            .as_deref()
            .and_then(|l| serde_json::from_str::<ControlReply>(l).ok())
            .is_some_and(|r| r.ok);
        if !accepted {
            return Err(ControlError::Refused(format!(
                "the approver connection was not accepted ({first:?})"
            )));
        }
        Ok(Approvals { lines, writer })
    }
}

/// An accepted approver connection ([`ProxyClient::approvals`]).
pub struct Approvals {
    lines: tokio::io::Lines<BufReader<tokio::net::unix::OwnedReadHalf>>,
    writer: tokio::net::unix::OwnedWriteHalf,
}

impl Approvals {
    /// Answers each question with `decide`, one at a time, until the proxy goes away.
    pub async fn serve<F, Fut>(mut self, decide: F) -> std::io::Result<()>
    where
        F: Fn(HostQuestion) -> Fut,
        Fut: std::future::Future<Output = HostAnswer>,
    {
        while let Some(text) = self.lines.next_line().await? {
            let Ok(question) = serde_json::from_str::<HostQuestion>(&text) else {
                continue;
            };
            let answer = decide(question).await;
            let mut line = serde_json::to_string(&answer).map_err(std::io::Error::other)?;
            line.push('\n');
            self.writer.write_all(line.as_bytes()).await?;
        }
        Ok(())
    }
}
