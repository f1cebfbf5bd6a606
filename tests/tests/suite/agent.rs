//! The in-environment agent (`paddock-agent`) end to end, through the real binary: an agent
//! killed between or during commands, an agent of an older protocol found on the session's
//! socket, and `paddock sessions close` (and the idle sweep) taking down what a session made on
//! docker, apptainer and ssh.
//!
//! The agent's pid is not visible through the tools: it is found in the host's /proc (container
//! and instance processes are visible there, and the ssh target is this machine) by its
//! `serve --socket` command line, and tied to the session's socket directory under
//! `$PADDOCK_HOME/agents/` (inside a container or instance, through `/proc/PID/root`).

use std::collections::BTreeSet;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use paddock_tests::{
    Run, apptainer_binary, backend_skipped, call_argv, environment_name, paddock_env,
    paddock_policy, services_policy_string, services_section, unique_session,
};
use serde_json::{Value, json};

/// One test's state directory and policy, and the sessions it used (closed at the end).
struct Target {
    home: tempfile::TempDir,
    policy: String,
    /// (backend, session) pairs used, for the cleanup in `Drop`.
    used: std::sync::Mutex<BTreeSet<(String, String)>>,
}

impl Target {
    /// A target whose policy has the sandboxed local backend `sandboxed` and, for each of
    /// `services` not skipped, that backend of the test services. `None` when one of `services`
    /// is skipped.
    fn new(services: &[&str], extra: &str) -> Option<Self> {
        for backend in services {
            if backend_skipped(backend) {
                eprintln!("SKIPPED: the {backend} backend (PADDOCK_SKIP_BACKENDS)");
                return None;
            }
        }
        let home = tempfile::tempdir().unwrap();
        let workspace = home.path().join("workspace");
        std::fs::create_dir_all(&workspace).unwrap();
        let mut text = format!(
            "[backends.sandboxed]\nkind = \"local\"\nsandbox = \"workspace-write\"\nworkspace = \"{}\"\n\n",
            workspace.display()
        );
        // Only the named backends: an idle sweep removes the environments of its backends that
        // no session of this state directory owns.
        for backend in services {
            let section = services_section(backend, backend);
            text.push_str(&format!("[backends.{backend}]{section}\n\n"));
        }
        text.push_str(extra);
        let policy = home.path().join("policy.toml");
        std::fs::write(&policy, text).unwrap();
        Some(Self {
            home,
            policy: policy.display().to_string(),
            used: Default::default(),
        })
    }

    /// A session id unique to this test run (docker and apptainer keep one container or
    /// instance per session).
    fn session(&self, name: &str) -> String {
        unique_session(self.home.path(), name)
    }

    fn paddock(&self, args: &[&str], limit: Duration) -> Run {
        paddock_policy(self.home.path(), &self.policy, args, limit)
    }

    fn call(&self, backend: &str, session: &str, tool: &str, args: Value) -> Run {
        self.used
            .lock()
            .unwrap()
            .insert((backend.to_owned(), session.to_owned()));
        let args = args.to_string();
        self.paddock(
            &call_argv(tool, &args, session, backend),
            Duration::from_secs(120),
        )
    }

    /// A `terminal` call that must answer (exit 0 or 1: the command's own failure).
    fn sh(&self, backend: &str, session: &str, args: Value) -> Value {
        let run = self.call(backend, session, "terminal", args);
        run.answer()
    }

    /// `paddock sessions close ID`, which must succeed.
    fn close(&self, session: &str) -> Value {
        let out = self.paddock(&["sessions", "close", session], Duration::from_secs(120));
        assert_eq!(out.code, 0, "stdout={} stderr={}", out.stdout, out.stderr);
        out.json()
    }

    /// The agent directories (one per environment) under this test's state (not the files
    /// beside them, such as a container's `.made-with` settings digest).
    fn agent_dirs(&self) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(self.home.path().join("agents"))
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| p.is_dir())
                    .collect()
            })
            .unwrap_or_default();
        dirs.sort();
        dirs
    }

    /// The one agent directory made since `before` was listed.
    fn new_agent_dir(&self, before: &[PathBuf]) -> PathBuf {
        let made: Vec<PathBuf> = self
            .agent_dirs()
            .into_iter()
            .filter(|d| !before.contains(d))
            .collect();
        assert_eq!(made.len(), 1, "expected one new agent directory: {made:?}");
        made.into_iter().next().unwrap()
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        // Whatever a failed test left: its sessions closed, then containers and instances
        // removed by name.
        for (backend, session) in self.used.lock().unwrap().iter() {
            let _ = self.paddock(&["sessions", "close", session], Duration::from_secs(120));
            let name = environment_name(backend, self.home.path(), session);
            let _ = match backend.as_str() {
                "docker" => Command::new("docker").args(["rm", "-f", &name]).output(),
                "apptainer" => Command::new(apptainer_binary())
                    .args(["instance", "stop", &name])
                    .output(),
                _ => continue,
            };
        }
    }
}

