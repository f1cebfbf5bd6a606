//! Code mode: `run_tools_script`. A script is prepared in Rust, run in a confined sandbox child
//! from the pool, and its nested tool calls are dispatched through the registry while the
//! engine enforces the wall-clock, memory, output and tool-call limits.

pub use crate::vocabulary::deadline;
mod notebook;
pub mod pool;
pub mod saved_state;

use std::path::Path;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use paddock_sandbox_worker::prepare::prepare_script;
use paddock_sandbox_worker::wire::{Message, RunRequest, ScriptFailure, ScriptOutcome, ToolReply};
use serde_json::{Map, Value, json};

use crate::events::{Phase, ToolCallEvent, now_ms};
use crate::registry::{CallContext, Registry, ToolError, new_call_id};
use deadline::Deadline;
use notebook::{Notebook, Notebooks};
use paddock_backends::output::{CappedText, cap_text};
use pool::{Checkout, ExitInfo, FrameReader, LiveChild, SandboxPool};
use saved_state::{ExchangeError, NotebookState, SavedStates};

/// The tool name of code mode itself.
pub use crate::vocabulary::RUN_TOOLS_SCRIPT;

/// Largest script accepted, in bytes.
pub const MAX_SCRIPT_BYTES: usize = 1024 * 1024;

/// Every `error_code` a script result can carry.
pub mod codes {
    use crate::vocabulary::ErrorCode;
    pub const SYNTAX_ERROR: &str = ErrorCode::SyntaxError.as_str();
    pub const TIMEOUT: &str = ErrorCode::Timeout.as_str();
    pub const MEMORY_LIMIT: &str = ErrorCode::MemoryLimit.as_str();
    pub const SCRIPT_ERROR: &str = ErrorCode::ScriptError.as_str();
    pub const SANDBOX_FAILED: &str = ErrorCode::SandboxFailed.as_str();
    pub const APPROVAL_DENIED: &str = ErrorCode::ApprovalDenied.as_str();
    pub const TOOL_CALL_LIMIT: &str = ErrorCode::ToolCallLimit.as_str();
}

/// Limits of one script run.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    pub timeout: Duration,
    pub max_tool_calls: u32,
    pub max_memory_mb: u64,
    pub max_output_chars: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(60),
            max_tool_calls: 50,
            max_memory_mb: 64,
            max_output_chars: 20_000,
        }
    }
}

/// Runs scripts: the pool plus the registry their nested calls go through, and the kept state
/// of notebook sessions.
pub struct CodeMode {
    pool: SandboxPool,
    registry: Arc<Registry>,
    notebooks: Arc<Notebooks>,
    /// Names from snapshots, waiting for their session's first notebook script.
    saved: SavedStates,
}

/// Saves a session's notebook names for a snapshot. `Sessions` holds one, so that every way of
/// making a snapshot (the CLI, MCP, the Python package) reaches the engine's notebooks; it
/// does not keep them alive.
#[derive(Clone)]
pub struct NotebookSaver {
    notebooks: Weak<Notebooks>,
}

impl NotebookSaver {
    /// The names of `session`'s notebook; `None` when it holds none (or the engine is gone).
    pub async fn dump(&self, session: &str) -> Result<Option<NotebookState>, String> {
        match self.notebooks.upgrade() {
            Some(notebooks) => notebooks.dump(session).await,
            None => Ok(None),
        }
    }
}

/// A nested tool call in flight: resolves to (call id, tool, reply).
type NestedCall =
    std::pin::Pin<Box<dyn std::future::Future<Output = (u64, String, ToolReply)> + Send>>;

/// What a conversation with one child needs to know about its script.
struct ScriptScope<'a> {
    limits: &'a Limits,
    ctx: &'a CallContext,
    deadline: &'a Deadline,
    /// Tool names the script may call.
    allowed: &'a std::collections::HashSet<String>,
}

