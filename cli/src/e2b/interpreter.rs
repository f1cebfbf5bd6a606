//! The code interpreter (port 49999 of a sandbox, what `e2b-code-interpreter` talks to):
//! `/execute` and `/contexts` on the session's Paddock CPython contexts (`python_execute` with
//! `context`, `python_contexts`), under the same ids.
//!
//! `/execute` answers newline-delimited JSON, as E2B's server does: `stdout`/`stderr` lines as
//! the code writes (with a `timestamp`), `keepalive` lines every few seconds of silence (so a
//! client that left is noticed), then `number_of_executions`, one `result` per MIME bundle
//! (`text`, `png`, ... and `is_main_result` for the last expression's), an `error` with `name`,
//! `value` and `traceback` when the code raised, and `end_of_execution`. The client leaving
//! ends the call, which interrupts the code (the context is kept). A request's `env_vars` are
//! set in the interpreter for that execution only, by two hidden executions around it.
//!
//! Python only: another `language` is refused with a message saying so.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::Method;
use axum::response::Response;
use paddock_backends::stream::StreamDecoders;
use paddock_backends::{ChunkSender, OutputChunk, OutputStream};
use paddock_engine::registry::{CallContext, ToolError, ToolErrorKind, new_call_id};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc::UnboundedSender;

use super::state::{CodeContext, ContextRun, Sandbox, StateError, now_ms, random_hex};
use super::wire::{json_response, response, rfc3339};

/// A `keepalive` line after this long without one: writing is how a vanished client is
/// noticed (E2B's server sends one every 5 s too).
const KEEPALIVE: Duration = Duration::from_secs(5);
/// An execution's own limit, seconds: the longest `python_execute` accepts. E2B's executions
/// have none on the server; the SDK's `timeout` (default 300 s) ends them from the client.
const EXECUTION_TIMEOUT_S: f64 = 3600.0;
/// The limit of the hidden executions that set and restore env vars, seconds.
const HIDDEN_TIMEOUT_S: f64 = 60.0;
/// The only language served.
const PYTHON: &str = "python";

/// Why an interpreter request is refused, before anything runs.
#[derive(Debug, thiserror::Error)]
pub(crate) enum InterpreterError {
    #[error(
        "language '{0}' is not served: Paddock's code interpreter runs Python only (omit `language` or pass \"python\")"
    )]
    Language(String),
    #[error("only one of context_id and language can be given")]
    ContextAndLanguage,
    #[error("context {0} not found")]
    NotFound(String),
    #[error("bad request body: {0}")]
    Body(String),
    #[error("{0}")]
    Tool(ToolError),
    #[error(transparent)]
    State(#[from] StateError),
}

impl InterpreterError {
    fn status(&self) -> u16 {
        match self {
            Self::Language(_) | Self::ContextAndLanguage | Self::Body(_) => 400,
            Self::NotFound(_) => 404,
            Self::Tool(err) => match err.kind {
                ToolErrorKind::InvalidArguments => 400,
                ToolErrorKind::Denied => 403,
                ToolErrorKind::NotFound => 404,
                ToolErrorKind::Failed => 500,
            },
            Self::State(_) => 500,
        }
    }

