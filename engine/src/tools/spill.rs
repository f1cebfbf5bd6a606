//! Big direct results, spilled: a result longer than `[tools] max_result_chars` keeps its shape,
//! but each big string in it becomes a preview (its start and end) around a marker naming the
//! file that holds the whole text, in `$PADDOCK_HOME/spill/<session>/`. `read_output` reads
//! those files back; closing the session removes them (`sessions.rs`, [`SPILL_DIR`]).
//!
//! Only direct calls spill (the engine calls [`Spiller::spill`] on what a CLI, MCP or Rust API
//! caller gets back): a script's nested calls get their whole value, because a script is
//! exactly the place where a big value is cut down before the model sees it.

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};

pub use crate::sessions::SPILL_DIR;

/// The most a foreground `terminal` or `python_execute` command's output is captured to,
/// characters. Up to this size a direct call's output is spilled whole; beyond it the capture
/// keeps its first and last half and says how much was dropped. Memory: the capture holds up
/// to three times this while the command runs (its start and a rolling end), so a few MB per
/// running command, and a script may run dozens at once.
pub const CAPTURE_CEILING_CHARS: usize = 1_000_000;

/// The name of the tool that reads spilled files back (never spilled itself: its pages are
/// bounded by the same limit).
pub const READ_OUTPUT: &str = "read_output";

/// A spill that could not be written.
#[derive(Debug, thiserror::Error)]
pub enum SpillError {
    #[error(
        "session id {0:?} cannot name a spill directory: use 1-128 characters from [A-Za-z0-9_.-]"
    )]
    InvalidSession(String),
    #[error("cannot write the spilled output to {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
}

/// The spill directory of `session` under `state_root`, the session id checked like the
/// backends check it (it names a directory).
pub fn spill_dir(state_root: &Path, session: &str) -> Result<PathBuf, SpillError> {
    paddock_backends::shell::check_session(session)
        .map_err(|_| SpillError::InvalidSession(session.to_owned()))?;
    Ok(state_root.join(SPILL_DIR).join(session))
}

/// Writes big direct results to files and returns what the caller sees instead.
pub struct Spiller {
    state_root: PathBuf,
    max_result_chars: usize,
}

/// Makes file names unique among this process's spills.
static NEXT_SPILL: AtomicU64 = AtomicU64::new(0);

/// One string of a result: where it is and how long its JSON is.
struct Leaf {
    pointer: Vec<Step>,
    json_chars: usize,
}

#[derive(Clone)]
enum Step {
    Key(String),
    Index(usize),
}

impl Spiller {
    pub fn new(state_root: PathBuf, max_result_chars: usize) -> Self {
        Self {
            state_root,
            max_result_chars,
        }
    }

    pub fn max_result_chars(&self) -> usize {
        self.max_result_chars
    }

    /// Characters of a preview: a fifth of the limit, so that several spilled fields and the
    /// rest of the result still fit in it.
    fn preview_chars(&self) -> usize {
        self.max_result_chars / 5
    }

