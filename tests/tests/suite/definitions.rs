//! `paddock tools` output, checked by an independent JSON Schema validator (Python jsonschema).

use paddock_tests::{paddock, temp_file};
use serde_json::json;

fn validate(kind: &str, document: &str) {
    let (_dir, file) = temp_file("defs.json", document);
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas/validate_definitions.py");
    let out = std::process::Command::new("python3")
        .arg(&script)
        .args([kind, &file])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{kind}: {}{} (python3 -m pip install jsonschema if it is missing)",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn openai_format_is_valid_openai_function_definitions() {
    let run = paddock(&["tools", "--format", "openai"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    validate("openai", &run.stdout);
    let defs = run.json();
    let names: Vec<&str> = defs
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names[0], "run_tools_script");
    assert!(
        names.contains(&"wait") && names.contains(&"current_datetime"),
        "{names:?}"
    );
}

#[test]
fn mcp_format_is_a_valid_tools_list_result() {
    let run = paddock(&["tools", "--format", "mcp"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    validate("mcp", &run.stdout);
}

#[test]
fn the_validator_rejects_broken_definitions() {
    // The check above must be able to fail.
    let (_dir, file) = temp_file(
        "bad.json",
        r#"[{"type": "function", "function": {"name": "has space", "parameters": {"type": "object"}}}]"#,
    );
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas/validate_definitions.py");
    let out = std::process::Command::new("python3")
        .arg(&script)
        .args(["openai", &file])
        .output()
        .unwrap();
    assert!(!out.status.success());
}

#[test]
fn run_tools_script_describes_exactly_the_tools_scripts_can_call() {
    let (_dir, policy) = temp_file("p.toml", "[codemode]\nexclude = [\"wait\"]\n");
    let run = paddock(&["tools", "--format", "mcp", "--policy", &policy]);
    let tools = run.json()["tools"].as_array().unwrap().clone();
    let rts = tools
        .iter()
        .find(|t| t["name"] == json!("run_tools_script"))
        .unwrap();
    let description = rts["description"].as_str().unwrap();
    assert!(
        description.contains("async def current_datetime(*, format: str | None = None)"),
        "{description}"
    );
    assert!(
        !description.contains("def wait("),
        "an excluded tool is described: {description}"
    );
    // The agent still sees wait itself.
    assert!(tools.iter().any(|t| t["name"] == json!("wait")));
}

#[test]
fn signatures_format_prints_one_line_per_tool() {
    let run = paddock(&["tools", "--format", "signatures"]);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert!(
        lines.iter().all(|l| l.starts_with("async def ")),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("async def wait(*, milliseconds: float = 0)")),
        "{lines:?}"
    );
}

#[test]
fn toolsets_and_presets_shape_what_is_listed() {
    let (_dir, minimal) = temp_file(
        "m.toml",
        "[toolsets]\ndisabled = [\"basic\", \"terminal\"]\n",
    );
    let run = paddock(&["tools", "--format", "mcp", "--policy", &minimal]);
    let names: Vec<String> = run.json()["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, vec!["run_tools_script".to_owned()]);
}