/// A process's command line, split at its NULs.
fn argv_of(pid: i32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| {
            c.split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `pid` is a live (not zombie) process.
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            let state = stat.rsplit_once(") ").map(|(_, rest)| rest).unwrap_or("");
            !state.starts_with('Z') && !state.starts_with('X')
        })
        .unwrap_or(false)
}

/// The kernel start time of `pid` (with the pid, a process's identity).
fn start_time(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let rest = stat.rsplit_once(") ")?.1.to_owned();
            rest.split_whitespace().nth(19)?.parse().ok()
        })
        .unwrap_or(0)
}

fn live_pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()))
        .filter(|pid| alive(*pid))
        .collect()
}

/// Live `sleep SECONDS` processes (not the `paddock call` whose arguments mention them).
fn sleeps(seconds: &str) -> Vec<i32> {
    live_pids()
        .into_iter()
        .filter(|pid| {
            let argv = argv_of(*pid);
            argv.len() == 2
                && (argv[0] == "sleep" || argv[0].ends_with("/sleep"))
                && argv[1] == seconds
        })
        .collect()
}

/// The live agents serving the environment whose socket directory on this machine is `dir`:
/// `serve --socket S` processes (not the sandbox helper in front of a sandboxed agent, not the
/// `--daemon` starter) whose socket is in `dir`, in a directory of the same name (ssh: the
/// host's `~/.cache/paddock/agents/<hex>`), or, inside a container or instance, at
/// `/.paddock/run` when that is `dir` bound there.
fn agent_pids(dir: &Path) -> Vec<i32> {
    let name = dir.file_name().unwrap().to_owned();
    let identity = std::fs::metadata(dir).ok().map(|m| (m.dev(), m.ino()));
    live_pids()
        .into_iter()
        .filter(|pid| {
            let argv = argv_of(*pid);
            let helper = argv.first().is_some_and(|a| a.ends_with("sandbox-exec"))
                || argv.get(1).is_some_and(|a| a == "__sandbox-exec");
            if helper || !argv.iter().any(|a| a == "serve") || argv.iter().any(|a| a == "--daemon")
            {
                return false;
            }
            let Some(socket) = argv
                .iter()
                .position(|a| a == "--socket")
                .and_then(|i| argv.get(i + 1))
            else {
                return false;
            };
            let socket = Path::new(socket);
            if socket.starts_with("/.paddock/run") {
                return identity.is_some()
                    && std::fs::metadata(format!("/proc/{pid}/root/.paddock/run"))
                        .ok()
                        .map(|m| (m.dev(), m.ino()))
                        == identity;
            }
            socket
                .parent()
                .and_then(Path::file_name)
                .is_some_and(|n| n == name)
        })
        .collect()
}

fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let until = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < until, "timed out after {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The one agent serving `dir` (waiting briefly: a starting agent may still be binding).
fn the_agent(dir: &Path) -> i32 {
    let mut found = Vec::new();
    wait_until(
        &format!("one agent serving {}", dir.display()),
        Duration::from_secs(10),
        || {
            found = agent_pids(dir);
            found.len() == 1
        },
    );
    found[0]
}

/// SIGKILLs the agent serving `dir` and waits until it is gone; answers its pid.
fn kill_agent(dir: &Path) -> i32 {
    let pid = the_agent(dir);
    let status = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -KILL {pid} failed");
    wait_until(
        &format!("the killed agent {pid} is gone"),
        Duration::from_secs(10),
        || !alive(pid),
    );
    pid
}

/// A `sleep` argument unique to this test process and `check` (searched for in /proc).
fn marker(base: u32, check: u32) -> String {
    format!("{base}.{}{check}", std::process::id())
}

