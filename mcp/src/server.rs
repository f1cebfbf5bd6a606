//! The MCP face of one engine: `tools/list` from the registry, `tools/call` through the engine
//! with the client as approver, progress for scripts' nested calls, cancellation, the client's
//! roots as its session's workspace, and `notify_on_complete` (a log notification in legacy
//! sessions, a resource subscription for 2026-07-28 clients).

// Logging notifications are deprecated by 2026-07-28 (SEP-2577) but are the one way a legacy
// session can hear of a background process finishing.
#![allow(deprecated)]

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequest,
    ElicitRequestParams, ElicitResult, Implementation, InputRequest, InputRequests,
    InputRequiredResult, ListToolsResult, LoggingLevel, LoggingMessageNotificationParam,
    PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig,
    SetLevelRequestParams, ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler};
use serde_json::{Map, Value, json};
use std::sync::atomic::Ordering;
use tokio::sync::mpsc;

use crate::approvals::{
    self, DeferredElicitation, LegacyElicitation, NoElicitation, Parked, ParkedCalls, Question,
    RunningCall,
};
use crate::progress::ProgressRelay;
use paddock_engine::approval::approvers::Approver;
use paddock_engine::codemode::RUN_TOOLS_SCRIPT;
use paddock_engine::engine::{CallExtras, Engine};
use paddock_engine::registry::{ToolError, ToolErrorKind, ToolSpec};

/// How long `tools/list` may be cached by a client.
const TOOLS_TTL_MS: u64 = 60_000;
/// A progress notice this often while a call runs (when the client asked for progress);
/// `PADDOCK_MCP_HEARTBEAT_MS` changes it (the tests use a short one).
fn heartbeat_period() -> Duration {
    std::env::var("PADDOCK_MCP_HEARTBEAT_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|ms| *ms >= 100)
        .map(Duration::from_millis)
        .unwrap_or(Duration::from_secs(30))
}

/// What every request of one `paddock serve` shares.
pub struct Shared {
    pub engine: Engine,
    pub parked: Arc<ParkedCalls>,
    /// How long a paused call waits for the client's retry (the policy's approval timeout).
    pub approval_ttl: Duration,
    /// `logging/setLevel` above notice: completion notices are not sent.
    pub quiet: std::sync::atomic::AtomicBool,
    /// Which sessions' roots (their workspace) are known.
    pub roots: crate::roots::SessionRoots,
}

/// The rmcp handler; cheap to clone (Streamable HTTP makes one per request).
#[derive(Clone)]
pub struct PaddockServer {
    shared: Arc<Shared>,
    /// Over HTTP without `--session`: the Paddock session of this handler's MCP session.
    own: Option<Arc<OwnSession>>,
}

/// The Paddock session of one legacy HTTP MCP session: named after the MCP session id on its
/// first call, closed when rmcp drops the handler (the client deleted the MCP session, or it
/// expired). A stateless request's handler never learns an id and closes nothing.
pub struct OwnSession {
    shared: Arc<Shared>,
    id: std::sync::OnceLock<String>,
}

impl OwnSession {
    /// `mcp-` and a hash of the MCP session id: a valid Paddock id whatever the client sent,
    /// and not the MCP session id itself (it would show up in container names).
    fn id_for(&self, context: &RequestContext<RoleServer>) -> Option<String> {
        if let Some(id) = self.id.get() {
            return Some(id.clone());
        }
        let mcp_id = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.headers.get("mcp-session-id"))
            .and_then(|v| v.to_str().ok())?;
        use sha2::Digest;
        let digest = sha2::Sha256::digest(mcp_id.as_bytes());
        let id = format!("mcp-{}", &hex::encode(digest)[..16]);
        Some(self.id.get_or_init(|| id).clone())
    }
}

impl Drop for OwnSession {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else { return };
        self.shared.roots.forget(&id);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let shared = self.shared.clone();
        runtime.spawn(async move {
            match shared.engine.close_session(&id).await {
                Ok(_) => tracing::info!(session = %id, "MCP session ended: its session closed"),
                Err(paddock_engine::engine::EngineError::Session(
                    paddock_engine::sessions::SessionError::Unknown(_),
                )) => {}
                Err(err) => tracing::warn!(session = %id, %err, "session not closed"),
            }
        });
    }
}

impl PaddockServer {
    pub fn new(shared: Arc<Shared>) -> Self {
        Self { shared, own: None }
    }

