//! The file tools (toolset `files`): read_file, write_file, edit_file, apply_patch, move_file,
//! delete_file, grep, glob_files, list_files, file_info, watch_files, and `code_read`
//! (read_file's old name).
//!
//! Thin on purpose: each tool checks its arguments, asks the approval gate what a command
//! doing the same would need, and hands one `paddock_files::FileRequest` to the routed backend,
//! which does the work in the environment (its agent) or, for the unconfined local backend,
//! here through the same library.

use std::sync::Arc;

use paddock_files::{FileError, FileRequest};
use serde_json::{Map, Value, json};

use super::environment::{Environments, backend_error};
use crate::registry::{CallContext, Tool, ToolError, ToolFuture, ToolSpec};

/// The route every file tool follows (`[routes] files`, default: where `terminal` goes).
const ROUTE: &str = "files";

/// One file tool: its name, the operation its arguments become, and its spec.
struct FileTool {
    envs: Arc<Environments>,
    name: &'static str,
    /// `op` of [`FileRequest`].
    op: &'static str,
    description: &'static str,
    properties: Value,
    required: &'static [&'static str],
    read_only: bool,
}

/// read_file's (and code_read's) arguments: a path and a window of lines.
fn read_window(path: Value) -> Value {
    json!({
        "path": path,
        "offset": {"type": "integer", "minimum": 1, "default": 1},
        "limit": {"type": "integer", "minimum": 1, "default": 2000}
    })
}