/// What one script run produced, before it becomes the result object.
struct RunRecord {
    output: CappedText,
    /// Identifiers of the tools the script could call (for hints).
    script_tools: Vec<String>,
    tool_calls: u32,
    tool_errors: Vec<Value>,
    started: Instant,
}

impl RunRecord {
    fn new(limits: &Limits) -> Self {
        Self {
            output: CappedText::new(limits.max_output_chars),
            script_tools: Vec::new(),
            tool_calls: 0,
            tool_errors: Vec::new(),
            started: Instant::now(),
        }
    }
}

enum Ending {
    Finished(ScriptOutcome),
    Failed { code: &'static str, message: String },
}

/// A script refused before it reached a sandbox (too big, empty, not Python).
struct Rejected {
    code: &'static str,
    message: String,
}

impl From<Rejected> for Ending {
    fn from(rejected: Rejected) -> Self {
        Ending::Failed {
            code: rejected.code,
            message: rejected.message,
        }
    }
}

impl CodeMode {
    /// `max_kept_sessions`: notebook sessions holding a child at once (`[codemode]
    /// max_kept_sessions`); one more evicts the least recently used.
    /// Names saved by snapshots wait under `state_root` (see [`saved_state`]).
    pub fn new(
        pool: SandboxPool,
        registry: Arc<Registry>,
        max_kept_sessions: usize,
        state_root: &Path,
    ) -> Self {
        Self {
            pool,
            registry,
            notebooks: Arc::new(Notebooks::new(max_kept_sessions)),
            saved: SavedStates::new(state_root),
        }
    }

    /// What snapshots use to save this engine's notebook names.
    pub fn notebook_saver(&self) -> NotebookSaver {
        NotebookSaver {
            notebooks: Arc::downgrade(&self.notebooks),
        }
    }

    /// Ends `session`'s notebook state, if it has one (its child is killed).
    pub fn close_notebook(&self, session: &str) -> bool {
        self.notebooks.close(session)
    }

    /// Ends the notebook state of sessions unused for `idle`; answers their ids.
    pub fn close_idle_notebooks(&self, idle: Duration) -> Vec<String> {
        self.notebooks.close_idle(idle)
    }

    /// Notebook sessions holding a live child.
    pub fn live_notebooks(&self) -> usize {
        self.notebooks.live()
    }

    pub fn pool(&self) -> &SandboxPool {
        &self.pool
    }

    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Runs one script and returns its result object (DESIGN.md section 2). `ctx.call_id` is
    /// the script's own call id: nested calls carry it as `parent_call_id`.
    pub async fn run(&self, code: &str, limits: &Limits, ctx: &CallContext) -> Value {
        let mut record = RunRecord::new(limits);
        let ending = self.run_inner(code, limits, ctx, &mut record).await;
        render(ending, record, limits)
    }

    /// Checks and prepares a script: the request for the child and the tool names it may call.
    fn request_for(
        &self,
        code: &str,
        limits: &Limits,
        keep_state: bool,
        record: &mut RunRecord,
    ) -> Result<(RunRequest, std::collections::HashSet<String>), Rejected> {
        if code.len() > MAX_SCRIPT_BYTES {
            return Err(Rejected {
                code: codes::SCRIPT_ERROR,
                message: format!(
                    "the script is {} bytes; the limit is {MAX_SCRIPT_BYTES} bytes",
                    code.len()
                ),
            });
        }
        if code.trim().is_empty() {
            return Err(Rejected {
                code: codes::SCRIPT_ERROR,
                message: "the script is empty: send Python code that calls tools and ends on the \
                          value to return"
                    .into(),
            });
        }
        let prepared = prepare_script(code).map_err(|err| Rejected {
            code: codes::SYNTAX_ERROR,
            message: err.to_string(),
        })?;
        let script_tools = self.registry.script_tools();
        record.script_tools = script_tools
            .names
            .iter()
            .map(|(ident, _)| ident.clone())
            .collect();
        let allowed = script_tools
            .names
            .iter()
            .map(|(_, name)| name.clone())
            .collect();
        let request = RunRequest {
            source: prepared.source,
            original_source: code.to_owned(),
            tools: script_tools.names,
            tool_parameters: script_tools.parameters,
            max_memory_bytes: limits.max_memory_mb.saturating_mul(1024 * 1024),
            keep_state,
        };
        Ok((request, allowed))
    }

