//! The command tools, `terminal` and `process`, each running on the backend the policy routes
//! it to, and what every environment tool shares ([`Environments`]: the backends, routes,
//! approvals and session activity). The Python tools are [`super::python`].

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use paddock_backends::processes::{ProcessRegistry, ProcessState, ProcessStatus};
use paddock_backends::{BackendError, BackgroundRequest, Environment, ExecRequest};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::policy::Policy;
use crate::registry::{CallContext, Tool, ToolError, ToolFuture, ToolSpec};
use crate::sessions::{ActivityGuard, Sessions};

/// Default and largest foreground timeout, seconds.
pub(super) const DEFAULT_TIMEOUT_S: f64 = 180.0;
pub(super) const MAX_TIMEOUT_S: f64 = 3600.0;
/// Output captured of a foreground command, characters: the spill ceiling. A direct call's
/// output longer than `[tools] max_result_chars` is spilled whole up to it (the engine does
/// that, `tools::spill`); a script's nested call gets all of it. Beyond it the capture keeps
/// the first and last half and the result says so (`output_cut`).
pub(super) const MAX_OUTPUT_CHARS: usize = super::spill::CAPTURE_CEILING_CHARS;

/// `output_cut` for a command that printed more than the capture ceiling, else nothing.
pub(super) fn output_cut(printed_chars: usize) -> Option<String> {
    (printed_chars > MAX_OUTPUT_CHARS).then(|| {
        format!(
            "the command printed {printed_chars} characters, more than the {MAX_OUTPUT_CHARS} \
             Paddock captures: `output` keeps the first and last {} and the middle is lost; \
             redirect the output to a file and read that in parts",
            MAX_OUTPUT_CHARS / 2
        )
    })
}

/// The configured backends and which tool runs where.
pub struct Environments {
    pub(super) state_root: PathBuf,
    backends: BTreeMap<String, Arc<dyn Environment>>,
    routes: BTreeMap<&'static str, String>,
    /// `--backend NAME`: overrides every route for this invocation.
    forced: Option<String>,
    registry: ProcessRegistry,
    approvals: Arc<crate::approval::ApprovalGate>,
    skip_approval_in_containers: bool,
    sessions: Arc<Sessions>,
    /// The egress proxy's link, when a backend is proxied.
    egress: Option<Arc<crate::network::Egress>>,
}

/// A call at work in a session: its activity (for the idle sweep) and, on a proxied policy,
/// the context the proxy's questions about unknown hosts are asked through.
pub(super) struct CallActivity {
    _session: ActivityGuard,
    _egress: Option<crate::network::TrackedCall>,
}

