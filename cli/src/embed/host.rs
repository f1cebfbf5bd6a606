//! Host tools: tools the embedding client implements. Each is an ordinary registry tool (the
//! same dispatch as every other: filter, schema check, approval, events, the script's call
//! limit and clock); its call becomes a `host_call` message and waits for the client's
//! `host_result`. The approver that asks the client is here too.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::oneshot;

use super::outbox::Outbox;
use super::protocol::{HostError, HostToolSpec, ServerMessage};
use paddock_engine::registry::{CallContext, Tool, ToolError, ToolFuture, ToolSpec};
use paddock_engine::vocabulary::approver::{Answer, AnswerFuture, ApprovalRequest, Approver};

/// The toolset host tools belong to (`[toolsets]` can switch them off like any other).
pub const HOST_TOOLSET: &str = "host";

/// A host tool's answer.
pub type HostAnswer = Result<Value, HostError>;

/// The engine's side of the client's tools and approver: the calls awaiting an answer, and
/// which client request each running script serves.
pub struct HostLink {
    out: Outbox,
    next_id: AtomicU64,
    pub(super) calls: Mutex<HashMap<u64, oneshot::Sender<HostAnswer>>>,
    approvals: Mutex<HashMap<u64, oneshot::Sender<Answer>>>,
    /// A running script's call id -> the client's id of its request.
    scripts: Mutex<HashMap<String, u64>>,
}

impl HostLink {
    pub fn new(out: Outbox) -> Self {
        Self {
            out,
            next_id: AtomicU64::new(1),
            calls: Mutex::default(),
            approvals: Mutex::default(),
            scripts: Mutex::default(),
        }
    }

    /// Sends `message` to the client (dropped when the writer is gone: the client left).
    pub fn send(&self, message: &ServerMessage) {
        super::send(&self.out, message);
    }

    /// Remembers that the script `call_id` serves the client's request `request`.
    pub fn script_started(&self, call_id: &str, request: u64) {
        if let Ok(mut scripts) = self.scripts.lock() {
            scripts.insert(call_id.to_owned(), request);
        }
    }

    pub fn script_ended(&self, call_id: &str) {
        if let Ok(mut scripts) = self.scripts.lock() {
            scripts.remove(call_id);
        }
    }

    fn request_of(&self, ctx: &CallContext) -> Option<u64> {
        let parent = ctx.parent_call_id.as_deref()?;
        self.scripts.lock().ok()?.get(parent).copied()
    }

    /// The client answered host call `id`; an answer nobody waits for (its script ended) is
    /// dropped.
    pub fn answer_call(&self, id: u64, answer: HostAnswer) {
        let waiting = self.calls.lock().ok().and_then(|mut c| c.remove(&id));
        match waiting {
            Some(tx) => {
                let _ = tx.send(answer);
            }
            None => tracing::debug!(id, "host_result for a call no longer awaited"),
        }
    }

    /// The client answered approval request `id`.
    pub fn answer_approval(&self, id: u64, answer: Answer) {
        let waiting = self.approvals.lock().ok().and_then(|mut a| a.remove(&id));
        match waiting {
            Some(tx) => {
                let _ = tx.send(answer);
            }
            None => tracing::debug!(id, "approval_reply for a request no longer awaited"),
        }
    }

    /// Fails every call and approval still waiting: the client is gone.
    pub fn abandon_all(&self) {
        if let Ok(mut calls) = self.calls.lock() {
            calls.clear();
        }
        if let Ok(mut approvals) = self.approvals.lock() {
            approvals.clear();
        }
    }

    fn next(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }
}

/// Removes a host call nobody awaits any more and tells the client, unless it was answered.
struct PendingCall<'a> {
    link: &'a HostLink,
    id: u64,
    answered: bool,
}

impl Drop for PendingCall<'_> {
    fn drop(&mut self) {
        if self.answered {
            return;
        }
        let was_waiting = self
            .link
            .calls
            .lock()
            .ok()
            .and_then(|mut c| c.remove(&self.id))
            .is_some();
        if was_waiting {
            self.link.send(&ServerMessage::HostCancel { id: self.id });
        }
    }
}