    async fn run_inner(
        &self,
        code: &str,
        limits: &Limits,
        ctx: &CallContext,
        record: &mut RunRecord,
    ) -> Ending {
        let (request, allowed) = match self.request_for(code, limits, false, record) {
            Ok(prepared) => prepared,
            Err(rejected) => return rejected.into(),
        };
        // The clock starts when the script is accepted: waiting for a free slot counts.
        let deadline = Deadline::start(limits.timeout);
        let checkout = tokio::select! {
            checkout = self.pool.checkout() => checkout,
            () = deadline.expired() => {
                return Ending::Failed { code: codes::TIMEOUT, message: timeout_message(limits) };
            }
        };
        let (mut child, reader) = match checkout {
            Ok(c) => c,
            Err(err) => {
                return Ending::Failed {
                    code: codes::SANDBOX_FAILED,
                    message: format!("no sandbox available: {err}"),
                };
            }
        };
        if let Err(err) = child.send(&Message::Run(request)).await {
            child.kill();
            child.forget_exit();
            return Ending::Failed {
                code: codes::SANDBOX_FAILED,
                message: format!("could not hand the script to the sandbox: {err}"),
            };
        }
        let scope = ScriptScope {
            limits,
            ctx,
            deadline: &deadline,
            allowed: &allowed,
        };
        let mut frames = FrameReader::new(reader);
        let ending = self.converse(&mut child, &mut frames, &scope, record).await;
        child.forget_exit();
        ending
    }

    /// Runs one script of a notebook session (`[codemode] keep_state`) in the session's own
    /// child, and returns its result object with a `notebook` member: the session, the cell
    /// number in the current state, whether the script started fresh and why, and whether its
    /// names are kept for the next script.
    pub async fn run_kept(&self, code: &str, limits: &Limits, ctx: &CallContext) -> Value {
        let mut record = RunRecord::new(limits);
        // The clock starts when the script is accepted: waiting for the session's previous
        // script, and for a slot, counts.
        let deadline = Deadline::start(limits.timeout);
        let notebook = self.notebooks.of(&ctx.session);
        let mut notebook = tokio::select! {
            notebook = notebook.lock_owned() => notebook,
            () = deadline.expired() => {
                let ending = Ending::Failed { code: codes::TIMEOUT, message: format!(
                    "{} (it waited for the session's previous script, which was still running)",
                    timeout_message(limits))
                };
                return render(ending, record, limits);
            }
        };
        let ending = self
            .run_cell(code, limits, ctx, &deadline, &mut notebook, &mut record)
            .await;
        let mut result = render(ending.ending, record, limits);
        let loaded = ending.restored.as_ref().is_some_and(|r| r.loaded);
        let mut described = notebook.describe(
            &ctx.session,
            ending.fresh && !loaded,
            ending.reset.as_deref(),
        );
        if let Some(restored) = ending.restored {
            described["restored"] = restored.report;
        }
        described["state_kept"] = json!(notebook.child.is_some());
        if let Some(how) = &ending.ended {
            described["state_ended"] = json!(how);
        }
        if let Value::Object(map) = &mut result {
            map.insert("notebook".into(), described);
        }
        result
    }

