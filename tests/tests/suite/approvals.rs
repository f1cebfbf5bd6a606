//! Approvals end to end: a command approver that takes longer than the script's timeout (the
//! clock is paused while it decides), a denial, and no approver at all.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use paddock_tests::{paddock_env, temp_file, write_file};
use serde_json::{Value, json};

struct Setup {
    _dir: tempfile::TempDir,
    home: String,
    policy: String,
}

/// A policy with a 3 s script timeout and an approver that answers `decision` after 5 s.
fn setup(decision: &str) -> Setup {
    let (dir, approver) = temp_file(
        "approver.sh",
        format!(
            "#!/bin/sh\ncat > \"$(dirname \"$0\")/request.json\"\nsleep 5\necho '{{\"decision\": \"{decision}\"}}'\n"
        ),
    );
    std::fs::set_permissions(&approver, std::fs::Permissions::from_mode(0o755)).unwrap();
    let policy = write_file(
        &dir,
        "policy.toml",
        format!(
            "[codemode]\ntimeout_seconds = 3\n\n[approval]\nmode = \"ask\"\napprover = \"{approver}\"\ntimeout_seconds = 20\n"
        ),
    );
    let home = dir.path().join("home").display().to_string();
    Setup {
        _dir: dir,
        home,
        policy,
    }
}

/// `history -c` is a dangerous command (history wiping) that is harmless inside `bash -c`.
const SCRIPT: &str =
    "r = await tools.terminal(command='history -c; echo ran-after-approval')\nr['output']";

fn run(setup: &Setup) -> (Value, Duration) {
    let run = paddock_env(
        &["run", "--policy", &setup.policy, "-"],
        &[("PADDOCK_HOME", &setup.home)],
        Some(SCRIPT.as_bytes()),
        Duration::from_secs(60),
    );
    (run.json(), run.elapsed)
}

#[test]
fn an_approval_that_outlasts_the_script_timeout_still_lets_it_finish() {
    let s = setup("once");
    let (v, elapsed) = run(&s);
    assert_eq!(v["ok"], json!(true), "{v}");
    assert_eq!(v["result"], json!("ran-after-approval\n"));
    assert!(
        elapsed >= Duration::from_secs(5),
        "the approver was not waited for: {elapsed:?}"
    );
    let audit =
        std::fs::read_to_string(std::path::Path::new(&s.home).join("approvals/audit.jsonl"))
            .unwrap();
    let record: Value = serde_json::from_str(audit.lines().last().unwrap()).unwrap();
    assert_eq!(record["answer"], json!("once"));
    assert_eq!(record["rule"], json!("history-log-wipe"));
    assert!(
        record["answered_by"]
            .as_str()
            .unwrap()
            .starts_with("command:")
    );
    assert!(record["waited_ms"].as_u64().unwrap() >= 5000);
}

#[test]
fn a_denial_reaches_the_script_as_tool_approval_denied() {
    let s = setup("deny");
    let (v, _) = run(&s);
    assert_eq!(v["error_code"], json!("tool_approval:denied"), "{v}");
    assert!(
        v["error"].as_str().unwrap().starts_with("PermissionError"),
        "{v}"
    );
    assert_eq!(
        v["tool_errors"],
        json!([{"tool": "terminal", "error_code": "tool_approval:denied"}])
    );
}

/// `terminal` with the arguments `args_for(marker)` and nobody to ask: denied (the answer is
/// checked), and `marker`, which the arguments would have created, is not there.
fn denied_with_nobody_to_ask(args_for: impl Fn(&str) -> Value) {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let home = dir.path().join("home").display().to_string();
    let args = args_for(marker.to_str().unwrap()).to_string();
    let run = paddock_env(
        &["call", "terminal", "--args", &args],
        &[("PADDOCK_HOME", &home)],
        None,
        Duration::from_secs(30),
    );
    let v = run.json();
    assert_eq!(run.code, 1, "{v}");
    assert_eq!(v["error_code"], json!("tool_approval:denied"), "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("nobody is available"),
        "{v}"
    );
    assert!(!marker.exists(), "it ran although it was denied: {v}");
}

#[test]
fn with_no_approver_a_dangerous_command_is_denied_and_not_run() {
    denied_with_nobody_to_ask(|marker| json!({"command": format!("touch {marker}; history -c")}));
}