/// Every file tool over `envs`.
pub fn file_tools(envs: Arc<Environments>) -> Vec<Arc<dyn Tool>> {
    let path = |what: &str| json!({"type": "string", "description": what});
    let tools = [
        FileTool {
            envs: envs.clone(),
            name: "read_file",
            op: "read",
            description: "Read a text file's lines (a window: `offset` is the first line, \
                          1-based, `limit` the number of lines). Answers the raw text of those \
                          lines with start_line, end_line, total_lines and whether more remain \
                          (truncated). Binary files are refused (file:binary).",
            properties: read_window(path(
                "File to read (relative to the session's current directory)",
            )),
            required: &["path"],
            read_only: true,
        },
        FileTool {
            envs: envs.clone(),
            name: "code_read",
            op: "read",
            description: "Old name of read_file: read a text file's lines (offset, limit).",
            properties: read_window(path("File to read")),
            required: &["path"],
            read_only: true,
        },
        FileTool {
            envs: envs.clone(),
            name: "write_file",
            op: "write",
            description: "Write a whole file (created with its parent directories, or \
                          replaced atomically, keeping its mode).",
            properties: json!({
                "path": path("File to write"),
                "content": {"type": "string", "description": "The file's whole new content"}
            }),
            required: &["path", "content"],
            read_only: false,
        },
        FileTool {
            envs: envs.clone(),
            name: "edit_file",
            op: "edit",
            description: "Replace an exact string in a file. `old_string` must occur exactly \
                          once (file:ambiguous with the count otherwise) unless `replace_all`; \
                          not found is file:no_match with the nearest lines. Nothing changes on \
                          error.",
            properties: json!({
                "path": path("File to edit"),
                "old_string": {"type": "string", "description": "Exact text to replace"},
                "new_string": {"type": "string", "description": "Its replacement"},
                "replace_all": {"type": "boolean", "default": false}
            }),
            required: &["path", "old_string", "new_string"],
            read_only: false,
        },
        FileTool {
            envs: envs.clone(),
            name: "apply_patch",
            op: "apply_patch",
            description: "Apply a patch in the codex format: `*** Begin Patch`, then `*** Add \
                          File: P` (+ lines), `*** Delete File: P`, `*** Update File: P` \
                          (optionally `*** Move to: Q`) with `@@` chunks of ' ', '-', '+' \
                          lines (`*** End of File` anchors a chunk at the end), then `*** End \
                          Patch`. All or nothing: a patch that fails changes no file, and the \
                          error names the file and the chunk.",
            properties: json!({
                "patch": {"type": "string", "description": "The whole patch text"}
            }),
            required: &["patch"],
            read_only: false,
        },
        FileTool {
            envs: envs.clone(),
            name: "move_file",
            op: "move",
            description: "Move or rename a file or directory (parents of `to` are made). An \
                          existing `to` is refused (file:exists) unless `overwrite`.",
            properties: json!({
                "from": path("What to move"),
                "to": path("Where to"),
                "overwrite": {"type": "boolean", "default": false}
            }),
            required: &["from", "to"],
            read_only: false,
        },
        FileTool {
            envs: envs.clone(),
            name: "delete_file",
            op: "delete",
            description: "Delete a file or symlink; a directory needs `recursive`.",
            properties: json!({
                "path": path("What to delete"),
                "recursive": {"type": "boolean", "default": false}
            }),
            required: &["path"],
            read_only: false,
        },
        FileTool {
            envs: envs.clone(),
            name: "grep",
            op: "grep",
            description: "Search file contents with a regex, as ripgrep does (.gitignore and \
                          .ignore honoured, hidden and binary files skipped). output_mode: \
                          files_with_matches (default), content (matching lines, with \
                          `context` lines around), count. Paths relative to `path`.",
            properties: json!({
                "pattern": {"type": "string", "description": "Regular expression (Rust regex syntax), or a literal with fixed_strings"},
                "path": path("File or directory to search (default: the current directory)"),
                "glob": {"type": "string", "description": "Only files matching this glob (ripgrep's -g; !glob excludes)"},
                "ignore_case": {"type": "boolean", "default": false},
                "fixed_strings": {"type": "boolean", "default": false},
                "output_mode": {"type": "string", "enum": ["files_with_matches", "content", "count"], "default": "files_with_matches"},
                "context": {"type": "integer", "minimum": 0, "description": "Lines of context around each match (content mode)"},
                "max_results": {"type": "integer", "minimum": 1}
            }),
            required: &["pattern"],
            read_only: true,
        },
        FileTool {
            envs: envs.clone(),
            name: "glob_files",
            op: "glob",
            description: "Files whose path matches a glob (`**/*.rs`; a pattern without `/` \
                          matches file names anywhere), sorted, relative to `path`; ignored and \
                          hidden files skipped as for grep.",
            properties: json!({
                "pattern": {"type": "string"},
                "path": path("Directory to search (default: the current directory)")
            }),
            required: &["pattern"],
            read_only: true,
        },
        FileTool {
            envs: envs.clone(),
            name: "list_files",
            op: "list",
            description: "List a directory's entries (to `depth` levels) with kind and size.",
            properties: json!({
                "path": path("Directory (default: the current directory)"),
                "depth": {"type": "integer", "minimum": 1, "default": 1}
            }),
            required: &[],
            read_only: true,
        },
        FileTool {
            envs: envs.clone(),
            name: "watch_files",
            op: "watch",
            description: "Watch a directory (inotify, in the environment) for `timeout_ms` and \
                          answer what changed: events [{path (absolute), kind: created, \
                          modified, removed or renamed}] in order. A move is `renamed` at its \
                          old path and `created` at its new one. `recursive` covers every \
                          directory under it, new ones included.",
            properties: json!({
                "path": path("Directory to watch"),
                "recursive": {"type": "boolean", "default": false},
                "timeout_ms": {"type": "integer", "minimum": 0, "maximum": paddock_files::watch::MAX_WATCH_MS, "default": paddock_files::watch::DEFAULT_WATCH_MS},
                "max_events": {"type": "integer", "minimum": 1, "maximum": paddock_files::watch::MAX_EVENTS, "description": "Answer as soon as this many events came"}
            }),
            required: &["path"],
            read_only: true,
        },
        FileTool {
            envs,
            name: "file_info",
            op: "info",
            description: "A file's kind, size, mode, modification time and MIME type.",
            properties: json!({"path": path("File or directory")}),
            required: &["path"],
            read_only: true,
        },
    ];
    tools
        .into_iter()
        .map(|tool| Arc::new(tool) as Arc<dyn Tool>)
        .collect()
}