    async fn run_cell(
        &self,
        code: &str,
        limits: &Limits,
        ctx: &CallContext,
        deadline: &Deadline,
        notebook: &mut Notebook,
        record: &mut RunRecord,
    ) -> CellEnding {
        let mut reset = notebook.reset_reason.take();
        if let Some(live) = &notebook.child
            && (live.checkout.has_exited() || !live.checkout.zygote_alive())
        {
            notebook.end("the session's sandbox child had ended while it waited".into());
            reset = notebook.reset_reason.take();
        }
        let fresh = notebook.child.is_none();
        let cell = |ending| CellEnding {
            ending,
            fresh,
            reset: reset.clone(),
            ended: None,
            restored: None,
        };
        let (request, allowed) = match self.request_for(code, limits, true, record) {
            Ok(prepared) => prepared,
            // Nothing ran: the state stays as it was.
            Err(rejected) => return cell(rejected.into()),
        };
        // From here until the script ends the child is out of the notebook: if this call is
        // dropped (an MCP client cancelled it), the child is killed with `live` and the
        // session's next script starts fresh, told why. Every early return undoes it.
        notebook.reset_reason = Some(
            "the previous script was cancelled before it ended (the caller gave up on it); the \
             names defined before it are gone"
                .into(),
        );
        let mut live = if let Some(mut live) = notebook.child.take() {
            let slot = tokio::select! {
                slot = self.pool.slot() => slot,
                () = deadline.expired() => {
                    notebook.child = Some(live);
                    notebook.reset_reason = None;
                    return cell(Ending::Failed { code: codes::TIMEOUT, message: timeout_message(limits) });
                }
            };
            match slot {
                Ok(slot) => live.checkout.hold_slot(slot),
                Err(err) => {
                    notebook.child = Some(live);
                    notebook.reset_reason = None;
                    return cell(Ending::Failed {
                        code: codes::SANDBOX_FAILED,
                        message: format!("no sandbox slot available: {err}"),
                    });
                }
            }
            live
        } else {
            let checkout = tokio::select! {
                checkout = self.pool.checkout() => checkout,
                () = deadline.expired() => {
                    notebook.reset_reason = None;
                    return cell(Ending::Failed { code: codes::TIMEOUT, message: timeout_message(limits) });
                }
            };
            match checkout {
                Ok((mut checkout, reader)) => {
                    // The child stays with the session: its replacement is forked now.
                    checkout.refill_now();
                    notebook.cells = 0;
                    LiveChild {
                        checkout,
                        frames: FrameReader::new(reader),
                    }
                }
                Err(err) => {
                    notebook.reset_reason = None;
                    return cell(Ending::Failed {
                        code: codes::SANDBOX_FAILED,
                        message: format!("no sandbox available: {err}"),
                    });
                }
            }
        };
        let restored = if fresh {
            self.restore(&ctx.session, &mut live).await
        } else {
            None
        };
        if let Some(Restored {
            child_lost: Some(reason),
            ..
        }) = &restored
        {
            live.checkout.release_slot();
            live.checkout.forget_exit();
            notebook.end(format!(
                "the snapshot's names could not be loaded ({reason}); the session starts empty"
            ));
            let mut failed = cell(Ending::Failed {
                code: codes::SANDBOX_FAILED,
                message: format!(
                    "the snapshot's names could not be loaded: {reason}; the script did not run: \
                     run it again to start without them"
                ),
            });
            failed.restored = restored;
            return failed;
        }
        notebook.cells += 1;
        let ending = match live.checkout.send(&Message::Run(request)).await {
            Ok(()) => {
                let scope = ScriptScope {
                    limits,
                    ctx,
                    deadline,
                    allowed: &allowed,
                };
                self.converse(&mut live.checkout, &mut live.frames, &scope, record)
                    .await
            }
            Err(err) => Ending::Failed {
                code: codes::SANDBOX_FAILED,
                message: format!("could not hand the script to the sandbox: {err}"),
            },
        };
        live.checkout.release_slot();
        if let Some(cause) = state_ending(&ending) {
            live.checkout.kill();
            live.checkout.forget_exit();
            notebook.end(format!(
                "the previous script {cause}; the names defined before it are gone"
            ));
            let mut ended = cell(ending);
            ended.restored = restored;
            ended.ended = Some(format!(
                "this script {cause}; the session's names are gone and its next script starts \
                 fresh"
            ));
            return ended;
        }
        notebook.reset_reason = None;
        notebook.child = Some(live);
        let mut ran = cell(ending);
        ran.restored = restored;
        ran
    }

