//! The environment conformance suite: the contract of `Environment` (paddock-backends), checked
//! through the real binary's `terminal` and `process` tools. Every backend runs the same
//! checks; today that is `local` (Docker, SSH and Apptainer join with issue 5/8 by adding a
//! `Target` below).

use std::time::Duration;

use paddock_tests::{Run, paddock_env};
use serde_json::{Value, json};

/// One backend under test: its state directory and the flags that select it.
struct Target {
    home: tempfile::TempDir,
    backend: &'static str,
}

impl Target {
    fn local() -> Self {
        Self {
            home: tempfile::tempdir().unwrap(),
            backend: "local",
        }
    }

    fn call(&self, session: &str, tool: &str, args: Value) -> Run {
        let args = args.to_string();
        paddock_env(
            &[
                "call",
                tool,
                "--args",
                &args,
                "--session",
                session,
                "--backend",
                self.backend,
            ],
            &[("PADDOCK_HOME", self.home.path().to_str().unwrap())],
            None,
            Duration::from_secs(60),
        )
    }

    fn sh(&self, session: &str, args: Value) -> Value {
        let run = self.call(session, "terminal", args);
        assert!(run.code == 0 || run.code == 1, "{}", run.stderr);
        run.json()
    }

    fn process(&self, session: &str, args: Value) -> Value {
        self.call(session, "process", args).json()
    }
}

/// Processes whose command line contains `marker`.
fn processes_matching(marker: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| {
                    String::from_utf8_lossy(&c)
                        .replace('\0', " ")
                        .contains(marker)
                })
                .unwrap_or(false)
        })
        .filter(|pid| {
            !std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .unwrap_or_default()
                .contains(") Z")
        })
        .collect()
}

#[test]
fn stdout_and_stderr_are_merged_in_order_with_the_exit_code() {
    let t = Target::local();
    let v = t.sh(
        "s",
        json!({"command": "echo a; echo b >&2; echo c; exit 3"}),
    );
    assert_eq!(v["output"], json!("a\nb\nc\n"));
    assert_eq!(v["exit_code"], json!(3));
    assert_eq!(v["error"], json!(null));
}

#[test]
fn a_timeout_kills_the_whole_tree_and_answers_124() {
    let t = Target::local();
    let v = t.sh(
        "s",
        json!({"command": "sleep 300.4711 & sleep 60.4711", "timeout": 1}),
    );
    assert_eq!(v["exit_code"], json!(124), "{v}");
    assert!(v["error"].as_str().unwrap().contains("timed out"), "{v}");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        processes_matching("300.4711"),
        Vec::<i32>::new(),
        "a background sleep survived the timeout"
    );
}

#[test]
fn a_command_ignoring_sigterm_is_killed_after_the_grace() {
    let t = Target::local();
    let started = std::time::Instant::now();
    let v = t.sh(
        "s",
        json!({"command": "trap '' TERM; sleep 60.4712", "timeout": 1}),
    );
    assert_eq!(v["exit_code"], json!(124), "{v}");
    assert!(started.elapsed() < Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(200));
    assert!(processes_matching("60.4712").is_empty());
}

#[test]
fn leftovers_of_a_finished_command_do_not_outlive_it() {
    let t = Target::local();
    let started = std::time::Instant::now();
    let v = t.sh("s", json!({"command": "(sleep 300.4713 &) ; echo started"}));
    assert_eq!(v["output"], json!("started\n"));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the call waited for its daemon"
    );
    std::thread::sleep(Duration::from_millis(200));
    assert!(processes_matching("300.4713").is_empty());
}

#[test]
fn cwd_exports_functions_and_aliases_persist_within_a_session_only() {
    let t = Target::local();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().canonicalize().unwrap().display().to_string();
    t.sh("a", json!({"command": format!("cd {d} && export PADDOCK_T=42 && greet() {{ echo hi-$1; }} && alias ll='echo aliased'")}));
    let v = t.sh("a", json!({"command": "pwd; echo $PADDOCK_T; greet x; ll"}));
    assert_eq!(v["output"], json!(format!("{d}\n42\nhi-x\naliased\n")));
    let other = t.sh(
        "b",
        json!({"command": "echo [$PADDOCK_T]; type greet >/dev/null 2>&1 || echo no-function"}),
    );
    assert_eq!(other["output"], json!("[]\nno-function\n"));
}

