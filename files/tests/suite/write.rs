//! write_file: atomic replacement that keeps modes and writes through symlinks.

use super::{run, snapshot};
use pretty_assertions::assert_eq;
use serde_json::json;
use std::os::unix::fs::PermissionsExt;

#[test]
fn creates_with_parents_then_replaces_keeping_mode() {
    let dir = tempfile::tempdir().unwrap();
    let got = run(
        dir.path(),
        json!({"op": "write", "path": "a/b/c.txt", "content": "héllo"}),
    )
    .unwrap();
    assert_eq!(
        got,
        json!({"path": "a/b/c.txt", "bytes": 6, "created": true})
    );
    let file = dir.path().join("a/b/c.txt");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o700)).unwrap();
    let got = run(
        dir.path(),
        json!({"op": "write", "path": "a/b/c.txt", "content": "x"}),
    )
    .unwrap();
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
    run(
        dir.path(),
        json!({"op": "write", "path": "link", "content": "new"}),
    )
    .unwrap();
    assert!(
        std::fs::symlink_metadata(dir.path().join("link"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("real/t.txt")).unwrap(),
        "new"
    );
    // A dangling link: its target is created.
    std::os::unix::fs::symlink("real/new.txt", dir.path().join("dangling")).unwrap();
    run(
        dir.path(),
        json!({"op": "write", "path": "dangling", "content": "n"}),
    )
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.path().join("real/new.txt")).unwrap(),
        "n"
    );
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
    let e = run(
        dir.path(),
        json!({"op": "write", "path": ".", "content": "x"}),
    )
    .unwrap_err();
    assert_eq!(e.kind.code(), "file:is_directory");
}
