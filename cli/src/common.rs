//! What every command shares: the policy it runs under, one JSON line on stdout, a usage
//! error on stderr, progress and logs on stderr.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use paddock_engine::policy::Policy;
use serde_json::Value;

/// Slow environment work outside an MCP call (a Slurm job waiting in the queue) says so in a
/// line on stderr.
pub(crate) fn progress_to_stderr() {
    paddock_backends::progress::set_default(Arc::new(|message: String| {
        let _ = writeln!(std::io::stderr(), "paddock: {message}");
    }));
}

pub(crate) fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

pub(crate) fn usage_error(message: &str) -> ExitCode {
    let _ = writeln!(std::io::stderr(), "paddock: {message}");
    ExitCode::from(2)
}

pub(crate) fn print_line(value: &Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{value}");
    let _ = out.flush();
}

pub(crate) fn load_policy(path: Option<&Path>) -> Result<Policy, String> {
    let from_env = std::env::var_os("PADDOCK_POLICY").map(PathBuf::from);
    match path.map(Path::to_path_buf).or(from_env) {
        Some(path) => Policy::load(&path).map_err(|e| e.to_string()),
        None => Ok(Policy::builtin()),
    }
}
