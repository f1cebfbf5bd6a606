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

use paddock_tests::{backend_skipped, paddock_env, services_policy, write_file};
use serde_json::json;

fn repo_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Closes the session `default` of a state directory (its containers, instances, agents)
/// when dropped.
struct CloseDefaultSession(std::path::PathBuf);

impl Drop for CloseDefaultSession {
    fn drop(&mut self) {
        let _ = paddock_env(
            &[
                "sessions",
                "close",
                "default",
                "--policy",
                &services_policy(),
            ],
            &[("PADDOCK_HOME", self.0.to_str().unwrap_or_default())],
            None,
            Duration::from_secs(60),
        );
    }
}

/// What a command running when its service dies should get.
#[derive(Clone, Copy, PartialEq)]
enum Expect {
    /// A clear error naming the backend.
    Error,
    /// Its own end: the agent in the container does not need dockerd to finish a command.
    Finished,
}

/// Runs a script whose `terminal` goes to `backend` (killed by `kill` after 3 s) and whose
/// `python_execute` stays local. `extra` is added to the backend's policy section.
fn kill_mid_command(backend: &str, kill: &str, extra: &str, expect: Expect) {
    let policy_text = std::fs::read_to_string(services_policy()).unwrap_or_default();
    assert!(
        policy_text.contains(&format!("[backends.{backend}]")),
        "the {backend} test service is not up: run scripts/test-services.sh as root first, or \
         set PADDOCK_SKIP_BACKENDS={backend}"
    );
    let dir = tempfile::tempdir().unwrap();
    // Both commands below run in the session `default` of this temporary home: closed when the
    // test ends, pass or fail, or its container outlives the home that could sweep it.
    let _closer = CloseDefaultSession(dir.path().to_path_buf());
    let policy = write_file(
        &dir,
        "p.toml",
        format!(
            "{}\n[routes]\nterminal = \"{backend}\"\npython_execute = \"local\"\n",
            policy_text.replace(
                &format!("[backends.{backend}]\n"),
                &format!("[backends.{backend}]\n{extra}"),
            )
        ),
    );
    let script = r#"
try:
    r = await tools.terminal(command="sleep 25; echo finished", timeout=60)
    first = "no error: " + r["output"]
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
    match expect {
        Expect::Error => {
            assert!(
                first.contains(&format!(
                    "the {backend} backend '{backend}' is not available"
                )),
                "{first}"
            );
            assert!(!first.contains("finished"), "{first}");
        }
        Expect::Finished => assert_eq!(first, "no error: finished\n"),
    }
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
    if backend_skipped("ssh") {
        eprintln!("SKIPPED: the ssh outage (PADDOCK_SKIP_BACKENDS)");
    } else {
        // The private sshd of the test services (listener and the connections it serves, the
        // command's among them); a system sshd is left alone.
        kill_mid_command(
            "ssh",
            "kill -KILL $(cat /tmp/paddock-services/ssh/sshd.pid) && pkill -KILL -f 'sshd: paddock-ci'",
            "",
            Expect::Error,
        );
    }
    if backend_skipped("docker") {
        eprintln!("SKIPPED: the docker outage (PADDOCK_SKIP_BACKENDS)");
    } else {
        let kill =
            "kill -KILL $(cat /tmp/paddock-services/dockerd.pid 2>/dev/null || pgrep -x dockerd)";
        // Per-command exec goes through dockerd: its death is the command's.
        kill_mid_command("docker", kill, "agent = false\n", Expect::Error);
        // Through the agent the command is between the engine and the container (kept by
        // containerd): dockerd's death does not end it.
        kill_mid_command("docker", kill, "", Expect::Finished);
    }
}
