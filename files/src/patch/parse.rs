//! The codex patch grammar:
//!
//! ```text
//! *** Begin Patch
//! *** Add File: path        then `+` lines
//! *** Delete File: path
//! *** Update File: path     then optionally `*** Move to: path`, then chunks:
//! @@ [context line]         then ` ` context, `-` removed, `+` added lines
//! *** End of File           (the chunk must match at the end of the file)
//! *** End Patch
//! ```
//!
//! Marker lines may carry surrounding whitespace, the patch may use CRLF and may lack its
//! final newline: models produce all of these.

use crate::error::{FileError, FileErrorKind, Result};

const BEGIN: &str = "*** Begin Patch";
const END: &str = "*** End Patch";
const ADD: &str = "*** Add File: ";
const DELETE: &str = "*** Delete File: ";
const UPDATE: &str = "*** Update File: ";
const MOVE_TO: &str = "*** Move to: ";
const END_OF_FILE: &str = "*** End of File";

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Hunk {
    Add {
        path: String,
        contents: String,
    },
    Delete {
        path: String,
    },
    Update {
        path: String,
        move_to: Option<String>,
        chunks: Vec<Chunk>,
    },
}

/// One `@@` section of an update.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Chunk {
    /// The line after `@@ `: seek forward to it before matching `old`.
    pub(crate) context: Option<String>,
    pub(crate) old: Vec<String>,
    pub(crate) new: Vec<String>,
    /// Ended by `*** End of File`: `old` must match at the end of the file.
    pub(crate) eof: bool,
}

fn invalid(line_no: usize, message: impl std::fmt::Display) -> FileError {
    FileError::new(
        FileErrorKind::InvalidPatch,
        format!("apply_patch: invalid patch at line {line_no}: {message}"),
    )
}

fn is_header(line: &str) -> bool {
    let t = line.trim();
    t == END || t.starts_with(ADD) || t.starts_with(DELETE) || t.starts_with(UPDATE)
}

fn header_path<'a>(line: &'a str, prefix: &str, line_no: usize) -> Result<Option<&'a str>> {
    match line.trim().strip_prefix(prefix) {
        Some(p) if p.trim().is_empty() => Err(invalid(
            line_no,
            format!("`{}` needs a path", prefix.trim()),
        )),
        Some(p) => Ok(Some(p.trim())),
        None => Ok(None),
    }
}

pub(crate) fn parse(patch: &str) -> Result<Vec<Hunk>> {
    let lines: Vec<&str> = patch
        .trim()
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect();
    if lines.first().map(|l| l.trim()) != Some(BEGIN) {
        return Err(invalid(1, format!("the first line must be `{BEGIN}`")));
    }
    if lines.len() < 2 || lines.last().map(|l| l.trim()) != Some(END) {
        return Err(invalid(
            lines.len(),
            format!("the last line must be `{END}`"),
        ));
    }
    let body = &lines[1..lines.len() - 1];
    let mut hunks = Vec::new();
    let mut i = 0;
    while i < body.len() {
        let line = body[i];
        let line_no = i + 2;
        if line.trim().is_empty() {
            i += 1;
            continue;
        }
        if let Some(path) = header_path(line, ADD, line_no)? {
            i += 1;
            let mut contents = String::new();
            while i < body.len() {
                let Some(added) = body[i].strip_prefix('+') else {
                    break;
                };
                contents.push_str(added);
                contents.push('\n');
                i += 1;
            }
            hunks.push(Hunk::Add {
                path: path.to_string(),
                contents,
            });
        } else if let Some(path) = header_path(line, DELETE, line_no)? {
            hunks.push(Hunk::Delete {
                path: path.to_string(),
            });
            i += 1;
        } else if let Some(path) = header_path(line, UPDATE, line_no)? {
            i += 1;
            let mut move_to = None;
            if let Some(line) = body.get(i)
                && let Some(dest) = header_path(line, MOVE_TO, i + 2)?
            {
                move_to = Some(dest.to_string());
                i += 1;
            }
            let chunks = parse_chunks(body, &mut i, path)?;
            if chunks.is_empty() && move_to.is_none() {
                return Err(invalid(
                    line_no,
                    format!(
                        "`Update File: {path}` has no chunks; add `@@` sections with `-`/`+` lines"
                    ),
                ));
            }
            hunks.push(Hunk::Update {
                path: path.to_string(),
                move_to,
                chunks,
            });
        } else {
            return Err(invalid(
                line_no,
                format!(
                    "`{}` is not a hunk header; expected `*** Add File: `, `*** Delete File: ` or `*** Update File: `",
                    line.trim()
                ),
            ));
        }
    }
    if hunks.is_empty() {
        return Err(FileError::new(
            FileErrorKind::InvalidPatch,
            "apply_patch: the patch has no operations; put `*** Add File:`, `*** Update File:` or `*** Delete File:` sections between the markers",
        ));
    }
    Ok(hunks)
}

