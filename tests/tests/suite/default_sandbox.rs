//! Safe by default: with no policy file, `terminal` runs in the workspace-write sandbox over the
//! directory `paddock` runs in, with no network, exactly like `policies/default.toml`. A policy
//! that says `sandbox = "none"` gets the old unconfined backend; a kernel that cannot give the
//! sandbox gets an error naming the feature and that key, never a quiet unconfined run.
//!
//! Evidence is checked on the host: files that must not exist, files that must, a listener that
//! must never be reached.

use std::io::ErrorKind;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::Duration;

use paddock_tests::{Run, paddock_at};
use serde_json::{Value, json};

/// A project directory to run `paddock` in, beside a state directory and a directory outside
/// the project. Not under /tmp: inside the sandbox /tmp is the session's own.
struct Project {
    dir: tempfile::TempDir,
    workspace: PathBuf,
    outside: PathBuf,
}

impl Project {
    fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("default-sandbox-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .unwrap_or_else(|e| panic!("temp dir: {e}"));
        let workspace = dir.path().join("project");
        let outside = dir.path().join("outside");
        for d in [&workspace, &outside] {
            std::fs::create_dir_all(d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
        }
        Self {
            dir,
            workspace,
            outside,
        }
    }

    fn state(&self) -> String {
        self.dir.path().join("state").display().to_string()
    }

    /// `paddock ARGS` in the project directory, with no policy (`PADDOCK_POLICY` is removed)
    /// unless ARGS name one, and with extra environment variables.
    fn paddock(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let state = self.state();
        let mut vars = vec![("PADDOCK_HOME", state.as_str())];
        vars.extend_from_slice(env);
        paddock_at(
            Some(&self.workspace),
            args,
            &vars,
            None,
            Duration::from_secs(60),
        )
    }

    /// `paddock call terminal` with these arguments and `extra` flags (a policy).
    fn terminal(&self, args: Value, extra: &[&str]) -> Value {
        let args = args.to_string();
        let mut argv = vec!["call", "terminal", "--args", &args];
        argv.extend_from_slice(extra);
        let run = self.paddock(&argv, &[]);
        run.answer()
    }

    fn output(&self, command: &str) -> String {
        let v = self.terminal(json!({"command": command, "timeout": 20}), &[]);
        assert_eq!(v["error"], Value::Null, "{v}");
        v["output"].as_str().unwrap_or_default().to_owned()
    }
}

impl Drop for Project {
    /// The session's sandboxed agent ends with the session, not half an hour later.
    fn drop(&mut self) {
        let _ = self.paddock(&["sessions", "close", "default"], &[]);
    }
}

#[test]
fn with_no_policy_a_write_outside_the_current_directory_fails_and_inside_it_works() {
    let p = Project::new();
    let etc = Path::new("/etc/paddock-x");
    assert!(!etc.exists(), "{} exists before the test", etc.display());

    // The command of issue 15. Whatever stops it first (the approval gate flags /etc), it
    // fails and /etc is left alone.
    let v = p.terminal(json!({"command": "touch /etc/paddock-x"}), &[]);
    assert!(
        v["exit_code"] != json!(0) || v["error"] != Value::Null,
        "touch /etc/paddock-x succeeded: {v}"
    );
    assert!(!etc.exists(), "the command wrote to the host's /etc: {v}");

    // A write the approval gate has no reason to stop: only the sandbox keeps it out.
    let canary = p.outside.join("canary.txt");
    let out = p.output(&format!("touch {c}; echo status=$?", c = canary.display()));
    assert!(out.contains("status=1"), "{out}");
    // Read-only, refused, or not there at all (under /tmp, which is the session's own inside
    // the sandbox): never written on the host, which the next assertion checks.
    assert!(
        out.contains("Read-only file system")
            || out.contains("Permission denied")
            || out.contains("No such file or directory"),
        "{out}"
    );
    assert!(
        !canary.exists(),
        "a file outside the workspace was created: {out}"
    );

    // Inside the directory paddock runs in: relative to it (`workdir`), and by its path.
    let workdir = p.workspace.display().to_string();
    let v = p.terminal(
        json!({"command": "touch paddock-x && echo made", "workdir": workdir}),
        &[],
    );
    assert_eq!(v["output"], json!("made\n"), "{v}");
    assert_eq!(v["exit_code"], json!(0), "{v}");
    assert!(p.workspace.join("paddock-x").is_file(), "{v}");
    let inside = p.workspace.join("by-path.txt");
    let out = p.output(&format!(
        "echo hello > {f} && cat {f}",
        f = inside.display()
    ));
    assert_eq!(out, "hello\n");
    assert_eq!(
        std::fs::read_to_string(&inside).unwrap_or_default(),
        "hello\n"
    );
}

#[test]
fn a_new_session_starts_in_the_workspace_so_a_plain_write_works() {
    let p = Project::new();
    // No `workdir`, no path: what a newcomer types first.
    let out = p.output("pwd; touch first-file && echo made");
    let pwd = p.workspace.canonicalize().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out, format!("{}\nmade\n", pwd.display()));
    assert!(p.workspace.join("first-file").is_file(), "{out}");
}

