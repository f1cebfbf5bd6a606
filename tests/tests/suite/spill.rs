//! Big direct results are spilled, never silently cut: a direct call's result longer than
//! `[tools] max_result_chars` keeps its shape with the big field replaced by a preview naming a
//! file in `$PADDOCK_HOME/spill/<session>/` that holds the whole text; `read_output` pages
//! through it and filters it, and reads nothing else; closing the session removes the files.
//! A script's nested calls are never spilled: the script gets the whole value.

use std::path::{Path, PathBuf};
use std::time::Duration;

use paddock_tests::{Run, paddock_home, temp_file, write_file};
use serde_json::{Value, json};

/// `paddock ARGS` with its state in `home`.
fn run(home: &Path, args: &[&str]) -> Run {
    paddock_home(home, args, Duration::from_secs(120))
}

/// `paddock call TOOL` in `session`; its JSON (a failed call's too).
fn call(home: &Path, session: &str, tool: &str, args: &Value, policy: Option<&str>) -> Value {
    let args = args.to_string();
    let mut argv = vec!["call", tool, "--args", &args, "--session", session];
    if let Some(policy) = policy {
        argv.extend(["--policy", policy]);
    }
    run(home, &argv).json()
}

/// `row000000\n` ... : `rows` lines of 10 characters, exactly what `seq -f row%06g` prints.
fn rows(rows: usize) -> String {
    (0..rows).map(|i| format!("row{i:06}\n")).collect()
}

fn seq(rows: usize) -> String {
    format!("seq -f row%06g 0 {}", rows - 1)
}

fn close(home: &Path, session: &str) {
    let out = run(home, &["sessions", "close", session]);
    assert_eq!(out.code, 0, "stdout={} stderr={}", out.stdout, out.stderr);
}

fn files_in(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| entries.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

#[test]
fn a_big_terminal_output_is_spilled_and_read_back_in_pages() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let full = rows(30_000);
    assert_eq!(full.chars().count(), 300_000);
    let result = call(
        home,
        "spill",
        "terminal",
        &json!({"command": seq(30_000)}),
        None,
    );
    // The usual shape: output, exit_code, error; the output a preview naming the file.
    assert_eq!(result["exit_code"], json!(0), "{result}");
    assert_eq!(result["error"], Value::Null, "{result}");
    let preview = result["output"].as_str().unwrap();
    assert!(preview.starts_with("row000000\nrow000001\n"), "{preview}");
    assert!(preview.ends_with("row029999\n"), "{preview}");
    assert!(
        preview.chars().count() < 50_000,
        "the preview is {} characters",
        preview.chars().count()
    );
    let spilled = &result["spilled"][0];
    assert_eq!(spilled["field"], json!("output"), "{result}");
    assert_eq!(spilled["chars"], json!(300_000), "{result}");
    assert_eq!(spilled["lines"], json!(30_000), "{result}");
    let id = spilled["id"].as_str().unwrap().to_owned();
    let path = PathBuf::from(spilled["path"].as_str().unwrap());
    assert!(
        preview.contains(&id),
        "the preview names the file: {preview}"
    );
    assert!(
        spilled["hint"].as_str().unwrap().contains("read_output"),
        "{spilled}"
    );
    // The file, in the session's spill directory, holds exactly the whole output.
    let dir = home.join("spill").join("spill");
    assert_eq!(path.parent(), Some(dir.as_path()), "{}", path.display());
    assert_eq!(std::fs::read_to_string(&path).unwrap(), full);

    // Pages: from an offset, from the end, by path.
    let page = call(
        home,
        "spill",
        "read_output",
        &json!({"id": id, "offset": 12_345, "limit": 3}),
        None,
    );
    assert_eq!(
        page["text"],
        json!("row012345\nrow012346\nrow012347"),
        "{page}"
    );
    assert_eq!(page["next_offset"], json!(12_348), "{page}");
    assert_eq!(page["total_lines"], json!(30_000), "{page}");
    let last = call(
        home,
        "spill",
        "read_output",
        &json!({"path": path, "offset": -2}),
        None,
    );
    assert_eq!(last["text"], json!("row029998\nrow029999"), "{last}");
    assert_eq!(last["next_offset"], Value::Null, "{last}");
    // Paging to the end gives back every line, each once.
    let mut offset = 0;
    let mut paged = String::new();
    loop {
        let page = call(
            home,
            "spill",
            "read_output",
            &json!({"id": id, "offset": offset, "limit": 5000}),
            None,
        );
        paged.push_str(page["text"].as_str().unwrap());
        paged.push('\n');
        match page["next_offset"].as_u64() {
            Some(n) => offset = n,
            None => break,
        }
    }
    assert_eq!(paged, full, "paging lost or repeated lines");
    // Filtered: only the lines matching a pattern, with their line numbers.
    let matches = call(
        home,
        "spill",
        "read_output",
        &json!({"id": id, "pattern": "^row0271[0-4]\\d$", "limit": 2}),
        None,
    );
    assert_eq!(matches["total_matches"], json!(50), "{matches}");
    assert_eq!(
        matches["matches"],
        json!([{"line": 27_100, "text": "row027100"}, {"line": 27_101, "text": "row027101"}]),
        "{matches}"
    );

    // Closing the session removes the spilled files.
    close(home, "spill");
    assert!(!path.exists(), "{} outlived its session", path.display());
    assert!(!dir.exists(), "{} outlived its session", dir.display());
    let gone = call(home, "spill", "read_output", &json!({"id": id}), None);
    assert_eq!(
        gone["error_code"],
        json!("tool:invalid_arguments"),
        "{gone}"
    );
}

