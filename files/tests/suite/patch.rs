//! apply_patch, table-driven: each case is a tree before, a patch, and the tree after or the
//! error code (then the tree must be byte-for-byte unchanged).

use super::{populate, run, snapshot, text_of};
use paddock_files::{PatchAction, PatchTarget, patch_targets};
use pretty_assertions::assert_eq;
use serde_json::json;

struct Case {
    name: &'static str,
    before: &'static [(&'static str, &'static str)],
    patch: &'static str,
    expect: Result<&'static [(&'static str, &'static str)], &'static str>,
}

const CASES: &[Case] = &[
    Case {
        name: "add",
        before: &[],
        patch: "*** Begin Patch\n*** Add File: a/b.txt\n+x\n+y\n*** End Patch\n",
        expect: Ok(&[("a/b.txt", "x\ny\n")]),
    },
    Case {
        name: "multiple operations",
        before: &[("d.txt", "gone\n"), ("e.txt", "one\ntwo\n")],
        patch: "*** Begin Patch\n*** Add File: c.txt\n+new\n*** Delete File: d.txt\n*** Update File: e.txt\n@@\n one\n-two\n+2\n*** End Patch",
        expect: Ok(&[("c.txt", "new\n"), ("e.txt", "one\n2\n")]),
    },
    Case {
        name: "multiple chunks",
        before: &[(
            "f.py",
            "def a():\n    return 1\n\ndef b():\n    return 2\n\ndef c():\n    return 3\n",
        )],
        patch: "*** Begin Patch\n*** Update File: f.py\n@@ def a():\n-    return 1\n+    return 10\n@@ def c():\n-    return 3\n+    return 30\n*** End Patch",
        expect: Ok(&[(
            "f.py",
            "def a():\n    return 10\n\ndef b():\n    return 2\n\ndef c():\n    return 30\n",
        )]),
    },
    Case {
        name: "move to a new directory",
        before: &[("a.txt", "x\ny\n")],
        patch: "*** Begin Patch\n*** Update File: a.txt\n*** Move to: new/dir/b.txt\n@@\n x\n-y\n+z\n*** End Patch",
        expect: Ok(&[("new/dir/b.txt", "x\nz\n")]),
    },
    Case {
        name: "move overwrites",
        before: &[("a.txt", "x\n"), ("b.txt", "old\n")],
        patch: "*** Begin Patch\n*** Update File: a.txt\n*** Move to: b.txt\n@@\n-x\n+moved\n*** End Patch",
        expect: Ok(&[("b.txt", "moved\n")]),
    },
    Case {
        name: "empty patch",
        before: &[("a.txt", "x\n")],
        patch: "*** Begin Patch\n*** End Patch\n",
        expect: Err("file:invalid_patch"),
    },
    Case {
        name: "missing markers",
        before: &[("a.txt", "x\n")],
        patch: "*** Update File: a.txt\n@@\n-x\n+y\n",
        expect: Err("file:invalid_patch"),
    },
    Case {
        name: "missing context",
        before: &[("a.txt", "x\ny\n")],
        patch: "*** Begin Patch\n*** Add File: n.txt\n+n\n*** Update File: a.txt\n@@ fn nowhere()\n-y\n+z\n*** End Patch",
        expect: Err("file:patch_failed"),
    },
    Case {
        name: "missing old lines (second chunk fails, first is not applied)",
        before: &[("a.txt", "x\ny\n")],
        patch: "*** Begin Patch\n*** Update File: a.txt\n@@\n-x\n+X\n@@\n-nope\n+z\n*** End Patch",
        expect: Err("file:patch_failed"),
    },
    Case {
        name: "missing file",
        before: &[("a.txt", "x\n")],
        patch: "*** Begin Patch\n*** Delete File: a.txt\n*** Update File: nope.txt\n@@\n-x\n+y\n*** End Patch",
        expect: Err("file:not_found"),
    },
    Case {
        name: "delete of a missing file",
        before: &[],
        patch: "*** Begin Patch\n*** Delete File: nope.txt\n*** End Patch",
        expect: Err("file:not_found"),
    },
    Case {
        // codex's `add_overwrites_existing_file`: Add replaces an existing file.
        name: "add over an existing file replaces it",
        before: &[("a.txt", "x\n")],
        patch: "*** Begin Patch\n*** Add File: a.txt\n+y\n*** End Patch",
        expect: Ok(&[("a.txt", "y\n")]),
    },
    Case {
        name: "add over a directory",
        before: &[("d/a.txt", "x\n")],
        patch: "*** Begin Patch\n*** Add File: d\n+y\n*** End Patch",
        expect: Err("file:is_directory"),
    },
    Case {
        name: "empty hunk",
        before: &[("a.txt", "x\n")],
        patch: "*** Begin Patch\n*** Update File: a.txt\n@@\n*** End Patch",
        expect: Err("file:invalid_patch"),
    },
    Case {
        name: "update with no chunks",
        before: &[("a.txt", "x\n")],
        patch: "*** Begin Patch\n*** Update File: a.txt\n*** End Patch",
        expect: Err("file:invalid_patch"),
    },
    Case {
        name: "invalid header",
        before: &[("a.txt", "x\n")],
        patch: "*** Begin Patch\n*** Frobnicate File: a.txt\n+x\n*** End Patch",
        expect: Err("file:invalid_patch"),
    },
    Case {
        name: "invalid chunk line",
        before: &[("a.txt", "x\n")],
        patch: "*** Begin Patch\n*** Update File: a.txt\n@@\n-x\n?y\n*** End Patch",
        expect: Err("file:invalid_patch"),
    },
    Case {
        name: "file without trailing newline gets one",
        before: &[("a.txt", "a\nb")],
        patch: "*** Begin Patch\n*** Update File: a.txt\n@@\n a\n-b\n+c\n*** End Patch",
        expect: Ok(&[("a.txt", "a\nc\n")]),
    },
    Case {
        name: "blank trailing context line in the chunk",
        before: &[("a.txt", "a\nb\n")],
        patch: "*** Begin Patch\n*** Update File: a.txt\n@@\n-a\n+A\n\n*** End Patch",
        expect: Ok(&[("a.txt", "A\nb\n")]),
    },
    Case {
        name: "padded markers, no final newline",
        before: &[("a.txt", "x\n")],
        patch: "\n   *** Begin Patch   \n  *** Update File: a.txt  \n  @@  \n-x\n+y\n   *** End Patch  ",
        expect: Ok(&[("a.txt", "y\n")]),
    },
    Case {
        name: "unicode punctuation and content",
        before: &[("u.md", "title – “quoted”\u{a0}end\nπ = 3.14\n")],
        patch: "*** Begin Patch\n*** Update File: u.md\n@@\n-title - \"quoted\" end\n+titre — « cité »\n π = 3.14\n*** End Patch",
        expect: Ok(&[("u.md", "titre — « cité »\nπ = 3.14\n")]),
    },
    Case {
        name: "whitespace-insensitive match",
        before: &[("w.py", "    if x:   \n        pass\n")],
        patch: "*** Begin Patch\n*** Update File: w.py\n@@\n-if x:\n+    if y:\n         pass\n*** End Patch",
        expect: Ok(&[("w.py", "    if y:\n        pass\n")]),
    },
    Case {
        name: "deletion only",
        before: &[("a.txt", "x\n"), ("keep.txt", "k\n")],
        patch: "*** Begin Patch\n*** Delete File: a.txt\n*** End Patch",
        expect: Ok(&[("keep.txt", "k\n")]),
    },
    Case {
        name: "end of file",
        before: &[("a.txt", "x\ny\nx\n")],
        patch: "*** Begin Patch\n*** Update File: a.txt\n@@\n-x\n+z\n*** End of File\n*** End Patch",
        expect: Ok(&[("a.txt", "x\ny\nz\n")]),
    },
    Case {
        name: "end of file that is not at the end",
        before: &[("a.txt", "x\ny\n")],
        patch: "*** Begin Patch\n*** Update File: a.txt\n@@\n-x\n+z\n*** End of File\n*** End Patch",
        expect: Err("file:patch_failed"),
    },
    Case {
        name: "crlf patch",
        before: &[("a.txt", "x\ny\n")],
        patch: "*** Begin Patch\r\n*** Update File: a.txt\r\n@@\r\n x\r\n-y\r\n+z\r\n*** Add File: b.txt\r\n+b\r\n*** End Patch\r\n",
        expect: Ok(&[("a.txt", "x\nz\n"), ("b.txt", "b\n")]),
    },
    Case {
        name: "crlf file stays crlf",
        before: &[("a.txt", "x\r\ny\r\n")],
        patch: "*** Begin Patch\n*** Update File: a.txt\n@@\n x\n-y\n+z\n+w\n*** End Patch",
        expect: Ok(&[("a.txt", "x\r\nz\r\nw\r\n")]),
    },
    Case {
        name: "pure addition after a context line",
        before: &[("a.rs", "fn main() {\n}\n")],
        patch: "*** Begin Patch\n*** Update File: a.rs\n@@ fn main() {\n+    run();\n*** End Patch",
        expect: Ok(&[("a.rs", "fn main() {\n    run();\n}\n")]),
    },
    Case {
        name: "later hunks see earlier ones",
        before: &[],
        patch: "*** Begin Patch\n*** Add File: a.txt\n+one\n*** Update File: a.txt\n@@\n-one\n+two\n*** End Patch",
        expect: Ok(&[("a.txt", "two\n")]),
    },
];