#[test]
fn started_in_the_root_directory_the_default_sandbox_refuses_to_run() {
    let p = Project::new();
    let state = p.state();
    let args = json!({"command": "touch /opt/paddock-root-test"}).to_string();
    let run = paddock_at(
        Some(Path::new("/")),
        &["call", "terminal", "--args", &args],
        &[("PADDOCK_HOME", state.as_str())],
        None,
        Duration::from_secs(60),
    );
    let v = run.json();
    let error = v["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("whole filesystem") && error.contains("workspace ="),
        "{v}"
    );
    assert!(!Path::new("/opt/paddock-root-test").exists(), "{v}");
}

#[test]
fn with_no_policy_there_is_no_network() {
    let p = Project::new();
    // The sandbox's own network namespace: loopback alone.
    let out = p.output("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '");
    assert_eq!(out, "lo\n");

    // A listener on the host's loopback is out of reach.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind: {e}"));
    listener
        .set_nonblocking(true)
        .unwrap_or_else(|e| panic!("nonblocking: {e}"));
    let port = listener
        .local_addr()
        .unwrap_or_else(|e| panic!("local addr: {e}"))
        .port();
    let out = p.output(&format!(
        "curl -s -m 5 http://127.0.0.1:{port}/ >/dev/null && echo CONNECTED || echo refused"
    ));
    assert_eq!(out, "refused\n");
    match listener.accept() {
        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
        other => panic!("the host's listener was reached: {other:?}"),
    }
}

#[test]
fn a_policy_with_sandbox_none_runs_commands_unconfined() {
    let p = Project::new();
    let policy = p.dir.path().join("unconfined.toml");
    std::fs::write(
        &policy,
        "[backends.local]\nkind = \"local\"\nsandbox = \"none\"\n",
    )
    .unwrap_or_else(|e| panic!("{}: {e}", policy.display()));
    let policy = policy.display().to_string();
    let outside = p.outside.join("written.txt");
    for extra in [vec!["--policy", policy.as_str()], vec![]] {
        let _ = std::fs::remove_file(&outside);
        let env: Vec<(&str, &str)> = if extra.is_empty() {
            // The same policy through the environment.
            vec![("PADDOCK_POLICY", policy.as_str())]
        } else {
            Vec::new()
        };
        let args = json!({"command": format!("echo out > {}", outside.display())}).to_string();
        let mut argv = vec!["call", "terminal", "--args", &args];
        argv.extend_from_slice(&extra);
        let run = p.paddock(&argv, &env);
        assert_eq!(run.code, 0, "{} {}", run.stdout, run.stderr);
        assert_eq!(run.json()["exit_code"], json!(0), "{}", run.stdout);
        assert_eq!(
            std::fs::read_to_string(&outside).unwrap_or_default(),
            "out\n",
            "{extra:?}"
        );
    }
}

#[test]
fn a_kernel_without_a_sandbox_feature_gets_an_error_naming_it_and_the_key() {
    for (feature, named) in [
        ("namespaces", "namespaces"),
        ("landlock", "Landlock"),
        ("seccomp", "seccomp"),
    ] {
        let p = Project::new();
        let marker = p.workspace.join("ran.txt");
        let args = json!({"command": format!("touch {}", marker.display())}).to_string();
        let run = p.paddock(
            &["call", "terminal", "--args", &args],
            &[("PADDOCK_SANDBOX_SIMULATE_MISSING", feature)],
        );
        let v = run.json();
        assert_eq!(run.code, 1, "{feature}: {v}");
        assert!(!marker.exists(), "{feature}: the command ran: {v}");
        // Through the session's agent the failure is the call's error; either way it is said.
        let said = format!(
            "{} {}",
            v["error"].as_str().unwrap_or_default(),
            v["output"].as_str().unwrap_or_default()
        );
        for needle in [
            named,
            "the command was not run",
            "[backends.local]",
            "kind = \"local\"",
            "sandbox = \"none\"",
            "--policy FILE or PADDOCK_POLICY=FILE",
        ] {
            assert!(said.contains(needle), "{feature}: no {needle:?} in {said}");
        }
    }
}

#[test]
fn the_help_says_the_default_is_sandboxed() {
    let p = Project::new();
    let run = p.paddock(&["call", "--help"], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let help = run.stdout.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        help.contains("workspace-write sandbox over the current directory, with no network"),
        "{help}"
    );
}