impl Tool for FileTool {
    fn spec(&self) -> ToolSpec {
        let spec = ToolSpec::new(
            self.name,
            "files",
            self.description,
            json!({
                "type": "object",
                "properties": self.properties,
                "required": self.required,
                "additionalProperties": false
            }),
        )
        .with_label("📄", "Working on files");
        if self.read_only {
            spec.read_only()
        } else {
            spec
        }
    }

    fn call(&self, args: Value, ctx: CallContext) -> ToolFuture {
        let envs = self.envs.clone();
        let (name, op) = (self.name, self.op);
        let progress = ctx.progress.clone();
        Box::pin(paddock_backends::progress::scope(progress, async move {
            let operation = operation_of(name, op, args)?;
            let env = envs.backend_for(ROUTE)?;
            let _active = envs.call_activity(&ctx, Some(env)).await?;
            // Where the files are this machine's, a relative path is judged where it lands
            // (`../../root/.bashrc` is the start-up file it reaches).
            let base = env.current_dir(&ctx.session);
            if let Some(line) = equivalent_command(&operation, base.as_deref())? {
                let cwd = base.as_ref().map(|b| b.display().to_string());
                envs.check_file_command(env, name, &line, cwd.as_deref(), &ctx)
                    .await?;
            }
            env.files(&ctx.session, operation)
                .await
                .map_err(backend_error)?
                .map_err(file_error)
        }))
    }
}

/// The tool's arguments as the operation `op`.
fn operation_of(tool: &str, op: &str, args: Value) -> Result<FileRequest, ToolError> {
    let mut object = match args {
        Value::Object(map) => map,
        Value::Null => Map::new(),
        other => {
            return Err(ToolError::invalid_arguments(format!(
                "invalid arguments for '{tool}': expected an object, got {other}"
            )));
        }
    };
    object.insert("op".into(), Value::String(op.to_owned()));
    super::parse_args(tool, Value::Object(object))
}

/// A file error as the tool reports it: its own code (`file:not_found`, ...); bad input is a
/// `ValueError` in a script, a permission refused by the sandbox a `PermissionError`.
fn file_error(err: FileError) -> ToolError {
    use paddock_files::FileErrorKind as Kind;
    let code = err.kind.code();
    match err.kind {
        Kind::InvalidArgument | Kind::InvalidPatch => ToolError {
            code: code.to_owned(),
            ..ToolError::invalid_arguments(err.message)
        },
        Kind::PermissionDenied => ToolError::denied(code, err.message),
        _ => ToolError {
            code: code.to_owned(),
            ..ToolError::failed(err.message)
        },
    }
}

/// The shell line that would do what `operation` does, for the approval packs: the same rules
/// judge a file tool and a command (a write to `~/.bashrc` asks either way). `None`: nothing to
/// judge (listings and metadata).
fn equivalent_command(
    operation: &FileRequest,
    base: Option<&std::path::Path>,
) -> Result<Option<String>, ToolError> {
    let quoted = |path: &str| quoted_at(base, path);
    let line = match operation {
        FileRequest::Read { path, .. } => format!("cat -- {}", quoted(path)),
        FileRequest::Grep { pattern, path, .. } => format!(
            "grep -r -- {} {}",
            quoted(pattern),
            quoted(path.as_deref().unwrap_or("."))
        ),
        FileRequest::Write { path, .. } | FileRequest::Edit { path, .. } => {
            format!("tee -- {}", quoted(path))
        }
        FileRequest::Move { from, to, .. } => format!("mv -- {} {}", quoted(from), quoted(to)),
        FileRequest::Delete { path, recursive } => {
            format!(
                "rm {}-- {}",
                if *recursive { "-r " } else { "" },
                quoted(path)
            )
        }
        FileRequest::ApplyPatch { patch } => {
            use paddock_files::PatchAction;
            let targets = paddock_files::patch_targets(patch).map_err(file_error)?;
            let lines: Vec<String> = targets
                .iter()
                .map(|t| match t.action {
                    PatchAction::Delete => format!("rm -- {}", quoted(&t.path)),
                    PatchAction::Add | PatchAction::Update | PatchAction::MoveTo => {
                        format!("tee -- {}", quoted(&t.path))
                    }
                })
                .collect();
            if lines.is_empty() {
                return Ok(None);
            }
            lines.join("; ")
        }
        FileRequest::Glob { .. }
        | FileRequest::List { .. }
        | FileRequest::Info { .. }
        | FileRequest::Watch { .. } => {
            return Ok(None);
        }
    };
    Ok(Some(line))
}

