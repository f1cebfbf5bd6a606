//! `notify_on_complete` for 2026-07-28 clients. That protocol has no channel outside a
//! client's own requests but one: a `subscriptions/listen` stream, which carries change
//! notifications of resources the client subscribed to. So a background process started
//! with `notify_on_complete` is a resource, `paddock://process/<session>/<process id>` (the
//! `terminal` result names it as `resource_uri`); a client that listens to it hears
//! `notifications/resources/updated` when the process ends, and `resources/read` gives the
//! process's state, exit code and output tail.
//!
//! (A legacy session is told with `notifications/message` instead; see the server.)

use std::time::Duration;

use serde_json::{Value, json};

use paddock_engine::engine::{CallExtras, Engine};

const SCHEME: &str = "paddock://process/";
/// How often a watched process is polled (the same as the legacy notice's).
const POLL: Duration = Duration::from_millis(300);

/// The resource of background process `id` of `session`.
pub fn uri_of(session: &str, id: &str) -> String {
    format!("{SCHEME}{session}/{id}")
}

/// The resource template a client can see in `resources/templates/list`.
pub const TEMPLATE: &str = "paddock://process/{session}/{process_id}";

/// The session and process a resource names, if it is one of ours.
pub fn parse(uri: &str) -> Option<(String, String)> {
    let rest = uri.strip_prefix(SCHEME)?;
    let (session, id) = rest.split_once('/')?;
    let valid = |s: &str| {
        !s.is_empty()
            && !s.starts_with('.')
            && s.len() <= 128
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    };
    (valid(session) && valid(id)).then(|| (session.to_owned(), id.to_owned()))
}

/// The process's state as `process poll` tells it (the session's own view: another
/// session's process is refused there).
pub async fn status(engine: &Engine, session: &str, id: &str) -> Result<Value, String> {
    let extras = CallExtras {
        session: Some(session.to_owned()),
        ..CallExtras::default()
    };
    engine
        .call_tool_with(
            "process",
            json!({"action": "poll", "session_id": id}),
            extras,
        )
        .await
        .map_err(|err| err.message)
}

/// Waits until the process is no longer running (or cannot be polled: it is gone).
pub async fn finished(engine: &Engine, session: &str, id: &str) {
    loop {
        match status(engine, session, id).await {
            Ok(state) if state.get("state").and_then(Value::as_str) == Some("running") => {}
            _ => return,
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_round_trip_and_junk_is_refused() {
        let uri = uri_of("mcp-0123", "proc_ab12");
        assert_eq!(uri, "paddock://process/mcp-0123/proc_ab12");
        assert_eq!(
            parse(&uri),
            Some(("mcp-0123".to_owned(), "proc_ab12".to_owned()))
        );
        assert_eq!(parse("paddock://process/../x"), None);
        assert_eq!(parse("paddock://process/s/"), None);
        assert_eq!(parse("paddock://process/s/a/b"), None);
        assert_eq!(parse("file:///etc/passwd"), None);
    }
}
