//! grep and glob_files, checked against the real `rg` when it is on PATH (skipped with a note
//! otherwise), plus the answer shapes.

use super::{populate, run};
use pretty_assertions::assert_eq;
use serde_json::json;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};

/// A tree with the cases ripgrep's filters care about: a git repo with nested .gitignore
/// files, an .ignore file, hidden files and directories, binary files, a negated ignore.
fn tree(root: &Path, extra: usize) {
    std::fs::create_dir_all(root.join(".git")).unwrap();
    populate(
        root,
        &[
            (".gitignore", "target/\n*.log\n!keep.log\n"),
            (".ignore", "skipme.txt\n"),
            ("src/.gitignore", "generated.rs\n"),
            (
                "src/main.rs",
                "fn main() {\n    foo_bar();\n    println!(\"hello\");\n}\n",
            ),
            (
                "src/lib.rs",
                "pub fn foo_bar() {}\n// FOO bar\nfoobar foo-bar foo\n",
            ),
            ("src/generated.rs", "foo ignored\n"),
            ("target/debug/out.rs", "foo in target\n"),
            ("app.log", "foo log\n"),
            ("keep.log", "foo kept log\n"),
            ("skipme.txt", "foo skipped\n"),
            (".hidden.txt", "foo hidden\n"),
            (".hdir/a.txt", "foo in hidden dir\n"),
            ("docs/a.md", "Hello foo\nfoo again\nbar\n"),
            ("docs/b.md", "nothing here\n"),
            ("weird name.txt", "foo with a space\n"),
        ],
    );
    std::fs::write(root.join("bin.dat"), b"foo\0binary foo\n").unwrap();
    let mut late_binary = b"foo text first\n".repeat(10_000);
    late_binary.extend_from_slice(b"\0foo\n");
    std::fs::write(root.join("late.bin"), late_binary).unwrap();
    for i in 0..extra {
        let content = match i % 5 {
            0 => format!("module {i}\nfn foo_{i}() {{}}\n"),
            1 => format!("bar {i}\n").repeat(20),
            2 => format!("Hello {i}\nfoo bar baz\n"),
            3 => "x".repeat(i % 700) + "\n",
            _ => format!("foo\nfoo\nfoo {i}\n"),
        };
        populate(root, &[(&format!("gen/d{}/f{i}.txt", i % 37), &content)]);
    }
}

