//! The session life cycle through the real binary: `paddock sessions list` and `close`, and
//! idle sessions closed by the next `paddock` that starts.

use std::path::Path;
use std::time::Duration;

use paddock_tests::{Run, paddock_at};
use serde_json::{Value, json};

/// `paddock ARGS` with its state in `home`.
fn run(home: &Path, args: &[&str]) -> Run {
    run_in(None, home, args)
}

/// `paddock ARGS` with its state in `home`, started in `cwd` (the local sandbox's workspace).
fn run_in(cwd: Option<&Path>, home: &Path, args: &[&str]) -> Run {
    paddock_at(
        cwd,
        args,
        &[("PADDOCK_HOME", home.to_str().unwrap())],
        None,
        Duration::from_secs(90),
    )
}

fn call(home: &Path, session: &str, tool: &str, args: Value, policy: Option<&str>) -> Value {
    call_in(None, home, session, tool, args, policy)
}

fn call_in(
    cwd: Option<&Path>,
    home: &Path,
    session: &str,
    tool: &str,
    args: Value,
    policy: Option<&str>,
) -> Value {
    let args = args.to_string();
    let mut argv = vec!["call", tool, "--args", &args, "--session", session];
    if let Some(policy) = policy {
        argv.extend(["--policy", policy]);
    }
    let out = run_in(cwd, home, &argv);
    assert_eq!(out.code, 0, "stdout={} stderr={}", out.stdout, out.stderr);
    out.json()
}

fn list(home: &Path, policy: Option<&str>) -> Vec<Value> {
    let mut argv = vec!["sessions", "list"];
    if let Some(policy) = policy {
        argv.extend(["--policy", policy]);
    }
    let out = run(home, &argv);
    assert_eq!(out.code, 0, "stderr={}", out.stderr);
    out.json_lines()
}

/// The ids of the sessions `paddock sessions list` shows, in its order.
fn listed_ids(home: &Path, policy: Option<&str>) -> Vec<Value> {
    list(home, policy)
        .into_iter()
        .map(|s| s["id"].clone())
        .collect()
}

/// Uses `session` (a command that does nothing): it is live again, or made.
fn use_session(home: &Path, session: &str, policy: &str) {
    call(
        home,
        session,
        "terminal",
        json!({"command": "true"}),
        Some(policy),
    );
}

/// The PID of a background process, while it is that process.
fn alive(pid: i64) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(
            std::time::Instant::now() < until,
            "timed out waiting: {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_call_makes_a_session_that_list_shows() {
    let home = tempfile::tempdir().unwrap();
    call(
        home.path(),
        "s1",
        "terminal",
        json!({"command": "echo hi"}),
        None,
    );
    let sessions = list(home.path(), None);
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    let s = &sessions[0];
    assert_eq!(s["id"], "s1");
    assert_eq!(s["backends"], json!(["local"]));
    assert_eq!(s["background_processes"], 0);
    assert!(s["idle_seconds"].as_u64().unwrap() < 30, "{s}");
}

