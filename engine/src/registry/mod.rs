//! The tool registry: every tool an agent or a script can call, and the one dispatch path they
//! all go through (policy filter, approval, argument shape, events, error wrapping).

pub mod arguments;
pub mod availability;
pub mod definitions;
pub mod schema_check;
pub mod typed;

pub use crate::toolsets;
pub use crate::vocabulary::{CallContext, ProgressSink, ToolError, ToolErrorKind};
pub use availability::Availability;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use serde_json::Value;

use crate::events::{EventSink, FailedCall, FailureLog, Phase, ToolCallEvent, now_ms};
use crate::policy::ToolFilter;
use crate::vocabulary::{ErrorCode, RUN_TOOLS_SCRIPT, ToolApprovals};

/// What the model (and `paddock tools`) sees of a tool, plus what the registry needs to know.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolSpec {
    pub name: String,
    /// The bundle the tool belongs to (`builtin`, `environment`, an MCP server, ...).
    pub toolset: String,
    /// What the model reads.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub input_schema: Value,
    /// Environment variables the tool needs (shown to operators, never their values).
    pub requires_env: Vec<String>,
    /// Short label and emoji for progress display.
    pub label: Option<String>,
    pub emoji: Option<String>,
    /// Hands work to another agent: never callable from a script.
    pub delegation: bool,
    /// What calling it may do to the world, for clients that decide what to confirm.
    pub hints: ToolHints,
}

/// A tool's effects as MCP's tool annotations describe them. A new tool is taken to be
/// destructive until its author says otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolHints {
    /// It changes nothing.
    pub read_only: bool,
    /// It may change or delete things (meaningful when not read-only).
    pub destructive: bool,
    /// It reaches systems outside Paddock (another MCP server).
    pub open_world: bool,
}

impl Default for ToolHints {
    fn default() -> Self {
        Self {
            read_only: false,
            destructive: true,
            open_world: false,
        }
    }
}

impl ToolSpec {
    pub fn new(
        name: impl Into<String>,
        toolset: impl Into<String>,
        description: impl Into<String>,
        input_schema: Value,
    ) -> Self {
        Self {
            name: name.into(),
            toolset: toolset.into(),
            description: description.into(),
            input_schema,
            ..Self::default()
        }
    }

    pub fn with_label(mut self, emoji: &str, label: &str) -> Self {
        self.emoji = Some(emoji.to_owned());
        self.label = Some(label.to_owned());
        self
    }

    /// A tool that changes nothing.
    pub fn read_only(mut self) -> Self {
        self.hints = ToolHints {
            read_only: true,
            destructive: false,
            open_world: false,
        };
        self
    }

    /// A tool of another system (a bridged MCP server): what it does is that server's.
    pub fn open_world(mut self) -> Self {
        self.hints = ToolHints {
            read_only: false,
            destructive: false,
            open_world: true,
        };
        self
    }

    pub fn with_env(mut self, names: &[&str]) -> Self {
        self.requires_env = names.iter().map(|s| (*s).to_owned()).collect();
        self
    }
}

/// The boxed future a tool call returns.
pub type ToolFuture = Pin<Box<dyn Future<Output = Result<Value, ToolError>> + Send>>;

/// A callable tool. Implementations validate their own arguments and return
/// [`ToolErrorKind::InvalidArguments`] naming the field that was wrong.
///
/// ```
/// use paddock_engine::{CallContext, Tool, ToolError, ToolSpec, registry::ToolFuture};
/// use serde_json::{json, Value};
///
/// struct Echo;
/// impl Tool for Echo {
///     fn spec(&self) -> ToolSpec {
///         ToolSpec::new("echo", "demo", "Returns its arguments", json!({"type": "object"}))
///     }
///     fn call(&self, args: Value, _ctx: CallContext) -> ToolFuture {
///         Box::pin(async move { Ok(args) })
///     }
/// }
/// let mut registry = paddock_engine::Registry::with_builtins();
/// registry.register(std::sync::Arc::new(Echo)).unwrap();
/// ```
pub trait Tool: Send + Sync + 'static {
    fn spec(&self) -> ToolSpec;
    fn call(&self, args: Value, ctx: CallContext) -> ToolFuture;

    /// A check run when definitions are built; `None`: always available.
    fn availability(&self) -> Option<Availability> {
        None
    }
}