/// The state directory: `$PADDOCK_HOME`, else `$XDG_STATE_HOME/paddock`, else
/// `~/.local/state/paddock`.
pub fn state_root() -> PathBuf {
    if let Some(home) = std::env::var_os("PADDOCK_HOME") {
        return PathBuf::from(home);
    }
    if let Some(state) = std::env::var_os("XDG_STATE_HOME") {
        return PathBuf::from(state).join("paddock");
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
    home.join(".local/state/paddock")
}

impl Environments {
    /// Backends and routes of `policy`. `exe` is the `paddock` binary (background supervisors).
    pub fn from_policy(
        policy: &Policy,
        exe: PathBuf,
        forced: Option<String>,
        approvals: Arc<crate::approval::ApprovalGate>,
    ) -> Result<Self, String> {
        let state_root = state_root();
        // The declared backends, and `local` when none is named so: the workspace-write
        // sandbox of `policies/default.toml`, built the same way.
        let egress =
            crate::network::Egress::of_policy(policy, &state_root, &exe, approvals.clone());
        let mut backends = BTreeMap::new();
        for (name, config) in super::backend_config::backends_of(policy) {
            let env = super::backend_config::build(
                policy,
                &name,
                &config,
                &state_root,
                &exe,
                egress.as_ref(),
            );
            backends.insert(name, env);
        }
        if let Some(forced) = &forced
            && !backends.contains_key(forced)
        {
            let names: Vec<&str> = backends.keys().map(String::as_str).collect();
            return Err(format!(
                "--backend {forced}: no such backend (defined: {})",
                names.join(", ")
            ));
        }
        let route = |r: &Option<toml::Spanned<String>>| {
            r.as_ref()
                .map_or("local".to_owned(), |s| s.get_ref().clone())
        };
        let routes = BTreeMap::from([
            ("terminal", route(&policy.routes.terminal)),
            ("process", route(&policy.routes.process).to_owned()),
            ("python_execute", route(&policy.routes.python_execute)),
            (
                "files",
                policy
                    .routes
                    .files
                    .as_ref()
                    .map_or_else(|| route(&policy.routes.terminal), |s| s.get_ref().clone()),
            ),
        ]);
        let registry = ProcessRegistry::new(state_root.join("processes"));
        let days = *policy.processes.retention_days.get_ref();
        registry.prune(
            Duration::from_secs_f64(days * 86_400.0),
            *policy.processes.max_receipts.get_ref(),
        );
        let skip_approval_in_containers = policy.approval.skip_for_containers;
        let sessions = Arc::new(
            Sessions::new(
                state_root.clone(),
                backends.clone(),
                registry.clone(),
                policy.sessions.idle_timeout(),
            )
            .with_pause_after(policy.sessions.pause_after()),
        );
        Ok(Self {
            state_root,
            backends,
            routes,
            forced,
            registry,
            approvals,
            skip_approval_in_containers,
            sessions,
            egress,
        })
    }

    /// The session records and life cycle over these backends.
    /// The egress proxy's link, when the policy has a proxied backend or opens `[network]`.
    pub fn egress(&self) -> Option<&Arc<crate::network::Egress>> {
        self.egress.as_ref()
    }

    pub fn sessions(&self) -> &Arc<Sessions> {
        &self.sessions
    }

    /// Marks `session` active (on `env`, when a backend runs the call) until the guard drops.
    pub(super) fn activity(
        &self,
        session: &str,
        env: Option<&Arc<dyn Environment>>,
    ) -> ActivityGuard {
        self.sessions.activity(session, env.map(|e| e.name()))
    }

    /// As [`Environments::activity`], for a tool call; a paused session is thawed first
    /// (`paddock sessions pause`: the next call resumes it).
    pub(super) async fn call_activity(
        &self,
        ctx: &CallContext,
        env: Option<&Arc<dyn Environment>>,
    ) -> Result<CallActivity, ToolError> {
        self.resume_if_paused(&ctx.session).await?;
        Ok(CallActivity {
            _session: self.activity(&ctx.session, env),
            _egress: self.egress.as_ref().map(|egress| egress.track(ctx)),
        })
    }

    /// Thaws `session` when `paddock sessions pause` froze it.
    pub(super) async fn resume_if_paused(&self, session: &str) -> Result<(), ToolError> {
        let paused = self
            .sessions
            .store()
            .get(session)
            .is_some_and(|record| !record.paused.is_empty());
        if !paused {
            return Ok(());
        }
        self.sessions.resume(session).await.map_err(|err| {
            ToolError::failed(format!("the paused session could not be resumed: {err}"))
        })
    }

    /// The approval a file tool needs: that of `line`, the command that would do the same run
    /// in `cwd` (the session's directory, where known), unless the backend is a container the
    /// policy trusts (as for `terminal`).
    pub(super) async fn check_file_command(
        &self,
        env: &Arc<dyn Environment>,
        tool: &str,
        line: &str,
        cwd: Option<&str>,
        ctx: &crate::registry::CallContext,
    ) -> Result<(), ToolError> {
        if env.is_container() && self.skip_approval_in_containers {
            return Ok(());
        }
        self.approvals.check_command(tool, line, cwd, ctx).await
    }

    pub(super) fn backend_for(&self, tool: &str) -> Result<&Arc<dyn Environment>, ToolError> {
        let name = self.forced.clone().unwrap_or_else(|| {
            self.routes
                .get(tool)
                .cloned()
                .unwrap_or_else(|| "local".into())
        });
        self.backends
            .get(&name)
            .ok_or_else(|| ToolError::failed(format!("no backend named '{name}'")))
    }
}

pub(super) fn backend_error(err: BackendError) -> ToolError {
    match err {
        BackendError::InvalidCommand(_) | BackendError::Workdir { .. } => {
            ToolError::invalid_arguments(err.to_string())
        }
        BackendError::UnknownProcess(_) => ToolError::invalid_arguments(err.to_string()),
        BackendError::OtherSession { .. } => {
            ToolError::denied("process:other_session", err.to_string())
        }
        BackendError::Spawn(_)
        | BackendError::Io(_)
        | BackendError::Unavailable { .. }
        | BackendError::Process { .. }
        | BackendError::State { .. } => ToolError::failed(err.to_string()),
    }
}

pub(super) fn timeout_of(seconds: Option<f64>) -> Duration {
    let s = seconds
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(DEFAULT_TIMEOUT_S)
        .min(MAX_TIMEOUT_S);
    Duration::from_secs_f64(s)
}

/// The command tools over `envs` (terminal, process, python); the file tools are
/// [`super::environment_tools`]' other half.
pub(super) fn command_tools(envs: Arc<Environments>) -> Vec<Arc<dyn Tool>> {
    vec![Arc::new(Terminal(envs.clone())), Arc::new(Process(envs))]
}

struct Terminal(Arc<Environments>);

#[derive(Deserialize)]
struct TerminalArgs {
    command: String,
    #[serde(default)]
    background: bool,
    timeout: Option<f64>,
    workdir: Option<String>,
    #[serde(default)]
    pty: bool,
    #[serde(default)]
    notify_on_complete: bool,
    /// Text fed to a foreground command's stdin, which is then closed.
    stdin: Option<String>,
    /// Variables of this command only, over the session's exports.
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// Processes the command detaches (`setsid`, daemons) live until the session ends.
    #[serde(default)]
    keep_detached: bool,
}

/// `env` checked and made the request's: every name a shell variable's (not the engine's own
/// `PADDOCK_*`, not the wrapper's `__paddock*`), no NUL in a value; the names listed in
/// `PADDOCK_CALL_ENV` for the wrapper, which keeps them out of the session's state.
fn call_env(env: BTreeMap<String, String>) -> Result<BTreeMap<String, String>, ToolError> {
    let invalid = |why: String| {
        ToolError::invalid_arguments(format!("invalid arguments for 'terminal': {why}"))
    };
    for (name, value) in &env {
        let mut chars = name.chars();
        let shell_name = chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !shell_name {
            return Err(invalid(format!(
                "env: {name:?} is not a variable name (letters, digits and _, not starting with \
                 a digit)"
            )));
        }
        if name.starts_with("PADDOCK_") || name.starts_with("__paddock") {
            return Err(invalid(format!(
                "env: {name} is Paddock's own; choose another name"
            )));
        }
        if value.contains('\0') {
            return Err(invalid(format!(
                "env: the value of {name} contains a NUL byte"
            )));
        }
    }
    let mut env = env;
    if !env.is_empty() {
        let names: Vec<&str> = env.keys().map(String::as_str).collect();
        let listed = names.join(" ");
        env.insert(paddock_backends::shell::CALL_ENV.to_owned(), listed);
    }
    Ok(env)
}

impl Tool for Terminal {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new("terminal", "environment",
            "Run a shell command (bash). cwd, exported variables, functions and aliases persist \
             between commands of a session. stdout and stderr are merged; output too long to \
             show is spilled to a file (read it with read_output). `stdin` is text fed to the \
             command, then closed (otherwise its stdin is empty); `env` sets variables for \
             this command only. `background: true` starts \
             it detached and returns a session_id for the `process` tool; `pty: true` gives it \
             a terminal.",
            json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The command line"},
                    "background": {"type": "boolean", "default": false},
                    "timeout": {"type": "number", "description": "Seconds (foreground only)", "default": DEFAULT_TIMEOUT_S, "minimum": 0, "maximum": MAX_TIMEOUT_S},
                    "workdir": {"type": "string", "description": "Directory for this command only"},
                    "pty": {"type": "boolean", "default": false},
                    "notify_on_complete": {"type": "boolean", "default": false},
                    "stdin": {"type": "string", "description": "Text fed to the command's stdin, then closed (foreground only)"},
                    "env": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Variables for this command only, over the session's exports"},
                    "keep_detached": {"type": "boolean", "default": false, "description": "Processes the command detaches from itself (setsid, daemons) keep running until the session ends; otherwise they end with the command (foreground only)"}
                },
                "required": ["command"],
                "additionalProperties": false
            }))
        .with_label("💻", "Running a command")
    }

    fn call(&self, args: Value, ctx: CallContext) -> ToolFuture {
        let envs = self.0.clone();
        // Slow environment work (a Slurm job waiting in the queue) reports to the caller.
        let progress = ctx.progress.clone();
        Box::pin(paddock_backends::progress::scope(progress, async move {
            let args: TerminalArgs = super::parse_args("terminal", args)?;
            // Arguments first: nobody is asked about a call that would be refused anyway.
            if args.background && args.stdin.is_some() {
                return Err(ToolError::invalid_arguments(
                    "invalid arguments for 'terminal': `stdin` applies to a foreground command; \
                     feed a background one with the process tool (write, submit, close)",
                ));
            }
            if args.background && args.keep_detached {
                return Err(ToolError::invalid_arguments(
                    "invalid arguments for 'terminal': `keep_detached` applies to a foreground \
                     command; a background command's processes already run until it ends or \
                     the process tool kills it",
                ));
            }
            let call_env = call_env(args.env)?;
            let env = envs.backend_for("terminal")?;
            let _active = envs.call_activity(&ctx, Some(env)).await?;
            let container = env.is_container();
            if !(container && envs.skip_approval_in_containers) {
                envs.approvals
                    .check_command("terminal", &args.command, args.workdir.as_deref(), &ctx)
                    .await?;
                // A shell or an interpreter reads its stdin as commands (`bash` fed
                // `rm -rf /`): the text is judged as a command line too.
                if let Some(input) = &args.stdin {
                    envs.approvals
                        .check_command("terminal", input, args.workdir.as_deref(), &ctx)
                        .await?;
                }
            }
            if args.background {
                let record = env
                    .spawn_background(BackgroundRequest {
                        command: args.command,
                        session: ctx.session.clone(),
                        workdir: args.workdir.map(PathBuf::from),
                        env: call_env,
                        pty: args.pty,
                        notify_on_complete: args.notify_on_complete,
                    })
                    .await
                    .map_err(backend_error)?;
                return Ok(json!({
                    "session_id": record.id,
                    "pid": record.pid,
                    "status": "running",
                    "output": "",
                    "exit_code": null,
                    "error": null,
                    "hint": "use the process tool with this session_id: poll, log, wait, write, kill"
                }));
            }
            let out = env
                .exec(ExecRequest {
                    command: args.command,
                    session: ctx.session.clone(),
                    workdir: args.workdir.map(PathBuf::from),
                    env: call_env,
                    stdin: args.stdin.map(String::into_bytes),
                    timeout: timeout_of(args.timeout),
                    pty: args.pty,
                    max_output_chars: MAX_OUTPUT_CHARS,
                    chunks: ctx.output.clone(),
                    keep_detached: args.keep_detached,
                })
                .await
                .map_err(backend_error)?;
            let seconds = timeout_of(args.timeout).as_secs_f64();
            let error = match (&out.not_ended, out.timed_out) {
                (Some(why), _) => Some(format!(
                    "timed out after {seconds} s, and the command could not be ended on the \
                     backend ({why}): it may still be running there"
                )),
                (None, true) => Some(format!(
                    "timed out after {seconds} s; the command and everything it started were killed"
                )),
                (None, false) => None,
            };
            let mut answer = json!({"output": out.output, "exit_code": out.exit_code, "error": error, "duration_ms": out.duration_ms, "timed_out": out.timed_out});
            if let Some(cut) = output_cut(out.output_chars) {
                answer["output_cut"] = json!(cut);
            }
            Ok(answer)
        }))
    }
}