#[test]
fn workdir_applies_to_one_call_only() {
    let t = Target::local();
    t.sh("a", json!({"command": "cd /"}));
    let v = t.sh("a", json!({"command": "pwd", "workdir": "/tmp"}));
    assert_eq!(v["output"], json!("/tmp\n"));
    assert_eq!(t.sh("a", json!({"command": "pwd"}))["output"], json!("/\n"));
    let bad = t
        .call(
            "a",
            "terminal",
            json!({"command": "pwd", "workdir": "/no/such/dir"}),
        )
        .json();
    assert_eq!(bad["error_code"], json!("tool:invalid_arguments"), "{bad}");
}

#[test]
fn a_vanished_working_directory_is_reported_and_recovered_from() {
    let t = Target::local();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    t.sh(
        "a",
        json!({"command": format!("mkdir -p {d}/gone && cd {d}/gone")}),
    );
    std::fs::remove_dir(dir.path().join("gone")).unwrap();
    let v = t.sh("a", json!({"command": "echo still-running"}));
    let out = v["output"].as_str().unwrap();
    assert!(
        out.contains("no longer exists") && out.ends_with("still-running\n"),
        "{out}"
    );
}

#[test]
fn pty_mode_gives_a_terminal() {
    let t = Target::local();
    let v = t.sh(
        "s",
        json!({"command": "tty; test -t 1 && echo isatty; stty size", "pty": true}),
    );
    let out = v["output"].as_str().unwrap();
    assert!(out.starts_with("/dev/pts/"), "{out}");
    assert!(out.contains("isatty\n40 120\n"), "{out}");
    let plain = t.sh(
        "s",
        json!({"command": "test -t 1 && echo isatty || echo notty"}),
    );
    assert_eq!(plain["output"], json!("notty\n"));
}

#[test]
fn floods_are_capped_keeping_start_and_end() {
    let t = Target::local();
    let v = t.sh("s", json!({"command": "seq 1 200000"}));
    let out = v["output"].as_str().unwrap();
    assert!(out.starts_with("1\n2\n3\n"), "{}", &out[..40]);
    assert!(out.ends_with("199999\n200000\n"));
    assert!(out.contains("characters omitted"));
    assert_eq!(v["exit_code"], json!(0));
}

#[test]
fn stdin_is_closed_for_foreground_commands_and_nul_bytes_are_refused() {
    let t = Target::local();
    let v = t.sh("s", json!({"command": "cat; read x || echo eof"}));
    assert_eq!(v["output"], json!("eof\n"));
    let bad = t
        .call("s", "terminal", json!({"command": "echo a\u{0}b"}))
        .json();
    assert_eq!(bad["error_code"], json!("tool:invalid_arguments"));
    assert!(bad["error"].as_str().unwrap().contains("NUL"), "{bad}");
}

fn start_background(t: &Target, session: &str, command: &str, pty: bool) -> String {
    let v = t.sh(
        session,
        json!({"command": command, "background": true, "pty": pty}),
    );
    v["session_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no session_id: {v}"))
        .to_owned()
}

