//! `paddock serve --http ADDR`: Streamable HTTP at `/mcp`.
//!
//! Safe defaults: loopback only unless a bearer token is set; `Host` must be loopback (or the
//! bound name, or `--allow-host`), against DNS rebinding; a present `Origin` must be a
//! loopback origin or one given with `--allow-origin`. With `PADDOCK_MCP_TOKEN` set, every
//! request needs `Authorization: Bearer <token>`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use super::ServeError;
use crate::server::{PaddockServer, Shared};

/// How long a legacy HTTP session may stay silent before it is closed.
const SESSION_IDLE_LIMIT: std::time::Duration = std::time::Duration::from_secs(2 * 3600);

/// Options of the HTTP endpoint.
#[derive(Debug, Clone, Default)]
pub struct HttpOptions {
    pub addr: String,
    /// Required bearer token (from `PADDOCK_MCP_TOKEN`).
    pub token: Option<String>,
    pub allow_origins: Vec<String>,
    pub allow_hosts: Vec<String>,
    /// No `--session`: each MCP session gets its own Paddock session, closed with it.
    pub session_per_client: bool,
}

/// Serves until SIGINT or SIGTERM.
pub async fn serve_http(shared: Arc<Shared>, options: HttpOptions) -> Result<(), ServeError> {
    let addr: SocketAddr = options.addr.parse().map_err(|e| {
        ServeError::Setup(format!(
            "--http {}: not an address like 127.0.0.1:8931 ({e})",
            options.addr
        ))
    })?;
    if !addr.ip().is_loopback() && options.token.is_none() {
        return Err(ServeError::Setup(format!(
            "--http {addr} listens beyond this machine: set PADDOCK_MCP_TOKEN so clients must \
             authenticate, or bind 127.0.0.1"
        )));
    }
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| ServeError::Setup(format!("cannot listen on {addr}: {e}")))?;
    let bound = listener.local_addr()?;

    let mut hosts: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    if !addr.ip().is_unspecified() {
        hosts.push(bound.ip().to_string());
    }
    hosts.extend(options.allow_hosts.iter().cloned());
    let mut origins: Vec<String> = vec![
        "http://localhost:*".into(),
        "http://127.0.0.1:*".into(),
        "http://[::1]:*".into(),
    ];
    origins.extend(options.allow_origins.iter().cloned());

    let stop = CancellationToken::new();
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts)
        .with_allowed_origins(origins)
        .enforce_origin_validation()
        .with_cancellation_token(stop.child_token());
    // A legacy session without traffic ends after this long; rmcp's 5 minutes would cut off a
    // long quiet call (heartbeats only flow when the client asked for progress).
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(SESSION_IDLE_LIMIT);
    let per_client = options.session_per_client;
    let service = StreamableHttpService::new(
        move || {
            Ok(if per_client {
                PaddockServer::with_own_session(shared.clone())
            } else {
                PaddockServer::new(shared.clone())
            })
        },
        Arc::new(sessions),
        config,
    );
    let token = options.token.map(Arc::new);
    let router =
        axum::Router::new()
            .nest_service("/mcp", service)
            .layer(axum::middleware::from_fn(
                move |request: Request, next: Next| {
                    let token = token.clone();
                    async move {
                        check_bearer(token.as_deref().map(String::as_str), request, next).await
                    }
                },
            ));

    announce(&format!("paddock: serving MCP on http://{bound}/mcp"));
    let shutdown = stop.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        shutdown.cancel();
    });
    axum::serve(listener, router)
        .with_graceful_shutdown(async move { stop.cancelled_owned().await })
        .await?;
    Ok(())
}

async fn check_bearer(token: Option<&str>, request: Request, next: Next) -> Response {
    if let Some(expected) = token {
        let presented = request
            .headers()
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        if !constant_time_eq(presented.as_bytes(), expected.as_bytes()) {
            return (
                StatusCode::UNAUTHORIZED,
                [(axum::http::header::WWW_AUTHENTICATE, "Bearer")],
                "missing or wrong bearer token (Authorization: Bearer <PADDOCK_MCP_TOKEN>)\n",
            )
                .into_response();
        }
    }
    next.run(request).await
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// One line on stderr for the operator (and for tests reading the bound port).
fn announce(line: &str) {
    use std::io::Write;
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{line}");
    let _ = err.flush();
}