/// Errors of registry configuration (not of calls).
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error(
        "tool '{name}' is already registered by toolset '{owner}'; register with override to replace it"
    )]
    Duplicate { name: String, owner: String },
    #[error("tool name '{0}' is invalid: use 1-64 characters from [A-Za-z0-9_.-]")]
    InvalidName(String),
    #[error("tool '{name}' has no toolset")]
    NoToolset { name: String },
    #[error("tool '{name}' has an invalid input schema: {problems}")]
    InvalidSchema { name: String, problems: String },
}

/// Runs before every call; an error refuses the call.
pub type PreCallHook =
    Arc<dyn Fn(&str, &Value, &CallContext) -> Result<(), ToolError> + Send + Sync>;
/// Runs after every call with its outcome and duration.
pub type PostCallHook =
    Arc<dyn Fn(&str, &Result<Value, ToolError>, std::time::Duration) + Send + Sync>;

/// The shape every call's arguments must have before its tool sees them: an object, at most
/// [`MAX_ARGUMENT_BYTES`] serialised, valid against the tool's input schema.
pub fn check_arguments(name: &str, schema: &Value, args: &Value) -> Result<(), ToolError> {
    if !args.is_object() {
        return Err(ToolError::invalid_arguments(format!(
            "arguments of '{name}' must be a JSON object, got {}",
            json_kind(args)
        )));
    }
    let size = arguments::serialized_len(args);
    if size > MAX_ARGUMENT_BYTES {
        return Err(ToolError::invalid_arguments(format!(
            "arguments of '{name}' are {size} bytes; the limit is {MAX_ARGUMENT_BYTES} bytes"
        )));
    }
    arguments::check(schema, args).map_err(|problem| {
        ToolError::invalid_arguments(format!("invalid arguments for '{name}': {problem}"))
    })
}

/// Largest arguments object accepted, serialised.
pub const MAX_ARGUMENT_BYTES: usize = 4 * 1024 * 1024;

struct Entry {
    tool: Arc<dyn Tool>,
    spec: ToolSpec,
    /// Added after the engine started ([`Registry::add`]) with every call asking first: the
    /// policy's filter, fixed at start, does not know it.
    requires_approval: bool,
}

/// The tools by name. Behind a lock because host tools can be added while the engine runs
/// (`engine.add_tools`); a lookup clones the entry's `Arc` and never holds the lock across a call.
type ToolTable = std::sync::RwLock<BTreeMap<String, Arc<Entry>>>;

/// All registered tools, the toolsets they form and the policy filter that decides what
/// callers may use.
pub struct Registry {
    tools: ToolTable,
    filter: ToolFilter,
    toolsets: toolsets::Toolsets,
    selection: toolsets::ToolsetSelection,
    availability: availability::AvailabilityCache,
    pre_hooks: Vec<PreCallHook>,
    post_hooks: Vec<PostCallHook>,
    events: Arc<EventSink>,
    approvals: Option<Arc<dyn ToolApprovals>>,
    failures: Option<Arc<FailureLog>>,
}

static NEXT_CALL: AtomicU64 = AtomicU64::new(1);

/// A fresh call id, unique within this process.
pub fn new_call_id() -> String {
    format!(
        "call_{}_{}",
        std::process::id(),
        NEXT_CALL.fetch_add(1, Ordering::Relaxed)
    )
}

impl Registry {
    /// An empty registry that allows everything.
    pub fn new() -> Self {
        let toolsets = toolsets::Toolsets::default();
        let selection = toolsets::ToolsetSelection::all(&toolsets);
        Self {
            tools: ToolTable::default(),
            filter: ToolFilter::allow_all(),
            toolsets,
            selection,
            availability: availability::AvailabilityCache::default(),
            pre_hooks: Vec::new(),
            post_hooks: Vec::new(),
            events: Arc::default(),
            approvals: None,
            failures: None,
        }
    }

    /// A registry of `tools`, which the crate itself wrote (names and schemas are checked by
    /// `tools`' tests, not at run time): the built-ins, composed by `tools`.
    pub(crate) fn with_trusted(tools: Vec<Arc<dyn Tool>>) -> Self {
        let mut registry = Self::new();
        for tool in tools {
            let spec = tool.spec();
            registry.tools_mut().insert(
                spec.name.clone(),
                Arc::new(Entry {
                    tool,
                    spec,
                    requires_approval: false,
                }),
            );
        }
        registry
    }

    pub fn set_filter(&mut self, filter: ToolFilter) {
        self.filter = filter;
    }

