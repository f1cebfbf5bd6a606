//! `paddock serve`: the MCP server over stdio or Streamable HTTP.

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
) -> ExitCode {
    let policy = match load_policy(common.policy.as_deref()) {
        Ok(p) => p,
        Err(e) => return usage_error(&e),
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
