//! The bridge: other MCP servers (`[mcp.servers.NAME]`) whose tools scripts and agents call
//! through the registry, so allow/deny/exclude/require_approval apply to them like to any tool.
//!
//! - **bridge** mode: each remote tool becomes `mcp_<server>__<tool>`. The server is started
//!   when the engine is built, because its tool list is what the registry (and the
//!   `run_tools_script` description) is made of.
//! - **lazy** mode: two tools, `mcp_<server>__list_tools()` and
//!   `mcp_<server>__call_tool(tool_name, arguments)`; the server starts on the first call.
//!
//! A server that crashed (or whose connection closed) is started again on the next call. The
//! call that saw it die fails, naming the server; it is not retried, because a tool call may
//! not be safe to repeat.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject};
use rmcp::service::{RoleClient, RunningService, ServiceExt};
use serde_json::{Value, json};

use paddock_engine::policy::{McpServerConfig, Policy};
use paddock_engine::registry::{CallContext, Registry, Tool, ToolError, ToolFuture, ToolSpec};

/// Default per-call wait for a bridged server's answer.
const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(120);
/// How long starting a server (spawn + handshake) may take.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// How to reach one bridged server.
#[derive(Debug, Clone)]
enum Endpoint {
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
    },
    Http {
        url: String,
    },
}

/// One configured server and its (re)startable connection.
pub struct BridgedServer {
    name: String,
    endpoint: Endpoint,
    call_timeout: Duration,
    connection: tokio::sync::Mutex<Option<RunningService<RoleClient, ()>>>,
}

