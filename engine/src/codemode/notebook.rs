//! Notebook sessions (`[codemode] keep_state`): the scripts of one session run one after another
//! in one long-lived confined child, and see the names earlier scripts defined.
//!
//! Each session has its own child (never shared), taken from the same pre-forked pool as
//! independent scripts. A script that times out, exhausts the memory budget or kills its child
//! ends the state; the session's next script gets a fresh child, and both results say so. The
//! child closes with its session (closed explicitly, idle past `[sessions]
//! idle_timeout_seconds`, or evicted when more sessions keep state than
//! `[codemode] max_kept_sessions`), or with the engine.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::pool::{LiveChild, lock};
use super::saved_state::{self, ExchangeError, NotebookState};

/// How long a snapshot waits for a running script of the session before it gives up.
const SCRIPT_WAIT: Duration = Duration::from_secs(60);

/// One session's kept state.
#[derive(Default)]
pub(super) struct Notebook {
    pub child: Option<LiveChild>,
    /// Scripts run in the current state.
    pub cells: u64,
    /// Why the state was lost, told to the session's next script.
    pub reset_reason: Option<String>,
}

impl Notebook {
    /// Ends the state (the child is killed when dropped); the next script hears `reason`.
    pub fn end(&mut self, reason: String) {
        self.child = None;
        self.reset_reason = Some(reason);
    }

    /// The `notebook` object of a script's result.
    pub fn describe(&self, session: &str, fresh: bool, reset: Option<&str>) -> Value {
        let mut out = json!({
            "session": session,
            "cell": self.cells,
            "fresh": fresh,
        });
        if let Some(reason) = reset {
            out["reset_reason"] = json!(reason);
        }
        out
    }
}

struct Entry {
    state: Arc<tokio::sync::Mutex<Notebook>>,
    last_used: Instant,
}

/// Every session's notebook, by session id.
pub(super) struct Notebooks {
    entries: Mutex<HashMap<String, Entry>>,
    max_sessions: usize,
}

impl Notebooks {
    pub fn new(max_sessions: usize) -> Self {
        Self {
            entries: Mutex::default(),
            max_sessions: max_sessions.max(1),
        }
    }

    /// The notebook of `session`, created when new. Making room for it evicts the session that
    /// has waited longest, if it is not running a script.
    pub fn of(&self, session: &str) -> Arc<tokio::sync::Mutex<Notebook>> {
        let mut entries = lock(&self.entries);
        if let Some(entry) = entries.get_mut(session) {
            entry.last_used = Instant::now();
            return entry.state.clone();
        }
        let live = entries
            .values()
            .filter(|e| e.state.try_lock().is_ok_and(|n| n.child.is_some()))
            .count();
        if live >= self.max_sessions {
            let oldest = entries
                .iter()
                .filter(|(_, e)| e.state.try_lock().is_ok_and(|n| n.child.is_some()))
                .min_by_key(|(_, e)| e.last_used)
                .map(|(id, _)| id.clone());
            if let Some(id) = oldest
                && let Some(entry) = entries.get(&id)
                && let Ok(mut notebook) = entry.state.try_lock()
            {
                tracing::info!(session = %id, "notebook state evicted to make room");
                notebook.end(format!(
                    "the state was closed to make room: more than {} sessions kept state \
                     ([codemode] max_kept_sessions)",
                    self.max_sessions
                ));
            }
        }
        let state = Arc::new(tokio::sync::Mutex::new(Notebook::default()));
        entries.insert(
            session.to_owned(),
            Entry {
                state: state.clone(),
                last_used: Instant::now(),
            },
        );
        state
    }

    /// The notebook of `session`, if it has one.
    fn existing(&self, session: &str) -> Option<Arc<tokio::sync::Mutex<Notebook>>> {
        lock(&self.entries).get(session).map(|e| e.state.clone())
    }

    /// The names of `session`'s notebook, for a snapshot; `None` when it holds none. Waits
    /// for a script of the session that is running. A child that fails the dump without
    /// answering is ended, and the session's next script hears why.
    pub async fn dump(&self, session: &str) -> Result<Option<NotebookState>, String> {
        let Some(state) = self.existing(session) else {
            return Ok(None);
        };
        let mut notebook = tokio::time::timeout(SCRIPT_WAIT, state.lock_owned())
            .await
            .map_err(|_| {
                format!(
                    "a script of session '{session}' has run for more than {} s: snapshot the                      session when it ends",
                    SCRIPT_WAIT.as_secs()
                )
            })?;
        let Some(live) = notebook.child.as_mut() else {
            return Ok(None);
        };
        if live.checkout.has_exited() || !live.checkout.zygote_alive() {
            notebook.end("the session's sandbox child had ended while it waited".into());
            return Ok(None);
        }
        match saved_state::dump(live).await {
            Ok(state) => Ok(Some(state)),
            Err(ExchangeError::Refused(reason)) => Err(reason),
            Err(ExchangeError::ChildLost(reason)) => {
                live.checkout.forget_exit();
                notebook.end(format!(
                    "saving the names for a snapshot failed ({reason}); the names defined \
                     before are gone"
                ));
                Err(reason)
            }
        }
    }

    /// Closes `session`'s state now (its child is killed). Answers whether it had any.
    pub fn close(&self, session: &str) -> bool {
        let removed = lock(&self.entries).remove(session);
        match removed {
            Some(entry) => {
                // A script still running holds the lock; it finds its child gone afterwards
                // only through the dropped entry, so kill what can be reached now.
                if let Ok(mut notebook) = entry.state.try_lock() {
                    notebook.child = None;
                }
                true
            }
            None => false,
        }
    }

    /// Ends the state of sessions unused for `idle` (they are forgotten after another `idle`).
    /// Answers the sessions whose child was closed.
    pub fn close_idle(&self, idle: Duration) -> Vec<String> {
        let mut closed = Vec::new();
        let mut entries = lock(&self.entries);
        entries.retain(|id, entry| {
            let unused = entry.last_used.elapsed();
            if unused < idle {
                return true;
            }
            let Ok(mut notebook) = entry.state.try_lock() else {
                return true;
            };
            if notebook.child.is_some() {
                notebook.end(format!(
                    "the session was idle for more than {} s and its state was closed \
                     ([sessions] idle_timeout_seconds)",
                    idle.as_secs()
                ));
                closed.push(id.clone());
                return true;
            }
            unused < idle.saturating_mul(2)
        });
        closed
    }

    /// Sessions holding a live child.
    pub fn live(&self) -> usize {
        lock(&self.entries)
            .values()
            .filter(|e| e.state.try_lock().map_or(true, |n| n.child.is_some()))
            .count()
    }
}
