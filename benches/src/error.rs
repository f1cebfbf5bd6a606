//! The harness's one error type, [`BenchError`]: why a bench could not run, or why one Paddock
//! measurement failed. Imports nothing of this crate.

use paddock_engine::codemode::pool::PoolError;
use paddock_engine::engine::EngineError;
use paddock_engine::policy::PolicyError;
use paddock_engine::registry::{RegistryError, ToolError};
use serde_json::Value;

/// Why a bench could not run, or why one Paddock measurement failed (peers' failures are not
/// errors: they are reported beside the figures).
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error("registering the bench's noop tool: {0}")]
    Registry(#[from] RegistryError),
    #[error("sandbox pool: {0}")]
    Pool(#[from] PoolError),
    #[error("{what}: {source}")]
    Tool {
        what: String,
        #[source]
        source: ToolError,
    },
    /// A script or tool answered, but not what the measurement expects.
    #[error("{what}: unexpected result {result}")]
    Unexpected { what: String, result: String },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{what}: no answer within {seconds} s")]
    Timeout { what: String, seconds: u64 },
    #[error("unknown scenario {name:?}; the scenarios are: {known}")]
    UnknownScenario { name: String, known: String },
    #[error("mcp: {0}")]
    Mcp(String),
}

pub type Result<T> = std::result::Result<T, BenchError>;

impl BenchError {
    pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let what = what.into();
        move |source| Self::Io { what, source }
    }

    pub fn tool(what: impl Into<String>) -> impl FnOnce(ToolError) -> Self {
        let what = what.into();
        move |source| Self::Tool { what, source }
    }

    pub fn unexpected(what: impl Into<String>, result: &Value) -> Self {
        let mut result = result.to_string();
        if result.len() > 500 {
            let cut = (0..=500)
                .rev()
                .find(|i| result.is_char_boundary(*i))
                .unwrap_or(0);
            result.truncate(cut);
            result.push('…');
        }
        Self::Unexpected {
            what: what.into(),
            result,
        }
    }
}
