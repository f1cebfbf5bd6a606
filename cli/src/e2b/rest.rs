//! The REST API (`X-API-KEY`): create, connect, list, get, kill, timeout, pause and resume
//! of sandboxes (the last two in [`super::lifecycle`]).
//! A sandbox is one Paddock session on the engine of its template's backend; killing it closes
//! that session and everything in it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::http::Method;
use axum::response::Response;
use paddock_engine::engine::CallExtras;
use serde::Deserialize;
use serde_json::{Value, json};

use super::state::{Sandbox, State, StateError, end_at, now_ms, random_hex};
use super::wire::{empty, json_response, query_pairs, query_value, rest_error, rfc3339};

/// The envd version reported: the SDK then uses nothing newer (no file metadata, 0.6.2).
pub(crate) const ENVD_VERSION: &str = "0.6.1";
/// E2B's default sandbox lifetime, seconds.
const DEFAULT_TIMEOUT_S: u64 = 300;
/// The longest lifetime accepted (E2B Pro's 24 hours).
const MAX_TIMEOUT_S: u64 = 24 * 3600;

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct CreateBody {
    #[serde(rename = "templateID")]
    template_id: Option<String>,
    timeout: Option<u64>,
    metadata: Option<BTreeMap<String, String>>,
    env_vars: Option<BTreeMap<String, String>>,
    /// `lifecycle={"on_timeout": "pause"}`: paused at its end instead of killed.
    auto_pause: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct TimeoutBody {
    timeout: Option<u64>,
}

/// Serves one REST request.
pub(crate) async fn serve(
    state: &Arc<State>,
    method: &Method,
    path: &str,
    query: Option<&str>,
    body: &[u8],
) -> Response {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let parts: Vec<&str> = match parts.as_slice() {
        ["v2", rest @ ..] => rest.to_vec(),
        other => other.to_vec(),
    };
    match (method.as_str(), parts.as_slice()) {
        ("POST", ["sandboxes"]) => create(state, body).await,
        ("GET", ["sandboxes"]) => list(state, query),
        ("GET", ["sandboxes", id]) => match state.get(id) {
            Some(sandbox) => json_response(200, &info(&sandbox, true)),
            None => not_found(id),
        },
        ("DELETE", ["sandboxes", id]) => match kill(state, id).await {
            true => empty(204),
            false => not_found(id),
        },
        ("POST", ["sandboxes", id, "connect"]) => connect(state, id, body, false).await,
        ("POST", ["sandboxes", id, "resume"]) => connect(state, id, body, true).await,
        ("POST", ["sandboxes", id, "pause"]) => pause(state, id).await,
        ("POST", ["sandboxes", id, "timeout"]) => set_timeout(state, id, body),
        (_, ["sandboxes", _, what]) => rest_error(
            501,
            format!("sandboxes/{{id}}/{what} is not served by Paddock's E2B front end yet"),
        ),
        _ => rest_error(404, format!("{method} {path}: no such endpoint")),
    }
}

fn not_found(id: &str) -> Response {
    rest_error(404, format!("sandbox {id} not found"))
}

/// The JSON body, or the default for an empty one; `Err` is the 400's message.
fn parse<T: for<'de> Deserialize<'de> + Default>(body: &[u8]) -> Result<T, String> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body).map_err(|e| format!("bad request body: {e}"))
}

fn timeout_of(seconds: Option<u64>) -> u64 {
    seconds.unwrap_or(DEFAULT_TIMEOUT_S).min(MAX_TIMEOUT_S)
}

/// The create/connect answer the SDK reads.
fn created(sandbox: &Sandbox) -> Value {
    json!({
        "templateID": sandbox.template,
        "sandboxID": sandbox.id,
        "clientID": sandbox.client_id,
        "envdVersion": ENVD_VERSION,
        "envdAccessToken": sandbox.access_token,
        "trafficAccessToken": sandbox.traffic_token,
        "domain": null,
        "alias": sandbox.template,
    })
}

