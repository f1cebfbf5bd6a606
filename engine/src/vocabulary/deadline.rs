//! The script's wall-clock budget. The engine owns it (the child cannot stop it) and it can be
//! paused: while any approval for a nested call waits on a human, the clock stands still.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

#[derive(Debug)]
struct State {
    budget: Duration,
    consumed: Duration,
    /// `Some` while the clock runs.
    running_since: Option<Instant>,
    pauses: usize,
}

/// A pausable deadline; clones share the same clock.
#[derive(Clone, Debug)]
pub struct Deadline {
    state: Arc<Mutex<State>>,
    changed: Arc<Notify>,
}

impl Deadline {
    /// Starts a running clock with `budget`.
    pub fn start(budget: Duration) -> Self {
        Self {
            state: Arc::new(Mutex::new(State {
                budget,
                consumed: Duration::ZERO,
                running_since: Some(Instant::now()),
                pauses: 0,
            })),
            changed: Arc::new(Notify::new()),
        }
    }

    pub fn budget(&self) -> Duration {
        self.with(|s| s.budget)
    }

    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let mut guard = match self.state.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        f(&mut guard)
    }

    /// Time left, or `None` while paused.
    pub fn remaining(&self) -> Option<Duration> {
        self.with(|s| {
            let since = s.running_since?;
            Some(s.budget.saturating_sub(s.consumed + since.elapsed()))
        })
    }

    /// Time the clock has run (pauses excluded).
    pub fn elapsed(&self) -> Duration {
        self.with(|s| s.consumed + s.running_since.map_or(Duration::ZERO, |t| t.elapsed()))
    }

    /// Stops the clock until the returned guard is dropped. Pauses nest.
    pub fn pause(&self) -> PauseGuard {
        self.with(|s| {
            s.pauses += 1;
            if let Some(since) = s.running_since.take() {
                s.consumed += since.elapsed();
            }
        });
        self.changed.notify_waiters();
        PauseGuard {
            deadline: self.clone(),
        }
    }

    fn resume(&self) {
        self.with(|s| {
            s.pauses = s.pauses.saturating_sub(1);
            if s.pauses == 0 && s.running_since.is_none() {
                s.running_since = Some(Instant::now());
            }
        });
        self.changed.notify_waiters();
    }

    /// Completes when the budget is used up (never while paused).
    pub async fn expired(&self) {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match self.remaining() {
                Some(left) if left.is_zero() => return,
                Some(left) => {
                    tokio::select! {
                        () = tokio::time::sleep(left) => {}
                        () = &mut notified => {}
                    }
                }
                None => notified.await,
            }
        }
    }
}

/// Keeps a [`Deadline`] paused while alive.
#[derive(Debug)]
pub struct PauseGuard {
    deadline: Deadline,
}

impl Drop for PauseGuard {
    fn drop(&mut self) {
        self.deadline.resume();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn expires_after_budget() {
        let d = Deadline::start(Duration::from_millis(100));
        let started = tokio::time::Instant::now();
        d.expired().await;
        assert!(started.elapsed() >= Duration::from_millis(100));
    }

    #[tokio::test]
    async fn paused_clock_does_not_expire_and_resumes_with_what_was_left() {
        let d = Deadline::start(Duration::from_millis(150));
        let guard = d.pause();
        assert_eq!(d.remaining(), None);
        let waited = tokio::time::timeout(Duration::from_millis(250), d.expired()).await;
        assert!(waited.is_err(), "expired while paused");
        drop(guard);
        let left = d.remaining().unwrap();
        assert!(left > Duration::from_millis(100), "{left:?}");
        tokio::time::timeout(Duration::from_millis(400), d.expired())
            .await
            .unwrap();
    }

    #[test]
    fn pauses_nest() {
        let d = Deadline::start(Duration::from_secs(1));
        let a = d.pause();
        let b = d.pause();
        drop(a);
        assert_eq!(d.remaining(), None);
        drop(b);
        assert!(d.remaining().is_some());
    }
}
