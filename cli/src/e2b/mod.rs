//! `paddock serve --e2b ADDR`: an E2B-compatible front end (DESIGN section 10), so the
//! unmodified `e2b` Python SDK drives Paddock sessions with `E2B_API_URL`, `E2B_SANDBOX_URL`
//! and `E2B_API_KEY` pointed here. One plain-HTTP/1.1 address serves the REST API
//! ([`rest`]) and every sandbox's environment daemon: its process ([`process`]) and
//! filesystem ([`filesystem`]) services over Connect ([`connect`]), `/files` ([`files`]) and
//! `/health`, and its code interpreter ([`interpreter`]: `/execute`, `/contexts`, for the
//! `e2b-code-interpreter` SDK). A command that needs no stdin or terminal runs as one
//! streaming foreground call ([`foreground`], followed through [`run`]). Directory watching
//! is [`watch`], pause and resume
//! [`lifecycle`]. Requests are routed and authorised by [`auth`]; [`state`] holds the
//! sandboxes.
//!
//! With `--e2b-tls DOMAIN` the same is served over TLS ([`tls`]) for SDKs that reach E2B by
//! domain. Not served yet: metrics, snapshots.

pub(crate) mod auth;
pub(crate) mod connect;
pub(crate) mod files;
pub(crate) mod filesystem;
pub(crate) mod foreground;
pub(crate) mod interpreter;
pub(crate) mod lifecycle;
pub(crate) mod process;
pub(crate) mod rest;
pub(crate) mod run;
pub(crate) mod state;
pub(crate) mod tls;
pub(crate) mod watch;
pub(crate) mod wire;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State as Shared};
use axum::http::{HeaderMap, Method};
use axum::response::Response;
use paddock_engine::policy::Policy;

use auth::{AuthError, Credentials, Target};
use state::State;
use wire::{json_response, query_pairs, query_value, rest_error};

/// The largest request body read (an upload).
const MAX_BODY_BYTES: usize = 1 << 30;

/// Why the front end could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub(crate) enum E2bError {
    #[error("--e2b {addr}: not an address like 127.0.0.1:49980 ({reason})")]
    Address { addr: String, reason: String },
    #[error("--e2b needs API keys: add `[e2b] api_keys = [\"e2b_<hex>\"]` to the policy")]
    NoKeys,
    #[error("{0}")]
    Keys(String),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("the e2b server failed: {0}")]
    Serve(std::io::Error),
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
}

/// Serves until SIGINT or SIGTERM, then kills the sandboxes it made; over TLS as `*.DOMAIN`
/// with `tls_domain`.
pub(crate) async fn serve(
    policy: Policy,
    addr: &str,
    tls_domain: Option<&str>,
) -> Result<(), E2bError> {
    let keys = policy.e2b.expanded_keys().map_err(E2bError::Keys)?;
    if keys.is_empty() {
        return Err(E2bError::NoKeys);
    }
    let addr: SocketAddr =
        addr.parse()
            .map_err(|e: std::net::AddrParseError| E2bError::Address {
                addr: addr.to_owned(),
                reason: e.to_string(),
            })?;
    let tls_config = match tls_domain {
        Some(given) => {
            let domain = tls::domain_of(given)?;
            let home = paddock_engine::tools::environment::state_root();
            let config = tls::server_config(&home, &domain)?;
            tracing::info!(%domain, "e2b: TLS as *.{domain}; clients trust `paddock ca bundle`");
            Some(config)
        }
        None => None,
    };
    if tls_config.is_none() && !addr.ip().is_loopback() {
        tracing::warn!(%addr, "--e2b serves plain HTTP beyond this machine: tokens travel unencrypted");
    }
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| E2bError::Listen { addr, source })?;
    let state = Arc::new(State::new(policy, keys));
    let app = axum::Router::new()
        .fallback(handle)
        .with_state(state.clone());
    tracing::info!(%addr, "e2b front end listening");
    let sweeper = tokio::spawn(sweep_every_minute(state.clone()));
    let served = match tls_config {
        Some(config) => {
            let listener = tls::TlsListener::new(listener, config).map_err(E2bError::Serve)?;
            axum::serve(listener, app)
                .with_graceful_shutdown(stop_signal())
                .await
        }
        None => {
            // Without TCP_NODELAY a stream's last small write waits for the client's delayed
            // ACK: 40 ms added to every command.
            let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
                if let Err(err) = tcp.set_nodelay(true) {
                    tracing::debug!(%err, "e2b: could not set TCP_NODELAY on a connection");
                }
            });
            axum::serve(listener, app)
                .with_graceful_shutdown(stop_signal())
                .await
        }
    }
    .map_err(E2bError::Serve);
    sweeper.abort();
    rest::kill_all(&state).await;
    for engine in state.engines().await {
        engine.settle().await;
    }
    served
}