    /// A handler whose MCP session gets a Paddock session of its own (HTTP without
    /// `--session`).
    pub fn with_own_session(shared: Arc<Shared>) -> Self {
        let own = Arc::new(OwnSession {
            shared: shared.clone(),
            id: std::sync::OnceLock::new(),
        });
        Self {
            shared,
            own: Some(own),
        }
    }

    /// The Paddock session a call of this request runs in (`None`: the engine's).
    fn session_of(&self, context: &RequestContext<RoleServer>) -> Option<String> {
        self.own.as_ref().and_then(|own| own.id_for(context))
    }

    /// The session a call of this request runs in, named.
    fn session_name(&self, context: &RequestContext<RoleServer>) -> String {
        self.session_of(context)
            .unwrap_or_else(|| self.engine().session().to_owned())
    }

    /// Before a session's first call (and after its client said its roots changed): learn the
    /// client's roots and make the first local one the session's workspace. A legacy client
    /// is asked with `roots/list` now; a 2026-07-28 one gets `input_required` (returned here),
    /// and its retry brings the roots to [`Self::apply_roots`].
    async fn learn_roots(&self, context: &RequestContext<RoleServer>) -> Option<CallToolResponse> {
        // rmcp hands each incoming message to a task of its own, in the order they arrived; a
        // `roots/list_changed` just before this call is a task spawned before this one, which
        // tokio's LIFO slot would otherwise run after it. Yielding once lets it run first, so
        // the call sees the change its client announced before making it.
        tokio::task::yield_now().await;
        let declared = context
            .client_capabilities()
            .is_some_and(|c| c.roots.is_some());
        let session = self.session_name(context);
        if !declared || !self.shared.roots.needed(&session) {
            return None;
        }
        if is_modern(context) {
            let (requests, state) = crate::roots::ask();
            return Some(CallToolResponse::InputRequired(InputRequiredResult::new(
                Some(requests),
                Some(state),
            )));
        }
        let listed = tokio::time::timeout(crate::roots::LIST_TIMEOUT, context.peer.list_roots());
        match listed.await {
            Ok(Ok(roots)) => self.apply_roots(context, Some(roots)).await,
            Ok(Err(err)) => {
                tracing::warn!(%err, "the client's roots/list failed; its workspace stays the default");
                self.shared.roots.learnt(&session);
            }
            Err(_) => {
                tracing::warn!(
                    "the client did not answer roots/list in time; its workspace stays the default"
                );
                self.shared.roots.learnt(&session);
            }
        }
        None
    }

    /// Makes the first local root of `roots` the workspace of this request's session. A root
    /// the backends refuse (`/`, a system directory) leaves the workspace as it was and is
    /// logged; the call itself goes on.
    async fn apply_roots(
        &self,
        context: &RequestContext<RoleServer>,
        roots: Option<rmcp::model::ListRootsResult>,
    ) {
        let session = self.session_name(context);
        self.shared.roots.learnt(&session);
        let Some(workspace) = roots.as_ref().and_then(crate::roots::workspace_of) else {
            tracing::info!(session = %session, "the client named no local root; the workspace stays the default");
            return;
        };
        match self
            .engine()
            .set_session_workspace(Some(&session), &workspace)
            .await
        {
            Ok(backends) => tracing::info!(
                session = %session,
                workspace = %workspace.display(),
                backends = ?backends,
                "the client's root is the session's workspace"
            ),
            Err(err) => tracing::warn!(session = %session, %err, "the client's root was not taken"),
        }
    }

    fn engine(&self) -> &Engine {
        &self.shared.engine
    }

