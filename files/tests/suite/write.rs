//! write_file: atomic replacement that keeps modes and writes through symlinks.

use super::{run, snapshot, text_of};
use paddock_files::FileError;
use pretty_assertions::assert_eq;
use serde_json::json;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// One write_file request: `content` into `path` under `base`.
fn write(base: &Path, path: &str, content: &str) -> Result<serde_json::Value, FileError> {
    run(
        base,
        json!({"op": "write", "path": path, "content": content}),
    )
}

#[test]
fn creates_with_parents_then_replaces_keeping_mode() {
    let dir = tempfile::tempdir().unwrap();
    let got = write(dir.path(), "a/b/c.txt", "héllo").unwrap();
    assert_eq!(
        got,
        json!({"path": "a/b/c.txt", "bytes": 6, "created": true})
    );
    let file = dir.path().join("a/b/c.txt");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o700)).unwrap();
    let got = write(dir.path(), "a/b/c.txt", "x").unwrap();
    assert_eq!(got["created"], false);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o7777,
        0o700
    );
    // Atomic via a temp file: nothing but the file itself is left.
    assert_eq!(
        snapshot(dir.path()).keys().collect::<Vec<_>>(),
        vec!["a/", "a/b/", "a/b/c.txt"]
    );
}

#[test]
fn writes_through_symlinks() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("real")).unwrap();
    std::fs::write(dir.path().join("real/t.txt"), "old").unwrap();
    std::os::unix::fs::symlink("real/t.txt", dir.path().join("link")).unwrap();
    write(dir.path(), "link", "new").unwrap();
    assert!(
        std::fs::symlink_metadata(dir.path().join("link"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(text_of(dir.path(), "real/t.txt"), "new");
    // A dangling link: its target is created.
    std::os::unix::fs::symlink("real/new.txt", dir.path().join("dangling")).unwrap();
    write(dir.path(), "dangling", "n").unwrap();
    assert_eq!(text_of(dir.path(), "real/new.txt"), "n");
    assert!(
        std::fs::symlink_metadata(dir.path().join("dangling"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

#[test]
fn refuses_directories() {
    let dir = tempfile::tempdir().unwrap();
    let e = write(dir.path(), ".", "x").unwrap_err();
    assert_eq!(e.kind.code(), "file:is_directory");
}
