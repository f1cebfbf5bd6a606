//! move_file, delete_file, file_info and list_files: single-step operations on the tree.

use crate::error::{FileError, FileErrorKind, Result};
use crate::paths;
use crate::read;
use serde_json::json;
use std::fs::{self, Metadata};
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

const LIST_CAP: usize = 5000;

pub(crate) fn move_file(
    base: &Path,
    from: &str,
    to: &str,
    overwrite: bool,
) -> Result<serde_json::Value> {
    let src = paths::checked("move_file", base, from)?;
    let dst = paths::checked("move_file", base, to)?;
    fs::symlink_metadata(&src).map_err(|e| FileError::io("move_file", Path::new(from), &e))?;
    let dst_err = |e: io::Error| FileError::io("move_file", Path::new(to), &e);
    match fs::symlink_metadata(&dst) {
        Ok(_) if !overwrite => {
            return Err(FileError::new(
                FileErrorKind::Exists,
                format!("move_file: {to} already exists; set overwrite to replace it"),
            ));
        }
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(dst_err(e)),
    }
    if let Some(parent) = dst.parent() {
        fs::create_dir_all(parent).map_err(dst_err)?;
    }
    match fs::rename(&src, &dst) {
        Ok(()) => {}
        // Another filesystem (a bind mount, say): copy, then remove the original.
        Err(e) if e.kind() == io::ErrorKind::CrossesDevices => {
            copy_tree(&src, &dst).map_err(dst_err)?;
            remove_any(&src).map_err(|e| FileError::io("move_file", Path::new(from), &e))?;
        }
        Err(e) => return Err(dst_err(e)),
    }
    Ok(json!({"from": from, "to": to}))
}

/// Copies a file, symlink or directory tree (links copied as links, modes kept).
fn copy_tree(src: &Path, dst: &Path) -> io::Result<()> {
    let meta = fs::symlink_metadata(src)?;
    if meta.file_type().is_symlink() {
        if fs::symlink_metadata(dst).is_ok() {
            remove_any(dst)?;
        }
        std::os::unix::fs::symlink(fs::read_link(src)?, dst)
    } else if meta.is_dir() {
        fs::create_dir_all(dst)?;
        for entry in fs::read_dir(src)? {
            let entry = entry?;
            copy_tree(&entry.path(), &dst.join(entry.file_name()))?;
        }
        fs::set_permissions(dst, meta.permissions())
    } else {
        fs::copy(src, dst).map(|_| ())
    }
}

fn remove_any(path: &Path) -> io::Result<()> {
    if fs::symlink_metadata(path)?.is_dir() {
        fs::remove_dir_all(path)
    } else {
        fs::remove_file(path)
    }
}

pub(crate) fn delete(base: &Path, path: &str, recursive: bool) -> Result<serde_json::Value> {
    let full = paths::checked("delete_file", base, path)?;
    let io_err = |e: io::Error| FileError::io("delete_file", Path::new(path), &e);
    let meta = fs::symlink_metadata(&full).map_err(io_err)?;
    let kind = if meta.file_type().is_symlink() {
        fs::remove_file(&full).map_err(io_err)?;
        "symlink"
    } else if meta.is_dir() {
        if !recursive {
            return Err(FileError::new(
                FileErrorKind::IsDirectory,
                format!(
                    "delete_file: {path} is a directory; set recursive to delete it and everything in it"
                ),
            ));
        }
        fs::remove_dir_all(&full).map_err(io_err)?;
        "directory"
    } else {
        fs::remove_file(&full).map_err(io_err)?;
        "file"
    };
    Ok(json!({"path": path, "kind": kind}))
}

pub(crate) fn kind_name(meta: &Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_symlink() {
        "symlink"
    } else if t.is_dir() {
        "directory"
    } else if t.is_file() {
        "file"
    } else {
        "other"
    }
}

pub(crate) fn info(base: &Path, path: &str) -> Result<serde_json::Value> {
    let full = paths::checked("file_info", base, path)?;
    let io_err = |e: io::Error| FileError::io("file_info", Path::new(path), &e);
    let meta = fs::symlink_metadata(&full).map_err(io_err)?;
    let modified_ms = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| d.as_millis() as u64);
    let kind = kind_name(&meta);
    let mime = match kind {
        "directory" => "inode/directory".to_string(),
        "symlink" => "inode/symlink".to_string(),
        _ => mime_of(&full).map_err(io_err)?,
    };
    Ok(json!({
        "path": path,
        "kind": kind,
        "size": meta.len(),
        "mode": format!("{:04o}", meta.permissions().mode() & 0o7777),
        "modified_ms": modified_ms,
        "mime": mime,
    }))
}

