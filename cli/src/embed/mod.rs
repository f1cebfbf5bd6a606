//! `paddock embed`: the engine for a program that embeds it (the Python package `paddock`,
//! or any language), over newline-delimited JSON on stdin/stdout
//! (docs/embedding-protocol.md). The client declares its own tools in `hello`; they join the
//! registry as [`host::HostTool`]s, so a script calls them like any other tool, through the
//! same dispatch. The client may also answer approvals and receive events.
//!
//! Threads: one reads stdin and answers host calls and approvals in place (no task hop on the
//! hot path); the task that sends a message writes it to stdout itself ([`outbox`]); requests
//! run as tokio tasks. Closing (a `close` message or the end of stdin) cancels what still runs, closes the
//! engine's own session and ends the process's children with it.

pub mod host;
pub mod outbox;
pub mod protocol;

use std::collections::HashMap;
use std::io::{BufRead, Read};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use host::{ClientApprover, HostLink, HostTool};
use outbox::Outbox;
use paddock_engine::codemode::{Limits, RUN_TOOLS_SCRIPT};
use paddock_engine::engine::{CallExtras, Engine, EngineOptions};
use paddock_engine::events::EventSink;
use paddock_engine::policy::Policy;
use paddock_engine::registry::{CallContext, new_call_id};
use protocol::{
    ClientMessage, Hello, LimitOverrides, MAX_LINE_BYTES, PROTOCOL_VERSION, ServerMessage,
};

/// Why `paddock embed` could not start or went on.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    #[error("the client's first message must be `hello`; got {0}")]
    NoHello(String),
    #[error("the client closed stdin before `hello`")]
    ClosedBeforeHello,
    #[error("hello: protocol {got} is not spoken here; this engine speaks {PROTOCOL_VERSION}")]
    Protocol { got: u32 },
    #[error("hello: {0}")]
    Setup(String),
}

/// Tools the engine registers after the client's, which a host tool must not shadow.
const RESERVED_NAMES: &[&str] = &[
    RUN_TOOLS_SCRIPT,
    "terminal",
    "process",
    "python_execute",
    "python_environment_info",
    "read_output",
];

/// Serialises `message` and writes it to the client; a client that left is not an error here.
fn send(out: &Outbox, message: &ServerMessage) {
    match serde_json::to_string(message) {
        Ok(line) => out.send_line(&line),
        Err(err) => tracing::error!(%err, "an embed message could not be serialised"),
    }
}

/// What the reader thread hands to the request loop.
enum Inbound {
    Message(ClientMessage),
    /// A line that is not a message; `id` when one could be read from it.
    Unreadable {
        id: Option<u64>,
        error: String,
    },
    /// End of stdin, a read error, or a line over the cap: the client is gone.
    Closed(Option<String>),
}

/// Runs `paddock embed` until the client closes it.
pub async fn serve_stdio() -> Result<(), EmbedError> {
    let out_tx = Outbox::stdout();
    let link = Arc::new(HostLink::new(out_tx.clone()));
    let (in_tx, mut in_rx) = tokio::sync::mpsc::unbounded_channel::<Inbound>();
    let reader_link = link.clone();
    std::thread::Builder::new()
        .name("embed-reader".into())
        .spawn(move || read_lines(&reader_link, &in_tx))
        .map_err(|e| EmbedError::Setup(format!("cannot start the reader thread: {e}")))?;

    let served = match in_rx.recv().await {
        Some(Inbound::Message(ClientMessage::Hello(hello))) => {
            match start(hello, &link, &out_tx).await {
                Ok(embedded) => {
                    embedded.serve(&mut in_rx, &out_tx).await;
                    embedded.shut_down().await;
                    Ok(())
                }
                Err(err) => Err(err),
            }
        }
        Some(Inbound::Message(other)) => Err(EmbedError::NoHello(format!("{other:?}"))),
        Some(Inbound::Unreadable { error, .. }) => Err(EmbedError::NoHello(error)),
        Some(Inbound::Closed(_)) | None => Err(EmbedError::ClosedBeforeHello),
    };
    if let Err(err) = &served {
        send(
            &out_tx,
            &ServerMessage::Error {
                id: None,
                error: err.to_string(),
                fatal: true,
            },
        );
    }
    link.abandon_all();
    out_tx.close();
    served
}

