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

/// Where progress of one call goes right now.
#[derive(Default)]
pub struct ProgressRelay {
    target: Mutex<Option<(Peer<RoleServer>, ProgressToken)>>,
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
        let (tx, mut rx) = mpsc::unbounded_channel::<String>();
        let relay = self.clone();
        tokio::spawn(async move {
            let mut step = 0.0;
            while let Some(message) = rx.recv().await {
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
            let _ = tx.send(message);
        })
    }
}

/// Where a command's output goes for a client that asked for progress: each piece of text,
/// decoded per stream (a character never split), becomes one notification's message, in
/// order behind the call's other progress.
pub fn forward_output(sink: ProgressSink) -> paddock_backends::ChunkSender {
    let (tx, mut rx) = mpsc::unbounded_channel::<paddock_backends::OutputChunk>();
    tokio::spawn(async move {
        let mut decoders = paddock_backends::stream::StreamDecoders::default();
        while let Some(chunk) = rx.recv().await {
            let text = decoders.push(&chunk);
            if !text.is_empty() {
                sink(text);
            }
        }
        for (_, rest) in decoders.finish() {
            sink(rest);
        }
    });
    tx
}
