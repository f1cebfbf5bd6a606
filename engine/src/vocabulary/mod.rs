//! The words every layer shares, and nothing else: who is calling ([`CallContext`]), how a
//! call fails ([`ToolError`]), the script's pausable clock ([`deadline::Deadline`]), who asks a
//! human ([`approver::Approver`]) and who decides whether a tool call needs one
//! ([`ToolApprovals`]). This module imports no other module of the crate: the registry, the
//! approval gate, code mode and the tools all build on it (ARCHITECTURE.md, "Layers").

pub mod approver;
pub mod deadline;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Value;

use deadline::Deadline;

/// The error codes Paddock itself answers with (DESIGN.md section 2; pinned by a test). A
/// [`ToolError`]'s `code` stays a string: hooks and a library's own tools may add theirs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    InvalidArguments,
    ToolFailed,
    ToolNotFound,
    ToolNotAllowed,
    ApprovalDenied,
    SyntaxError,
    Timeout,
    MemoryLimit,
    ScriptError,
    SandboxFailed,
    ToolCallLimit,
}

impl ErrorCode {
    /// Every code, for the test that pins their strings.
    pub const ALL: [ErrorCode; 11] = [
        ErrorCode::InvalidArguments,
        ErrorCode::ToolFailed,
        ErrorCode::ToolNotFound,
        ErrorCode::ToolNotAllowed,
        ErrorCode::ApprovalDenied,
        ErrorCode::SyntaxError,
        ErrorCode::Timeout,
        ErrorCode::MemoryLimit,
        ErrorCode::ScriptError,
        ErrorCode::SandboxFailed,
        ErrorCode::ToolCallLimit,
    ];

    /// The string callers see in `error_code`.
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidArguments => "tool:invalid_arguments",
            ErrorCode::ToolFailed => "tool:failed",
            ErrorCode::ToolNotFound => "tool:not_found",
            ErrorCode::ToolNotAllowed => "tool:not_allowed",
            ErrorCode::ApprovalDenied => "tool_approval:denied",
            ErrorCode::SyntaxError => "codemode:syntax_error",
            ErrorCode::Timeout => "codemode:timeout",
            ErrorCode::MemoryLimit => "codemode:memory_limit",
            ErrorCode::ScriptError => "codemode:script_error",
            ErrorCode::SandboxFailed => "codemode:sandbox_failed",
            ErrorCode::ToolCallLimit => "codemode:tool_call_limit",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<ErrorCode> for String {
    fn from(code: ErrorCode) -> String {
        code.as_str().to_owned()
    }
}

/// The code-mode tool's name: the registry keeps it out of what scripts can call.
pub const RUN_TOOLS_SCRIPT: &str = "run_tools_script";

/// Decides `[tools] require_approval` calls for the registry (the approval gate).
pub trait ToolApprovals: Send + Sync {
    /// `Ok` when a human (or a standing approval) allows `tool` with `args`.
    fn check_tool<'a>(
        &'a self,
        tool: &'a str,
        args: &'a Value,
        ctx: &'a CallContext,
    ) -> Pin<Box<dyn Future<Output = Result<(), ToolError>> + Send + 'a>>;
}

/// Who is calling, for events, approvals and the script's pausable clock.
#[derive(Clone, Default)]
pub struct CallContext {
    pub call_id: String,
    /// The agent session (`--session`): owns shell state and background processes.
    pub session: String,
    pub parent_call_id: Option<String>,
    /// The calling script's deadline; approvals pause it while a human decides.
    pub deadline: Option<Deadline>,
    /// Who asks a human for this call when the policy names no approver (the MCP client).
    pub approver: Option<Arc<dyn approver::Approver>>,
    /// Where a running script reports its nested calls (MCP progress notifications).
    pub progress: Option<ProgressSink>,
    /// Where a command tool sends its output as it is written (`terminal`, `python_execute`):
    /// the caller streams it (MCP progress, `paddock call --stream`, the Python callbacks).
    pub output: Option<paddock_backends::ChunkSender>,
}

/// Receives one progress message (`"<tool> started"`, `"<tool> finished"`).
pub type ProgressSink = Arc<dyn Fn(String) + Send + Sync>;

/// Kinds of tool failure; each maps to the exception a script sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolErrorKind {
    /// The arguments were rejected: `ValueError`.
    InvalidArguments,
    /// A policy or a human said no: `PermissionError`.
    Denied,
    /// The tool does not exist or is not allowed: `RuntimeError`.
    NotFound,
    /// The tool ran and failed: `RuntimeError`.
    Failed,
}

impl ToolErrorKind {
    /// The Python exception a script sees for this kind.
    pub fn python_exception(self) -> &'static str {
        match self {
            ToolErrorKind::InvalidArguments => "ValueError",
            ToolErrorKind::Denied => "PermissionError",
            ToolErrorKind::NotFound | ToolErrorKind::Failed => "RuntimeError",
        }
    }
}

/// A failed tool call: always reported as JSON with `error` and `error_code`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct ToolError {
    pub kind: ToolErrorKind,
    /// Stable machine-readable code, e.g. `tool:invalid_arguments`, `tool_approval:denied`.
    pub code: String,
    pub message: String,
}

impl ToolError {
    pub fn invalid_arguments(message: impl Into<String>) -> Self {
        Self {
            kind: ToolErrorKind::InvalidArguments,
            code: ErrorCode::InvalidArguments.into(),
            message: message.into(),
        }
    }

    pub fn failed(message: impl Into<String>) -> Self {
        Self {
            kind: ToolErrorKind::Failed,
            code: ErrorCode::ToolFailed.into(),
            message: message.into(),
        }
    }

    pub fn denied(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            kind: ToolErrorKind::Denied,
            code: code.into(),
            message: message.into(),
        }
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self {
            kind: ToolErrorKind::NotFound,
            code: ErrorCode::ToolNotFound.into(),
            message: message.into(),
        }
    }

    /// The JSON a caller of `paddock call` (or an MCP client) gets.
    pub fn to_json(&self) -> Value {
        serde_json::json!({"error": self.message, "error_code": self.code})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_are_the_designs() {
        // DESIGN.md section 2, and the two the registry adds for calls it refuses.
        let strings: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(
            strings,
            [
                "tool:invalid_arguments",
                "tool:failed",
                "tool:not_found",
                "tool:not_allowed",
                "tool_approval:denied",
                "codemode:syntax_error",
                "codemode:timeout",
                "codemode:memory_limit",
                "codemode:script_error",
                "codemode:sandbox_failed",
                "codemode:tool_call_limit",
            ]
        );
        assert_eq!(ToolError::failed("x").code, "tool:failed");
        assert_eq!(
            ToolError::invalid_arguments("x").code,
            "tool:invalid_arguments"
        );
    }
}