/// A list entry, or (with `detail`) the `get_info` answer.
fn info(sandbox: &Sandbox, detail: bool) -> Value {
    let mut out = json!({
        "templateID": sandbox.template,
        "alias": sandbox.template,
        "sandboxID": sandbox.id,
        "clientID": sandbox.client_id,
        "startedAt": rfc3339(sandbox.started_at_ms),
        "endAt": rfc3339(end_at(sandbox)),
        "cpuCount": std::thread::available_parallelism().map_or(1, usize::from),
        "memoryMB": 512,
        "diskSizeMB": 1024,
        "state": super::lifecycle::state_of(sandbox),
        "envdVersion": ENVD_VERSION,
        "metadata": sandbox.metadata,
    });
    if detail {
        out["domain"] = Value::Null;
    }
    out
}

async fn create(state: &Arc<State>, body: &[u8]) -> Response {
    let body: CreateBody = match parse(body) {
        Ok(b) => b,
        Err(e) => return rest_error(400, e),
    };
    let template = body
        .template_id
        .clone()
        .unwrap_or_else(|| "base".to_owned());
    match start(state, &template, &body).await {
        Ok(sandbox) => {
            let answer = created(&sandbox);
            tracing::info!(sandbox = %sandbox.id, %template, "e2b sandbox created");
            json_response(201, &answer)
        }
        Err(StartError::State(err @ StateError::UnknownTemplate { .. })) => {
            rest_error(400, err.to_string())
        }
        Err(err) => {
            tracing::warn!(%err, %template, "e2b sandbox not created");
            rest_error(500, err.to_string())
        }
    }
}

#[derive(Debug, thiserror::Error)]
enum StartError {
    #[error(transparent)]
    State(#[from] StateError),
    #[error("the sandbox's session could not start: {0}")]
    Session(String),
}

/// Makes the session (its own home as workspace, the create's env vars exported), then the
/// record and its end-of-life timer.
async fn start(
    state: &Arc<State>,
    template: &str,
    body: &CreateBody,
) -> Result<Arc<Sandbox>, StartError> {
    let engine = state.engine_for(template).await?;
    let id = format!("i{}", random_hex(10)?);
    let home = state.make_home(&id)?;
    engine
        .set_session_workspace(Some(&id), &home)
        .await
        .map_err(|e| StartError::Session(e.to_string()))?;
    // The first command makes the session live and tells where its commands start.
    let mut first = String::new();
    for (name, value) in body.env_vars.iter().flatten() {
        first.push_str(&format!("export {name}={}; ", shell_quote(value)));
    }
    first.push_str("pwd");
    let extras = CallExtras {
        session: Some(id.clone()),
        ..CallExtras::default()
    };
    let answer = engine
        .call_tool_with("terminal", json!({"command": first}), extras)
        .await
        .map_err(|e| StartError::Session(e.message))?;
    let cwd = answer["output"]
        .as_str()
        .and_then(|o| o.lines().last())
        .filter(|l| l.starts_with('/'))
        .unwrap_or("/")
        .to_owned();
    let started = now_ms();
    let sandbox = Arc::new(Sandbox {
        id: id.clone(),
        template: template.to_owned(),
        engine,
        client_id: "paddock".to_owned(),
        access_token: format!("ea_{}", random_hex(20)?),
        traffic_token: format!("et_{}", random_hex(20)?),
        metadata: body.metadata.clone().unwrap_or_default(),
        started_at_ms: started,
        end_at_ms: AtomicU64::new(started + timeout_of(body.timeout) * 1000),
        home,
        cwd,
        procs: Default::default(),
        timer: Default::default(),
        next_pid: AtomicU64::new(0),
        envs: body.env_vars.clone().unwrap_or_default(),
        contexts: Default::default(),
        paused: Default::default(),
        killed: Default::default(),
        auto_pause: body.auto_pause.unwrap_or(false),
        watchers: Default::default(),
    });
    state.insert(sandbox.clone());
    let timer = tokio::spawn(end_when_due(state.clone(), id));
    *super::state::lock(&sandbox.timer) = Some(timer.abort_handle());
    Ok(sandbox)
}

/// `'value'` for a POSIX shell.
pub(crate) fn shell_quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', "'\\''"))
}