/// The idle timeout of `[sessions]` applies to sandboxes too: every minute each engine closes
/// its idle sessions, and their sandboxes are forgotten.
async fn sweep_every_minute(state: Arc<State>) {
    let period = Duration::from_secs(60);
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    loop {
        tick.tick().await;
        for engine in state.engines().await {
            match engine.sweep_now().await {
                Ok(report) => {
                    for closed in report.closed {
                        if rest::kill(&state, &closed.id).await {
                            tracing::info!(sandbox = %closed.id, "idle e2b sandbox closed");
                        }
                    }
                }
                Err(err) => tracing::warn!(%err, "session sweep failed"),
            }
        }
    }
}

async fn stop_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
}

/// The sandbox whose access token signs this `/files` URL (it carries no headers).
fn signed_by(
    state: &State,
    method: &Method,
    pairs: &[(String, String)],
    signature: &str,
) -> Option<String> {
    let path = query_value(pairs, "path").unwrap_or_default();
    let user = query_value(pairs, "username").unwrap_or_default();
    let expiration = query_value(pairs, "signature_expiration");
    if let Some(exp) = expiration.as_deref().and_then(|e| e.parse::<u64>().ok())
        && exp * 1000 < state::now_ms()
    {
        return None;
    }
    let operation = if method == Method::GET {
        "read"
    } else {
        "write"
    };
    state.all().into_iter().find_map(|s| {
        let expected = auth::file_signature(
            &path,
            operation,
            &user,
            &s.access_token,
            expiration.as_deref(),
        );
        auth::same(expected.as_bytes(), signature.as_bytes()).then(|| s.id.clone())
    })
}

