//! The failure log: every failed tool call, direct or nested in a script, is one JSON line in
//! `$PADDOCK_HOME/logs/tool-failures.jsonl` with time, session, tool, error code and duration,
//! and never the call's arguments or output.

use std::time::Duration;

use paddock_tests::paddock_env;
use serde_json::{Value, json};

fn failures(home: &std::path::Path) -> Vec<Value> {
    let text =
        std::fs::read_to_string(home.join("logs").join("tool-failures.jsonl")).unwrap_or_default();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn call(home: &std::path::Path, tool: &str, args: &Value) -> serde_json::Value {
    let args = args.to_string();
    let run = paddock_env(
        &["call", tool, "--args", &args, "--session", "audit"],
        &[("PADDOCK_HOME", home.to_str().unwrap())],
        None,
        Duration::from_secs(60),
    );
    run.json()
}

#[test]
fn failed_calls_are_logged_without_their_arguments() {
    let home = tempfile::tempdir().unwrap();
    // A direct call refused for its arguments, carrying a secret the log must not keep.
    let refused = call(
        home.path(),
        "terminal",
        &json!({"command": "echo hunter2-secret", "colour": "red"}),
    );
    assert_eq!(
        refused["error_code"],
        json!("tool:invalid_arguments"),
        "{refused}"
    );
    // A script whose nested call fails and which then fails itself.
    let script = call(
        home.path(),
        "run_tools_script",
        &json!({"code": "await tools.wait(milliseconds='hunter2-secret')"}),
    );
    assert_eq!(script["ok"], json!(false), "{script}");
    // A call that succeeds is not a failure.
    let fine = call(home.path(), "current_datetime", &json!({}));
    assert!(fine.get("error").is_none(), "{fine}");

    let lines = failures(home.path());
    let tools: Vec<&str> = lines.iter().map(|l| l["tool"].as_str().unwrap()).collect();
    assert_eq!(tools, ["terminal", "wait", "run_tools_script"], "{lines:?}");
    for line in &lines {
        assert_eq!(line["session"], json!("audit"), "{line}");
        assert!(line["duration_ms"].as_f64().is_some(), "{line}");
        assert!(line["timestamp_ms"].as_u64().is_some(), "{line}");
    }
    assert_eq!(lines[0]["error_code"], json!("tool:invalid_arguments"));
    assert_eq!(lines[1]["error_code"], json!("tool:invalid_arguments"));
    assert!(
        lines[1]["parent_call_id"].is_string(),
        "a nested call names its script"
    );
    assert_eq!(lines[2]["error_code"], script["error_code"]);
    let raw = std::fs::read_to_string(home.path().join("logs/tool-failures.jsonl")).unwrap();
    assert!(!raw.contains("hunter2"), "arguments reached the log: {raw}");
}