    /// Starts the engine call for a fresh request, with the approver this client allows.
    fn start_call(
        &self,
        name: &str,
        args: Value,
        context: &RequestContext<RoleServer>,
        modern: bool,
    ) -> RunningCall {
        let can_elicit = context
            .client_capabilities()
            .is_some_and(|c| c.elicitation.is_some());
        let (questions_tx, questions) = mpsc::unbounded_channel::<Question>();
        let approver: Arc<dyn Approver> = match (can_elicit, modern) {
            (false, _) => Arc::new(NoElicitation),
            (true, false) => Arc::new(LegacyElicitation {
                peer: context.peer.clone(),
            }),
            (true, true) => Arc::new(DeferredElicitation {
                questions: questions_tx,
            }),
        };
        let progress = Arc::new(ProgressRelay::default());
        let sink = progress.sink();
        // A client that asked for progress gets a command's output as it is written, each
        // notification's message the new text. Without one, nothing is streamed (and the
        // command keeps the faster one-pipe path).
        let streams = context.meta.get_progress_token().is_some();
        let extras = CallExtras {
            approver: Some(approver),
            progress: Some(sink.clone()),
            session: self.session_of(context),
            output: None,
        };
        let shared = self.shared.clone();
        let name = name.to_owned();
        let output_sink = sink.clone();
        let task = tokio::spawn(async move {
            if streams {
                // Every piece is in the relay's queue before the answer is.
                let forward = |_, text: &str| output_sink(text.to_owned());
                shared
                    .engine
                    .call_tool_streaming(&name, args, extras, forward)
                    .await
            } else {
                shared.engine.call_tool_with(&name, args, extras).await
            }
        });
        RunningCall {
            task,
            questions,
            progress,
            heartbeat: sink,
            started: std::time::Instant::now(),
        }
    }

    /// Drives `call` until it ends, asks a question (2026-07-28: parked, `input_required`),
    /// or the client cancels.
    async fn drive(
        &self,
        mut call: RunningCall,
        name: &str,
        args: &Value,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        enum Step {
            Done(Result<Result<Value, ToolError>, tokio::task::JoinError>),
            Asked(Question),
            Cancelled,
        }
        call.progress
            .retarget(context.peer.clone(), context.meta.get_progress_token());
        // A long call that says nothing looks dead to clients (Claude Code aborts a silent call
        // after 300 s whatever its timeout) and lets an idle HTTP session expire.
        let period = heartbeat_period();
        let mut heartbeat = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        let step = loop {
            tokio::select! {
                () = context.ct.cancelled() => break Step::Cancelled,
                done = &mut call.task => break Step::Done(done),
                Some(question) = call.questions.recv() => break Step::Asked(question),
                _ = heartbeat.tick() => {
                    let secs = call.started.elapsed().as_secs();
                    (call.heartbeat)(format!("{name} still running ({secs} s)"));
                }
            }
        };
        match step {
            Step::Cancelled => {
                tracing::info!(tool = %name, "the client cancelled the call; ending it");
                drop(call);
                Err(ErrorData::internal_error("the call was cancelled", None))
            }
            Step::Done(Ok(mut result)) => {
                // The command's last output goes out before its answer.
                call.progress.flush().await;
                if let Ok(value) = &mut result {
                    self.name_completion_resource(name, args, value, context);
                }
                self.after_call(name, args, &result, context);
                Ok(CallToolResponse::Complete(tool_result(name, result)))
            }
            Step::Done(Err(join)) => Err(ErrorData::internal_error(
                format!("the call of '{name}' failed unexpectedly: {join}"),
                None,
            )),
            Step::Asked(question) => self.park(call, question, name, args),
        }
    }