/// Chunks of one update, up to the next hunk header.
fn parse_chunks(body: &[&str], i: &mut usize, path: &str) -> Result<Vec<Chunk>> {
    let mut chunks: Vec<Chunk> = Vec::new();
    let mut current: Option<Chunk> = None;
    let close = |c: Option<Chunk>, chunks: &mut Vec<Chunk>, line_no: usize| -> Result<()> {
        if let Some(c) = c {
            if c.old.is_empty() && c.new.is_empty() {
                return Err(invalid(
                    line_no,
                    format!(
                        "an empty chunk in `Update File: {path}`; a chunk needs ` `, `-` or `+` lines"
                    ),
                ));
            }
            chunks.push(c);
        }
        Ok(())
    };
    while *i < body.len() {
        let line = body[*i];
        let line_no = *i + 2;
        if is_header(line) {
            break;
        }
        let trimmed = line.trim();
        if trimmed == "@@" || trimmed.starts_with("@@ ") {
            close(current.take(), &mut chunks, line_no)?;
            // Surrounding whitespace of the context does not matter: seeking ignores it.
            let context = trimmed.strip_prefix("@@ ").map(|c| c.trim().to_string());
            current = Some(Chunk {
                context,
                ..Chunk::default()
            });
        } else if trimmed == END_OF_FILE {
            let Some(mut c) = current.take() else {
                return Err(invalid(line_no, "`*** End of File` outside a chunk"));
            };
            c.eof = true;
            close(Some(c), &mut chunks, line_no)?;
        } else {
            // The first chunk may omit its `@@` line (codex allows it).
            let chunk = match current.as_mut() {
                Some(c) => c,
                None if chunks.is_empty() => current.insert(Chunk::default()),
                None => {
                    return Err(invalid(
                        line_no,
                        format!("`{line}` after `*** End of File`; start a new chunk with `@@`"),
                    ));
                }
            };
            if line.is_empty() {
                chunk.old.push(String::new());
                chunk.new.push(String::new());
            } else if let Some(rest) = line.strip_prefix(' ') {
                chunk.old.push(rest.to_string());
                chunk.new.push(rest.to_string());
            } else if let Some(rest) = line.strip_prefix('-') {
                chunk.old.push(rest.to_string());
            } else if let Some(rest) = line.strip_prefix('+') {
                chunk.new.push(rest.to_string());
            } else {
                return Err(invalid(
                    line_no,
                    format!(
                        "`{line}` in `Update File: {path}` must start with ' ' (context), '-' (remove) or '+' (add)"
                    ),
                ));
            }
        }
        *i += 1;
    }
    close(current.take(), &mut chunks, *i + 2)?;
    Ok(chunks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_all_hunk_kinds() {
        let p = "  *** Begin Patch \r\n*** Add File: a.txt\r\n+x\r\n*** Delete File: b\r\n*** Update File: c\r\n*** Move to: d/e\r\n@@ fn main\r\n a\r\n-b\r\n+c\r\n\r\n*** End of File\r\n *** End Patch";
        let hunks = parse(p).unwrap();
        assert_eq!(
            hunks,
            vec![
                Hunk::Add {
                    path: "a.txt".into(),
                    contents: "x\n".into()
                },
                Hunk::Delete { path: "b".into() },
                Hunk::Update {
                    path: "c".into(),
                    move_to: Some("d/e".into()),
                    chunks: vec![Chunk {
                        context: Some("fn main".into()),
                        old: vec!["a".into(), "b".into(), "".into()],
                        new: vec!["a".into(), "c".into(), "".into()],
                        eof: true,
                    }],
                },
            ]
        );
    }

    proptest! {
        // The patch comes from a model: no input may panic the parser.
        #[test]
        fn never_panics(body in "(\\*\\*\\* (Add|Update|Delete) File: [a-z]{0,3}|@@.{0,4}|[ +-].{0,4}|\\*\\*\\* End of File|\\*\\*\\* Move to: x|.{0,6})(\r?\n(\\*\\*\\* (Add|Update|Delete) File: [a-z]{0,3}|@@.{0,4}|[ +-].{0,4}|\\*\\*\\* End of File|.{0,6})){0,8}") {
            let _ = parse(&format!("*** Begin Patch\n{body}\n*** End Patch"));
            let _ = parse(&body);
        }
    }
}