    /// Loads the names a snapshot left for `session` into its fresh child, if it left any.
    async fn restore(&self, session: &str, live: &mut LiveChild) -> Option<Restored> {
        let failed = |reason: String, child_lost: Option<String>| Restored {
            report: json!({"failed": reason}),
            loaded: false,
            child_lost,
        };
        let state = match self.saved.take(session)? {
            Ok(state) => state,
            Err(reason) => return Some(failed(reason, None)),
        };
        let started = Instant::now();
        let mut not_restored: Vec<Value> = state
            .not_kept
            .iter()
            .map(|(name, why)| json!({"name": name, "why": why}))
            .collect();
        Some(match saved_state::load(live, state).await {
            Ok(loaded) => {
                not_restored.extend(
                    loaded
                        .not_restored
                        .iter()
                        .map(|(name, why)| json!({"name": name, "why": why})),
                );
                Restored {
                    report: json!({
                        "names": loaded.names.len(),
                        "not_restored": not_restored,
                        "load_ms": started.elapsed().as_secs_f64() * 1000.0,
                    }),
                    loaded: true,
                    child_lost: None,
                }
            }
            Err(ExchangeError::Refused(reason)) => failed(reason, None),
            Err(ExchangeError::ChildLost(reason)) => failed(reason.clone(), Some(reason)),
        })
    }

    /// Serves one child until its script ends, the deadline passes or the child dies. The
    /// caller decides what becomes of the child afterwards.
    async fn converse(
        &self,
        child: &mut Checkout,
        frames: &mut FrameReader,
        scope: &ScriptScope<'_>,
        record: &mut RunRecord,
    ) -> Ending {
        let ScriptScope {
            limits,
            ctx,
            deadline,
            allowed,
        } = *scope;
        // Nested calls are polled in this task: no thread hop between a reply and its frame.
        let mut in_flight: FuturesUnordered<NestedCall> = FuturesUnordered::new();
        let expired = deadline.expired();
        tokio::pin!(expired);

        let ending = loop {
            tokio::select! {
                biased;
                () = &mut expired => {
                    child.kill();
                    break Ending::Failed { code: codes::TIMEOUT, message: timeout_message(limits) };
                }
                Some((id, tool, reply)) = in_flight.next(), if !in_flight.is_empty() => {
                    if let ToolReply::Err { error_code, .. } = &reply {
                        record.tool_errors.push(json!({"tool": tool, "error_code": error_code}));
                    }
                    if child.send(&Message::ToolReply { id, reply }).await.is_err() {
                        // The child is gone; the frame reader reports how.
                        continue;
                    }
                }
                frame = frames.next() => match frame {
                    Ok(Message::Output { text }) => record.output.push(&text),
                    Ok(Message::ToolCall { id, tool, args_json }) => {
                        record.tool_calls += 1;
                        if record.tool_calls > limits.max_tool_calls {
                            record.tool_errors.push(json!({"tool": tool, "error_code": codes::TOOL_CALL_LIMIT}));
                            let reply = ToolReply::Err {
                                exception: "ValueError".into(),
                                message: format!(
                                    "{}: this script already made its {} tool calls; \
                                     combine work into fewer calls",
                                    codes::TOOL_CALL_LIMIT, limits.max_tool_calls
                                ),
                                error_code: codes::TOOL_CALL_LIMIT.into(),
                            };
                            let _ = child.send(&Message::ToolReply { id, reply }).await;
                            continue;
                        }
                        let registry = self.registry.clone();
                        let nested = CallContext {
                            call_id: new_call_id(),
                            session: ctx.session.clone(),
                            parent_call_id: Some(ctx.call_id.clone()),
                            deadline: Some(deadline.clone()),
                            approver: ctx.approver.clone(),
                            progress: None,
                            output: None,
                        };
                        let permitted = allowed.contains(&tool);
                        let progress = ctx.progress.clone();
                        if let Some(report) = &progress {
                            report(format!("{tool} started"));
                        }
                        in_flight.push(Box::pin(async move {
                            let result = if permitted {
                                match serde_json::from_str::<Value>(&args_json) {
                                    Ok(args) => registry.dispatch(&tool, args, nested).await,
                                    Err(e) => Err(ToolError::invalid_arguments(format!(
                                        "arguments of '{tool}' are not valid JSON: {e}"
                                    ))),
                                }
                            } else {
                                Err(ToolError::not_found(format!(
                                    "tool '{tool}' is not available to scripts"
                                )))
                            };
                            let reply = tool_reply(&tool, result);
                            if let Some(report) = &progress {
                                report(format!("{tool} finished"));
                            }
                            (id, tool, reply)
                        }));
                    }
                    Ok(Message::Finished(outcome)) => break Ending::Finished(outcome),
                    Ok(other) => {
                        child.kill();
                        break Ending::Failed {
                            code: codes::SANDBOX_FAILED,
                            message: format!("the sandbox sent an unexpected message: {}", message_name(&other)),
                        };
                    }
                    Err(err) => break self.classify_death(child, err).await,
                },
            }
        };
        // Calls still running are cancelled; those that ran are not undone.
        drop(in_flight);
        ending
    }