    /// `value` as the caller of a direct call `tool` in `session` sees it: unchanged when its
    /// JSON fits in `max_result_chars`; else its biggest strings spilled to files (longest
    /// first, until the rest fits), or, when strings alone cannot make it fit (thousands of
    /// small items), the whole result spilled as indented JSON and a preview of that in its
    /// place. A spill that cannot be written leaves the previews and says why in
    /// `spill_error`: the middle is lost then, but never silently.
    pub fn spill(&self, session: &str, tool: &str, value: Value) -> Value {
        let total = json_chars(&value);
        if total <= self.max_result_chars {
            return value;
        }
        let dir = match spill_dir(&self.state_root, session) {
            Ok(dir) => dir,
            Err(err) => return self.cut_without_file(value, &err),
        };
        // The plan first, on lengths only: which strings to spill, and whether that suffices.
        let mut leaves = Vec::new();
        collect_strings(&value, &mut Vec::new(), &mut leaves);
        leaves.sort_by_key(|leaf| std::cmp::Reverse(leaf.json_chars));
        // A preview, its marker and its `spilled` entry (paths, id and hint: under 900 characters).
        let replaced_size = self.preview_chars() + 900;
        let mut remaining = total;
        let mut chosen = Vec::new();
        for leaf in leaves {
            if remaining <= self.max_result_chars || leaf.json_chars <= replaced_size {
                break;
            }
            remaining = remaining - leaf.json_chars + replaced_size;
            chosen.push(leaf.pointer);
        }
        if remaining > self.max_result_chars {
            return self.spill_whole(&dir, session, tool, value, total);
        }
        let mut value = value;
        let mut spilled = Vec::new();
        let mut errors = Vec::new();
        for pointer in chosen {
            let field = field_name(&pointer);
            let Some(Value::String(text)) = get_mut(&mut value, &pointer) else {
                continue;
            };
            let whole = std::mem::take(text);
            match self.write(&dir, session, tool, &field, &whole) {
                Ok(file) => {
                    *text = self.preview(&whole, Some(&file));
                    spilled.push(file.describe(&field));
                }
                Err(err) => {
                    *text = self.preview(&whole, None);
                    errors.push(err.to_string());
                }
            }
        }
        if let Value::Object(map) = &mut value {
            if !spilled.is_empty() && !map.contains_key("spilled") {
                map.insert("spilled".into(), Value::Array(spilled));
            }
            if !errors.is_empty() {
                map.insert("spill_error".into(), json!(errors.join("; ")));
            }
        }
        value
    }

    /// The result spilled as one indented JSON file; the caller gets its preview.
    fn spill_whole(
        &self,
        dir: &Path,
        session: &str,
        tool: &str,
        value: Value,
        total: usize,
    ) -> Value {
        let text = serde_json::to_string_pretty(&value).unwrap_or_else(|_| value.to_string());
        match self.write(dir, session, tool, "result", &text) {
            Ok(file) => json!({
                "result_preview": self.preview(&text, Some(&file)),
                "result_chars": total,
                "spilled": [file.describe("result")],
            }),
            Err(err) => json!({
                "result_preview": self.preview(&text, None),
                "result_chars": total,
                "spill_error": err.to_string(),
            }),
        }
    }

