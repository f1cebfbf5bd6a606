//! `read_output`: reads a spilled result back (`tools::spill`), by pages of lines, optionally
//! only the lines matching a pattern. It reads only files of the caller's own session's spill
//! directory: an id is a file name there, a path must resolve (symbolic links refused) inside
//! it, so no other session's results and no host file can be read through it.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Value, json};

use super::spill::{READ_OUTPUT, spill_dir};
use crate::registry::{CallContext, Tool, ToolError, ToolFuture, ToolSpec};

/// Lines a page holds when `limit` is not given, and at most.
const DEFAULT_LIMIT: usize = 200;
const MAX_LIMIT: usize = 5_000;

/// The error code of a path outside the session's spill directory.
const OUTSIDE_CODE: &str = "read_output:outside_spill_dir";

pub struct ReadOutput {
    state_root: PathBuf,
    /// Characters of text a page holds at most: half of `[tools] max_result_chars`, so that a
    /// page (escaped as JSON) is never itself a result too big to see.
    page_chars: usize,
}

impl ReadOutput {
    pub fn new(state_root: PathBuf, max_result_chars: usize) -> Self {
        Self {
            state_root,
            page_chars: (max_result_chars / 2).max(100),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    id: Option<String>,
    path: Option<String>,
    offset: Option<i64>,
    limit: Option<usize>,
    pattern: Option<String>,
}

impl Tool for ReadOutput {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            READ_OUTPUT,
            "builtin",
            "Read a big tool result that was spilled to a file (its `spilled` entry gives the id \
             and path): a page of lines from `offset` (0-based; negative counts from the end), \
             or with `pattern` only the lines matching that regular expression, with their \
             line numbers. Only this session's spilled results can be read.",
            json!({
                "type": "object",
                "properties": {
                    "id": {"type": "string", "description": "The id of a spilled result"},
                    "path": {"type": "string", "description": "The path of a spilled result (instead of id)"},
                    "offset": {"type": "integer", "description": "First line (or first match with pattern), 0-based; negative counts from the end", "default": 0},
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT, "description": "Lines (or matches) to return"},
                    "pattern": {"type": "string", "description": "Regular expression (Rust regex syntax): only matching lines"}
                },
                "additionalProperties": false
            }),
        )
        .with_label("📄", "Reading a spilled output")
        .read_only()
    }

    fn call(&self, args: Value, ctx: CallContext) -> ToolFuture {
        let state_root = self.state_root.clone();
        let page_chars = self.page_chars;
        Box::pin(async move {
            let args: Args = super::parse_args(READ_OUTPUT, args)?;
            let dir = spill_dir(&state_root, &ctx.session)
                .map_err(|e| ToolError::invalid_arguments(e.to_string()))?;
            let path = resolve(&dir, args.id.as_deref(), args.path.as_deref())?;
            let pattern = match args.pattern.as_deref() {
                Some(p) => Some(regex::Regex::new(p).map_err(|e| {
                    ToolError::invalid_arguments(format!(
                        "invalid arguments for 'read_output': field `pattern` is not a valid \
                         regular expression: {e}"
                    ))
                })?),
                None => None,
            };
            let limit = args.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT);
            let offset = args.offset.unwrap_or(0);
            let read = path.clone();
            let text = tokio::task::spawn_blocking(move || std::fs::read_to_string(&read))
                .await
                .map_err(|e| ToolError::failed(format!("read_output: reading failed: {e}")))?
                .map_err(|e| ToolError::failed(format!("cannot read {}: {e}", path.display())))?;
            let mut answer = match &pattern {
                Some(pattern) => matching_page(&text, pattern, offset, limit, page_chars),
                None => line_page(&text, offset, limit, page_chars),
            };
            answer["path"] = json!(path.display().to_string());
            answer["id"] = json!(
                path.file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default()
            );
            answer["total_chars"] = json!(text.chars().count());
            Ok(answer)
        })
    }
}

