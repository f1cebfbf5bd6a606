//! `paddock serve`: the MCP server over stdio or Streamable HTTP, and the E2B-compatible front
//! end (`--e2b`, alone or beside `--http`).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use crate::args::Common;
use crate::common::{load_policy, usage_error};

pub(crate) async fn serve(
    common: Common,
    http: Option<String>,
    allow_origins: Vec<String>,
    allow_hosts: Vec<String>,
    e2b: Option<String>,
    e2b_tls: Option<String>,
) -> ExitCode {
    let policy = match load_policy(common.policy.as_deref()) {
        Ok(p) => p,
        Err(e) => return usage_error(&e),
    };
    let e2b_server = match e2b {
        Some(addr) => {
            // Key problems are usage errors, found before anything listens.
            if let Err(e) = policy.e2b.expanded_keys() {
                return usage_error(&e);
            }
            let policy = policy.clone();
            let server = async move { crate::e2b::serve(policy, &addr, e2b_tls.as_deref()).await };
            if http.is_none() {
                return match server.await {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e @ crate::e2b::E2bError::Serve(_)) => {
                        tracing::error!(%e, "paddock serve --e2b stopped");
                        ExitCode::from(1)
                    }
                    Err(e) => usage_error(&e.to_string()),
                };
            }
            Some(tokio::spawn(server))
        }
        None => None,
    };
    let options = paddock_engine::engine::EngineOptions {
        session: common.session.clone(),
        backend: None,
        exe: None,
    };
    let (shared, bridge) = match paddock_mcp::build(policy, options).await {
        Ok(built) => built,
        Err(e) => return usage_error(&e),
    };
    shared.engine.start_sweep();
    shared.engine.prewarm();
    let sweeper = tokio::spawn(sweep_every_minute(shared.clone()));
    let stdio = http.is_none();
    let served = match http {
        Some(addr) => {
            let token = std::env::var("PADDOCK_MCP_TOKEN")
                .ok()
                .filter(|t| !t.is_empty());
            let options = paddock_mcp::http::HttpOptions {
                addr,
                token,
                allow_origins,
                allow_hosts,
                session_per_client: common.session.is_none(),
            };
            paddock_mcp::http::serve_http(shared.clone(), options).await
        }
        None => paddock_mcp::serve_stdio(shared.clone()).await,
    };
    sweeper.abort();
    if let Some(e2b) = e2b_server {
        match e2b.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(%e, "the e2b front end stopped"),
            Err(e) => tracing::error!(%e, "the e2b front end's task failed"),
        }
    }
    // A stdio server given `--session ID` was that session's one connection: it ends with it.
    // Without `--session` the id is the shared `default`, left to the idle sweep.
    if stdio && let Some(id) = common.session.as_deref() {
        match shared.engine.close_session(id).await {
            Ok(report) => {
                tracing::info!(session = %id, ok = report.all_ok(), "session closed with its connection")
            }
            Err(paddock_engine::engine::EngineError::Session(
                paddock_engine::sessions::SessionError::Unknown(_),
            )) => {}
            Err(err) => tracing::warn!(session = %id, %err, "session not closed"),
        }
    }
    shared.engine.settle().await;
    bridge.stop().await;
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(paddock_mcp::ServeError::Setup(e)) => usage_error(&e),
        Err(e) => {
            tracing::error!(%e, "paddock serve stopped");
            ExitCode::from(1)
        }
    }
}

/// `paddock serve` closes idle sessions every minute: a server runs for days.
async fn sweep_every_minute(shared: Arc<paddock_mcp::server::Shared>) {
    let period = Duration::from_secs(60);
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    loop {
        tick.tick().await;
        let closed = shared.engine.close_idle_notebooks();
        if !closed.is_empty() {
            tracing::info!(sessions = ?closed, "idle notebook state closed");
        }
        if let Err(err) = shared.engine.sweep_now().await {
            tracing::warn!(%err, "session sweep failed");
        }
    }
}
