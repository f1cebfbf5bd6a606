//! The egress proxy's core: one listener speaking HTTP/1 (absolute-form and origin-form with
//! `Host`) and `CONNECT` tunnels, every destination judged by an [`EgressPolicy`] before a
//! connection is made: the name's rules, a human for `unknown = "ask"`, then the addresses
//! (pins, literals however spelled, or what the resolver answered). A refused request gets
//! HTTP 403 with a body naming the host and the rule, and is reported to the [`Observer`].
//!
//! A connection carried by an environment's agent is attributed to the command that opened it
//! (the run id the agent found), and counted (requests, refusals, bytes) for
//! `paddock sessions list`.
//!
//! A `CONNECT` tunnel carries TLS only, and its ClientHello must name the host the tunnel was
//! allowed for (rustls reads the hello; the bytes go on unchanged): no domain fronting, no
//! other protocol through an allowed name.
//!
//! A host the policy adds a credential to is the exception: its tunnel is terminated with a
//! leaf certificate of the home's CA ([`crate::authority`]), each request inside gets the
//! header, and goes on over a new TLS connection to the origin, whose certificate is verified
//! against the system's roots. Without a CA such a tunnel is refused, never opened without the
//! credential.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HOST, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

use crate::egress::{EgressPolicy, Refusal, Verdict};

/// What the proxy answers with.
pub type Body = BoxBody<Bytes, hyper::Error>;

/// One decision, for the log (`$PADDOCK_HOME/logs/network.jsonl` once wired in).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    pub host: String,
    pub port: u16,
    /// The request's method, or `CONNECT`.
    pub method: String,
    pub rule: String,
    /// `allow` or `deny`.
    pub decision: &'static str,
    /// The run the client named in its proxy URL, when it did.
    pub run_id: Option<String>,
}

/// What one proxy has carried, for `paddock sessions list`.
#[derive(Debug, Default)]
pub struct Counters {
    /// HTTP requests and `CONNECT` tunnels judged.
    pub requests: AtomicU64,
    pub refused: AtomicU64,
    /// Bytes from the environment to the proxy, and back.
    pub bytes_up: AtomicU64,
    pub bytes_down: AtomicU64,
}

/// A snapshot of [`Counters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Totals {
    pub requests: u64,
    pub refused: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
}

impl Counters {
    pub fn totals(&self) -> Totals {
        Totals {
            requests: self.requests.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            bytes_up: self.bytes_up.load(Ordering::Relaxed),
            bytes_down: self.bytes_down.load(Ordering::Relaxed),
        }
    }
}

/// A client connection whose bytes are counted both ways.
struct Counted<S> {
    inner: S,
    counters: Arc<Counters>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let read = buf.filled().len().saturating_sub(before) as u64;
        self.counters.bytes_up.fetch_add(read, Ordering::Relaxed);
        polled
    }
}