/// The engine built from `hello`, and what it needs to serve requests.
struct Embedded {
    engine: Arc<Engine>,
    bridge: paddock_mcp::bridge::Bridge,
    link: Arc<HostLink>,
    approver: Option<Arc<dyn paddock_engine::approval::approvers::Approver>>,
    /// A session made for this engine, closed when it ends.
    own_session: Option<String>,
}

async fn start(hello: Hello, link: &Arc<HostLink>, out: &Outbox) -> Result<Embedded, EmbedError> {
    if hello.protocol != PROTOCOL_VERSION {
        return Err(EmbedError::Protocol {
            got: hello.protocol,
        });
    }
    let mut policy = load_policy(hello.policy.as_deref()).map_err(EmbedError::Setup)?;
    policy.codemode.keep_state |= hello.keep_state;
    let (mut registry, bridge) = paddock_mcp::registry_with_bridge(&policy)
        .await
        .map_err(EmbedError::Setup)?;
    for declared in &hello.tools {
        if RESERVED_NAMES.contains(&declared.name.as_str()) {
            return Err(EmbedError::Setup(format!(
                "host tool '{}' has the name of a tool Paddock provides; rename it",
                declared.name
            )));
        }
        registry
            .register(Arc::new(HostTool::new(link.clone(), declared)))
            .map_err(|e| EmbedError::Setup(format!("host tool '{}': {e}", declared.name)))?;
        if declared.requires_approval {
            policy
                .tools
                .require_approval
                .push(toml::Spanned::new(0..0, declared.name.clone()));
        }
    }
    let events = if hello.events {
        let out = out.clone();
        EventSink::with_listener(Arc::new(move |event| {
            send(
                &out,
                &ServerMessage::Event {
                    event: event.clone(),
                },
            );
        }))
    } else {
        EventSink::default()
    };
    let own_session = match hello.session {
        Some(_) => None,
        None => Some(format!(
            "embed-{}-{}",
            std::process::id(),
            paddock_engine::events::now_ms()
        )),
    };
    let options = EngineOptions {
        session: hello.session.clone().or_else(|| own_session.clone()),
        backend: hello.backend.clone(),
        exe: None,
    };
    let engine = Engine::with_options(policy, registry, Arc::new(events), options)
        .map_err(|e| EmbedError::Setup(e.to_string()))?;
    engine.start_sweep();
    let approver: Option<Arc<dyn paddock_engine::approval::approvers::Approver>> = if hello.approver
    {
        Some(Arc::new(ClientApprover { link: link.clone() }))
    } else {
        None
    };
    let tools = engine.tool_specs().into_iter().map(|s| s.name).collect();
    send(
        out,
        &ServerMessage::Ready {
            protocol: PROTOCOL_VERSION,
            version: env!("CARGO_PKG_VERSION"),
            session: engine.session().to_owned(),
            tools,
        },
    );
    Ok(Embedded {
        engine: Arc::new(engine),
        bridge,
        link: link.clone(),
        approver,
        own_session,
    })
}

