//! The client's workspace: the first `file://` root an MCP client announces becomes its
//! session's workspace (where `terminal` starts, where a workspace-write sandbox lets commands
//! write), unless the policy names a `workspace`.
//!
//! A session's roots are learnt on its first tool call, before the call runs, and again after
//! the client says they changed:
//! - a legacy client (2025-11-25 and older) that declared `roots` is asked with `roots/list`
//!   during the call; `notifications/roots/list_changed` marks the answer stale;
//! - a 2026-07-28 client has no server→client requests and no change notification: the first
//!   call answers `input_required` with a `roots/list` input request (MRTR), and the client's
//!   retry carries the roots. Its roots are learnt once per session.

// Roots are deprecated by 2026-07-28 (SEP-2577), yet they are how today's clients (both
// generations) name the project they work on.
#![allow(deprecated)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

use rmcp::model::{InputRequest, InputRequests, InputResponses, ListRootsRequest, ListRootsResult};

/// The key of the input request that asks for roots, and the prefix of its `requestState`.
pub const INPUT_KEY: &str = "paddock_roots";
const STATE_PREFIX: &str = "paddock-roots:";

/// How long a legacy client has to answer `roots/list` before the call runs without it.
pub const LIST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// What is known of each session's roots (keyed by Paddock session).
#[derive(Default)]
pub struct SessionRoots {
    learnt: Mutex<HashMap<String, Learnt>>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Learnt {
    /// Asked and applied (or the client had none to give).
    Current,
    /// The client said its roots changed: ask again on the next call.
    Stale,
}

impl SessionRoots {
    /// Whether `session`'s roots must be asked for before its next call.
    pub fn needed(&self, session: &str) -> bool {
        self.learnt
            .lock()
            .map_or(true, |map| map.get(session) != Some(&Learnt::Current))
    }

    /// `session`'s roots were asked for and applied.
    pub fn learnt(&self, session: &str) {
        if let Ok(mut map) = self.learnt.lock() {
            map.insert(session.to_owned(), Learnt::Current);
        }
    }

    /// The client said its roots changed.
    pub fn changed(&self, session: &str) {
        if let Ok(mut map) = self.learnt.lock() {
            map.insert(session.to_owned(), Learnt::Stale);
        }
    }

    /// The session ended.
    pub fn forget(&self, session: &str) {
        if let Ok(mut map) = self.learnt.lock() {
            map.remove(session);
        }
    }
}

/// The workspace named by `roots`: the first root that is a local directory (`file://`).
pub fn workspace_of(roots: &ListRootsResult) -> Option<PathBuf> {
    roots.roots.iter().find_map(|root| file_uri_path(&root.uri))
}

/// The path of a `file://` URI (`file:///p` or `file://localhost/p`), percent-decoded; `None`
/// for any other scheme or host.
pub fn file_uri_path(uri: &str) -> Option<PathBuf> {
    let rest = uri.strip_prefix("file://")?;
    let path = rest.strip_prefix("localhost").unwrap_or(rest);
    if !path.starts_with('/') {
        return None;
    }
    let path = path.split(['?', '#']).next().unwrap_or(path);
    let bytes = percent_decode(path)?;
    use std::os::unix::ffi::OsStringExt;
    Some(PathBuf::from(std::ffi::OsString::from_vec(bytes)))
}

fn percent_decode(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    // A NUL cannot be in a path.
    (!out.contains(&0)).then_some(out)
}

/// The `input_required` answer that asks a 2026-07-28 client for its roots.
pub fn ask() -> (InputRequests, String) {
    let mut requests = InputRequests::new();
    requests.insert(
        INPUT_KEY.to_owned(),
        InputRequest::ListRoots(ListRootsRequest::default()),
    );
    let nonce: u64 = rand_u64();
    (requests, format!("{STATE_PREFIX}{nonce:016x}"))
}

/// Whether a retry's `requestState` is the answer to [`ask`] (not a parked approval).
pub fn is_answer(request_state: &str) -> bool {
    request_state.starts_with(STATE_PREFIX)
}

/// The roots in a retry's input responses (`None`: the client gave none or refused).
pub fn answer_in(responses: Option<&InputResponses>) -> Option<ListRootsResult> {
    let value = responses?.get(INPUT_KEY)?;
    serde_json::from_value(value.clone()).ok()
}

/// A random number for a request state: it names nothing and grants nothing (the roots a
/// retry carries could have been sent by the client anyway), so it only tells retries apart.
fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::SystemTime::now())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::Root;

    #[test]
    fn file_uris_become_paths() {
        assert_eq!(
            file_uri_path("file:///home/ann/my%20project"),
            Some(PathBuf::from("/home/ann/my project"))
        );
        assert_eq!(
            file_uri_path("file://localhost/srv/x"),
            Some(PathBuf::from("/srv/x"))
        );
        assert_eq!(file_uri_path("file://otherhost/srv/x"), None);
        assert_eq!(file_uri_path("https://example.com/x"), None);
        assert_eq!(file_uri_path("file:///a%00b"), None);
        assert_eq!(file_uri_path("file:///a%zz"), None);
    }

    #[test]
    fn the_first_local_root_is_the_workspace() {
        let roots = ListRootsResult::new(vec![
            Root::new("https://example.com/repo"),
            Root::new("file:///work/one"),
            Root::new("file:///work/two"),
        ]);
        assert_eq!(workspace_of(&roots), Some(PathBuf::from("/work/one")));
        assert_eq!(workspace_of(&ListRootsResult::new(vec![])), None);
    }

    #[test]
    fn a_change_makes_roots_needed_again() {
        let roots = SessionRoots::default();
        assert!(roots.needed("s"));
        roots.learnt("s");
        assert!(!roots.needed("s"));
        roots.changed("s");
        assert!(roots.needed("s"));
        roots.learnt("s");
        roots.forget("s");
        assert!(roots.needed("s"));
    }

    #[test]
    fn the_question_and_its_answer() {
        let (requests, state) = ask();
        assert!(requests.contains_key(INPUT_KEY));
        assert!(is_answer(&state));
        assert!(!is_answer("an-approval-handle"));
        let mut responses = InputResponses::new();
        responses.insert(
            INPUT_KEY.to_owned(),
            serde_json::json!({"roots": [{"uri": "file:///p", "name": "p"}]}),
        );
        let roots = answer_in(Some(&responses)).unwrap();
        assert_eq!(workspace_of(&roots), Some(PathBuf::from("/p")));
        assert!(answer_in(None).is_none());
    }
}