/// State kept on disk and background processes outlive a SIGKILLed agent; a command in flight
/// when it dies gets a prompt error naming the agent, and the next command starts a new one.
fn agent_killed_mid_session(backend: &'static str, check: u32) {
    let services: &[&str] = if backend == "sandboxed" {
        &[]
    } else {
        &[backend]
    };
    let Some(t) = Target::new(services, "") else {
        return;
    };
    let s = t.session("k");
    let before = t.agent_dirs();
    let v = t.sh(backend, &s, json!({"command": "export X=1; echo set"}));
    assert_eq!(v["output"], json!("set\n"), "{v}");
    let dir = t.new_agent_dir(&before);
    let background = marker(300, check);
    let started = t.sh(
        backend,
        &s,
        json!({"command": format!("sleep {background}"), "background": true}),
    );
    let process = started["session_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no session_id: {started}"))
        .to_owned();

    let first = kill_agent(&dir);
    let v = t.sh(backend, &s, json!({"command": "echo \"X=$X\""}));
    assert_eq!(v["output"], json!("X=1\n"), "{v}");
    assert_eq!(v["exit_code"], json!(0), "{v}");
    let second = the_agent(&dir);
    assert_ne!(first, second, "no new agent serves the session");
    let listed = t
        .call(backend, &s, "process", json!({"action": "list"}))
        .json();
    let entry = listed["processes"]
        .as_array()
        .unwrap_or_else(|| panic!("no processes: {listed}"))
        .iter()
        .find(|p| p["session_id"] == json!(process))
        .unwrap_or_else(|| panic!("{process} is not listed: {listed}"))
        .clone();
    assert_eq!(entry["state"], json!("running"), "{entry}");
    assert!(
        !sleeps(&background).is_empty(),
        "the background process died with the agent"
    );

    // A command in flight when the agent dies.
    let inflight = marker(30, check);
    let running = std::thread::scope(|scope| {
        let call = scope.spawn(|| {
            t.call(
                backend,
                &s,
                "terminal",
                json!({"command": format!("sleep {inflight}"), "timeout": 100}),
            )
        });
        wait_until(
            "the in-flight command runs",
            Duration::from_secs(30),
            || !sleeps(&inflight).is_empty(),
        );
        let killed = Instant::now();
        kill_agent(&dir);
        let run = call.join().unwrap();
        (run, killed.elapsed())
    });
    let (run, after_kill) = running;
    assert!(
        after_kill < Duration::from_secs(5),
        "the call took {after_kill:?} to notice its agent died"
    );
    let v = run.json();
    assert_ne!(run.code, 0, "{v}");
    assert_ne!(v["exit_code"], json!(0), "{v}");
    let error = v["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("agent") && error.contains(backend),
        "the error does not name the agent and the backend: {v}"
    );
    // The next command starts a new agent and the session's state is intact.
    let v = t.sh(backend, &s, json!({"command": "echo \"X=$X\""}));
    assert_eq!(v["output"], json!("X=1\n"), "{v}");

    let report = t.close(&s);
    assert_eq!(report["closed"], json!(true), "{report}");
    assert_eq!(report["processes_killed"], json!([process]), "{report}");
    wait_until(
        "the background process ends with the session",
        Duration::from_secs(15),
        || sleeps(&background).is_empty(),
    );
    wait_until(
        "no agent serves the closed session",
        Duration::from_secs(15),
        || agent_pids(&dir).is_empty(),
    );
}

#[test]
fn agent_killed_mid_session_sandboxed() {
    agent_killed_mid_session("sandboxed", 1);
}

#[test]
fn agent_killed_mid_session_docker() {
    agent_killed_mid_session("docker", 2);
}

#[test]
fn agent_killed_mid_session_ssh() {
    agent_killed_mid_session("ssh", 3);
}

#[test]
fn agent_killed_mid_session_apptainer() {
    agent_killed_mid_session("apptainer", 4);
}

/// Sends `signal` (`-STOP`, `-CONT`) to `pid`.
fn signal(pid: i32, signal: &str) {
    let status = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {signal} {pid} failed");
}

/// An agent that stops answering (SIGSTOP: it cannot end its command at the timeout, nor greet)
/// costs the caller a bounded wait and a clear error, never a hang: the command in flight ends
/// at its timeout plus the engine's grace, with its processes killed; a new command is refused
/// after the hello timeout; once the agent runs again the session goes on.
#[test]
fn a_stopped_agent_is_an_error_within_bounds_not_a_hang() {
    let Some(t) = Target::new(&[], "") else {
        return;
    };
    let backend = "sandboxed";
    let s = t.session("stopped");
    let before = t.agent_dirs();
    let v = t.sh(backend, &s, json!({"command": "export KEPT=1; echo set"}));
    assert_eq!(v["output"], json!("set\n"), "{v}");
    let dir = t.new_agent_dir(&before);
    let agent = the_agent(&dir);

    let inflight = marker(40, 5);
    let (run, took) = std::thread::scope(|scope| {
        let started = Instant::now();
        let call = scope.spawn(|| {
            t.call(
                backend,
                &s,
                "terminal",
                json!({"command": format!("sleep {inflight}"), "timeout": 2}),
            )
        });
        wait_until(
            "the in-flight command runs",
            Duration::from_secs(30),
            || !sleeps(&inflight).is_empty(),
        );
        signal(agent, "-STOP");
        let run = call.join().unwrap();
        (run, started.elapsed())
    });
    // The command's timeout (2 s) and the engine's grace (10 s), with room for a slow machine.
    assert!(
        took >= Duration::from_secs(10) && took < Duration::from_secs(40),
        "the call took {took:?}"
    );
    let v = run.json();
    let error = v["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("did not answer within the command's timeout (2 s)")
            && error.contains("agent.log"),
        "{v}"
    );
    wait_until(
        "the command's processes are killed",
        Duration::from_secs(10),
        || sleeps(&inflight).is_empty(),
    );

    let started = Instant::now();
    let run = t.call(backend, &s, "terminal", json!({"command": "echo hello"}));
    let took = started.elapsed();
    let v = run.json();
    assert!(took < Duration::from_secs(60), "the call took {took:?}");
    let error = v["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("did not answer hello") && error.contains(backend),
        "{v}"
    );

    signal(agent, "-CONT");
    let v = t.sh(backend, &s, json!({"command": "echo \"KEPT=$KEPT\""}));
    assert_eq!(v["output"], json!("KEPT=1\n"), "{v}");
    let report = t.close(&s);
    assert_eq!(report["closed"], json!(true), "{report}");
}