impl Embedded {
    /// Serves requests until `close` or the end of stdin; each runs in its own task.
    async fn serve(
        &self,
        inbound: &mut tokio::sync::mpsc::UnboundedReceiver<Inbound>,
        out: &Outbox,
    ) {
        let running: Arc<Mutex<HashMap<u64, tokio::task::AbortHandle>>> = Arc::default();
        let mut tasks = tokio::task::JoinSet::new();
        while let Some(next) = inbound.recv().await {
            let (id, job) = match next {
                Inbound::Message(ClientMessage::RunToolsScript {
                    id,
                    code,
                    limits,
                    session,
                }) => (
                    id,
                    Job::Script {
                        code,
                        limits,
                        session,
                    },
                ),
                Inbound::Message(ClientMessage::Call {
                    id,
                    tool,
                    args,
                    session,
                    stream,
                }) => (
                    id,
                    Job::Call {
                        tool,
                        args,
                        session,
                        stream,
                    },
                ),
                Inbound::Message(ClientMessage::Upload {
                    id,
                    local,
                    remote,
                    session,
                }) => (
                    id,
                    Job::Upload {
                        local: local.into(),
                        remote,
                        session,
                    },
                ),
                Inbound::Message(ClientMessage::Download {
                    id,
                    remote,
                    local,
                    session,
                }) => (
                    id,
                    Job::Download {
                        remote,
                        local: local.into(),
                        session,
                    },
                ),
                Inbound::Message(ClientMessage::Session {
                    id,
                    action,
                    session,
                }) => (id, Job::Session { action, session }),
                Inbound::Message(ClientMessage::Snapshot { id, session, name }) => {
                    (id, Job::Snapshot { session, name })
                }
                Inbound::Message(ClientMessage::Fork {
                    id,
                    snapshot,
                    count,
                }) => (id, Job::Fork { snapshot, count }),
                Inbound::Message(ClientMessage::AddTools { id, tools }) => {
                    (id, Job::AddTools { tools })
                }
                Inbound::Message(ClientMessage::Cancel { id }) => {
                    let handle = running.lock().ok().and_then(|mut r| r.remove(&id));
                    if let Some(handle) = handle {
                        handle.abort();
                    }
                    continue;
                }
                Inbound::Message(ClientMessage::Close) | Inbound::Closed(None) => break,
                Inbound::Closed(Some(why)) => {
                    send(
                        out,
                        &ServerMessage::Error {
                            id: None,
                            error: why,
                            fatal: true,
                        },
                    );
                    break;
                }
                Inbound::Message(ClientMessage::Hello(_)) => {
                    send(
                        out,
                        &ServerMessage::Error {
                            id: None,
                            error: "`hello` was already received; it is sent once".into(),
                            fatal: false,
                        },
                    );
                    continue;
                }
                // The reader thread answers these itself.
                Inbound::Message(
                    ClientMessage::HostResult { .. } | ClientMessage::ApprovalReply { .. },
                ) => continue,
                Inbound::Unreadable { id, error } => {
                    send(
                        out,
                        &ServerMessage::Error {
                            id,
                            error,
                            fatal: false,
                        },
                    );
                    continue;
                }
            };
            let context = RequestContext {
                engine: self.engine.clone(),
                link: self.link.clone(),
                approver: self.approver.clone(),
                out: out.clone(),
                running: running.clone(),
            };
            // The lock is held across the spawn, so a task that ends at once removes its
            // entry after it was made, never before.
            if let Ok(mut entries) = running.lock() {
                let handle = tasks.spawn(async move {
                    context.run(id, job).await;
                    if let Ok(mut running) = context.running.lock() {
                        running.remove(&id);
                    }
                });
                entries.insert(id, handle);
            }
            // Reap what finished, so a long session does not hold every task's slot.
            while tasks.try_join_next().is_some() {}
        }
        // Closing: what still runs is cancelled (a script's child is killed on drop).
        tasks.shutdown().await;
    }

    async fn shut_down(self) {
        if let Some(id) = &self.own_session {
            match tokio::time::timeout(Duration::from_secs(30), self.engine.close_session(id)).await
            {
                Ok(Ok(report)) => {
                    tracing::debug!(session = %id, ok = report.all_ok(), "embed session closed")
                }
                Ok(Err(paddock_engine::engine::EngineError::Session(
                    paddock_engine::sessions::SessionError::Unknown(_),
                ))) => {}
                Ok(Err(err)) => tracing::warn!(session = %id, %err, "embed session not closed"),
                Err(_) => tracing::warn!(session = %id, "closing the embed session took over 30 s"),
            }
        }
        self.engine.settle().await;
        self.bridge.stop().await;
    }
}

enum Job {
    Script {
        code: String,
        limits: LimitOverrides,
        session: Option<String>,
    },
    Call {
        tool: String,
        args: Value,
        session: Option<String>,
        stream: bool,
    },
    Upload {
        local: std::path::PathBuf,
        remote: String,
        session: Option<String>,
    },
    Download {
        remote: String,
        local: std::path::PathBuf,
        session: Option<String>,
    },
    Session {
        action: protocol::SessionAction,
        session: String,
    },
    Snapshot {
        session: Option<String>,
        name: Option<String>,
    },
    Fork {
        snapshot: String,
        count: usize,
    },
    AddTools {
        tools: Vec<protocol::HostToolSpec>,
    },
}

/// A failed snapshot or fork, as the client reads a failed call.
fn snapshot_error(err: paddock_engine::engine::EngineError) -> Value {
    serde_json::json!({"error": err.to_string(), "error_code": "sessions:snapshot_failed"})
}

