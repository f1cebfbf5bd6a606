//! The engine's side of the egress proxy (`network = "proxy"`): the state directory's proxy
//! process is started when a proxied environment first needs it, told which environment socket
//! to serve under the policy's `[network]`, and answered when it asks about a host in neither
//! list (`unknown = "ask"`) through the same approver chain as commands, with the script's
//! clock paused meanwhile.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use paddock_backends::egress::EgressHost;
use paddock_backends::{BackendError, BackendFuture};
use paddock_network::control::{
    ControlRequest, HostAnswer, HostQuestion, ProxyClient, Registration, SessionTotals, WirePolicy,
};

use crate::approval::ApprovalGate;
use crate::policy::{BackendConfig, Policy};
use crate::vocabulary::CallContext;

/// An engine re-registers a socket it registered longer ago than this (a proxy that was
/// restarted meanwhile learns of it again).
const REGISTER_AGAIN_AFTER: Duration = Duration::from_secs(60);

/// The calls of each session now running, newest last: whom a question about a host is for.
#[derive(Default)]
struct InFlight {
    calls: Mutex<HashMap<String, Vec<(u64, CallContext)>>>,
    next: std::sync::atomic::AtomicU64,
}

/// A running call, known to the proxy's questions until dropped.
pub struct TrackedCall {
    in_flight: Arc<InFlight>,
    session: String,
    id: u64,
}

impl Drop for TrackedCall {
    fn drop(&mut self) {
        if let Ok(mut calls) = self.in_flight.calls.lock()
            && let Some(list) = calls.get_mut(&self.session)
        {
            list.retain(|(id, _)| *id != self.id);
            if list.is_empty() {
                calls.remove(&self.session);
            }
        }
    }
}

/// One engine's link to its state directory's egress proxy.
pub struct Egress {
    client: ProxyClient,
    policy: WirePolicy,
    /// `[[network.credentials]]` as written (host, header, value with `${VAR}`): expanded
    /// from the engine's environment when an environment is registered.
    credentials: Vec<(String, String, String)>,
    gate: Arc<ApprovalGate>,
    state_root: PathBuf,
    in_flight: Arc<InFlight>,
    /// Sockets this engine registered, and when.
    registered: Mutex<HashMap<PathBuf, Instant>>,
    /// Sessions whose questions this engine answers.
    answering: Mutex<HashMap<String, tokio::task::JoinHandle<()>>>,
}

/// Hosts answered "always", kept in the state directory (the policy file is not rewritten for
/// them): they join `allow` when the engine registers an environment.
fn always_file(state_root: &Path) -> PathBuf {
    state_root.join("approvals").join("hosts.json")
}

impl Egress {
    /// The egress of `policy`'s `[network]`, when any backend of it is proxied or `[network]`
    /// lets something through (then `http_request` is offered).
    pub fn of_policy(
        policy: &Policy,
        state_root: &Path,
        exe: &Path,
        gate: Arc<ApprovalGate>,
    ) -> Option<Arc<Self>> {
        // The built-in local backend has no network: only declared ones can be proxied.
        let proxied = policy.backends.values().any(BackendConfig::is_proxied);
        let net = &policy.network;
        let opens =
            !net.allow.is_empty() || net.unknown.as_ref().is_some_and(|u| u.get_ref() == "ask");
        if !proxied && !opens {
            return None;
        }
        let strings = |list: &[toml::Spanned<String>]| {
            list.iter().map(|s| s.get_ref().clone()).collect::<Vec<_>>()
        };
        let wire = WirePolicy {
            allow: strings(&net.allow),
            deny: strings(&net.deny),
            unknown: net
                .unknown
                .as_ref()
                .map_or_else(|| "deny".to_owned(), |u| u.get_ref().clone()),
            allow_private: net.allow_private,
            resolve: net
                .resolve
                .iter()
                .map(|(name, ip)| (name.clone(), ip.get_ref().clone()))
                .collect(),
            credentials: Vec::new(),
        };
        let credentials = net
            .credentials
            .iter()
            .map(|c| {
                (
                    c.host.get_ref().clone(),
                    c.header.get_ref().clone(),
                    c.value.get_ref().clone(),
                )
            })
            .collect();
        Some(Arc::new(Self {
            client: ProxyClient::new(state_root.to_path_buf(), exe.to_path_buf()),
            policy: wire,
            credentials,
            gate,
            state_root: state_root.to_path_buf(),
            in_flight: Arc::default(),
            registered: Mutex::default(),
            answering: Mutex::default(),
        }))
    }

