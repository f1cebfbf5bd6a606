//! A command running as a foreground call ([`super::foreground`]): the streams that follow it
//! and how to end it. Apart from the module that runs it, so that a sandbox's process record
//! ([`super::state::Proc`]) can hold one without the two modules importing each other.

use std::sync::{Mutex, MutexGuard, PoisonError};

use serde_json::json;

use super::connect::envelope;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A command running as a foreground call: who follows its stream, and how to end it.
#[derive(Debug)]
pub(crate) struct ForegroundRun {
    /// The streams that get its events; `None` once it has ended.
    followers: Mutex<Option<Vec<tokio::sync::mpsc::UnboundedSender<Vec<u8>>>>>,
    /// Notified by `SendSignal`: the call is dropped, which kills the command.
    kill: tokio::sync::Notify,
    /// When it was started (a pause waits for launches to settle).
    pub(crate) started_at_ms: u64,
}

impl ForegroundRun {
    /// A run started at `started_at_ms`, followed by no stream yet.
    pub(crate) fn new(started_at_ms: u64) -> Self {
        Self {
            followers: Mutex::new(Some(Vec::new())),
            kill: tokio::sync::Notify::new(),
            started_at_ms,
        }
    }

    /// Sends an envelope to every stream that follows the command (one that left is skipped).
    pub(crate) fn send(&self, bytes: &[u8]) {
        if let Some(followers) = lock(&self.followers).as_mut() {
            followers.retain(|f| f.send(bytes.to_vec()).is_ok());
        }
    }

    /// The last envelopes, to every follower; later `follow`s are refused.
    pub(crate) fn end(&self, last: &[Vec<u8>]) {
        if let Some(followers) = lock(&self.followers).take() {
            for follower in followers {
                for bytes in last {
                    let _ = follower.send(bytes.clone());
                }
            }
        }
    }

    /// Adds a stream (a `Connect`) from now on: its start event first. False once ended.
    pub(crate) fn follow(&self, pid: u32, tx: tokio::sync::mpsc::UnboundedSender<Vec<u8>>) -> bool {
        match lock(&self.followers).as_mut() {
            Some(followers) => {
                let _ = tx.send(envelope(0, &json!({"event": {"start": {"pid": pid}}})));
                followers.push(tx);
                true
            }
            None => false,
        }
    }

    /// Ends the command (`SendSignal`).
    pub(crate) fn kill(&self) {
        self.kill.notify_one();
    }

    /// Returns once [`ForegroundRun::kill`] was called (before or after this).
    pub(crate) async fn killed(&self) {
        self.kill.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ended_run_takes_no_more_followers_and_each_follower_gets_the_end() {
        let run = ForegroundRun::new(0);
        let (a, mut a_rx) = tokio::sync::mpsc::unbounded_channel();
        let (b, mut b_rx) = tokio::sync::mpsc::unbounded_channel();
        assert!(run.follow(7, a));
        run.send(b"x");
        assert!(run.follow(7, b));
        run.end(&[b"end".to_vec()]);
        let drained = |rx: &mut tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>| {
            std::iter::from_fn(|| rx.try_recv().ok()).count()
        };
        assert_eq!(drained(&mut a_rx), 3, "start, x, end");
        assert_eq!(drained(&mut b_rx), 2, "start, end");
        let (c, _c_rx) = tokio::sync::mpsc::unbounded_channel();
        assert!(!run.follow(7, c));
    }
}