    /// Which toolsets are on (`[toolsets]` of the policy).
    pub fn select_toolsets(&mut self, enabled: &[String], disabled: &[String]) {
        self.selection = toolsets::ToolsetSelection::new(&self.toolsets, enabled, disabled);
    }

    /// Is `tool` of `toolset` switched on by the `[toolsets]` selection?
    pub fn toolset_enabled(&self, toolset: &str, tool: &str) -> bool {
        self.selection.includes(&self.toolsets, toolset, tool)
    }

    pub fn toolsets(&self) -> &toolsets::Toolsets {
        &self.toolsets
    }

    pub fn toolsets_mut(&mut self) -> &mut toolsets::Toolsets {
        &mut self.toolsets
    }

    pub fn set_events(&mut self, events: Arc<EventSink>) {
        self.events = events;
    }

    /// Where failed calls are logged (`$PADDOCK_HOME/logs/tool-failures.jsonl` in an engine).
    pub fn set_failure_log(&mut self, log: Arc<FailureLog>) {
        self.failures = Some(log);
    }

    pub fn failure_log(&self) -> Option<&Arc<FailureLog>> {
        self.failures.as_ref()
    }

    pub fn events(&self) -> &Arc<EventSink> {
        &self.events
    }

    pub fn filter(&self) -> &ToolFilter {
        &self.filter
    }

    /// Who asks a human for `[tools] require_approval` calls (none: such calls are denied).
    pub fn set_approvals(&mut self, gate: Arc<dyn ToolApprovals>) {
        self.approvals = Some(gate);
    }

    pub fn add_pre_call_hook(&mut self, hook: PreCallHook) {
        self.pre_hooks.push(hook);
    }

    pub fn add_post_call_hook(&mut self, hook: PostCallHook) {
        self.post_hooks.push(hook);
    }

    /// Forgets cached availability answers.
    pub fn invalidate_availability(&self) {
        self.availability.invalidate();
    }

    /// Registers a tool; a name that is already taken is refused.
    pub fn register(&mut self, tool: Arc<dyn Tool>) -> Result<(), RegistryError> {
        self.register_inner(tool, false)
    }

    /// Registers a tool, replacing one of the same name.
    pub fn register_override(&mut self, tool: Arc<dyn Tool>) -> Result<(), RegistryError> {
        self.register_inner(tool, true)
    }

    /// Registers a tool while the engine runs (a host tool added after start). Scripts
    /// started from now on can call it; `requires_approval` makes every call ask first.
    pub fn add(&self, tool: Arc<dyn Tool>, requires_approval: bool) -> Result<(), RegistryError> {
        let spec = Self::checked_spec(tool.as_ref())?;
        let mut tools = self.tools.write().unwrap_or_else(|e| e.into_inner());
        if let Some(existing) = tools.get(&spec.name) {
            return Err(RegistryError::Duplicate {
                name: spec.name,
                owner: existing.spec.toolset.clone(),
            });
        }
        tools.insert(
            spec.name.clone(),
            Arc::new(Entry {
                tool,
                spec,
                requires_approval,
            }),
        );
        Ok(())
    }

    fn register_inner(&mut self, tool: Arc<dyn Tool>, replace: bool) -> Result<(), RegistryError> {
        let spec = Self::checked_spec(tool.as_ref())?;
        let name = spec.name.clone();
        if !replace && let Some(existing) = self.tools_mut().get(&name) {
            return Err(RegistryError::Duplicate {
                name,
                owner: existing.spec.toolset.clone(),
            });
        }
        self.tools_mut().insert(
            name,
            Arc::new(Entry {
                tool,
                spec,
                requires_approval: false,
            }),
        );
        Ok(())
    }

    fn tools_mut(&mut self) -> &mut BTreeMap<String, Arc<Entry>> {
        self.tools.get_mut().unwrap_or_else(|e| e.into_inner())
    }

    fn entry(&self, name: &str) -> Option<Arc<Entry>> {
        let tools = self.tools.read().unwrap_or_else(|e| e.into_inner());
        tools.get(name).cloned()
    }

    fn entries(&self) -> Vec<Arc<Entry>> {
        let tools = self.tools.read().unwrap_or_else(|e| e.into_inner());
        tools.values().cloned().collect()
    }