/// A fake agent of protocol 1: answers hello with version 1, and a shutdown with bye, after
/// writing the marker file `argv[2]`; `argv[2].ready` once it listens on `argv[1]`.
const OLD_AGENT: &str = r#"
import json, os, socket, struct, sys
path, marker = sys.argv[1], sys.argv[2]
try:
    os.unlink(path)
except FileNotFoundError:
    pass
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(path)
os.chmod(path, 0o777)
server.listen(8)
open(marker + ".ready", "w").close()

def read_exact(conn, n):
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data

def read_message(conn):
    header = read_exact(conn, 5)
    length = struct.unpack(">I", header[1:])[0]
    return json.loads(read_exact(conn, length))

def send(conn, message):
    body = json.dumps(message).encode()
    conn.sendall(bytes([0]) + struct.pack(">I", len(body)) + body)

while True:
    conn, _ = server.accept()
    try:
        if read_message(conn).get("type") != "hello":
            continue
        send(conn, {"type": "hello", "version": 1, "agent": "0.0.1", "pid": os.getpid()})
        if read_message(conn).get("type") == "shutdown":
            send(conn, {"type": "bye"})
            with open(marker, "w") as f:
                f.write("told to shut down\n")
            conn.close()
            server.close()
            os.unlink(path)
            sys.exit(0)
    except (EOFError, OSError, ValueError):
        pass
    finally:
        conn.close()
"#;

/// An agent of another protocol version on the session's socket is told to shut down and
/// replaced; the command that found it runs, with the session's state.
fn old_protocol_agent_is_replaced(backend: &'static str) {
    let services: &[&str] = if backend == "sandboxed" {
        &[]
    } else {
        &[backend]
    };
    let Some(t) = Target::new(services, "") else {
        return;
    };
    let s = t.session("o");
    let before = t.agent_dirs();
    t.sh(backend, &s, json!({"command": "export Y=2"}));
    let dir = t.new_agent_dir(&before);
    kill_agent(&dir);

    let script = t.home.path().join("old_agent.py");
    std::fs::write(&script, OLD_AGENT).unwrap();
    let marker = t.home.path().join("told-to-shut-down");
    let mut fake = Command::new("python3")
        .arg(&script)
        .arg(dir.join("agent.sock"))
        .arg(&marker)
        .spawn()
        .unwrap();
    let ready = marker.with_extension("ready");
    wait_until(
        "the fake old agent listens",
        Duration::from_secs(10),
        || ready.exists(),
    );

    let run = t.call(backend, &s, "terminal", json!({"command": "echo \"Y=$Y\""}));
    // It exits right after its answer (polled: the engine only waits until nobody accepts).
    let until = Instant::now() + Duration::from_secs(5);
    let mut fake_exited = fake.try_wait().unwrap();
    while fake_exited.is_none() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
        fake_exited = fake.try_wait().unwrap();
    }
    if fake_exited.is_none() {
        let _ = fake.kill();
        let _ = fake.wait();
    }
    assert_eq!(run.code, 0, "stdout={} stderr={}", run.stdout, run.stderr);
    let v = run.json();
    assert_eq!(v["output"], json!("Y=2\n"), "{v}");
    assert!(
        marker.exists(),
        "the old agent was not told to shut down (stderr: {})",
        run.stderr
    );
    assert!(
        fake_exited.is_some(),
        "the old agent still ran after the command"
    );
    // A real agent serves the session now.
    let agent = the_agent(&dir);
    assert_ne!(agent, fake.id() as i32);

    let report = t.close(&s);
    assert_eq!(report["closed"], json!(true), "{report}");
}

#[test]
fn old_protocol_agent_is_replaced_sandboxed() {
    old_protocol_agent_is_replaced("sandboxed");
}

#[test]
fn old_protocol_agent_is_replaced_docker() {
    old_protocol_agent_is_replaced("docker");
}