    /// Parks a call paused on `question`; the client gets the form and a handle.
    fn park(
        &self,
        call: RunningCall,
        question: Question,
        name: &str,
        args: &Value,
    ) -> Result<CallToolResponse, ErrorData> {
        let form = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: approvals::approval_message(&question.request),
            requested_schema: approvals::approval_schema()
                .map_err(|e| ErrorData::internal_error(e, None))?,
        };
        let handle = self.shared.parked.park(
            Parked {
                call,
                question,
                tool: name.to_owned(),
                arguments_digest: approvals::digest(args),
            },
            self.shared.approval_ttl,
        );
        let mut requests = InputRequests::new();
        requests.insert(
            approvals::INPUT_KEY.to_owned(),
            InputRequest::Elicitation(ElicitRequest::new(form)),
        );
        Ok(CallToolResponse::InputRequired(InputRequiredResult::new(
            Some(requests),
            Some(handle),
        )))
    }

    /// A retry of a parked call: deliver the answer, then carry on.
    async fn resume(
        &self,
        handle: &str,
        responses: Option<&rmcp::model::InputResponses>,
        name: &str,
        args: &Value,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let parked = self
            .shared
            .parked
            .take(handle, name, &approvals::digest(args))
            .map_err(|why| ErrorData::invalid_params(why, None))?;
        let Some(response) = responses.and_then(|r| r.get(approvals::INPUT_KEY)) else {
            // No answer in the retry: ask again rather than guess.
            let Parked { call, question, .. } = parked;
            return self.park(call, question, name, args);
        };
        let answer = match serde_json::from_value::<ElicitResult>(response.clone()) {
            Ok(result) => Ok(approvals::answer_of(result.action, result.content.as_ref())),
            Err(err) => Err(format!("the approval answer was not understood: {err}")),
        };
        let Parked { call, question, .. } = parked;
        let _ = question.reply.send(answer);
        self.drive(call, name, args, context).await
    }

    /// A background `terminal` call with `notify_on_complete` names the resource a 2026-07-28
    /// client subscribes to for the process's end (`completions`).
    fn name_completion_resource(
        &self,
        name: &str,
        args: &Value,
        value: &mut Value,
        context: &RequestContext<RoleServer>,
    ) {
        let wants = name == "terminal"
            && args.get("background").and_then(Value::as_bool) == Some(true)
            && args.get("notify_on_complete").and_then(Value::as_bool) == Some(true);
        let id = value
            .get("session_id")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if let (true, Some(id), Some(map)) = (wants, id, value.as_object_mut()) {
            let session = self.session_name(context);
            map.insert(
                "resource_uri".into(),
                Value::String(crate::completions::uri_of(&session, &id)),
            );
        }
    }

    /// After a background `terminal` call with `notify_on_complete` in a legacy session: tell
    /// the client when the process ends (`notifications/message`, logger `paddock.process`).
    /// A 2026-07-28 client has no channel outside its requests; it polls with `process`.
    fn after_call(
        &self,
        name: &str,
        args: &Value,
        result: &Result<Value, ToolError>,
        context: &RequestContext<RoleServer>,
    ) {
        let wants = name == "terminal"
            && args.get("background").and_then(Value::as_bool) == Some(true)
            && args.get("notify_on_complete").and_then(Value::as_bool) == Some(true);
        let Ok(value) = result else { return };
        let Some(session_id) = value.get("session_id").and_then(Value::as_str) else {
            return;
        };
        if !wants || is_modern(context) || self.shared.quiet.load(Ordering::Relaxed) {
            return;
        }
        let peer = context.peer.clone();
        let shared = self.shared.clone();
        let session_id = session_id.to_owned();
        let session = self.session_of(context);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(300)).await;
                if peer.is_transport_closed() {
                    return;
                }
                let extras = CallExtras {
                    session: session.clone(),
                    ..CallExtras::default()
                };
                let status = shared
                    .engine
                    .call_tool_with(
                        "process",
                        json!({"action": "poll", "session_id": session_id}),
                        extras,
                    )
                    .await;
                let Ok(status) = status else { return };
                let running = status.get("state").and_then(Value::as_str) == Some("running");
                if running {
                    continue;
                }
                let data = json!({
                    "event": "process_completed",
                    "session_id": session_id,
                    "state": status.get("state"),
                    "exit_code": status.get("exit_code"),
                });
                let note = LoggingMessageNotificationParam::new(LoggingLevel::Notice, data)
                    .with_logger("paddock.process");
                if let Err(err) = peer.notify_logging_message(note).await {
                    tracing::debug!(%err, "completion notification not delivered");
                }
                return;
            }
        });
    }
}

fn is_modern(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28)
}

