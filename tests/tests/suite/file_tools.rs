//! The file tools on every backend of the conformance suite (`local` unconfined and
//! sandboxed, `docker`, `ssh`, `apptainer`, `slurm`, `slurm_apptainer`), through the real
//! binary: `paddock call` for one tool, `run_tools_script` for the table of patch cases (the
//! nested calls a code-mode script makes). Evidence is read back through the environment's own
//! shell (`terminal`), so a tool that wrote somewhere else than the session's commands see fails.

use std::time::Duration;

use serde_json::{Value, json};

use super::conformance::{Target, conformance};

/// The answer of one file tool call, asserting it succeeded.
fn ok(t: &Target, session: &str, tool: &str, args: Value) -> Value {
    let run = t.call(session, tool, args.clone());
    let v = run.json();
    assert!(
        v.get("error_code").is_none(),
        "{} {tool} {args}: {v}\n{}",
        t.backend,
        run.stderr
    );
    v
}

/// The error code of one file tool call that must fail.
fn failed(t: &Target, session: &str, tool: &str, args: Value) -> Value {
    let v = t.call(session, tool, args.clone()).json();
    assert!(
        v.get("error_code").is_some(),
        "{} {tool} {args} should have failed: {v}",
        t.backend
    );
    v
}

fn files_resolve_in_the_sessions_directory_and_commands_see_them(t: &Target) {
    let s = t.session("f");
    let d = format!("{}/rt", t.scratch());
    t.sh(&s, json!({"command": format!("mkdir -p {d} && cd {d}")}));
    let w = ok(
        t,
        &s,
        "write_file",
        json!({"path": "sub/a.txt", "content": "one\ntwo\nthree\n"}),
    );
    assert_eq!(w["bytes"], json!(14), "{w}");
    assert_eq!(w["created"], json!(true), "{w}");
    // The session's own commands see the file where the session is.
    let v = t.sh(&s, json!({"command": "cat sub/a.txt"}));
    assert_eq!(v["output"], json!("one\ntwo\nthree\n"), "{v}");
    let r = ok(
        t,
        &s,
        "read_file",
        json!({"path": "sub/a.txt", "offset": 2, "limit": 1}),
    );
    assert_eq!(r["content"], json!("two\n"), "{r}");
    assert_eq!(
        (&r["start_line"], &r["end_line"], &r["total_lines"]),
        (&json!(2), &json!(2), &json!(3)),
        "{r}"
    );
    assert_eq!(r["truncated"], json!(true), "{r}");
    // `code_read` is the old name.
    let old = ok(
        t,
        &s,
        "code_read",
        json!({"path": format!("{d}/sub/a.txt")}),
    );
    assert_eq!(old["content"], json!("one\ntwo\nthree\n"), "{old}");
    // Another session is elsewhere: the relative path is not found there.
    let other = failed(
        t,
        &t.session("g"),
        "read_file",
        json!({"path": "sub/a.txt"}),
    );
    assert_eq!(other["error_code"], json!("file:not_found"), "{other}");

    // A write keeps the mode of the file it replaces.
    t.sh(
        &s,
        json!({"command": "printf '#!/bin/sh\\necho old\\n' > run.sh && chmod 751 run.sh"}),
    );
    ok(
        t,
        &s,
        "write_file",
        json!({"path": "run.sh", "content": "#!/bin/sh\necho new\n"}),
    );
    // Atomic: no temporary file is left beside it.
    let v = t.sh(
        &s,
        json!({"command": "stat -c %a run.sh; sh run.sh; ls -A"}),
    );
    assert_eq!(v["output"], json!("751\nnew\nrun.sh\nsub\n"), "{v}");

    let info = ok(t, &s, "file_info", json!({"path": "run.sh"}));
    assert_eq!(info["kind"], json!("file"), "{info}");
    assert_eq!(info["size"], json!(19), "{info}");
    assert_eq!(info["mode"], json!("0751"), "{info}");
    let list = ok(t, &s, "list_files", json!({"path": ".", "depth": 2}));
    let paths: Vec<&str> = list["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["run.sh", "sub", "sub/a.txt"], "{list}");
}

fn edits_replace_exactly_and_change_nothing_on_error(t: &Target) {
    let s = t.session("e");
    let d = format!("{}/ed", t.scratch());
    let f = format!("{d}/x.py");
    ok(
        t,
        &s,
        "write_file",
        json!({"path": f, "content": "a = 1\nb = 1\nprint(a)\n"}),
    );
    let v = ok(
        t,
        &s,
        "edit_file",
        json!({"path": f, "old_string": "a = 1", "new_string": "a = 2"}),
    );
    assert_eq!(v["replacements"], json!(1), "{v}");
    let v = failed(
        t,
        &s,
        "edit_file",
        json!({"path": f, "old_string": " = ", "new_string": "="}),
    );
    assert_eq!(v["error_code"], json!("file:ambiguous"), "{v}");
    assert!(v["error"].as_str().unwrap().contains('2'), "{v}");
    let v = failed(
        t,
        &s,
        "edit_file",
        json!({"path": f, "old_string": "print(b)", "new_string": "x"}),
    );
    assert_eq!(v["error_code"], json!("file:no_match"), "{v}");
    // The nearest line is shown.
    assert!(v["error"].as_str().unwrap().contains("print(a)"), "{v}");
    let v = ok(
        t,
        &s,
        "edit_file",
        json!({"path": f, "old_string": " = ", "new_string": "=", "replace_all": true}),
    );
    assert_eq!(v["replacements"], json!(2), "{v}");
    let v = t.sh(&s, json!({"command": format!("cat {f}")}));
    assert_eq!(v["output"], json!("a=2\nb=1\nprint(a)\n"), "{v}");
    // A binary file is refused for reading.
    t.sh(
        &s,
        json!({"command": format!("printf 'a\\0b' > {d}/bin.dat")}),
    );
    let v = failed(t, &s, "read_file", json!({"path": format!("{d}/bin.dat")}));
    assert_eq!(v["error_code"], json!("file:binary"), "{v}");
    // Moves and deletes.
    ok(
        t,
        &s,
        "move_file",
        json!({"from": f, "to": format!("{d}/pkg/y.py")}),
    );
    let v = failed(
        t,
        &s,
        "move_file",
        json!({"from": format!("{d}/bin.dat"), "to": format!("{d}/pkg/y.py")}),
    );
    assert_eq!(v["error_code"], json!("file:exists"), "{v}");
    let v = failed(t, &s, "delete_file", json!({"path": format!("{d}/pkg")}));
    assert_eq!(v["error_code"], json!("file:is_directory"), "{v}");
    ok(
        t,
        &s,
        "delete_file",
        json!({"path": format!("{d}/pkg"), "recursive": true}),
    );
    let v = t.sh(&s, json!({"command": format!("ls {d}")}));
    assert_eq!(v["output"], json!("bin.dat\n"), "{v}");
}

/// One patch case: the files before (relative to the case's directory, `@D@` in the patch),
/// the patch, and the files after, or `None` for a patch that must fail changing nothing
/// (with a word its error must contain).
struct PatchCase {
    name: &'static str,
    before: &'static [(&'static str, &'static str)],
    patch: &'static str,
    after: Result<&'static [(&'static str, &'static str)], &'static str>,
}

const TEN: &str = "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n";

fn patch_cases() -> Vec<PatchCase> {
    vec![
        PatchCase {
            name: "add",
            before: &[],
            patch: "*** Begin Patch\n*** Add File: @D@/new.txt\n+hello\n+world\n*** End Patch\n",
            after: Ok(&[("new.txt", "hello\nworld\n")]),
        },
        PatchCase {
            name: "multiple operations",
            before: &[("a.txt", "a\n"), ("b.txt", "b\n")],
            patch: "*** Begin Patch\n*** Add File: @D@/c.txt\n+c\n*** Delete File: @D@/a.txt\n*** Update File: @D@/b.txt\n@@\n-b\n+B\n*** End Patch\n",
            after: Ok(&[("b.txt", "B\n"), ("c.txt", "c\n")]),
        },
        PatchCase {
            name: "multiple chunks",
            before: &[("ten.txt", TEN)],
            patch: "*** Begin Patch\n*** Update File: @D@/ten.txt\n@@\n 1\n-2\n+two\n 3\n@@\n 7\n-8\n+eight\n 9\n*** End Patch\n",
            after: Ok(&[("ten.txt", "1\ntwo\n3\n4\n5\n6\n7\neight\n9\n10\n")]),
        },
        PatchCase {
            name: "context header seeks",
            before: &[("f.py", "def a():\n    return 1\n\ndef b():\n    return 1\n")],
            patch: "*** Begin Patch\n*** Update File: @D@/f.py\n@@ def b():\n-    return 1\n+    return 2\n*** End Patch\n",
            after: Ok(&[("f.py", "def a():\n    return 1\n\ndef b():\n    return 2\n")]),
        },
        PatchCase {
            name: "move to a new directory",
            before: &[("a.txt", "x\ny\n")],
            patch: "*** Begin Patch\n*** Update File: @D@/a.txt\n*** Move to: @D@/deep/er/moved.txt\n@@\n x\n-y\n+z\n*** End Patch\n",
            after: Ok(&[("deep/er/moved.txt", "x\nz\n")]),
        },
        PatchCase {
            name: "move that overwrites",
            before: &[("a.txt", "new\n"), ("b.txt", "old\n")],
            patch: "*** Begin Patch\n*** Update File: @D@/a.txt\n*** Move to: @D@/b.txt\n@@\n-new\n+newer\n*** End Patch\n",
            after: Ok(&[("b.txt", "newer\n")]),
        },
        PatchCase {
            name: "empty patch",
            before: &[("a.txt", "a\n")],
            patch: "*** Begin Patch\n*** End Patch\n",
            after: Err("no operations"),
        },
        PatchCase {
            name: "missing context",
            before: &[("a.txt", "a\nb\n")],
            patch: "*** Begin Patch\n*** Update File: @D@/a.txt\n@@\n-nothing like this\n+x\n*** End Patch\n",
            after: Err("a.txt"),
        },
        PatchCase {
            name: "missing file",
            before: &[("a.txt", "a\n")],
            patch: "*** Begin Patch\n*** Update File: @D@/missing.txt\n@@\n-a\n+b\n*** End Patch\n",
            after: Err("missing.txt"),
        },
        PatchCase {
            name: "empty hunk",
            before: &[("a.txt", "a\n")],
            patch: "*** Begin Patch\n*** Update File: @D@/a.txt\n*** End Patch\n",
            after: Err("a.txt"),
        },
        PatchCase {
            name: "invalid header",
            before: &[("a.txt", "a\n")],
            patch: "*** Begin Patch\n*** Frobnicate File: @D@/a.txt\n+x\n*** End Patch\n",
            after: Err("Frobnicate"),
        },
        PatchCase {
            name: "no trailing newline",
            before: &[("a.txt", "x")],
            patch: "*** Begin Patch\n*** Update File: @D@/a.txt\n@@\n-x\n+y\n*** End Patch",
            after: Ok(&[("a.txt", "y\n")]),
        },
        PatchCase {
            name: "padded markers",
            before: &[("a.txt", "a\n")],
            patch: "  *** Begin Patch  \n*** Update File: @D@/a.txt\n@@\n-a\n+b\n  *** End Patch  \n",
            after: Ok(&[("a.txt", "b\n")]),
        },
        PatchCase {
            name: "unicode",
            before: &[("u.txt", "naïve – “quoted”\n日本\n")],
            patch: "*** Begin Patch\n*** Update File: @D@/u.txt\n@@\n naïve – “quoted”\n-日本\n+日本語 ✓\n*** End Patch\n",
            after: Ok(&[("u.txt", "naïve – “quoted”\n日本語 ✓\n")]),
        },
        PatchCase {
            name: "unicode punctuation matched loosely",
            before: &[("u.txt", "a – b\n")],
            patch: "*** Begin Patch\n*** Update File: @D@/u.txt\n@@\n-a - b\n+c\n*** End Patch\n",
            after: Ok(&[("u.txt", "c\n")]),
        },
        PatchCase {
            name: "deletion only",
            before: &[("a.txt", "a\n"), ("b.txt", "b\n")],
            patch: "*** Begin Patch\n*** Delete File: @D@/a.txt\n*** End Patch\n",
            after: Ok(&[("b.txt", "b\n")]),
        },
        PatchCase {
            name: "end of file",
            before: &[("a.txt", "x\ny\nx\n")],
            patch: "*** Begin Patch\n*** Update File: @D@/a.txt\n@@\n-x\n+z\n*** End of File\n*** End Patch\n",
            after: Ok(&[("a.txt", "x\ny\nz\n")]),
        },
        PatchCase {
            name: "crlf patch",
            before: &[("a.txt", "a\nb\n")],
            patch: "*** Begin Patch\r\n*** Update File: @D@/a.txt\r\n@@\r\n a\r\n-b\r\n+c\r\n*** End Patch\r\n",
            after: Ok(&[("a.txt", "a\nc\n")]),
        },
        PatchCase {
            name: "crlf file keeps its line ends",
            before: &[("w.txt", "a\r\nb\r\n")],
            patch: "*** Begin Patch\n*** Update File: @D@/w.txt\n@@\n-a\n+A\n b\n*** End Patch\n",
            after: Ok(&[("w.txt", "A\r\nb\r\n")]),
        },
        PatchCase {
            name: "add over an existing file replaces it, as in codex",
            before: &[("a.txt", "a\n")],
            patch: "*** Begin Patch\n*** Add File: @D@/a.txt\n+x\n*** End Patch\n",
            after: Ok(&[("a.txt", "x\n")]),
        },
        PatchCase {
            name: "all or nothing across files",
            before: &[("a.txt", "a\n"), ("b.txt", "b\n")],
            patch: "*** Begin Patch\n*** Update File: @D@/a.txt\n@@\n-a\n+A\n*** Add File: @D@/n.txt\n+n\n*** Update File: @D@/b.txt\n@@\n-zzz\n+y\n*** End Patch\n",
            after: Err("b.txt"),
        },
    ]
}

/// The script that runs `cases` (as JSON) in directories under `root` and answers, per case,
/// the error it raised and the files left.
const PATCH_SCRIPT: &str = r#"
import json
cases = json.loads(CASES)
out = []
for i, case in enumerate(cases):
    base = ROOT + "/c" + str(case["index"])
    await tools.write_file(path=base + "/.keep", content="")
    for name, content in case["before"]:
        await tools.write_file(path=base + "/" + name, content=content)
    try:
        answer = await tools.apply_patch(patch=case["patch"].replace("@D@", base))
        error = None
    except Exception as e:
        answer = None
        error = type(e).__name__ + ": " + str(e)
    files = []
    listing = await tools.list_files(path=base, depth=10)
    for entry in listing["entries"]:
        if entry["kind"] == "file" and entry["path"] != ".keep":
            read = await tools.read_file(path=base + "/" + entry["path"])
            files.append([entry["path"], read["content"]])
    out.append({"error": error, "files": files, "answer": answer})
out
"#;

fn patches_apply_all_or_nothing(t: &Target) {
    let s = t.session("p");
    let root = format!("{}/patches", t.scratch());
    let cases = patch_cases();
    // At most 50 nested calls a script (the default policy): a few cases per script.
    for chunk in cases.iter().enumerate().collect::<Vec<_>>().chunks(5) {
        let data: Vec<Value> = chunk
            .iter()
            .map(|(i, c)| json!({"index": i, "before": c.before, "patch": c.patch}))
            .collect();
        let code = PATCH_SCRIPT
            .replace(
                "CASES",
                &serde_json::to_string(&json!(data).to_string()).unwrap(),
            )
            .replace("ROOT", &serde_json::to_string(&root).unwrap());
        let v = t
            .call(&s, "run_tools_script", json!({ "code": code }))
            .json();
        assert_eq!(v["ok"], json!(true), "{} {v}", t.backend);
        for ((_, case), got) in chunk.iter().zip(v["result"].as_array().unwrap()) {
            let files: Vec<(String, String)> = got["files"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| (f[0].as_str().unwrap().into(), f[1].as_str().unwrap().into()))
                .collect();
            let as_owned = |list: &[(&str, &str)]| -> Vec<(String, String)> {
                list.iter()
                    .map(|(a, b)| ((*a).into(), (*b).into()))
                    .collect()
            };
            match case.after {
                Ok(after) => {
                    assert_eq!(
                        got["error"],
                        json!(null),
                        "{}: {} {got}",
                        t.backend,
                        case.name
                    );
                    assert_eq!(files, as_owned(after), "{}: {}", t.backend, case.name);
                }
                Err(word) => {
                    let error = got["error"].as_str().unwrap_or_else(|| {
                        panic!("{}: {} should have failed: {got}", t.backend, case.name)
                    });
                    assert!(
                        error.contains(word),
                        "{}: {}: {error}",
                        t.backend,
                        case.name
                    );
                    // Nothing changed.
                    assert_eq!(files, as_owned(case.before), "{}: {}", t.backend, case.name);
                }
            }
        }
    }
    // The error codes a direct call reports.
    let d = format!("{root}/codes");
    ok(
        t,
        &s,
        "write_file",
        json!({"path": format!("{d}/a.txt"), "content": "a\n"}),
    );
    let v = failed(
        t,
        &s,
        "apply_patch",
        json!({"patch": format!("*** Begin Patch\n*** Update File: {d}/a.txt\n@@\n-b\n+c\n*** End Patch\n")}),
    );
    assert_eq!(v["error_code"], json!("file:patch_failed"), "{v}");
    let v = failed(t, &s, "apply_patch", json!({"patch": "no patch at all"}));
    assert_eq!(v["error_code"], json!("file:invalid_patch"), "{v}");
    let v = ok(
        t,
        &s,
        "apply_patch",
        json!({"patch": format!("*** Begin Patch\n*** Update File: {d}/a.txt\n*** Move to: {d}/b.txt\n@@\n-a\n+b\n*** Add File: {d}/c.txt\n+c\n*** End Patch\n")}),
    );
    assert_eq!(v["added"], json!([format!("{d}/c.txt")]), "{v}");
    assert_eq!(
        v["moved"],
        json!([{"from": format!("{d}/a.txt"), "to": format!("{d}/b.txt")}]),
        "{v}"
    );
}

/// grep and glob_files against the environment's own `grep -r` on a tree made there, with an
/// ignore file, a hidden file and a binary file that ripgrep's rules skip.
fn grep_and_glob_follow_ripgrep_rules(t: &Target) {
    let s = t.session("g");
    let d = format!("{}/tree", t.scratch());
    let setup = format!(
        "rm -rf {d} && mkdir -p {d}/src/deep {d}/build {d}/.hidden && cd {d} && \
         printf 'build/\\n' > .ignore && \
         printf 'fn main() {{\\n    let needle = 1;\\n}}\\n' > src/main.rs && \
         printf 'needle\\nhay\\nneedle again\\n' > src/deep/notes.txt && \
         printf 'NEEDLE upper\\n' > src/deep/upper.md && \
         printf 'needle in build\\n' > build/out.rs && \
         printf 'needle hidden\\n' > .hidden/h.rs && \
         printf 'needle\\0binary\\n' > src/blob.bin"
    );
    let v = t.sh(&s, json!({"command": setup}));
    assert_eq!(v["exit_code"], json!(0), "{v}");
    let files = ok(t, &s, "grep", json!({"pattern": "needle", "path": d}));
    assert_eq!(
        files["files"],
        json!(["src/deep/notes.txt", "src/main.rs"]),
        "{files}"
    );
    // The same as the environment's own grep (BusyBox's in the test images) over what
    // ripgrep's rules leave: `src` without its binary file.
    let theirs = t.sh(
        &s,
        json!({"command": format!("cd {d} && grep -rl needle src | grep -v '[.]bin$' | sort")}),
    );
    assert_eq!(
        theirs["output"],
        json!("src/deep/notes.txt\nsrc/main.rs\n"),
        "{theirs}"
    );
    let counts = ok(
        t,
        &s,
        "grep",
        json!({"pattern": "needle", "path": d, "output_mode": "count", "ignore_case": true}),
    );
    assert_eq!(
        counts["counts"],
        json!([
            {"path": "src/deep/notes.txt", "count": 2},
            {"path": "src/deep/upper.md", "count": 1},
            {"path": "src/main.rs", "count": 1}
        ]),
        "{counts}"
    );
    let content = ok(
        t,
        &s,
        "grep",
        json!({"pattern": "again", "path": d, "output_mode": "content", "context": 1}),
    );
    let lines: Vec<(u64, bool)> = content["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["line"].as_u64().unwrap(),
                m.get("context") == Some(&json!(true)),
            )
        })
        .collect();
    assert_eq!(lines, [(2, true), (3, false)], "{content}");
    assert_eq!(
        content["matches"][1]["text"],
        json!("needle again"),
        "{content}"
    );
    let md = ok(
        t,
        &s,
        "grep",
        json!({"pattern": "needle", "path": d, "glob": "*.md", "ignore_case": true}),
    );
    assert_eq!(md["files"], json!(["src/deep/upper.md"]), "{md}");
    let fixed = ok(
        t,
        &s,
        "grep",
        json!({"pattern": "main() {", "path": d, "fixed_strings": true}),
    );
    assert_eq!(fixed["files"], json!(["src/main.rs"]), "{fixed}");
    let bad = failed(t, &s, "grep", json!({"pattern": "(", "path": d}));
    assert_eq!(bad["error_code"], json!("file:invalid_argument"), "{bad}");
    let globbed = ok(
        t,
        &s,
        "glob_files",
        json!({"pattern": "**/*.rs", "path": d}),
    );
    assert_eq!(globbed["files"], json!(["src/main.rs"]), "{globbed}");
}

