//! `current_datetime`: the time now, UTC, optionally strftime-formatted.

use chrono::format::{Item, StrftimeItems};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::registry::{CallContext, Tool, ToolError, ToolFuture, ToolSpec};

pub struct CurrentDatetime;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    format: Option<String>,
}

impl Tool for CurrentDatetime {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "current_datetime",
            "builtin",
            "The current date and time in UTC: ISO 8601 and Unix time, plus the \
                          time formatted with `format` (strftime) when given.",
            json!({
                "type": "object",
                "properties": {
                    "format": {
                        "type": "string",
                        "description": "strftime format, e.g. %Y-%m-%d %H:%M"
                    }
                },
                "additionalProperties": false
            }),
        )
        .with_label("🕒", "Reading the clock")
        .read_only()
    }

    fn call(&self, args: Value, _ctx: CallContext) -> ToolFuture {
        Box::pin(async move {
            let args: Args = super::parse_args("current_datetime", args)?;
            let now = chrono::Utc::now();
            let mut answer = json!({
                "iso": now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                "unix": now.timestamp_millis() as f64 / 1000.0,
                "timezone": "UTC",
            });
            if let Some(format) = args.format {
                let items: Vec<Item<'_>> = StrftimeItems::new(&format).collect();
                if items.iter().any(|i| matches!(i, Item::Error)) {
                    return Err(ToolError::invalid_arguments(format!(
                        "invalid arguments for 'current_datetime': format {format:?} is not a \
                         valid strftime format"
                    )));
                }
                answer["formatted"] = json!(now.format_with_items(items.into_iter()).to_string());
            }
            Ok(answer)
        })
    }
}