#[test]
fn read_output_reads_only_its_own_sessions_spilled_results() {
    let home_dir = tempfile::tempdir().unwrap();
    let home = home_dir.path();
    let result = call(
        home,
        "owner",
        "terminal",
        &json!({"command": seq(10_000)}),
        None,
    );
    let id = result["spilled"][0]["id"].as_str().unwrap().to_owned();
    let dir = home.join("spill").join("owner");
    // A secret beside the state directory, and a symbolic link to it planted in the spill
    // directory itself (as if something had written there).
    let secret = home.join("secret.txt");
    std::fs::write(&secret, "hunter2-secret\n").unwrap();
    std::os::unix::fs::symlink(&secret, dir.join("planted.txt")).unwrap();
    let escapes = [
        json!({"id": "../../secret"}),
        json!({"id": "../../session-records/owner.json"}),
        json!({"id": "planted"}),
        json!({"path": "/etc/passwd"}),
        json!({"path": secret}),
        json!({"path": format!("{}/../../secret.txt", dir.display())}),
        json!({"path": dir.join("planted.txt")}),
        json!({"path": "secret.txt"}),
    ];
    for args in &escapes {
        let args = args.as_object().unwrap().clone();
        let out = run(
            home,
            &[
                "call",
                "read_output",
                "--args",
                &Value::Object(args.clone()).to_string(),
                "--session",
                "owner",
            ],
        );
        assert_eq!(out.code, 1, "{args:?}: {}", out.stdout);
        let answer = out.json();
        assert_eq!(
            answer["error_code"],
            json!("read_output:outside_spill_dir"),
            "{args:?}: {answer}"
        );
        assert!(!out.stdout.contains("hunter2"), "{args:?}: {}", out.stdout);
        assert!(!out.stdout.contains("root:"), "{args:?}: {}", out.stdout);
    }
    // Another session cannot read it, by id or by path.
    let other = call(home, "other", "read_output", &json!({"id": id}), None);
    assert_eq!(
        other["error_code"],
        json!("tool:invalid_arguments"),
        "{other}"
    );
    let path = result["spilled"][0]["path"].as_str().unwrap();
    let other = call(home, "other", "read_output", &json!({"path": path}), None);
    assert_eq!(
        other["error_code"],
        json!("read_output:outside_spill_dir"),
        "{other}"
    );
    // Its owner can.
    let own = call(
        home,
        "owner",
        "read_output",
        &json!({"id": id, "limit": 1}),
        None,
    );
    assert_eq!(own["text"], json!("row000000"), "{own}");
    close(home, "owner");
    assert!(!dir.exists());
    assert!(
        secret.exists(),
        "closing the session followed the planted link"
    );
}