    /// The tool's spec when its name and schema are acceptable to [`Registry::register`].
    pub fn checked_spec(tool: &dyn Tool) -> Result<ToolSpec, RegistryError> {
        let spec = tool.spec();
        let name = spec.name.clone();
        let valid = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
        if !valid {
            return Err(RegistryError::InvalidName(name));
        }
        if spec.toolset.trim().is_empty() {
            return Err(RegistryError::NoToolset { name });
        }
        let problems = schema_check::problems(&spec.input_schema);
        if !problems.is_empty() {
            return Err(RegistryError::InvalidSchema {
                name,
                problems: problems.join("; "),
            });
        }
        Ok(spec)
    }

    /// Every registered spec, available or not, by name.
    pub fn all_specs(&self) -> Vec<ToolSpec> {
        self.entries().iter().map(|e| e.spec.clone()).collect()
    }

    /// Why a tool cannot be used right now, or `None` when it can.
    pub fn unavailable_reason(&self, name: &str) -> Option<String> {
        let Some(entry) = self.entry(name) else {
            return Some(format!("there is no tool named '{name}'"));
        };
        if !self.filter.is_visible(name) {
            return Some(format!(
                "tool '{name}' is not allowed by the policy ([tools] allow/deny)"
            ));
        }
        if !self
            .selection
            .includes(&self.toolsets, &entry.spec.toolset, name)
        {
            return Some(format!(
                "tool '{name}' belongs to toolset '{}', which is not enabled ([toolsets])",
                entry.spec.toolset
            ));
        }
        let check = entry.tool.availability()?;
        self.availability
            .check(&check)
            .err()
            .map(|why| format!("tool '{name}' is unavailable: {why}"))
    }

    /// Specs of every tool a caller may use right now: allowed, in an enabled toolset and
    /// available. By name.
    pub fn visible_specs(&self) -> Vec<ToolSpec> {
        self.entries()
            .iter()
            .filter(|e| self.unavailable_reason(&e.spec.name).is_none())
            .map(|e| e.spec.clone())
            .collect()
    }

    /// Specs of the tools a script may call: visible, not excluded from code mode, not code mode
    /// itself, not delegation.
    pub fn script_specs(&self) -> Vec<ToolSpec> {
        self.visible_specs()
            .into_iter()
            .filter(|s| s.name != RUN_TOOLS_SCRIPT && !s.delegation)
            .filter(|s| !self.filter.is_excluded_from_scripts(&s.name))
            .collect()
    }

    /// What a script is given of [`Registry::script_specs`], in a stable order: each tool's
    /// Python identifier and name, and the parameter names positional calls bind to.
    pub fn script_tools(&self) -> ScriptTools {
        let mut tools = ScriptTools::default();
        for spec in self.script_specs() {
            let ident = python_identifier(&spec.name);
            let parameters = parameter_order(&spec.input_schema);
            if !parameters.is_empty() {
                tools.parameters.push((ident.clone(), parameters));
            }
            tools.names.push((ident, spec.name));
        }
        tools
    }

    /// Calls a tool through every check. Failures come back as [`ToolError`]s, never panics.
    pub async fn dispatch(
        &self,
        name: &str,
        args: Value,
        ctx: CallContext,
    ) -> Result<Value, ToolError> {
        let started = Instant::now();
        self.events.emit(&ToolCallEvent {
            call_id: ctx.call_id.clone(),
            parent_call_id: ctx.parent_call_id.clone(),
            tool: name.to_owned(),
            phase: Phase::Started,
            duration_ms: None,
            error_code: None,
            timestamp_ms: now_ms(),
        });
        let call_id = ctx.call_id.clone();
        let parent = ctx.parent_call_id.clone();
        let session = ctx.session.clone();
        let result = self.dispatch_checked(name, args, ctx).await;
        let elapsed = started.elapsed();
        for hook in &self.post_hooks {
            hook(name, &result, elapsed);
        }
        if let (Err(err), Some(log)) = (&result, &self.failures) {
            log.record(&FailedCall {
                timestamp_ms: now_ms(),
                session,
                tool: name.to_owned(),
                error_code: err.code.clone(),
                duration_ms: elapsed.as_secs_f64() * 1000.0,
                call_id: call_id.clone(),
                parent_call_id: parent.clone(),
            });
        }
        self.events.emit(&ToolCallEvent {
            call_id,
            parent_call_id: parent,
            tool: name.to_owned(),
            phase: Phase::Finished,
            duration_ms: Some(elapsed.as_secs_f64() * 1000.0),
            error_code: result.as_ref().err().map(|e| e.code.clone()),
            timestamp_ms: now_ms(),
        });
        result
    }