    /// A plain-text answer, as E2B's server gives its errors (the SDK shows the text).
    fn into_response(self) -> Response {
        response(self.status(), "text/plain; charset=utf-8", self.to_string())
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ExecuteBody {
    code: String,
    context_id: Option<String>,
    language: Option<String>,
    env_vars: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct CreateBody {
    cwd: Option<String>,
    language: Option<String>,
}

/// Serves one request to the sandbox's code interpreter.
pub(crate) async fn serve(
    sandbox: Arc<Sandbox>,
    method: &Method,
    path: &str,
    body: &[u8],
) -> Response {
    let served = match (method.as_str(), path) {
        ("GET", "/health") => Ok(json_response(200, &json!("OK"))),
        ("POST", "/execute") => execute(sandbox, body),
        ("POST", "/contexts") => create(&sandbox, body).await,
        ("GET", "/contexts") => list(&sandbox),
        (verb, _) => match path.strip_prefix("/contexts/") {
            Some(rest) => match (verb, rest.split('/').collect::<Vec<_>>().as_slice()) {
                ("POST", [id, "restart"]) => restart(&sandbox, id).await,
                ("DELETE", [id]) => remove(&sandbox, id).await,
                _ => Ok(not_served(method, path)),
            },
            None => Ok(not_served(method, path)),
        },
    };
    served.unwrap_or_else(InterpreterError::into_response)
}

fn not_served(method: &Method, path: &str) -> Response {
    response(
        404,
        "text/plain; charset=utf-8",
        format!("{method} {path}: not served by the code interpreter"),
    )
}

fn parse<T: for<'de> Deserialize<'de> + Default>(body: &[u8]) -> Result<T, InterpreterError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body).map_err(|e| InterpreterError::Body(e.to_string()))
}

/// `python` for no language (E2B's default), an error for any other.
fn check_language(language: Option<&str>) -> Result<(), InterpreterError> {
    match language.map(|l| l.trim().to_lowercase()) {
        None => Ok(()),
        Some(l) if l.is_empty() || l == PYTHON => Ok(()),
        Some(l) => Err(InterpreterError::Language(l)),
    }
}

/// A new context id, shaped like E2B's (a UUID) and valid as a Paddock context id.
fn new_context_id() -> Result<String, StateError> {
    let hex = random_hex(16)?;
    Ok(format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    ))
}

/// The sandbox's default context; a record is made (the interpreter on first use) when there
/// is none yet or it was removed.
fn default_context(sandbox: &Sandbox) -> Result<Arc<CodeContext>, StateError> {
    let mut contexts = sandbox.contexts();
    if let Some(found) = contexts.iter().find(|c| c.default) {
        return Ok(found.clone());
    }
    let made = Arc::new(CodeContext::new(
        new_context_id()?,
        sandbox.cwd.clone(),
        true,
    ));
    contexts.insert(0, made.clone());
    Ok(made)
}

fn find_context(sandbox: &Sandbox, id: &str) -> Result<Arc<CodeContext>, InterpreterError> {
    sandbox
        .contexts()
        .iter()
        .find(|c| c.id == id)
        .cloned()
        .ok_or_else(|| InterpreterError::NotFound(id.to_owned()))
}

fn describe(context: &CodeContext) -> Value {
    json!({"id": context.id, "language": PYTHON, "cwd": context.cwd})
}

/// Calls a tool in the sandbox's session through the registry: its answer whole. (The
/// engine's direct call spills a long answer to a file for a model's sake; the SDK needs the
/// whole PNG of a figure.)
async fn call(
    sandbox: &Sandbox,
    tool: &str,
    args: Value,
    output: Option<ChunkSender>,
) -> Result<Value, ToolError> {
    let ctx = CallContext {
        call_id: new_call_id(),
        session: sandbox.id.clone(),
        output,
        ..CallContext::default()
    };
    sandbox.engine.registry().dispatch(tool, args, ctx).await
}

/// Makes the context's interpreter unless it is there (the default one waits for its first
/// use), in its `cwd` with the sandbox's env vars.
async fn ensure_made(
    sandbox: &Sandbox,
    context: &CodeContext,
    run: &mut ContextRun,
) -> Result<(), ToolError> {
    if run.made {
        return Ok(());
    }
    let made = call(
        sandbox,
        "python_contexts",
        json!({"action": "create", "id": context.id, "cwd": context.cwd, "env": sandbox.envs}),
        None,
    )
    .await;
    match made {
        Ok(_) => {}
        // Made by another caller of the session already: it is the same context.
        Err(err) if err.code == "context:exists" => {}
        Err(err) => return Err(err),
    }
    *run = ContextRun {
        made: true,
        ..ContextRun::default()
    };
    Ok(())
}