    async fn classify_death(
        &self,
        child: &Checkout,
        err: paddock_sandbox_worker::wire::WireError,
    ) -> Ending {
        let info = child.exit_info(Duration::from_secs(3)).await;
        classify_exit(info, &err.to_string())
    }
}

/// How a notebook script ended, and what the result says about the state it ran in.
struct CellEnding {
    ending: Ending,
    /// The script started with no names from earlier scripts.
    fresh: bool,
    /// Why an earlier state was lost, when that is why this script started fresh.
    reset: Option<String>,
    /// How this script ended the state, when it did.
    ended: Option<String>,
    /// The names a snapshot left for the session, loaded before this script.
    restored: Option<Restored>,
}

/// What loading a snapshot's names before a script did.
struct Restored {
    /// The result's `notebook.restored`: `{names, not_restored, load_ms}` or `{failed}`.
    report: Value,
    /// Names were loaded: the script did not start empty.
    loaded: bool,
    /// The child died or hung while loading: the script cannot run in it.
    child_lost: Option<String>,
}

/// Why a notebook's state cannot go on after this ending, if it cannot (a timeout or a crash
/// killed the child, a memory blow-up leaves its heap at the ceiling): what the script did, in
/// words that fit "this script ..." and "the previous script ...".
fn state_ending(ending: &Ending) -> Option<String> {
    match ending {
        Ending::Finished(ScriptOutcome::Ok { .. }) => None,
        Ending::Finished(ScriptOutcome::Err(failure)) => match failure.error_code.as_deref() {
            Some(codes::MEMORY_LIMIT) => {
                Some("ran out of memory (the session's max_memory_mb)".into())
            }
            Some(codes::SANDBOX_FAILED) => Some("broke its sandbox".into()),
            _ => None,
        },
        Ending::Failed { code, message } => Some(match *code {
            codes::TIMEOUT => "timed out".into(),
            codes::MEMORY_LIMIT => "exceeded the session's memory ceiling".into(),
            _ => format!("ended its sandbox ({message})"),
        }),
    }
}

fn classify_exit(info: Option<ExitInfo>, detail: &str) -> Ending {
    const SIGABRT: i32 = 6;
    const SIGSEGV: i32 = 11;
    const SIGSYS: i32 = 31;
    match info {
        Some(ExitInfo {
            signal: Some(SIGABRT),
            ..
        }) => Ending::Failed {
            code: codes::MEMORY_LIMIT,
            message: "the script exceeded its memory ceiling and the sandbox was stopped".into(),
        },
        Some(ExitInfo {
            signal: Some(SIGSYS),
            ..
        }) => Ending::Failed {
            code: codes::SANDBOX_FAILED,
            message: "the sandbox was killed by its seccomp filter (forbidden system call)".into(),
        },
        Some(ExitInfo {
            signal: Some(SIGSEGV),
            ..
        }) => Ending::Failed {
            code: codes::SANDBOX_FAILED,
            message: "the sandbox crashed (segmentation fault)".into(),
        },
        Some(ExitInfo {
            signal: Some(sig), ..
        }) => Ending::Failed {
            code: codes::SANDBOX_FAILED,
            message: format!("the sandbox was killed by signal {sig}"),
        },
        Some(ExitInfo { code, .. }) => Ending::Failed {
            code: codes::SANDBOX_FAILED,
            message: format!("the sandbox exited early (status {code:?}): {detail}"),
        },
        None => Ending::Failed {
            code: codes::SANDBOX_FAILED,
            message: format!("lost the sandbox: {detail}"),
        },
    }
}

fn message_name(message: &Message) -> String {
    serde_json::to_value(message)
        .ok()
        .and_then(|v| v.get("type").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_else(|| "unknown".into())
}

/// A nested call's result as the child sees it.
fn tool_reply(tool: &str, result: Result<Value, ToolError>) -> ToolReply {
    match result {
        Ok(value) => match serde_json::to_string(&value) {
            Ok(value_json) => ToolReply::Ok { value_json },
            Err(e) => ToolReply::Err {
                exception: "RuntimeError".into(),
                message: format!("tool '{tool}' returned a value that is not JSON: {e}"),
                error_code: crate::vocabulary::ErrorCode::ToolFailed.into(),
            },
        },
        Err(err) => ToolReply::Err {
            exception: err.kind.python_exception().into(),
            message: err.message,
            error_code: err.code,
        },
    }
}

fn timeout_message(limits: &Limits) -> String {
    format!(
        "the script ran past its timeout of {} s (time waiting for approvals excluded); \
         output printed before that is kept",
        limits.timeout.as_secs_f64()
    )
}

/// Builds the result object of DESIGN.md section 2.
fn render(ending: Ending, record: RunRecord, limits: &Limits) -> Value {
    let mut out = Map::new();
    match ending {
        Ending::Finished(ScriptOutcome::Ok {
            result_json,
            final_answer,
        }) => {
            out.insert("ok".into(), json!(true));
            out.insert("output".into(), json!(record.output.render()));
            out.insert(
                "result".into(),
                capped_result(&result_json, limits.max_output_chars),
            );
            if final_answer {
                out.insert("final_answer".into(), json!(true));
            }
        }
        Ending::Finished(ScriptOutcome::Err(failure)) => {
            let code = failure
                .error_code
                .clone()
                .unwrap_or_else(|| codes::SCRIPT_ERROR.into());
            out.insert("ok".into(), json!(false));
            out.insert("error_code".into(), json!(code));
            out.insert("error".into(), json!(describe_failure(&failure)));
            out.insert("output".into(), json!(record.output.render()));
            if !failure.traceback.is_empty() {
                out.insert("traceback".into(), json!(failure.traceback));
            }
            if let Some(tool) = &failure.unknown_tool {
                out.insert(
                    "hint".into(),
                    json!(unknown_tool_hint(tool, &record.script_tools)),
                );
            }
        }
        Ending::Failed { code, message } => {
            out.insert("ok".into(), json!(false));
            out.insert("error_code".into(), json!(code));
            out.insert("error".into(), json!(message));
            out.insert("output".into(), json!(record.output.render()));
        }
    }
    if !record.tool_errors.is_empty() {
        out.insert("tool_errors".into(), Value::Array(record.tool_errors));
    }
    out.insert(
        "stats".into(),
        json!({
            "duration_ms": (record.started.elapsed().as_secs_f64() * 1000.0 * 1000.0).round() / 1000.0,
            "tool_calls": record.tool_calls,
            "output_chars": record.output.total_chars(),
        }),
    );
    Value::Object(out)
}

fn describe_failure(failure: &ScriptFailure) -> String {
    let mut text = if failure.message.is_empty() {
        failure.exception.clone()
    } else {
        format!("{}: {}", failure.exception, failure.message)
    };
    if let Some(line) = failure.line {
        text.push_str(&format!(" (line {line})"));
    }
    text
}

/// "tools.serch does not exist; did you mean tools.search? ..." naming the closest tools.
pub fn unknown_tool_hint(tool: &str, available: &[String]) -> String {
    let wanted = tool.to_lowercase();
    let mut scored: Vec<(f64, &String)> = available
        .iter()
        .map(|name| {
            let lower = name.to_lowercase();
            let mut score = strsim::jaro_winkler(&wanted, &lower);
            if lower.contains(&wanted) || wanted.contains(&lower) {
                score += 0.3;
            }
            (score, name)
        })
        .filter(|(score, _)| *score >= 0.7)
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    let closest: Vec<String> = scored
        .iter()
        .take(3)
        .map(|(_, n)| format!("tools.{n}"))
        .collect();
    let mut hint = format!("tools.{tool} does not exist");
    if closest.is_empty() {
        let mut names: Vec<&String> = available.iter().collect();
        names.sort();
        let shown: Vec<String> = names
            .iter()
            .take(20)
            .map(|n| format!("tools.{n}"))
            .collect();
        if shown.is_empty() {
            hint.push_str("; no tools are available to scripts");
        } else {
            hint.push_str(&format!("; available: {}", shown.join(", ")));
            if names.len() > 20 {
                hint.push_str(&format!(" and {} more", names.len() - 20));
            }
        }
    } else {
        hint.push_str(&format!("; did you mean {}?", closest.join(" or ")));
    }
    hint
}

/// The final value: raw JSON when it fits, else its text cut to the cap.
fn capped_result(result_json: &str, cap: usize) -> Value {
    if result_json.chars().count() <= cap {
        // The runtime emits plain JSON; integers of any size keep every digit (the workspace
        // builds serde_json with arbitrary_precision).
        return serde_json::from_str(result_json)
            .unwrap_or_else(|_| Value::String(result_json.into()));
    }
    Value::String(cap_text(result_json, cap))
}

/// Emits the script's own started/finished events.
pub fn script_event(
    ctx: &CallContext,
    phase: Phase,
    started: Instant,
    error_code: Option<String>,
) -> ToolCallEvent {
    ToolCallEvent {
        call_id: ctx.call_id.clone(),
        parent_call_id: ctx.parent_call_id.clone(),
        tool: RUN_TOOLS_SCRIPT.into(),
        phase,
        duration_ms: matches!(phase, Phase::Finished)
            .then(|| started.elapsed().as_secs_f64() * 1000.0),
        error_code,
        timestamp_ms: now_ms(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hint_names_the_closest_tools() {
        let tools = vec![
            "search_docs".to_string(),
            "wait".to_string(),
            "current_datetime".to_string(),
        ];
        let hint = unknown_tool_hint("serch_docs", &tools);
        assert!(hint.contains("did you mean tools.search_docs"), "{hint}");
        let hint = unknown_tool_hint("zzz", &tools);
        assert!(
            hint.contains("available: tools.current_datetime, tools.search_docs, tools.wait"),
            "{hint}"
        );
    }

    #[test]
    fn oversized_results_become_capped_text() {
        let big = format!("[{}]", vec!["1"; 5000].join(","));
        let v = capped_result(&big, 200);
        let s = v.as_str().unwrap();
        assert!(s.starts_with("[1,1"), "{s}");
        assert!(s.contains("characters omitted"), "{s}");
        assert_eq!(capped_result("{\"a\": [1, 2]}", 200), json!({"a": [1, 2]}));
    }
}