/// `path` as one shell word for the rules; where the files are this machine's (`base` known),
/// an absolute path in the home directory is written `~/...`, as the rules know the home.
/// Relative paths stay relative: the rules resolve them against the session's directory.
fn quoted_at(base: Option<&std::path::Path>, path: &str) -> String {
    let home = std::env::var("HOME").unwrap_or_default();
    let home = home.trim_end_matches('/');
    match path.strip_prefix(home).and_then(|r| r.strip_prefix('/')) {
        Some(rest) if base.is_some() && !home.is_empty() => quoted(&format!("~/{rest}")),
        _ => quoted(path),
    }
}

/// `path` as one shell word; a leading `~/` stays outside the quotes, so that the rules see
/// the home directory the file tools resolve it to.
fn quoted(path: &str) -> String {
    let (home, rest) = match path.strip_prefix("~/") {
        Some(rest) => ("~/", rest),
        None if path == "~" => return "~".into(),
        None => ("", path),
    };
    if rest.is_empty() {
        return home.to_owned();
    }
    format!("{home}'{}'", rest.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_one_shell_word_with_the_home_directory_left_open() {
        assert_eq!(quoted("a b"), "'a b'");
        assert_eq!(quoted("it's"), r"'it'\''s'");
        assert_eq!(quoted("~/.bashrc"), "~/'.bashrc'");
        assert_eq!(quoted("~"), "~");
    }

    #[test]
    fn the_arguments_become_the_operation_with_unknown_ones_refused_by_the_schema() {
        let op = operation_of("read_file", "read", json!({"path": "a.txt", "limit": 5})).unwrap();
        assert_eq!(
            op,
            FileRequest::Read {
                path: "a.txt".into(),
                offset: None,
                limit: Some(5)
            }
        );
        let err = operation_of("write_file", "write", json!({"path": "a"})).unwrap_err();
        assert!(err.message.contains("content"), "{}", err.message);
    }

    #[test]
    fn writes_and_reads_are_judged_as_the_commands_that_would_do_them() {
        let line = |op| equivalent_command(&op, None).unwrap();
        assert_eq!(
            line(FileRequest::Write {
                path: "~/.bashrc".into(),
                content: String::new()
            }),
            Some("tee -- ~/'.bashrc'".into())
        );
        assert_eq!(
            line(FileRequest::Delete {
                path: "build".into(),
                recursive: true
            }),
            Some("rm -r -- 'build'".into())
        );
        assert_eq!(line(FileRequest::Info { path: "x".into() }), None);
        let patch = "*** Begin Patch\n*** Add File: ~/.profile\n+x\n*** Delete File: old.txt\n*** End Patch\n";
        assert_eq!(
            line(FileRequest::ApplyPatch {
                patch: patch.into()
            }),
            Some("tee -- ~/'.profile'; rm -- 'old.txt'".into())
        );
        // With the files on this machine, the home directory is spelled as the rules know it.
        let home = std::env::var("HOME").unwrap();
        let at = |op| equivalent_command(&op, Some(std::path::Path::new("/w"))).unwrap();
        assert_eq!(
            at(FileRequest::Write {
                path: format!("{home}/.bashrc"),
                content: String::new()
            }),
            Some("tee -- ~/'.bashrc'".into())
        );
        assert_eq!(
            at(FileRequest::Read {
                path: "~/.ssh/id_rsa".into(),
                offset: None,
                limit: None
            }),
            Some("cat -- ~/'.ssh/id_rsa'".into())
        );
    }
}
