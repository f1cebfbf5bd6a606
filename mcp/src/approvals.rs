//! Approvals through the agent's MCP client (elicitation), for both protocol generations:
//!
//! - **legacy** (a session that began with `initialize`, ≤ 2025-11-25): an
//!   `elicitation/create` request sent to the client while the `tools/call` is in flight;
//! - **2026-07-28** (stateless): the call *returns* an `input_required` result carrying the
//!   form and a `requestState` handle. The call itself keeps running here, paused inside
//!   the approval gate; the client's retry with the same handle delivers the answer and picks
//!   the call up again. A handle is random, single-use, bound to the tool and its arguments,
//!   and expires with the policy's approval timeout (then the paused call is ended).
//!
//! A client that declared no elicitation capability, declines, cancels, or never answers means
//! deny. The script's clock stays paused meanwhile: the gate pauses it around the whole ask.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema};
use rmcp::service::{Peer, RoleServer};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use paddock_engine::approval::approvers::{Answer, AnswerFuture, ApprovalRequest, Approver};
use paddock_engine::registry::ToolError;

/// The key of our one input request in an `input_required` result.
pub const INPUT_KEY: &str = "approval";

/// The approval form: one choice, flat as elicitation forms must be.
pub fn approval_schema() -> Result<ElicitationSchema, String> {
    serde_json::from_value(json!({
        "type": "object",
        "properties": {
            "decision": {
                "type": "string",
                "title": "Decision",
                "description": "once: this call; session: this rule for the rest of the session; always: add it to the policy's allowlist; deny: do not run it",
                "enum": ["once", "session", "always", "deny"],
                "default": "deny"
            }
        },
        "required": ["decision"]
    }))
    .map_err(|e| format!("the approval form is invalid: {e}"))
}

/// The text a human reads: what, where, and which rule asked.
pub fn approval_message(request: &ApprovalRequest) -> String {
    let rule = request
        .rule
        .as_deref()
        .map(|r| format!(" (rule {r})"))
        .unwrap_or_default();
    format!(
        "Paddock: {} wants to run\n\n    {}\n\nReason: {}{}. Session: {}.",
        request.tool, request.subject, request.description, rule, request.session
    )
}

/// Reads the client's elicitation answer: accept with a decision, else deny.
pub fn answer_of(action: ElicitationAction, content: Option<&Value>) -> Answer {
    match action {
        ElicitationAction::Accept => {
            let decision = content
                .and_then(|c| c.get("decision"))
                .and_then(Value::as_str)
                .unwrap_or("deny");
            match decision {
                "once" => Answer::Once,
                "session" => Answer::Session,
                "always" => Answer::Always,
                _ => Answer::Deny,
            }
        }
        _ => Answer::Deny,
    }
}

/// Legacy: asks the client with a server-to-client `elicitation/create`.
pub struct LegacyElicitation {
    pub peer: Peer<RoleServer>,
}

impl Approver for LegacyElicitation {
    fn name(&self) -> String {
        "mcp-client".into()
    }

    fn ask<'a>(&'a self, request: &'a ApprovalRequest) -> AnswerFuture<'a> {
        Box::pin(async move {
            let params = ElicitRequestParams::FormElicitationParams {
                meta: None,
                message: approval_message(request),
                requested_schema: approval_schema()?,
            };
            let result =
                self.peer.create_elicitation(params).await.map_err(|e| {
                    format!("the MCP client did not answer the approval request: {e}")
                })?;
            Ok(answer_of(result.action, result.content.as_ref()))
        })
    }
}

/// A client that cannot show a prompt: every ask is a deny that says why.
pub struct NoElicitation;

impl Approver for NoElicitation {
    fn name(&self) -> String {
        "mcp-client".into()
    }

    fn ask<'a>(&'a self, _request: &'a ApprovalRequest) -> AnswerFuture<'a> {
        Box::pin(async {
            Err("the MCP client cannot ask a human (it declared no elicitation capability)".into())
        })
    }
}

/// One question from a paused call, waiting for the client's retry.
pub struct Question {
    pub request: ApprovalRequest,
    pub reply: oneshot::Sender<Result<Answer, String>>,
}

/// 2026-07-28: forwards the gate's question to the request handler, which turns it into an
/// `input_required` result, and waits for the answer the retry brings.
pub struct DeferredElicitation {
    pub questions: mpsc::UnboundedSender<Question>,
}

impl Approver for DeferredElicitation {
    fn name(&self) -> String {
        "mcp-client".into()
    }

    fn ask<'a>(&'a self, request: &'a ApprovalRequest) -> AnswerFuture<'a> {
        Box::pin(async move {
            let (reply, answer) = oneshot::channel();
            self.questions
                .send(Question {
                    request: request.clone(),
                    reply,
                })
                .map_err(|_| "the MCP request was abandoned".to_owned())?;
            answer
                .await
                .map_err(|_| "the MCP client did not come back with an answer".to_owned())?
        })
    }
}

/// A call in progress: the spawned tool call, and where its questions arrive.
pub struct RunningCall {
    pub task: tokio::task::JoinHandle<Result<Value, ToolError>>,
    pub questions: mpsc::UnboundedReceiver<Question>,
    /// Points the call's progress at the request currently serving it.
    pub progress: Arc<crate::progress::ProgressRelay>,
    /// Reports that the call is still running.
    pub heartbeat: paddock_engine::registry::ProgressSink,
    pub started: std::time::Instant,
}

impl Drop for RunningCall {
    fn drop(&mut self) {
        // Nobody will read the result: end the call (its script or command dies with it).
        self.task.abort();
    }
}