fn wait_for_log(t: &Target, session: &str, id: &str, needle: &str) -> Vec<String> {
    for _ in 0..100 {
        let v = t.process(session, json!({"action": "log", "session_id": id}));
        let lines: Vec<String> = v["lines"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_str().unwrap().to_owned())
            .collect();
        if lines.iter().any(|l| l.contains(needle)) {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{needle:?} never appeared in the log of {id}");
}

#[test]
fn background_stdin_without_a_pty() {
    let t = Target::local();
    let id = start_background(&t, "s", "read a; echo got:$a; read b; echo got:$b", false);
    t.process(
        "s",
        json!({"action": "submit", "session_id": id, "data": "one"}),
    );
    wait_for_log(&t, "s", &id, "got:one");
    t.process(
        "s",
        json!({"action": "write", "session_id": id, "data": "two\n"}),
    );
    let done = t.process(
        "s",
        json!({"action": "wait", "session_id": id, "timeout": 10}),
    );
    assert_eq!(done["state"], json!("exited"), "{done}");
    assert_eq!(done["exit_code"], json!(0));
    let lines = wait_for_log(&t, "s", &id, "got:two");
    assert_eq!(lines, vec!["got:one", "got:two"]);
}

#[test]
fn background_stdin_with_a_pty_and_close() {
    let t = Target::local();
    let id = start_background(&t, "s", "test -t 0 && echo tty-ok; cat", true);
    wait_for_log(&t, "s", &id, "tty-ok");
    t.process(
        "s",
        json!({"action": "submit", "session_id": id, "data": "hello-pty"}),
    );
    wait_for_log(&t, "s", &id, "hello-pty");
    t.process("s", json!({"action": "close", "session_id": id}));
    let done = t.process(
        "s",
        json!({"action": "wait", "session_id": id, "timeout": 10}),
    );
    assert_eq!(done["state"], json!("exited"), "{done}");
}

#[test]
fn background_processes_survive_the_engine_and_stay_in_their_session() {
    // Every `paddock call` is a new engine process: the one that started the command is gone.
    let t = Target::local();
    let id = start_background(
        &t,
        "owner",
        "echo secret-$PADDOCK_SESSION; echo token ghp_abcdefghijklmnopqrstuvwxyz012345; sleep 300.4714",
        false,
    );
    let poll = t.process("owner", json!({"action": "poll", "session_id": id}));
    assert_eq!(poll["state"], json!("running"), "{poll}");
    wait_for_log(&t, "owner", &id, "secret-owner");
    let listed = t.process("owner", json!({"action": "list"}));
    assert!(
        listed["processes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["session_id"] == json!(id))
    );
    // Another session: refused, and not listed.
    let foreign = t.call(
        "intruder",
        "process",
        json!({"action": "log", "session_id": id}),
    );
    assert_eq!(foreign.code, 1);
    assert_eq!(foreign.json()["error_code"], json!("process:other_session"));
    assert_eq!(
        t.process("intruder", json!({"action": "list"}))["processes"],
        json!([])
    );
    // Kill from yet another engine process; nothing survives; a receipt is left.
    let killed = t.process("owner", json!({"action": "kill", "session_id": id}));
    assert_eq!(killed["killed"], json!(true), "{killed}");
    assert_eq!(killed["state"], json!("exited"), "{killed}");
    assert!(processes_matching("300.4714").is_empty());
    let receipt: Value = serde_json::from_slice(
        &std::fs::read(
            t.home
                .path()
                .join("processes")
                .join(&id)
                .join("receipt.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let tail = receipt["output_tail"].as_str().unwrap();
    assert!(tail.contains("secret-owner"), "{tail}");
    assert!(
        tail.contains("ghp_[REDACTED]") && !tail.contains("abcdefghij"),
        "a token reached the receipt: {tail}"
    );
}

#[test]
fn a_recycled_pid_is_never_signalled() {
    let t = Target::local();
    let id = start_background(&t, "s", "sleep 300.4715", false);
    // Pretend the PID was recycled: the recorded start time no longer matches.
    let meta = t.home.path().join("processes").join(&id).join("meta.json");
    let mut record: Value = serde_json::from_slice(&std::fs::read(&meta).unwrap()).unwrap();
    record["start_time"] = json!(record["start_time"].as_u64().unwrap() + 1);
    std::fs::write(&meta, serde_json::to_vec(&record).unwrap()).unwrap();
    let v = t.process(
        "s",
        json!({"action": "kill", "session_id": id, "timeout": 1}),
    );
    assert_eq!(v["killed"], json!(false), "{v}");
    assert!(
        !processes_matching("300.4715").is_empty(),
        "the real process was signalled"
    );
    for pid in processes_matching("300.4715") {
        let _ = std::process::Command::new("kill")
            .arg(pid.to_string())
            .status();
    }
}

#[test]
fn unknown_process_ids_get_a_clear_answer() {
    let t = Target::local();
    let v = t
        .call(
            "s",
            "process",
            json!({"action": "poll", "session_id": "p_000000000000"}),
        )
        .json();
    assert_eq!(v["error_code"], json!("tool:invalid_arguments"));
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("no process 'p_000000000000'"),
        "{v}"
    );
    let v = t
        .call(
            "s",
            "process",
            json!({"action": "poll", "session_id": "../../etc"}),
        )
        .json();
    assert_eq!(v["error_code"], json!("tool:invalid_arguments"));
}

#[test]
fn notify_on_complete_marks_an_unread_completion() {
    let t = Target::local();
    let v = t.sh(
        "s",
        json!({"command": "echo done", "background": true, "notify_on_complete": true}),
    );
    let id = v["session_id"].as_str().unwrap().to_owned();
    let mut unread = false;
    for _ in 0..100 {
        let list = t.process("s", json!({"action": "list"}));
        let p = list["processes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["session_id"] == json!(id))
            .cloned()
            .unwrap();
        if p["state"] == json!("exited") {
            unread = p["unread_completion"] == json!(true);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        unread,
        "a finished notify_on_complete process is not marked unread"
    );
    t.process("s", json!({"action": "poll", "session_id": id}));
    let list = t.process("s", json!({"action": "list"}));
    assert_eq!(list["processes"][0]["unread_completion"], json!(false));
}

#[test]
fn python_execute_returns_output_and_artifacts_with_a_scrubbed_environment() {
    let t = Target::local();
    let code = "import os, pathlib\nprint('hello from', os.getcwd() != '/')\n\
                pathlib.Path(os.environ['PADDOCK_ARTIFACTS'], 'r.txt').write_text('42')\n\
                print(sorted(k for k in os.environ if 'SECRET' in k))";
    let run = paddock_env(
        &[
            "call",
            "python_execute",
            "--args",
            &json!({"code": code}).to_string(),
            "--session",
            "s",
        ],
        &[
            ("PADDOCK_HOME", t.home.path().to_str().unwrap()),
            ("MY_SECRET", "hunter22"),
        ],
        None,
        Duration::from_secs(60),
    );
    let v = run.json();
    assert_eq!(v["exit_code"], json!(0), "{v}");
    assert_eq!(v["output"], json!("hello from True\n[]\n"));
    let artifact = &v["artifacts"][0];
    assert_eq!(artifact["path"], json!("r.txt"));
    assert_eq!(artifact["size"], json!(2));
    assert_eq!(artifact["text"], json!("42"));
    assert_eq!(
        artifact["sha256"],
        json!("73475cb40a568e8da8a045ced110137e159f890ac4da883b6b17dc651b3a8049")
    );
    let info = t.call("s", "python_environment_info", json!({})).json();
    assert!(info["version"].as_str().unwrap().starts_with('3'), "{info}");
}

#[test]
fn a_declared_but_unbuilt_backend_is_an_error_not_a_fallback() {
    let t = Target::local();
    let dir = tempfile::tempdir().unwrap();
    let policy = paddock_tests::write_file(
        &dir,
        "p.toml",
        "[backends.box]\nkind = \"docker\"\nimage = \"debian:12\"\n[routes]\nterminal = \"box\"\n",
    );
    let run = paddock_env(
        &[
            "call",
            "terminal",
            "--args",
            "{\"command\": \"echo ran-locally\"}",
            "--policy",
            &policy,
        ],
        &[("PADDOCK_HOME", t.home.path().to_str().unwrap())],
        None,
        Duration::from_secs(30),
    );
    let v = run.json();
    assert_eq!(run.code, 1);
    assert!(
        v["error"].as_str().unwrap().contains("docker backend"),
        "{v}"
    );
    assert!(!run.stdout.contains("ran-locally"));
}