    /// The backend `name`'s way to the proxy.
    pub fn for_backend(self: &Arc<Self>, name: &str) -> Arc<dyn EgressHost> {
        Arc::new(BackendEgress {
            shared: self.clone(),
            backend: name.to_owned(),
        })
    }

    /// Makes `ctx` the one a question about a host of its session is asked through, while it
    /// runs.
    pub fn track(&self, ctx: &CallContext) -> TrackedCall {
        let id = self
            .in_flight
            .next
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Ok(mut calls) = self.in_flight.calls.lock() {
            calls
                .entry(ctx.session.clone())
                .or_default()
                .push((id, ctx.clone()));
        }
        TrackedCall {
            in_flight: self.in_flight.clone(),
            session: ctx.session.clone(),
            id,
        }
    }

    /// Whether `[network]` lets anything through (else `http_request` would refuse every URL,
    /// and is not offered).
    pub fn offers_web(&self) -> bool {
        !self.policy.allow.is_empty() || self.policy.unknown == "ask"
    }

    /// The socket through which `http_request` reaches the proxy for `session`, served under
    /// the policy as `backend = "http_request"`; it goes with the session's directory.
    pub async fn web_socket(self: &Arc<Self>, session: &str) -> Result<PathBuf, BackendError> {
        let dir = paddock_backends::shell::session_dir(&self.state_root, session)?;
        let listen = dir.join("egress-web.sock");
        self.serve("http_request", session, &listen).await?;
        Ok(listen)
    }

    /// Requests, refusals and bytes per session, from the proxy if one runs (none is started).
    pub async fn totals(state_root: &Path) -> Vec<SessionTotals> {
        // Never started from here, so no program is needed.
        ProxyClient::new(state_root.to_path_buf(), PathBuf::new())
            .stats_if_running()
            .await
            .unwrap_or_default()
    }

    /// The policy sent to the proxy: hosts answered "always" allowed, credentials expanded.
    fn policy_to_send(&self) -> Result<WirePolicy, String> {
        let mut policy = self.policy.clone();
        for (host, header, value) in &self.credentials {
            policy
                .credentials
                .push(paddock_network::control::WireCredential {
                    host: host.clone(),
                    header: header.clone(),
                    value: crate::policy::expand_credential(value)?,
                });
        }
        let always: Vec<String> = std::fs::read(always_file(&self.state_root))
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default();
        for host in always {
            if !policy.allow.contains(&host) {
                policy.allow.push(host);
            }
        }
        Ok(policy)
    }

    async fn serve(
        self: &Arc<Self>,
        backend: &str,
        session: &str,
        listen: &Path,
    ) -> Result<(), BackendError> {
        let fresh = self.registered.lock().is_ok_and(|registered| {
            registered
                .get(listen)
                .is_some_and(|at| at.elapsed() < REGISTER_AGAIN_AFTER)
        });
        if fresh && self.answers_for(session) {
            return Ok(());
        }
        let registration = Registration {
            session: session.to_owned(),
            backend: backend.to_owned(),
            listen: listen.to_path_buf(),
            policy: self
                .policy_to_send()
                .map_err(|reason| BackendError::Unavailable {
                    kind: "network".into(),
                    name: backend.to_owned(),
                    reason,
                })?,
            build: String::new(),
        };
        self.client
            .register(registration)
            .await
            .map_err(|err| BackendError::Unavailable {
                kind: "network".into(),
                name: backend.to_owned(),
                reason: format!("network = \"proxy\": {err}"),
            })?;
        if let Ok(mut registered) = self.registered.lock() {
            registered.insert(listen.to_path_buf(), Instant::now());
        }
        self.answer_for(session).await
    }