#[test]
fn apply_patch_table() {
    for case in CASES {
        let dir = tempfile::tempdir().unwrap();
        populate(dir.path(), case.before);
        let before = snapshot(dir.path());
        let result = run(
            dir.path(),
            json!({"op": "apply_patch", "patch": case.patch}),
        );
        match (&case.expect, result) {
            (Ok(files), Ok(_)) => {
                let after = dir.tempdir_files();
                let want: Vec<(String, String)> = files
                    .iter()
                    .map(|(p, c)| (p.to_string(), c.to_string()))
                    .collect();
                assert_eq!(after, want, "case `{}`", case.name);
            }
            (Err(code), Err(e)) => {
                assert_eq!(e.kind.code(), *code, "case `{}`: {}", case.name, e.message);
                assert_eq!(
                    snapshot(dir.path()),
                    before,
                    "case `{}` changed the tree",
                    case.name
                );
            }
            (want, got) => panic!("case `{}`: wanted {want:?}, got {got:?}", case.name),
        }
    }
}

trait Files {
    fn tempdir_files(&self) -> Vec<(String, String)>;
}

impl Files for tempfile::TempDir {
    /// The regular files of the tree with their text (directories left out).
    fn tempdir_files(&self) -> Vec<(String, String)> {
        snapshot(self.path())
            .into_iter()
            .filter(|(p, _)| !p.ends_with('/'))
            .map(|(p, c)| (p, String::from_utf8(c).unwrap()))
            .collect()
    }
}

