//! The typed twin of [`Tool`]: arguments arrive as a Rust type, deserialised after the schema
//! check, so a handler never sees malformed input.

use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{Availability, CallContext, Tool, ToolError, ToolFuture, ToolSpec};

/// A tool whose arguments are a typed struct.
///
/// ```
/// use paddock_engine::registry::{typed::{TypedTool, typed}, CallContext, ToolError, ToolSpec};
/// use serde_json::{json, Value};
///
/// #[derive(serde::Deserialize)]
/// struct Args { city: String }
///
/// struct Weather;
/// impl TypedTool for Weather {
///     type Args = Args;
///     fn spec(&self) -> ToolSpec {
///         ToolSpec::new("weather", "demo", "Today's weather in a city",
///             json!({"type": "object", "properties": {"city": {"type": "string"}},
///                    "required": ["city"]}))
///     }
///     async fn run(&self, args: Args, _ctx: CallContext) -> Result<Value, ToolError> {
///         Ok(json!({"city": args.city, "sky": "clear"}))
///     }
/// }
///
/// let mut registry = paddock_engine::Registry::with_builtins();
/// registry.register(typed(Weather)).unwrap();
/// ```
pub trait TypedTool: Send + Sync + 'static {
    type Args: DeserializeOwned + Send + 'static;

    fn spec(&self) -> ToolSpec;

    fn run(
        &self,
        args: Self::Args,
        ctx: CallContext,
    ) -> impl std::future::Future<Output = Result<Value, ToolError>> + Send;

    /// See [`Tool::availability`].
    fn availability(&self) -> Option<Availability> {
        None
    }
}

/// Wraps a [`TypedTool`] as a registry [`Tool`].
pub fn typed<T: TypedTool>(tool: T) -> Arc<dyn Tool> {
    Arc::new(Typed(Arc::new(tool)))
}

struct Typed<T>(Arc<T>);

impl<T: TypedTool> Tool for Typed<T> {
    fn spec(&self) -> ToolSpec {
        self.0.spec()
    }

    fn availability(&self) -> Option<Availability> {
        self.0.availability()
    }

    fn call(&self, args: Value, ctx: CallContext) -> ToolFuture {
        let tool = self.0.clone();
        Box::pin(async move {
            let name = tool.spec().name;
            let args: T::Args = serde_json::from_value(args).map_err(|e| {
                ToolError::invalid_arguments(format!("invalid arguments for '{name}': {e}"))
            })?;
            tool.run(args, ctx).await
        })
    }
}
