//! read_file: a window of lines, streamed so that a window of a huge file costs little memory.

use crate::error::{FileError, FileErrorKind, Result};
use crate::paths;
use serde_json::json;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::Path;

const DEFAULT_LIMIT: u64 = 2000;
/// Longer lines are cut (minified files would otherwise flood the answer).
pub(crate) const MAX_LINE_BYTES: usize = 64 * 1024;
const MAX_CONTENT_BYTES: usize = 4 * 1024 * 1024;
/// How much of the start of a file is checked for NUL, as git and ripgrep do.
pub(crate) const SNIFF_BYTES: usize = 8 * 1024;

/// The window one read answers with.
#[derive(Debug, Default, PartialEq, Eq)]
struct Window {
    content: String,
    end_line: u64,
    total_lines: u64,
    truncated: bool,
}

pub(crate) fn read(
    base: &Path,
    path: &str,
    offset: Option<u64>,
    limit: Option<u64>,
) -> Result<serde_json::Value> {
    let full = paths::checked("read_file", base, path)?;
    let offset = offset.unwrap_or(1);
    if offset == 0 {
        return Err(FileError::invalid(format!(
            "read_file: `offset` is 1-based (the first line is 1), got 0 for {path}"
        )));
    }
    let limit = limit.unwrap_or(DEFAULT_LIMIT);
    let io_err = |e: std::io::Error| FileError::io("read_file", Path::new(path), &e);
    let meta = std::fs::metadata(&full).map_err(io_err)?;
    if meta.is_dir() {
        return Err(FileError::new(
            FileErrorKind::IsDirectory,
            format!("read_file: {path} is a directory; use list_files to see its entries"),
        ));
    }
    let mut file = File::open(&full).map_err(io_err)?;
    if is_binary(&mut file).map_err(io_err)? {
        return Err(FileError::new(
            FileErrorKind::Binary,
            format!(
                "read_file: {path} is a binary file (it has a NUL byte); use file_info or a script to inspect it"
            ),
        ));
    }
    file.seek(SeekFrom::Start(0)).map_err(io_err)?;
    let window =
        read_window(BufReader::with_capacity(256 * 1024, file), offset, limit).map_err(io_err)?;
    Ok(json!({
        "path": path,
        "content": window.content,
        "start_line": offset,
        "end_line": window.end_line,
        "total_lines": window.total_lines,
        "truncated": window.truncated,
    }))
}

/// True when the first 8 KiB hold a NUL.
pub(crate) fn is_binary(file: &mut impl Read) -> std::io::Result<bool> {
    let head = read_head(file)?;
    Ok(head.contains(&0))
}

/// Up to the first 8 KiB of a file (short reads retried).
pub(crate) fn read_head(file: &mut impl Read) -> std::io::Result<Vec<u8>> {
    let mut head = Vec::with_capacity(SNIFF_BYTES);
    file.take(SNIFF_BYTES as u64).read_to_end(&mut head)?;
    Ok(head)
}

/// One pass over the file: lines `offset..offset+limit` are collected (each capped), every
/// line is counted. Past the window only newlines are counted, chunk by chunk.
fn read_window(mut reader: impl BufRead, offset: u64, limit: u64) -> std::io::Result<Window> {
    let window_end = offset.saturating_add(limit); // first line not wanted
    let mut w = Window::default();
    let mut line_no: u64 = 1;
    let mut in_line = false; // bytes of line `line_no` have been seen
    let mut current: Vec<u8> = Vec::new();
    let mut line_cut = false;
    let mut collecting = true;
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            break;
        }
        let len = buf.len();
        if !collecting || line_no >= window_end {
            let newlines = count_newlines(buf) as u64;
            line_no += newlines;
            in_line = buf.last() != Some(&b'\n');
            reader.consume(len);
            continue;
        }
        let mut rest = buf;
        while !rest.is_empty() {
            let (segment, ends_line) = match rest.iter().position(|&b| b == b'\n') {
                Some(i) => (&rest[..=i], true),
                None => (rest, false),
            };
            rest = &rest[segment.len()..];
            if collecting && line_no >= offset && line_no < window_end {
                push_capped(&mut current, segment, ends_line, &mut line_cut);
            }
            if ends_line {
                if collecting && line_no >= offset && line_no < window_end {
                    collecting = finish_line(&mut w, &mut current, line_no);
                }
                line_no += 1;
                in_line = false;
            } else {
                in_line = true;
            }
        }
        reader.consume(len);
    }
    // A last line without a newline still counts (and may be in the window).
    if in_line {
        if collecting && line_no >= offset && line_no < window_end {
            finish_line(&mut w, &mut current, line_no);
        }
        w.total_lines = line_no;
    } else {
        w.total_lines = line_no - 1;
    }
    if w.end_line == 0 {
        // Nothing included: an empty file or an offset past the end.
        w.end_line = offset - 1;
    }
    w.truncated = w.truncated || line_cut || w.total_lines > w.end_line;
    Ok(w)
}