/// Every request: authorised and routed by [`auth::authorise`], then served.
async fn handle(Shared(state): Shared<Arc<State>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let method = parts.method.clone();
    let path = parts.uri.path().to_owned();
    let query = parts.uri.query().map(str::to_owned);
    let headers = &parts.headers;
    let pairs = query_pairs(query.as_deref());
    let signature = query_value(&pairs, "signature");
    // A sandbox reached by name (`PORT-ID.DOMAIN`, the SDK's URLs by domain) when its
    // headers do not say.
    let by_host = header(headers, "host").and_then(auth::host_route);
    let creds = Credentials {
        api_key: header(headers, "x-api-key"),
        sandbox_id: header(headers, "e2b-sandbox-id").or(by_host.map(|(_, id)| id)),
        sandbox_port: header(headers, "e2b-sandbox-port").or(by_host.map(|(port, _)| port)),
        access_token: header(headers, "x-access-token"),
        traffic_token: header(headers, "e2b-traffic-access-token"),
        signature: signature.as_deref(),
    };
    let target = auth::authorise(
        &path,
        &creds,
        &state.api_keys,
        |id| {
            state
                .get(id)
                .map(|s| (s.access_token.clone(), s.traffic_token.clone()))
        },
        |token| state.by_token(token),
        |sig| signed_by(&state, &method, &pairs, sig),
    );
    let body = match axum::body::to_bytes(body, MAX_BODY_BYTES).await {
        Ok(b) => b,
        Err(e) => return rest_error(400, format!("cannot read the request body: {e}")),
    };
    match target {
        Ok(Target::Rest) => rest::serve(&state, &method, &path, query.as_deref(), &body).await,
        Ok(Target::Envd(id)) => {
            envd(
                &state,
                &id,
                &method,
                &path,
                query.as_deref(),
                headers,
                &body,
            )
            .await
        }
        Ok(Target::Interpreter(id)) => match state.get(&id) {
            Some(sandbox) if sandbox.paused.load(std::sync::atomic::Ordering::Relaxed) => {
                rest_error(502, paused(&id))
            }
            Some(sandbox) => interpreter::serve(sandbox, &method, &path, &body).await,
            None => rest_error(502, AuthError::UnknownSandbox(id).to_string()),
        },
        Err(err @ AuthError::UnknownSandbox(_)) => {
            // The SDK's health probe reads 502 as "the sandbox is gone".
            rest_error(502, err.to_string())
        }
        Err(err @ (AuthError::ApiKey | AuthError::AccessToken(_) | AuthError::NoSandbox)) => {
            tracing::debug!(%err, %path, "e2b request refused");
            // A signed URL past its `signature_expiration` is told so, in envd's words.
            let expired = signature.is_some()
                && query_value(&pairs, "signature_expiration")
                    .and_then(|e| e.parse::<u64>().ok())
                    .is_some_and(|exp| exp.saturating_mul(1000) < state::now_ms());
            if expired {
                rest_error(401, "signature is already expired")
            } else {
                rest_error(401, err.to_string())
            }
        }
    }
}

/// A stream's `Connect-Timeout-Ms`.
fn deadline(headers: &HeaderMap) -> Option<Duration> {
    header(headers, "connect-timeout-ms")
        .and_then(|ms| ms.parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis)
}

fn paused(id: &str) -> String {
    format!("sandbox {id} is paused: connect to it to resume it")
}

/// A request to a sandbox's environment daemon.
async fn envd(
    state: &Arc<State>,
    id: &str,
    method: &Method,
    path: &str,
    query: Option<&str>,
    headers: &HeaderMap,
    body: &[u8],
) -> Response {
    let Some(sandbox) = state.get(id) else {
        return rest_error(502, AuthError::UnknownSandbox(id.to_owned()).to_string());
    };
    // Any call would thaw its session; the SDK's health probe reads 502 as "not running".
    if sandbox.paused.load(std::sync::atomic::Ordering::Relaxed) {
        return rest_error(502, paused(id));
    }
    let content_type = header(headers, "content-type").unwrap_or("");
    match (method.as_str(), path) {
        ("GET", "/health") => wire::empty(204),
        ("GET", "/files") => files::download(&sandbox, query).await,
        ("POST", "/files") => {
            match files::decoded(body, header(headers, "content-encoding"), MAX_BODY_BYTES) {
                Ok(body) => files::upload(&sandbox, query, content_type, &body).await,
                Err(why) => rest_error(400, why),
            }
        }
        ("POST", _) => {
            let Some((service, rpc)) = path.trim_start_matches('/').split_once('/') else {
                return rest_error(404, format!("{path}: no such endpoint"));
            };
            match service {
                "process.Process" if content_type.starts_with("application/connect+json") => {
                    process::stream(sandbox, rpc, body, deadline(headers)).await
                }
                "filesystem.Filesystem"
                    if content_type.starts_with("application/connect+json")
                        && rpc == "WatchDir" =>
                {
                    watch::stream(sandbox, body, deadline(headers)).await
                }
                "process.Process" => process::unary(&sandbox, rpc, body).await,
                "filesystem.Filesystem" => filesystem::unary(&sandbox, rpc, body).await,
                _ => rest_error(404, format!("{path}: no such service")),
            }
        }
        _ => json_response(
            404,
            &serde_json::json!({"code": 404, "message": format!("{method} {path}: not served")}),
        ),
    }
}