/// Code that runs in a throw-away namespace (the user's names stay as they were).
fn isolated(code: &str) -> String {
    format!("exec({}, {{}});", Value::String(code.to_owned()))
}

/// Sets `envs` in the interpreter and keeps what they replace for [`restore_env_code`].
fn set_env_code(envs: &BTreeMap<String, String>) -> String {
    // A JSON object of strings is a Python dict literal too.
    let map = serde_json::to_string(envs).unwrap_or_else(|_| "{}".to_owned());
    isolated(&format!(
        "import os, sys\n\
         new = {map}\n\
         sys._paddock_e2b_env = {{k: os.environ.get(k) for k in new}}\n\
         os.environ.update(new)\n"
    ))
}

/// Puts back what [`set_env_code`] replaced.
fn restore_env_code() -> String {
    isolated(
        "import os, sys\n\
         for k, v in sys.__dict__.pop('_paddock_e2b_env', {}).items():\n    \
             if v is None:\n        os.environ.pop(k, None)\n    \
             else:\n        os.environ[k] = v\n",
    )
}

/// Runs front-end code in the context, counted apart from the user's executions.
async fn run_hidden(
    sandbox: &Sandbox,
    context: &CodeContext,
    run: &mut ContextRun,
    code: String,
) -> Result<(), ToolError> {
    let answer = call(
        sandbox,
        "python_execute",
        json!({"code": code, "context": context.id, "timeout": HIDDEN_TIMEOUT_S}),
        None,
    )
    .await?;
    if answer["restarted"] == Value::Bool(true) {
        run.hidden = 0;
    }
    run.hidden += 1;
    match answer["exception"].as_object() {
        None => Ok(()),
        Some(exception) => Err(ToolError::failed(format!(
            "setting the execution's env vars failed: {}: {}",
            exception
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default(),
            exception
                .get("value")
                .and_then(Value::as_str)
                .unwrap_or_default()
        ))),
    }
}

/// `POST /execute`: checks the request, then streams the execution.
fn execute(sandbox: Arc<Sandbox>, body: &[u8]) -> Result<Response, InterpreterError> {
    let request: ExecuteBody = parse(body)?;
    let context_id = request.context_id.filter(|c| !c.is_empty());
    let language = request.language.filter(|l| !l.trim().is_empty());
    if context_id.is_some() && language.is_some() {
        return Err(InterpreterError::ContextAndLanguage);
    }
    check_language(language.as_deref())?;
    let context = match context_id {
        Some(id) => find_context(&sandbox, &id)?,
        None => default_context(&sandbox)?,
    };
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    let task = tokio::spawn(run_execution(
        sandbox,
        context,
        request.code,
        request.env_vars.unwrap_or_default(),
        tx,
    ));
    // The body owns the task: a client that leaves drops the body, which ends the call and so
    // interrupts the code.
    let guard = AbortOnDrop(task.abort_handle());
    let lines = futures_util::stream::unfold((rx, guard), |(mut rx, guard)| async move {
        rx.recv()
            .await
            .map(|line| (Ok::<_, Infallible>(Bytes::from(line)), (rx, guard)))
    });
    Ok(response(
        200,
        "application/x-ndjson",
        Body::from_stream(lines),
    ))
}

struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Where an execution's lines go.
type Lines = UnboundedSender<Vec<u8>>;

fn send(lines: &Lines, value: &Value) {
    let mut line = value.to_string().into_bytes();
    line.push(b'\n');
    // Nobody listening: the client left, and the task is being ended.
    let _ = lines.send(line);
}

fn error_line(name: &str, value: &str, traceback: &str) -> Value {
    json!({"type": "error", "name": name, "value": value, "traceback": traceback})
}

