//! `wait`: sleeps, clamped to a minute. Useful in scripts that poll, and as a no-op call.

use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Value, json};

use crate::registry::{CallContext, Tool, ToolFuture, ToolSpec};

/// The longest a single `wait` sleeps.
pub const MAX_WAIT_MS: u64 = 60_000;

pub struct Wait;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    #[serde(default)]
    milliseconds: f64,
}

impl Tool for Wait {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "wait",
            "builtin",
            format!(
                "Wait for the given number of milliseconds (clamped to 0..{MAX_WAIT_MS}) and \
                 return how long was waited."
            ),
            json!({
                "type": "object",
                "properties": {
                    "milliseconds": {
                        "type": "number",
                        "description": "How long to wait, in milliseconds",
                        "minimum": 0,
                        "maximum": MAX_WAIT_MS,
                        "default": 0
                    }
                },
                "additionalProperties": false
            }),
        )
        .with_label("⏳", "Waiting")
        .read_only()
    }

    fn call(&self, args: Value, _ctx: CallContext) -> ToolFuture {
        Box::pin(async move {
            let args: Args = super::parse_args("wait", args)?;
            let requested = if args.milliseconds.is_finite() {
                args.milliseconds
            } else {
                0.0
            };
            let clamped = requested.clamp(0.0, MAX_WAIT_MS as f64);
            let started = Instant::now();
            if clamped > 0.0 {
                tokio::time::sleep(Duration::from_secs_f64(clamped / 1000.0)).await;
            }
            Ok(json!({
                "waited_ms": started.elapsed().as_secs_f64() * 1000.0,
                "requested_ms": requested,
                "clamped": clamped != requested,
            }))
        })
    }
}