impl<S> Counted<S> {
    /// Counts what a write toward the client moved.
    fn written(&self, polled: Poll<std::io::Result<usize>>) -> Poll<std::io::Result<usize>> {
        if let Poll::Ready(Ok(n)) = &polled {
            self.counters
                .bytes_down
                .fetch_add(*n as u64, Ordering::Relaxed);
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.written(polled)
    }

    // Vectored writes pass through: without them hyper copies every body chunk behind its
    // headers into one buffer before writing (a whole extra copy of a download).
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.written(polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Receives every decision the proxy makes.
pub trait Observer: Send + Sync {
    fn attempt(&self, attempt: &Attempt);
}

/// Finds the command a client connection was opened by, when a decision needs it (a refusal's
/// log line, a question to a human): the agent that carried it knows.
pub trait RunLookup: Send + Sync {
    fn run_id(&self) -> Pin<Box<dyn Future<Output = Option<String>> + Send + '_>>;
}

async fn run_of(owner: Option<&dyn RunLookup>) -> Option<String> {
    match owner {
        Some(owner) => owner.run_id().await,
        None => None,
    }
}

/// The upstream connection of a client connection's last plain request: reused for the next
/// one to the same destination (a kept client connection costs no new upstream connection).
type Upstream = Arc<tokio::sync::Mutex<Option<((String, u16), UpstreamSender)>>>;
type UpstreamSender = hyper::client::conn::http1::SendRequest<Incoming>;

/// Decides a host in neither list when `unknown = "ask"`; without one such hosts are denied.
pub trait HostApprover: Send + Sync {
    fn approve<'a>(
        &'a self,
        host: &'a str,
        port: u16,
        run_id: Option<&'a str>,
    ) -> Pin<Box<dyn Future<Output = bool> + Send + 'a>>;
}

/// A header the proxy adds to requests for the hosts of a glob (`[[network.credentials]]`).
pub struct Credential {
    hosts: crate::hosts::HostGlob,
    name: hyper::header::HeaderName,
    value: HeaderValue,
}

impl Credential {
    /// The entries of a registration, checked.
    pub fn all(entries: &[crate::control::WireCredential]) -> Result<Vec<Self>, String> {
        entries
            .iter()
            .map(|entry| {
                let mut value = HeaderValue::from_str(&entry.value)
                    .map_err(|_| format!("the value for {} is not a header value", entry.host))?;
                value.set_sensitive(true);
                Ok(Self {
                    hosts: crate::hosts::HostGlob::parse(&entry.host).map_err(|e| e.to_string())?,
                    name: entry
                        .header
                        .parse()
                        .map_err(|_| format!("{} is not a header name", entry.header))?,
                    value,
                })
            })
            .collect()
    }
}

/// The proxy: a policy, who hears of its decisions, who answers `ask`.
pub struct Proxy {
    policy: EgressPolicy,
    observer: Option<Arc<dyn Observer>>,
    approver: Option<Arc<dyn HostApprover>>,
    counters: Arc<Counters>,
    credentials: Vec<Credential>,
    /// Terminates the tunnels of hosts with a credential.
    authority: Option<Arc<crate::authority::Authority>>,
}

fn full(text: String) -> Body {
    Full::new(Bytes::from(text))
        .map_err(|never| match never {})
        .boxed()
}

fn answer(status: StatusCode, text: String) -> Response<Body> {
    let mut response = Response::new(full(text));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        "content-type",
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    // A refused client (a CONNECT above all) gets nothing more on this connection.
    headers.insert("connection", HeaderValue::from_static("close"));
    if status == StatusCode::FORBIDDEN {
        // Clients that show only the status line (pip: "403 Client Error: ...") still say who
        // refused.
        response
            .extensions_mut()
            .insert(hyper::ext::ReasonPhrase::from_static(
                b"Forbidden by the paddock egress proxy",
            ));
    }
    response
}

/// The port of a scheme when the request names none.
fn default_port(scheme: Option<&str>) -> u16 {
    match scheme {
        Some("https") => 443,
        _ => 80,
    }
}

/// The destination a request names: its authority (absolute-form, CONNECT) or its `Host`.
fn destination_of(request: &Request<Incoming>) -> Option<(String, u16)> {
    let default = if request.method() == Method::CONNECT {
        443
    } else {
        default_port(request.uri().scheme_str())
    };
    if let Some(authority) = request.uri().authority() {
        return Some((
            authority.host().to_owned(),
            authority.port_u16().unwrap_or(default),
        ));
    }
    let host = request.headers().get(HOST)?.to_str().ok()?;
    let authority: hyper::http::uri::Authority = host.parse().ok()?;
    Some((
        authority.host().to_owned(),
        authority.port_u16().unwrap_or(default),
    ))
}

impl Proxy {
    pub fn new(policy: EgressPolicy) -> Self {
        Self {
            policy,
            observer: None,
            approver: None,
            counters: Arc::default(),
            credentials: Vec::new(),
            authority: None,
        }
    }

    /// The CA with which tunnels to hosts with a credential are terminated.
    pub fn with_authority(mut self, authority: Arc<crate::authority::Authority>) -> Self {
        self.authority = Some(authority);
        self
    }

    pub fn with_credentials(mut self, credentials: Vec<Credential>) -> Self {
        self.credentials = credentials;
        self
    }

    fn credential_for(&self, host: &str) -> Option<&Credential> {
        self.credentials.iter().find(|c| c.hosts.matches(host))
    }

    /// What this proxy has carried so far.
    pub fn counters(&self) -> &Arc<Counters> {
        &self.counters
    }

    pub fn with_observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = Some(observer);
        self
    }

    pub fn with_approver(mut self, approver: Arc<dyn HostApprover>) -> Self {
        self.approver = Some(approver);
        self
    }

    /// Serves connections from `listener` until it fails; each connection is a task.
    pub async fn serve(self: Arc<Self>, listener: TcpListener) -> std::io::Result<()> {
        loop {
            let (stream, _) = listener.accept().await?;
            let _ = stream.set_nodelay(true);
            tokio::spawn(self.clone().serve_connection(stream, None));
        }
    }

    /// Serves one client connection (TCP, or a Unix stream an agent carried) to its end;
    /// `owner`: who finds the command it was opened by.
    pub async fn serve_connection<S>(self: Arc<Self>, stream: S, owner: Option<Arc<dyn RunLookup>>)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let stream = Counted {
            inner: stream,
            counters: self.counters.clone(),
        };
        let this = self.clone();
        let upstream: Upstream = Arc::default();
        let service = hyper::service::service_fn(move |request| {
            let this = this.clone();
            let owner = owner.clone();
            let upstream = upstream.clone();
            async move { Ok::<_, hyper::Error>(this.handle(request, owner, upstream).await) }
        });
        if let Err(err) = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(stream), service)
            .with_upgrades()
            .await
        {
            tracing::debug!(%err, "proxy connection ended");
        }
    }

    fn report(&self, attempt: Attempt) {
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        if attempt.decision == "deny" {
            self.counters.refused.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(observer) = &self.observer {
            observer.attempt(&attempt);
        }
    }

    /// Where `host:port` may be reached, or why not.
    async fn judge(
        &self,
        host: &str,
        port: u16,
        owner: Option<&dyn RunLookup>,
    ) -> Result<(SocketAddr, String), Refusal> {
        let rule = match self.policy.judge_name(host) {
            Verdict::Refuse(refusal) => return Err(refusal),
            Verdict::Allow { rule } => rule,
            Verdict::Ask => {
                let approved = match &self.approver {
                    Some(approver) => {
                        let run_id = run_of(owner).await;
                        approver.approve(host, port, run_id.as_deref()).await
                    }
                    None => false,
                };
                if !approved {
                    return Err(Refusal {
                        rule: "network.unknown".into(),
                        reason: format!(
                            "{host} is in neither [network] allow nor deny, and nobody approved \
                             it"
                        ),
                    });
                }
                "network.unknown: approved".to_owned()
            }
        };
        let addresses: Vec<IpAddr> = match self.policy.pinned_or_literal(host) {
            Some(ip) => vec![ip],
            None => tokio::net::lookup_host((host, port))
                .await
                .map(|found| found.map(|a| a.ip()).collect())
                .unwrap_or_default(),
        };
        self.policy.judge_addresses(host, &addresses)?;
        let first = addresses.first().copied().ok_or_else(|| Refusal {
            rule: "network.resolve".into(),
            reason: format!("{host} resolves to no address"),
        })?;
        Ok((SocketAddr::new(first, port), rule))
    }

    async fn handle(
        self: Arc<Self>,
        request: Request<Incoming>,
        owner: Option<Arc<dyn RunLookup>>,
        upstream: Upstream,
    ) -> Response<Body> {
        let method = request.method().to_string();
        let Some((host, port)) = destination_of(&request) else {
            return answer(
                StatusCode::BAD_REQUEST,
                "paddock proxy: the request names no host (absolute URL, CONNECT host:port or \
                 a Host header)\n"
                    .into(),
            );
        };
        let attempt = |rule: &str, decision, run_id| Attempt {
            host: host.clone(),
            port,
            method: method.clone(),
            rule: rule.to_owned(),
            decision,
            run_id,
        };
        let (target, rule) = match self.judge(&host, port, owner.as_deref()).await {
            Ok(allowed) => allowed,
            Err(refusal) => {
                // Found before the answer: the client's connection (and its owner) is still
                // there while it waits for it.
                let run_id = run_of(owner.as_deref()).await;
                self.report(attempt(&refusal.rule, "deny", run_id));
                return answer(
                    StatusCode::FORBIDDEN,
                    format!(
                        "paddock proxy: {host}:{port} refused by {}: {}\n",
                        refusal.rule, refusal.reason
                    ),
                );
            }
        };
        let credential = self.credential_for(&host);
        if request.method() != Method::CONNECT {
            self.report(attempt(&rule, "allow", None));
            let added = credential.map(|c| (c.name.clone(), c.value.clone()));
            let origin = Origin {
                target,
                host: &host,
                port,
                tls: false,
            };
            return forward(request, origin, &upstream, added).await;
        }
        if let Some(credential) = credential {
            // A header inside TLS: the tunnel is terminated with the home's CA. Without one it
            // is refused, never opened without the credential.
            let Some(authority) = self.authority.clone() else {
                let rule = "network.credentials";
                let run_id = run_of(owner.as_deref()).await;
                self.report(attempt(rule, "deny", run_id));
                return answer(
                    StatusCode::FORBIDDEN,
                    format!(
                        "paddock proxy: {host}:{port} refused by {rule}: the policy adds a \
                         credential for this host, and this proxy has no CA to terminate its \
                         TLS with\n"
                    ),
                );
            };
            self.report(attempt(&rule, "allow", None));
            let added = (credential.name.clone(), credential.value.clone());
            let tunnel = attempt("", "allow", None);
            tokio::spawn(async move {
                match hyper::upgrade::on(request).await {
                    Ok(upgraded) => {
                        let terminated = Terminated {
                            target,
                            authority,
                            credential: added,
                        };
                        self.terminate(TokioIo::new(upgraded), terminated, tunnel, owner)
                            .await;
                    }
                    Err(err) => tracing::debug!(%err, "proxy: CONNECT upgrade failed"),
                }
            });
            return Response::new(full(String::new()));
        }
        self.report(attempt(&rule, "allow", None));
        let upstream = match TcpStream::connect(target).await {
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                stream
            }
            Err(err) => {
                return answer(
                    StatusCode::BAD_GATEWAY,
                    format!("paddock proxy: cannot connect to {host}:{port} ({target}): {err}\n"),
                );
            }
        };
        let tunnel = attempt("", "allow", None);
        tokio::spawn(async move {
            match hyper::upgrade::on(request).await {
                Ok(upgraded) => {
                    self.tunnel(TokioIo::new(upgraded), upstream, tunnel, owner.as_deref())
                        .await;
                }
                Err(err) => tracing::debug!(%err, "proxy: CONNECT upgrade failed"),
            }
        });
        Response::new(full(String::new()))
    }
}