/// One execution, holding its context for its whole length; always ends the stream with
/// `end_of_execution`.
async fn run_execution(
    sandbox: Arc<Sandbox>,
    context: Arc<CodeContext>,
    code: String,
    envs: BTreeMap<String, String>,
    lines: Lines,
) {
    let mut run = context.run.lock().await;
    if let Err(err) = execute_locked(&sandbox, &context, &mut run, code, &envs, &lines).await {
        send(
            &lines,
            &error_line(
                "PaddockError",
                &format!("{}: {}", err.code, err.message),
                "",
            ),
        );
    }
    send(&lines, &json!({"type": "end_of_execution"}));
}

async fn execute_locked(
    sandbox: &Sandbox,
    context: &CodeContext,
    run: &mut ContextRun,
    code: String,
    envs: &BTreeMap<String, String>,
    lines: &Lines,
) -> Result<(), ToolError> {
    ensure_made(sandbox, context, run).await?;
    if run.env_set {
        run_hidden(sandbox, context, run, restore_env_code()).await?;
        run.env_set = false;
    }
    if !envs.is_empty() {
        run.env_set = true;
        run_hidden(sandbox, context, run, set_env_code(envs)).await?;
    }
    let answer = stream_user_code(sandbox, context, code, lines).await;
    let answer = match answer {
        Ok(answer) => answer,
        Err(err) if err.code == "context:not_found" => {
            // Removed behind the front end's back (another caller of the session): made
            // again on the next execution.
            *run = ContextRun::default();
            return Err(err);
        }
        Err(err) => return Err(err),
    };
    if answer["restarted"] == Value::Bool(true) {
        // A new interpreter: the env vars set before it are gone, and its count restarted.
        run.hidden = 0;
        run.env_set = false;
    }
    for line in answer_lines(&answer, run.hidden) {
        send(lines, &line);
    }
    if run.env_set {
        run_hidden(sandbox, context, run, restore_env_code()).await?;
        run.env_set = false;
    }
    Ok(())
}

/// Runs the user's code, sending its output as it is written and a keepalive in silences.
async fn stream_user_code(
    sandbox: &Sandbox,
    context: &CodeContext,
    code: String,
    lines: &Lines,
) -> Result<Value, ToolError> {
    let (chunks, mut received) = tokio::sync::mpsc::unbounded_channel::<OutputChunk>();
    let mut decoders = StreamDecoders::default();
    let forward = |stream: OutputStream, text: &str| {
        if !text.is_empty() {
            send(
                lines,
                &json!({"type": stream.as_str(), "text": text, "timestamp": rfc3339(now_ms())}),
            );
        }
    };
    let args = json!({"code": code, "context": context.id, "timeout": EXECUTION_TIMEOUT_S});
    let call = call(sandbox, "python_execute", args, Some(chunks));
    tokio::pin!(call);
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + KEEPALIVE, KEEPALIVE);
    let answer = loop {
        tokio::select! {
            biased;
            Some(chunk) = received.recv() => forward(chunk.stream, &decoders.push(&chunk)),
            answer = &mut call => break answer,
            _ = tick.tick() => send(lines, &json!({"type": "keepalive"})),
        }
    };
    // What was sent before the answer is queued: nothing is lost at the end.
    while let Ok(chunk) = received.try_recv() {
        forward(chunk.stream, &decoders.push(&chunk));
    }
    for (stream, rest) in decoders.finish() {
        forward(stream, &rest);
    }
    answer
}