/// A failed upload or download, as the client reads a failed call.
fn transfer_error(err: paddock_engine::engine::EngineError) -> Value {
    serde_json::json!({"error": err.to_string(), "error_code": "files:transfer_failed"})
}

struct RequestContext {
    engine: Arc<Engine>,
    link: Arc<HostLink>,
    approver: Option<Arc<dyn paddock_engine::approval::approvers::Approver>>,
    out: Outbox,
    running: Arc<Mutex<HashMap<u64, tokio::task::AbortHandle>>>,
}

impl RequestContext {
    async fn run(&self, id: u64, job: Job) {
        let answer = match job {
            Job::Script {
                code,
                limits,
                session,
            } => match apply_limits(self.engine.limits(), &limits) {
                Ok(limits) => self.script(id, &code, &limits, session).await,
                Err(message) => {
                    Err(paddock_engine::registry::ToolError::invalid_arguments(message).to_json())
                }
            },
            Job::Call {
                tool,
                args,
                session,
                ..
            } if tool == RUN_TOOLS_SCRIPT => match args.get("code").and_then(Value::as_str) {
                Some(code) if args.as_object().is_some_and(|a| a.len() == 1) => {
                    self.script(id, code, &self.engine.limits(), session).await
                }
                _ => Err(paddock_engine::registry::ToolError::invalid_arguments(
                    "invalid arguments for 'run_tools_script': give exactly `code` (a string)",
                )
                .to_json()),
            },
            Job::Call {
                tool,
                args,
                session,
                stream,
            } => {
                let extras = CallExtras {
                    approver: self.approver.clone(),
                    session,
                    ..CallExtras::default()
                };
                let answer = if stream {
                    let out = &self.out;
                    let forward = |stream: paddock_backends::OutputStream, text: &str| {
                        send(
                            out,
                            &ServerMessage::Output {
                                id,
                                stream: stream.as_str(),
                                text: text.to_owned(),
                            },
                        );
                    };
                    self.engine
                        .call_tool_streaming(&tool, args, extras, forward)
                        .await
                } else {
                    self.engine.call_tool_with(&tool, args, extras).await
                };
                answer.map_err(|e| e.to_json())
            }
            Job::Upload {
                local,
                remote,
                session,
            } => {
                let session = session.unwrap_or_else(|| self.engine.session().to_owned());
                self.engine
                    .upload_to(&session, &local, &remote)
                    .await
                    .map_err(transfer_error)
            }
            Job::Download {
                remote,
                local,
                session,
            } => {
                let session = session.unwrap_or_else(|| self.engine.session().to_owned());
                self.engine
                    .download_from(&session, &remote, &local)
                    .await
                    .map_err(transfer_error)
            }
            Job::Session { action, session } => self.session_action(action, &session).await,
            Job::Snapshot { session, name } => {
                let session = session.unwrap_or_else(|| self.engine.session().to_owned());
                self.engine
                    .snapshot_session(&session, name.as_deref())
                    .await
                    .map(|summary| serde_json::to_value(summary).unwrap_or_default())
                    .map_err(snapshot_error)
            }
            Job::Fork { snapshot, count } => {
                if count == 0 {
                    Err(serde_json::json!({
                        "error": "fork: count must be at least 1",
                        "error_code": "tool:invalid_arguments"
                    }))
                } else {
                    let ids = paddock_engine::snapshots::fork_ids(&snapshot, count);
                    self.engine
                        .start_from_snapshot(&snapshot, &ids)
                        .await
                        .map(|()| serde_json::json!({"snapshot": snapshot, "sessions": ids}))
                        .map_err(snapshot_error)
                }
            }
            Job::AddTools { tools } => self.add_tools(&tools),
        };
        let message = match answer {
            Ok(value) => ServerMessage::Result {
                id,
                ok: true,
                value: Some(value),
                error: None,
            },
            Err(error) => ServerMessage::Result {
                id,
                ok: false,
                value: None,
                error: Some(error),
            },
        };
        send(&self.out, &message);
    }