#[test]
fn answer_lists_what_changed() {
    let dir = tempfile::tempdir().unwrap();
    populate(
        dir.path(),
        &[("u.txt", "a\n"), ("m.txt", "m\n"), ("d.txt", "d\n")],
    );
    let patch = "*** Begin Patch\n*** Add File: n.txt\n+n\n*** Update File: u.txt\n@@\n-a\n+b\n*** Update File: m.txt\n*** Move to: sub/m2.txt\n*** Delete File: d.txt\n*** End Patch";
    let got = run(dir.path(), json!({"op": "apply_patch", "patch": patch})).unwrap();
    assert_eq!(
        got,
        json!({"added": ["n.txt"], "updated": ["u.txt"], "deleted": ["d.txt"], "moved": [{"from": "m.txt", "to": "sub/m2.txt"}]})
    );
    assert_eq!(text_of(dir.path(), "sub/m2.txt"), "m\n");
}

#[test]
fn failure_names_file_chunk_and_nearest_lines() {
    let dir = tempfile::tempdir().unwrap();
    populate(
        dir.path(),
        &[("src/lib.rs", "fn alpha() {}\nfn beta() {}\nfn gamma() {}\n")],
    );
    let patch = "*** Begin Patch\n*** Update File: src/lib.rs\n@@\n-fn alpha() {}\n+fn a() {}\n@@\n-fn betta() {}\n+fn b() {}\n*** End Patch";
    let e = run(dir.path(), json!({"op": "apply_patch", "patch": patch})).unwrap_err();
    assert_eq!(e.kind.code(), "file:patch_failed");
    assert!(e.message.contains("src/lib.rs, chunk 2"), "{}", e.message);
    assert!(e.message.contains("fn betta() {}"), "{}", e.message);
    assert!(e.message.contains(">    2| fn beta() {}"), "{}", e.message);
}

