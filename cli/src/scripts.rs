//! `paddock run` (scripts through run_tools_script), `paddock call` (any tool) and
//! `paddock files` (transfers into and out of a session's environment).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use paddock_engine::codemode::{Limits, MAX_SCRIPT_BYTES};
use paddock_engine::engine::Engine;
use paddock_engine::events::EventSink;

use crate::args::{Common, FilesCommand};
use crate::common::{load_policy, print_line, progress_to_stderr, usage_error};

use crate::args::Overrides;

impl Overrides {
    fn apply(&self, mut limits: Limits) -> Result<Limits, String> {
        if let Some(t) = self.timeout {
            if !(t.is_finite() && t > 0.0 && t <= 3600.0) {
                return Err(format!(
                    "--timeout must be between 0 and 3600 seconds, got {t}"
                ));
            }
            limits.timeout = Duration::from_secs_f64(t);
        }
        if let Some(n) = self.max_tool_calls {
            limits.max_tool_calls = n;
        }
        if let Some(n) = self.max_memory_mb {
            if n == 0 || n > 16 * 1024 {
                return Err(format!(
                    "--max-memory-mb must be between 1 and 16384, got {n}"
                ));
            }
            limits.max_memory_mb = n;
        }
        if let Some(n) = self.max_output_chars {
            if n < 100 {
                return Err(format!("--max-output-chars must be at least 100, got {n}"));
            }
            limits.max_output_chars = n;
        }
        Ok(limits)
    }
}