    /// `add_tools`: every tool is checked before any is added, so a bad one adds none.
    fn add_tools(&self, tools: &[protocol::HostToolSpec]) -> Result<Value, Value> {
        let refused = |message: String| serde_json::json!({"error": message, "error_code": "tool:invalid_arguments"});
        let registry = self.engine.registry();
        let known = registry.all_specs();
        let mut seen = std::collections::HashSet::new();
        for declared in tools {
            if RESERVED_NAMES.contains(&declared.name.as_str())
                || known.iter().any(|spec| spec.name == declared.name)
            {
                return Err(refused(format!(
                    "host tool '{}': a tool of that name exists already; rename it",
                    declared.name
                )));
            }
            if !seen.insert(declared.name.as_str()) {
                return Err(refused(format!(
                    "host tool '{}' is given twice",
                    declared.name
                )));
            }
        }
        let mut made = Vec::with_capacity(tools.len());
        for declared in tools {
            let tool = HostTool::new(self.link.clone(), declared);
            paddock_engine::registry::Registry::checked_spec(&tool)
                .map_err(|e| refused(format!("host tool '{}': {e}", declared.name)))?;
            made.push((
                declared.name.as_str(),
                Arc::new(tool),
                declared.requires_approval,
            ));
        }
        for (name, tool, requires_approval) in made {
            registry
                .add(tool, requires_approval)
                .map_err(|e| refused(format!("host tool '{name}': {e}")))?;
        }
        let names: Vec<String> = self
            .engine
            .tool_specs()
            .into_iter()
            .map(|s| s.name)
            .collect();
        Ok(serde_json::json!({ "tools": names }))
    }

    /// One `session` request.
    async fn session_action(
        &self,
        action: protocol::SessionAction,
        session: &str,
    ) -> Result<Value, Value> {
        use protocol::SessionAction;
        let failed = |code: &str, err: paddock_engine::engine::EngineError| serde_json::json!({"error": err.to_string(), "error_code": code});
        let as_json = |value: Result<Value, serde_json::Error>| {
            value.map_err(
                |e| serde_json::json!({"error": e.to_string(), "error_code": "tool:failed"}),
            )
        };
        match action {
            SessionAction::Exists => self
                .engine
                .session_is_live(session)
                .map(|live| serde_json::json!({"live": live}))
                .map_err(|e| failed("sessions:failed", e)),
            SessionAction::Close => {
                let live = self
                    .engine
                    .session_is_live(session)
                    .map_err(|e| failed("sessions:failed", e))?;
                if !live {
                    // A session that only ran scripts has no environment and no record, but
                    // its notebook (names, worker) is still this engine's to end.
                    if self.engine.close_notebook(session) {
                        return as_json(serde_json::to_value(
                            paddock_engine::sessions::CloseReport {
                                id: session.to_owned(),
                                closed: true,
                                backends: Vec::new(),
                                processes_killed: Vec::new(),
                                state_removed: Vec::new(),
                            },
                        ));
                    }
                    return Err(serde_json::json!({
                        "error": format!("no live session '{session}' (closed, or it never ran anything)"),
                        "error_code": "sessions:not_found"
                    }));
                }
                let report = self
                    .engine
                    .close_session(session)
                    .await
                    .map_err(|e| failed("sessions:close_failed", e))?;
                as_json(serde_json::to_value(report))
            }
            SessionAction::Pause => {
                let report = self
                    .engine
                    .pause_session(session)
                    .await
                    .map_err(|e| failed("sessions:pause_failed", e))?;
                as_json(serde_json::to_value(report))
            }
            SessionAction::Resume => self
                .engine
                .resume_session(session)
                .await
                .map(|()| serde_json::json!({"id": session, "resumed": true}))
                .map_err(|e| failed("sessions:resume_failed", e)),
        }
    }

    /// One script, as the call whose id maps to the client's request `id`: its host calls
    /// name that request, so the client runs them where the request was made.
    async fn script(
        &self,
        id: u64,
        code: &str,
        limits: &Limits,
        session: Option<String>,
    ) -> Result<Value, Value> {
        let ctx = CallContext {
            call_id: new_call_id(),
            session: session.unwrap_or_else(|| self.engine.session().to_owned()),
            parent_call_id: None,
            deadline: None,
            approver: self.approver.clone(),
            progress: None,
            output: None,
        };
        let call_id = ctx.call_id.clone();
        self.link.script_started(&call_id, id);
        let _forget = ScriptEntry {
            link: &self.link,
            call_id: &call_id,
        };
        self.engine
            .run_script_as(code, limits, ctx)
            .await
            .map_err(|e| {
                paddock_engine::registry::ToolError::denied(
                    paddock_engine::vocabulary::ErrorCode::ToolNotAllowed,
                    e.to_string(),
                )
                .to_json()
            })
    }
}