    async fn dispatch_checked(
        &self,
        name: &str,
        args: Value,
        ctx: CallContext,
    ) -> Result<Value, ToolError> {
        let Some(entry) = self.entry(name) else {
            return Err(ToolError::not_found(format!(
                "there is no tool named '{name}'"
            )));
        };
        if let Some(why) = self.unavailable_reason(name) {
            return Err(if self.filter.is_visible(name) {
                ToolError::not_found(why)
            } else {
                ToolError::denied(ErrorCode::ToolNotAllowed, why)
            });
        }
        check_arguments(name, &entry.spec.input_schema, &args)?;
        for hook in &self.pre_hooks {
            hook(name, &args, &ctx)?;
        }
        if entry.requires_approval || self.filter.requires_approval(name) {
            match &self.approvals {
                Some(gate) => gate.check_tool(name, &args, &ctx).await?,
                None => {
                    return Err(ToolError::denied(
                        ErrorCode::ApprovalDenied,
                        format!(
                            "tool '{name}' needs a human's approval ([tools] require_approval) \
                             and nobody is available to approve it"
                        ),
                    ));
                }
            }
        }
        // Second level of wrapping: a panicking tool becomes a failed call, not a dead engine.
        use futures_util::FutureExt;
        match std::panic::AssertUnwindSafe(entry.tool.call(args, ctx))
            .catch_unwind()
            .await
        {
            Ok(result) => result,
            Err(_) => Err(ToolError::failed(format!(
                "tool '{name}' failed unexpectedly (it panicked)"
            ))),
        }
    }
}

/// The tools a script may call, as [`crate::codemode`] hands them to the sandbox.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScriptTools {
    /// `(python identifier, tool name)`.
    pub names: Vec<(String, String)>,
    /// `(python identifier, parameter names)` of the tools whose schema has `properties`.
    pub parameters: Vec<(String, Vec<String>)>,
}

/// The names of a JSON schema's `properties`, in the order the schema lists them (serde_json
/// keeps it): the order a positional call (`lookup("paris", 3)`) binds arguments in, as the
/// CodeAct-style code models write assumes.
pub fn parameter_order(schema: &Value) -> Vec<String> {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|properties| properties.keys().cloned().collect())
        .unwrap_or_default()
}

/// Turns a tool name into the identifier a script uses: every character that is not valid in
/// an identifier becomes `_` (`my-tool.v2` -> `my_tool_v2`); a leading digit gets a `_` prefix.
pub fn python_identifier(name: &str) -> String {
    let mut ident: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if ident.chars().next().is_none_or(|c| c.is_ascii_digit()) {
        ident.insert(0, '_');
    }
    ident
}

