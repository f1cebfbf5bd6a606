//! grep and glob_files with ripgrep's semantics: the same walk (`ignore`: .gitignore, .ignore,
//! .rgignore, git excludes, hidden files skipped, `-g` globs as overrides) and the same search
//! (`grep-searcher`, binary files skipped at the first NUL). The walk runs in parallel, the
//! answer is sorted by path so that it does not depend on thread timing.

use crate::error::{FileError, FileErrorKind, Result};
use crate::paths;
use crate::request::GrepMode;
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkMatch};
use ignore::overrides::OverrideBuilder;
use ignore::{WalkBuilder, WalkState};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

const CONTENT_CAP: u64 = 1000;
const LIST_CAP: u64 = 10_000;

pub(crate) struct GrepArgs<'a> {
    pub pattern: &'a str,
    pub path: Option<&'a str>,
    pub glob: Option<&'a str>,
    pub ignore_case: bool,
    pub fixed_strings: bool,
    pub mode: GrepMode,
    pub context: Option<u32>,
    pub max_results: Option<u64>,
}

/// Where a search starts: the resolved path and how answers name what is under it.
struct Root {
    path: PathBuf,
    is_file: bool,
}

impl Root {
    fn new(op: &str, base: &Path, path: Option<&str>) -> Result<Root> {
        let shown = path.unwrap_or(".");
        let full = paths::checked(op, base, shown)?;
        let meta = std::fs::metadata(&full).map_err(|e| FileError::io(op, Path::new(shown), &e))?;
        Ok(Root {
            path: full,
            is_file: meta.is_file(),
        })
    }

    /// Relative to the root, as `rg PATTERN root` prints it minus `root/`; a file root is
    /// named by its file name.
    fn relative(&self, found: &Path) -> PathBuf {
        if self.is_file {
            return found.file_name().map(PathBuf::from).unwrap_or_default();
        }
        found
            .strip_prefix(&self.path)
            .map(Path::to_path_buf)
            .unwrap_or_else(|_| found.to_path_buf())
    }

    /// ripgrep's walk, with `glob` as its `-g`.
    fn walker(&self, op: &str, glob: Option<&str>) -> Result<WalkBuilder> {
        let mut builder = WalkBuilder::new(&self.path);
        builder.add_custom_ignore_filename(".rgignore");
        if let Some(glob) = glob {
            let dir = if self.is_file {
                self.path.parent().unwrap_or(Path::new("/"))
            } else {
                &self.path
            };
            let bad =
                |e: ignore::Error| FileError::invalid(format!("{op}: invalid glob `{glob}`: {e}"));
            let mut overrides = OverrideBuilder::new(dir);
            overrides.add(glob).map_err(bad)?;
            builder.overrides(overrides.build().map_err(bad)?);
        }
        Ok(builder)
    }
}

fn cap(op: &str, max: Option<u64>, default: u64) -> Result<u64> {
    match max {
        Some(0) => Err(FileError::invalid(format!(
            "{op}: `max_results` must be at least 1"
        ))),
        Some(n) => Ok(n),
        None => Ok(default),
    }
}

/// One file's findings.
struct Found {
    path: PathBuf,
    count: u64,
    lines: Vec<Line>,
}

struct Line {
    number: u64,
    text: String,
    context: bool,
}

/// The most of one line a content answer carries: a minified file's one line must not fill
/// an agent's context.
const MAX_LINE_CHARS: usize = 2_000;

/// `text`, cut at [`MAX_LINE_CHARS`] with a marker saying how much was left out.
fn capped_line(text: &str) -> String {
    match text.char_indices().nth(MAX_LINE_CHARS) {
        None => text.to_owned(),
        Some((at, _)) => format!(
            "{} [... {} more characters; read_file shows the whole line]",
            &text[..at],
            text[at..].chars().count()
        ),
    }
}

/// Collects one file's matches (and context lines) up to the cap.
struct Collect {
    mode: GrepMode,
    cap: u64,
    count: u64,
    lines: Vec<Line>,
    binary: bool,
    stopped: bool,
}

impl Collect {
    fn push(&mut self, number: Option<u64>, bytes: &[u8], context: bool) -> bool {
        if self.lines.len() as u64 >= self.cap {
            self.stopped = true;
            return false;
        }
        let text = String::from_utf8_lossy(bytes);
        let text = text.strip_suffix('\n').unwrap_or(&text);
        let text = text.strip_suffix('\r').unwrap_or(text);
        self.lines.push(Line {
            number: number.unwrap_or(0),
            text: capped_line(text),
            context,
        });
        true
    }
}

impl Sink for Collect {
    type Error = std::io::Error;

    fn matched(&mut self, _: &Searcher, mat: &SinkMatch<'_>) -> std::io::Result<bool> {
        self.count += 1;
        match self.mode {
            // One match is enough to list the file (as `rg -l` stops).
            GrepMode::FilesWithMatches => Ok(false),
            GrepMode::Count => Ok(true),
            GrepMode::Content => Ok(self.push(mat.line_number(), mat.bytes(), false)),
        }
    }

    fn context(&mut self, _: &Searcher, ctx: &SinkContext<'_>) -> std::io::Result<bool> {
        Ok(self.push(ctx.line_number(), ctx.bytes(), true))
    }