/// Forgets a script's request mapping when it ends, cancelled or not.
struct ScriptEntry<'a> {
    link: &'a HostLink,
    call_id: &'a str,
}

impl Drop for ScriptEntry<'_> {
    fn drop(&mut self) {
        self.link.script_ended(self.call_id);
    }
}

/// The policy's limits with a request's overrides, each checked as `paddock run` checks its
/// flags.
fn apply_limits(mut limits: Limits, overrides: &LimitOverrides) -> Result<Limits, String> {
    if let Some(t) = overrides.timeout_seconds {
        if !(t.is_finite() && t > 0.0 && t <= 3600.0) {
            return Err(format!(
                "limits.timeout_seconds must be between 0 and 3600, got {t}"
            ));
        }
        limits.timeout = Duration::from_secs_f64(t);
    }
    if let Some(n) = overrides.max_tool_calls {
        limits.max_tool_calls = n;
    }
    if let Some(n) = overrides.max_memory_mb {
        if n == 0 || n > 16 * 1024 {
            return Err(format!(
                "limits.max_memory_mb must be between 1 and 16384, got {n}"
            ));
        }
        limits.max_memory_mb = n;
    }
    if let Some(n) = overrides.max_output_chars {
        if n < 100 {
            return Err(format!(
                "limits.max_output_chars must be at least 100, got {n}"
            ));
        }
        limits.max_output_chars = n;
    }
    Ok(limits)
}

fn load_policy(path: Option<&str>) -> Result<Policy, String> {
    let from_env = std::env::var_os("PADDOCK_POLICY").map(PathBuf::from);
    match path.map(PathBuf::from).or(from_env) {
        Some(path) => Policy::load(&path).map_err(|e| e.to_string()),
        None => Ok(Policy::builtin()),
    }
}