/// Where a forwarded request goes.
#[derive(Clone, Copy)]
struct Origin<'a> {
    target: SocketAddr,
    host: &'a str,
    port: u16,
    /// Over TLS (a terminated tunnel's requests), the origin's certificate verified.
    tls: bool,
}

/// A new HTTP/1 connection to the origin, its driver a task of its own.
async fn connect_upstream(origin: Origin<'_>) -> Result<UpstreamSender, String> {
    let stream = TcpStream::connect(origin.target)
        .await
        .map_err(|e| e.to_string())?;
    let _ = stream.set_nodelay(true);
    if !origin.tls {
        return drive(TokioIo::new(stream)).await;
    }
    let name = rustls::pki_types::ServerName::try_from(
        origin
            .host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned(),
    )
    .map_err(|e| e.to_string())?;
    let tls = tokio_rustls::TlsConnector::from(crate::client::tls_config(None)?)
        .connect(name, stream)
        .await
        .map_err(|e| format!("TLS with the origin: {e}"))?;
    drive(TokioIo::new(tls)).await
}

async fn drive<T>(io: T) -> Result<UpstreamSender, String>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (sender, connection) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        if let Err(err) = connection.await {
            tracing::debug!(%err, "proxy: upstream connection ended");
        }
    });
    Ok(sender)
}