/// Text fed to a command's stdin is judged as a command line too: `bash` reads it as one, so
/// `terminal(command="bash", stdin="...; history -c")` is denied with nobody to ask, and runs
/// nothing of it.
#[test]
fn a_dangerous_stdin_is_judged_as_a_command() {
    denied_with_nobody_to_ask(
        |marker| json!({"command": "bash", "stdin": format!("touch {marker}; history -c\n")}),
    );
}

/// What `process write`/`submit` sends a background shell is judged as a command line too:
/// denied with nobody to ask, and the shell never reads it; a harmless line goes through.
#[test]
fn a_dangerous_write_to_a_background_shell_is_judged_as_a_command() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let home = dir.path().join("home").display().to_string();
    let call = |tool: &str, args: Value| {
        paddock_env(
            &["call", tool, "--session", "w", "--args", &args.to_string()],
            &[("PADDOCK_HOME", &home)],
            None,
            Duration::from_secs(30),
        )
        .json()
    };
    let started = call("terminal", json!({"command": "bash", "background": true}));
    let id = started["session_id"].as_str().unwrap().to_owned();
    for action in ["write", "submit"] {
        let v = call(
            "process",
            json!({"action": action, "session_id": id,
                   "data": format!("touch {}; history -c\n", marker.display())}),
        );
        assert_eq!(
            v["error_code"],
            json!("tool_approval:denied"),
            "{action}: {v}"
        );
    }
    let ok = call(
        "process",
        json!({"action": "submit", "session_id": id, "data": "echo fine"}),
    );
    assert!(ok.get("error").is_none(), "{ok}");
    call("process", json!({"action": "close", "session_id": id}));
    let waited = call(
        "process",
        json!({"action": "wait", "session_id": id, "timeout": 20}),
    );
    assert_ne!(waited["state"], json!("running"), "{waited}");
    let log = call("process", json!({"action": "log", "session_id": id}));
    assert_eq!(log["lines"], json!(["fine"]), "{log}");
    assert!(!marker.exists(), "the denied line ran");
}

/// `paddock policy explain --command CMD [--policy P]`.
fn explain(policy: Option<&str>, command: &str) -> Value {
    let home = tempfile::tempdir().unwrap();
    let mut args = vec!["policy", "explain", "--command", command];
    if let Some(p) = policy {
        args.extend(["--policy", p]);
    }
    paddock_env(
        &args,
        &[("PADDOCK_HOME", home.path().to_str().unwrap())],
        None,
        Duration::from_secs(30),
    )
    .json()
}

#[test]
fn hardline_commands_are_denied_even_in_allow_mode() {
    let (_dir, allow) = temp_file("p.toml", "[approval]\nmode = \"allow\"\n");
    let v = explain(Some(&allow), "sudo rm -rf --no-preserve-root /");
    assert_eq!(v["decision"], json!("deny"), "{v}");
    assert_eq!(v["rule"], json!("rm-system-recursive"));
    assert_eq!(
        explain(Some(&allow), "git push --force")["decision"],
        json!("allow")
    );
    assert_eq!(
        explain(None, "git push --force"),
        json!({"decision": "ask", "reason": "rewriting or deleting shared history: force push, mirror, remote branch deletion", "rule": "git-force", "pack": "core"})
    );
}