#[test]
fn close_ends_processes_keeps_receipts_and_removes_state() {
    let home = tempfile::tempdir().unwrap();
    call(
        home.path(),
        "s1",
        "terminal",
        json!({"command": "cd /tmp && export KEPT=1"}),
        None,
    );
    let started = call(
        home.path(),
        "s1",
        "terminal",
        json!({"command": "sleep 300", "background": true}),
        None,
    );
    let process = started["session_id"].as_str().unwrap().to_owned();
    let pid = started["pid"].as_i64().unwrap();
    assert!(alive(pid));
    // python_execute's run (its script and artifacts) belongs to the session too.
    let python = call(
        home.path(),
        "s1",
        "python_execute",
        json!({"code": "import os\nopen(os.environ['PADDOCK_ARTIFACTS'] + '/a.txt', 'w').write('x')"}),
        None,
    );
    let artifact = python["artifacts"][0]["location"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(Path::new(&artifact).exists(), "{python}");
    assert_eq!(list(home.path(), None)[0]["background_processes"], 1);
    assert!(home.path().join("sessions/s1").exists());

    let out = run(home.path(), &["sessions", "close", "s1"]);
    assert_eq!(out.code, 0, "stdout={} stderr={}", out.stdout, out.stderr);
    let report = out.json();
    assert_eq!(report["id"], "s1");
    assert_eq!(report["closed"], true);
    assert_eq!(report["processes_killed"], json!([process]));
    assert_eq!(
        report["backends"],
        json!([{"backend": "local", "ok": true}])
    );

    wait_until("the background process ends", || !alive(pid));
    assert!(!home.path().join("sessions/s1").exists());
    assert!(
        !Path::new(&artifact).exists(),
        "{artifact} outlived its session"
    );
    assert!(list(home.path(), None).is_empty());
    let receipt: Value = serde_json::from_slice(
        &std::fs::read(
            home.path()
                .join("processes")
                .join(&process)
                .join("receipt.json"),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(receipt["session"], "s1");
    assert_eq!(receipt["command"], "sleep 300");

    // A new command of that id starts afresh: the old cwd and exports are gone.
    let fresh = call(
        home.path(),
        "s1",
        "terminal",
        json!({"command": "echo \"[$KEPT]\"; pwd"}),
        None,
    );
    assert!(
        fresh["output"].as_str().unwrap().starts_with("[]\n"),
        "{fresh}"
    );
}

/// A policy in `home` whose sessions expire after `seconds` idle.
fn idle_policy(home: &Path, seconds: u64) -> String {
    let policy = home.join("policy.toml");
    std::fs::write(
        &policy,
        format!("[sessions]\nidle_timeout_seconds = {seconds}\n"),
    )
    .unwrap();
    policy.to_str().unwrap().to_owned()
}

/// Starts `sleep 300` in the background in `session`; answers its pid.
fn background_sleep(home: &Path, session: &str, policy: &str) -> i64 {
    let started = call(
        home,
        session,
        "terminal",
        json!({"command": "sleep 300", "background": true}),
        Some(policy),
    );
    started["pid"].as_i64().unwrap()
}

#[test]
fn idle_sessions_are_closed_by_the_next_paddock() {
    let home = tempfile::tempdir().unwrap();
    let policy = idle_policy(home.path(), 1);
    let policy = policy.as_str();
    let pid = background_sleep(home.path(), "old", policy);
    std::thread::sleep(Duration::from_millis(2200));
    // The next paddock of any session sweeps; its own answer is not delayed by it.
    use_session(home.path(), "new", policy);
    let ids = listed_ids(home.path(), Some(policy));
    assert_eq!(ids, vec![json!("new")]);
    assert!(!home.path().join("sessions/old").exists());
    wait_until("the idle session's process ends", || !alive(pid));
}

/// `paddock sessions list` sweeps too: a session past its idle timeout is closed (its
/// processes ended, its state removed) and never listed as if alive, the `default` session
/// included (listing is not using it).
#[test]
fn sessions_list_never_shows_an_expired_session() {
    let home = tempfile::tempdir().unwrap();
    let policy = idle_policy(home.path(), 2);
    let policy = policy.as_str();
    let pid = background_sleep(home.path(), "old", policy);
    use_session(home.path(), "default", policy);
    std::thread::sleep(Duration::from_millis(3200));
    let listed = list(home.path(), Some(policy));
    assert!(listed.is_empty(), "expired sessions listed: {listed:?}");
    assert!(!home.path().join("sessions/old").exists());
    assert!(!home.path().join("sessions/default").exists());
    wait_until("the expired session's process ends", || !alive(pid));
    // A live session is still listed.
    use_session(home.path(), "fresh", policy);
    let ids = listed_ids(home.path(), Some(policy));
    assert_eq!(ids, vec![json!("fresh")]);
}

/// A sweep (of the next paddock that finds an idle session, or `paddock serve`'s every minute)
/// leaves alone the environment a live session's python_execute runs in (`ID.python`): it
/// once took it for an orphan and killed its sandboxed agent mid-run.
#[test]
fn a_sweep_spares_the_python_execute_of_a_live_session() {
    let home = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let policy = home.path().join("policy.toml");
    std::fs::write(&policy, "[sessions]\nidle_timeout_seconds = 2\n").unwrap();
    let policy = policy.to_str().unwrap().to_owned();
    let call_here = |session: &str, tool: &str, args: Value| {
        call_in(
            Some(workspace.path()),
            home.path(),
            session,
            tool,
            args,
            Some(&policy),
        )
    };
    // A session left to expire, so that a later paddock sweeps.
    call_here("old", "terminal", json!({"command": "true"}));
    let dir = workspace.path().display().to_string();
    let code = format!(
        "import pathlib, time\n\
         ws = pathlib.Path({dir:?})\n\
         (ws / 'started').write_text('yes')\n\
         deadline = time.time() + 60\n\
         while not (ws / 'swept').exists() and time.time() < deadline:\n    time.sleep(0.05)\n\
         print('survived the sweep' if (ws / 'swept').exists() else 'never swept')\n"
    );
    let python = std::thread::scope(|scope| {
        let running = scope.spawn(|| call_here("live", "python_execute", json!({"code": code})));
        wait_until("python_execute runs", || {
            workspace.path().join("started").exists() || running.is_finished()
        });
        std::thread::sleep(Duration::from_millis(3200));
        // Closes `old`, then sweeps the environments no live session owns.
        call_here("new", "terminal", json!({"command": "true"}));
        std::fs::write(workspace.path().join("swept"), "yes").unwrap();
        running.join().unwrap()
    });
    assert_eq!(python["exit_code"], 0, "{python}");
    assert_eq!(
        python["output"].as_str().unwrap().trim(),
        "survived the sweep",
        "{python}"
    );
    let ids = listed_ids(home.path(), Some(&policy));
    assert_eq!(
        ids,
        vec![json!("live"), json!("new")],
        "`old` was not swept"
    );
}

#[test]
fn closing_an_unknown_session_is_exit_1() {
    let home = tempfile::tempdir().unwrap();
    let out = run(home.path(), &["sessions", "close", "nobody"]);
    assert_eq!(out.code, 1, "stdout={} stderr={}", out.stdout, out.stderr);
    assert!(out.stderr.contains("no session 'nobody'"), "{}", out.stderr);
    assert_eq!(out.json()["closed"], false);
}

#[test]
fn idle_timeout_must_be_positive() {
    let home = tempfile::tempdir().unwrap();
    let policy = home.path().join("policy.toml");
    std::fs::write(&policy, "[sessions]\nidle_timeout_seconds = 0\n").unwrap();
    let out = run(home.path(), &["policy", "check", policy.to_str().unwrap()]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr
            .contains(":2: sessions.idle_timeout_seconds: must be a positive"),
        "{}",
        out.stderr
    );
}

/// CPU ticks (user + system) used so far by the processes whose command line holds `marker`.
fn cpu_ticks(marker: &str) -> u64 {
    let out = std::process::Command::new("pgrep")
        .args(["-f", marker])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .map(|stat| {
            let fields: Vec<&str> = stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .collect();
            fields
                .get(11)
                .and_then(|u| u.parse::<u64>().ok())
                .unwrap_or(0)
                + fields
                    .get(12)
                    .and_then(|s| s.parse::<u64>().ok())
                    .unwrap_or(0)
        })
        .sum()
}

fn ticks_over(marker: &str, span: Duration) -> u64 {
    let before = cpu_ticks(marker);
    std::thread::sleep(span);
    cpu_ticks(marker).saturating_sub(before)
}

/// Closes a test's session and kills what carries its marker, when the test ends.
struct LoopCloser {
    marker: String,
    argv: Vec<String>,
    home: std::path::PathBuf,
}

impl Drop for LoopCloser {
    fn drop(&mut self) {
        let _ = std::process::Command::new(&self.argv[0])
            .args(&self.argv[1..])
            .env("PADDOCK_HOME", &self.home)
            .output();
        let _ = std::process::Command::new("pkill")
            .args(["-9", "-f", &self.marker])
            .status();
    }
}

/// A busy background loop in `session` on `backend`: paused, it uses no CPU and `sessions
/// list` says paused; the next command resumes it.
fn a_paused_session_uses_no_cpu_until_its_next_command(
    cwd: &Path,
    home: &Path,
    policy: Option<&str>,
    backend: &str,
) {
    let marker = format!("busy-{}-{backend}", std::process::id());
    let with_policy = |argv: &[&str]| -> Run {
        let mut all = argv.to_vec();
        if let Some(policy) = policy {
            all.extend(["--policy", policy]);
        }
        run_in(Some(cwd), home, &all)
    };
    // A failed assertion still ends the loop: the session is closed, then the marker killed.
    let _closer = LoopCloser {
        marker: marker.clone(),
        argv: {
            let mut argv = vec![
                paddock_tests::paddock_bin().display().to_string(),
                "sessions".into(),
                "close".into(),
                "p1".into(),
            ];
            if let Some(policy) = policy {
                argv.extend(["--policy".into(), policy.to_owned()]);
            }
            argv
        },
        home: home.to_path_buf(),
    };
    let command = format!("sh -c 'while :; do :; done' {marker}");
    call_in(
        Some(cwd),
        home,
        "p1",
        "terminal",
        json!({"command": command, "background": true}),
        policy,
    );
    wait_until("the loop runs", || {
        ticks_over(&marker, Duration::from_millis(200)) > 0
    });
    let paused = with_policy(&["sessions", "pause", "p1"]);
    assert_eq!(paused.code, 0, "{}{}", paused.stdout, paused.stderr);
    assert_eq!(
        paused.json()["paused"],
        json!([backend]),
        "{}",
        paused.stdout
    );
    let listed = with_policy(&["sessions", "list"]).json_lines();
    assert_eq!(listed[0]["paused"], true, "{listed:?}");
    assert_eq!(
        ticks_over(&marker, Duration::from_secs(1)),
        0,
        "a paused session's loop used CPU"
    );
    // The next command resumes it, transparently.
    let back = call_in(
        Some(cwd),
        home,
        "p1",
        "terminal",
        json!({"command": "echo back"}),
        policy,
    );
    assert_eq!(back["output"], "back\n", "{back}");
    let listed = with_policy(&["sessions", "list"]).json_lines();
    assert_eq!(listed[0]["paused"], false, "{listed:?}");
    assert!(
        ticks_over(&marker, Duration::from_millis(500)) > 0,
        "the loop did not resume"
    );
    // Paused again, then closed: nothing is left frozen behind.
    assert_eq!(with_policy(&["sessions", "pause", "p1"]).code, 0);
    let closed = with_policy(&["sessions", "close", "p1"]);
    assert_eq!(closed.code, 0, "{}{}", closed.stdout, closed.stderr);
    wait_until("the loop is gone", || {
        cpu_ticks(&marker) == 0 && {
            let out = std::process::Command::new("pgrep")
                .args(["-f", &marker])
                .output()
                .unwrap();
            out.stdout.is_empty()
        }
    });
}

#[test]
fn a_paused_sandboxed_session_uses_no_cpu_until_its_next_command() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    // The built-in policy: the workspace-write sandbox over the directory it starts in.
    a_paused_session_uses_no_cpu_until_its_next_command(ws.path(), home.path(), None, "local");
}

#[test]
fn a_paused_docker_session_uses_no_cpu_until_its_next_command() {
    if paddock_tests::backend_skipped("docker") {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let policy = home.path().join("policy.toml");
    std::fs::write(
        &policy,
        "[backends.docker]\nkind = \"docker\"\nimage = \"paddock-test:latest\"\n\n\
         [routes]\nterminal = \"docker\"\n",
    )
    .unwrap();
    a_paused_session_uses_no_cpu_until_its_next_command(
        home.path(),
        home.path(),
        Some(policy.to_str().unwrap()),
        "docker",
    );
}

#[test]
fn pausing_an_unknown_session_is_exit_1_naming_it() {
    let home = tempfile::tempdir().unwrap();
    let out = run(home.path(), &["sessions", "pause", "nobody"]);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("no session 'nobody'"), "{}", out.stderr);
}

#[test]
fn an_idle_session_is_paused_first_and_closed_later_with_idle_action_pause() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let policy = home.path().join("policy.toml");
    std::fs::write(
        &policy,
        "[sessions]\nidle_timeout_seconds = 6\nidle_action = \"pause\"\npause_after_seconds = 1\n",
    )
    .unwrap();
    let policy = policy.to_str().unwrap();
    let marker = format!("idle-busy-{}", std::process::id());
    let _closer = LoopCloser {
        marker: marker.clone(),
        argv: [
            paddock_tests::paddock_bin().display().to_string(),
            "sessions".into(),
            "close".into(),
            "i1".into(),
            "--policy".into(),
            policy.to_owned(),
        ]
        .to_vec(),
        home: home.path().to_path_buf(),
    };
    call_in(
        Some(ws.path()),
        home.path(),
        "i1",
        "terminal",
        json!({"command": format!("sh -c 'while :; do :; done' {marker}"), "background": true}),
        Some(policy),
    );
    wait_until("the loop runs", || {
        ticks_over(&marker, Duration::from_millis(200)) > 0
    });
    std::thread::sleep(Duration::from_millis(2500));
    // Idle past pause_after_seconds: the sweep of this start pauses it before listing.
    let listed = list(home.path(), Some(policy));
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["paused"], true, "{listed:?}");
    assert_eq!(
        ticks_over(&marker, Duration::from_secs(1)),
        0,
        "paused, yet it ran"
    );
    // Past idle_timeout_seconds: closed, paused or not, and nothing of it is left.
    std::thread::sleep(Duration::from_secs(4));
    assert!(list(home.path(), Some(policy)).is_empty());
    wait_until("the loop is gone", || {
        std::process::Command::new("pgrep")
            .args(["-f", &marker])
            .output()
            .unwrap()
            .stdout
            .is_empty()
    });
}