    /// No file could be named (a bad session id): previews only, and why.
    fn cut_without_file(&self, value: Value, err: &SpillError) -> Value {
        let text = match &value {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        json!({
            "result_preview": self.preview(&text, None),
            "result_chars": json_chars(&value),
            "spill_error": err.to_string(),
        })
    }

    /// The first 40 % and the last 60 % of the preview's size around a marker (the end of an
    /// output is where errors and summaries are), cut at line ends when lines are not too long,
    /// the marker naming the lines left out so that a page of `read_output` can start there.
    fn preview(&self, text: &str, file: Option<&SpillFile>) -> String {
        let size = self.preview_chars();
        let head_chars = size * 2 / 5;
        let tail_chars = size - head_chars;
        let chars = text.chars().count();
        let mut head_end = byte_at_char(text, head_chars);
        let mut tail_start = byte_at_char(text, chars.saturating_sub(tail_chars).max(head_chars));
        // Whole lines, unless that would give up more than half of either part.
        if let Some(newline) = text[..head_end].rfind('\n')
            && newline + 1 >= head_end / 2
        {
            head_end = newline + 1;
        }
        if let Some(newline) = text[tail_start..].find('\n')
            && newline < (text.len() - tail_start) / 2
        {
            tail_start += newline + 1;
        }
        let head = &text[..head_end];
        let tail = &text[tail_start..];
        let omitted = chars - head.chars().count() - tail.chars().count();
        let first_omitted_line = head.matches('\n').count();
        let first_tail_line = first_omitted_line + text[head_end..tail_start].matches('\n').count();
        let lines = if first_tail_line > first_omitted_line {
            format!("lines {first_omitted_line}-{} and ", first_tail_line - 1)
        } else {
            String::new()
        };
        let marker = match file {
            Some(file) => format!(
                "…[{lines}{omitted} characters omitted; the whole text ({} characters, {} \
                 lines) is in {}: read it with read_output(id=\"{}\", offset=LINE, limit=N) or \
                 read_output(id=\"{}\", pattern=\"REGEX\")]…",
                file.chars,
                file.lines,
                file.path.display(),
                file.id,
                file.id
            ),
            None => format!("…[{omitted} characters omitted and not kept: see spill_error]…"),
        };
        let before = if head.ends_with('\n') || head.is_empty() {
            ""
        } else {
            "\n"
        };
        format!("{head}{before}{marker}\n{tail}")
    }

    /// Writes one spilled text to a new file, readable by this user only.
    fn write(
        &self,
        dir: &Path,
        session: &str,
        tool: &str,
        field: &str,
        text: &str,
    ) -> Result<SpillFile, SpillError> {
        let io = |path: &Path, source| SpillError::Write {
            path: path.display().to_string(),
            source,
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| io(dir, e))?;
        let id = format!(
            "{}-{}-{}-{}-{}",
            crate::events::now_ms(),
            std::process::id(),
            NEXT_SPILL.fetch_add(1, Ordering::Relaxed),
            file_safe(tool),
            file_safe(field)
        );
        let path = dir.join(format!("{id}.txt"));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| io(&path, e))?;
        file.write_all(text.as_bytes()).map_err(|e| io(&path, e))?;
        // The session is recorded so that the idle sweep finds it and removes its spills even
        // when no environment tool ever ran in it.
        crate::sessions::SessionStore::new(&self.state_root).touch(session, None);
        Ok(SpillFile {
            id,
            path,
            chars: text.chars().count(),
            bytes: text.len(),
            lines: text.lines().count(),
        })
    }
}

/// A file a result was spilled to.
struct SpillFile {
    id: String,
    path: PathBuf,
    chars: usize,
    bytes: usize,
    lines: usize,
}

impl SpillFile {
    fn describe(&self, field: &str) -> Value {
        json!({
            "field": field,
            "id": self.id,
            "path": self.path.display().to_string(),
            "chars": self.chars,
            "bytes": self.bytes,
            "lines": self.lines,
            "hint": format!(
                "`{field}` shows only the start and end of the text; the whole of it is in the \
                 file. Page through it with read_output(id=\"{id}\", offset=LINE, limit=N) \
                 (lines, 0-based; a negative offset counts from the end) or keep only matching \
                 lines with read_output(id=\"{id}\", pattern=\"REGEX\")",
                id = self.id
            ),
        })
    }
}

/// Characters of `value` as compact JSON (what a caller receives).
fn json_chars(value: &Value) -> usize {
    serde_json::to_string(value).map_or(0, |s| s.chars().count())
}

fn collect_strings(value: &Value, at: &mut Vec<Step>, out: &mut Vec<Leaf>) {
    match value {
        Value::String(_) => out.push(Leaf {
            pointer: at.clone(),
            json_chars: json_chars(value),
        }),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                at.push(Step::Index(i));
                collect_strings(item, at, out);
                at.pop();
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                at.push(Step::Key(key.clone()));
                collect_strings(item, at, out);
                at.pop();
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

fn get_mut<'a>(value: &'a mut Value, pointer: &[Step]) -> Option<&'a mut Value> {
    let mut here = value;
    for step in pointer {
        here = match (step, here) {
            (Step::Key(key), Value::Object(map)) => map.get_mut(key)?,
            (Step::Index(i), Value::Array(items)) => items.get_mut(*i)?,
            _ => return None,
        };
    }
    Some(here)
}

