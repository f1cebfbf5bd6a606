//! write_file and edit_file: whole-file replacement and exact string replacement, both atomic
//! and both under the file's lock so that concurrent edits never lose a write.

use crate::atomic;
use crate::error::{FileError, FileErrorKind, Result};
use crate::lock;
use crate::nearest;
use crate::paths;
use serde_json::json;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

pub(crate) fn write(base: &Path, path: &str, content: &str) -> Result<serde_json::Value> {
    let full = paths::checked("write_file", base, path)?;
    let target = paths::follow_links(&full);
    let io_err = |e: std::io::Error| FileError::io("write_file", Path::new(path), &e);
    if let Some(parent) = target.parent()
        && !parent.as_os_str().is_empty()
    {
        std::fs::create_dir_all(parent).map_err(io_err)?;
    }
    let _lock = lock::lock_existing(&target).map_err(io_err)?;
    let mode = match std::fs::metadata(&target) {
        Ok(m) if m.is_dir() => {
            return Err(FileError::new(
                FileErrorKind::IsDirectory,
                format!("write_file: {path} is a directory; give a file path"),
            ));
        }
        Ok(m) => Some(m.permissions().mode()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_err(e)),
    };
    atomic::replace(&target, content.as_bytes(), mode).map_err(io_err)?;
    Ok(json!({"path": path, "bytes": content.len(), "created": mode.is_none()}))
}

pub(crate) fn edit(
    base: &Path,
    path: &str,
    old: &str,
    new: &str,
    replace_all: bool,
) -> Result<serde_json::Value> {
    let full = paths::checked("edit_file", base, path)?;
    if old.is_empty() {
        return Err(FileError::invalid(format!(
            "edit_file: `old_string` is empty for {path}; give the exact text to replace (use write_file to create a file)"
        )));
    }
    if old == new {
        return Err(FileError::invalid(format!(
            "edit_file: `old_string` and `new_string` are the same for {path}; nothing to change"
        )));
    }
    let target = paths::follow_links(&full);
    let io_err = |e: std::io::Error| FileError::io("edit_file", Path::new(path), &e);
    let meta = std::fs::metadata(&target).map_err(io_err)?;
    if meta.is_dir() {
        return Err(FileError::new(
            FileErrorKind::IsDirectory,
            format!("edit_file: {path} is a directory; give a file path"),
        ));
    }
    // Held through read, replace and rename: a second edit waits and then sees our result.
    let _lock = lock::lock_existing(&target).map_err(io_err)?;
    let bytes = std::fs::read(&target).map_err(io_err)?;
    if bytes.iter().take(crate::read::SNIFF_BYTES).any(|&b| b == 0) {
        return Err(FileError::new(
            FileErrorKind::Binary,
            format!("edit_file: {path} is a binary file; edit_file changes text files only"),
        ));
    }
    let text = String::from_utf8(bytes).map_err(|_| {
        FileError::invalid(format!(
            "edit_file: {path} is not valid UTF-8; edit it with a script instead"
        ))
    })?;
    let (updated, replacements) = replace_in(&text, old, new, replace_all, path)?;
    let mode = std::fs::metadata(&target)
        .map_err(io_err)?
        .permissions()
        .mode();
    atomic::replace(&target, updated.as_bytes(), Some(mode)).map_err(io_err)?;
    Ok(json!({"path": path, "replacements": replacements}))
}

/// The replacement itself, on text in memory. Retries with CRLF when the file uses CRLF and
/// the caller wrote bare LF (models rarely reproduce `\r`).
fn replace_in(
    text: &str,
    old: &str,
    new: &str,
    replace_all: bool,
    path: &str,
) -> Result<(String, usize)> {
    let mut count = text.matches(old).count();
    let (mut old, mut new) = (old.to_string(), new.to_string());
    if count == 0 && text.contains("\r\n") && old.contains('\n') && !old.contains("\r\n") {
        let crlf_old = old.replace('\n', "\r\n");
        let crlf_count = text.matches(crlf_old.as_str()).count();
        if crlf_count > 0 {
            old = crlf_old;
            new = new.replace("\r\n", "\n").replace('\n', "\r\n");
            count = crlf_count;
        }
    }
    match count {
        0 => {
            let lines: Vec<&str> = text.lines().collect();
            let near = nearest::nearest_lines(&lines, nearest::first_non_blank(&old));
            Err(FileError::new(
                FileErrorKind::NoMatch,
                format!(
                    "edit_file: `old_string` was not found in {path}; it must match exactly (whitespace included). Nearest lines:\n{near}"
                ),
            ))
        }
        1 => Ok((text.replacen(old.as_str(), &new, 1), 1)),
        n if replace_all => Ok((text.replace(old.as_str(), &new), n)),
        n => Err(FileError::new(
            FileErrorKind::Ambiguous,
            format!(
                "edit_file: `old_string` occurs {n} times in {path}; give more context or set replace_all"
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crlf_retry_converts_new_too() {
        let (out, n) = replace_in("a\r\nb\r\nc\r\n", "a\nb", "x\ny", false, "f").unwrap();
        assert_eq!((out.as_str(), n), ("x\r\ny\r\nc\r\n", 1));
    }

    #[test]
    fn counts() {
        let e = replace_in("a a a", "a", "b", false, "f").unwrap_err();
        assert_eq!(e.kind, FileErrorKind::Ambiguous);
        assert!(e.message.contains("3 times"), "{}", e.message);
        assert_eq!(
            replace_in("a a a", "a", "b", true, "f").unwrap(),
            ("b b b".into(), 3)
        );
    }
}