/// Reads every script up front so bad input is reported before anything runs.
pub(crate) fn read_scripts(args: &[String]) -> Result<Vec<String>, String> {
    if args.iter().filter(|a| *a == "-").count() > 1 {
        return Err("`-` (stdin) can be given only once".into());
    }
    let mut scripts = Vec::with_capacity(args.len());
    for arg in args {
        let (name, bytes) = if arg == "-" {
            let mut buf = Vec::new();
            std::io::stdin()
                .take(MAX_SCRIPT_BYTES as u64 + 1)
                .read_to_end(&mut buf)
                .map_err(|e| format!("cannot read the script from stdin: {e}"))?;
            ("<stdin>".to_owned(), buf)
        } else {
            let path = Path::new(arg);
            let meta =
                std::fs::metadata(path).map_err(|e| format!("{arg}: cannot read script: {e}"))?;
            if meta.is_dir() {
                return Err(format!("{arg}: is a directory, not a script"));
            }
            if meta.len() > MAX_SCRIPT_BYTES as u64 {
                return Err(format!(
                    "{arg}: script is {} bytes; the limit is {MAX_SCRIPT_BYTES} bytes",
                    meta.len()
                ));
            }
            let bytes =
                std::fs::read(path).map_err(|e| format!("{arg}: cannot read script: {e}"))?;
            (arg.clone(), bytes)
        };
        if bytes.len() > MAX_SCRIPT_BYTES {
            return Err(format!(
                "{name}: script is over the {MAX_SCRIPT_BYTES} byte limit"
            ));
        }
        let text = String::from_utf8(bytes).map_err(|e| {
            format!(
                "{name}: script is not UTF-8 (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            )
        })?;
        if text.trim().is_empty() {
            return Err(format!("{name}: script is empty"));
        }
        scripts.push(text);
    }
    Ok(scripts)
}

pub(crate) async fn run_scripts(
    args: Vec<String>,
    common: Common,
    overrides: Overrides,
    events: Option<PathBuf>,
    keep_state: bool,
) -> ExitCode {
    progress_to_stderr();
    let mut policy = match load_policy(common.policy.as_deref()) {
        Ok(p) => p,
        Err(e) => return usage_error(&e),
    };
    policy.codemode.keep_state |= keep_state;
    if !policy.codemode.enabled {
        return usage_error("code mode is disabled by the policy ([codemode] enabled = false)");
    }
    let scripts = match read_scripts(&args) {
        Ok(s) => s,
        Err(e) => return usage_error(&e),
    };
    // A `paddock run` knows all the scripts it will run: children forked ahead for more would
    // only take the CPU from those (on 2 cores, a cold run of one script paid for two unused
    // confined children). Notebook cells run one after another in one kept child.
    let ahead = if policy.codemode.keep_state {
        0
    } else {
        scripts.len().saturating_sub(1)
    };
    let prefork = (*policy.codemode.prefork.get_ref()).min(ahead);
    *policy.codemode.prefork.get_mut() = prefork;
    let events = match events {
        Some(path) => match EventSink::to_file(&path) {
            Ok(sink) => Arc::new(sink),
            Err(e) => {
                return usage_error(&format!("{}: cannot open events file: {e}", path.display()));
            }
        },
        None => Arc::new(EventSink::default()),
    };
    let options = paddock_engine::engine::EngineOptions {
        session: common.session.clone(),
        backend: None,
        exe: None,
    };
    let registry = match paddock_mcp::registry_with_bridge(&policy).await {
        Ok((registry, _bridge)) => registry,
        Err(e) => return usage_error(&e),
    };
    let engine = match Engine::with_options(policy, registry, events, options) {
        Ok(e) => Arc::new(e),
        Err(e) => return usage_error(&e.to_string()),
    };
    engine.start_sweep();
    let limits = match overrides.apply(engine.limits()) {
        Ok(l) => l,
        Err(e) => return usage_error(&e),
    };
    let mut all_ok = true;
    let mut report = |result: &Value| {
        all_ok &= result.get("ok").and_then(Value::as_bool).unwrap_or(false);
        print_line(result);
    };
    if engine.policy().codemode.keep_state {
        // Cells run in the order given, each after the one before it, printed as they end.
        for code in scripts {
            match engine.run_script(&code, &limits).await {
                Ok(result) => report(&result),
                Err(e) => return usage_error(&e.to_string()),
            }
        }
    } else {
        let handles: Vec<_> = scripts
            .into_iter()
            .map(|code| {
                let engine = engine.clone();
                let limits = limits.clone();
                tokio::spawn(async move { engine.run_script(&code, &limits).await })
            })
            .collect();
        for handle in handles {
            let result = match handle.await {
                Ok(Ok(result)) => result,
                Ok(Err(e)) => return usage_error(&e.to_string()),
                Err(e) => {
                    json!({"ok": false, "error_code": "codemode:sandbox_failed", "error": format!("engine task failed: {e}"), "output": ""})
                }
            };
            report(&result);
        }
    }
    engine.settle().await;
    if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

pub(crate) async fn call(
    tool: String,
    args: String,
    common: Common,
    backend: Option<String>,
    stream: bool,
) -> ExitCode {
    progress_to_stderr();
    let policy = match load_policy(common.policy.as_deref()) {
        Ok(p) => p,
        Err(e) => return usage_error(&e),
    };
    let args: Value = match serde_json::from_str(&args) {
        Ok(v) => v,
        Err(e) => return usage_error(&format!("--args is not valid JSON: {e}")),
    };
    let options = paddock_engine::engine::EngineOptions {
        session: common.session.clone(),
        backend,
        exe: None,
    };
    let registry = match paddock_mcp::registry_with_bridge(&policy).await {
        Ok((registry, _bridge)) => registry,
        Err(e) => return usage_error(&e),
    };
    let engine = match Engine::with_options(policy, registry, Arc::default(), options) {
        Ok(e) => e,
        Err(e) => return usage_error(&e.to_string()),
    };
    engine.start_sweep();
    let answer = if stream {
        let print_chunk = |stream: paddock_backends::OutputStream, text: &str| {
            print_line(&serde_json::json!({"stream": stream.as_str(), "text": text}));
        };
        engine
            .call_tool_streaming(&tool, args, Default::default(), print_chunk)
            .await
    } else {
        engine.call_tool(&tool, args).await
    };
    let code = match answer {
        Ok(value) => {
            let failed = value.get("ok").and_then(Value::as_bool) == Some(false);
            print_line(&value);
            if failed {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(err) => {
            print_line(&err.to_json());
            ExitCode::from(1)
        }
    };
    // The answer is out already; only the exit waits for a sweep that had work to do.
    engine.settle().await;
    code
}

/// `paddock files put|get`: one JSON line saying what moved.
pub(crate) async fn files_transfer(command: FilesCommand) -> ExitCode {
    progress_to_stderr();
    let (common, backend) = match &command {
        FilesCommand::Put {
            common, backend, ..
        }
        | FilesCommand::Get {
            common, backend, ..
        } => (common, backend.clone()),
    };
    let policy = match load_policy(common.policy.as_deref()) {
        Ok(p) => p,
        Err(e) => return usage_error(&e),
    };
    let options = paddock_engine::engine::EngineOptions {
        session: common.session.clone(),
        backend,
        exe: None,
    };
    let registry = paddock_engine::registry::Registry::with_builtins();
    let engine = match Engine::with_options(policy, registry, Arc::default(), options) {
        Ok(e) => e,
        Err(e) => return usage_error(&e.to_string()),
    };
    let moved = match &command {
        FilesCommand::Put { local, remote, .. } => engine.upload(local, remote).await,
        FilesCommand::Get { remote, local, .. } => engine.download(remote, local).await,
    };
    match moved {
        Ok(value) => {
            print_line(&value);
            ExitCode::SUCCESS
        }
        Err(err) => {
            let _ = writeln!(std::io::stderr(), "paddock files: {err}");
            ExitCode::from(1)
        }
    }
}
