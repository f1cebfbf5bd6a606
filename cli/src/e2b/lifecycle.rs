//! Pause and resume of a sandbox (REST `POST /sandboxes/{id}/pause`, `/resume`, and a connect
//! of a paused sandbox) on Paddock's session pause (`paddock sessions pause`): the session's
//! processes are frozen on every backend it used (docker pause; SIGSTOP of the local sandbox's
//! tree) and thawed as they were, files and background processes kept. While paused the
//! sandbox's daemon and interpreter answer 502 (any call would thaw the session), its streams
//! only keep alive, its watchers wait, and its end time does not kill it.

use std::sync::atomic::Ordering;
use std::time::Duration;

use paddock_engine::engine::CallExtras;
use serde_json::json;

use super::state::{Sandbox, now_ms};

/// How long a background process may still be launching after it was started (a docker
/// exec being made): a pause waits that long after the newest one. Freezing a container
/// while dockerd makes an exec in it leaves both stuck (pause and unpause then hang).
const LAUNCH_SETTLES_MS: u64 = 1000;

/// Why a sandbox was not paused or resumed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LifecycleError {
    #[error("sandbox {0} is already paused")]
    AlreadyPaused(String),
    #[error("sandbox {0} is not paused")]
    NotPaused(String),
    #[error("sandbox {id} could not be paused: {reason}")]
    Pause { id: String, reason: String },
    #[error("sandbox {id} could not be resumed: {reason}")]
    Resume { id: String, reason: String },
}

/// Freezes the sandbox's session. Marked paused first, so that nothing the front end runs
/// for it (a stream's read, a watcher's) thaws it again.
pub(crate) async fn pause(sandbox: &Sandbox) -> Result<(), LifecycleError> {
    if sandbox.paused.swap(true, Ordering::SeqCst) {
        return Err(LifecycleError::AlreadyPaused(sandbox.id.clone()));
    }
    settle_launches(sandbox).await;
    match sandbox.engine.pause_session(&sandbox.id).await {
        Ok(report) => {
            tracing::info!(sandbox = %sandbox.id, backends = ?report.paused, "e2b sandbox paused");
            Ok(())
        }
        Err(err) => {
            sandbox.paused.store(false, Ordering::SeqCst);
            Err(LifecycleError::Pause {
                id: sandbox.id.clone(),
                reason: err.to_string(),
            })
        }
    }
}

/// Waits until the session's newest running process has had [`LAUNCH_SETTLES_MS`] to
/// launch.
async fn settle_launches(sandbox: &Sandbox) {
    let extras = CallExtras {
        session: Some(sandbox.id.clone()),
        ..CallExtras::default()
    };
    let listed = sandbox
        .engine
        .call_tool_with("process", json!({"action": "list"}), extras)
        .await;
    let newest = listed
        .ok()
        .and_then(|l| {
            l["processes"]
                .as_array()?
                .iter()
                .filter(|p| p["state"] == "running")
                .filter_map(|p| p["started_at_ms"].as_u64())
                .max()
        })
        .unwrap_or(0)
        .max(
            sandbox
                .procs()
                .values()
                .filter_map(|p| p.foreground.as_ref().map(|run| run.started_at_ms))
                .max()
                .unwrap_or(0),
        );
    let settled_at = newest.saturating_add(LAUNCH_SETTLES_MS);
    let now = now_ms();
    if settled_at > now {
        tokio::time::sleep(Duration::from_millis(settled_at - now)).await;
    }
}

/// Thaws a paused sandbox's session.
pub(crate) async fn resume(sandbox: &Sandbox) -> Result<(), LifecycleError> {
    if !sandbox.paused.load(Ordering::SeqCst) {
        return Err(LifecycleError::NotPaused(sandbox.id.clone()));
    }
    sandbox
        .engine
        .resume_session(&sandbox.id)
        .await
        .map_err(|err| LifecycleError::Resume {
            id: sandbox.id.clone(),
            reason: err.to_string(),
        })?;
    sandbox.paused.store(false, Ordering::SeqCst);
    tracing::info!(sandbox = %sandbox.id, "e2b sandbox resumed");
    Ok(())
}

/// The state the REST API lists: `running` or `paused`.
pub(crate) fn state_of(sandbox: &Sandbox) -> &'static str {
    if sandbox.paused.load(Ordering::Relaxed) {
        "paused"
    } else {
        "running"
    }
}