/// The home directory of `user` on this machine.
fn home_of(user: &str) -> PathBuf {
    let out = Command::new("getent")
        .args(["passwd", user])
        .output()
        .unwrap();
    let line = String::from_utf8_lossy(&out.stdout).into_owned();
    PathBuf::from(
        line.trim()
            .split(':')
            .nth(5)
            .unwrap_or_else(|| panic!("no user {user}: {line:?}")),
    )
}

/// The ssh user the services policy names.
fn ssh_user() -> String {
    services_policy_string("user").unwrap_or_else(|| "paddock-ci".to_owned())
}

fn docker_containers(name: &str) -> String {
    let out = Command::new("docker")
        .args([
            "ps",
            "-a",
            "--filter",
            &format!("name=^{name}$"),
            "--format",
            "{{.Names}}",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "docker ps failed");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn apptainer_instances() -> String {
    let out = Command::new(apptainer_binary())
        .args(["instance", "list"])
        .output()
        .unwrap();
    assert!(out.status.success(), "apptainer instance list failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn sessions_close_removes_environments() {
    let Some(t) = Target::new(&["docker", "apptainer", "ssh"], "") else {
        return;
    };
    let s = t.session("c");
    for backend in ["docker", "apptainer", "ssh"] {
        let v = t.sh(
            backend,
            &s,
            json!({"command": format!("echo on-{backend}")}),
        );
        assert_eq!(v["output"], json!(format!("on-{backend}\n")), "{v}");
    }
    let container = environment_name("docker", t.home.path(), &s);
    let instance = environment_name("apptainer", t.home.path(), &s);
    let remote_state = home_of(&ssh_user()).join(format!(".cache/paddock/sessions/{s}"));
    assert_eq!(docker_containers(&container), container);
    assert!(apptainer_instances().contains(&instance));
    assert!(
        remote_state.is_dir(),
        "{} is missing",
        remote_state.display()
    );
    let dirs = t.agent_dirs();
    assert_eq!(dirs.len(), 3, "one agent directory per backend: {dirs:?}");
    let agents: Vec<(i32, u64)> = dirs
        .iter()
        .map(|d| {
            let pid = the_agent(d);
            (pid, start_time(pid))
        })
        .collect();

    let report = t.close(&s);
    assert_eq!(report["closed"], json!(true), "{report}");
    let mut backends: Vec<Value> = report["backends"].as_array().unwrap().clone();
    backends.sort_by_key(|b| b["backend"].as_str().unwrap_or_default().to_owned());
    assert_eq!(
        backends,
        vec![
            json!({"backend": "apptainer", "ok": true}),
            json!({"backend": "docker", "ok": true}),
            json!({"backend": "ssh", "ok": true}),
        ],
        "{report}"
    );
    assert_eq!(docker_containers(&container), "");
    assert!(
        !apptainer_instances().contains(&instance),
        "{instance} still runs"
    );
    assert!(
        !remote_state.exists(),
        "{} is still there",
        remote_state.display()
    );
    wait_until("the session's agents end", Duration::from_secs(15), || {
        agents
            .iter()
            .all(|(pid, started)| !alive(*pid) || start_time(*pid) != *started)
    });
    let left: Vec<String> = t
        .agent_dirs()
        .iter()
        .map(|d| {
            let out = Command::new("ls")
                .args(["-la", "--full-time"])
                .arg(d)
                .output()
                .unwrap();
            format!("{}: {}", d.display(), String::from_utf8_lossy(&out.stdout))
        })
        .collect();
    assert!(left.is_empty(), "{left:#?}");
}

/// Two engines with different state directories (two users of one dockerd, or one user's two
/// projects) using the same backend and session names each keep an environment of their own:
/// neither finds, replaces nor closes the other's.
fn two_state_directories_never_share(backend: &str) {
    let (Some(one), Some(two)) = (Target::new(&[backend], ""), Target::new(&[backend], "")) else {
        return;
    };
    let session = one.session("shared");
    let mark = |t: &Target, word: &str| {
        let v = t.sh(
            backend,
            &session,
            json!({"command": format!("echo {word} > /tmp/owner; cat /tmp/owner")}),
        );
        assert_eq!(v["output"], json!(format!("{word}\n")), "{v}");
    };
    let owner = |t: &Target| {
        t.sh(backend, &session, json!({"command": "cat /tmp/owner"}))["output"].clone()
    };
    let exists = |name: &str| match backend {
        "docker" => docker_containers(name) == name,
        _ => apptainer_instances()
            .split_whitespace()
            .any(|word| word == name),
    };
    mark(&one, "one");
    mark(&two, "two");
    // The first engine's environment is still there, with its file: the second neither
    // reused nor replaced it.
    assert_eq!(owner(&one), json!("one\n"));
    assert_eq!(owner(&two), json!("two\n"));
    let first = environment_name(backend, one.home.path(), &session);
    let second = environment_name(backend, two.home.path(), &session);
    assert_ne!(first, second);
    assert!(exists(&first) && exists(&second), "{first} {second}");
    // Closing one engine's session removes its environment only.
    assert_eq!(one.close(&session)["closed"], json!(true));
    assert!(!exists(&first) && exists(&second), "{first} {second}");
    assert_eq!(owner(&two), json!("two\n"));
    assert_eq!(two.close(&session)["closed"], json!(true));
    assert!(!exists(&second), "{second}");
}

#[test]
fn engines_with_different_state_directories_never_share_a_container() {
    two_state_directories_never_share("docker");
}

#[test]
fn engines_with_different_state_directories_never_share_an_instance() {
    two_state_directories_never_share("apptainer");
}

#[test]
fn idle_sessions_lose_their_containers() {
    let Some(t) = Target::new(&["docker"], "[sessions]\nidle_timeout_seconds = 1\n") else {
        return;
    };
    let s = t.session("idle");
    let v = t.sh("docker", &s, json!({"command": "echo up"}));
    assert_eq!(v["output"], json!("up\n"), "{v}");
    let container = environment_name("docker", t.home.path(), &s);
    assert_eq!(docker_containers(&container), container);
    let dir = t.agent_dirs().into_iter().next().unwrap();
    let agent = the_agent(&dir);
    std::thread::sleep(Duration::from_millis(2200));
    // Any later paddock sweeps the expired session.
    let other = t.session("other");
    let v = t.sh("sandboxed", &other, json!({"command": "true"}));
    assert_eq!(v["exit_code"], json!(0), "{v}");
    wait_until(
        "the idle session's container is removed",
        Duration::from_secs(30),
        || docker_containers(&container).is_empty(),
    );
    wait_until(
        "the idle session's agent ends",
        Duration::from_secs(10),
        || !alive(agent),
    );
    assert!(
        !t.home
            .path()
            .join("session-records")
            .join(format!("{s}.json"))
            .exists(),
        "the idle session's record is kept"
    );
    t.close(&other);
}

/// `paddock` processes other than this test whose environment names `home` as their
/// `PADDOCK_HOME`: every engine, supervisor or warm filler this state directory started (not
/// the `srun` relaying a Slurm holder step, which inherited the variable but sweeps nothing).
fn paddock_processes_of(home: &Path) -> Vec<i32> {
    let wanted = format!("PADDOCK_HOME={}", home.display());
    let me = std::process::id() as i32;
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| *pid != me)
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/exe"))
                .is_ok_and(|exe| exe.file_name().is_some_and(|n| n == "paddock"))
        })
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|var| var == wanted.as_bytes()))
        })
        .collect()
}