/// The lines after the output: the count (less the hidden executions), the results, the
/// error, and notes on stderr.
fn answer_lines(answer: &Value, hidden: u64) -> Vec<Value> {
    let mut out = Vec::new();
    if let Some(count) = answer["execution_count"].as_u64() {
        out.push(json!({"type": "number_of_executions", "execution_count": count.saturating_sub(hidden)}));
    }
    for bundle in answer["results"].as_array().into_iter().flatten() {
        if let Some(bundle) = bundle.as_object() {
            out.push(result_line(bundle));
        }
    }
    if let Some(exception) = answer["exception"].as_object() {
        let text = |key: &str| {
            exception
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
        };
        out.push(error_line(text("name"), text("value"), text("traceback")));
    } else if answer["timed_out"] == Value::Bool(true) {
        out.push(error_line(
            "TimeoutError",
            &format!("the execution ran past {EXECUTION_TIMEOUT_S} s and was interrupted"),
            "",
        ));
    }
    for note in answer["notes"].as_array().into_iter().flatten() {
        if let Some(note) = note.as_str() {
            out.push(json!({"type": "stderr", "text": format!("paddock: {note}\n"), "timestamp": rfc3339(now_ms())}));
        }
    }
    out
}

/// A MIME bundle as E2B's `result` line: the known types under their short names, the rest
/// in `extra`; a string's quotes are taken off its text, as E2B does.
fn result_line(bundle: &Map<String, Value>) -> Value {
    let mut out = Map::new();
    out.insert("type".into(), json!("result"));
    let mut extra = Map::new();
    for (mime, value) in bundle {
        let short = match mime.as_str() {
            "is_main_result" => {
                out.insert(mime.clone(), json!(value.as_bool().unwrap_or(false)));
                continue;
            }
            // Display metadata: E2B's results carry none.
            "metadata" => continue,
            "text/plain" => {
                out.insert(
                    "text".into(),
                    json!(unquoted(value.as_str().unwrap_or_default())),
                );
                continue;
            }
            "text/html" => "html",
            "text/markdown" => "markdown",
            "image/svg+xml" => "svg",
            "image/png" => "png",
            "image/jpeg" => "jpeg",
            "application/pdf" => "pdf",
            "text/latex" => "latex",
            "application/json" => "json",
            "application/javascript" => "javascript",
            "e2b/data" => "data",
            "e2b/chart" => "chart",
            other => {
                extra.insert(other.to_owned(), value.clone());
                continue;
            }
        };
        out.insert(short.into(), value.clone());
    }
    if !extra.is_empty() {
        out.insert("extra".into(), Value::Object(extra));
    }
    Value::Object(out)
}

/// `'abc'` or `"abc"` (a string's repr) as `abc`.
fn unquoted(text: &str) -> &str {
    for quote in ['\'', '"'] {
        if text.len() >= 2 && text.starts_with(quote) && text.ends_with(quote) {
            return &text[1..text.len() - 1];
        }
    }
    text
}

/// `POST /contexts`: a new context, its interpreter started now.
async fn create(sandbox: &Sandbox, body: &[u8]) -> Result<Response, InterpreterError> {
    let request: CreateBody = parse(body)?;
    check_language(request.language.as_deref())?;
    let cwd = match request.cwd.as_deref().filter(|c| !c.is_empty()) {
        Some(cwd) => super::wire::absolute(&sandbox.cwd, cwd),
        None => sandbox.cwd.clone(),
    };
    let context = Arc::new(CodeContext::new(new_context_id()?, cwd, false));
    let mut run = context.run.lock().await;
    ensure_made(sandbox, &context, &mut run)
        .await
        .map_err(InterpreterError::Tool)?;
    drop(run);
    sandbox.contexts().push(context.clone());
    Ok(json_response(200, &describe(&context)))
}

/// `GET /contexts`: every context, the default one first (as E2B lists its default kernel).
fn list(sandbox: &Sandbox) -> Result<Response, InterpreterError> {
    default_context(sandbox)?;
    let listed: Vec<Value> = sandbox.contexts().iter().map(|c| describe(c)).collect();
    Ok(json_response(200, &Value::Array(listed)))
}