/// How long a tunnel's client may take to send its TLS ClientHello.
const HELLO_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// What a ClientHello may span before the tunnel is refused.
const HELLO_MAX_BYTES: usize = 64 * 1024;

/// The server name of the TLS ClientHello a tunnel's client sends first, and the bytes read to
/// find it (sent on to the origin unchanged). `Err`: not TLS, or no hello in time.
async fn client_hello<S: AsyncRead + Unpin>(
    client: &mut S,
) -> Result<(Option<String>, Vec<u8>), String> {
    use tokio::io::AsyncReadExt;
    let mut acceptor = rustls::server::Acceptor::default();
    let mut seen = Vec::new();
    let mut chunk = vec![0u8; 4096];
    loop {
        let n = tokio::time::timeout(HELLO_TIMEOUT, client.read(&mut chunk))
            .await
            .map_err(|_| "no TLS ClientHello in time".to_owned())?
            .map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("the client closed the tunnel before a TLS ClientHello".into());
        }
        seen.extend_from_slice(&chunk[..n]);
        let mut fed = &chunk[..n];
        while !fed.is_empty() {
            acceptor.read_tls(&mut fed).map_err(|e| e.to_string())?;
        }
        match acceptor.accept() {
            Ok(Some(accepted)) => {
                let name = accepted.client_hello().server_name().map(str::to_owned);
                return Ok((name, seen));
            }
            Ok(None) if seen.len() < HELLO_MAX_BYTES => {}
            Ok(None) => return Err("the ClientHello is too large".into()),
            Err((err, _)) => return Err(format!("not a TLS ClientHello ({err})")),
        }
    }
}