/// Issue 48 item 7: a session nobody closes and no `paddock` ever sweeps again (an engine that
/// crashed, a one-off `paddock call`) ends by itself once idle past `idle_timeout_seconds`: its
/// container, instance or Slurm job is gone. Commands within the timeout find it as they left
/// it.
fn an_abandoned_session_ends_by_itself(backend: &str) {
    let Some(t) = Target::new(&[backend], "[sessions]\nidle_timeout_seconds = 5\n") else {
        return;
    };
    let s = t.session("abandoned");
    let v = t.sh(
        backend,
        &s,
        json!({"command": "echo kept > /tmp/mark; echo up"}),
    );
    assert_eq!(v["output"], json!("up\n"), "{v}");
    let name = environment_name(backend, t.home.path(), &s);
    let exists = || match backend {
        "docker" => docker_containers(&name) == name,
        "slurm" => {
            let out = std::process::Command::new("squeue")
                .args(["-h", "-n", &name, "-o", "%j %T"])
                .output()
                .unwrap();
            !String::from_utf8_lossy(&out.stdout).trim().is_empty()
        }
        _ => apptainer_instances()
            .split_whitespace()
            .any(|word| word == name),
    };
    assert!(exists(), "{name} was not made");
    // Between commands, younger than the timeout each time (twice the timeout in all): the
    // environment and its files stay.
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(2500));
        let v = t.sh(backend, &s, json!({"command": "cat /tmp/mark"}));
        assert_eq!(v["output"], json!("kept\n"), "{v}");
    }
    // Abandoned: no paddock of this state directory is left to sweep it.
    assert_eq!(paddock_processes_of(t.home.path()), Vec::<i32>::new());
    wait_until(
        &format!("{name} ends by itself, idle past the timeout"),
        Duration::from_secs(40),
        || !exists(),
    );
    // Nothing swept it: the session's record is still there.
    assert!(
        t.home
            .path()
            .join("session-records")
            .join(format!("{s}.json"))
            .exists(),
        "the session's record is gone: something swept it"
    );
}

#[test]
fn an_abandoned_docker_session_ends_by_itself() {
    an_abandoned_session_ends_by_itself("docker");
}

#[test]
fn an_abandoned_apptainer_session_ends_by_itself() {
    an_abandoned_session_ends_by_itself("apptainer");
}