/// The reader thread: one message per line. Host results and approval replies are answered
/// here, the rest goes to the request loop.
fn read_lines(link: &HostLink, inbound: &tokio::sync::mpsc::UnboundedSender<Inbound>) {
    let stdin = std::io::stdin();
    let mut reader = std::io::BufReader::with_capacity(64 * 1024, stdin.lock());
    let mut line = Vec::with_capacity(4096);
    loop {
        line.clear();
        let read = (&mut reader)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut line);
        match read {
            Ok(0) => {
                let _ = inbound.send(Inbound::Closed(None));
                return;
            }
            Ok(_) if line.last() != Some(&b'\n') && line.len() > MAX_LINE_BYTES => {
                let _ = inbound.send(Inbound::Closed(Some(format!(
                    "a line over {MAX_LINE_BYTES} bytes was sent; the engine stops reading"
                ))));
                return;
            }
            Ok(_) => {}
            Err(err) => {
                let _ = inbound.send(Inbound::Closed(Some(format!(
                    "reading stdin failed: {err}"
                ))));
                return;
            }
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<ClientMessage>(&line) {
            Ok(ClientMessage::HostResult {
                id,
                ok,
                value,
                error,
            }) => {
                let answer = if ok {
                    Ok(value)
                } else {
                    Err(error.unwrap_or(protocol::HostError {
                        exception: None,
                        message: "the host tool failed and said nothing".into(),
                    }))
                };
                link.answer_call(id, answer);
            }
            Ok(ClientMessage::ApprovalReply {
                id,
                approved,
                scope,
            }) => link.answer_approval(id, host::answer_of(approved, scope.as_deref())),
            Ok(message) => {
                if inbound.send(Inbound::Message(message)).is_err() {
                    return;
                }
            }
            Err(err) => {
                let id = serde_json::from_slice::<Value>(&line)
                    .ok()
                    .and_then(|v| v.get("id").and_then(Value::as_u64));
                let _ = inbound.send(Inbound::Unreadable {
                    id,
                    error: format!("unreadable message: {err}"),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use paddock_engine::vocabulary::approver::Answer;
    use serde_json::json;

    #[test]
    fn a_request_overrides_only_the_limits_it_names_and_each_is_checked() {
        let policy = Limits::default();
        let limits = apply_limits(
            policy.clone(),
            &LimitOverrides {
                timeout_seconds: Some(2.5),
                max_tool_calls: Some(3),
                ..LimitOverrides::default()
            },
        )
        .unwrap();
        assert_eq!(limits.timeout, Duration::from_millis(2500));
        assert_eq!(limits.max_tool_calls, 3);
        assert_eq!(limits.max_memory_mb, policy.max_memory_mb);
        let err = apply_limits(
            policy,
            &LimitOverrides {
                max_memory_mb: Some(0),
                ..LimitOverrides::default()
            },
        )
        .unwrap_err();
        assert!(err.contains("limits.max_memory_mb"), "{err}");
    }

    #[test]
    fn messages_are_read_as_documented() {
        let hello: ClientMessage = serde_json::from_value(json!({
            "type": "hello", "protocol": 1,
            "tools": [{"name": "add", "input_schema": {"type": "object"}, "requires_approval": true}],
            "approver": true
        }))
        .unwrap();
        let ClientMessage::Hello(hello) = hello else {
            panic!("not a hello")
        };
        assert!(hello.approver && !hello.events && hello.tools[0].requires_approval);
        let unknown = serde_json::from_value::<ClientMessage>(
            json!({"type": "hello", "protocol": 1, "colour": "red"}),
        );
        assert!(unknown.unwrap_err().to_string().contains("colour"));
        let call: ClientMessage =
            serde_json::from_value(json!({"type": "call", "id": 4, "tool": "wait"})).unwrap();
        assert!(matches!(call, ClientMessage::Call { id: 4, ref args, .. } if args == &json!({})));
        // A float limit inside the tagged message, as a client writes it (the line is read as
        // bytes: serde buffers the message, and with arbitrary_precision a float is a map).
        let run: ClientMessage = serde_json::from_slice(
            br#"{"type": "run_tools_script", "id": 5, "code": "1", "limits": {"timeout_seconds": 2.50}}"#,
        )
        .unwrap();
        assert!(
            matches!(run, ClientMessage::RunToolsScript { ref limits, .. }
            if limits.timeout_seconds == Some(2.5))
        );
        let line = serde_json::to_value(ServerMessage::HostCancel { id: 9 }).unwrap();
        assert_eq!(line, json!({"type": "host_cancel", "id": 9}));
    }

    #[test]
    fn approval_replies_map_to_answers() {
        assert_eq!(host::answer_of(false, Some("always")), Answer::Deny);
        assert_eq!(host::answer_of(true, None), Answer::Once);
        assert_eq!(host::answer_of(true, Some("session")), Answer::Session);
    }

    #[tokio::test]
    async fn a_host_call_is_sent_answered_and_abandoned_cleanly() {
        let (out, mut lines) = outbox::channel();
        let link = Arc::new(HostLink::new(out));
        let declared = protocol::HostToolSpec {
            name: "fails".into(),
            description: String::new(),
            input_schema: json!({"type": "object"}),
            requires_approval: false,
        };
        let tool = HostTool::new(link.clone(), &declared);
        let call = tokio::spawn(paddock_engine::registry::Tool::call(
            &tool,
            json!({"x": 1}),
            CallContext::default(),
        ));
        let Some(sent) = lines.recv().await else {
            panic!("no host_call sent")
        };
        let sent: Value = serde_json::from_str(&sent).unwrap();
        assert_eq!(sent["type"], "host_call");
        assert_eq!(sent["args"], json!({"x": 1}));
        let id = sent["id"].as_u64().unwrap();
        link.answer_call(
            id,
            Err(protocol::HostError {
                exception: Some("KeyError".into()),
                message: "'k'".into(),
            }),
        );
        let err = call.await.unwrap().unwrap_err();
        assert_eq!(err.message, "host tool 'fails' raised KeyError: 'k'");
        // A call dropped before its answer (the script's deadline) is cancelled at the client.
        let abandoned = tokio::spawn(paddock_engine::registry::Tool::call(
            &tool,
            json!({}),
            CallContext::default(),
        ));
        let Some(sent) = lines.recv().await else {
            panic!("no host_call sent")
        };
        let id = serde_json::from_str::<Value>(&sent).unwrap()["id"].clone();
        abandoned.abort();
        let _ = abandoned.await;
        let Some(cancel) = lines.recv().await else {
            panic!("no host_cancel sent")
        };
        assert_eq!(
            serde_json::from_str::<Value>(&cancel).unwrap(),
            json!({"type": "host_cancel", "id": id})
        );
        assert!(link.calls.lock().unwrap().is_empty());
    }
}