/// Runs `paddock` in a tmux pane (a real terminal), answers the approval prompt with `keys`
/// and returns what the pane shows at the end.
fn through_terminal(keys: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home").display().to_string();
    let out = dir.path().join("out.json");
    let socket = dir.path().join("tmux.sock").display().to_string();
    let bin = paddock_tests::paddock_bin().display().to_string();
    let args = json!({"command": "history -c; echo approved-at-the-terminal"}).to_string();
    let shell = format!(
        "PADDOCK_HOME={home} {bin} call terminal --args '{args}' > {}; sleep 30",
        out.display()
    );
    let tmux = |a: &[&str]| {
        std::process::Command::new("tmux")
            .args(["-S", &socket])
            .args(a)
            .output()
            .unwrap()
    };
    tmux(&["new-session", "-d", "-x", "160", "-y", "40", &shell]);
    let mut screen = String::new();
    for _ in 0..100 {
        screen = String::from_utf8_lossy(&tmux(&["capture-pane", "-p"]).stdout).into_owned();
        if screen.contains("[o]nce") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        screen.contains("[o]nce") && screen.contains("history -c"),
        "no prompt: {screen}"
    );
    for key in keys {
        tmux(&["send-keys", key]);
    }
    let mut result = String::new();
    for _ in 0..100 {
        result = std::fs::read_to_string(&out).unwrap_or_default();
        if !result.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    tmux(&["kill-server"]);
    result
}

#[test]
fn the_terminal_prompt_approves_once() {
    let result = through_terminal(&["o", "Enter"]);
    let v: Value = serde_json::from_str(result.trim()).unwrap();
    assert_eq!(v["output"], json!("approved-at-the-terminal\n"), "{v}");
}

#[test]
fn enter_alone_at_the_terminal_prompt_denies() {
    let result = through_terminal(&["Enter"]);
    let v: Value = serde_json::from_str(result.trim()).unwrap();
    assert_eq!(v["error_code"], json!("tool_approval:denied"), "{v}");
}

/// The file tools are judged by the same rules as the commands that would do the same: with
/// nobody to ask, a write to a shell start-up file, a patch adding one and a read of a private
/// key are denied (and logged as failures); a write inside the workspace goes through.
#[test]
fn file_tools_ask_where_the_equivalent_command_would() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let home = dir.path().join("home");
    let policy = write_file(
        &dir,
        "policy.toml",
        format!(
            "[backends.local]\nkind = \"local\"\nsandbox = \"workspace-write\"\nworkspace = \"{}\"\n",
            workspace.display()
        ),
    );
    let home_str = home.display().to_string();
    let call = |tool: &str, args: Value| {
        let args = args.to_string();
        let run = paddock_env(
            &["call", tool, "--args", &args, "--policy", &policy],
            &[("PADDOCK_HOME", &home_str)],
            None,
            Duration::from_secs(30),
        );
        run.json()
    };
    let bashrc = std::path::PathBuf::from(std::env::var("HOME").unwrap()).join(".bashrc");
    let before = std::fs::read(&bashrc).ok();
    for (tool, args) in [
        (
            "write_file",
            json!({"path": "~/.bashrc", "content": "echo pwned\n"}),
        ),
        (
            "edit_file",
            json!({"path": "~/.bashrc", "old_string": "a", "new_string": "b"}),
        ),
        (
            "apply_patch",
            json!({"patch": "*** Begin Patch\n*** Add File: ~/.profile\n+echo pwned\n*** End Patch\n"}),
        ),
        ("read_file", json!({"path": "~/.ssh/id_rsa"})),
        ("delete_file", json!({"path": "/etc/hostname"})),
    ] {
        let v = call(tool, args);
        assert_eq!(
            v["error_code"],
            json!("tool_approval:denied"),
            "{tool}: {v}"
        );
        assert!(
            v["error"].as_str().unwrap().contains("nobody is available"),
            "{tool}: {v}"
        );
    }
    assert_eq!(std::fs::read(&bashrc).ok(), before, "~/.bashrc was changed");
    let log = std::fs::read_to_string(home.join("logs").join("tool-failures.jsonl")).unwrap();
    assert!(
        log.lines()
            .any(|l| l.contains("\"write_file\"") && l.contains("tool_approval:denied")),
        "{log}"
    );
    let inside = workspace.join("notes.txt");
    let v = call(
        "write_file",
        json!({"path": inside.display().to_string(), "content": "fine\n"}),
    );
    assert_eq!(v["created"], json!(true), "{v}");
    assert_eq!(std::fs::read_to_string(&inside).unwrap(), "fine\n");
}

/// On the unconfined local backend nothing but the approval stands between a file tool and the
/// user's start-up files: a relative path is judged where it lands (the session starts in
/// `$HOME`, so `.bashrc` is `~/.bashrc`, and `x/../.profile` is `~/.profile`).
#[test]
fn a_relative_path_is_judged_where_it_lands() {
    let dir = tempfile::tempdir().unwrap();
    let fake_home = dir.path().join("user");
    std::fs::create_dir_all(&fake_home).unwrap();
    let policy = write_file(
        &dir,
        "policy.toml",
        "[backends.local]\nkind = \"local\"\nsandbox = \"none\"\n",
    );
    let state = dir.path().join("state").display().to_string();
    let home = fake_home.display().to_string();
    for path in [".bashrc", "x/../.profile"] {
        let args = json!({"path": path, "content": "echo pwned\n"}).to_string();
        let run = paddock_env(
            &["call", "write_file", "--args", &args, "--policy", &policy],
            &[("PADDOCK_HOME", &state), ("HOME", &home)],
            None,
            Duration::from_secs(30),
        );
        let v = run.json();
        assert_eq!(
            v["error_code"],
            json!("tool_approval:denied"),
            "{path}: {v}"
        );
    }
    assert!(!fake_home.join(".bashrc").exists());
    assert!(!fake_home.join(".profile").exists());
}