#[test]
fn an_abandoned_slurm_session_ends_by_itself() {
    an_abandoned_session_ends_by_itself("slurm");
}

/// An idle sweep in one state directory never stops an apptainer instance another state
/// directory's live session owns (instances carry no labels: the sweep only considers those
/// whose agent directory is its own).
#[test]
fn idle_sweep_leaves_other_state_directories_instances_alone() {
    let Some(owner) = Target::new(&["apptainer"], "") else {
        return;
    };
    let Some(sweeper) = Target::new(&["apptainer"], "[sessions]\nidle_timeout_seconds = 1\n")
    else {
        return;
    };
    let s = owner.session("mine");
    let v = owner.sh("apptainer", &s, json!({"command": "echo mine"}));
    assert_eq!(v["output"], json!("mine\n"), "{v}");
    let instance = environment_name("apptainer", owner.home.path(), &s);
    assert!(apptainer_instances().contains(&instance));
    sweeper.sh(
        "sandboxed",
        &sweeper.session("idle"),
        json!({"command": "true"}),
    );
    std::thread::sleep(Duration::from_millis(2200));
    // This paddock closes its own idle session and sweeps before it exits.
    let next = sweeper.session("next");
    sweeper.sh("sandboxed", &next, json!({"command": "true"}));
    assert!(
        apptainer_instances().contains(&instance),
        "another state directory's idle sweep stopped {instance}, which a live session owns"
    );
    let v = owner.sh("apptainer", &s, json!({"command": "echo still"}));
    assert_eq!(v["output"], json!("still\n"), "{v}");
    owner.close(&s);
    sweeper.close(&next);
}

/// An agent that cannot run in the environment (here: an x86-64 agent whose header says it is
/// for another machine, as on an arm64 host) is an error naming the backend and the reason, and
/// the command does not quietly run through `docker exec` instead. A dynamically linked agent
/// is refused before anything is started, saying how to build the static one.
#[test]
fn an_agent_that_cannot_run_there_is_a_named_error_not_a_fallback() {
    let Some(t) = Target::new(&["docker"], "") else {
        return;
    };
    let real = std::env::var("PADDOCK_AGENT_BIN").map_or_else(
        |_| {
            paddock_tests::paddock_bin()
                .parent()
                .unwrap()
                .parent()
                .unwrap()
                .join("agent-static/x86_64-unknown-linux-gnu/release/paddock-agent")
        },
        PathBuf::from,
    );
    let mut bytes = std::fs::read(&real).unwrap_or_else(|e| {
        panic!(
            "no static agent at {} ({e}): run scripts/build-agent.sh",
            real.display()
        )
    });
    // e_machine (offset 18): 183 = AArch64.
    bytes[18] = 183;
    bytes[19] = 0;
    let foreign = t.home.path().join("paddock-agent-aarch64");
    std::fs::write(&foreign, &bytes).unwrap();
    std::fs::set_permissions(&foreign, std::fs::Permissions::from_mode(0o755)).unwrap();

    let session = t.session("foreign");
    t.used
        .lock()
        .unwrap()
        .insert(("docker".to_owned(), session.clone()));
    let call = |agent: &Path| {
        let args = json!({"command": "echo ran"}).to_string();
        let mut argv = call_argv("terminal", &args, &session, "docker");
        argv.extend(["--policy", &t.policy]);
        paddock_env(
            &argv,
            &[
                ("PADDOCK_HOME", t.home.path().to_str().unwrap()),
                ("PADDOCK_AGENT_BIN", agent.to_str().unwrap()),
            ],
            None,
            Duration::from_secs(120),
        )
    };
    let out = call(&foreign);
    assert_eq!(out.code, 1, "stdout={} stderr={}", out.stdout, out.stderr);
    let v = out.json();
    let error = v["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("docker backend 'docker'") && error.contains("cannot be executed"),
        "{v}"
    );
    assert!(!out.stdout.contains("ran"), "the command ran anyway: {v}");

    let out = call(Path::new("/bin/bash"));
    assert_eq!(out.code, 1, "stdout={} stderr={}", out.stdout, out.stderr);
    let error = out.json()["error"].as_str().unwrap_or_default().to_owned();
    assert!(
        error.contains("static paddock-agent") && error.contains("scripts/build-agent.sh"),
        "{error}"
    );
    t.close(&session);
}