#[test]
fn a_script_gets_the_whole_output_of_its_nested_call() {
    let home_dir = tempfile::tempdir().unwrap();
    let home = home_dir.path();
    let code = format!(
        "import hashlib\n\
         r = await tools.terminal(command={:?})\n\
         out = r['output']\n\
         return {{'chars': len(out), 'sha256': hashlib.sha256(out.encode()).hexdigest(), \
         'keys': sorted(r.keys())}}",
        seq(20_000)
    );
    let result = call(
        home,
        "scripted",
        "run_tools_script",
        &json!({"code": code}),
        None,
    );
    assert_eq!(result["ok"], json!(true), "{result}");
    let full = rows(20_000);
    assert_eq!(full.chars().count(), 200_000);
    let digest = {
        use std::io::Write;
        let mut child = std::process::Command::new("sha256sum")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(full.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        String::from_utf8(out.stdout).unwrap()[..64].to_owned()
    };
    assert_eq!(
        result["result"],
        json!({"chars": 200_000, "sha256": digest, "keys": ["duration_ms", "error", "exit_code", "output", "timed_out"]}),
        "the script did not get the whole output: {result}"
    );
    // Nothing of this session was spilled.
    assert!(
        files_in(&home.join("spill").join("scripted")).is_empty(),
        "{:?}",
        files_in(&home.join("spill").join("scripted"))
    );
    close(home, "scripted");
}

#[test]
fn the_limit_is_the_policys_and_a_scripts_own_result_spills_too() {
    let home_dir = tempfile::tempdir().unwrap();
    let home = home_dir.path();
    let (dir, policy) = temp_file(
        "p.toml",
        "[codemode]\nmax_output_chars = 100000\n\n[tools]\nmax_result_chars = 5000\n",
    );
    // Under the limit: untouched.
    let small = call(
        home,
        "limits",
        "terminal",
        &json!({"command": seq(400)}),
        Some(&policy),
    );
    assert_eq!(small["output"], json!(rows(400)), "{small}");
    assert!(small.get("spilled").is_none(), "{small}");
    // Over it: spilled.
    let big = call(
        home,
        "limits",
        "terminal",
        &json!({"command": seq(600)}),
        Some(&policy),
    );
    assert_eq!(big["spilled"][0]["chars"], json!(6000), "{big}");
    let text = std::fs::read_to_string(big["spilled"][0]["path"].as_str().unwrap()).unwrap();
    assert_eq!(text, rows(600));
    // run_tools_script's printed output is a direct result too.
    let script = call(
        home,
        "limits",
        "run_tools_script",
        &json!({"code": "for i in range(1000):\n    print(f'line {i:05}')\n'done'"}),
        Some(&policy),
    );
    assert_eq!(script["ok"], json!(true), "{script}");
    assert_eq!(script["result"], json!("done"), "{script}");
    assert_eq!(script["spilled"][0]["field"], json!("output"), "{script}");
    let printed = std::fs::read_to_string(script["spilled"][0]["path"].as_str().unwrap()).unwrap();
    let expected: String = (0..1000).map(|i| format!("line {i:05}\n")).collect();
    assert_eq!(printed, expected);
    // A policy limit out of bounds is refused with its line.
    let bad = write_file(&dir, "bad.toml", "[tools]\nmax_result_chars = 10\n");
    let out = run(home, &["policy", "check", &bad]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("bad.toml:2: tools.max_result_chars: must be between 5000"),
        "{}",
        out.stderr
    );
    close(home, "limits");
    assert!(!home.join("spill").join("limits").exists());
}

#[test]
fn paddock_tools_lists_read_output() {
    let out = paddock_tests::paddock(&["tools", "--format", "mcp"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let listed: Value = serde_json::from_str(&out.stdout).unwrap();
    let tool = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == json!("read_output"))
        .unwrap_or_else(|| panic!("read_output is not listed: {listed}"))
        .clone();
    // (Its read-only hint reaches MCP clients: tests/mcp/test_spill.py.)
    let properties = tool["inputSchema"]["properties"].as_object().unwrap();
    let mut names: Vec<&str> = properties.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(names, ["id", "limit", "offset", "path", "pattern"]);
}

#[test]
fn beyond_the_capture_ceiling_the_result_says_what_was_cut() {
    let home_dir = tempfile::tempdir().unwrap();
    let home = home_dir.path();
    // 1 100 000 characters: past the 1 000 000 a command's output is captured to.
    let result = call(
        home,
        "ceiling",
        "terminal",
        &json!({"command": seq(110_000)}),
        None,
    );
    assert_eq!(result["exit_code"], json!(0), "{result}");
    let cut = result["output_cut"]
        .as_str()
        .unwrap_or_else(|| panic!("{result}"));
    assert!(
        cut.contains("printed 1100000 characters") && cut.contains("1000000"),
        "{cut}"
    );
    // The captured million is spilled: its start and its end, the middle marked as lost.
    let path = result["spilled"][0]["path"].as_str().unwrap();
    let kept = std::fs::read_to_string(path).unwrap();
    assert!(kept.starts_with("row000000\n"), "{}", &kept[..100]);
    assert!(
        kept.ends_with("row109999\n"),
        "{}",
        &kept[kept.len() - 100..]
    );
    assert!(
        kept.contains("…[100000 characters omitted]…"),
        "the cut is not marked in the file"
    );
    close(home, "ceiling");
}
