//! The embedding protocol's messages (docs/embedding-protocol.md): one JSON object per line on
//! the `paddock embed` process's stdin (client to engine) and stdout (engine to client), each
//! with a `type`. Requests carry the client's `id`; `host_call` and `approval_request` carry the
//! engine's own, which the client's `host_result` and `approval_reply` answer.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use paddock_engine::events::ToolCallEvent;
use paddock_engine::vocabulary::approver::ApprovalRequest;

/// The protocol's version: `hello` names the one the client speaks, `ready` the engine's.
pub const PROTOCOL_VERSION: u32 = 1;

/// Largest line either side may send, in bytes (a script is at most 1 MiB, a tool's arguments
/// 4 MiB; results are capped by `max_output_chars`).
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// What the client sends.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClientMessage {
    /// First message, exactly once: the client's tools and how it wants the engine.
    Hello(Hello),
    /// Runs a script; answered by one `result` whose `value` is the script's result object.
    /// In `session` instead of the engine's when given (its notebook, with `keep_state`).
    RunToolsScript {
        id: u64,
        code: String,
        #[serde(default)]
        limits: LimitOverrides,
        #[serde(default)]
        session: Option<String>,
    },
    /// Calls any tool by name (`run_tools_script` included); answered by one `result`. In
    /// `session` instead of the engine's when given; with `stream`, a command's output comes
    /// as `output` messages while it runs.
    Call {
        id: u64,
        tool: String,
        #[serde(default = "empty_object")]
        args: Value,
        #[serde(default)]
        session: Option<String>,
        #[serde(default)]
        stream: bool,
    },
    /// Copies a file or directory of this machine into the session's environment; answered
    /// by one `result` (`{"from", "to", "kind", "bytes"}`).
    Upload {
        id: u64,
        local: String,
        remote: String,
        #[serde(default)]
        session: Option<String>,
    },
    /// Copies a file or directory out of the session's environment to this machine.
    Download {
        id: u64,
        remote: String,
        local: String,
        #[serde(default)]
        session: Option<String>,
    },
    /// One action on a session: `exists`, `close`, `pause`, `resume`; answered by one
    /// `result`.
    Session {
        id: u64,
        action: SessionAction,
        session: String,
    },
    /// Saves a session (default: the engine's) as a snapshot; answered by one `result` (what
    /// `paddock sessions snapshot` prints).
    Snapshot {
        id: u64,
        #[serde(default)]
        session: Option<String>,
        #[serde(default)]
        name: Option<String>,
    },
    /// Starts `count` new sessions from snapshot `snapshot`; answered by one `result`
    /// (`{"snapshot", "sessions": [ids]}`).
    Fork {
        id: u64,
        snapshot: String,
        #[serde(default = "one")]
        count: usize,
    },
    /// Adds host tools while the engine runs (`engine.add_tools`); answered by one `result`
    /// (`{"tools": [every tool name]}`). Scripts started after the answer can call them.
    AddTools { id: u64, tools: Vec<HostToolSpec> },
    /// The answer to `host_call` `id`: `ok` with `value`, or not with `error`.
    HostResult {
        id: u64,
        ok: bool,
        #[serde(default)]
        value: Value,
        #[serde(default)]
        error: Option<HostError>,
    },
    /// The answer to `approval_request` `id`.
    ApprovalReply {
        id: u64,
        approved: bool,
        /// `once` (default), `session` or `always` when approved.
        #[serde(default)]
        scope: Option<String>,
    },
    /// Cancels request `id` (a running script's child is killed); its `result` is not sent.
    Cancel { id: u64 },
    /// Ends the engine: running requests are cancelled, the engine's session is closed.
    Close,
}

/// What a `session` request does.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionAction {
    /// `{"live": bool}`: whether the session has run something and was not closed.
    Exists,
    /// Ends it (environments, processes, contexts): what `paddock sessions close` prints.
    Close,
    /// Freezes it: what `paddock sessions pause` prints.
    Pause,
    Resume,
}

fn one() -> usize {
    1
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

/// `hello`: everything the engine needs before it can answer anything.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hello {
    pub protocol: u32,
    /// A policy file; none: `$PADDOCK_POLICY`, else the built-in policy.
    #[serde(default)]
    pub policy: Option<String>,
    /// The session environment tools run in; none: a session of this engine's own, closed
    /// when the engine ends.
    #[serde(default)]
    pub session: Option<String>,
    /// The backend environment tools run on instead of the policy's route (as
    /// `paddock call --backend`).
    #[serde(default)]
    pub backend: Option<String>,
    #[serde(default)]
    pub tools: Vec<HostToolSpec>,
    /// The client answers `approval_request`s.
    #[serde(default)]
    pub approver: bool,
    /// The client wants `event` messages.
    #[serde(default)]
    pub events: bool,
    /// Notebook session: each script sees the names earlier scripts of the session defined
    /// (as `[codemode] keep_state = true`; the policy's `true` cannot be turned off here).
    #[serde(default)]
    pub keep_state: bool,
}

/// A tool the client implements.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostToolSpec {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// JSON Schema of the arguments object.
    #[serde(default = "any_object")]
    pub input_schema: Value,
    /// Every call asks the approver first (as `[tools] require_approval` does).
    #[serde(default)]
    pub requires_approval: bool,
}

fn any_object() -> Value {
    serde_json::json!({"type": "object"})
}

/// Per-script limits; each one left out is the policy's.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitOverrides {
    #[serde(
        default,
        deserialize_with = "paddock_sandbox_worker::wire::float_field::option_f64"
    )]
    pub timeout_seconds: Option<f64>,
    pub max_tool_calls: Option<u32>,
    pub max_memory_mb: Option<u64>,
    pub max_output_chars: Option<usize>,
}

/// How a host tool failed: the Python exception's class name and text.
#[derive(Debug, Clone, Deserialize)]
pub struct HostError {
    #[serde(default)]
    pub exception: Option<String>,
    #[serde(default)]
    pub message: String,
}

/// What the engine sends.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerMessage {
    /// The answer to `hello`: the engine is up.
    Ready {
        protocol: u32,
        version: &'static str,
        session: String,
        /// Every tool a caller may use, host tools included.
        tools: Vec<String>,
    },
    /// The answer to request `id`: `ok` with `value`, or not with `error`
    /// (`{"error", "error_code"}`). A script that failed is `ok` (its result object says so).
    Result {
        id: u64,
        ok: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        value: Option<Value>,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<Value>,
    },
    /// Calls host tool `tool`; `request` is the client's id of the script (or call) it serves.
    HostCall {
        id: u64,
        tool: String,
        args: Value,
        call_id: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        request: Option<u64>,
    },
    /// Host call `id` is no longer awaited (its script timed out or was cancelled).
    HostCancel { id: u64 },
    /// Asks the client's approver; answered by `approval_reply`.
    ApprovalRequest { id: u64, request: ApprovalRequest },
    /// One ToolCallEvent (when `hello` asked for them).
    Event { event: ToolCallEvent },
    /// Output of streamed call `id` as it was written (each stream decoded apart).
    Output {
        id: u64,
        stream: &'static str,
        text: String,
    },
    /// A message the engine could not read, or a fatal start-up error (then the engine exits).
    Error {
        #[serde(skip_serializing_if = "Option::is_none")]
        id: Option<u64>,
        error: String,
        fatal: bool,
    },
}
