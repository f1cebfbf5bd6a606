//! A backend that cannot be reached is an error naming it and what to do, and the command is
//! run nowhere else: no quiet fallback to the local machine. These need no running service.

use std::time::Duration;

use paddock_tests::{paddock_env, write_file};
use serde_json::{Value, json};

/// Runs `touch CANARY` routed to the policy's backend `b`; answers the result and whether the
/// canary appeared on this machine.
fn run_on_unreachable(section: &str) -> (i32, Value, bool) {
    let dir = tempfile::tempdir().unwrap();
    let canary = dir.path().join("ran-locally");
    let policy = write_file(
        &dir,
        "p.toml",
        format!("[backends.b]\n{section}\n[routes]\nterminal = \"b\"\n"),
    );
    let args = json!({"command": format!("touch {}", canary.display())}).to_string();
    let run = paddock_env(
        &["call", "terminal", "--args", &args, "--policy", &policy],
        &[("PADDOCK_HOME", dir.path().to_str().unwrap())],
        None,
        Duration::from_secs(60),
    );
    let value = run.json();
    (run.code, value, canary.exists())
}

#[test]
fn a_docker_daemon_that_is_not_there_is_named() {
    let (code, v, ran) = run_on_unreachable(
        "kind = \"docker\"\nimage = \"paddock-test:latest\"\nsocket = \"/nonexistent/docker.sock\"",
    );
    assert_eq!(code, 1, "{v}");
    assert_eq!(v["error_code"], json!("tool:failed"), "{v}");
    let error = v["error"].as_str().unwrap();
    assert!(
        error.contains("cannot reach dockerd at /nonexistent/docker.sock"),
        "{error}"
    );
    assert!(!ran, "the command ran on this machine instead");
}

#[test]
fn an_unreachable_ssh_host_is_named() {
    let (code, v, ran) = run_on_unreachable(
        "kind = \"ssh\"\nhost = \"127.0.0.1\"\nport = 1\nuser = \"nobody\"\nconnect_timeout_seconds = 5",
    );
    assert_eq!(code, 1, "{v}");
    let error = v["error"].as_str().unwrap();
    assert!(
        error.contains("ssh backend 'b'")
            && error.contains("127.0.0.1:1")
            && error.contains("Connection refused"),
        "{error}"
    );
    assert!(!ran, "the command ran on this machine instead");
}

#[test]
fn a_missing_apptainer_program_is_named() {
    let (code, v, ran) = run_on_unreachable(
        "kind = \"singularity\"\nimage = \"/nonexistent.sif\"\nbinary = \"/nonexistent/apptainer\"",
    );
    assert_eq!(code, 1, "{v}");
    let error = v["error"].as_str().unwrap();
    assert!(
        error.contains("apptainer backend 'b'") && error.contains("/nonexistent/apptainer"),
        "{error}"
    );
    assert!(!ran, "the command ran on this machine instead");
}
