//! The session's live shell: wrapper runs served by a warm shell that forks a subshell per
//! command must show a command exactly what a fresh wrapper shell shows it (the session's
//! exports, functions, aliases and directory; nothing else of the last command), keep the
//! run's exit code, timeout and leftover kill, and never serve from a state that changed under
//! it.

#![expect(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test helpers: a failed unwrap is a failed test"
)]

use std::collections::BTreeMap;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use paddock_agent::protocol::{FrameKind, Reply, RunRequest, read_frame};
use paddock_agent::shell_state::WRAPPER;

mod common;
use common::{greet, plain_run, start_run};

struct Agent(Child);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A session: an agent, its state directory and the directory commands start in.
struct Session {
    agent_process: Agent,
    dir: tempfile::TempDir,
    socket: PathBuf,
    state: PathBuf,
    start: PathBuf,
    runs: u32,
    /// Whether runs ask for stderr apart (as a streaming call does).
    split_stderr: bool,
    /// The stderr frames of the last run.
    last_stderr: String,
}

impl Session {
    fn new() -> Self {
        Self::with_args(&[])
    }

    /// A session whose agent gets `extra` arguments after its socket (`--idle-exit N`).
    fn with_args(extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("agent.sock");
        let state = dir.path().join("state");
        let start = dir.path().join("start");
        std::fs::create_dir_all(&state).unwrap();
        std::fs::create_dir_all(start.join("sub")).unwrap();
        let agent = Agent(
            Command::new(env!("CARGO_BIN_EXE_paddock-agent"))
                .args(["serve", "--socket"])
                .arg(&socket)
                .args(extra)
                .spawn()
                .unwrap(),
        );
        let until = Instant::now() + Duration::from_secs(10);
        // The socket file is there from bind(), before listen(): wait for a connection.
        while UnixStream::connect(&socket).is_err() {
            assert!(
                Instant::now() < until,
                "the agent never listened on its socket"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Self {
            agent_process: agent,
            dir,
            socket,
            state,
            start,
            runs: 0,
            split_stderr: false,
            last_stderr: String::new(),
        }
    }

    fn env(&self, run_id: &str) -> BTreeMap<String, String> {
        [
            ("PATH", "/usr/local/bin:/usr/bin:/bin"),
            ("HOME", &self.dir.path().display().to_string()),
            ("PADDOCK_RUN", run_id),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    }

    fn next_tag(&mut self) -> String {
        self.runs += 1;
        // Unique across the tests of this binary, which run at once: a run's leftover kill
        // ends every process that carries its id.
        let session = self.dir.path().file_name().unwrap().to_string_lossy();
        format!("t-test{session}-{}", self.runs)
    }

    /// One command through the agent, as the sandboxed local backend sends it.
    fn agent(&mut self, command: &str, timeout_ms: u64) -> (i32, bool, String) {
        self.agent_in(command, "", timeout_ms)
    }

    /// [`Session::agent`] with the call's own working directory (`workdir`, empty for none).
    fn agent_in(&mut self, command: &str, workdir: &str, timeout_ms: u64) -> (i32, bool, String) {
        let tag = self.next_tag();
        let mut stream = self.send(command, workdir, &tag, timeout_ms);
        let mut output = Vec::new();
        let mut stderr = Vec::new();
        let reply = loop {
            match read_frame(&mut stream) {
                Ok(Some((FrameKind::Output, data))) => output.extend(data),
                Ok(Some((FrameKind::Stderr, data))) => stderr.extend(data),
                Ok(Some((_, data))) => break serde_json::from_slice::<Reply>(&data).unwrap(),
                other => panic!("no reply from the agent ({other:?}); output {output:?}"),
            }
        };
        // What the engine does after a sandboxed agent run of the wrapper.
        paddock_agent::shell_state::commit_state(&self.state, &tag);
        let output = String::from_utf8_lossy(&output).into_owned();
        self.last_stderr = String::from_utf8_lossy(&stderr).into_owned();
        match reply {
            Reply::Exit {
                code, timed_out, ..
            } => (code, timed_out, output),
            other => panic!("{other:?} for {command:?} with output {output:?}"),
        }
    }

    /// One wrapper run, as the sandboxed local backend asks for it.
    fn request(
        &self,
        command: &str,
        workdir: &str,
        tag: &str,
        timeout_ms: Option<u64>,
    ) -> RunRequest {
        let argv = [
            "/bin/bash",
            "-c",
            WRAPPER,
            "paddock",
            &self.state.display().to_string(),
            command,
            workdir,
            tag,
        ]
        .iter()
        .map(|a| (*a).to_owned())
        .collect();
        RunRequest {
            env: self.env(tag),
            clear_env: true,
            cwd: Some(self.start.display().to_string()),
            run_id: Some(tag.to_owned()),
            split_stderr: self.split_stderr,
            ..plain_run(argv, timeout_ms)
        }
    }

    /// Sends one wrapper run; answers the connection its frames come on.
    fn send(&mut self, command: &str, workdir: &str, tag: &str, timeout_ms: u64) -> UnixStream {
        let request = self.request(command, workdir, tag, Some(timeout_ms));
        let mut stream = match UnixStream::connect(&self.socket) {
            Ok(stream) => stream,
            Err(e) => panic!(
                "cannot reach the agent for {command:?} ({e}); the agent: {:?}",
                self.agent_process.0.try_wait()
            ),
        };
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        greet(&mut stream);
        start_run(&mut stream, request);
        stream
    }

    /// One command by a fresh wrapper shell of the engine's own (no agent), on `state`.
    fn fresh_in(&mut self, state: &Path, command: &str, workdir: &str) -> (i32, String) {
        let tag = self.next_tag();
        // stdout and stderr on one pipe, in order, as the agent merges them.
        let (mut reader, writer) = std::io::pipe().unwrap();
        let mut child = Command::new("/bin/bash")
            .args(["-c", WRAPPER, "paddock"])
            .arg(state)
            .args([command, workdir, &tag])
            .env_clear()
            .envs(self.env(&tag))
            .current_dir(&self.start)
            .stdin(std::process::Stdio::null())
            .stdout(writer.try_clone().unwrap())
            .stderr(writer)
            .spawn()
            .unwrap();
        let mut text = String::new();
        std::io::Read::read_to_string(&mut reader, &mut text).unwrap();
        let status = child.wait().unwrap();
        paddock_agent::shell_state::commit_state(state, &tag);
        (status.code().unwrap_or(-1), text)
    }

    /// Runs `command` through the agent and by a fresh wrapper shell on `fresh_state`: the same
    /// exit code and output (each state directory's path read as `STATE`).
    fn assert_as_fresh(&mut self, fresh_state: &Path, command: &str, workdir: &str) {
        let (code, timed_out, output) = self.agent_in(command, workdir, 10_000);
        let (fresh_code, fresh_output) = self.fresh_in(fresh_state, command, workdir);
        assert!(!timed_out, "{command}");
        assert_eq!(
            (
                code,
                output.replace(&self.state.display().to_string(), "STATE")
            ),
            (
                fresh_code,
                fresh_output.replace(&fresh_state.display().to_string(), "STATE")
            ),
            "the live shell and a fresh wrapper shell differ on {command:?} (workdir {workdir:?})"
        );
    }

    /// Runs `echo $$` until two runs in a row answer the same PID: the live shell serves.
    fn live_pid(&mut self) -> String {
        let until = Instant::now() + Duration::from_secs(10);
        let mut last = String::new();
        loop {
            let (code, _, pid) = self.agent("echo $$", 10_000);
            assert_eq!(code, 0, "{pid}");
            if pid == last {
                return pid;
            }
            assert!(Instant::now() < until, "no live shell served within 10 s");
            last = pid;
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// What a command can see of the session, printed.
const PROBE: &str = r#"pwd; echo "A=${A-unset} plain=${plain-unset} opts=$-"; type f 2>&1 | head -1; alias ll 2>&1; echo "args=$# $1"; echo $LINENO; nosuchcommand-4711"#;

#[test]
fn commands_in_the_live_shell_see_what_a_fresh_wrapper_shell_sees() {
    let mut s = Session::new();
    let fresh_state = s.dir.path().join("fresh-state");
    std::fs::create_dir_all(&fresh_state).unwrap();
    // A sequence of commands, each run through the agent (the live shell serving from the
    // second command on) and by a fresh wrapper shell on a state of its own: the same output.
    let commands = [
        "echo start",
        "cd sub && export A=1 && plain=2 && set -e -o pipefail && f() { echo in-f; } && alias ll='echo listed'",
        PROBE,
        "unset A; unalias ll; cd ..",
        PROBE,
        "cd sub; exit 7",
        PROBE,
        "echo out; echo err >&2; false",
        "export A='quoted \"value\" with\nnewline'; echo \"$A\"",
        PROBE,
        "cd /nonexistent-dir-4711",
        PROBE,
        // The session's directory removed by a command, then by someone else.
        "mkdir -p doomed && cd doomed && rmdir ../doomed; echo removed",
        PROBE,
        PROBE,
        "mkdir -p doomed2 && cd doomed2",
        "echo here",
    ];
    // Then a call's own working directory, and one that does not exist (bash's words and the
    // wrapper's, on the wrapper's line 4).
    let with_workdirs = [(PROBE, "/tmp"), ("pwd", "/nonexistent-workdir-4711")];
    let runs = commands.iter().map(|c| (*c, "")).chain(with_workdirs);
    for (command, workdir) in runs {
        let _ = s.live_pid();
        s.assert_as_fresh(&fresh_state, command, workdir);
    }
    // The session's directory removed from outside between two commands (both sessions are
    // in `start/doomed2` now): warned about, then the same place for both.
    std::fs::remove_dir(s.start.join("doomed2")).unwrap();
    for command in [PROBE, PROBE] {
        // A call in another directory first: it must not be where the removal shows.
        let (code, _, output) = s.agent_in("true", "/", 10_000);
        assert_eq!((code, output.as_str()), (0, ""));
        s.assert_as_fresh(&fresh_state, command, "");
    }
    // The session's directory file says the same too.
    assert_eq!(
        std::fs::read_to_string(s.state.join("cwd")).unwrap(),
        std::fs::read_to_string(fresh_state.join("cwd")).unwrap()
    );
}

/// A run that asks for stderr apart (a streaming call) is served by the same live shell, its
/// stderr on frames of its own (bash's own words included), its state kept as any run's; the
/// next merged run has both streams on one again.
#[test]
fn the_live_shell_serves_runs_with_stderr_apart() {
    let mut s = Session::new();
    let pid = s.live_pid().trim().to_owned();
    s.split_stderr = true;
    for _ in 0..3 {
        let (code, timed_out, out) = s.agent("echo $$; echo to-err >&2; echo out2", 10_000);
        assert_eq!((code, timed_out), (0, false));
        assert_eq!(out, format!("{pid}\nout2\n"), "served by another shell");
        assert_eq!(s.last_stderr, "to-err\n");
    }
    // State kept; bash's own message on stderr; the exit code kept.
    let (code, _, out) = s.agent("export SPLIT=kept; nosuchcommand-4711; exit 3", 10_000);
    assert_eq!((code, out.as_str()), (3, ""));
    assert!(
        s.last_stderr
            .contains("line 25: nosuchcommand-4711: command not found"),
        "{:?}",
        s.last_stderr
    );
    // The state changed: a new live shell, which serves split runs as well.
    let pid = s.live_pid().trim().to_owned();
    let (_, _, out) = s.agent("echo $$ $SPLIT >&2", 10_000);
    assert_eq!(
        (out.as_str(), s.last_stderr.as_str()),
        ("", &*format!("{pid} kept\n"))
    );
    // Merged again: one stream, in order, nothing on stderr frames.
    s.split_stderr = false;
    let (code, _, out) = s.agent("echo $$; echo e >&2; echo o", 10_000);
    assert_eq!((code, out), (0, format!("{pid}\ne\no\n")));
    assert_eq!(s.last_stderr, "");
}

#[test]
fn the_live_shell_keeps_timeouts_leftover_kills_and_outside_changes() {
    let mut s = Session::new();
    let _ = s.agent("export KEEP=1", 10_000);
    let pid = s.live_pid();

    // A timeout ends the command, not the session's shell state.
    let t = Instant::now();
    let (code, timed_out, _) = s.agent("sleep 30", 300);
    assert!(
        timed_out && code != 0,
        "code {code} after {:?}",
        t.elapsed()
    );
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    let (_, _, out) = s.agent("echo KEEP=$KEEP", 10_000);
    assert_eq!(out, "KEEP=1\n");

    // A background process of a finished command goes with it.
    let (code, _, _) = s.agent("sleep 300 & echo started", 10_000);
    assert_eq!(code, 0);
    let session = s
        .dir
        .path()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let tag = format!("PADDOCK_RUN=t-test{session}-{}", s.runs);
    assert!(
        paddock_agent::run::processes_with_env(&tag).is_empty(),
        "a background process of the live shell's command outlived it"
    );

    // The state changed by someone else (another run's commit): never served from the old.
    let _ = s.live_pid();
    let env = s.state.join("env.sh");
    let mut text = std::fs::read_to_string(&env).unwrap();
    text.push_str("declare -x OUTSIDE=\"changed\"\n");
    std::fs::write(&env, text).unwrap();
    let (_, _, out) = s.agent("echo OUTSIDE=$OUTSIDE KEEP=$KEEP", 10_000);
    assert_eq!(out, "OUTSIDE=changed KEEP=1\n");

    // A command that kills the live shell itself answers as a killed shell would, and the
    // session goes on.
    let live = s.live_pid();
    assert_ne!(
        live, pid,
        "the live shell was not renewed after the outside change"
    );
    let (code, _, _) = s.agent("kill $$; sleep 5", 10_000);
    assert_eq!(code, 143);
    let (code, _, out) = s.agent("echo KEEP=$KEEP", 10_000);
    assert_eq!((code, out.as_str()), (0, "KEEP=1\n"));
    let _ = s.live_pid();
}

#[test]
fn large_output_and_a_state_larger_than_a_pipe_pass_through_the_live_shell() {
    let mut s = Session::new();
    let _ = s.live_pid();
    // More output than a pipe holds, read while the job runs.
    let (code, _, out) = s.agent("head -c 300000 /dev/zero | tr '\\0' y; echo", 10_000);
    assert_eq!((code, out.len()), (0, 300_001));
    assert!(out.bytes().take(300_000).all(|b| b == b'y'));
    // A saved state larger than a pipe holds: the job's save at exit must not block it.
    let (code, timed_out, _) = s.agent(
        "export BIG=$(head -c 200000 /dev/zero | tr '\\0' x); big() { echo big; }",
        10_000,
    );
    assert_eq!((code, timed_out), (0, false));
    let _ = s.live_pid();
    let (_, _, out) = s.agent("echo ${#BIG}; big", 10_000);
    assert_eq!(out, "200000\nbig\n");
}

#[test]
fn a_hang_up_ends_the_job_and_a_paused_job_keeps_its_own_exit_code() {
    let mut s = Session::new();
    let shell_pid: i32 = s.live_pid().trim().parse().unwrap();
    // The engine gives up on a running command: its tree ends, the session goes on.
    let tag = s.next_tag();
    let stream = s.send("sleep 30", "", &tag, 60_000);
    let marker = format!("PADDOCK_RUN={tag}");
    let until = Instant::now() + Duration::from_secs(5);
    while paddock_agent::run::processes_with_env(&marker).is_empty() {
        assert!(Instant::now() < until, "the command never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(stream);
    let until = Instant::now() + Duration::from_secs(5);
    while !paddock_agent::run::processes_with_env(&marker).is_empty() {
        assert!(
            Instant::now() < until,
            "the command outlived the engine's hang-up"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (code, _, out) = s.agent("echo after", 10_000);
    assert_eq!((code, out.as_str()), (0, "after\n"));

    // A session pause stops the live shell and its job; resumed, the job's own status is
    // answered (a stopped job makes `wait` answer early with 128 + SIGSTOP).
    let shell_pid: i32 = match s.live_pid().trim().parse() {
        Ok(pid) => pid,
        Err(_) => shell_pid,
    };
    let tag = s.next_tag();
    let mut stream = s.send("sleep 0.6; exit 3", "", &tag, 60_000);
    let marker = format!("PADDOCK_RUN={tag}");
    std::thread::sleep(Duration::from_millis(150));
    // The job is the process group of what the command runs (the subshell's own environment
    // block does not show the run id: it is exported after the fork).
    let sleeper = *paddock_agent::run::processes_with_env(&marker)
        .iter()
        .next()
        .expect("the command is not running");
    let stat = std::fs::read_to_string(format!("/proc/{sleeper}/stat")).unwrap();
    let pgid: i32 = stat
        .rsplit(')')
        .next()
        .and_then(|rest| rest.split_whitespace().nth(2))
        .and_then(|field| field.parse().ok())
        .unwrap();
    assert_ne!(pgid, shell_pid, "the job is not a process group of its own");
    let job = vec![-pgid];
    let stop = |pids: &[i32], signal: &str| {
        for pid in pids {
            let _ = Command::new("kill")
                .args([signal, "--", &pid.to_string()])
                .status();
        }
    };
    stop(&job, "-STOP");
    stop(&[shell_pid], "-STOP");
    std::thread::sleep(Duration::from_millis(300));
    // The shell first: it sees its job still stopped, and must wait on.
    stop(&[shell_pid], "-CONT");
    std::thread::sleep(Duration::from_millis(200));
    stop(&job, "-CONT");
    let reply = loop {
        match read_frame(&mut stream) {
            Ok(Some((FrameKind::Output, _))) => {}
            Ok(Some((_, data))) => break serde_json::from_slice::<Reply>(&data).unwrap(),
            other => panic!("no reply from the agent ({other:?})"),
        }
    };
    assert!(
        matches!(
            reply,
            Reply::Exit {
                code: 3,
                timed_out: false,
                ..
            }
        ),
        "{reply:?}"
    );
}

/// The engine's own pool (the unconfined local backend's): a closed session's live shell ends
/// with it, and one warming or busy at the close ends when it is done.
#[test]
fn closing_a_session_ends_its_live_shell() {
    use paddock_agent::live_shell::{Ended, LiveShells};
    let s = Session::new();
    let pool = LiveShells::new(s.dir.path().to_path_buf());
    let until = Instant::now() + Duration::from_secs(10);
    let mut runs = 0;
    let shell_pid = loop {
        runs += 1;
        let tag = format!("t-close-{runs}");
        if let Some(mut job) = pool.take(&s.request("echo $$", "", &tag, None)) {
            let mut out = Vec::new();
            let ended = job.run(None, None, &mut |_, data: &[u8]| {
                out.extend_from_slice(data);
                true
            });
            assert_eq!(ended, Ended::Exited(0));
            job.drain(
                Instant::now() + Duration::from_secs(1),
                &mut |_, data: &[u8]| {
                    out.extend_from_slice(data);
                    true
                },
            );
            assert!(job.finish().is_empty());
            break String::from_utf8(out).unwrap().trim().to_owned();
        }
        assert!(Instant::now() < until, "no live shell within 10 s");
        std::thread::sleep(Duration::from_millis(20));
    };
    let proc_dir = PathBuf::from(format!("/proc/{shell_pid}"));
    assert!(
        proc_dir.exists(),
        "the live shell {shell_pid} is not running"
    );
    pool.end_for_state(&s.state);
    assert!(
        !proc_dir.exists(),
        "the closed session's live shell {shell_pid} is still there"
    );
}

/// Reads one run's frames on `stream` up to its answer: the output and the answer.
fn read_answer(stream: &mut UnixStream) -> (String, Reply) {
    let mut output = Vec::new();
    loop {
        match read_frame(stream) {
            Ok(Some((FrameKind::Output | FrameKind::Stderr, data))) => output.extend(data),
            Ok(Some((_, data))) => {
                let reply = serde_json::from_slice::<Reply>(&data).unwrap();
                return (String::from_utf8_lossy(&output).into_owned(), reply);
            }
            other => panic!("no answer from the agent ({other:?}); output {output:?}"),
        }
    }
}

#[test]
fn a_kept_connection_carries_the_next_run_and_never_keeps_the_agent_alive() {
    // The engine asks the agent to keep a command's connection open and sends the session's
    // next command on it (no connection and hello per command). The agent must answer every
    // run on it in order, and must still exit when idle although the engine holds it open.
    let mut session = Session::with_args(&["--idle-exit", "2"]);
    session.live_pid();
    let mut stream = UnixStream::connect(&session.socket).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    greet(&mut stream);
    for word in ["first", "second", "third"] {
        let tag = session.next_tag();
        let request = RunRequest {
            keep_connection: true,
            ..session.request(&format!("echo {word}"), "", &tag, Some(10_000))
        };
        start_run(&mut stream, request);
        let (output, reply) = read_answer(&mut stream);
        paddock_agent::shell_state::commit_state(&session.state, &tag);
        assert_eq!(output.trim(), word);
        assert!(
            matches!(
                reply,
                Reply::Exit {
                    code: 0,
                    timed_out: false,
                    kept: true
                }
            ),
            "the live shell's run must keep the connection it was asked to keep: {reply:?}"
        );
    }
    // Without the ask the connection closes after the answer, as before.
    let tag = session.next_tag();
    start_run(
        &mut stream,
        session.request("echo last", "", &tag, Some(10_000)),
    );
    let (output, reply) = read_answer(&mut stream);
    assert_eq!(output.trim(), "last");
    assert!(
        matches!(reply, Reply::Exit { kept: false, .. }),
        "{reply:?}"
    );
    assert!(
        matches!(read_frame(&mut stream), Ok(None)),
        "a connection not kept must close after its answer"
    );

    // A kept connection left idle is not activity: the agent exits after its idle time.
    let mut held = UnixStream::connect(&session.socket).unwrap();
    held.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    greet(&mut held);
    let tag = session.next_tag();
    start_run(
        &mut held,
        RunRequest {
            keep_connection: true,
            ..session.request("true", "", &tag, Some(10_000))
        },
    );
    let (_, reply) = read_answer(&mut held);
    assert!(matches!(reply, Reply::Exit { kept: true, .. }), "{reply:?}");
    let until = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = session.agent_process.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < until,
            "the agent did not exit within 15 s of going idle while a kept connection was open"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "{status:?}");
    assert!(
        matches!(read_frame(&mut held), Ok(None) | Err(_)),
        "the held connection must be closed by the agent's exit"
    );
}
