//! The Python tools: `python_execute` (a fresh CPython process per call, its artifacts brought
//! back; or, with `context`, one of the session's long-lived interpreters),
//! `python_contexts` and `python_environment_info`, each on the backend the policy routes
//! `python_execute` to.
//!
//! A context is one long-lived CPython inside the session's environment, kept by the
//! environment's agent (`paddock_agent::contexts`), so that names persist between calls as in
//! a Jupyter kernel; this module only turns tool arguments into the agent's requests and its
//! answers into the tools' JSON. Contexts live in the session's own environment (they see its
//! files) and end with it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use paddock_agent::protocol::ContextRequest;
use paddock_backends::{ContextFailure, Environment, ExecRequest};
use serde::Deserialize;
use serde_json::{Value, json};

use super::environment::{
    DEFAULT_TIMEOUT_S, Environments, MAX_OUTPUT_CHARS, MAX_TIMEOUT_S, backend_error, output_cut,
    timeout_of,
};
use crate::registry::{CallContext, Tool, ToolError, ToolFuture, ToolSpec};

pub(super) struct PythonExecute(pub(super) Arc<Environments>);

#[derive(Deserialize)]
struct PythonArgs {
    code: String,
    timeout: Option<f64>,
    /// Run in this long-lived context instead of a fresh process ([`super::contexts`]).
    #[serde(default)]
    context: Option<String>,
}

/// Text artifacts up to this size come back inline.
const INLINE_ARTIFACT_BYTES: u64 = 4096;

impl Tool for PythonExecute {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new("python_execute", "environment",
            "Run Python 3 (CPython, with the packages installed on the backend) in a fresh \
             working directory. Files written into $PADDOCK_ARTIFACTS come back as artifacts \
             (path, size, sha256; small text files inline).",
            json!({
                "type": "object",
                "properties": {
                    "code": {"type": "string"},
                    "timeout": {"type": "number", "minimum": 0, "maximum": MAX_TIMEOUT_S, "default": DEFAULT_TIMEOUT_S},
                    "context": {"type": "string", "description": "Run in this long-lived context (made on first use): names persist between calls; the answer adds `results` (MIME bundles: display() and the last expression) and `exception`. A timeout interrupts the code, not the context."}
                },
                "required": ["code"],
                "additionalProperties": false
            }))
        .with_label("🐍", "Running Python")
    }

    fn call(&self, args: Value, ctx: CallContext) -> ToolFuture {
        let envs = self.0.clone();
        // Slow environment work (a Slurm job waiting in the queue) reports to the caller.
        let progress = ctx.progress.clone();
        Box::pin(paddock_backends::progress::scope(progress, async move {
            let args: PythonArgs = super::parse_args("python_execute", args)?;
            if let Some(context) = args.context {
                return execute_in_context(
                    &envs,
                    context,
                    args.code,
                    timeout_of(args.timeout),
                    &ctx,
                )
                .await;
            }
            // The session names directories (its runs, on this machine and in the
            // environment): an id that could leave them is refused before anything is written.
            paddock_backends::shell::check_session(&ctx.session).map_err(backend_error)?;
            let env = envs.backend_for("python_execute")?;
            let _active = envs.call_activity(&ctx, Some(env)).await?;
            // Inside the session's own python directory: closing the session removes it, the
            // run's artifacts included, and no other session's sandbox sees it.
            let run_id = crate::registry::new_call_id();
            python_on_backend(&envs, env.as_ref(), &args, &ctx, &run_id).await
        }))
    }
}

/// Artifacts up to this size are brought back from a remote backend (a local backend's stay
/// where they are, whatever their size).
const MAX_FETCHED_ARTIFACT_BYTES: u64 = 16 * 1024 * 1024;

