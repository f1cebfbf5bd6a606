//! Progress notifications: a running script's nested calls reported to the MCP client.
//!
//! The engine reports through a plain callback; a forwarding task sends the notifications in
//! order. The target (peer and progress token) can change while the call runs: a 2026-07-28
//! call paused for an approval continues under the client's retry, a new request.

use std::sync::{Arc, Mutex};

use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::{Peer, RoleServer};
use tokio::sync::mpsc;

use paddock_engine::registry::ProgressSink;

/// What the relay's task is given: a message to send, or a flush to answer once every
/// message before it was sent.
enum Relayed {
    Message(String),
    Flush(tokio::sync::oneshot::Sender<()>),
}

/// Where progress of one call goes right now.
#[derive(Default)]
pub struct ProgressRelay {
    target: Mutex<Option<(Peer<RoleServer>, ProgressToken)>>,
    /// The relay's queue, for [`ProgressRelay::flush`].
    queue: Mutex<Option<mpsc::UnboundedSender<Relayed>>>,
}

impl ProgressRelay {
    /// Sends further progress to `peer` under `token` (none: the request asked for none).
    pub fn retarget(&self, peer: Peer<RoleServer>, token: Option<ProgressToken>) {
        if let Ok(mut target) = self.target.lock() {
            *target = token.map(|t| (peer, t));
        }
    }

    fn current(&self) -> Option<(Peer<RoleServer>, ProgressToken)> {
        self.target.lock().ok().and_then(|t| t.clone())
    }

    /// A sink for the engine; notifications leave in order from one task, which ends when the
    /// sink (held by the call) is dropped.
    pub fn sink(self: &Arc<Self>) -> ProgressSink {
        let (tx, mut rx) = mpsc::unbounded_channel::<Relayed>();
        if let Ok(mut queue) = self.queue.lock() {
            *queue = Some(tx.clone());
        }
        // The task holds the relay weakly: the relay holds the queue the task reads.
        let relay = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut step = 0.0;
            while let Some(item) = rx.recv().await {
                let message = match item {
                    Relayed::Message(message) => message,
                    Relayed::Flush(done) => {
                        let _ = done.send(());
                        continue;
                    }
                };
                let Some(relay) = relay.upgrade() else {
                    break;
                };
                step += 1.0;
                if let Some((peer, token)) = relay.current() {
                    let param = ProgressNotificationParam::new(token, step).with_message(message);
                    if let Err(err) = peer.notify_progress(param).await {
                        tracing::debug!(%err, "progress notification not delivered");
                    }
                }
            }
        });
        Arc::new(move |message: String| {
            let _ = tx.send(Relayed::Message(message));
        })
    }

    /// Waits (up to a second) until every message given so far was sent: a call's answer
    /// must not overtake its last output (a Streamable HTTP request's stream ends with it).
    pub async fn flush(&self) {
        let queue = self.queue.lock().ok().and_then(|q| q.clone());
        if let Some(queue) = queue {
            let (done, sent) = tokio::sync::oneshot::channel();
            if queue.send(Relayed::Flush(done)).is_ok() {
                let _ = tokio::time::timeout(std::time::Duration::from_secs(1), sent).await;
            }
        }
    }
}
