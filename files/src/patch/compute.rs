//! The new text of an updated file, computed in memory from its chunks.

use super::parse::Chunk;
use super::seek::seek;
use crate::error::{FileError, FileErrorKind, Result};
use crate::nearest;

/// Applies `chunks` to `text`. Line endings follow the file (a CRLF file stays CRLF) and the
/// result ends with a newline, as codex writes it.
pub(crate) fn apply_chunks(text: &str, chunks: &[Chunk], path: &str) -> Result<String> {
    let crlf = uses_crlf(text);
    let mut lines: Vec<String> = text
        .split('\n')
        .map(|l| {
            if crlf {
                l.strip_suffix('\r').unwrap_or(l)
            } else {
                l
            }
            .to_string()
        })
        .collect();
    if lines.last().is_some_and(String::is_empty) {
        lines.pop();
    }
    let mut replacements: Vec<(usize, usize, Vec<String>)> = Vec::new();
    let mut index = 0;
    for (n, chunk) in chunks.iter().enumerate() {
        let failed = |what: String, near: &str| {
            FileError::new(
                FileErrorKind::PatchFailed,
                format!(
                    "apply_patch: {path}, chunk {}: {what}; nothing was changed. Nearest lines in the file:\n{}",
                    n + 1,
                    nearest::nearest_lines(&lines, near)
                ),
            )
        };
        if let Some(context) = &chunk.context {
            match seek(&lines, std::slice::from_ref(context), index, false) {
                Some(i) => index = i + 1,
                None => {
                    return Err(failed(
                        format!("the `@@ {context}` line was not found (after line {index})"),
                        context,
                    ));
                }
            }
        }
        if chunk.old.is_empty() {
            // Only additions: after the `@@` line if there is one, else at the end.
            let at = if chunk.context.is_some() && !chunk.eof {
                index
            } else {
                lines.len()
            };
            replacements.push((at, 0, chunk.new.clone()));
            index = at;
            continue;
        }
        let mut old = &chunk.old[..];
        let mut new = &chunk.new[..];
        let mut found = seek(&lines, old, index, chunk.eof);
        // A trailing blank line in a chunk is often an artefact of how the patch was written.
        if found.is_none() && old.last().is_some_and(String::is_empty) {
            old = &old[..old.len() - 1];
            if new.last().is_some_and(String::is_empty) {
                new = &new[..new.len() - 1];
            }
            found = seek(&lines, old, index, chunk.eof);
        }
        let Some(start) = found else {
            let where_ = if chunk.eof {
                " at the end of the file"
            } else {
                ""
            };
            return Err(failed(
                format!(
                    "these lines were not found{where_}:\n{}\n(context and `-` lines must match the file)",
                    chunk.old.join("\n")
                ),
                nearest::first_non_blank(&chunk.old.join("\n")),
            ));
        };
        replacements.push((start, old.len(), new.to_vec()));
        index = start + old.len();
    }
    for (start, len, new) in replacements.into_iter().rev() {
        lines.splice(start..start + len, new);
    }
    if !lines.last().is_some_and(String::is_empty) {
        lines.push(String::new());
    }
    Ok(lines.join(if crlf { "\r\n" } else { "\n" }))
}

/// A file is CRLF when its first line ends with CRLF.
fn uses_crlf(text: &str) -> bool {
    text.find('\n').is_some_and(|i| text[..i].ends_with('\r'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(ctx: Option<&str>, old: &[&str], new: &[&str]) -> Chunk {
        Chunk {
            context: ctx.map(str::to_string),
            old: old.iter().map(|s| s.to_string()).collect(),
            new: new.iter().map(|s| s.to_string()).collect(),
            eof: false,
        }
    }

    #[test]
    fn chunks_apply_in_order() {
        let text = "a\nb\nc\na\nb\n";
        let out = apply_chunks(text, &[chunk(Some("c"), &["a"], &["A"])], "f").unwrap();
        assert_eq!(out, "a\nb\nc\nA\nb\n");
        let out = apply_chunks("x\r\ny", &[chunk(None, &["y"], &["z", "w"])], "f").unwrap();
        assert_eq!(out, "x\r\nz\r\nw\r\n");
        let out = apply_chunks("f()\ng()\n", &[chunk(Some("f()"), &[], &["  body"])], "f").unwrap();
        assert_eq!(out, "f()\n  body\ng()\n");
    }

    #[test]
    fn failure_names_chunk_and_nearest() {
        let e = apply_chunks(
            "alpha\nbeta\n",
            &[chunk(None, &["alpha"], &["b"]), chunk(None, &["betx"], &[])],
            "f.rs",
        )
        .unwrap_err();
        assert_eq!(e.kind, FileErrorKind::PatchFailed);
        assert!(e.message.contains("f.rs, chunk 2"), "{}", e.message);
        assert!(e.message.contains(">    2| beta"), "{}", e.message);
    }
}