fn rg_available() -> bool {
    Command::new("rg")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `rg ARGS .` run in `root`, its lines with `./` stripped.
fn rg(root: &Path, args: &[&str]) -> Vec<String> {
    let out = Command::new("rg")
        .arg("--no-config")
        .args(args)
        .arg(".")
        .current_dir(root)
        .env_remove("RIPGREP_CONFIG_PATH")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.code().is_some_and(|c| c <= 1),
        "rg failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.strip_prefix("./").unwrap_or(l).to_string())
        .collect()
}

fn strings(v: &serde_json::Value) -> BTreeSet<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn same_files_and_counts_as_rg() {
    assert!(
        rg_available(),
        "`rg` is not on PATH: this test compares grep with ripgrep itself; install it \
         (apt-get install ripgrep; scripts/test-all.sh does)"
    );
    let dir = tempfile::tempdir().unwrap();
    tree(dir.path(), 60);
    let cases: &[(&str, &[&str], serde_json::Value)] = &[
        ("foo", &[], json!({})),
        ("fo+_?ba?r", &[], json!({})),
        ("hello", &["-i"], json!({"ignore_case": true})),
        ("foo-bar", &["-F"], json!({"fixed_strings": true})),
        ("a.b", &["-F"], json!({"fixed_strings": true})),
        ("^bar", &[], json!({})),
        ("foo", &["-g", "*.rs"], json!({"glob": "*.rs"})),
        ("foo", &["-g", "!*.md"], json!({"glob": "!*.md"})),
        ("foo", &["-g", "*.log"], json!({"glob": "*.log"})),
    ];
    for (pattern, flags, extra) in cases {
        let mut req = json!({"op": "grep", "pattern": pattern});
        for (k, v) in extra.as_object().unwrap() {
            req[k] = v.clone();
        }
        let ours = run(dir.path(), req.clone()).unwrap();
        let mut args = vec!["-l", "-e", pattern];
        args.extend_from_slice(flags);
        let theirs: BTreeSet<String> = rg(dir.path(), &args).into_iter().collect();
        assert_eq!(
            strings(&ours["files"]),
            theirs,
            "files for `{pattern}` {flags:?}"
        );
        assert!(
            !theirs.is_empty() || *pattern == "a.b",
            "pattern `{pattern}` matches something"
        );

        req["output_mode"] = json!("count");
        let ours = run(dir.path(), req).unwrap();
        let ours: BTreeSet<String> = ours["counts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| format!("{}:{}", c["path"].as_str().unwrap(), c["count"]))
            .collect();
        let mut args = vec!["-c", "-e", pattern];
        args.extend_from_slice(flags);
        let theirs: BTreeSet<String> = rg(dir.path(), &args).into_iter().collect();
        assert_eq!(ours, theirs, "counts for `{pattern}` {flags:?}");
    }
    for glob in ["*.rs", "**/*.md", "src/*", "*.log", "!*.txt", "gen/d1/**"] {
        let ours = run(dir.path(), json!({"op": "glob", "pattern": glob})).unwrap();
        let theirs: BTreeSet<String> = rg(dir.path(), &["--files", "-g", glob])
            .into_iter()
            .collect();
        assert_eq!(strings(&ours["files"]), theirs, "glob `{glob}`");
    }
}

#[test]
fn answer_shapes() {
    let dir = tempfile::tempdir().unwrap();
    tree(dir.path(), 0);
    let got = run(dir.path(), json!({"op": "grep", "pattern": "again", "path": "docs", "output_mode": "content", "context": 1})).unwrap();
    assert_eq!(
        got,
        json!({"matches": [
            {"path": "a.md", "line": 1, "text": "Hello foo", "context": true},
            {"path": "a.md", "line": 2, "text": "foo again"},
            {"path": "a.md", "line": 3, "text": "bar", "context": true},
        ], "truncated": false})
    );
    // A file path: named by its file name.
    let got = run(
        dir.path(),
        json!({"op": "grep", "pattern": "foo", "path": "src/lib.rs", "output_mode": "count"}),
    )
    .unwrap();
    assert_eq!(
        got,
        json!({"counts": [{"path": "lib.rs", "count": 2}], "truncated": false})
    );
    let got = run(
        dir.path(),
        json!({"op": "grep", "pattern": "foo", "max_results": 2}),
    )
    .unwrap();
    assert_eq!(got["files"].as_array().unwrap().len(), 2);
    assert_eq!(got["truncated"], true);
    let got = run(
        dir.path(),
        json!({"op": "grep", "pattern": "foo", "output_mode": "content", "max_results": 3}),
    )
    .unwrap();
    assert_eq!(got["matches"].as_array().unwrap().len(), 3);
    assert_eq!(got["truncated"], true);
    let e = run(dir.path(), json!({"op": "grep", "pattern": "("})).unwrap_err();
    assert_eq!(e.kind.code(), "file:invalid_argument");
    let e = run(
        dir.path(),
        json!({"op": "grep", "pattern": "x", "glob": "a{"}),
    )
    .unwrap_err();
    assert_eq!(e.kind.code(), "file:invalid_argument");
    let e = run(
        dir.path(),
        json!({"op": "grep", "pattern": "x", "path": "nope"}),
    )
    .unwrap_err();
    assert_eq!(e.kind.code(), "file:not_found");
    let got = run(
        dir.path(),
        json!({"op": "glob", "pattern": "*.md", "path": "docs"}),
    )
    .unwrap();
    assert_eq!(got, json!({"files": ["a.md", "b.md"], "truncated": false}));
}