impl BridgedServer {
    fn from_config(name: &str, config: &McpServerConfig) -> Result<Self, String> {
        let endpoint = match (&config.command, &config.url) {
            (Some(command), None) => Endpoint::Stdio {
                command: command.get_ref().clone(),
                args: config.args.clone(),
                env: config.env.clone(),
            },
            (None, Some(url)) => Endpoint::Http {
                url: url.get_ref().clone(),
            },
            _ => {
                return Err(format!(
                    "mcp.servers.{name}: give exactly one of `command` or `url`"
                ));
            }
        };
        let call_timeout = config
            .timeout_seconds
            .as_ref()
            .map(|t| Duration::from_secs_f64(*t.get_ref()))
            .unwrap_or(DEFAULT_CALL_TIMEOUT);
        Ok(Self {
            name: name.to_owned(),
            endpoint,
            call_timeout,
            connection: tokio::sync::Mutex::new(None),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    async fn connect(&self) -> Result<RunningService<RoleClient, ()>, String> {
        let started = match &self.endpoint {
            Endpoint::Stdio { command, args, env } => {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args).envs(env).kill_on_drop(true);
                let transport = rmcp::transport::TokioChildProcess::builder(cmd)
                    .stderr(std::process::Stdio::inherit())
                    .spawn()
                    .map(|(transport, _)| transport)
                    .map_err(|e| format!("cannot start `{command}`: {e}"))?;
                tokio::time::timeout(START_TIMEOUT, ().serve(transport)).await
            }
            Endpoint::Http { url } => {
                let transport =
                    rmcp::transport::StreamableHttpClientTransport::from_uri(url.as_str());
                tokio::time::timeout(START_TIMEOUT, ().serve(transport)).await
            }
        };
        match started {
            Ok(Ok(service)) => {
                tracing::info!(server = %self.name, "bridged MCP server started");
                Ok(service)
            }
            Ok(Err(err)) => Err(format!("its MCP handshake failed: {err}")),
            Err(_) => Err(format!(
                "it did not complete the MCP handshake within {} s",
                START_TIMEOUT.as_secs()
            )),
        }
    }

    /// The live connection's peer, starting (or restarting) the server when needed.
    async fn peer(&self) -> Result<rmcp::Peer<RoleClient>, ToolError> {
        let mut slot = self.connection.lock().await;
        if let Some(service) = slot.as_ref()
            && (service.is_closed() || service.is_transport_closed())
        {
            tracing::warn!(server = %self.name, "bridged MCP server is gone; starting it again");
            *slot = None;
        }
        if slot.is_none() {
            let service = self.connect().await.map_err(|why| {
                ToolError::failed(format!(
                    "the MCP server '{}' ([mcp.servers.{}]) is not available: {why}",
                    self.name, self.name
                ))
            })?;
            *slot = Some(service);
        }
        match slot.as_ref() {
            Some(service) => Ok(service.peer().clone()),
            None => Err(ToolError::failed("unreachable: no connection")),
        }
    }

    /// Forgets a connection that failed, so the next call starts the server again.
    async fn drop_connection(&self) {
        if let Some(service) = self.connection.lock().await.take() {
            let _ = service.cancel().await;
        }
    }

    /// The server's tools.
    pub async fn list_tools(&self) -> Result<Vec<rmcp::model::Tool>, ToolError> {
        let peer = self.peer().await?;
        match tokio::time::timeout(self.call_timeout, peer.list_all_tools()).await {
            Ok(Ok(tools)) => Ok(tools),
            Ok(Err(err)) => {
                self.drop_connection().await;
                Err(ToolError::failed(format!(
                    "listing the tools of MCP server '{}' failed: {err}",
                    self.name
                )))
            }
            Err(_) => Err(ToolError::failed(format!(
                "MCP server '{}' did not list its tools within {} s",
                self.name,
                self.call_timeout.as_secs_f64()
            ))),
        }
    }

    /// Calls `tool`; the answer is `{"ok", "server", "tool", "is_error", "result"}`. A tool
    /// error on the server side is `ok: false`, not a failure.
    pub async fn call(&self, tool: &str, arguments: JsonObject) -> Result<Value, ToolError> {
        let peer = self.peer().await?;
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        match tokio::time::timeout(self.call_timeout, peer.call_tool(params)).await {
            Ok(Ok(result)) => Ok(self.answer(tool, result)),
            Ok(Err(err)) => {
                self.drop_connection().await;
                Err(ToolError::failed(format!(
                    "calling '{tool}' on MCP server '{}' failed: {err}; the server will be \
                     started again on the next call",
                    self.name
                )))
            }
            Err(_) => Err(ToolError::failed(format!(
                "MCP server '{}' did not answer '{tool}' within {} s \
                 ([mcp.servers.{}] timeout_seconds)",
                self.name,
                self.call_timeout.as_secs_f64(),
                self.name
            ))),
        }
    }

    fn answer(&self, tool: &str, result: CallToolResult) -> Value {
        let is_error = result.is_error.unwrap_or(false);
        let value = match result.structured_content {
            Some(structured) => structured,
            None => {
                let texts: Vec<String> = result
                    .content
                    .iter()
                    .filter_map(|block| block.as_text().map(|t| t.text.clone()))
                    .collect();
                Value::String(texts.join("\n"))
            }
        };
        json!({
            "ok": !is_error,
            "server": self.name,
            "tool": tool,
            "is_error": is_error,
            "result": value,
        })
    }

    /// Stops the server (used when the engine shuts down).
    pub async fn stop(&self) {
        self.drop_connection().await;
    }
}

/// Every bridged server of a policy.
#[derive(Default, Clone)]
pub struct Bridge {
    servers: Vec<Arc<BridgedServer>>,
}

impl Bridge {
    /// Registers the tools of every `[mcp.servers.NAME]`. A bridge-mode server that cannot be
    /// started is an error naming it: its tools would otherwise silently be missing.
    pub async fn register(policy: &Policy, registry: &mut Registry) -> Result<Self, String> {
        let mut bridge = Bridge::default();
        for (name, config) in &policy.mcp.servers {
            let server = Arc::new(BridgedServer::from_config(name, config)?);
            let mode = config
                .mode
                .as_ref()
                .map(|m| m.get_ref().as_str())
                .unwrap_or("bridge");
            let prefix = format!("mcp_{}__", sanitize(name));
            let toolset = format!("mcp_{}", sanitize(name));
            match mode {
                "lazy" => {
                    let list = LazyListTools {
                        server: server.clone(),
                        spec: ToolSpec::new(
                            format!("{prefix}list_tools"),
                            toolset.clone(),
                            format!(
                                "List the tools of the MCP server '{name}': their names, \
                                 descriptions and input schemas. Call one with \
                                 {prefix}call_tool."
                            ),
                            json!({"type": "object", "properties": {}, "additionalProperties": false}),
                        )
                        .open_world(),
                    };
                    let call = LazyCallTool {
                        server: server.clone(),
                        spec: ToolSpec::new(
                            format!("{prefix}call_tool"),
                            toolset.clone(),
                            format!(
                                "Call a tool of the MCP server '{name}' by name. Answers \
                                 {{ok, server, tool, is_error, result}}; a failing tool gives \
                                 ok=false."
                            ),
                            json!({
                                "type": "object",
                                "properties": {
                                    "tool_name": {"type": "string"},
                                    "arguments": {"type": "object"}
                                },
                                "required": ["tool_name"],
                                "additionalProperties": false
                            }),
                        )
                        .open_world(),
                    };
                    register(registry, Arc::new(list))?;
                    register(registry, Arc::new(call))?;
                }
                _ => {
                    let tools = server.list_tools().await.map_err(|e| e.message)?;
                    for remote in tools {
                        let remote_name = remote.name.to_string();
                        let local = format!("{prefix}{}", sanitize(&remote_name));
                        if local.len() > 64 {
                            tracing::warn!(tool = %local, "bridged tool name longer than 64 characters; left out");
                            continue;
                        }
                        let mut schema = Value::Object((*remote.input_schema).clone());
                        if !paddock_engine::registry::schema_check::problems(&schema).is_empty() {
                            tracing::warn!(tool = %local, "bridged tool's input schema is not usable as is; accepting any object");
                            schema = json!({"type": "object"});
                        }
                        let description = format!(
                            "[{name}] {}",
                            remote.description.as_deref().unwrap_or("(no description)")
                        );
                        let tool = BridgedTool {
                            server: server.clone(),
                            remote: remote_name,
                            spec: ToolSpec::new(local, toolset.clone(), description, schema)
                                .open_world(),
                        };
                        register(registry, Arc::new(tool))?;
                    }
                }
            }
            bridge.servers.push(server);
        }
        Ok(bridge)
    }

    /// Stops every server that was started.
    pub async fn stop(&self) {
        for server in &self.servers {
            server.stop().await;
        }
    }
}

fn register(registry: &mut Registry, tool: Arc<dyn Tool>) -> Result<(), String> {
    registry.register(tool).map_err(|e| e.to_string())
}

/// Tool-name characters outside `[A-Za-z0-9_.-]` become `_`.
fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn arguments_object(args: Value) -> JsonObject {
    match args {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

/// `mcp_<server>__<tool>`.
struct BridgedTool {
    server: Arc<BridgedServer>,
    remote: String,
    spec: ToolSpec,
}

impl Tool for BridgedTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn call(&self, args: Value, _ctx: CallContext) -> ToolFuture {
        let server = self.server.clone();
        let remote = self.remote.clone();
        Box::pin(async move { server.call(&remote, arguments_object(args)).await })
    }
}

/// `mcp_<server>__list_tools()`.
struct LazyListTools {
    server: Arc<BridgedServer>,
    spec: ToolSpec,
}

impl Tool for LazyListTools {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn call(&self, _args: Value, _ctx: CallContext) -> ToolFuture {
        let server = self.server.clone();
        Box::pin(async move {
            let tools = server.list_tools().await?;
            Ok(Value::Array(
                tools
                    .into_iter()
                    .map(|t| {
                        json!({
                            "name": t.name,
                            "description": t.description,
                            "input_schema": Value::Object((*t.input_schema).clone()),
                        })
                    })
                    .collect(),
            ))
        })
    }
}

/// `mcp_<server>__call_tool(tool_name, arguments)`.
struct LazyCallTool {
    server: Arc<BridgedServer>,
    spec: ToolSpec,
}

impl Tool for LazyCallTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn call(&self, args: Value, _ctx: CallContext) -> ToolFuture {
        let server = self.server.clone();
        Box::pin(async move {
            let Some(tool) = args.get("tool_name").and_then(Value::as_str) else {
                return Err(ToolError::invalid_arguments(
                    "field `tool_name` (a string) is required",
                ));
            };
            let arguments = args.get("arguments").cloned().unwrap_or(json!({}));
            if !arguments.is_object() {
                return Err(ToolError::invalid_arguments(
                    "field `arguments` must be an object of the remote tool's arguments",
                ));
            }
            server.call(tool, arguments_object(arguments)).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_valid_tool_names() {
        assert_eq!(sanitize("get weather/v2"), "get_weather_v2");
        assert_eq!(sanitize("a.b-c_d"), "a.b-c_d");
    }
}