#[test]
fn pausing_a_session_leaves_a_session_of_the_same_id_in_another_home_running() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let ws = tempfile::tempdir().unwrap();
    let marker = |home: &Path| format!("same-id-{}-{}", std::process::id(), home.display());
    let mut closers = Vec::new();
    for home in [a.path(), b.path()] {
        closers.push(LoopCloser {
            marker: marker(home),
            argv: [
                paddock_tests::paddock_bin().display().to_string(),
                "sessions".into(),
                "close".into(),
                "same".into(),
            ]
            .to_vec(),
            home: home.to_path_buf(),
        });
        call_in(
            Some(ws.path()),
            home,
            "same",
            "terminal",
            json!({"command": format!("sh -c 'while :; do :; done' {}", marker(home)), "background": true}),
            None,
        );
    }
    wait_until("both loops run", || {
        ticks_over(&marker(b.path()), Duration::from_millis(200)) > 0
    });
    let paused = run_in(Some(ws.path()), a.path(), &["sessions", "pause", "same"]);
    assert_eq!(paused.code, 0, "{}{}", paused.stdout, paused.stderr);
    assert_eq!(ticks_over(&marker(a.path()), Duration::from_millis(500)), 0);
    assert!(
        ticks_over(&marker(b.path()), Duration::from_millis(500)) > 0,
        "the other home's session of the same id was paused too"
    );
}
