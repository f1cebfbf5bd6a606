//! A backend's service dying under a running command: the command fails with an error naming
//! the backend, and the same engine goes on serving the others. Its own test binary, because it
//! kills the shared test services (cargo runs test binaries one after another, so the
//! conformance suite in `all` never sees them down); it starts them again with
//! scripts/test-services.sh before it ends.

#![expect(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::process::Command;
use std::time::Duration;

use paddock_tests::{paddock_env, write_file};
use serde_json::json;

fn services_policy() -> String {
    std::env::var("PADDOCK_TEST_POLICY")
        .unwrap_or_else(|_| "/tmp/paddock-services/policy.toml".to_owned())
}

fn skipped(backend: &str) -> bool {
    std::env::var("PADDOCK_SKIP_BACKENDS")
        .unwrap_or_default()
        .split(',')
        .any(|b| b.trim() == backend)
}

fn repo_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Runs a script whose `terminal` goes to `backend` (killed by `kill` after 3 s) and whose
/// `python_execute` stays local.
fn kill_mid_command(backend: &str, kill: &str) {
    let policy_text = std::fs::read_to_string(services_policy()).unwrap_or_default();
    assert!(
        policy_text.contains(&format!("[backends.{backend}]")),
        "the {backend} test service is not up: run scripts/test-services.sh as root first, or \
         set PADDOCK_SKIP_BACKENDS={backend}"
    );
    let dir = tempfile::tempdir().unwrap();
    let policy = write_file(
        &dir,
        "p.toml",
        format!("{policy_text}\n[routes]\nterminal = \"{backend}\"\npython_execute = \"local\"\n"),
    );
    let script = r#"
try:
    await tools.terminal(command="sleep 25; echo finished", timeout=60)
    first = "no error"
except Exception as e:
    first = str(e)
second = await tools.python_execute(code="print('local still works')")
return {"first": first, "second": second["output"]}
"#;
    let home = dir.path().to_str().unwrap().to_owned();
    let policy_arg = policy.clone();
    let runner = std::thread::spawn(move || {
        paddock_env(
            &["run", "--policy", &policy_arg, "--timeout", "120", "-"],
            &[("PADDOCK_HOME", &home)],
            Some(script.as_bytes()),
            Duration::from_secs(120),
        )
    });
    std::thread::sleep(Duration::from_secs(3));
    let killed = Command::new("bash").arg("-c").arg(kill).status().unwrap();
    assert!(killed.success(), "`{kill}` failed");
    let run = runner.join().unwrap();
    let restart = Command::new(repo_root().join("scripts/test-services.sh"))
        .output()
        .unwrap();
    assert!(
        restart.status.success(),
        "restarting the services failed: {}",
        String::from_utf8_lossy(&restart.stderr)
    );

    let v = run.json();
    assert_eq!(v["ok"], json!(true), "{v}");
    let first = v["result"]["first"].as_str().unwrap();
    assert!(
        first.contains(&format!(
            "the {backend} backend '{backend}' is not available"
        )),
        "{first}"
    );
    assert!(!first.contains("finished"), "{first}");
    assert_eq!(v["result"]["second"], json!("local still works\n"), "{v}");

    // And the backend serves again once its service is back.
    let again = paddock_env(
        &[
            "call",
            "terminal",
            "--policy",
            &services_policy(),
            "--backend",
            backend,
            "--args",
            "{\"command\": \"echo back\"}",
        ],
        &[("PADDOCK_HOME", dir.path().to_str().unwrap())],
        None,
        Duration::from_secs(60),
    )
    .json();
    assert_eq!(again["output"], json!("back\n"), "{again}");
}

#[test]
fn killing_sshd_or_dockerd_mid_command_is_a_clear_error_and_the_engine_serves_on() {
    if skipped("ssh") {
        eprintln!("SKIPPED: the ssh outage (PADDOCK_SKIP_BACKENDS)");
    } else {
        // The private sshd of the test services (listener and the connections it serves, the
        // command's among them); a system sshd is left alone.
        kill_mid_command(
            "ssh",
            "kill -KILL $(cat /tmp/paddock-services/ssh/sshd.pid) && pkill -KILL -f 'sshd: paddock-ci'",
        );
    }
    if skipped("docker") {
        eprintln!("SKIPPED: the docker outage (PADDOCK_SKIP_BACKENDS)");
    } else {
        kill_mid_command(
            "docker",
            "kill -KILL $(cat /tmp/paddock-services/dockerd.pid 2>/dev/null || pgrep -x dockerd)",
        );
    }
}
