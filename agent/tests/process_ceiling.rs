//! The agent at its session's process ceiling: a pids cgroup counts threads too, so a run the
//! agent cannot staff with its threads must be refused with words, never left half-started
//! (a program running with nobody pumping its output or enforcing its deadline, and the engine
//! waiting forever), and the agent must go on serving once there is room.

#![expect(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test helpers: a failed unwrap is a failed test"
)]

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use paddock_agent::protocol::{FrameKind, Reply, read_frame};

mod common;
use common::{greet, plain_run, start_run};

/// A pids cgroup of its own (v1 `pids` hierarchy or v2 with the controller), removed on drop.
struct PidsGroup(PathBuf);

impl PidsGroup {
    fn create() -> Option<Self> {
        let name = format!("paddock-agent-test-{}", std::process::id());
        let v1 = Path::new("/sys/fs/cgroup/pids");
        let v2 = Path::new("/sys/fs/cgroup");
        let parent = if v1.join("cgroup.procs").exists() {
            v1.to_path_buf()
        } else if std::fs::read_to_string(v2.join("cgroup.subtree_control"))
            .is_ok_and(|c| c.split_whitespace().any(|c| c == "pids"))
        {
            v2.to_path_buf()
        } else {
            return None;
        };
        let dir = parent.join(name);
        std::fs::create_dir(&dir).ok()?;
        Some(Self(dir))
    }

    fn join(&self, pid: u32) {
        std::fs::write(self.0.join("cgroup.procs"), pid.to_string()).unwrap();
    }

    fn current(&self) -> usize {
        std::fs::read_to_string(self.0.join("pids.current"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    fn set_max(&self, max: &str) {
        std::fs::write(self.0.join("pids.max"), max).unwrap();
    }
}

impl Drop for PidsGroup {
    fn drop(&mut self) {
        for pid in std::fs::read_to_string(self.0.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
        {
            let _ = Command::new("kill").args(["-9", pid]).status();
        }
        let until = Instant::now() + Duration::from_secs(5);
        while std::fs::remove_dir(&self.0).is_err() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

struct Agent(Child);

impl Agent {
    /// `paddock-agent serve --socket SOCKET`, started (its socket may not be there yet).
    fn serve(socket: &Path) -> Self {
        Self(
            Command::new(env!("CARGO_BIN_EXE_paddock-agent"))
                .args(["serve", "--socket"])
                .arg(socket)
                .spawn()
                .unwrap(),
        )
    }
}

fn wait_for_socket(socket: &Path) {
    let until = Instant::now() + Duration::from_secs(10);
    while !socket.exists() {
        assert!(Instant::now() < until, "the agent never made its socket");
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One run on the agent at `socket`: its reply and the output that came before it.
fn run(socket: &Path, argv: &[&str]) -> (Reply, String) {
    run_within(socket, argv, 10_000)
}

/// [`run`] with the run's own timeout.
fn run_within(socket: &Path, argv: &[&str], timeout_ms: u64) -> (Reply, String) {
    let mut stream = UnixStream::connect(socket).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    greet(&mut stream);
    let argv = argv.iter().map(|a| (*a).to_owned()).collect();
    start_run(&mut stream, plain_run(argv, Some(timeout_ms)));
    let mut output = Vec::new();
    loop {
        match read_frame(&mut stream) {
            Ok(Some((FrameKind::Output, data))) => output.extend(data),
            Ok(Some((_, data))) => {
                let reply: Reply = serde_json::from_slice(&data).unwrap();
                return (reply, String::from_utf8_lossy(&output).into_owned());
            }
            Ok(None) => panic!("the agent hung up without a reply; output so far: {output:?}"),
            Err(e) => panic!("no reply from the agent ({e}); output so far: {output:?}"),
        }
    }
}

#[test]
fn a_run_the_agent_cannot_staff_is_refused_with_words_and_the_agent_goes_on() {
    if !rustix::process::getuid().is_root() {
        eprintln!("SKIPPED: creating a pids cgroup needs root (scripts/test-all.sh runs as root)");
        return;
    }
    let group = PidsGroup::create()
        .expect("root, but no pids cgroup controller to test with (v1 pids or v2 with pids)");
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("agent.sock");
    let agent = Agent::serve(&socket);
    group.join(agent.0.id());
    wait_for_socket(&socket);
    // Settled: the agent's own threads. Room for the conversation's thread and one more: the
    // run's threads cannot all start, nor its program.
    std::thread::sleep(Duration::from_millis(200));
    let idle = group.current();
    group.set_max(&(idle + 2).to_string());
    let marker = dir.path().join("ran");
    let marker_arg = marker.display().to_string();
    let (reply, output) = run(&socket, &["/usr/bin/touch", &marker_arg]);
    match reply {
        Reply::Error { message } => assert!(
            message.contains("cannot start a thread for the run")
                && message.contains("process ceiling"),
            "{message}"
        ),
        other => panic!("expected a refusal, got {other:?} with output {output:?}"),
    }
    assert!(
        !marker.exists(),
        "the program was started although its run could not be staffed"
    );

    // Room again: the same agent serves.
    group.set_max("max");
    let (reply, output) = run(&socket, &["/bin/echo", "served"]);
    assert!(
        matches!(
            reply,
            Reply::Exit {
                code: 0,
                timed_out: false,
                ..
            }
        ),
        "{reply:?}"
    );
    assert_eq!(output, "served\n");
}

/// The agent's threads, by name.
fn threads_of(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("comm")).ok())
        .map(|name| name.trim().to_owned())
        .collect()
}

#[test]
fn a_finished_run_leaves_no_thread_behind_and_the_deadline_still_ends_a_slow_one() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("agent.sock");
    let agent = Agent::serve(&socket);
    wait_for_socket(&socket);
    for _ in 0..10 {
        let (reply, _) = run_within(&socket, &["/bin/true"], 600_000);
        assert!(matches!(reply, Reply::Exit { code: 0, .. }), "{reply:?}");
    }
    // Each run's threads end with it (a deadline thread used to sleep out the whole timeout).
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let left: Vec<String> = threads_of(agent.0.id())
            .into_iter()
            .filter(|name| name.starts_with("run-"))
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < until,
            "threads left after ten finished runs: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let started = Instant::now();
    let (reply, _) = run_within(&socket, &["/bin/sleep", "30"], 300);
    assert!(
        matches!(
            reply,
            Reply::Exit {
                timed_out: true,
                ..
            }
        ),
        "{reply:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the deadline did not end the run"
    );
}