/// By extension first; otherwise text if the head is UTF-8 without NUL.
fn mime_of(path: &Path) -> io::Result<String> {
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    let by_ext = match ext.as_str() {
        "txt" => Some("text/plain"),
        "md" => Some("text/markdown"),
        "rs" => Some("text/x-rust"),
        "py" => Some("text/x-python"),
        "js" => Some("text/javascript"),
        "ts" => Some("text/typescript"),
        "json" => Some("application/json"),
        "toml" => Some("application/toml"),
        "yaml" | "yml" => Some("application/yaml"),
        "html" => Some("text/html"),
        "css" => Some("text/css"),
        "c" => Some("text/x-c"),
        "h" => Some("text/x-c"),
        "sh" => Some("application/x-sh"),
        "png" => Some("image/png"),
        "jpg" => Some("image/jpeg"),
        "gif" => Some("image/gif"),
        "pdf" => Some("application/pdf"),
        "zip" => Some("application/zip"),
        "gz" => Some("application/gzip"),
        "tar" => Some("application/x-tar"),
        _ => None,
    };
    if let Some(m) = by_ext {
        return Ok(m.to_string());
    }
    let head = read::read_head(&mut fs::File::open(path)?)?;
    let text = !head.contains(&0) && utf8_prefix_ok(&head);
    Ok(if text {
        "text/plain"
    } else {
        "application/octet-stream"
    }
    .to_string())
}

/// Valid UTF-8, allowing a character cut by the 8 KiB boundary.
fn utf8_prefix_ok(head: &[u8]) -> bool {
    match std::str::from_utf8(head) {
        Ok(_) => true,
        Err(e) => e.error_len().is_none() && head.len() - e.valid_up_to() < 4,
    }
}

pub(crate) fn list(
    base: &Path,
    path: Option<&str>,
    depth: Option<u32>,
) -> Result<serde_json::Value> {
    let shown = path.unwrap_or(".");
    let root = paths::checked("list_files", base, shown)?;
    let depth = depth.unwrap_or(1);
    if depth == 0 {
        return Err(FileError::invalid(
            "list_files: `depth` must be at least 1 (1 = the directory's own entries)",
        ));
    }
    let io_err = |e: io::Error| FileError::io("list_files", Path::new(shown), &e);
    let meta = fs::metadata(&root).map_err(io_err)?;
    if !meta.is_dir() {
        return Err(FileError::new(
            FileErrorKind::NotDirectory,
            format!("list_files: {shown} is not a directory; use file_info for a file"),
        ));
    }
    let mut entries: Vec<(PathBuf, Metadata)> = Vec::new();
    let mut truncated = false;
    collect(&root, Path::new(""), depth, &mut entries, &mut truncated).map_err(io_err)?;
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let entries: Vec<serde_json::Value> = entries
        .iter()
        .map(|(p, m)| json!({"path": paths::display_relative(p), "kind": kind_name(m), "size": m.len()}))
        .collect();
    Ok(json!({"entries": entries, "truncated": truncated}))
}

/// Depth-first walk without following links. Unreadable subdirectories are listed but not
/// entered (the listing of the rest is still useful).
fn collect(
    dir: &Path,
    rel: &Path,
    depth: u32,
    out: &mut Vec<(PathBuf, Metadata)>,
    truncated: &mut bool,
) -> io::Result<()> {
    let reader = match fs::read_dir(dir) {
        Ok(r) => r,
        Err(e) if rel.as_os_str().is_empty() => return Err(e),
        Err(_) => return Ok(()),
    };
    let mut children: Vec<_> = reader.filter_map(|e| e.ok()).collect();
    children.sort_by_key(|e| e.file_name());
    for entry in children {
        if out.len() >= LIST_CAP {
            *truncated = true;
            return Ok(());
        }
        let Ok(meta) = entry.path().symlink_metadata() else {
            continue;
        };
        let child_rel = rel.join(entry.file_name());
        let is_dir = meta.is_dir();
        out.push((child_rel.clone(), meta));
        if is_dir && depth > 1 {
            collect(&entry.path(), &child_rel, depth - 1, out, truncated)?;
        }
    }
    Ok(())
}
