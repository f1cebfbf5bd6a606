//! Bad input to `paddock run`: a clear message on stderr, nothing on stdout, exit 2.

use paddock_tests::{paddock, paddock_with, temp_file, write_file};
use std::time::Duration;

fn assert_usage_error(run: &paddock_tests::Run, needle: &str) {
    assert_eq!(run.code, 2, "stdout={} stderr={}", run.stdout, run.stderr);
    assert!(
        run.stdout.is_empty(),
        "stdout must stay empty: {}",
        run.stdout
    );
    assert!(
        run.stderr.contains(needle),
        "stderr lacks {needle:?}: {}",
        run.stderr
    );
}

#[test]
fn missing_file() {
    assert_usage_error(
        &paddock(&["run", "/nonexistent/script.py"]),
        "/nonexistent/script.py",
    );
}

#[test]
fn not_utf8() {
    let (_dir, f) = temp_file("bin.py", b"x = '\xff\xfe'\n");
    assert_usage_error(&paddock(&["run", &f]), "not UTF-8");
}

#[test]
fn too_large() {
    let (_dir, f) = temp_file("big.py", "x = 1\n".repeat(200_000));
    assert_usage_error(&paddock(&["run", &f]), "limit is 1048576 bytes");
}

#[test]
fn empty_script_file_and_stdin() {
    let (_dir, f) = temp_file("empty.py", "\n  \n");
    assert_usage_error(&paddock(&["run", &f]), "empty");
    let run = paddock_with(&["run", "-"], Some(b""), Duration::from_secs(30));
    assert_usage_error(&run, "empty");
}

#[test]
fn a_directory_is_not_a_script() {
    assert_usage_error(&paddock(&["run", "/tmp"]), "is a directory");
}

#[test]
fn unknown_flags_and_bad_values() {
    let (_dir, f) = temp_file("s.py", "1");
    assert_usage_error(&paddock(&["run", "--frobnicate", &f]), "--frobnicate");
    assert_usage_error(&paddock(&["run", "--timeout=-3", &f]), "--timeout");
    assert_usage_error(
        &paddock(&["run", "--max-memory-mb", "lots", &f]),
        "--max-memory-mb",
    );
    assert_usage_error(&paddock(&["run"]), "SCRIPT");
}

#[test]
fn bad_policy_names_file_line_and_key() {
    let (dir, policy) = temp_file(
        "bad.toml",
        "[codemode]\ntimeout_seconds = 5\nmax_tool_cals = 3\n",
    );
    let f = write_file(&dir, "s.py", "1");
    let run = paddock(&["run", "--policy", &policy, &f]);
    assert_usage_error(
        &run,
        &format!("{policy}:3: codemode.max_tool_cals: unknown field"),
    );
}

#[test]
fn stdin_script_runs() {
    let run = paddock_with(
        &["run", "-"],
        Some(b"print('from stdin')\n7"),
        Duration::from_secs(30),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.json()["output"], serde_json::json!("from stdin\n"));
}