struct Process(Arc<Environments>);

#[derive(Deserialize)]
struct ProcessArgs {
    action: String,
    session_id: Option<String>,
    data: Option<String>,
    offset: Option<i64>,
    limit: Option<usize>,
    timeout: Option<f64>,
    /// `signal`: INT, TERM, KILL, HUP, USR1, ... (with or without `SIG`).
    name: Option<String>,
    /// `resize`: the terminal's new size.
    rows: Option<u16>,
    cols: Option<u16>,
    /// `output`: where each stream's next read starts (bytes; the answer's own offsets).
    stdout_offset: Option<u64>,
    stderr_offset: Option<u64>,
}

/// The most of one stream a `process output` answers at once.
const OUTPUT_PAGE_BYTES: usize = 1 << 20;

/// `process output`: each stream's new text from its offset, waiting up to `timeout` for some
/// (or the end). The answer's `stdout_offset`/`stderr_offset` are where the next read starts;
/// `more` says a stream holds more than one answer gave.
async fn process_output(
    registry: &paddock_backends::processes::ProcessRegistry,
    record: &paddock_backends::processes::ProcessRecord,
    args: &ProcessArgs,
) -> Result<Value, ToolError> {
    let offsets = (
        args.stdout_offset.unwrap_or(0),
        args.stderr_offset.unwrap_or(0),
    );
    let timeout = Duration::from_secs_f64(
        args.timeout
            .filter(|t| t.is_finite() && *t >= 0.0)
            .unwrap_or(0.0)
            .min(MAX_TIMEOUT_S),
    );
    let until = tokio::time::Instant::now() + timeout;
    loop {
        // The state first: output read after it saw the end is all there is.
        let status = registry.status_of(record);
        let read = |stream, offset| {
            registry
                .read_stream(record, stream, offset, OUTPUT_PAGE_BYTES)
                .map_err(backend_error)
        };
        let out = read("stdout", offsets.0)?;
        let err = read("stderr", offsets.1)?;
        let running = status.state == ProcessState::Running;
        if !out.text.is_empty()
            || !err.text.is_empty()
            || !running
            || tokio::time::Instant::now() >= until
        {
            if !running {
                registry.mark_seen(record);
            }
            let mut answer = status_json(&status);
            answer["stdout"] = json!(out.text);
            answer["stderr"] = json!(err.text);
            answer["stdout_offset"] = json!(out.next_offset);
            answer["stderr_offset"] = json!(err.next_offset);
            answer["more"] =
                json!(out.next_offset < out.total_bytes || err.next_offset < err.total_bytes);
            return Ok(answer);
        }
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
}

/// The signal a `process signal` names.
fn signal_named(name: Option<&str>) -> Result<nix::sys::signal::Signal, ToolError> {
    let name = name.ok_or_else(|| {
        ToolError::invalid_arguments(
            "process signal: field `name` is required (INT, TERM, KILL, HUP, USR1, ...)",
        )
    })?;
    let upper = name.trim().to_ascii_uppercase();
    let full = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    full.parse().map_err(|_| {
        ToolError::invalid_arguments(format!(
            "process signal: '{name}' is not a signal name (INT, TERM, KILL, HUP, QUIT, USR1, USR2, STOP, CONT, WINCH, ...)"
        ))
    })
}

fn status_json(status: &ProcessStatus) -> Value {
    json!({
        "session_id": status.record.id,
        "command": status.record.command,
        "pid": status.record.pid,
        "state": status.state,
        "exit_code": status.exit_code,
        "started_at_ms": status.record.started_at_ms,
        "log_bytes": status.log_bytes,
        "pty": status.record.pty,
        "unread_completion": status.unread_completion,
    })
}

impl Tool for Process {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new("process", "environment",
            "Manage background commands started with terminal(background=true): list, poll (state \
             and recent output), log (lines with offset/limit), output (stdout and stderr apart, \
             from `stdout_offset`/`stderr_offset`, waiting up to `timeout` s for new text), wait \
             (until done or timeout), \
             kill, write (to stdin), submit (write a line), close (end stdin), signal (`name`: \
             INT, TERM, KILL, HUP, USR1, ...), resize (`rows`, `cols` of a pty process). \
             Processes survive an engine restart; only the session that started one can see it.",
            json!({
                "type": "object",
                "properties": {
                    "action": {"enum": ["list", "poll", "log", "output", "wait", "kill", "write", "submit", "close", "signal", "resize"]},
                    "session_id": {"type": "string", "description": "The id terminal returned"},
                    "data": {"type": "string"},
                    "offset": {"type": "integer", "description": "First log line; negative counts from the end", "default": 0},
                    "limit": {"type": "integer", "minimum": 1, "default": 200},
                    "timeout": {"type": "number", "minimum": 0, "description": "Seconds, for wait (default 30) and output (default 0)"},
                    "stdout_offset": {"type": "integer", "minimum": 0, "description": "For output: the stdout byte offset to read from (the last answer's)", "default": 0},
                    "stderr_offset": {"type": "integer", "minimum": 0, "description": "For output: the stderr byte offset to read from (the last answer's)", "default": 0},
                    "name": {"type": "string", "description": "For signal: INT, TERM, KILL, HUP, USR1, ..."},
                    "rows": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "For resize (a pty process)"},
                    "cols": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "For resize (a pty process)"}
                },
                "required": ["action"],
                "additionalProperties": false
            }))
        .with_label("⚙️", "Managing a process")
    }

    fn call(&self, args: Value, ctx: CallContext) -> ToolFuture {
        let envs = self.0.clone();
        // Slow environment work (a Slurm job waiting in the queue) reports to the caller.
        let progress = ctx.progress.clone();
        Box::pin(paddock_backends::progress::scope(progress, async move {
            let args: ProcessArgs = super::parse_args("process", args)?;
            let registry = &envs.registry;
            let _active = envs.call_activity(&ctx, None).await?;
            if args.action == "list" {
                let list: Vec<Value> = registry
                    .list(&ctx.session)
                    .iter()
                    .map(status_json)
                    .collect();
                return Ok(json!({"processes": list}));
            }
            let id = args.session_id.as_deref().ok_or_else(|| {
                ToolError::invalid_arguments(format!(
                    "process {}: field `session_id` is required",
                    args.action
                ))
            })?;
            let record = registry.get(&ctx.session, id).map_err(backend_error)?;
            match args.action.as_str() {
                "poll" => {
                    let status = registry.status_of(&record);
                    if status.state != ProcessState::Running {
                        registry.mark_seen(&record);
                    }
                    let (tail, total) = registry.log(&record, -20, 20).map_err(backend_error)?;
                    let mut answer = status_json(&status);
                    answer["recent_output"] = json!(tail.join("\n"));
                    answer["log_lines"] = json!(total);
                    if let Some(receipt) = registry.receipt(&record) {
                        answer["duration_ms"] = json!(receipt.duration_ms);
                    }
                    Ok(answer)
                }
                "log" => {
                    let limit = args.limit.unwrap_or(200).clamp(1, 10_000);
                    let offset = args.offset.unwrap_or(0);
                    let (lines, total) = registry
                        .log(&record, offset, limit)
                        .map_err(backend_error)?;
                    Ok(
                        json!({"session_id": id, "lines": lines, "offset": offset, "total_lines": total}),
                    )
                }
                "output" => process_output(registry, &record, &args).await,
                "wait" => {
                    let timeout = Duration::from_secs_f64(
                        args.timeout
                            .filter(|t| t.is_finite() && *t >= 0.0)
                            .unwrap_or(30.0)
                            .min(MAX_TIMEOUT_S),
                    );
                    let status = registry.wait(&record, timeout).await;
                    if status.state != ProcessState::Running {
                        registry.mark_seen(&record);
                    }
                    let mut answer = status_json(&status);
                    answer["timed_out"] = json!(status.state == ProcessState::Running);
                    Ok(answer)
                }
                "kill" => {
                    let killed = registry.kill(&record).await.map_err(backend_error)?;
                    let status = registry.wait(&record, Duration::from_secs(2)).await;
                    let mut answer = status_json(&status);
                    answer["killed"] = json!(killed);
                    if !killed {
                        answer["note"] = json!(
                            "the process had already ended (or its PID now belongs to another process, which was not signalled)"
                        );
                    }
                    Ok(answer)
                }
                "write" | "submit" => {
                    let mut data = args.data.unwrap_or_default();
                    if args.action == "submit" {
                        data.push('\n');
                    }
                    // What a background shell or interpreter reads is a command line too, judged
                    // as `terminal`'s `stdin` is (the process runs where `terminal` does).
                    let env = envs.backend_for("terminal")?;
                    if !(env.is_container() && envs.skip_approval_in_containers) {
                        envs.approvals
                            .check_command("process", &data, None, &ctx)
                            .await?;
                    }
                    registry
                        .write(&record, data.as_bytes())
                        .map_err(backend_error)?;
                    Ok(json!({"session_id": id, "written": data.len()}))
                }
                "close" => {
                    registry.close_stdin(&record).map_err(backend_error)?;
                    Ok(json!({"session_id": id, "stdin": "closed"}))
                }
                "signal" => {
                    let signal = signal_named(args.name.as_deref())?;
                    let sent = registry
                        .signal(&record, signal)
                        .await
                        .map_err(backend_error)?;
                    let mut answer =
                        json!({"session_id": id, "signal": signal.as_str(), "sent": sent});
                    if !sent {
                        answer["note"] = json!("the process had already ended");
                    }
                    Ok(answer)
                }
                "resize" => {
                    let (Some(rows), Some(cols)) = (args.rows, args.cols) else {
                        return Err(ToolError::invalid_arguments(
                            "process resize: fields `rows` and `cols` are required",
                        ));
                    };
                    registry
                        .resize(&record, rows, cols)
                        .map_err(backend_error)?;
                    Ok(json!({"session_id": id, "rows": rows, "cols": cols}))
                }
                other => Err(ToolError::invalid_arguments(format!(
                    "unknown process action '{other}'"
                ))),
            }
        }))
    }
}
