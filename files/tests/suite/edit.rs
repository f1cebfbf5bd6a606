//! edit_file: exact replacement, its errors, CRLF retry, and concurrent edits.

use super::{run, snapshot, text_of};
use pretty_assertions::assert_eq;
use serde_json::json;
use std::sync::{Arc, Barrier};

fn edit(
    dir: &std::path::Path,
    old: &str,
    new: &str,
    all: bool,
) -> Result<serde_json::Value, paddock_files::FileError> {
    run(
        dir,
        json!({"op": "edit", "path": "f.rs", "old_string": old, "new_string": new, "replace_all": all}),
    )
}

#[test]
fn replaces_once_and_all() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f.rs"), "a b a\n").unwrap();
    assert_eq!(
        edit(dir.path(), "b", "B", false).unwrap(),
        json!({"path": "f.rs", "replacements": 1})
    );
    assert_eq!(
        edit(dir.path(), "a", "x", true).unwrap(),
        json!({"path": "f.rs", "replacements": 2})
    );
    assert_eq!(text_of(dir.path(), "f.rs"), "x B x\n");
}

#[test]
fn errors_leave_the_file_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let text = "fn one() {}\nfn two() {}\nfn three() {}\nlet x = 1;\nlet x = 1;\n";
    std::fs::write(dir.path().join("f.rs"), text).unwrap();
    let before = snapshot(dir.path());

    let e = edit(dir.path(), "\n  fn tow() {}\n", "y", false).unwrap_err();
    assert_eq!(e.kind.code(), "file:no_match");
    assert!(e.message.contains(">    2| fn two() {}"), "{}", e.message);
    assert!(e.message.contains("f.rs"));

    let e = edit(dir.path(), "let x = 1;", "y", false).unwrap_err();
    assert_eq!(e.kind.code(), "file:ambiguous");
    assert!(e.message.contains("2 times"), "{}", e.message);

    assert_eq!(
        edit(dir.path(), "", "y", false).unwrap_err().kind.code(),
        "file:invalid_argument"
    );
    assert_eq!(
        edit(dir.path(), "one", "one", false)
            .unwrap_err()
            .kind
            .code(),
        "file:invalid_argument"
    );
    let e = run(
        dir.path(),
        json!({"op": "edit", "path": "missing.rs", "old_string": "a", "new_string": "b"}),
    )
    .unwrap_err();
    assert_eq!(e.kind.code(), "file:not_found");
    assert_eq!(snapshot(dir.path()), before);
}

#[test]
fn crlf_file_with_lf_old_string() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f.rs"), "a\r\nb\r\nc\r\n").unwrap();
    assert_eq!(
        edit(dir.path(), "a\nb\n", "x\ny\nz\n", false).unwrap()["replacements"],
        1
    );
    assert_eq!(
        std::fs::read(dir.path().join("f.rs")).unwrap(),
        b"x\r\ny\r\nz\r\nc\r\n"
    );
}

#[test]
fn concurrent_edits_lose_nothing() {
    for round in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f.rs"), "start\n//ANCHOR\nend\n").unwrap();
        let barrier = Arc::new(Barrier::new(8));
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let base = dir.path().to_path_buf();
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    barrier.wait();
                    let new = format!("//ANCHOR\nmarker-{i}");
                    edit(&base, "//ANCHOR", &new, false).map(|_| ())
                })
            })
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let text = text_of(dir.path(), "f.rs");
        for (i, r) in results.iter().enumerate() {
            match r {
                Ok(()) => assert!(
                    text.contains(&format!("marker-{i}\n")),
                    "round {round}: marker-{i} lost:\n{text}"
                ),
                Err(e) => assert!(
                    !text.contains(&format!("marker-{i}\n")),
                    "round {round}: {e}"
                ),
            }
        }
        assert_eq!(
            results.iter().filter(|r| r.is_ok()).count(),
            8,
            "round {round}: {results:?}"
        );
        assert_eq!(snapshot(dir.path()).len(), 1, "temp files left behind");
    }
}

#[test]
fn concurrent_writes_and_edits_serialise() {
    // write_file takes the same lock: an edit never resurrects content a write replaced.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f.rs"), "v0\n").unwrap();
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let base = dir.path().to_path_buf();
            std::thread::spawn(move || {
                for _ in 0..20 {
                    if i % 2 == 0 {
                        run(
                            &base,
                            json!({"op": "write", "path": "f.rs", "content": format!("w{i}\n")}),
                        )
                        .unwrap();
                    } else {
                        let _ = edit(&base, "\n", "\n", false);
                        let _ = run(&base, json!({"op": "read", "path": "f.rs"})).unwrap();
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(snapshot(dir.path()).len(), 1);
}
