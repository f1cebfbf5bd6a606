//! What every scenario measures with: [`Bench`] (the warm engine, generous limits, the peers),
//! the `noop` tool, [`bench_engine`] for the scenarios that need an engine of their own.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use paddock_engine::codemode::Limits;
use paddock_engine::engine::{Engine, EngineOptions};
use paddock_engine::policy::Policy;
use paddock_engine::registry::{CallContext, Registry, Tool, ToolFuture, ToolSpec};
use serde_json::{Value, json};

use crate::error::{BenchError, Result};
use crate::peers::Peers;

/// A tool that does nothing: measures the call path itself.
pub struct Noop;

impl Tool for Noop {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "noop",
            "bench",
            "Does nothing; returns an empty object.",
            json!({"type": "object", "properties": {}}),
        )
    }

    fn call(&self, _args: Value, _ctx: CallContext) -> ToolFuture {
        Box::pin(async { Ok(json!({})) })
    }
}

/// Everything a scenario measures with.
pub struct Bench {
    pub exe: PathBuf,
    /// The default engine (built-in policy, 4 pre-forked children, the `noop` tool), warm.
    pub engine: Arc<Engine>,
    /// Generous limits, so that no scenario measures a limit instead of the work.
    pub limits: Limits,
    pub peers: Peers,
    pub quick: bool,
    pub backends: Option<PathBuf>,
}

/// Pre-forked children of the bench's engine (the built-in policy has 2; 4 keeps a burst of
/// concurrent scripts off the fork path for longer, as a deployment under load would be set).
pub const PREFORK: usize = 4;

impl Bench {
    /// `quick` in a quick run, else `full`.
    pub fn pick<T>(&self, quick: T, full: T) -> T {
        if self.quick { quick } else { full }
    }

    /// Runs a script on the warm engine; its whole result when it succeeded.
    pub async fn script(&self, what: &str, code: &str) -> Result<Value> {
        let result = self.engine.run_script(code, &self.limits).await?;
        if result["ok"] != json!(true) {
            return Err(BenchError::unexpected(what, &result));
        }
        Ok(result)
    }

    /// Runs a script and takes its result as a number (the scripts that time themselves).
    pub async fn timed_script(&self, what: &str, code: &str) -> Result<f64> {
        let result = self.script(what, code).await?;
        result["result"]
            .as_f64()
            .ok_or_else(|| BenchError::unexpected(what, &result))
    }
}

/// Builds the bench's engine: the built-in policy with [`PREFORK`] children and `noop`.
pub fn bench_engine(exe: PathBuf, policy: Policy) -> Result<Engine> {
    let mut registry = Registry::with_builtins();
    registry.register(Arc::new(Noop))?;
    let options = EngineOptions {
        session: Some("bench".into()),
        backend: None,
        exe: Some(exe),
    };
    Ok(Engine::with_options(
        policy,
        registry,
        Arc::default(),
        options,
    )?)
}

/// Milliseconds of a duration.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
