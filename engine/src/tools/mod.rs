//! Built-in tools.

mod backend_config;
mod datetime;
pub mod environment;
mod files;
pub mod http_request;
mod python;
pub mod read_output;
pub mod sessions_admin;
pub mod spill;
pub mod transfer;
mod wait;

use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::registry::{Registry, Tool, ToolError};

/// Every built-in tool.
pub fn builtins() -> Vec<Arc<dyn Tool>> {
    vec![Arc::new(wait::Wait), Arc::new(datetime::CurrentDatetime)]
}

impl Registry {
    /// A registry with the built-in tools (composed here, above the registry: the registry
    /// knows no tool).
    pub fn with_builtins() -> Self {
        Self::with_trusted(builtins())
    }
}

impl Default for Registry {
    fn default() -> Self {
        Self::with_builtins()
    }
}

/// Every tool that works in a session's environment: the command tools, the Python tools and
/// the file tools.
pub fn environment_tools(envs: Arc<environment::Environments>) -> Vec<Arc<dyn Tool>> {
    let mut tools = environment::command_tools(envs.clone());
    tools.extend([
        Arc::new(python::PythonExecute(envs.clone())) as Arc<dyn Tool>,
        Arc::new(python::PythonContexts(envs.clone())),
        Arc::new(python::PythonEnvironmentInfo(envs.clone())),
    ]);
    tools.extend(files::file_tools(envs));
    tools
}

/// Deserialises a tool's arguments, naming the field that was wrong.
pub(crate) fn parse_args<T: DeserializeOwned>(tool: &str, args: Value) -> Result<T, ToolError> {
    serde_json::from_value(args)
        .map_err(|e| ToolError::invalid_arguments(format!("invalid arguments for '{tool}': {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn duplicate_names_are_refused_unless_overridden() {
        let mut registry = Registry::with_builtins();
        let dup = builtins().remove(0);
        let err = registry.register(dup.clone()).unwrap_err();
        assert!(
            err.to_string()
                .contains("already registered by toolset 'builtin'"),
            "{err}"
        );
        registry.register_override(dup).unwrap();
    }

    #[test]
    fn every_builtin_has_a_toolset_and_an_object_schema() {
        for spec in Registry::with_builtins().visible_specs() {
            assert!(!spec.toolset.is_empty(), "{}", spec.name);
            assert_eq!(spec.input_schema["type"], json!("object"), "{}", spec.name);
            assert!(!spec.description.is_empty(), "{}", spec.name);
        }
    }
}