/// Whether a ClientHello's server name is the CONNECT host's: the same name (an IP literal
/// host needs none: clients send no name for an address).
fn sni_matches(host: &str, sni: Option<&str>) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if bare.parse::<IpAddr>().is_ok() {
        return sni.is_none_or(|name| name.eq_ignore_ascii_case(bare));
    }
    sni.is_some_and(|name| {
        name.trim_end_matches('.')
            .eq_ignore_ascii_case(host.trim_end_matches('.'))
    })
}

impl Proxy {
    /// A CONNECT tunnel once allowed: the client's ClientHello must name the host it asked
    /// for (no domain fronting, no other protocol through an allowed name); then bytes both
    /// ways, untouched.
    async fn tunnel<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        mut client: S,
        mut upstream: TcpStream,
        attempt: Attempt,
        owner: Option<&dyn RunLookup>,
    ) {
        use tokio::io::AsyncWriteExt;
        let refusal = match client_hello(&mut client).await {
            Ok((name, _)) if !sni_matches(&attempt.host, name.as_deref()) => Some((
                "network.sni",
                format!(
                    "the TLS ClientHello names {}, not {}",
                    name.as_deref().unwrap_or("no server"),
                    attempt.host
                ),
            )),
            Ok((_, hello)) => {
                if upstream.write_all(&hello).await.is_err() {
                    return;
                }
                None
            }
            Err(why) => Some(("network.tls", why)),
        };
        if let Some((rule, why)) = refusal {
            self.refuse_tunnel(attempt, rule, &why, owner).await;
            return;
        }
        let _ =
            tokio::io::copy_bidirectional_with_sizes(&mut client, &mut upstream, 1 << 18, 1 << 18)
                .await;
    }

    /// A tunnel allowed by its CONNECT, refused by what came through it.
    async fn refuse_tunnel(
        &self,
        attempt: Attempt,
        rule: &str,
        why: &str,
        owner: Option<&dyn RunLookup>,
    ) {
        tracing::info!(host = %attempt.host, %why, "tunnel refused");
        // The tunnel was counted when allowed; its refusal is one more decision.
        self.counters.refused.fetch_add(1, Ordering::Relaxed);
        if let Some(observer) = &self.observer {
            observer.attempt(&Attempt {
                rule: rule.to_owned(),
                decision: "deny",
                run_id: run_of(owner).await,
                ..attempt
            });
        }
    }

    /// A tunnel to a host with a credential: TLS ends here with a leaf of the home's CA (the
    /// ClientHello must name the CONNECT host, as for any tunnel); each request inside gets
    /// the credential and goes to the origin over TLS verified against the system's roots.
    async fn terminate<S>(
        self: Arc<Self>,
        client: S,
        terminated: Terminated,
        attempt: Attempt,
        owner: Option<Arc<dyn RunLookup>>,
    ) where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let acceptor =
            tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), client);
        let start = match tokio::time::timeout(HELLO_TIMEOUT, acceptor).await {
            Ok(Ok(start)) => start,
            Ok(Err(err)) => {
                let why = format!("not a TLS ClientHello ({err})");
                return self
                    .refuse_tunnel(attempt, "network.tls", &why, owner.as_deref())
                    .await;
            }
            Err(_) => {
                return self
                    .refuse_tunnel(
                        attempt,
                        "network.tls",
                        "no TLS ClientHello in time",
                        owner.as_deref(),
                    )
                    .await;
            }
        };
        let name = start.client_hello().server_name().map(str::to_owned);
        if !sni_matches(&attempt.host, name.as_deref()) {
            let why = format!(
                "the TLS ClientHello names {}, not {}",
                name.as_deref().unwrap_or("no server"),
                attempt.host
            );
            return self
                .refuse_tunnel(attempt, "network.sni", &why, owner.as_deref())
                .await;
        }
        let config = match terminated.authority.server_config(&attempt.host) {
            Ok(config) => config,
            Err(err) => {
                tracing::warn!(%err, "cannot terminate a tunnel");
                return;
            }
        };
        let tls = match start.into_stream(config).await {
            Ok(tls) => tls,
            Err(err) => {
                // The client did not trust the CA, most often: its side says so.
                tracing::info!(host = %attempt.host, %err, "terminated tunnel: handshake failed");
                return;
            }
        };
        let upstream: Upstream = Arc::default();
        let host = attempt.host.clone();
        let port = attempt.port;
        let service = hyper::service::service_fn(move |request| {
            let upstream = upstream.clone();
            let host = host.clone();
            let credential = terminated.credential.clone();
            let target = terminated.target;
            async move {
                let origin = Origin {
                    target,
                    host: &host,
                    port,
                    tls: true,
                };
                Ok::<_, hyper::Error>(forward(request, origin, &upstream, Some(credential)).await)
            }
        });
        if let Err(err) = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(tls), service)
            .await
        {
            tracing::debug!(%err, "terminated tunnel ended");
        }
    }
}