/// Kills the sandbox at its end time, busy or not; the end may move meanwhile.
async fn end_when_due(state: Arc<State>, id: String) {
    loop {
        let Some(sandbox) = state.get(&id) else {
            return;
        };
        let now = now_ms();
        let end = end_at(&sandbox);
        // A paused sandbox is kept until it is resumed (a connect gives it a new end) or
        // killed.
        let paused = sandbox.paused.load(Ordering::Relaxed);
        if now >= end && !paused && sandbox.auto_pause {
            tracing::info!(sandbox = %id, "e2b sandbox timed out: paused (autoPause)");
            if let Err(err) = super::lifecycle::pause(&sandbox).await {
                // Not left running past its end: killed as one without autoPause would be.
                tracing::warn!(sandbox = %id, %err, "e2b sandbox not paused at its end: killed");
                super::state::lock(&sandbox.timer).take();
                drop(sandbox);
                kill_now(&state, &id).await;
                return;
            }
            continue;
        }
        if now >= end && !paused {
            tracing::info!(sandbox = %id, "e2b sandbox timed out");
            // This task is the timer: taken out so that killing does not abort it halfway.
            super::state::lock(&sandbox.timer).take();
            drop(sandbox);
            kill_now(&state, &id).await;
            return;
        }
        drop(sandbox);
        // Re-read every second at most: `set_timeout` may have shortened it (a paused one
        // past its end waits for a connect).
        let wait = if paused {
            1000
        } else {
            end.saturating_sub(now).clamp(1, 1000)
        };
        tokio::time::sleep(Duration::from_millis(wait)).await;
    }
}

/// Connect (resuming a paused sandbox: 201), or `resume` (only a paused one: else 409).
async fn connect(state: &Arc<State>, id: &str, body: &[u8], resume_only: bool) -> Response {
    use super::lifecycle::LifecycleError;
    let body: TimeoutBody = match parse(body) {
        Ok(b) => b,
        Err(e) => return rest_error(400, e),
    };
    let Some(sandbox) = state.get(id) else {
        return not_found(id);
    };
    let status = match super::lifecycle::resume(&sandbox).await {
        Ok(()) => 201,
        Err(err @ LifecycleError::NotPaused(_)) if resume_only => {
            return rest_error(409, err.to_string());
        }
        Err(LifecycleError::NotPaused(_)) => 200,
        Err(err @ (LifecycleError::Resume { .. } | LifecycleError::Pause { .. })) => {
            return rest_error(500, err.to_string());
        }
        Err(err @ LifecycleError::AlreadyPaused(_)) => return rest_error(409, err.to_string()),
    };
    // Connecting extends the life to at least `timeout` from now, never shortens it.
    let wanted = now_ms() + timeout_of(body.timeout) * 1000;
    sandbox.end_at_ms.fetch_max(wanted, Ordering::Relaxed);
    json_response(status, &created(&sandbox))
}

/// `pause`: 204; 409 when already paused.
async fn pause(state: &Arc<State>, id: &str) -> Response {
    use super::lifecycle::LifecycleError;
    let Some(sandbox) = state.get(id) else {
        return not_found(id);
    };
    match super::lifecycle::pause(&sandbox).await {
        Ok(()) => empty(204),
        Err(err @ LifecycleError::AlreadyPaused(_)) => rest_error(409, err.to_string()),
        Err(err @ (LifecycleError::Pause { .. } | LifecycleError::Resume { .. })) => {
            rest_error(500, err.to_string())
        }
        Err(err @ LifecycleError::NotPaused(_)) => rest_error(409, err.to_string()),
    }
}

fn set_timeout(state: &Arc<State>, id: &str, body: &[u8]) -> Response {
    let body: TimeoutBody = match parse(body) {
        Ok(b) => b,
        Err(e) => return rest_error(400, e),
    };
    let Some(sandbox) = state.get(id) else {
        return not_found(id);
    };
    let end = now_ms() + timeout_of(body.timeout) * 1000;
    sandbox.end_at_ms.store(end, Ordering::Relaxed);
    empty(204)
}