impl ServerHandler for PaddockServer {
    fn get_info(&self) -> ServerConfig {
        // Resources: background processes with notify_on_complete, so that a 2026-07-28 client
        // can subscribe to their end (see `completions`).
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_logging()
            .enable_resources()
            .enable_resources_subscribe()
            .build();
        let mut info = ServerConfig::new(capabilities).with_instructions(
            "Paddock: sandboxed code execution. Prefer run_tools_script to chain several tool \
             calls in one short Python script and return only what matters; terminal and \
             process run shell commands; python_execute runs CPython. Dangerous commands ask \
             the user for approval.",
        );
        info.server_info = Implementation::new("paddock", env!("CARGO_PKG_VERSION"));
        info
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let quiet = !matches!(
            request.level,
            LoggingLevel::Debug | LoggingLevel::Info | LoggingLevel::Notice
        );
        self.shared.quiet.store(quiet, Ordering::Relaxed);
        Ok(())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self.engine().tool_specs().iter().map(mcp_tool).collect();
        Ok(ListToolsResult::with_all_items(tools).with_ttl_ms(TOOLS_TTL_MS))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        if !self.engine().tool_specs().iter().any(|s| s.name == name) {
            return Err(ErrorData::invalid_params(
                format!("there is no tool named '{name}' (see tools/list)"),
                None,
            ));
        }
        let args = Value::Object(request.arguments.clone().unwrap_or_default());
        let mut request_state = request.request_state.as_deref();
        if request_state.is_some_and(crate::roots::is_answer) {
            // The retry that brings a 2026-07-28 client's roots: apply them, then run the call.
            let roots = crate::roots::answer_in(request.input_responses.as_ref());
            self.apply_roots(&context, roots).await;
            request_state = None;
        }
        if let Some(handle) = request_state {
            return self
                .resume(
                    handle,
                    request.input_responses.as_ref(),
                    &name,
                    &args,
                    &context,
                )
                .await;
        }
        if let Some(ask) = self.learn_roots(&context).await {
            return Ok(ask);
        }
        let call = self.start_call(&name, args.clone(), &context, is_modern(&context));
        self.drive(call, &name, &args, &context).await
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourceTemplatesResult, ErrorData> {
        let template =
            rmcp::model::ResourceTemplate::new(crate::completions::TEMPLATE, "background process")
                .with_description(
                    "A background process started with notify_on_complete: subscribe to hear \
                     when it ends; read it for its state, exit code and output tail.",
                )
                .with_mime_type("application/json");
        Ok(
            rmcp::model::ListResourceTemplatesResult::with_all_items(vec![template])
                .with_ttl_ms(TOOLS_TTL_MS),
        )
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourcesResult, ErrorData> {
        // Processes come and go: they are reached through the template, not listed.
        Ok(rmcp::model::ListResourcesResult::with_all_items(Vec::new()).with_ttl_ms(TOOLS_TTL_MS))
    }

    async fn read_resource(
        &self,
        request: rmcp::model::ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, ErrorData> {
        let Some((session, id)) = crate::completions::parse(&request.uri) else {
            return Err(ErrorData::resource_not_found(
                format!(
                    "no resource {}: Paddock's resources are {}",
                    request.uri,
                    crate::completions::TEMPLATE
                ),
                None,
            ));
        };
        let state = crate::completions::status(self.engine(), &session, &id)
            .await
            .map_err(|why| ErrorData::resource_not_found(why, None))?;
        let contents = rmcp::model::ResourceContents::text(state.to_string(), request.uri.clone());
        Ok(rmcp::model::ReadResourceResult::new(vec![contents]).into())
    }

    fn accepted_subscription_filter(
        &self,
        requested: &rmcp::model::SubscriptionFilter,
    ) -> Option<rmcp::model::SubscriptionFilter> {
        let ours: Vec<String> = requested
            .resource_subscriptions
            .iter()
            .flatten()
            .filter(|uri| crate::completions::parse(uri).is_some())
            .cloned()
            .collect();
        let mut accepted = rmcp::model::SubscriptionFilter::new();
        accepted.resource_subscriptions = (!ours.is_empty()).then_some(ours);
        Some(accepted)
    }

    async fn listen(&self, context: rmcp::service::SubscriptionContext) -> Result<(), ErrorData> {
        let uris = context
            .accepted()
            .resource_subscriptions
            .clone()
            .unwrap_or_default();
        let mut watchers = tokio::task::JoinSet::new();
        for uri in uris {
            let Some((session, id)) = crate::completions::parse(&uri) else {
                continue;
            };
            let shared = self.shared.clone();
            let sink = context.sink().clone();
            watchers.spawn(async move {
                crate::completions::finished(&shared.engine, &session, &id).await;
                let note = rmcp::model::ResourceUpdatedNotification::new(
                    rmcp::model::ResourceUpdatedNotificationParam::new(uri),
                );
                if let Err(err) = sink
                    .send(rmcp::model::ServerNotification::ResourceUpdatedNotification(note))
                    .await
                {
                    tracing::debug!(%err, "completion not delivered: the subscription ended");
                }
            });
        }
        // The stream stays open until the client ends it; the watchers end with it.
        context.cancelled().await;
        watchers.abort_all();
        Ok(())
    }

    async fn on_roots_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<RoleServer>,
    ) {
        // Over HTTP, a session that has not made its first call yet learns its roots then.
        let session = match &self.own {
            Some(own) => own.id.get().cloned(),
            None => Some(self.engine().session().to_owned()),
        };
        if let Some(session) = session {
            tracing::info!(session = %session, "the client's roots changed; asking again on its next call");
            self.shared.roots.changed(&session);
        }
    }
}

/// A registry spec as an MCP tool, with an output schema and hints.
fn mcp_tool(spec: &ToolSpec) -> rmcp::model::Tool {
    let input = match &spec.input_schema {
        Value::Object(map) => map.clone(),
        _ => Map::new(),
    };
    let output = match output_schema(&spec.name) {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    let hints = spec.hints;
    let annotations = ToolAnnotations::new()
        .read_only(hints.read_only)
        .destructive(hints.destructive)
        .open_world(hints.open_world);
    let mut tool =
        rmcp::model::Tool::new(spec.name.clone(), spec.description.clone(), Arc::new(input))
            .with_raw_output_schema(Arc::new(output))
            .with_annotations(annotations);
    if let Some(label) = &spec.label {
        tool = tool.with_title(label.clone());
    }
    tool
}

/// What `structuredContent` of each tool looks like. Every result is an object; failures are
/// `{"error", "error_code"}`, so those two are allowed everywhere.
fn output_schema(tool: &str) -> Value {
    let error = json!({
        "error": {"type": ["string", "null"], "description": "what went wrong"},
        "error_code": {"type": ["string", "null"], "description": "stable machine-readable code"}
    });
    let mut properties = match tool {
        RUN_TOOLS_SCRIPT => json!({
            "ok": {"type": "boolean"},
            "result": {"description": "the script's return value"},
            "output": {"type": "string", "description": "what the script printed"},
        }),
        "terminal" => json!({
            "output": {"type": "string"},
            "exit_code": {"type": ["integer", "null"]},
            "session_id": {"type": "string", "description": "background process handle"},
        }),
        "python_execute" => json!({
            "output": {"type": "string"},
            "exit_code": {"type": ["integer", "null"]},
            "artifacts": {"type": "array"},
        }),
        name if name.starts_with("mcp_") && !name.ends_with("__list_tools") => json!({
            "ok": {"type": "boolean"},
            "server": {"type": "string"},
            "tool": {"type": "string"},
            "is_error": {"type": "boolean"},
            "result": {"description": "the structured content, else the joined text"},
        }),
        _ => json!({}),
    };
    if let (Value::Object(p), Value::Object(e)) = (&mut properties, error) {
        p.extend(e);
    }
    json!({"type": "object", "properties": properties, "additionalProperties": true})
}

/// An engine answer as an MCP result: `structuredContent` plus the same JSON as compact text.
fn tool_result(name: &str, result: Result<Value, ToolError>) -> CallToolResult {
    let (value, is_error) = match result {
        Ok(value) => {
            let failed =
                name == RUN_TOOLS_SCRIPT && value.get("ok").and_then(Value::as_bool) == Some(false);
            let value = if value.is_object() {
                value
            } else {
                json!({"result": value})
            };
            (value, failed)
        }
        Err(err) => {
            let hint = match err.kind {
                ToolErrorKind::Denied => " (denied)",
                _ => "",
            };
            tracing::debug!(tool = %name, code = %err.code, "tool call failed{hint}");
            (err.to_json(), true)
        }
    };
    let text = value.to_string();
    let mut out = if is_error {
        CallToolResult::error(vec![ContentBlock::text(text)])
    } else {
        CallToolResult::success(vec![ContentBlock::text(text)])
    };
    out.structured_content = Some(value);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use paddock_engine::registry::Registry;

    #[test]
    fn hints_come_from_each_tools_spec() {
        let registry = Registry::with_builtins();
        let specs = registry.visible_specs();
        let hints = |name: &str| {
            let spec = specs.iter().find(|s| s.name == name).unwrap();
            let tool = mcp_tool(spec);
            let a = tool.annotations.unwrap();
            (
                a.read_only_hint.unwrap(),
                a.destructive_hint.unwrap(),
                a.open_world_hint.unwrap(),
            )
        };
        assert_eq!(hints("current_datetime"), (true, false, false));
        assert_eq!(hints("wait"), (true, false, false));
        let bridged =
            ToolSpec::new("mcp_notes__get", "notes", "d", json!({"type": "object"})).open_world();
        let a = mcp_tool(&bridged).annotations.unwrap();
        assert_eq!(
            (a.read_only_hint, a.destructive_hint, a.open_world_hint),
            (Some(false), Some(false), Some(true))
        );
        // A tool whose author said nothing is taken to be destructive.
        let plain = ToolSpec::new("mine", "demo", "d", json!({"type": "object"}));
        let a = mcp_tool(&plain).annotations.unwrap();
        assert_eq!(a.destructive_hint, Some(true));
    }
}
