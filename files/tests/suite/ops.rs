//! move_file, delete_file, file_info, list_files.

use super::{populate, run, snapshot};
use pretty_assertions::assert_eq;
use serde_json::json;

#[test]
fn move_rules() {
    let dir = tempfile::tempdir().unwrap();
    populate(dir.path(), &[("a.txt", "a"), ("b.txt", "b")]);
    let code = |req| run(dir.path(), req).unwrap_err().kind.code();
    assert_eq!(
        code(json!({"op": "move", "from": "a.txt", "to": "b.txt"})),
        "file:exists"
    );
    assert_eq!(
        code(json!({"op": "move", "from": "nope", "to": "c"})),
        "file:not_found"
    );
    assert_eq!(
        run(
            dir.path(),
            json!({"op": "move", "from": "a.txt", "to": "d/e/a.txt"})
        )
        .unwrap(),
        json!({"from": "a.txt", "to": "d/e/a.txt"})
    );
    run(
        dir.path(),
        json!({"op": "move", "from": "d/e/a.txt", "to": "b.txt", "overwrite": true}),
    )
    .unwrap();
    let files: Vec<_> = snapshot(dir.path()).into_iter().collect();
    assert_eq!(
        files,
        vec![
            ("b.txt".to_string(), b"a".to_vec()),
            ("d/".into(), vec![]),
            ("d/e/".into(), vec![])
        ]
    );
}

#[test]
fn delete_kinds() {
    let dir = tempfile::tempdir().unwrap();
    populate(dir.path(), &[("f", "x"), ("d/g", "y")]);
    std::os::unix::fs::symlink("d", dir.path().join("l")).unwrap();
    let del = |path: &str, recursive: bool| {
        run(
            dir.path(),
            json!({"op": "delete", "path": path, "recursive": recursive}),
        )
    };
    assert_eq!(
        del("d", false).unwrap_err().kind.code(),
        "file:is_directory"
    );
    assert_eq!(del("l", false).unwrap()["kind"], "symlink");
    assert!(
        dir.path().join("d/g").exists(),
        "the link's target survives"
    );
    assert_eq!(
        del("f", false).unwrap(),
        json!({"path": "f", "kind": "file"})
    );
    assert_eq!(del("d", true).unwrap()["kind"], "directory");
    assert_eq!(del("f", false).unwrap_err().kind.code(), "file:not_found");
    assert!(snapshot(dir.path()).is_empty());
}

#[test]
fn info_fields() {
    let dir = tempfile::tempdir().unwrap();
    populate(
        dir.path(),
        &[
            ("a.rs", "fn main() {}"),
            ("noext", "plain text"),
            ("blob", "\0\u{1}"),
        ],
    );
    std::os::unix::fs::symlink("a.rs", dir.path().join("link")).unwrap();
    let info = |p: &str| run(dir.path(), json!({"op": "info", "path": p})).unwrap();
    let a = info("a.rs");
    assert_eq!(
        (a["kind"].as_str(), a["size"].as_u64(), a["mime"].as_str()),
        (Some("file"), Some(12), Some("text/x-rust"))
    );
    assert_eq!(a["mode"].as_str().unwrap().len(), 4);
    assert!(a["modified_ms"].as_u64().unwrap() > 1_600_000_000_000);
    assert_eq!(info("noext")["mime"], "text/plain");
    assert_eq!(info("blob")["mime"], "application/octet-stream");
    let l = info("link");
    assert_eq!(
        (l["kind"].as_str(), l["size"].as_u64()),
        (Some("symlink"), Some(4))
    );
    assert_eq!(info(".")["kind"], "directory");
    assert_eq!(
        run(dir.path(), json!({"op": "info", "path": "x"}))
            .unwrap_err()
            .kind
            .code(),
        "file:not_found"
    );
}

#[test]
fn list_depth_hidden_and_sorted() {
    let dir = tempfile::tempdir().unwrap();
    populate(
        dir.path(),
        &[
            ("b.txt", "bb"),
            (".hidden", ""),
            ("a/x.txt", "x"),
            ("a/deep/y.txt", "y"),
        ],
    );
    std::fs::write(dir.path().join(".gitignore"), "b.txt\n").unwrap();
    let list = |depth: u32| run(dir.path(), json!({"op": "list", "depth": depth})).unwrap();
    assert_eq!(
        list(1),
        json!({"entries": [
            {"path": ".gitignore", "kind": "file", "size": 6},
            {"path": ".hidden", "kind": "file", "size": 0},
            {"path": "a", "kind": "directory", "size": std::fs::metadata(dir.path().join("a")).unwrap().len()},
            {"path": "b.txt", "kind": "file", "size": 2},
        ], "truncated": false})
    );
    let paths: Vec<String> = list(3)["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        paths,
        vec![
            ".gitignore",
            ".hidden",
            "a",
            "a/deep",
            "a/deep/y.txt",
            "a/x.txt",
            "b.txt"
        ]
    );
    let e = run(dir.path(), json!({"op": "list", "path": "b.txt"})).unwrap_err();
    assert_eq!(e.kind.code(), "file:not_directory");
}