/// `POST /contexts/{id}/restart`: a new interpreter, its names gone. A running execution is
/// not waited for: the restart ends it, as a Jupyter kernel's does.
async fn restart(sandbox: &Sandbox, id: &str) -> Result<Response, InterpreterError> {
    let context = find_context(sandbox, id)?;
    let restarted = call(
        sandbox,
        "python_contexts",
        json!({"action": "restart", "id": context.id}),
        None,
    )
    .await;
    let mut run = context.run.lock().await;
    match restarted {
        Ok(_) => {
            *run = ContextRun {
                made: true,
                ..ContextRun::default()
            };
        }
        // Never used yet (a default one) or gone: made afresh below.
        Err(err) if err.code == "context:not_found" => *run = ContextRun::default(),
        Err(err) => return Err(InterpreterError::Tool(err)),
    }
    ensure_made(sandbox, &context, &mut run)
        .await
        .map_err(InterpreterError::Tool)?;
    Ok(json_response(200, &Value::Null))
}

/// `DELETE /contexts/{id}`: the interpreter is ended, a running execution with it.
async fn remove(sandbox: &Sandbox, id: &str) -> Result<Response, InterpreterError> {
    let context = find_context(sandbox, id)?;
    sandbox.contexts().retain(|c| c.id != context.id);
    // Not waiting for the context's lock: removing ends a running execution, as E2B does.
    let removed = call(
        sandbox,
        "python_contexts",
        json!({"action": "remove", "id": context.id}),
        None,
    )
    .await;
    match removed {
        // Never used (a default one), or gone already.
        Ok(_) => {}
        Err(err) if err.code == "context:not_found" => {}
        Err(err) => return Err(InterpreterError::Tool(err)),
    }
    Ok(json_response(200, &Value::Null))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn bundles_become_e2b_results() {
        let bundle = json!({
            "text/plain": "'hi'",
            "image/png": "iVBOR",
            "application/vnd.custom": {"a": 1},
            "metadata": {"image/png": {"width": 10}},
            "is_main_result": true,
        });
        assert_eq!(
            result_line(bundle.as_object().unwrap()),
            json!({
                "type": "result",
                "text": "hi",
                "png": "iVBOR",
                "extra": {"application/vnd.custom": {"a": 1}},
                "is_main_result": true,
            })
        );
    }

    #[test]
    fn answers_become_lines() {
        let answer = json!({
            "execution_count": 5,
            "results": [{"text/plain": "2", "is_main_result": true}],
            "exception": {"name": "NameError", "value": "name 'x' is not defined", "traceback": "Traceback..."},
            "timed_out": false,
        });
        assert_eq!(
            answer_lines(&answer, 2),
            vec![
                json!({"type": "number_of_executions", "execution_count": 3}),
                json!({"type": "result", "text": "2", "is_main_result": true}),
                json!({"type": "error", "name": "NameError", "value": "name 'x' is not defined", "traceback": "Traceback..."}),
            ]
        );
    }

    #[test]
    fn only_python_is_served() {
        assert!(check_language(None).is_ok());
        assert!(check_language(Some(" Python ")).is_ok());
        let err = check_language(Some("js")).unwrap_err();
        assert_eq!(err.status(), 400);
        assert!(err.to_string().contains("Python only"), "{err}");
    }

    #[test]
    fn quotes_come_off_string_reprs_only() {
        assert_eq!(unquoted("'abc'"), "abc");
        assert_eq!(unquoted("\"a'b\""), "a'b");
        assert_eq!(unquoted("'"), "'");
        assert_eq!(unquoted("[1, 2]"), "[1, 2]");
    }

    #[test]
    fn env_code_is_a_python_literal() {
        let envs = BTreeMap::from([("A".to_owned(), "x\"y\n'z".to_owned())]);
        let code = set_env_code(&envs);
        assert!(
            code.starts_with("exec(\"import os, sys\\nnew = {\\\"A\\\""),
            "{code}"
        );
        assert!(code.ends_with(", {});"), "{code}");
    }
}
