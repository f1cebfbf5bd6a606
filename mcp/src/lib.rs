//! MCP: `paddock serve` gives agents Paddock's tools over stdio or Streamable HTTP, in both
//! protocol generations (sessions begun with `initialize`, and stateless 2026-07-28); and the
//! bridge makes other MCP servers' tools callable from scripts.
//!
//! - [`server`] — the handler: tools/list, tools/call, progress, cancellation;
//! - [`approvals`] — approvals through the client (elicitation, input-required results);
//! - [`progress`] — nested calls of a script as progress notifications;
//! - [`roots`] — the client's roots as its session's workspace;
//! - [`completions`] — `notify_on_complete` for 2026-07-28 clients, as resource updates;
//! - [`http`] — the Streamable HTTP endpoint: loopback, Origin/Host checks, bearer token;
//! - [`bridge`] — `[mcp.servers.NAME]` as registry tools.

pub mod approvals;
pub mod bridge;
pub mod completions;
pub mod http;
pub mod progress;
pub mod roots;
pub mod server;

use std::sync::Arc;
use std::time::Duration;

use rmcp::ServiceExt;

use bridge::Bridge;
use paddock_engine::engine::{Engine, EngineOptions};
use paddock_engine::events::EventSink;
use paddock_engine::policy::Policy;
use paddock_engine::registry::Registry;
use server::{PaddockServer, Shared};

/// Errors of `paddock serve`.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("{0}")]
    Setup(String),
    #[error("the MCP connection failed: {0}")]
    Protocol(String),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

/// The built-in tools plus the policy's bridged MCP servers.
pub async fn registry_with_bridge(policy: &Policy) -> Result<(Registry, Bridge), String> {
    let mut registry = Registry::with_builtins();
    let bridge = Bridge::register(policy, &mut registry).await?;
    Ok((registry, bridge))
}

/// An engine for `paddock serve`.
pub async fn build(
    policy: Policy,
    options: EngineOptions,
) -> Result<(Arc<Shared>, Bridge), String> {
    let (registry, bridge) = registry_with_bridge(&policy).await?;
    let approval_ttl = Duration::from_secs_f64(*policy.approval.timeout_seconds.get_ref());
    let engine = Engine::with_options(policy, registry, Arc::new(EventSink::default()), options)
        .map_err(|e| e.to_string())?;
    let shared = Arc::new(Shared {
        engine,
        parked: Arc::default(),
        approval_ttl,
        quiet: Default::default(),
        roots: Default::default(),
    });
    Ok((shared, bridge))
}

/// Serves one client on stdin/stdout until it disconnects.
pub async fn serve_stdio(shared: Arc<Shared>) -> Result<(), ServeError> {
    let service = PaddockServer::new(shared)
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| ServeError::Protocol(e.to_string()))?;
    service
        .waiting()
        .await
        .map_err(|e| ServeError::Protocol(e.to_string()))?;
    Ok(())
}