/// python_execute on any backend, through the `Environment` trait only: the script goes in,
/// runs there, and its artifacts come back into this machine's state directory (on the local
/// backend that is where they already are).
async fn python_on_backend(
    envs: &Environments,
    env: &dyn Environment,
    args: &PythonArgs,
    ctx: &CallContext,
    run_id: &str,
) -> Result<Value, ToolError> {
    use base64::Engine as _;
    let session = crate::sessions::python_session(&ctx.session);
    let remote_dir = format!("{}/{run_id}", env.scratch_dir(&ctx.session));
    env.write_file(
        &session,
        &format!("{remote_dir}/main.py"),
        args.code.clone().into_bytes(),
    )
    .await
    .map_err(backend_error)?;
    let out = env
        .exec(ExecRequest {
            command:
                "mkdir -p artifacts && PADDOCK_ARTIFACTS=\"$PWD/artifacts\" python3 -u main.py"
                    .into(),
            session: session.clone(),
            workdir: Some(PathBuf::from(&remote_dir)),
            env: BTreeMap::new(),
            stdin: None,
            timeout: timeout_of(args.timeout),
            pty: false,
            max_output_chars: MAX_OUTPUT_CHARS,
            chunks: ctx.output.clone(),
            keep_detached: false,
        })
        .await
        .map_err(backend_error)?;
    let files = env
        .collect_files(
            &session,
            &format!("{remote_dir}/artifacts"),
            200,
            MAX_FETCHED_ARTIFACT_BYTES,
        )
        .await
        .map_err(backend_error)?;
    let local = paddock_backends::local::python_runs_dir(&envs.state_root, &ctx.session)
        .join(run_id)
        .join("artifacts");
    let mut artifacts = Vec::new();
    for file in files {
        let mut item = json!({
            "path": file.path,
            "size": file.size,
            "sha256": file.sha256,
            "backend_path": format!("{remote_dir}/artifacts/{}", file.path),
        });
        let bytes = file
            .content_base64
            .as_deref()
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok());
        let source = PathBuf::from(format!("{remote_dir}/artifacts/{}", file.path));
        if source == local.join(&file.path) {
            // The local backend: the file is already in this machine's state directory.
            item["location"] = json!(source.display().to_string());
            if file.size <= INLINE_ARTIFACT_BYTES
                && let Some(text) = bytes.and_then(|b| String::from_utf8(b).ok())
            {
                item["text"] = json!(text);
            }
            artifacts.push(item);
            continue;
        }
        match bytes {
            Some(bytes) => {
                let target = local.join(&file.path);
                if !target.starts_with(&local) || file.path.contains("..") {
                    continue;
                }
                if let Some(parent) = target.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| {
                        ToolError::failed(format!("cannot create {}: {e}", parent.display()))
                    })?;
                }
                std::fs::write(&target, &bytes).map_err(|e| {
                    ToolError::failed(format!("cannot write {}: {e}", target.display()))
                })?;
                item["location"] = json!(target.display().to_string());
                if file.size <= INLINE_ARTIFACT_BYTES
                    && let Ok(text) = String::from_utf8(bytes)
                {
                    item["text"] = json!(text);
                }
            }
            None => {
                item["note"] = json!(format!(
                    "larger than {MAX_FETCHED_ARTIFACT_BYTES} bytes: left on the backend"
                ));
            }
        }
        artifacts.push(item);
    }
    let seconds = timeout_of(args.timeout).as_secs_f64();
    let error = match (&out.not_ended, out.timed_out) {
        (Some(why), _) => Some(format!(
            "timed out after {seconds} s, and the program could not be ended on the backend \
             ({why}): it may still be running there"
        )),
        (None, true) => Some(format!("timed out after {seconds} s")),
        (None, false) => None,
    };
    let mut answer = json!({
        "output": out.output,
        "exit_code": out.exit_code,
        "error": error,
        "artifacts": artifacts,
        "workdir": remote_dir,
        "backend": env.name(),
        "duration_ms": out.duration_ms,
    });
    if let Some(cut) = output_cut(out.output_chars) {
        answer["output_cut"] = json!(cut);
    }
    Ok(answer)
}

pub(super) struct PythonEnvironmentInfo(pub(super) Arc<Environments>);

const INFO_SCRIPT: &str = r#"import json, sys, platform
try:
    from importlib import metadata
    pkgs = sorted({(d.metadata["Name"] or "?"): d.version for d in metadata.distributions()}.items())
except Exception:
    pkgs = []
print(json.dumps({"version": platform.python_version(), "implementation": platform.python_implementation(),
                  "executable": sys.executable, "packages": [{"name": n, "version": v} for n, v in pkgs]}))"#;

impl Tool for PythonEnvironmentInfo {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "python_environment_info",
            "environment",
            "The Python that python_execute uses: version, executable and installed packages.",
            json!({"type": "object", "properties": {}, "additionalProperties": false}),
        )
        .read_only()
    }

    fn call(&self, _args: Value, ctx: CallContext) -> ToolFuture {
        let envs = self.0.clone();
        Box::pin(async move {
            let env = envs.backend_for("python_execute")?;
            let _active = envs.call_activity(&ctx, Some(env)).await?;
            let quoted = INFO_SCRIPT.replace('\'', "'\"'\"'");
            let out = env
                .exec(ExecRequest {
                    command: format!("python3 -c '{quoted}'"),
                    session: crate::sessions::python_session(&ctx.session),
                    workdir: None,
                    env: BTreeMap::new(),
                    stdin: None,
                    timeout: Duration::from_secs(60),
                    pty: false,
                    max_output_chars: 1_000_000,
                    chunks: None,
                    keep_detached: false,
                })
                .await
                .map_err(backend_error)?;
            if out.exit_code != 0 {
                return Err(ToolError::failed(format!(
                    "python3 failed (exit {}): {}",
                    out.exit_code, out.output
                )));
            }
            let line = out.output.lines().last().unwrap_or("");
            serde_json::from_str(line).map_err(|e| {
                ToolError::failed(format!("unexpected answer from python3 ({e}): {line}"))
            })
        })
    }
}