/// Concurrent edits of one file from separate engine processes: none is lost (each edit
/// either lands, seeing the others', or fails and says so).
fn concurrent_edits_lose_no_write(t: &Target) {
    let s = t.session("c");
    let f = format!("{}/conc/shared.txt", t.scratch());
    ok(
        t,
        &s,
        "write_file",
        json!({"path": f, "content": "ANCHOR\n"}),
    );
    let calls: Vec<_> = (0..6)
        .map(|i| {
            t.invocation(
                &s,
                "edit_file",
                json!({"path": f, "old_string": "ANCHOR\n", "new_string": format!("ANCHOR\nmark{i}\n")}),
                &[],
            )
        })
        .collect();
    let answers: Vec<Value> = std::thread::scope(|scope| {
        let running: Vec<_> = calls
            .iter()
            .map(|call| scope.spawn(move || call.run().json()))
            .collect();
        running.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let text = ok(t, &s, "read_file", json!({"path": f}))["content"]
        .as_str()
        .unwrap()
        .to_owned();
    for (i, answer) in answers.iter().enumerate() {
        let landed = text.contains(&format!("mark{i}\n"));
        let succeeded = answer.get("error_code").is_none();
        assert_eq!(
            landed, succeeded,
            "{}: edit {i}: {answer}\n{text}",
            t.backend
        );
    }
    assert!(
        answers.iter().all(|a| a.get("error_code").is_none()),
        "{answers:?}"
    );
}

/// `paddock files put` and `get`: a directory goes in as a tar stream and comes back the
/// same, binary bytes included; a single file too.
fn files_go_in_and_out_of_the_environment(t: &Target) {
    let s = t.session("t");
    let local = tempfile::tempdir().unwrap();
    let src = local.path().join("src");
    std::fs::create_dir_all(src.join("nested")).unwrap();
    std::fs::write(src.join("a.txt"), "alpha\n").unwrap();
    let binary: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    std::fs::write(src.join("nested/blob.bin"), &binary).unwrap();
    let remote = format!("{}/transfer/in", t.scratch());
    let src_text = src.display().to_string();
    let run = t.paddock(&s, &["files", "put", &src_text, &remote]);
    assert_eq!(run.code, 0, "{}: {}", t.backend, run.stderr);
    assert_eq!(run.json()["kind"], json!("directory"), "{}", run.stdout);
    // The session's commands and file tools see what went in.
    let v = ok(
        t,
        &s,
        "read_file",
        json!({"path": format!("{remote}/a.txt")}),
    );
    assert_eq!(v["content"], json!("alpha\n"), "{v}");
    let v = t.sh(
        &s,
        json!({"command": format!("wc -c < {remote}/nested/blob.bin")}),
    );
    assert_eq!(v["output"].as_str().unwrap().trim(), "70000", "{v}");
    let back = local.path().join("back");
    let back_text = back.display().to_string();
    let run = t.paddock(&s, &["files", "get", &remote, &back_text]);
    assert_eq!(run.code, 0, "{}: {}", t.backend, run.stderr);
    assert_eq!(std::fs::read(back.join("nested/blob.bin")).unwrap(), binary);
    assert_eq!(
        std::fs::read_to_string(back.join("a.txt")).unwrap(),
        "alpha\n"
    );
    // One file, into a directory that does not exist yet, and out again.
    let one = format!("{}/transfer/deep/one.bin", t.scratch());
    let blob = src.join("nested/blob.bin").display().to_string();
    let run = t.paddock(&s, &["files", "put", &blob, &one]);
    assert_eq!(run.code, 0, "{}: {}", t.backend, run.stderr);
    let out = local.path().join("one.bin");
    let out_text = out.display().to_string();
    let run = t.paddock(&s, &["files", "get", &one, &out_text]);
    assert_eq!(run.code, 0, "{}: {}", t.backend, run.stderr);
    assert_eq!(std::fs::read(&out).unwrap(), binary);
    // What is not there is an error naming it.
    let missing = format!("{}/transfer/nothing", t.scratch());
    let run = t.paddock(&s, &["files", "get", &missing, &out_text]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(run.stderr.contains("no such file"), "{}", run.stderr);
}

/// The docker backend without its agent (`agent = false`) has nothing in the container to
/// serve file tools: a clear error naming the fix, never a silent fallback.
fn without_an_agent_file_tools_say_how_to_get_them(t: &Target) {
    let v = failed(
        t,
        &t.session("n"),
        "read_file",
        json!({"path": "/etc/hostname"}),
    );
    assert!(v["error"].as_str().unwrap().contains("agent"), "{v}");
}

/// `watch_files` reports, from inside the environment, what changes under a directory while
/// it watches (recursively: in a subdirectory too), with absolute paths; a missing directory
/// is `file:not_found` and a file is `file:not_directory`.
fn watch_files_reports_changes_in_the_environment(t: &Target) {
    let session = t.session("s");
    // Under /tmp: a Slurm job starts in the directory it was submitted from (the test's).
    let dir = format!("/tmp/{session}-watched");
    let made = t.sh(&session, json!({"command": format!("mkdir -p {dir}/sub")}));
    assert_eq!(made["exit_code"], json!(0), "{made}");
    let watch = t.invocation(
        &session,
        "watch_files",
        json!({"path": dir, "recursive": true, "timeout_ms": 8000}),
        &[],
    );
    let watcher = std::thread::spawn(move || watch.run());
    // Changes until the watch answers: whenever it was established, some come after.
    let mut round = 0;
    while !watcher.is_finished() && round < 40 {
        t.sh(
            &session,
            json!({"command": format!(
                "echo {round} > {dir}/sub/f{round}; rm -f {dir}/sub/f{}",
                round.max(1) - 1
            )}),
        );
        round += 1;
        std::thread::sleep(Duration::from_millis(300));
    }
    let answer = watcher.join().unwrap().json();
    let events = answer["events"].as_array().cloned().unwrap_or_default();
    let seen = |kind: &str| {
        events.iter().any(|e| {
            e["kind"] == json!(kind)
                && e["path"]
                    .as_str()
                    .is_some_and(|p| p.starts_with(&format!("{dir}/sub/f")))
        })
    };
    assert!(seen("created"), "{answer}");
    assert!(seen("removed"), "{answer}");
    assert_eq!(answer["timed_out"], json!(true), "{answer}");
    let missing = t
        .call(
            &session,
            "watch_files",
            json!({"path": format!("{dir}/nope"), "timeout_ms": 100}),
        )
        .json();
    assert_eq!(missing["error_code"], json!("file:not_found"), "{missing}");
    let file = t
        .call(
            &session,
            "watch_files",
            json!({"path": format!("{dir}/sub/f{}", round - 1), "timeout_ms": 100}),
        )
        .json();
    assert_eq!(file["error_code"], json!("file:not_directory"), "{file}");
    t.sh(&session, json!({"command": format!("rm -rf {dir}")}));
}

conformance!([
    files_resolve_in_the_sessions_directory_and_commands_see_them,
    edits_replace_exactly_and_change_nothing_on_error,
    patches_apply_all_or_nothing,
    grep_and_glob_follow_ripgrep_rules,
    concurrent_edits_lose_no_write,
    files_go_in_and_out_of_the_environment,
    watch_files_reports_changes_in_the_environment,
];
    local, sandboxed, docker, ssh, apptainer, slurm, slurm_apptainer, slurm_node1,
    slurm_node2_apptainer, docker_runsc);

conformance!([without_an_agent_file_tools_say_how_to_get_them]; docker_exec);

/// In the workspace-write sandbox the file tools are confined as commands are: a symlink in the
/// workspace pointing out of it is no way out (Landlock refuses the write through it), and a
/// path with `..` that leaves the workspace is refused the same way. Reads stay possible.
#[test]
fn in_the_sandbox_symlinks_and_dot_dots_do_not_lead_out_of_the_workspace() {
    let Some(t) = Target::new("sandboxed") else {
        return;
    };
    let s = t.session("x");
    let v = t.sh(&s, json!({"command": "pwd"}));
    let workspace = std::path::PathBuf::from(v["output"].as_str().unwrap().trim());
    // Not under /tmp: the sandbox's /tmp is a private tmpfs, writable and gone with it.
    let outside = std::path::PathBuf::from(format!(
        "/var/tmp/paddock-escape-{}.txt",
        std::process::id()
    ));
    let climb = format!(
        "{}{}",
        "../".repeat(workspace.components().count() - 1),
        outside.display().to_string().trim_start_matches('/')
    );
    let v = t.sh(
        &s,
        json!({"command": format!("ln -s {} escape && ls -l escape", outside.display())}),
    );
    assert_eq!(v["exit_code"], json!(0), "{v}");
    let v = failed(
        &t,
        &s,
        "write_file",
        json!({"path": "escape", "content": "out\n"}),
    );
    assert_eq!(v["error_code"], json!("file:permission_denied"), "{v}");
    let v = failed(
        &t,
        &s,
        "write_file",
        json!({"path": climb, "content": "out\n"}),
    );
    assert_eq!(v["error_code"], json!("file:permission_denied"), "{v}");
    let v = failed(
        &t,
        &s,
        "apply_patch",
        json!({"patch": format!("*** Begin Patch\n*** Add File: inside.txt\n+in\n*** Add File: {climb}\n+out\n*** End Patch\n")}),
    );
    assert!(
        v["error_code"].as_str().unwrap().starts_with("file:"),
        "{v}"
    );
    assert!(!outside.exists(), "a file tool wrote outside the workspace");
    // All or nothing: the patch's file inside the workspace was not left behind either.
    assert!(!workspace.join("inside.txt").exists());
    // Reading outside the workspace is allowed, as for commands.
    ok(&t, &s, "read_file", json!({"path": "/etc/hostname"}));
}