    fn binary_data(&mut self, _: &Searcher, _: u64) -> std::io::Result<bool> {
        self.binary = true;
        Ok(false)
    }
}

pub(crate) fn grep(base: &Path, args: &GrepArgs<'_>) -> Result<serde_json::Value> {
    let root = Root::new("grep", base, args.path)?;
    let default_cap = if args.mode == GrepMode::Content {
        CONTENT_CAP
    } else {
        LIST_CAP
    };
    let cap = cap("grep", args.max_results, default_cap)?;
    let matcher = RegexMatcherBuilder::new()
        .case_insensitive(args.ignore_case)
        .fixed_strings(args.fixed_strings)
        .line_terminator(Some(b'\n'))
        .build(args.pattern)
        .map_err(|e| FileError::invalid(format!("grep: invalid regex `{}`: {e}", args.pattern)))?;
    let context = args.context.unwrap_or(0) as usize;
    let mut searcher = SearcherBuilder::new();
    searcher
        .line_number(true)
        .binary_detection(BinaryDetection::quit(b'\x00'))
        .before_context(context)
        .after_context(context);
    let results: Mutex<Vec<Found>> = Mutex::new(Vec::new());
    let stopped = Mutex::new(false);
    root.walker("grep", args.glob)?.build_parallel().run(|| {
        let matcher: RegexMatcher = matcher.clone();
        let mut searcher = searcher.build();
        let (root, results, stopped) = (&root, &results, &stopped);
        let mode = args.mode;
        Box::new(move |entry| {
            let Ok(entry) = entry else {
                return WalkState::Continue;
            };
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                return WalkState::Continue;
            }
            let mut sink = Collect {
                mode,
                cap,
                count: 0,
                lines: Vec::new(),
                binary: false,
                stopped: false,
            };
            // An unreadable file is skipped, as rg skips it (with a warning we have no place for).
            if searcher
                .search_path(&matcher, entry.path(), &mut sink)
                .is_err()
            {
                return WalkState::Continue;
            }
            // rg squashes the matches of a file found to be binary when listing or counting.
            let keep = sink.count > 0 && !(sink.binary && mode != GrepMode::Content);
            if keep {
                if sink.stopped
                    && let Ok(mut s) = stopped.lock()
                {
                    *s = true;
                }
                let found = Found {
                    path: root.relative(entry.path()),
                    count: sink.count,
                    lines: sink.lines,
                };
                if let Ok(mut r) = results.lock() {
                    r.push(found);
                }
            }
            WalkState::Continue
        })
    });
    let poisoned = || FileError::new(FileErrorKind::Io, "grep: a search thread panicked");
    let mut results = results.into_inner().map_err(|_| poisoned())?;
    let stopped = stopped.into_inner().map_err(|_| poisoned())?;
    results.sort_by(|a, b| a.path.cmp(&b.path));
    let cap = cap as usize;
    let answer = match args.mode {
        GrepMode::FilesWithMatches => {
            let truncated = results.len() > cap;
            let files: Vec<String> = results
                .iter()
                .take(cap)
                .map(|f| paths::display_relative(&f.path))
                .collect();
            json!({"files": files, "truncated": truncated})
        }
        GrepMode::Count => {
            let truncated = results.len() > cap;
            let counts: Vec<serde_json::Value> = results
                .iter()
                .take(cap)
                .map(|f| json!({"path": paths::display_relative(&f.path), "count": f.count}))
                .collect();
            json!({"counts": counts, "truncated": truncated})
        }
        GrepMode::Content => {
            let mut matches = Vec::new();
            let mut truncated = stopped;
            'files: for f in &results {
                let shown = paths::display_relative(&f.path);
                for line in &f.lines {
                    if matches.len() >= cap {
                        truncated = true;
                        break 'files;
                    }
                    let mut m = json!({"path": shown, "line": line.number, "text": line.text});
                    if line.context {
                        m["context"] = json!(true);
                    }
                    matches.push(m);
                }
            }
            json!({"matches": matches, "truncated": truncated})
        }
    };
    Ok(answer)
}

pub(crate) fn glob(base: &Path, pattern: &str, path: Option<&str>) -> Result<serde_json::Value> {
    if pattern.is_empty() {
        return Err(FileError::invalid(
            "glob_files: `pattern` is empty; give a glob such as `**/*.rs`",
        ));
    }
    let root = Root::new("glob_files", base, path)?;
    let files: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
    root.walker("glob_files", Some(pattern))?
        .build_parallel()
        .run(|| {
            let (root, files) = (&root, &files);
            Box::new(move |entry| {
                if let Ok(entry) = entry
                    && entry.file_type().is_some_and(|t| t.is_file())
                    && let Ok(mut f) = files.lock()
                {
                    f.push(root.relative(entry.path()));
                }
                WalkState::Continue
            })
        });
    let mut files = files
        .into_inner()
        .map_err(|_| FileError::new(FileErrorKind::Io, "glob_files: a walk thread panicked"))?;
    files.sort();
    let truncated = files.len() as u64 > LIST_CAP;
    let files: Vec<String> = files
        .iter()
        .take(LIST_CAP as usize)
        .map(|p| paths::display_relative(p))
        .collect();
    Ok(json!({"files": files, "truncated": truncated}))
}