/// The route contexts follow: python_execute's.
const ROUTE: &str = "python_execute";

/// `python_execute` with `context`: `code` runs in that context (made on first use); a
/// timeout interrupts the execution, not the context. The answer is the agent's (`context`,
/// `execution_count`, `results`, `stdout`, `stderr`, `exception`, `timed_out`, `duration_ms`)
/// with what every python_execute answer has: `output` (stdout then stderr), `exit_code`
/// (0; 1 when the code raised; 124 when it timed out) and `error`.
async fn execute_in_context(
    envs: &Environments,
    context: String,
    code: String,
    timeout: Duration,
    ctx: &CallContext,
) -> Result<Value, ToolError> {
    let env = envs.backend_for(ROUTE)?;
    let _active = envs.call_activity(ctx, Some(env)).await?;
    let request = ContextRequest::Execute {
        id: context,
        code,
        timeout_ms: Some(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX)),
        cwd: None,
        env: BTreeMap::new(),
    };
    let mut answer = env
        .python_context(&ctx.session, request, ctx.output.clone())
        .await
        .map_err(backend_error)?
        .map_err(context_error)?;
    let text = |key: &str| answer[key].as_str().unwrap_or_default().to_owned();
    let output = format!("{}{}", text("stdout"), text("stderr"));
    let timed_out = answer["timed_out"].as_bool().unwrap_or(false);
    let raised = !answer["exception"].is_null();
    let exit_code = match (timed_out, raised) {
        (true, _) => 124,
        (false, true) => 1,
        (false, false) => 0,
    };
    let error = timed_out.then(|| {
        format!(
            "timed out after {} s; the execution was interrupted and the context kept",
            timeout.as_secs_f64()
        )
    });
    answer["output"] = json!(output);
    answer["exit_code"] = json!(exit_code);
    answer["error"] = json!(error);
    Ok(answer)
}

/// A context error as the tool reports it: its own code; a bad id is a `ValueError`.
fn context_error(failure: ContextFailure) -> ToolError {
    if failure.code == "context:invalid_id" {
        return ToolError {
            code: failure.code,
            ..ToolError::invalid_arguments(failure.message)
        };
    }
    ToolError {
        code: failure.code,
        ..ToolError::failed(failure.message)
    }
}

/// `python_contexts`: create (with `cwd`, `env`), list, restart, remove.
pub(super) struct PythonContexts(pub(super) Arc<Environments>);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ContextsArgs {
    action: String,
    id: Option<String>,
    cwd: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
}

impl ContextsArgs {
    fn request(self) -> Result<ContextRequest, ToolError> {
        let id = |id: Option<String>| {
            id.ok_or_else(|| {
                ToolError::invalid_arguments(format!(
                    "python_contexts {}: field `id` is required",
                    self.action
                ))
            })
        };
        match self.action.as_str() {
            "create" => Ok(ContextRequest::Create {
                id: id(self.id.clone())?,
                cwd: self.cwd,
                env: self.env,
            }),
            "list" => Ok(ContextRequest::List),
            "restart" => Ok(ContextRequest::Restart {
                id: id(self.id.clone())?,
            }),
            "remove" => Ok(ContextRequest::Remove {
                id: id(self.id.clone())?,
            }),
            other => Err(ToolError::invalid_arguments(format!(
                "unknown python_contexts action '{other}': create, list, restart or remove"
            ))),
        }
    }
}

impl Tool for PythonContexts {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "python_contexts",
            "environment",
            "Manage the session's Python contexts (long-lived interpreters that python_execute \
             with `context` runs code in, names kept between calls): create (`id`, optional \
             `cwd` and `env`), list, restart (a fresh interpreter, names gone), remove. A \
             context is also made on first use of its id.",
            json!({
                "type": "object",
                "properties": {
                    "action": {"enum": ["create", "list", "restart", "remove"]},
                    "id": {"type": "string", "description": "The context's id (letters, digits, . _ -)"},
                    "cwd": {"type": "string", "description": "create: where the interpreter starts"},
                    "env": {"type": "object", "additionalProperties": {"type": "string"}, "description": "create: variables for the interpreter"}
                },
                "required": ["action"],
                "additionalProperties": false
            }),
        )
        .with_label("🐍", "Managing Python contexts")
    }

    fn call(&self, args: Value, ctx: CallContext) -> ToolFuture {
        let envs = self.0.clone();
        Box::pin(async move {
            let args: ContextsArgs = super::parse_args("python_contexts", args)?;
            let request = args.request()?;
            paddock_backends::shell::check_session(&ctx.session).map_err(backend_error)?;
            let env = envs.backend_for(ROUTE)?;
            let _active = envs.call_activity(&ctx, Some(env)).await?;
            env.python_context(&ctx.session, request, None)
                .await
                .map_err(backend_error)?
                .map_err(context_error)
        })
    }
}