/// One tool of the client.
pub struct HostTool {
    link: Arc<HostLink>,
    spec: ToolSpec,
}

impl HostTool {
    pub fn new(link: Arc<HostLink>, declared: &HostToolSpec) -> Self {
        let description = if declared.description.trim().is_empty() {
            format!("{} (a tool of the embedding program)", declared.name)
        } else {
            declared.description.clone()
        };
        Self {
            link,
            spec: ToolSpec::new(
                declared.name.clone(),
                HOST_TOOLSET,
                description,
                declared.input_schema.clone(),
            ),
        }
    }
}

impl Tool for HostTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn call(&self, args: Value, ctx: CallContext) -> ToolFuture {
        let link = self.link.clone();
        let tool = self.spec.name.clone();
        Box::pin(async move {
            let id = link.next();
            let (tx, rx) = oneshot::channel();
            if let Ok(mut calls) = link.calls.lock() {
                calls.insert(id, tx);
            }
            let mut pending = PendingCall {
                link: &link,
                id,
                answered: false,
            };
            link.send(&ServerMessage::HostCall {
                id,
                tool: tool.clone(),
                args,
                call_id: ctx.call_id.clone(),
                request: link.request_of(&ctx),
            });
            let answer = rx.await;
            pending.answered = true;
            match answer {
                Ok(Ok(value)) => Ok(value),
                Ok(Err(error)) => Err(host_error(&tool, error)),
                Err(_) => Err(ToolError::failed(format!(
                    "host tool '{tool}' got no answer: the embedding program closed the engine"
                ))),
            }
        })
    }
}

/// A host tool's exception as the script sees it: `ValueError` stays a `ValueError`,
/// `PermissionError` a `PermissionError`, anything else a `RuntimeError`; the text names the
/// tool and the original exception.
fn host_error(tool: &str, error: HostError) -> ToolError {
    let exception = error.exception.as_deref().unwrap_or("Exception");
    let message = format!("host tool '{tool}' raised {exception}: {}", error.message);
    match exception {
        "ValueError" | "TypeError" => ToolError::invalid_arguments(message),
        "PermissionError" => ToolError::denied(
            paddock_engine::vocabulary::ErrorCode::ApprovalDenied,
            message,
        ),
        _ => ToolError::failed(message),
    }
}

/// Asks the client (`approval_request` / `approval_reply`).
pub struct ClientApprover {
    pub link: Arc<HostLink>,
}

/// Removes an approval request nobody awaits any more (the gate's timeout passed).
struct PendingApproval<'a> {
    link: &'a HostLink,
    id: u64,
}

impl Drop for PendingApproval<'_> {
    fn drop(&mut self) {
        if let Ok(mut approvals) = self.link.approvals.lock() {
            approvals.remove(&self.id);
        }
    }
}

impl Approver for ClientApprover {
    fn name(&self) -> String {
        "embed".into()
    }

    fn ask<'a>(&'a self, request: &'a ApprovalRequest) -> AnswerFuture<'a> {
        Box::pin(async move {
            let id = self.link.next();
            let (tx, rx) = oneshot::channel();
            if let Ok(mut approvals) = self.link.approvals.lock() {
                approvals.insert(id, tx);
            }
            let _pending = PendingApproval {
                link: &self.link,
                id,
            };
            self.link.send(&ServerMessage::ApprovalRequest {
                id,
                request: request.clone(),
            });
            rx.await
                .map_err(|_| "the embedding program closed the engine before answering".into())
        })
    }
}

/// An `approval_reply`'s answer.
pub fn answer_of(approved: bool, scope: Option<&str>) -> Answer {
    if !approved {
        return Answer::Deny;
    }
    match scope {
        Some("session") => Answer::Session,
        Some("always") => Answer::Always,
        _ => Answer::Once,
    }
}