/// `output`, `artifacts.0.text`; `result` for a result that is itself one string.
fn field_name(pointer: &[Step]) -> String {
    if pointer.is_empty() {
        return "result".into();
    }
    pointer
        .iter()
        .map(|step| match step {
            Step::Key(key) => key.clone(),
            Step::Index(i) => i.to_string(),
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// Letters, digits, `_`, `-` and `.` kept, the rest `_`, at most 64 characters.
fn file_safe(name: &str) -> String {
    name.chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The byte index of character `n` of `text` (its length when shorter).
fn byte_at_char(text: &str, n: usize) -> usize {
    text.char_indices().nth(n).map_or(text.len(), |(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::Map;

    /// A map with `key` removed, to compare the rest of a result.
    fn without(map: &Map<String, Value>, key: &str) -> Map<String, Value> {
        let mut map = map.clone();
        map.remove(key);
        map
    }

    fn numbered(lines: usize) -> String {
        (0..lines).map(|i| format!("line {i}\n")).collect()
    }

    #[test]
    fn a_small_result_is_untouched() {
        let home = tempfile::tempdir().unwrap();
        let spiller = Spiller::new(home.path().into(), 5000);
        let value = json!({"output": "short", "exit_code": 0});
        assert_eq!(spiller.spill("s", "terminal", value.clone()), value);
        assert!(!home.path().join(SPILL_DIR).exists());
    }

    #[test]
    fn a_big_field_goes_to_a_file_and_keeps_its_start_and_end() {
        let home = tempfile::tempdir().unwrap();
        let spiller = Spiller::new(home.path().into(), 5000);
        let text = numbered(20_000);
        let value = json!({"output": text, "exit_code": 3, "error": null});
        let seen = spiller.spill("s1", "terminal", value);
        let map = seen.as_object().unwrap();
        assert_eq!(
            without(&without(map, "output"), "spilled"),
            json!({"exit_code": 3, "error": null})
                .as_object()
                .unwrap()
                .clone()
        );
        let entry = &seen["spilled"][0];
        assert_eq!(entry["field"], json!("output"));
        assert_eq!(entry["chars"], json!(text.chars().count()));
        assert_eq!(entry["lines"], json!(20_000));
        let path = PathBuf::from(entry["path"].as_str().unwrap());
        assert!(path.starts_with(home.path().join(SPILL_DIR).join("s1")));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        let preview = seen["output"].as_str().unwrap();
        assert!(preview.starts_with("line 0\nline 1\n"), "{preview}");
        assert!(preview.ends_with("line 19999\n"), "{preview}");
        assert!(preview.contains(entry["id"].as_str().unwrap()), "{preview}");
        assert!(
            preview.contains("\nline 50\n…[lines 51-19945 and "),
            "{preview}"
        );
        assert!(preview.contains("]…\nline 19946\n"), "{preview}");
        assert!(json_chars(&seen) <= 5000, "{seen}");
        // The session is recorded, so that a sweep finds it.
        assert!(home.path().join("session-records/s1.json").exists());
    }

    #[test]
    fn many_small_items_spill_the_whole_result() {
        let home = tempfile::tempdir().unwrap();
        let spiller = Spiller::new(home.path().into(), 5000);
        let value = json!({"items": (0..2000).collect::<Vec<u32>>()});
        let seen = spiller.spill("s", "lister", value.clone());
        let path = seen["spilled"][0]["path"].as_str().unwrap();
        let back: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        assert_eq!(back, value);
        assert!(seen["result_preview"].as_str().unwrap().contains("omitted"));
    }

    #[test]
    fn a_bad_session_id_keeps_a_preview_and_says_why() {
        let home = tempfile::tempdir().unwrap();
        let spiller = Spiller::new(home.path().into(), 5000);
        let seen = spiller.spill("../x", "terminal", json!({"output": numbered(5000)}));
        assert!(
            seen["spill_error"]
                .as_str()
                .unwrap()
                .contains("cannot name a spill directory"),
            "{seen}"
        );
        assert!(!home.path().join(SPILL_DIR).exists());
    }
}
