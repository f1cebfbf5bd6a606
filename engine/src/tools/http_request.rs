//! `http_request` (toolset `web`): one HTTP(S) request made by the engine through the egress
//! proxy, under the same `[network]` policy, pins, credentials and questions as a proxied
//! environment's commands. HTML comes back as compact text (headings, links with their URLs,
//! lists, tables, forms), JSON and text as they are; other types are refused naming the type;
//! a cut body says so; a long result spills like any other.

use std::sync::Arc;
use std::time::Duration;

use paddock_network::client::{Fetch, FetchError};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::network::Egress;
use crate::registry::{CallContext, Tool, ToolFuture, ToolSpec};
use crate::vocabulary::{ErrorCode, ToolError};

/// The body kept by default, and at most.
const DEFAULT_MAX_BYTES: usize = 200_000;
const MAX_MAX_BYTES: usize = 10 * 1024 * 1024;
const TIMEOUT: Duration = Duration::from_secs(60);

pub struct HttpRequest {
    envs: Arc<super::environment::Environments>,
    egress: Arc<Egress>,
}

impl HttpRequest {
    pub fn new(envs: Arc<super::environment::Environments>, egress: Arc<Egress>) -> Self {
        Self { envs, egress }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    url: String,
    #[serde(default = "get")]
    method: String,
    #[serde(default)]
    headers: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    max_bytes: Option<usize>,
    /// `text` (default: HTML rendered as text) or `raw`.
    #[serde(default)]
    render: Option<String>,
}

fn get() -> String {
    "GET".into()
}

/// What a body of `content_type` is: rendered HTML, text as it is, or refused.
enum Kind {
    Html,
    Text,
}

fn kind_of(content_type: Option<&str>) -> Result<Kind, String> {
    let Some(full) = content_type else {
        return Ok(Kind::Text);
    };
    let mime = full
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if mime == "text/html" || mime == "application/xhtml+xml" {
        return Ok(Kind::Html);
    }
    let textual = mime.starts_with("text/")
        || mime.ends_with("+json")
        || mime.ends_with("+xml")
        || matches!(
            mime.as_str(),
            "application/json"
                | "application/xml"
                | "application/javascript"
                | "application/x-ndjson"
                | "application/yaml"
                | "application/toml"
                | "application/x-www-form-urlencoded"
        );
    if textual { Ok(Kind::Text) } else { Err(mime) }
}

impl Tool for HttpRequest {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "http_request",
            "web",
            "Make one HTTP or HTTPS request under the policy's [network] rules (hosts it does \
             not allow are refused, naming the rule). HTML comes back as compact text \
             (headings, links with URLs, lists, tables, forms); JSON and text as they are; \
             other content types are refused. The body is cut at max_bytes, which the result \
             says.",
            json!({
                "type": "object",
                "properties": {
                    "url": {"type": "string", "description": "http:// or https:// URL"},
                    "method": {"type": "string", "default": "GET"},
                    "headers": {
                        "type": "object",
                        "additionalProperties": {"type": "string"},
                        "description": "Request headers"
                    },
                    "body": {"type": "string", "description": "Request body (text)"},
                    "max_bytes": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": MAX_MAX_BYTES,
                        "default": DEFAULT_MAX_BYTES,
                        "description": "Bytes of the response body kept"
                    },
                    "render": {
                        "type": "string",
                        "enum": ["text", "raw"],
                        "default": "text",
                        "description": "text: HTML rendered as compact text; raw: as sent"
                    }
                },
                "required": ["url"],
                "additionalProperties": false
            }),
        )
        .with_label("🌐", "Fetching a URL")
    }

    fn call(&self, args: Value, ctx: CallContext) -> ToolFuture {
        let egress = self.egress.clone();
        let envs = self.envs.clone();
        Box::pin(async move {
            let args: Args = super::parse_args("http_request", args)?;
            let raw = match args.render.as_deref() {
                None | Some("text") => false,
                Some("raw") => true,
                Some(other) => {
                    return Err(ToolError::invalid_arguments(format!(
                        "render {other:?} is not one of text, raw"
                    )));
                }
            };
            let max_bytes = args.max_bytes.unwrap_or(DEFAULT_MAX_BYTES);
            if max_bytes == 0 || max_bytes > MAX_MAX_BYTES {
                return Err(ToolError::invalid_arguments(format!(
                    "max_bytes must be between 1 and {MAX_MAX_BYTES}"
                )));
            }
            // The session is at work (its record, the idle sweep), and the proxy's questions
            // about an unknown host are asked through this call.
            let _active = envs.call_activity(&ctx, None).await?;
            let socket = egress
                .web_socket(&ctx.session)
                .await
                .map_err(|e| ToolError::failed(e.to_string()))?;
            let fetched = paddock_network::client::fetch(
                &socket,
                Fetch {
                    url: args.url.clone(),
                    method: args.method,
                    headers: args.headers.into_iter().collect(),
                    body: args.body.map(String::into_bytes),
                    max_bytes,
                    timeout: TIMEOUT,
                },
            )
            .await
            .map_err(|err| match err {
                FetchError::BadRequest(why) => ToolError::invalid_arguments(why),
                FetchError::Refused(why) => ToolError::denied(ErrorCode::ApprovalDenied, why),
                other => ToolError::failed(format!("{}: {other}", args.url)),
            })?;
            let kind = kind_of(fetched.content_type.as_deref()).map_err(|mime| {
                ToolError::failed(format!(
                    "{} answered {} of type {mime}, which http_request does not return (it \
                     returns HTML, JSON and text); fetch it with a command in the environment",
                    args.url, fetched.status
                ))
            })?;
            let text = String::from_utf8_lossy(&fetched.body).into_owned();
            let mut content = match kind {
                Kind::Html if !raw => paddock_network::render::html_to_text(&text, &args.url),
                _ => text,
            };
            if fetched.truncated {
                let of = fetched
                    .declared_bytes
                    .map_or_else(String::new, |n| format!(" of {n}"));
                content.push_str(&format!(
                    "\n[truncated: the first {max_bytes} bytes{of}; raise max_bytes for more]"
                ));
            }
            Ok(json!({
                "url": args.url,
                "status": fetched.status,
                "content_type": fetched.content_type,
                "truncated": fetched.truncated,
                "content": content,
            }))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types_are_rendered_kept_or_refused_by_name() {
        assert!(matches!(
            kind_of(Some("text/html; charset=utf-8")),
            Ok(Kind::Html)
        ));
        for kept in [
            "application/json",
            "application/problem+json",
            "text/plain",
            "text/csv",
            "application/xml",
        ] {
            assert!(matches!(kind_of(Some(kept)), Ok(Kind::Text)), "{kept}");
        }
        assert_eq!(
            kind_of(Some("image/png")).err().as_deref(),
            Some("image/png")
        );
        assert_eq!(
            kind_of(Some("application/octet-stream")).err().as_deref(),
            Some("application/octet-stream")
        );
    }
}
