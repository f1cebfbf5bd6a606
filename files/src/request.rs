//! The requests the file tools take, as they arrive from a tool call or over the agent's
//! socket. Unknown fields are tolerated so that callers can add fields before we read them.

use serde::{Deserialize, Serialize};

/// One file operation (the file tools of DESIGN §7).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum FileRequest {
    Read {
        path: String,
        #[serde(default)]
        offset: Option<u64>,
        #[serde(default)]
        limit: Option<u64>,
    },
    Write {
        path: String,
        content: String,
    },
    Edit {
        path: String,
        old_string: String,
        new_string: String,
        #[serde(default)]
        replace_all: bool,
    },
    ApplyPatch {
        patch: String,
    },
    Move {
        from: String,
        to: String,
        #[serde(default)]
        overwrite: bool,
    },
    Delete {
        path: String,
        #[serde(default)]
        recursive: bool,
    },
    Grep {
        pattern: String,
        #[serde(default)]
        path: Option<String>,
        #[serde(default)]
        glob: Option<String>,
        #[serde(default)]
        ignore_case: bool,
        #[serde(default)]
        fixed_strings: bool,
        #[serde(default)]
        output_mode: Option<GrepMode>,
        #[serde(default)]
        context: Option<u32>,
        #[serde(default)]
        max_results: Option<u64>,
    },
    Glob {
        pattern: String,
        #[serde(default)]
        path: Option<String>,
    },
    List {
        #[serde(default)]
        path: Option<String>,
        #[serde(default)]
        depth: Option<u32>,
    },
    Info {
        path: String,
    },
    /// Changes under a directory for `timeout_ms` ([`crate::watch`]).
    Watch {
        path: String,
        #[serde(default)]
        recursive: bool,
        #[serde(default)]
        timeout_ms: Option<u64>,
        #[serde(default)]
        max_events: Option<usize>,
    },
}

/// What `grep` answers with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GrepMode {
    #[default]
    FilesWithMatches,
    Content,
    Count,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn defaults_and_unknown_fields() {
        let r: FileRequest =
            serde_json::from_str(r#"{"op":"grep","pattern":"x","extra":1,"output_mode":"count"}"#)
                .unwrap();
        assert_eq!(
            r,
            FileRequest::Grep {
                pattern: "x".into(),
                path: None,
                glob: None,
                ignore_case: false,
                fixed_strings: false,
                output_mode: Some(GrepMode::Count),
                context: None,
                max_results: None,
            }
        );
        let r: FileRequest =
            serde_json::from_str(r#"{"op":"edit","path":"a","old_string":"x","new_string":"y"}"#)
                .unwrap();
        assert!(matches!(
            r,
            FileRequest::Edit {
                replace_all: false,
                ..
            }
        ));
    }

    proptest! {
        // Untrusted JSON never panics the parser.
        #[test]
        fn parse_never_panics(s in ".{0,200}") {
            let _ = serde_json::from_str::<FileRequest>(&s);
        }

        #[test]
        fn read_round_trips(path in ".{0,40}", offset in proptest::option::of(any::<u64>())) {
            let r = FileRequest::Read { path, offset, limit: None };
            let s = serde_json::to_string(&r).unwrap();
            prop_assert_eq!(serde_json::from_str::<FileRequest>(&s).unwrap(), r);
        }
    }
}
