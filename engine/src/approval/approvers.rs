//! Who answers an approval request: a program the operator names (a chat bot, a web hook), a
//! person at this terminal, or (the MCP issue) the agent's client. With none reachable, the
//! answer is deny.

use std::io::{BufRead, Write};
use std::time::Duration;

use serde::Deserialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub use crate::vocabulary::approver::{Answer, AnswerFuture, ApprovalRequest, Approver};

/// Runs a program with the request as JSON on stdin; its stdout (JSON `{"decision": ...}` or a
/// bare word: once, session, always, deny) is the answer. A failure or silence is deny.
pub struct CommandApprover {
    pub program: String,
    pub args: Vec<String>,
}

impl Approver for CommandApprover {
    fn name(&self) -> String {
        format!("command:{}", self.program)
    }

    fn ask<'a>(&'a self, request: &'a ApprovalRequest) -> AnswerFuture<'a> {
        Box::pin(async move {
            let mut child = tokio::process::Command::new(&self.program)
                .args(&self.args)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::inherit())
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| format!("cannot run approver {}: {e}", self.program))?;
            let payload = serde_json::to_vec(request).map_err(|e| e.to_string())?;
            if let Some(mut stdin) = child.stdin.take() {
                let _ = stdin.write_all(&payload).await;
                let _ = stdin.write_all(b"\n").await;
            }
            let mut out = String::new();
            if let Some(mut stdout) = child.stdout.take() {
                let _ = stdout.read_to_string(&mut out).await;
            }
            let status = child.wait().await.map_err(|e| e.to_string())?;
            if !status.success() {
                return Err(format!("approver {} exited with {status}", self.program));
            }
            #[derive(Deserialize)]
            struct Reply {
                decision: String,
            }
            Ok(match serde_json::from_str::<Reply>(out.trim()) {
                Ok(reply) => Answer::parse(&reply.decision),
                Err(_) => Answer::parse(&out),
            })
        })
    }
}

/// Asks the person at this terminal (`/dev/tty`). Enter alone, anything unexpected, or the
/// timeout means deny.
pub struct TerminalApprover;

impl TerminalApprover {
    /// Only when a person can answer: stdin and stderr are terminals.
    pub fn available() -> bool {
        use std::io::IsTerminal;
        std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
    }
}

impl Approver for TerminalApprover {
    fn name(&self) -> String {
        "terminal".into()
    }

    fn ask<'a>(&'a self, request: &'a ApprovalRequest) -> AnswerFuture<'a> {
        let prompt = format!(
            "\n⚠️  {} wants to run:\n    {}\n  {}{}\n  [o]nce / [s]ession / [a]lways / anything else denies (timeout {} s): ",
            request.tool,
            request.subject,
            request.description,
            request
                .rule
                .as_ref()
                .map(|r| format!(" (rule {r})"))
                .unwrap_or_default(),
            request.timeout_seconds
        );
        Box::pin(async move {
            let (tx, rx) = tokio::sync::oneshot::channel();
            // A blocking read on the terminal; if the timeout wins, the thread is left to end
            // with the process.
            std::thread::spawn(move || {
                let answer = (|| -> std::io::Result<Answer> {
                    let mut tty = std::fs::OpenOptions::new()
                        .read(true)
                        .write(true)
                        .open("/dev/tty")?;
                    tty.write_all(prompt.as_bytes())?;
                    tty.flush()?;
                    let mut line = String::new();
                    std::io::BufReader::new(tty).read_line(&mut line)?;
                    Ok(Answer::parse(&line))
                })();
                let _ = tx.send(answer.map_err(|e| e.to_string()));
            });
            rx.await
                .map_err(|_| "the terminal prompt failed".to_owned())?
        })
    }
}

/// Default wait when the policy does not say.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enter_alone_and_garbage_deny() {
        assert_eq!(Answer::parse(""), Answer::Deny);
        assert_eq!(Answer::parse("\n"), Answer::Deny);
        assert_eq!(Answer::parse("maybe"), Answer::Deny);
        assert_eq!(Answer::parse("o\n"), Answer::Once);
        assert_eq!(Answer::parse("session"), Answer::Session);
    }
}
