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
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use paddock_agent::protocol::{
    FrameKind, PROTOCOL_VERSION, Reply, Request, RunRequest, read_frame, read_message,
    write_message,
};
use paddock_agent::shell_state::WRAPPER;

struct Agent(Child);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A session: an agent, its state directory and the directory commands start in.
struct Session {
    _agent: Agent,
    dir: tempfile::TempDir,
    socket: PathBuf,
    state: PathBuf,
    start: PathBuf,
    runs: u32,
}

impl Session {
    fn new() -> Self {
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
            _agent: agent,
            dir,
            socket,
            state,
            start,
            runs: 0,
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
        let tag = self.next_tag();
        let request = RunRequest {
            argv: [
                "/bin/bash",
                "-c",
                WRAPPER,
                "paddock",
                &self.state.display().to_string(),
                command,
                "",
                &tag,
            ]
            .iter()
            .map(|a| (*a).to_owned())
            .collect(),
            env: self.env(&tag),
            clear_env: true,
            cwd: Some(self.start.display().to_string()),
            timeout_ms: Some(timeout_ms),
            renames: Vec::new(),
            run_id: Some(tag.clone()),
            pty: false,
            stdin: false,
        };
        let mut stream = match UnixStream::connect(&self.socket) {
            Ok(stream) => stream,
            Err(e) => panic!(
                "cannot reach the agent for {command:?} ({e}); the agent: {:?}",
                self._agent.0.try_wait()
            ),
        };
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        write_message(
            &mut stream,
            &Request::Hello {
                version: PROTOCOL_VERSION,
            },
        )
        .unwrap();
        let hello: Reply = read_message(&mut stream, "hello").unwrap();
        assert!(matches!(hello, Reply::Hello { .. }), "{hello:?}");
        write_message(&mut stream, &Request::Run(request)).unwrap();
        stream.flush().unwrap();
        let mut output = Vec::new();
        let reply = loop {
            match read_frame(&mut stream) {
                Ok(Some((FrameKind::Output, data))) => output.extend(data),
                Ok(Some((_, data))) => break serde_json::from_slice::<Reply>(&data).unwrap(),
                other => panic!("no reply from the agent ({other:?}); output {output:?}"),
            }
        };
        // What the engine does after an agent run of the wrapper.
        paddock_agent::shell_state::commit_state(&self.state, &tag);
        let output = String::from_utf8_lossy(&output).into_owned();
        match reply {
            Reply::Exit { code, timed_out } => (code, timed_out, output),
            other => panic!("{other:?} for {command:?} with output {output:?}"),
        }
    }

    /// One command by a fresh wrapper shell of the engine's own (no agent), on `state`.
    fn fresh(&mut self, state: &Path, command: &str) -> (i32, String) {
        let tag = self.next_tag();
        let out = Command::new("/bin/bash")
            .args(["-c", WRAPPER, "paddock"])
            .arg(state)
            .args([command, "", &tag])
            .env_clear()
            .envs(self.env(&tag))
            .current_dir(&self.start)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        paddock_agent::shell_state::commit_state(state, &tag);
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        (out.status.code().unwrap_or(-1), text)
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
    ];
    let mut live_served = 0;
    for command in commands {
        let _ = s.live_pid();
        let (code, timed_out, output) = s.agent(command, 10_000);
        let (fresh_code, fresh_output) = s.fresh(&fresh_state, command);
        assert!(!timed_out, "{command}");
        assert_eq!(
            (
                code,
                output.replace(&s.state.display().to_string(), "STATE")
            ),
            (
                fresh_code,
                fresh_output.replace(&fresh_state.display().to_string(), "STATE")
            ),
            "the live shell and a fresh wrapper shell differ on {command:?}"
        );
        live_served += 1;
    }
    assert_eq!(live_served, commands.len());
    // The session's directory file says the same too.
    assert_eq!(
        std::fs::read_to_string(s.state.join("cwd")).unwrap(),
        std::fs::read_to_string(fresh_state.join("cwd")).unwrap()
    );
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
