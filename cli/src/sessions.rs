//! `paddock sessions` and `paddock snapshots`: list, close, pause, snapshot, fork and start
//! sessions; list and remove snapshots.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use serde_json::json;

use paddock_engine::engine::Engine;

use crate::common::{load_policy, print_line, usage_error};

/// An engine for the `sessions` commands: the policy's backends, no bridged MCP servers (they
/// play no part in a session's life).
fn sessions_engine(policy: Option<&Path>) -> Result<Engine, String> {
    let policy = load_policy(policy)?;
    Engine::with_options(
        policy,
        paddock_engine::registry::Registry::with_builtins(),
        Arc::default(),
        paddock_engine::engine::EngineOptions::default(),
    )
    .map_err(|e| e.to_string())
}

pub(crate) async fn sessions_list(policy: Option<&Path>) -> ExitCode {
    let engine = match sessions_engine(policy) {
        Ok(e) => e,
        Err(e) => return usage_error(&e),
    };
    match engine.list_sessions().await {
        Ok(list) => {
            for summary in list {
                print_line(&serde_json::to_value(&summary).unwrap_or_default());
            }
            ExitCode::SUCCESS
        }
        Err(e) => usage_error(&e.to_string()),
    }
}

pub(crate) async fn sessions_close(id: &str, policy: Option<&Path>) -> ExitCode {
    use paddock_engine::sessions::SessionError;
    let engine = match sessions_engine(policy) {
        Ok(e) => e,
        Err(e) => return usage_error(&e),
    };
    match engine.close_session(id).await {
        Ok(report) => {
            print_line(&serde_json::to_value(&report).unwrap_or_default());
            if report.all_ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(paddock_engine::engine::EngineError::Session(err @ SessionError::Unknown(_))) => {
            let _ = writeln!(std::io::stderr(), "paddock: {err}");
            print_line(&json!({"id": id, "closed": false, "error": err.to_string()}));
            ExitCode::from(1)
        }
        Err(e) => usage_error(&e.to_string()),
    }
}

/// `sessions pause` (`pause`) or `sessions resume`: one JSON line, exit 1 on failure.
pub(crate) async fn sessions_pause(id: &str, policy: Option<&Path>, pause: bool) -> ExitCode {
    let engine = match sessions_engine(policy) {
        Ok(e) => e,
        Err(e) => return usage_error(&e),
    };
    let done = if pause {
        engine
            .pause_session(id)
            .await
            .map(|report| serde_json::to_value(&report).unwrap_or_default())
    } else {
        engine
            .resume_session(id)
            .await
            .map(|()| json!({"id": id, "resumed": true}))
    };
    match done {
        Ok(line) => {
            print_line(&line);
            ExitCode::SUCCESS
        }
        Err(err) => {
            let _ = writeln!(std::io::stderr(), "paddock: {err}");
            print_line(&json!({"id": id, "error": err.to_string()}));
            ExitCode::from(1)
        }
    }
}

/// A failed snapshot command: the error on stderr and as a JSON line, exit 1.
fn snapshot_failed(err: &paddock_engine::engine::EngineError) -> ExitCode {
    let _ = writeln!(std::io::stderr(), "paddock: {err}");
    print_line(&json!({"error": err.to_string()}));
    ExitCode::from(1)
}

pub(crate) async fn sessions_snapshot(
    id: &str,
    name: Option<&str>,
    policy: Option<&Path>,
) -> ExitCode {
    let engine = match sessions_engine(policy) {
        Ok(e) => e,
        Err(e) => return usage_error(&e),
    };
    match engine.snapshot_session(id, name).await {
        Ok(summary) => {
            print_line(&serde_json::to_value(&summary).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Err(err) => snapshot_failed(&err),
    }
}

/// The ids of `count` sessions started from `snapshot`: `--session` (suffixed `-1`... when
/// more than one), or made from the snapshot's name.
fn new_session_ids(snapshot: &str, session: Option<&str>, count: usize) -> Vec<String> {
    match session {
        Some(id) if count == 1 => vec![id.to_owned()],
        Some(id) => (1..=count).map(|i| format!("{id}-{i}")).collect(),
        None => paddock_engine::snapshots::fork_ids(snapshot, count),
    }
}

pub(crate) async fn sessions_start(
    snapshot: &str,
    session: Option<&str>,
    count: usize,
    policy: Option<&Path>,
) -> ExitCode {
    if count == 0 {
        return usage_error("--count must be at least 1");
    }
    let engine = match sessions_engine(policy) {
        Ok(e) => e,
        Err(e) => return usage_error(&e),
    };
    let ids = new_session_ids(snapshot, session, count);
    let started = engine.start_from_snapshot(snapshot, &ids).await;
    print_new_sessions(started.map(|()| ids))
}

/// The ids of sessions just made, one per line; or the error, exit status 1.
fn print_new_sessions<E: std::fmt::Display>(made: Result<Vec<String>, E>) -> ExitCode {
    match made {
        Ok(ids) => {
            let mut out = std::io::stdout().lock();
            for id in &ids {
                let _ = writeln!(out, "{id}");
            }
            ExitCode::SUCCESS
        }
        Err(err) => {
            let _ = writeln!(std::io::stderr(), "paddock: {err}");
            ExitCode::from(1)
        }
    }
}

pub(crate) async fn sessions_fork(id: &str, count: usize, policy: Option<&Path>) -> ExitCode {
    if count == 0 {
        return usage_error("--count must be at least 1");
    }
    let engine = match sessions_engine(policy) {
        Ok(e) => e,
        Err(e) => return usage_error(&e),
    };
    let forked = engine.fork_session(id, count).await.map(|(summary, ids)| {
        let _ = writeln!(
            std::io::stderr(),
            "paddock: snapshot {} of session {id} ({} bytes) kept; `paddock snapshots rm {}` removes it",
            summary.name,
            summary.bytes,
            summary.name
        );
        ids
    });
    print_new_sessions(forked)
}

pub(crate) fn snapshots_list(policy: Option<&Path>) -> ExitCode {
    let engine = match sessions_engine(policy) {
        Ok(e) => e,
        Err(e) => return usage_error(&e),
    };
    match engine.list_snapshots() {
        Ok(list) => {
            for entry in list {
                match entry {
                    Ok(summary) => print_line(&serde_json::to_value(&summary).unwrap_or_default()),
                    Err((name, error)) => print_line(&json!({"name": name, "error": error})),
                }
            }
            ExitCode::SUCCESS
        }
        Err(err) => snapshot_failed(&err),
    }
}

pub(crate) async fn snapshots_rm(names: &[String], policy: Option<&Path>) -> ExitCode {
    let engine = match sessions_engine(policy) {
        Ok(e) => e,
        Err(e) => return usage_error(&e),
    };
    let mut code = ExitCode::SUCCESS;
    for name in names {
        match engine.remove_snapshot(name).await {
            Ok(()) => print_line(&json!({"name": name, "removed": true})),
            Err(err) => {
                let _ = writeln!(std::io::stderr(), "paddock: {err}");
                print_line(&json!({"name": name, "removed": false, "error": err.to_string()}));
                code = ExitCode::from(1);
            }
        }
    }
    code
}