/// "a string", "an array", ... for error messages.
pub fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn identifiers_are_sanitised() {
        assert_eq!(python_identifier("my-tool.v2"), "my_tool_v2");
        assert_eq!(python_identifier("2fa"), "_2fa");
        assert_eq!(python_identifier("ok_name"), "ok_name");
    }
    #[tokio::test]
    async fn non_object_arguments_are_rejected_with_the_kind_given() {
        let registry = Registry::with_builtins();
        let err = registry
            .dispatch("wait", json!([1]), CallContext::default())
            .await
            .unwrap_err();
        assert_eq!(err.kind, ToolErrorKind::InvalidArguments);
        assert!(err.message.contains("got an array"), "{}", err.message);
    }

    use crate::registry::typed::{TypedTool, typed};
    use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};

    /// A tool for tests: echoes its arguments, optionally unavailable or panicking.
    struct Probe {
        name: &'static str,
        toolset: &'static str,
        available: Result<(), String>,
        panics: bool,
        checks: Arc<AtomicUsize>,
    }

    impl Probe {
        fn new(name: &'static str) -> Self {
            Self {
                name,
                toolset: "demo",
                available: Ok(()),
                panics: false,
                checks: Arc::default(),
            }
        }
    }

    impl Tool for Probe {
        fn spec(&self) -> ToolSpec {
            ToolSpec::new(
                self.name,
                self.toolset,
                format!("Probe tool {}", self.name),
                json!({
                    "type": "object",
                    "properties": {"text": {"type": "string"}, "n": {"type": "integer", "minimum": 0}},
                    "additionalProperties": false
                }),
            )
        }
        fn call(&self, args: Value, _ctx: CallContext) -> ToolFuture {
            let panics = self.panics;
            Box::pin(async move {
                if panics {
                    panic!("probe panicked on purpose");
                }
                Ok(args)
            })
        }
        fn availability(&self) -> Option<Availability> {
            let answer = self.available.clone();
            let checks = self.checks.clone();
            Some(Availability::new(
                format!("probe-{}", self.toolset),
                move || {
                    checks.fetch_add(1, AtomicOrdering::SeqCst);
                    answer.clone()
                },
            ))
        }
    }

    #[tokio::test]
    async fn dispatch_validates_against_the_schema_and_names_the_field() {
        let mut registry = Registry::with_builtins();
        registry.register(Arc::new(Probe::new("probe"))).unwrap();
        let ok = registry
            .dispatch(
                "probe",
                json!({"text": "hi", "n": 2}),
                CallContext::default(),
            )
            .await;
        assert_eq!(ok.unwrap(), json!({"text": "hi", "n": 2}));
        let err = registry
            .dispatch("probe", json!({"n": -1}), CallContext::default())
            .await
            .unwrap_err();
        assert_eq!(err.kind, ToolErrorKind::InvalidArguments);
        assert!(
            err.message.contains("field `n`: must be at least 0"),
            "{}",
            err.message
        );
        let err = registry
            .dispatch("probe", json!({"colour": 1}), CallContext::default())
            .await
            .unwrap_err();
        assert!(
            err.message.contains("field `colour`: unknown argument"),
            "{}",
            err.message
        );
    }

    #[tokio::test]
    async fn a_ten_megabyte_argument_is_refused_and_the_next_call_works() {
        let mut registry = Registry::with_builtins();
        registry.register(Arc::new(Probe::new("probe"))).unwrap();
        let big = "x".repeat(10 * 1024 * 1024);
        let err = registry
            .dispatch("probe", json!({"text": big}), CallContext::default())
            .await
            .unwrap_err();
        assert!(
            err.message.contains("the limit is 4194304 bytes"),
            "{}",
            err.message
        );
        assert!(
            registry
                .dispatch("probe", json!({"text": "small"}), CallContext::default())
                .await
                .is_ok()
        );
    }

    #[tokio::test]
    async fn a_panicking_tool_is_a_failed_call_as_json() {
        let mut registry = Registry::with_builtins();
        let mut probe = Probe::new("boom");
        probe.panics = true;
        registry.register(Arc::new(probe)).unwrap();
        let err = registry
            .dispatch("boom", json!({}), CallContext::default())
            .await
            .unwrap_err();
        assert_eq!(err.code, "tool:failed");
        assert_eq!(err.to_json()["error_code"], json!("tool:failed"));
        assert!(
            err.to_json()["error"]
                .as_str()
                .unwrap()
                .contains("panicked")
        );
    }

    #[tokio::test]
    async fn unavailable_tools_are_hidden_everywhere_and_refused() {
        let mut registry = Registry::with_builtins();
        let mut down = Probe::new("docker_ps");
        down.toolset = "docker";
        down.available = Err("dockerd is not running".into());
        registry.register(Arc::new(down)).unwrap();
        registry.register(Arc::new(Probe::new("fine"))).unwrap();
        let visible: Vec<String> = registry
            .visible_specs()
            .into_iter()
            .map(|s| s.name)
            .collect();
        assert!(!visible.contains(&"docker_ps".to_owned()));
        assert!(visible.contains(&"fine".to_owned()));
        let all_text: String = registry
            .visible_specs()
            .iter()
            .map(|s| format!("{} {}", s.description, definitions::signature(s)))
            .collect();
        assert!(
            !all_text.contains("docker_ps"),
            "a description names an unavailable tool"
        );
        let err = registry
            .dispatch("docker_ps", json!({}), CallContext::default())
            .await
            .unwrap_err();
        assert!(
            err.message.contains("dockerd is not running"),
            "{}",
            err.message
        );
    }

    #[test]
    fn a_check_shared_by_several_tools_runs_once() {
        let mut registry = Registry::with_builtins();
        let checks = Arc::new(AtomicUsize::new(0));
        for name in ["a", "b", "c"] {
            let mut p = Probe::new(name);
            p.checks = checks.clone();
            registry.register(Arc::new(p)).unwrap();
        }
        let _ = registry.visible_specs();
        let _ = registry.script_specs();
        assert_eq!(checks.load(AtomicOrdering::SeqCst), 1);
    }

    #[test]
    fn invalid_schemas_and_missing_toolsets_are_refused_at_registration() {
        struct Bad(Value, &'static str);
        impl Tool for Bad {
            fn spec(&self) -> ToolSpec {
                ToolSpec::new("bad", self.1, "bad", self.0.clone())
            }
            fn call(&self, _: Value, _: CallContext) -> ToolFuture {
                Box::pin(async { Ok(Value::Null) })
            }
        }
        let mut registry = Registry::new();
        let err = registry
            .register(Arc::new(Bad(
                json!({"type": "object", "properties": {"x": {"type": "text"}}}),
                "t",
            )))
            .unwrap_err();
        assert!(err.to_string().contains("invalid input schema"), "{err}");
        let err = registry
            .register(Arc::new(Bad(json!({"type": "object"}), " ")))
            .unwrap_err();
        assert!(matches!(err, RegistryError::NoToolset { .. }));
    }

    #[tokio::test]
    async fn toolset_selection_hides_disabled_toolsets_and_accepts_old_names() {
        let mut registry = Registry::with_builtins();
        registry.select_toolsets(&["*".into()], &["basic".into()]);
        assert!(
            registry
                .visible_specs()
                .iter()
                .all(|s| s.toolset != "builtin")
        );
        let err = registry
            .dispatch("wait", json!({}), CallContext::default())
            .await
            .unwrap_err();
        assert!(
            err.message
                .contains("toolset 'builtin', which is not enabled"),
            "{}",
            err.message
        );
    }

    #[tokio::test]
    async fn hooks_run_around_calls_and_a_pre_hook_can_refuse() {
        let mut registry = Registry::with_builtins();
        let seen = Arc::new(AtomicUsize::new(0));
        let counter = seen.clone();
        registry.add_post_call_hook(Arc::new(move |_, _, _| {
            counter.fetch_add(1, AtomicOrdering::SeqCst);
        }));
        registry.add_pre_call_hook(Arc::new(|name, _, _| {
            if name == "current_datetime" {
                Err(ToolError::denied("hook:refused", "not today"))
            } else {
                Ok(())
            }
        }));
        assert!(
            registry
                .dispatch("wait", json!({}), CallContext::default())
                .await
                .is_ok()
        );
        let err = registry
            .dispatch("current_datetime", json!({}), CallContext::default())
            .await
            .unwrap_err();
        assert_eq!(err.code, "hook:refused");
        assert_eq!(seen.load(AtomicOrdering::SeqCst), 2);
    }

    #[tokio::test]
    async fn typed_tools_get_typed_arguments() {
        #[derive(serde::Deserialize)]
        struct Args {
            n: u32,
        }
        struct Double;
        impl TypedTool for Double {
            type Args = Args;
            fn spec(&self) -> ToolSpec {
                ToolSpec::new(
                    "double",
                    "demo",
                    "Doubles n",
                    json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}),
                )
            }
            async fn run(&self, args: Args, _ctx: CallContext) -> Result<Value, ToolError> {
                Ok(json!(args.n * 2))
            }
        }
        let mut registry = Registry::new();
        registry.register(typed(Double)).unwrap();
        assert_eq!(
            registry
                .dispatch("double", json!({"n": 21}), CallContext::default())
                .await
                .unwrap(),
            json!(42)
        );
        let err = registry
            .dispatch("double", json!({}), CallContext::default())
            .await
            .unwrap_err();
        assert!(
            err.message.contains("field `n`: is required"),
            "{}",
            err.message
        );
    }

    #[tokio::test]
    async fn concurrent_calls_overlap() {
        let registry = Arc::new(Registry::with_builtins());
        let started = std::time::Instant::now();
        let calls: Vec<_> = (0..20)
            .map(|_| {
                let r = registry.clone();
                tokio::spawn(async move {
                    r.dispatch("wait", json!({"milliseconds": 200}), CallContext::default())
                        .await
                })
            })
            .collect();
        for c in calls {
            c.await.unwrap().unwrap();
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn unknown_tools_are_not_found() {
        let registry = Registry::with_builtins();
        let err = registry
            .dispatch("nope", json!({}), CallContext::default())
            .await
            .unwrap_err();
        assert_eq!(err.kind, ToolErrorKind::NotFound);
    }
}