    /// Whether this engine has a live connection answering `session`'s questions (or needs
    /// none).
    fn answers_for(&self, session: &str) -> bool {
        self.policy.unknown != "ask"
            || self
                .answering
                .lock()
                .is_ok_and(|a| a.get(session).is_some_and(|task| !task.is_finished()))
    }

    /// Opens the connection over which the proxy asks about `session`'s unknown hosts; the
    /// proxy has accepted it when this returns, so no question of the next command is missed.
    async fn answer_for(self: &Arc<Self>, session: &str) -> Result<(), BackendError> {
        if self.answers_for(session) {
            return Ok(());
        }
        let approvals =
            self.client
                .approvals(session)
                .await
                .map_err(|err| BackendError::Unavailable {
                    kind: "network".into(),
                    name: session.to_owned(),
                    reason: format!("network.unknown = \"ask\": {err}"),
                })?;
        let this = self.clone();
        let task = tokio::spawn(async move {
            let decider = this.clone();
            let served = approvals
                .serve(move |question| {
                    let decider = decider.clone();
                    async move { decider.decide(question).await }
                })
                .await;
            if let Err(err) = served {
                tracing::debug!(%err, "egress approvals connection ended");
            }
        });
        if let Ok(mut answering) = self.answering.lock() {
            answering.insert(session.to_owned(), task);
        }
        Ok(())
    }

    /// A host in neither list: asked through the session's newest running call (its MCP
    /// client, its paused clock), else the policy's approver, else nobody (no).
    async fn decide(&self, question: HostQuestion) -> HostAnswer {
        let ctx = self
            .in_flight
            .calls
            .lock()
            .ok()
            .and_then(|calls| calls.get(&question.session)?.last().map(|(_, c)| c.clone()))
            .unwrap_or_else(|| CallContext {
                session: question.session.clone(),
                ..CallContext::default()
            });
        let answer = self
            .gate
            .check_host(&question.host, question.port, &question.backend, &ctx)
            .await;
        if answer == crate::approval::HostDecision::Always {
            self.remember_always(&question.host);
        }
        HostAnswer {
            id: question.id,
            allow: answer.allows(),
            remember: answer.remembered(),
        }
    }

    fn remember_always(&self, host: &str) {
        let file = always_file(&self.state_root);
        let mut hosts: Vec<String> = std::fs::read(&file)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default();
        if hosts.iter().any(|h| h == host) {
            return;
        }
        hosts.push(host.to_owned());
        if let Some(dir) = file.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let _ = paddock_backends::processes::write_json_atomic(&file, &hosts);
    }

    async fn release(&self, listen: &Path) {
        if let Ok(mut registered) = self.registered.lock() {
            registered.remove(listen);
        }
        let request = ControlRequest::Unregister {
            listen: listen.to_path_buf(),
        };
        // Only a running proxy is told; none is started to hear it.
        if tokio::net::UnixStream::connect(
            paddock_network::control::network_dir(&self.state_root)
                .join(paddock_network::control::CONTROL_SOCKET),
        )
        .await
        .is_ok()
        {
            let _ = self.client.request(&request).await;
        }
    }
}

/// [`Egress`] for one backend.
struct BackendEgress {
    shared: Arc<Egress>,
    backend: String,
}

impl EgressHost for BackendEgress {
    fn serve<'a>(&'a self, session: &'a str, listen: &'a Path) -> BackendFuture<'a, ()> {
        Box::pin(self.shared.serve(&self.backend, session, listen))
    }

    fn release<'a>(&'a self, listen: &'a Path) -> BackendFuture<'a, ()> {
        Box::pin(async move {
            self.shared.release(listen).await;
            Ok(())
        })
    }

    /// A credential may be for an `https://` host, whose TLS the proxy then terminates.
    fn terminates_tls(&self) -> bool {
        !self.shared.credentials.is_empty()
    }
}