/// A call paused on a question, parked until the client retries.
pub struct Parked {
    pub call: RunningCall,
    pub question: Question,
    /// What the handle is bound to.
    pub tool: String,
    pub arguments_digest: String,
}

/// Parked calls by handle.
#[derive(Default)]
pub struct ParkedCalls {
    calls: Mutex<HashMap<String, Parked>>,
}

impl ParkedCalls {
    /// Parks `parked` under a fresh handle that expires after `ttl`.
    pub fn park(self: &Arc<Self>, parked: Parked, ttl: Duration) -> String {
        let handle = new_handle();
        if let Ok(mut calls) = self.calls.lock() {
            calls.insert(handle.clone(), parked);
        }
        let calls = self.clone();
        let expiring = handle.clone();
        tokio::spawn(async move {
            tokio::time::sleep(ttl).await;
            let expired = calls
                .calls
                .lock()
                .ok()
                .and_then(|mut c| c.remove(&expiring));
            if let Some(parked) = expired {
                tracing::info!(tool = %parked.tool, "an approval request expired unanswered; the call is ended");
                let _ = parked
                    .question
                    .reply
                    .send(Err("the approval request expired unanswered".into()));
                drop(parked.call);
            }
        });
        handle
    }

    /// Takes the call parked under `handle` (single use); it must be the same tool with the
    /// same arguments.
    pub fn take(&self, handle: &str, tool: &str, arguments_digest: &str) -> Result<Parked, String> {
        let mut calls = self
            .calls
            .lock()
            .map_err(|_| "the parked-call table is unusable".to_owned())?;
        let Some(parked) = calls.remove(handle) else {
            return Err(
                "unknown or expired requestState: this approval was already answered or timed \
                 out; call the tool again"
                    .into(),
            );
        };
        if parked.tool != tool || parked.arguments_digest != arguments_digest {
            // Put it back: the rightful retry may still come.
            let mismatch = format!(
                "the requestState belongs to a call of '{}' with other arguments",
                parked.tool
            );
            calls.insert(handle.to_owned(), parked);
            return Err(mismatch);
        }
        Ok(parked)
    }
}

fn new_handle() -> String {
    use std::io::Read;
    let mut bytes = [0u8; 24];
    let random = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    if random.is_err() {
        // Still unguessable enough to be unique; never a fixed value.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        bytes[..16].copy_from_slice(&now.to_le_bytes());
    }
    format!("paddock-approval-{}", hex::encode(bytes))
}

/// A digest of the arguments a handle is bound to.
pub fn digest(arguments: &Value) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(arguments.to_string().as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_accepted_allowing_decision_allows() {
        let once = json!({"decision": "once"});
        assert_eq!(
            answer_of(ElicitationAction::Accept, Some(&once)),
            Answer::Once
        );
        assert_eq!(
            answer_of(
                ElicitationAction::Accept,
                Some(&json!({"decision": "deny"}))
            ),
            Answer::Deny
        );
        assert_eq!(answer_of(ElicitationAction::Accept, None), Answer::Deny);
        assert_eq!(
            answer_of(ElicitationAction::Decline, Some(&once)),
            Answer::Deny
        );
        assert_eq!(
            answer_of(ElicitationAction::Cancel, Some(&once)),
            Answer::Deny
        );
    }

    fn parked(tool: &str, args: &Value) -> (Parked, oneshot::Receiver<Result<Answer, String>>) {
        let (_questions_tx, questions) = mpsc::unbounded_channel();
        let (reply, answer) = oneshot::channel();
        let call = RunningCall {
            task: tokio::spawn(async { Ok(Value::Null) }),
            questions,
            progress: Arc::default(),
            heartbeat: Arc::new(|_| {}),
            started: std::time::Instant::now(),
        };
        let request = ApprovalRequest {
            kind: "command_approval",
            tool: tool.into(),
            subject: "rm -rf x".into(),
            rule: None,
            description: "test".into(),
            session: "s".into(),
            timeout_seconds: 1.0,
        };
        let parked = Parked {
            call,
            question: Question { request, reply },
            tool: tool.into(),
            arguments_digest: digest(args),
        };
        (parked, answer)
    }

    #[tokio::test]
    async fn a_handle_is_single_use_and_bound_to_its_call() {
        let table = Arc::new(ParkedCalls::default());
        let args = json!({"command": "rm -rf x"});
        let (call, _answer) = parked("terminal", &args);
        let handle = table.park(call, Duration::from_secs(60));
        assert!(
            table
                .take("paddock-approval-forged", "terminal", &digest(&args))
                .is_err()
        );
        // Other arguments: refused, and the rightful retry still works.
        let other = digest(&json!({"command": "ls"}));
        assert!(table.take(&handle, "terminal", &other).is_err());
        assert!(
            table
                .take(&handle, "python_execute", &digest(&args))
                .is_err()
        );
        assert!(table.take(&handle, "terminal", &digest(&args)).is_ok());
        assert!(table.take(&handle, "terminal", &digest(&args)).is_err());
    }

    #[tokio::test]
    async fn an_unanswered_handle_expires_as_a_deny() {
        let table = Arc::new(ParkedCalls::default());
        let args = json!({});
        let (call, answer) = parked("terminal", &args);
        let handle = table.park(call, Duration::from_millis(50));
        let expired = tokio::time::timeout(Duration::from_secs(5), answer)
            .await
            .unwrap()
            .unwrap();
        assert!(expired.unwrap_err().contains("expired"));
        assert!(table.take(&handle, "terminal", &digest(&args)).is_err());
    }

    #[test]
    fn the_form_is_a_valid_elicitation_schema() {
        approval_schema().unwrap();
    }
}