fn list(state: &Arc<State>, query: Option<&str>) -> Response {
    let pairs = query_pairs(query);
    // `metadata` is one url-encoded `k=v&...` value.
    let wanted: Vec<(String, String)> = query_value(&pairs, "metadata")
        .map(|m| query_pairs(Some(&m)))
        .unwrap_or_default();
    let states = query_value(&pairs, "state");
    let state_wanted = |s: &Sandbox| {
        let have = super::lifecycle::state_of(s);
        states
            .as_deref()
            .is_none_or(|w| w.split(',').any(|w| w.trim() == have))
    };
    let template = query_value(&pairs, "template").filter(|t| !t.is_empty());
    let started_after = match query_value(&pairs, "startedAfter") {
        None => None,
        Some(text) => match chrono::DateTime::parse_from_rfc3339(&text) {
            Ok(t) => Some(t.timestamp_millis()),
            Err(e) => {
                return rest_error(
                    400,
                    format!("startedAfter {text:?}: not an RFC 3339 time: {e}"),
                );
            }
        },
    };
    // Newest first unless asked otherwise, as E2B lists them.
    let descending = match query_value(&pairs, "order").as_deref() {
        Some("asc") => false,
        None | Some("" | "desc") => true,
        Some(other) => return rest_error(400, format!("order {other:?}: asc or desc")),
    };
    let limit = query_value(&pairs, "limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0)
        .unwrap_or(usize::MAX);
    let mut matching: Vec<Arc<Sandbox>> = state
        .all()
        .into_iter()
        .filter(|s| state_wanted(s))
        .filter(|s| template.as_deref().is_none_or(|t| s.template == t))
        // Inclusive, as E2B's: a sandbox started at that very time is listed.
        .filter(|s| {
            started_after.is_none_or(|t| i64::try_from(s.started_at_ms).is_ok_and(|at| at >= t))
        })
        .filter(|s| {
            wanted
                .iter()
                .all(|(k, v)| s.metadata.get(k).is_some_and(|have| have == v))
        })
        .collect();
    // By start time, then id: a page's cursor (`x-next-token`) is its last sandbox's place.
    matching.sort_by(|a, b| (a.started_at_ms, &a.id).cmp(&(b.started_at_ms, &b.id)));
    if descending {
        matching.reverse();
    }
    let cursor = |s: &Sandbox| format!("{}-{}", s.started_at_ms, s.id);
    if let Some(token) = query_value(&pairs, "nextToken").filter(|t| !t.is_empty()) {
        let Some(after) = token
            .split_once('-')
            .and_then(|(ms, id)| Some((ms.parse::<u64>().ok()?, id.to_owned())))
        else {
            return rest_error(
                400,
                format!("nextToken {token:?}: not a token this server gave"),
            );
        };
        // What comes after the cursor's place, whether or not its sandbox is still there.
        matching.retain(|s| {
            let place = (s.started_at_ms, s.id.clone());
            if descending {
                place < after
            } else {
                place > after
            }
        });
    }
    let more = matching.len() > limit;
    matching.truncate(limit);
    let items: Vec<Value> = matching.iter().map(|s| info(s, false)).collect();
    let mut response = json_response(200, &Value::Array(items));
    if more
        && let Some(last) = matching.last()
        && let Ok(value) = axum::http::HeaderValue::from_str(&cursor(last))
    {
        response.headers_mut().insert("x-next-token", value);
    }
    response
}

/// Kills sandbox `id`: false when there is none.
pub(crate) async fn kill(state: &Arc<State>, id: &str) -> bool {
    if state.get(id).is_none() {
        return false;
    }
    kill_now(state, id).await;
    true
}

/// Closes the session (its environments and background processes) and removes its home.
async fn kill_now(state: &Arc<State>, id: &str) {
    let Some(sandbox) = state.remove(id) else {
        return;
    };
    sandbox.killed.store(true, Ordering::SeqCst);
    if let Some(timer) = super::state::lock(&sandbox.timer).take() {
        timer.abort();
    }
    match sandbox.engine.close_session(id).await {
        Ok(report) => tracing::info!(sandbox = %id, ok = report.all_ok(), "e2b sandbox killed"),
        // Swept as idle already: nothing left to close.
        Err(paddock_engine::engine::EngineError::Session(
            paddock_engine::sessions::SessionError::Unknown(_),
        )) => {}
        Err(err) => tracing::warn!(sandbox = %id, %err, "e2b sandbox's session not closed"),
    }
    if let Err(err) = std::fs::remove_dir_all(&sandbox.home)
        && err.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(sandbox = %id, %err, "e2b sandbox's home not removed");
    }
}

/// Kills every sandbox (the server is stopping).
pub(crate) async fn kill_all(state: &Arc<State>) {
    for sandbox in state.all() {
        kill_now(state, &sandbox.id).await;
    }
}