/// The file `id` or `path` names, if it is a regular file of `dir` (not a symbolic link, not
/// outside it by `..` or by a link on the way).
fn resolve(dir: &Path, id: Option<&str>, path: Option<&str>) -> Result<PathBuf, ToolError> {
    let wanted = match (id, path) {
        (Some(id), None) => {
            let name = if id.ends_with(".txt") {
                id.to_owned()
            } else {
                format!("{id}.txt")
            };
            if id.is_empty() || id.contains('/') || id.starts_with('.') {
                return Err(ToolError::denied(
                    OUTSIDE_CODE,
                    format!(
                        "read_output: {id:?} is not the id of a spilled result (an id is a file \
                         name in this session's spill directory, without '/' or a leading '.')"
                    ),
                ));
            }
            dir.join(name)
        }
        (None, Some(path)) => {
            let path = PathBuf::from(path);
            // Judged on its text first: whether a host file exists is none of the caller's
            // business, so a path outside is refused before anything is looked up.
            if !path.is_absolute() || !lexically_normal(&path).starts_with(dir) {
                return Err(ToolError::denied(
                    OUTSIDE_CODE,
                    format!(
                        "read_output: {} is not in this session's spill directory ({}); give \
                         the absolute path a `spilled` entry names, or its id",
                        path.display(),
                        dir.display()
                    ),
                ));
            }
            path
        }
        (Some(_), Some(_)) | (None, None) => {
            return Err(ToolError::invalid_arguments(
                "invalid arguments for 'read_output': give exactly one of `id` or `path` (the \
                 `spilled` entry of a result names both)",
            ));
        }
    };
    let outside = |why: &str| {
        ToolError::denied(
            OUTSIDE_CODE,
            format!(
                "read_output: {} {why}; only this session's spilled results ({}) can be read",
                wanted.display(),
                dir.display()
            ),
        )
    };
    let meta = std::fs::symlink_metadata(&wanted).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            ToolError::invalid_arguments(format!(
                "read_output: no spilled result at {}: the id or path is wrong, or the session \
                 was closed (closing a session removes its spilled results){}",
                wanted.display(),
                known_ids(dir)
            ))
        } else {
            ToolError::failed(format!("cannot read {}: {e}", wanted.display()))
        }
    })?;
    if meta.file_type().is_symlink() {
        return Err(outside("is a symbolic link"));
    }
    let real = wanted
        .canonicalize()
        .map_err(|e| ToolError::failed(format!("cannot resolve {}: {e}", wanted.display())))?;
    let real_dir = dir
        .canonicalize()
        .map_err(|_| outside("is not in a spill directory (this session has none)"))?;
    if real.parent() != Some(real_dir.as_path()) {
        return Err(outside("is outside the spill directory"));
    }
    if !meta.is_file() {
        return Err(outside("is not a file"));
    }
    Ok(real)
}

/// `path` with `.` and `..` resolved on its text alone (no file system access).
fn lexically_normal(path: &Path) -> PathBuf {
    let mut normal = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                normal.pop();
            }
            std::path::Component::CurDir => {}
            other => normal.push(other),
        }
    }
    normal
}

/// "; this session's spilled results: a, b" (at most 10), or nothing.
fn known_ids(dir: &Path) -> String {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return String::new();
    };
    let mut ids: Vec<String> = entries
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_suffix(".txt"))
                .map(str::to_owned)
        })
        .collect();
    ids.sort();
    if ids.is_empty() {
        return String::new();
    }
    let shown = ids.len().min(10);
    let more = if ids.len() > shown {
        format!(" and {} more", ids.len() - shown)
    } else {
        String::new()
    };
    format!(
        "; this session's spilled results: {}{more}",
        ids[ids.len() - shown..].join(", ")
    )
}

/// Where a page starts: `offset` from the start, or from the end when negative.
fn start_of(offset: i64, total: usize) -> usize {
    if offset >= 0 {
        usize::try_from(offset).unwrap_or(usize::MAX).min(total)
    } else {
        total.saturating_sub(usize::try_from(offset.unsigned_abs()).unwrap_or(usize::MAX))
    }
}

/// A line as it goes into a page: whole, or cut to what is left of the page's characters.
fn fit(line: &str, room: usize) -> (String, bool) {
    match line.char_indices().nth(room) {
        None => (line.to_owned(), false),
        Some((cut, _)) => (line[..cut].to_owned(), true),
    }
}

/// Lines `offset..offset+limit`, as one text, stopping early when the page is full.
fn line_page(text: &str, offset: i64, limit: usize, page_chars: usize) -> Value {
    let lines: Vec<&str> = text.lines().collect();
    let start = start_of(offset, lines.len());
    let mut page = Vec::new();
    let mut used = 0;
    let mut cut_line = None;
    for (i, line) in lines.iter().enumerate().skip(start).take(limit) {
        let room = page_chars.saturating_sub(used);
        let chars = line.chars().count() + 1;
        if chars > room && !page.is_empty() {
            break;
        }
        let (shown, cut) = fit(line, room);
        used += chars;
        page.push(shown);
        if cut {
            cut_line = Some(i);
            break;
        }
    }
    let end = start + page.len();
    let mut answer = json!({
        "offset": start,
        "lines_returned": page.len(),
        "total_lines": lines.len(),
        "next_offset": (end < lines.len()).then_some(end),
        "text": page.join("\n"),
    });
    if let Some(line) = cut_line {
        answer["note"] = json!(format!(
            "line {line} is longer than a page ({page_chars} characters): only its start is \
             shown; use `pattern` to find what you need in it"
        ));
    }
    answer
}