/// A `paddock` built from the workspace carries its agent: with no `PADDOCK_AGENT_BIN` and no
/// static agent beside the binary, a docker session still runs through an agent, the one the binary
/// wrote into its state directory (`agent-bin/`), bound into the container.
#[test]
fn the_binary_carries_its_agent() {
    let Some(t) = Target::new(&["docker"], "") else {
        return;
    };
    // Cargo leaves the agent's own dynamic build beside the binary: not a static agent, so the
    // engine passes it over.
    let session = t.session("carried");
    t.used
        .lock()
        .unwrap()
        .insert(("docker".to_owned(), session.clone()));
    let args = json!({"command": "echo carried"}).to_string();
    let mut argv = call_argv("terminal", &args, &session, "docker");
    argv.extend(["--policy", &t.policy]);
    let out = paddock_env(
        &argv,
        &[
            ("PADDOCK_HOME", t.home.path().to_str().unwrap()),
            ("PADDOCK_AGENT_BIN", paddock_tests::UNSET),
        ],
        None,
        Duration::from_secs(120),
    );
    assert_eq!(out.code, 0, "stdout={} stderr={}", out.stdout, out.stderr);
    assert_eq!(out.json()["output"], json!("carried\n"));
    let written: Vec<PathBuf> = std::fs::read_dir(t.home.path().join("agent-bin"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(written.len(), 1, "{written:?}");
    let container = environment_name("docker", t.home.path(), &session);
    let mounts = std::process::Command::new("docker")
        .args(["inspect", "--format", "{{json .Mounts}}", &container])
        .output()
        .unwrap();
    let mounts = String::from_utf8_lossy(&mounts.stdout);
    assert!(
        mounts.contains(written[0].to_str().unwrap()),
        "{container} does not bind {}: {mounts}",
        written[0].display()
    );
    t.close(&session);
}

/// The engine's own secrets never reach a command, not even through `/proc/PID/environ` of the
/// shells and agents that serve it: spare shells start with an empty environment, and a
/// sandboxed session's agent with the commands' environment. Several commands from one script,
/// so that the second and later run on spare shells.
#[test]
fn secrets_of_the_engine_reach_no_process_a_command_can_read() {
    let Some(t) = Target::new(&[], "") else {
        return;
    };
    // Unconfined, the engine itself is this user's process and readable; the claim is about
    // the shell. Sandboxed, every process the sandbox shows (its init, the agent, spares).
    let probe = |command: &str| {
        format!(
            "outs = []\nfor _ in range(3):\n    r = await tools.terminal(command={command:?})\n    outs.append(r[\"output\"])\nreturn outs\n"
        )
    };
    let unconfined = t.home.path().join("probe-unconfined.py");
    // Only the telling lines come back (a whole environment per process is too much output).
    let keep = " | grep -e PADDOCK_SESSION= -e leaked-4711";
    std::fs::write(
        &unconfined,
        probe(&format!("tr '\\0' '\\n' < /proc/$$/environ{keep}")),
    )
    .unwrap();
    let sandboxed = t.home.path().join("probe-sandboxed.py");
    std::fs::write(
        &sandboxed,
        probe(&format!(
            "for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done 2>/dev/null{keep}"
        )),
    )
    .unwrap();
    // The unconfined local backend (a policy that says so: the built-in `local` is sandboxed)
    // and the sandboxed one (this policy's, routed).
    let unconfined_policy = t.home.path().join("unconfined.toml");
    std::fs::write(
        &unconfined_policy,
        "[backends.local]\nkind = \"local\"\nsandbox = \"none\"\n",
    )
    .unwrap();
    let sandboxed_policy = t.home.path().join("routed.toml");
    std::fs::write(
        &sandboxed_policy,
        format!(
            "{}\n[routes]\nterminal = \"sandboxed\"\n",
            std::fs::read_to_string(&t.policy).unwrap()
        ),
    )
    .unwrap();
    for (path, policy) in [
        (&unconfined, unconfined_policy.to_str().unwrap()),
        (&sandboxed, sandboxed_policy.to_str().unwrap()),
    ] {
        let argv = vec![
            "run",
            path.to_str().unwrap(),
            "--session",
            "secrets",
            "--policy",
            policy,
        ];
        let out = paddock_env(
            &argv,
            &[
                ("PADDOCK_HOME", t.home.path().to_str().unwrap()),
                ("AWS_SECRET_ACCESS_KEY", "leaked-4711-secret"),
                ("GITHUB_TOKEN", "leaked-4711-token"),
            ],
            None,
            Duration::from_secs(120),
        );
        assert_eq!(out.code, 0, "stdout={} stderr={}", out.stdout, out.stderr);
        let v = out.json();
        let outputs = v["result"].as_array().unwrap_or_else(|| panic!("{v}"));
        assert_eq!(outputs.len(), 3, "{v}");
        // The probe did read environments (a spare shell's first one is empty).
        assert!(
            outputs
                .iter()
                .any(|o| o.as_str().unwrap().contains("PADDOCK_SESSION=secrets")),
            "{v}"
        );
        assert!(
            !out.stdout.contains("leaked-4711"),
            "a secret of the engine was readable (policy {policy:?}): {}",
            out.stdout
        );
    }
    t.close("secrets");
}
