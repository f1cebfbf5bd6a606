//! Who answers a question for a human: the request, the answer, and the trait every way of
//! asking implements (a program, this terminal, the MCP client). The implementations live in
//! `approval::approvers`; the trait is here because a call's context carries one.

use std::future::Future;
use std::pin::Pin;

use serde::{Deserialize, Serialize};

/// What is being asked.
#[derive(Debug, Clone, Serialize)]
pub struct ApprovalRequest {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub tool: String,
    /// The command (terminal) or the arguments (other tools) awaiting approval.
    pub subject: String,
    pub rule: Option<String>,
    pub description: String,
    pub session: String,
    pub timeout_seconds: f64,
}

/// A human's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    /// This call only.
    Once,
    /// This call and the same rule for the rest of the session.
    Session,
    /// From now on (recorded as a permanent approval).
    Always,
    Deny,
}

impl Answer {
    /// A human's typed answer; anything unrecognised is `Deny`.
    pub fn parse(text: &str) -> Answer {
        let word = text.trim().to_ascii_lowercase();
        match word.as_str() {
            "once" | "o" | "y" | "yes" | "approve" | "approved" | "allow" => Answer::Once,
            "session" | "s" => Answer::Session,
            "always" | "a" => Answer::Always,
            _ => Answer::Deny,
        }
    }
}

pub type AnswerFuture<'a> = Pin<Box<dyn Future<Output = Result<Answer, String>> + Send + 'a>>;

/// One way of asking a human.
pub trait Approver: Send + Sync {
    /// For the audit log.
    fn name(&self) -> String;
    /// Asks; the caller bounds the wait with the policy's approval timeout.
    fn ask<'a>(&'a self, request: &'a ApprovalRequest) -> AnswerFuture<'a>;
}