/// What a terminated tunnel needs besides its client.
struct Terminated {
    target: SocketAddr,
    authority: Arc<crate::authority::Authority>,
    credential: (hyper::header::HeaderName, HeaderValue),
}

/// A plain HTTP request sent on to the origin in origin-form, its answer streamed back, over
/// the client connection's upstream connection when it goes to the same place.
async fn forward(
    request: Request<Incoming>,
    origin: Origin<'_>,
    upstream: &Upstream,
    credential: Option<(hyper::header::HeaderName, HeaderValue)>,
) -> Response<Body> {
    let Origin {
        target, host, port, ..
    } = origin;
    let (mut parts, body) = request.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    parts.uri = match path.parse() {
        Ok(uri) => uri,
        Err(_) => return answer(StatusCode::BAD_REQUEST, "paddock proxy: bad path\n".into()),
    };
    // Hop-by-hop headers meant for the proxy.
    for name in ["proxy-connection", "proxy-authorization", "keep-alive"] {
        parts.headers.remove(name);
    }
    // The operator's credential replaces whatever the environment sent under that name.
    if let Some((name, value)) = credential {
        parts.headers.insert(name, value);
    }
    if !parts.headers.contains_key(HOST) {
        let value = if port == default_port(Some(if origin.tls { "https" } else { "http" })) {
            host.to_owned()
        } else {
            format!("{host}:{port}")
        };
        if let Ok(value) = HeaderValue::from_str(&value) {
            parts.headers.insert(HOST, value);
        }
    }
    let destination = (host.to_owned(), port);
    let mut kept = upstream.lock().await;
    let reusable = match kept.take() {
        Some((to, mut sender)) if to == destination => {
            sender.ready().await.is_ok().then_some(sender)
        }
        _ => None,
    };
    let mut sender = match reusable {
        Some(sender) => sender,
        None => match connect_upstream(origin).await {
            Ok(sender) => sender,
            Err(err) => {
                return answer(
                    StatusCode::BAD_GATEWAY,
                    format!("paddock proxy: cannot connect to {host}:{port} ({target}): {err}\n"),
                );
            }
        },
    };
    let sent = sender.send_request(Request::from_parts(parts, body)).await;
    *kept = Some((destination, sender));
    match sent {
        Ok(response) => response.map(BodyExt::boxed),
        Err(err) => answer(
            StatusCode::BAD_GATEWAY,
            format!("paddock proxy: {host}:{port}: {err}\n"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::sni_matches;

    #[test]
    fn a_tunnel_s_server_name_must_be_its_host() {
        assert!(sni_matches("pypi.org", Some("pypi.org")));
        assert!(sni_matches("PyPI.org", Some("pypi.org.")));
        assert!(!sni_matches("pypi.org", Some("evil.example")));
        assert!(!sni_matches("pypi.org", None), "a name needs its SNI");
        // Clients send no server name for an address.
        assert!(sni_matches("10.1.2.3", None));
        assert!(sni_matches("[::1]", None));
        assert!(!sni_matches("10.1.2.3", Some("evil.example")));
    }
}
