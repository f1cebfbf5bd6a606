//! The egress proxy's core: one listener speaking HTTP/1 (absolute-form and origin-form with
//! `Host`) and `CONNECT` tunnels, every destination judged by an [`EgressPolicy`] before a
//! connection is made: the name's rules, a human for `unknown = "ask"`, then the addresses
//! (pins, literals however spelled, or what the resolver answered). A refused request gets
//! HTTP 403 with a body naming the host and the rule, and is reported to the [`Observer`].
//!
//! Not here yet (issue 30): the agent-side forwarder that makes this reachable from inside an
//! environment with no route out, the SNI check of a tunnel's ClientHello, credentials
//! injection (TLS termination with a per-home CA), the one-per-state-directory life cycle.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HOST, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
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
}

/// Receives every decision the proxy makes.
pub trait Observer: Send + Sync {
    fn attempt(&self, attempt: &Attempt);
}

/// Decides a host in neither list when `unknown = "ask"`; without one such hosts are denied.
pub trait HostApprover: Send + Sync {
    fn approve<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> Pin<Box<dyn Future<Output = bool> + Send + 'a>>;
}

/// The proxy: a policy, who hears of its decisions, who answers `ask`.
pub struct Proxy {
    policy: EgressPolicy,
    observer: Option<Arc<dyn Observer>>,
    approver: Option<Arc<dyn HostApprover>>,
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
        }
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
            let this = self.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| {
                    let this = this.clone();
                    async move { Ok::<_, hyper::Error>(this.handle(request).await) }
                });
                if let Err(err) = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .with_upgrades()
                    .await
                {
                    tracing::debug!(%err, "proxy connection ended");
                }
            });
        }
    }

    fn report(&self, host: &str, port: u16, method: &str, rule: &str, decision: &'static str) {
        if let Some(observer) = &self.observer {
            observer.attempt(&Attempt {
                host: host.to_owned(),
                port,
                method: method.to_owned(),
                rule: rule.to_owned(),
                decision,
            });
        }
    }

    /// Where `host:port` may be reached, or why not.
    async fn judge(&self, host: &str, port: u16) -> Result<(SocketAddr, String), Refusal> {
        let rule = match self.policy.judge_name(host) {
            Verdict::Refuse(refusal) => return Err(refusal),
            Verdict::Allow { rule } => rule,
            Verdict::Ask => {
                let approved = match &self.approver {
                    Some(approver) => approver.approve(host, port).await,
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

    async fn handle(self: Arc<Self>, request: Request<Incoming>) -> Response<Body> {
        let method = request.method().to_string();
        let Some((host, port)) = destination_of(&request) else {
            return answer(
                StatusCode::BAD_REQUEST,
                "paddock proxy: the request names no host (absolute URL, CONNECT host:port or \
                 a Host header)\n"
                    .into(),
            );
        };
        let (target, rule) = match self.judge(&host, port).await {
            Ok(allowed) => allowed,
            Err(refusal) => {
                self.report(&host, port, &method, &refusal.rule, "deny");
                return answer(
                    StatusCode::FORBIDDEN,
                    format!(
                        "paddock proxy: {host}:{port} refused by {}: {}\n",
                        refusal.rule, refusal.reason
                    ),
                );
            }
        };
        self.report(&host, port, &method, &rule, "allow");
        let upstream = match TcpStream::connect(target).await {
            Ok(stream) => stream,
            Err(err) => {
                return answer(
                    StatusCode::BAD_GATEWAY,
                    format!("paddock proxy: cannot connect to {host}:{port} ({target}): {err}\n"),
                );
            }
        };
        if request.method() == Method::CONNECT {
            tokio::spawn(async move {
                match hyper::upgrade::on(request).await {
                    Ok(upgraded) => {
                        let mut client = TokioIo::new(upgraded);
                        let mut upstream = upstream;
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                    }
                    Err(err) => tracing::debug!(%err, "proxy: CONNECT upgrade failed"),
                }
            });
            return Response::new(full(String::new()));
        }
        forward(request, upstream, &host, port).await
    }
}

/// A plain HTTP request sent on to the origin in origin-form, its answer streamed back.
async fn forward(
    request: Request<Incoming>,
    upstream: TcpStream,
    host: &str,
    port: u16,
) -> Response<Body> {
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
    if !parts.headers.contains_key(HOST) {
        let value = if port == 80 {
            host.to_owned()
        } else {
            format!("{host}:{port}")
        };
        if let Ok(value) = HeaderValue::from_str(&value) {
            parts.headers.insert(HOST, value);
        }
    }
    let (mut sender, connection) =
        match hyper::client::conn::http1::handshake(TokioIo::new(upstream)).await {
            Ok(pair) => pair,
            Err(err) => {
                return answer(
                    StatusCode::BAD_GATEWAY,
                    format!("paddock proxy: {host}:{port}: {err}\n"),
                );
            }
        };
    tokio::spawn(async move {
        if let Err(err) = connection.await {
            tracing::debug!(%err, "proxy: upstream connection ended");
        }
    });
    match sender.send_request(Request::from_parts(parts, body)).await {
        Ok(response) => response.map(BodyExt::boxed),
        Err(err) => answer(
            StatusCode::BAD_GATEWAY,
            format!("paddock proxy: {host}:{port}: {err}\n"),
        ),
    }
}
