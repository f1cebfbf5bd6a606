//! The engine facade: a policy, the registry and code mode, wired together. This is what the
//! CLI holds and what a Rust library user builds.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::codemode::pool::{PoolConfig, SandboxPool};
use crate::codemode::{CodeMode, Limits, RUN_TOOLS_SCRIPT, script_event};
use crate::events::{EventSink, Phase};
use crate::policy::{Policy, PolicyError};
use crate::registry::{CallContext, Registry, ToolError, ToolSpec, definitions, new_call_id};
use crate::sessions::{CloseReport, PauseReport, SessionSummary, Sessions, SweepReport};
use crate::tools::spill::{READ_OUTPUT, Spiller};

/// Errors building or running the engine.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error("code mode is disabled by the policy ([codemode] enabled = false)")]
    CodemodeDisabled,
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Backends(String),
    #[error(transparent)]
    Session(#[from] crate::sessions::SessionError),
    #[error("this engine has no environment tools, hence no sessions")]
    NoSessions,
    #[error(transparent)]
    Snapshot(#[from] crate::snapshots::SnapshotError),
}

/// Who is calling and where environment tools run, for one engine.
#[derive(Debug, Clone, Default)]
pub struct EngineOptions {
    /// The agent session (`--session`); `default` when not given.
    pub session: Option<String>,
    /// `--backend NAME`: run environment tools there, whatever the routes say.
    pub backend: Option<String>,
    /// The `paddock` binary re-executed as sandbox zygote and process supervisor (default:
    /// this executable).
    pub exe: Option<std::path::PathBuf>,
}

/// Per-call additions from the caller: the MCP server passes its client as approver and a
/// progress sink.
#[derive(Clone, Default)]
pub struct CallExtras {
    pub approver: Option<Arc<dyn crate::approval::approvers::Approver>>,
    pub progress: Option<crate::registry::ProgressSink>,
    /// The session of this call instead of the engine's (an HTTP MCP session's own).
    pub session: Option<String>,
    /// Where a command tool's output goes as it is written ([`CallContext::output`]).
    pub output: Option<paddock_backends::ChunkSender>,
}

/// Registry + code mode + policy.
pub struct Engine {
    policy: Policy,
    codemode: CodeMode,
    session: String,
    /// Session records and closing; absent for an engine made without environment tools.
    sessions: Option<Arc<Sessions>>,
    /// The sweep of idle sessions started with the engine, when there was anything to sweep.
    sweep: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Writes direct results longer than `[tools] max_result_chars` to the session's files.
    spiller: Spiller,
    /// The backends, for files put into and taken out of a session (`upload`, `download`).
    environments: Option<Arc<crate::tools::environment::Environments>>,
}

impl Engine {
    /// An engine over `registry`, filtered and limited by `policy`, whose sandbox zygote is this
    /// very binary re-executed (`paddock __sandbox-zygote`).
    pub fn new(
        policy: Policy,
        registry: Registry,
        events: Arc<EventSink>,
    ) -> Result<Self, EngineError> {
        Self::with_options(policy, registry, events, EngineOptions::default())
    }

    /// As [`Engine::new`], for a session and optionally a forced backend. Registers the
    /// environment tools (terminal, process, python_execute) on the policy's backends.
    pub fn with_options(
        policy: Policy,
        mut registry: Registry,
        events: Arc<EventSink>,
        options: EngineOptions,
    ) -> Result<Self, EngineError> {
        let exe = match options.exe {
            Some(exe) => exe,
            None => std::env::current_exe()?,
        };
        let gate = Arc::new(
            crate::approval::ApprovalGate::from_policy(
                &policy,
                crate::tools::environment::state_root(),
            )
            .map_err(EngineError::Backends)?,
        );
        registry.set_approvals(gate.clone());
        registry.set_failure_log(Arc::new(crate::events::FailureLog::in_state_dir(
            &crate::tools::environment::state_root(),
        )));
        let envs = crate::tools::environment::Environments::from_policy(
            &policy,
            exe.clone(),
            options.backend,
            gate,
        )
        .map_err(EngineError::Backends)?;
        let sessions = envs.sessions().clone();
        let envs = Arc::new(envs);
        for tool in crate::tools::environment_tools(envs.clone()) {
            // A library user's own tool of the same name wins.
            let _ = registry.register(tool);
        }
        // Off unless `[toolsets]` enables `sessions_admin`.
        for tool in crate::tools::sessions_admin::sessions_admin_tools(
            envs.clone(),
            crate::snapshots::Limits::of(&policy.snapshots),
        ) {
            let _ = registry.register(tool);
        }
        // Offered where [network] lets something through; elsewhere it could only refuse.
        if let Some(egress) = envs.egress().filter(|e| e.offers_web()) {
            let _ = registry.register(Arc::new(crate::tools::http_request::HttpRequest::new(
                envs.clone(),
                egress.clone(),
            )));
        }
        let pool = PoolConfig {
            exe,
            prefork: *policy.codemode.prefork.get_ref(),
            max_concurrency: (*policy.codemode.max_concurrency.get_ref()).max(1),
            degraded: policy
                .codemode
                .degraded
                .iter()
                .map(|f| f.get_ref().clone())
                .collect(),
        };
        registry.set_filter(policy.tool_filter());
        let (enabled, disabled) = policy.toolset_selection();
        registry.select_toolsets(&enabled, &disabled);
        registry.set_events(events);
        let mut engine = Self::with_pool(policy, registry, pool);
        if let Some(session) = options.session {
            engine.session = session;
        }
        sessions.set_notebook_saver(engine.codemode.notebook_saver());
        engine.sessions = Some(sessions);
        engine.environments = Some(envs);
        Ok(engine)
    }

    /// As [`Engine::new`] with an explicit pool configuration (e.g. another binary as zygote).
    /// Registers `read_output`, the reader of spilled results.
    pub fn with_pool(policy: Policy, mut registry: Registry, pool: PoolConfig) -> Self {
        let state_root = crate::tools::environment::state_root();
        let max_result_chars = *policy.tools.max_result_chars.get_ref();
        // A library user's own tool of the same name wins.
        let _ = registry.register(Arc::new(crate::tools::read_output::ReadOutput::new(
            state_root.clone(),
            max_result_chars,
        )));
        let codemode = CodeMode::new(
            SandboxPool::new(pool),
            Arc::new(registry),
            *policy.codemode.max_kept_sessions.get_ref(),
            &state_root,
        );
        Self {
            policy,
            codemode,
            session: "default".into(),
            sessions: None,
            sweep: std::sync::Mutex::default(),
            spiller: Spiller::new(state_root, max_result_chars),
            environments: None,
        }
    }

    /// The session this engine's calls run in.
    pub fn session(&self) -> &str {
        &self.session
    }

    /// The session life cycle, when this engine has environment tools.
    pub fn sessions(&self) -> Result<&Arc<Sessions>, EngineError> {
        self.sessions.as_ref().ok_or(EngineError::NoSessions)
    }

    /// Closes sessions idle longer than `[sessions] idle_timeout_seconds` in a background task,
    /// leaving this engine's own session alone (it is about to be used). Finding them reads
    /// only the small record files; when none is idle nothing is spawned and no backend is
    /// touched, so a `paddock call` pays nothing. [`Engine::settle`] waits for the task.
    pub fn start_sweep(&self) {
        let Some(sessions) = self.sessions.clone() else {
            return;
        };
        let expired = sessions.expired(&self.session);
        let due = sessions.due_for_pause(&self.session);
        if expired.is_empty() && due.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        tracing::debug!(sessions = ?expired, pausing = ?due, "sweeping idle sessions");
        let task = runtime.spawn(async move {
            if !expired.is_empty() {
                let report = sessions.sweep(&expired).await;
                tracing::info!(closed = report.closed.len(), "idle sessions swept");
            }
            let paused = sessions.pause_idle(&due).await;
            if !paused.is_empty() {
                tracing::info!(sessions = ?paused, "idle sessions paused");
            }
        });
        if let Ok(mut sweep) = self.sweep.lock() {
            *sweep = Some(task);
        }
    }

    /// Waits for the sweep [`Engine::start_sweep`] began, so that a short-lived process does
    /// not exit halfway through closing a session.
    pub async fn settle(&self) {
        let task = self.sweep.lock().ok().and_then(|mut s| s.take());
        if let Some(task) = task {
            let _ = task.await;
        }
    }

    /// Closes every idle session but this engine's own, and removes orphaned environments
    /// (`paddock serve` does this every minute).
    pub async fn sweep_now(&self) -> Result<SweepReport, EngineError> {
        let sessions = self.sessions()?;
        let expired = sessions.expired(&self.session);
        let report = sessions.sweep(&expired).await;
        sessions
            .pause_idle(&sessions.due_for_pause(&self.session))
            .await;
        Ok(report)
    }

    /// Starts filling the warm pools of the policy's backends (`paddock serve` does so when it
    /// starts; a short `paddock call` leaves it to the first session that claims).
    pub fn prewarm(&self) {
        if let Some(sessions) = &self.sessions {
            sessions.prewarm();
        }
    }

    /// Every live session. Sessions past their idle timeout are closed first (this engine's
    /// own too: listing is not using it), so the list never shows one whose environments a
    /// later sweep would remove; one that could not be closed is left out all the same and
    /// named in a warning.
    /// Copies `local` (a file, or a directory as a tar stream) into this engine's session's
    /// environment at `remote`, on the backend the `files` route names.
    pub async fn upload(
        &self,
        local: &std::path::Path,
        remote: &str,
    ) -> Result<serde_json::Value, EngineError> {
        self.upload_to(&self.session, local, remote).await
    }

    /// [`Engine::upload`] into session `session`.
    pub async fn upload_to(
        &self,
        session: &str,
        local: &std::path::Path,
        remote: &str,
    ) -> Result<serde_json::Value, EngineError> {
        let envs = self.environments.as_ref().ok_or(EngineError::NoSessions)?;
        envs.upload(session, local, remote)
            .await
            .map_err(|e| EngineError::Backends(e.to_string()))
    }

    /// Copies `remote` (a file, or a directory) out of this engine's session's environment to
    /// `local`.
    pub async fn download(
        &self,
        remote: &str,
        local: &std::path::Path,
    ) -> Result<serde_json::Value, EngineError> {
        self.download_from(&self.session, remote, local).await
    }

    /// [`Engine::download`] out of session `session`.
    pub async fn download_from(
        &self,
        session: &str,
        remote: &str,
        local: &std::path::Path,
    ) -> Result<serde_json::Value, EngineError> {
        let envs = self.environments.as_ref().ok_or(EngineError::NoSessions)?;
        envs.download(session, remote, local)
            .await
            .map_err(|e| EngineError::Backends(e.to_string()))
    }

    /// Whether session `id` is live: it has run something and was not closed since (as
    /// `paddock sessions list` shows it).
    pub fn session_is_live(&self, id: &str) -> Result<bool, EngineError> {
        Ok(self.sessions()?.list_live().iter().any(|s| s.id == id))
    }

    pub async fn list_sessions(&self) -> Result<Vec<SessionSummary>, EngineError> {
        let sessions = self.sessions()?;
        let expired = sessions.expired("");
        if !expired.is_empty() {
            let report = sessions.sweep(&expired).await;
            tracing::debug!(
                closed = report.closed.len(),
                "idle sessions swept before listing"
            );
        }
        // Listed as they are: a session due for its idle pause is paused first.
        sessions.pause_idle(&sessions.due_for_pause("")).await;
        let mut live = sessions.list_live();
        let totals = crate::network::Egress::totals(&crate::tools::environment::state_root()).await;
        for summary in &mut live {
            for line in totals.iter().filter(|t| t.session == summary.id) {
                let sum = summary.network.get_or_insert_with(Default::default);
                sum.requests += line.totals.requests;
                sum.refused += line.totals.refused;
                sum.bytes_up += line.totals.bytes_up;
                sum.bytes_down += line.totals.bytes_down;
            }
        }
        Ok(live)
    }

    /// Ends session `id` now: its notebook state, environments, background processes, state,
    /// record.
    pub async fn close_session(&self, id: &str) -> Result<CloseReport, EngineError> {
        if self.codemode.close_notebook(id) {
            tracing::debug!(session = %id, "notebook state closed");
        }
        Ok(self.sessions()?.close(id).await?)
    }

    /// Ends session `id`'s code-mode notebook (its kept names and its worker), if it has one:
    /// what closing a session that only ran scripts (no environment, so no session record)
    /// has to end. Whether there was one.
    pub fn close_notebook(&self, id: &str) -> bool {
        self.codemode.close_notebook(id)
    }

    /// Freezes session `id` on every backend it used (`paddock sessions pause`); its next
    /// call thaws it.
    pub async fn pause_session(&self, id: &str) -> Result<PauseReport, EngineError> {
        Ok(self.sessions()?.pause(id).await?)
    }

    /// The snapshots of this engine's home, under the policy's `[snapshots]` limits.
    fn snapshots(&self) -> Result<crate::snapshots::Snapshots<'_>, EngineError> {
        let limits = crate::snapshots::Limits::of(&self.policy.snapshots);
        Ok(crate::snapshots::Snapshots::new(self.sessions()?, limits))
    }

    /// Saves session `id` as snapshot `name` (default: made from the id); the session goes on
    /// unchanged (`paddock sessions snapshot`).
    pub async fn snapshot_session(
        &self,
        id: &str,
        name: Option<&str>,
    ) -> Result<crate::snapshots::SnapshotSummary, EngineError> {
        Ok(self.snapshots()?.snapshot(id, name).await?)
    }

    /// Starts each of `ids` (new sessions) from snapshot `name` (`paddock sessions start
    /// --from`).
    pub async fn start_from_snapshot(&self, name: &str, ids: &[String]) -> Result<(), EngineError> {
        for id in ids {
            crate::sessions::check_id(id)?;
        }
        Ok(self.snapshots()?.start_from(name, ids).await?)
    }

    /// Snapshots session `id` and starts `count` new sessions from it (`paddock sessions
    /// fork`); answers the snapshot and the new ids.
    pub async fn fork_session(
        &self,
        id: &str,
        count: usize,
    ) -> Result<(crate::snapshots::SnapshotSummary, Vec<String>), EngineError> {
        let snapshots = self.snapshots()?;
        let summary = snapshots.snapshot(id, None).await?;
        let ids = crate::snapshots::fork_ids(id, count);
        snapshots.start_from(&summary.name, &ids).await?;
        Ok((summary, ids))
    }

    /// `paddock snapshots list`: each snapshot, or why it cannot be read.
    pub fn list_snapshots(&self) -> Result<Vec<crate::snapshots::Listed>, EngineError> {
        Ok(self.snapshots()?.list())
    }

    /// `paddock snapshots rm NAME`.
    pub async fn remove_snapshot(&self, name: &str) -> Result<(), EngineError> {
        Ok(self.snapshots()?.remove(name).await?)
    }

    /// Thaws a paused session now (`paddock sessions resume`).
    pub async fn resume_session(&self, id: &str) -> Result<(), EngineError> {
        let sessions = self.sessions()?;
        if sessions.store().get(id).is_none() {
            return Err(crate::sessions::SessionError::Unknown(id.to_owned()).into());
        }
        Ok(sessions.resume(id).await?)
    }

    /// Makes `workspace` the workspace of `session` (default: this engine's): where its
    /// commands start and, in a workspace-write sandbox, where they may write. A backend whose
    /// policy names a `workspace` keeps it. Answers the backends that took it.
    pub async fn set_session_workspace(
        &self,
        session: Option<&str>,
        workspace: &std::path::Path,
    ) -> Result<Vec<String>, EngineError> {
        let session = session.unwrap_or(&self.session);
        Ok(self.sessions()?.set_workspace(session, workspace).await?)
    }

    /// Ends the notebook state of sessions idle longer than `[sessions] idle_timeout_seconds`
    /// (`paddock serve` does this every minute).
    pub fn close_idle_notebooks(&self) -> Vec<String> {
        self.codemode
            .close_idle_notebooks(self.policy.sessions.idle_timeout())
    }

    /// Notebook sessions holding a live sandbox child.
    pub fn live_notebooks(&self) -> usize {
        self.codemode.live_notebooks()
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    pub fn registry(&self) -> &Arc<Registry> {
        self.codemode.registry()
    }

    pub fn pool(&self) -> &SandboxPool {
        self.codemode.pool()
    }

    /// The policy's code-mode limits.
    pub fn limits(&self) -> Limits {
        let c = &self.policy.codemode;
        Limits {
            timeout: Duration::from_secs_f64(*c.timeout_seconds.get_ref()),
            max_tool_calls: *c.max_tool_calls.get_ref(),
            max_memory_mb: *c.max_memory_mb.get_ref(),
            max_output_chars: *c.max_output_chars.get_ref(),
        }
    }

    /// Runs one script as a top-level `run_tools_script` call.
    pub async fn run_script(&self, code: &str, limits: &Limits) -> Result<Value, EngineError> {
        self.run_script_in(code, limits, None, CallExtras::default())
            .await
    }

    async fn run_script_in(
        &self,
        code: &str,
        limits: &Limits,
        parent: Option<String>,
        extras: CallExtras,
    ) -> Result<Value, EngineError> {
        let ctx = CallContext {
            call_id: new_call_id(),
            session: extras.session.unwrap_or_else(|| self.session.clone()),
            parent_call_id: parent,
            deadline: None,
            approver: extras.approver,
            progress: extras.progress,
            output: None,
        };
        self.run_script_as(code, limits, ctx).await
    }

    /// Runs one script as the call `ctx` (its call id is the nested calls' `parent_call_id`,
    /// its approver theirs): the embedding protocol names the script's calls this way.
    pub async fn run_script_as(
        &self,
        code: &str,
        limits: &Limits,
        ctx: CallContext,
    ) -> Result<Value, EngineError> {
        if !self.policy.codemode.enabled {
            return Err(EngineError::CodemodeDisabled);
        }
        let started = Instant::now();
        let events = self.registry().events().clone();
        events.emit(&script_event(&ctx, Phase::Started, started, None));
        let result = if self.policy.codemode.keep_state {
            self.codemode.run_kept(code, limits, &ctx).await
        } else {
            self.codemode.run(code, limits, &ctx).await
        };
        let code = result
            .get("error_code")
            .and_then(Value::as_str)
            .map(str::to_owned);
        events.emit(&script_event(&ctx, Phase::Finished, started, code));
        Ok(result)
    }

    /// Calls any tool by name, `run_tools_script` included.
    pub async fn call_tool(&self, name: &str, args: Value) -> Result<Value, ToolError> {
        self.call_tool_with(name, args, CallExtras::default()).await
    }

    /// As [`Engine::call_tool`], with who approves and where progress goes for this call.
    ///
    /// This is the direct call of every caller (CLI, MCP, Rust API): a result longer than
    /// `[tools] max_result_chars` is spilled here (`tools::spill`), `run_tools_script`'s too,
    /// and only here; a script's nested calls go through the registry and get whole values.
    pub async fn call_tool_with(
        &self,
        name: &str,
        args: Value,
        extras: CallExtras,
    ) -> Result<Value, ToolError> {
        let session = extras
            .session
            .clone()
            .unwrap_or_else(|| self.session.clone());
        let result = self.call_direct(name, args, extras).await;
        if name == READ_OUTPUT {
            // Its pages are bounded below the limit already; spilling one would only loop.
            return result;
        }
        result.map(|value| self.spiller.spill(&session, name, value))
    }

    /// [`Engine::call_tool_with`], handing `on_text` the command's output as it is written
    /// (each stream decoded apart, a character never split), for a front end that prints or
    /// forwards it; every piece is handed over before the answer is returned.
    pub async fn call_tool_streaming(
        &self,
        name: &str,
        args: Value,
        mut extras: CallExtras,
        mut on_text: impl FnMut(paddock_backends::OutputStream, &str),
    ) -> Result<Value, ToolError> {
        let (chunks, mut received) = tokio::sync::mpsc::unbounded_channel();
        extras.output = Some(chunks);
        let mut decoders = paddock_backends::stream::StreamDecoders::default();
        let mut hand_over = |chunk: paddock_backends::OutputChunk| {
            let text = decoders.push(&chunk);
            if !text.is_empty() {
                on_text(chunk.stream, &text);
            }
        };
        let call = self.call_tool_with(name, args, extras);
        tokio::pin!(call);
        let answer = loop {
            tokio::select! {
                biased;
                Some(chunk) = received.recv() => hand_over(chunk),
                answer = &mut call => break answer,
            }
        };
        // What was sent before the answer is queued: nothing is lost at the end.
        while let Ok(chunk) = received.try_recv() {
            hand_over(chunk);
        }
        for (stream, rest) in decoders.finish() {
            on_text(stream, &rest);
        }
        answer
    }

    async fn call_direct(
        &self,
        name: &str,
        args: Value,
        extras: CallExtras,
    ) -> Result<Value, ToolError> {
        if name == RUN_TOOLS_SCRIPT {
            // The same checks as every other tool's call (unknown keys, size, types).
            crate::registry::check_arguments(name, &run_tools_script_schema(), &args)?;
            let Some(code) = args.get("code").and_then(Value::as_str) else {
                return Err(ToolError::invalid_arguments(
                    "invalid arguments for 'run_tools_script': field `code` (a string) is required",
                ));
            };
            let started = std::time::Instant::now();
            let session = extras
                .session
                .clone()
                .unwrap_or_else(|| self.session.clone());
            let result = self
                .run_script_in(code, &self.limits(), None, extras)
                .await
                .map_err(|e| {
                    ToolError::denied(crate::vocabulary::ErrorCode::ToolNotAllowed, e.to_string())
                });
            // A script that failed is a failed call, in the failure log like any other.
            let failed_code = match &result {
                Ok(value) if value.get("ok") == Some(&Value::Bool(false)) => value
                    .get("error_code")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                Ok(_) => None,
                Err(err) => Some(err.code.clone()),
            };
            if let (Some(error_code), Some(log)) = (failed_code, self.registry().failure_log()) {
                log.record(&crate::events::FailedCall {
                    timestamp_ms: crate::events::now_ms(),
                    session,
                    tool: RUN_TOOLS_SCRIPT.to_owned(),
                    error_code,
                    duration_ms: started.elapsed().as_secs_f64() * 1000.0,
                    call_id: String::new(),
                    parent_call_id: None,
                });
            }
            return result;
        }
        let ctx = CallContext {
            call_id: new_call_id(),
            session: extras.session.unwrap_or_else(|| self.session.clone()),
            parent_call_id: None,
            deadline: None,
            approver: extras.approver,
            progress: extras.progress,
            output: extras.output,
        };
        self.registry().dispatch(name, args, ctx).await
    }

    /// Every tool a caller may see, `run_tools_script` first when code mode is on.
    pub fn tool_specs(&self) -> Vec<ToolSpec> {
        let mut specs = Vec::new();
        let codemode_on = self.policy.codemode.enabled
            && self.registry().filter().is_visible(RUN_TOOLS_SCRIPT)
            && self
                .registry()
                .toolset_enabled("codemode", RUN_TOOLS_SCRIPT);
        if codemode_on {
            specs.push(self.run_tools_script_spec());
        }
        specs.extend(self.registry().visible_specs());
        specs
    }

    fn run_tools_script_spec(&self) -> ToolSpec {
        let scripts = self.registry().script_specs();
        let mut description = String::from(
            "Run a short Python script that calls tools and returns only what matters. \
             `await tools.<name>(key=value)` calls a tool (`<name>(...)` without await also \
             works); run independent calls concurrently with `asyncio.gather`. End on an expression (or \
             `return`) to return a value; `print` output is returned too. No files, network or \
             environment: use tools. Tool failures raise ValueError (bad arguments), \
             PermissionError (denied) or RuntimeError. ",
        );
        if self.policy.codemode.keep_state {
            description.push_str(
                "Scripts of this session share their names like notebook cells: variables, \
                 functions and imports defined by one script are there in the next (the result's \
                 `notebook` says when the state started afresh). ",
            );
        }
        description.push_str("Tools available to scripts:\n");
        description.push_str(&definitions::signature_list(
            &scripts,
            definitions::SIGNATURES_CAP_CHARS,
        ));
        ToolSpec::new(
            RUN_TOOLS_SCRIPT,
            "codemode",
            description,
            run_tools_script_schema(),
        )
        .with_label("🐍", "Running a script")
    }
}

/// `run_tools_script`'s arguments: the script, nothing else.
fn run_tools_script_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"code": {"type": "string", "description": "The Python script"}},
        "required": ["code"],
        "additionalProperties": false
    })
}