/// The lines matching `pattern`, matches `offset..offset+limit`, each with its line number.
fn matching_page(
    text: &str,
    pattern: &regex::Regex,
    offset: i64,
    limit: usize,
    page_chars: usize,
) -> Value {
    let total_lines = text.lines().count();
    let matches: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .filter(|(_, line)| pattern.is_match(line))
        .collect();
    let start = start_of(offset, matches.len());
    let mut page = Vec::new();
    let mut used = 0;
    for (line, content) in matches.iter().skip(start).take(limit) {
        let room = page_chars.saturating_sub(used);
        let chars = content.chars().count() + 16;
        if chars > room && !page.is_empty() {
            break;
        }
        let (shown, cut) = fit(content, room);
        used += chars;
        let mut item = json!({"line": line, "text": shown});
        if cut {
            item["cut"] = json!(true);
        }
        page.push(item);
    }
    let end = start + page.len();
    json!({
        "pattern": pattern.as_str(),
        "offset": start,
        "matches": page,
        "total_matches": matches.len(),
        "total_lines": total_lines,
        "next_offset": (end < matches.len()).then_some(end),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn text(lines: usize) -> String {
        (0..lines).map(|i| format!("line {i}\n")).collect()
    }

    #[test]
    fn pages_follow_offset_and_limit() {
        let page = line_page(&text(10), 2, 3, 1000);
        assert_eq!(page["text"], json!("line 2\nline 3\nline 4"));
        assert_eq!(page["next_offset"], json!(5));
        let last = line_page(&text(10), -2, 100, 1000);
        assert_eq!(last["text"], json!("line 8\nline 9"));
        assert_eq!(last["next_offset"], Value::Null);
    }

    #[test]
    fn a_page_stops_at_its_character_budget() {
        let page = line_page(&text(100), 0, 100, 30);
        assert_eq!(page["lines_returned"], json!(4));
        assert_eq!(page["next_offset"], json!(4));
        let long = "x".repeat(500);
        let page = line_page(&long, 0, 10, 30);
        assert_eq!(page["text"].as_str().unwrap().len(), 30);
        assert!(
            page["note"]
                .as_str()
                .unwrap()
                .contains("longer than a page")
        );
    }

    #[test]
    fn patterns_keep_matching_lines_with_their_numbers() {
        let re = regex::Regex::new(r"line 1\d$").unwrap();
        let page = matching_page(&text(30), &re, 0, 3, 1000);
        assert_eq!(page["total_matches"], json!(10));
        assert_eq!(
            page["matches"],
            json!([{"line": 10, "text": "line 10"}, {"line": 11, "text": "line 11"}, {"line": 12, "text": "line 12"}])
        );
        assert_eq!(page["next_offset"], json!(3));
    }

    #[test]
    fn only_files_of_the_spill_directory_resolve() {
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join("spill/s");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a.txt"), "hello").unwrap();
        std::fs::write(home.path().join("secret.txt"), "secret").unwrap();
        std::os::unix::fs::symlink(home.path().join("secret.txt"), dir.join("link.txt")).unwrap();
        assert!(resolve(&dir, Some("a"), None).is_ok());
        assert!(resolve(&dir, None, Some(dir.join("a.txt").to_str().unwrap())).is_ok());
        for (id, path) in [
            (Some("../secret"), None),
            (Some("link"), None),
            (None, Some(home.path().join("secret.txt"))),
            (None, Some(dir.join("../../secret.txt"))),
            (None, Some(dir.join("../../no-such-file"))),
            (None, Some(PathBuf::from("secret.txt"))),
            (None, Some(dir.join("link.txt"))),
        ] {
            let path = path.map(|p| p.display().to_string());
            let err = resolve(&dir, id, path.as_deref()).unwrap_err();
            assert_eq!(err.code, OUTSIDE_CODE, "{id:?} {path:?}: {err}");
        }
    }
}