/// Appends a piece of a line, keeping at most 64 KiB of it (plus its line ending).
fn push_capped(current: &mut Vec<u8>, segment: &[u8], ends_line: bool, cut: &mut bool) {
    let (body, ending) = if ends_line {
        let body = &segment[..segment.len() - 1];
        match body.strip_suffix(b"\r") {
            Some(b) => (b, &segment[b.len()..]),
            None => (body, &segment[body.len()..]),
        }
    } else {
        (segment, &segment[segment.len()..])
    };
    let room = (MAX_LINE_BYTES + 4).saturating_sub(current.len());
    if body.len() > room {
        *cut = true;
    }
    current.extend_from_slice(&body[..body.len().min(room)]);
    current.extend_from_slice(ending);
}

/// Moves the collected line into the answer. Returns false when the 4 MiB budget is spent
/// (the line is then left out and collection stops).
fn finish_line(w: &mut Window, current: &mut Vec<u8>, line_no: u64) -> bool {
    let mut text = String::from_utf8_lossy(current).into_owned();
    current.clear();
    let body_len = text.trim_end_matches(['\n', '\r']).len();
    if body_len > MAX_LINE_BYTES {
        let ending = text[body_len..].to_string();
        let mut cut = MAX_LINE_BYTES;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str(&ending);
        w.truncated = true;
    }
    if w.content.len() + text.len() > MAX_CONTENT_BYTES {
        w.truncated = true;
        return false;
    }
    w.content.push_str(&text);
    w.end_line = line_no;
    true
}

fn count_newlines(buf: &[u8]) -> usize {
    buf.iter().filter(|&&b| b == b'\n').count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn win(text: &str, offset: u64, limit: u64) -> Window {
        // A tiny buffer exercises lines split across chunks.
        read_window(BufReader::with_capacity(3, text.as_bytes()), offset, limit).unwrap()
    }

    #[test]
    fn windows() {
        let w = win("a\nb\r\nc", 1, 2000);
        assert_eq!(w.content, "a\nb\r\nc");
        assert_eq!((w.end_line, w.total_lines, w.truncated), (3, 3, false));
        let w = win("a\nb\nc\n", 2, 1);
        assert_eq!(w.content, "b\n");
        assert_eq!((w.end_line, w.total_lines, w.truncated), (2, 3, true));
        let w = win("", 1, 10);
        assert_eq!(w, Window::default());
        let w = win("a\n", 5, 10);
        assert_eq!((w.content.as_str(), w.end_line, w.total_lines), ("", 4, 1));
        let w = win("a\n\n", 2, 10);
        assert_eq!(
            (w.content.as_str(), w.end_line, w.total_lines),
            ("\n", 2, 2)
        );
    }

    #[test]
    fn long_lines_are_cut_on_a_char_boundary() {
        let long = "é".repeat(MAX_LINE_BYTES); // 2 bytes each
        let text = format!("{long}\nx\n");
        let w = read_window(BufReader::new(text.as_bytes()), 1, 10).unwrap();
        assert!(w.truncated);
        let first = w.content.lines().next().unwrap();
        assert_eq!(first.len(), MAX_LINE_BYTES);
        assert!(w.content.ends_with("\nx\n"));
        assert_eq!(w.end_line, 2);
    }

    #[test]
    fn content_budget_stops_at_a_whole_line() {
        let line = "x".repeat(60 * 1024) + "\n";
        let text = line.repeat(100); // 6 MB
        let w = read_window(BufReader::new(text.as_bytes()), 1, 2000).unwrap();
        assert!(w.truncated);
        assert!(w.content.len() <= MAX_CONTENT_BYTES);
        assert_eq!(w.content.len() as u64, w.end_line * line.len() as u64);
        assert_eq!(w.total_lines, 100);
    }
}