#[test]
fn mode_is_kept_and_no_temp_files_remain() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    populate(dir.path(), &[("run.sh", "echo a\n")]);
    std::fs::set_permissions(
        dir.path().join("run.sh"),
        std::fs::Permissions::from_mode(0o751),
    )
    .unwrap();
    let patch = "*** Begin Patch\n*** Update File: run.sh\n@@\n-echo a\n+echo b\n*** End Patch";
    run(dir.path(), json!({"op": "apply_patch", "patch": patch})).unwrap();
    let mode = std::fs::metadata(dir.path().join("run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o751);
    assert_eq!(
        snapshot(dir.path()).keys().collect::<Vec<_>>(),
        vec!["run.sh"]
    );
}

#[test]
fn add_over_an_existing_file_says_so_and_keeps_its_mode() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    populate(dir.path(), &[("run.sh", "echo a\n")]);
    std::fs::set_permissions(
        dir.path().join("run.sh"),
        std::fs::Permissions::from_mode(0o751),
    )
    .unwrap();
    let patch =
        "*** Begin Patch\n*** Add File: run.sh\n+echo b\n*** Add File: new.txt\n+n\n*** End Patch";
    let v = run(dir.path(), json!({"op": "apply_patch", "patch": patch})).unwrap();
    assert_eq!(v["overwritten"], json!(true), "{v}");
    assert_eq!(v["overwritten_files"], json!(["run.sh"]), "{v}");
    assert_eq!(v["added"], json!(["run.sh", "new.txt"]), "{v}");
    let mode = std::fs::metadata(dir.path().join("run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o751);
    // A patch that overwrites nothing does not mention it.
    let patch = "*** Begin Patch\n*** Add File: other.txt\n+o\n*** End Patch";
    let v = run(dir.path(), json!({"op": "apply_patch", "patch": patch})).unwrap();
    assert!(v.get("overwritten").is_none(), "{v}");
}

#[test]
fn targets_without_touching_the_disk() {
    let patch = "*** Begin Patch\n*** Add File: a\n+x\n*** Update File: b\n*** Move to: c/d\n@@\n-x\n+y\n*** Delete File: /abs/e\n*** End Patch";
    let t = |path: &str, action| PatchTarget {
        path: path.into(),
        action,
    };
    assert_eq!(
        patch_targets(patch).unwrap(),
        vec![
            t("a", PatchAction::Add),
            t("b", PatchAction::Update),
            t("c/d", PatchAction::MoveTo),
            t("/abs/e", PatchAction::Delete)
        ]
    );
    assert_eq!(
        patch_targets("nope").unwrap_err().kind.code(),
        "file:invalid_patch"
    );
}
