//! Built-in tools.

mod backend_config;
mod datetime;
pub mod environment;
mod wait;

use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::registry::{Tool, ToolError};

/// Every built-in tool.
pub fn builtins() -> Vec<Arc<dyn Tool>> {
    vec![Arc::new(wait::Wait), Arc::new(datetime::CurrentDatetime)]
}

/// Deserialises a tool's arguments, naming the field that was wrong.
pub(crate) fn parse_args<T: DeserializeOwned>(tool: &str, args: Value) -> Result<T, ToolError> {
    serde_json::from_value(args)
        .map_err(|e| ToolError::invalid_arguments(format!("invalid arguments for '{tool}': {e}")))
}
