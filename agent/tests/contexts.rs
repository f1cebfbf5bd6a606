//! CPython contexts through a real agent's socket, as the engine asks for them: names that
//! persist, rich results, output streamed as it is printed, interrupts (timeout and hang-up)
//! that keep the names, typed errors, and no interpreter left behind by a remove, a kill from
//! outside or the agent's shutdown.

#![expect(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test helpers: a failed unwrap is a failed test"
)]

use std::collections::BTreeMap;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use paddock_agent::protocol::{
    ContextRequest, FrameKind, Reply, Request, read_frame, write_message,
};
use serde_json::{Value, json};

#[expect(
    dead_code,
    reason = "this suite uses only `greet` of the shared helpers"
)]
mod common;
use common::greet;

/// A served session: an agent on a socket in a directory of its own.
struct Agent {
    process: Child,
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// What came back for one request: the streamed frames with when they came, the answer (or
/// the `{"code", "message"}` of a failure) and when it came.
struct Answer {
    frames: Vec<(FrameKind, String, Instant)>,
    answer: Result<Value, Value>,
    at: Instant,
}

impl Answer {
    fn ok(self) -> Value {
        match self.answer {
            Ok(answer) => answer,
            Err(failure) => panic!("the request failed: {failure}"),
        }
    }

    fn code(self) -> String {
        match self.answer {
            Ok(answer) => panic!("the request succeeded: {answer}"),
            Err(failure) => failure["code"].as_str().unwrap().to_owned(),
        }
    }
}

impl Agent {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("agent.sock");
        let process = Command::new(env!("CARGO_BIN_EXE_paddock-agent"))
            .args(["serve", "--socket"])
            .arg(&socket)
            .spawn()
            .unwrap();
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
            process,
            socket,
            _dir: dir,
        }
    }

    /// A greeted connection that asked for `request`.
    fn send(&self, request: ContextRequest) -> UnixStream {
        let mut stream = UnixStream::connect(&self.socket).unwrap();
        greet(&mut stream);
        write_message(&mut stream, &Request::Context(request)).unwrap();
        stream
    }

    fn ask(&self, request: ContextRequest) -> Answer {
        let mut stream = self.send(request);
        let mut frames = Vec::new();
        loop {
            match read_frame(&mut stream) {
                Ok(Some((kind @ (FrameKind::Output | FrameKind::Stderr), data))) => {
                    frames.push((kind, String::from_utf8(data).unwrap(), Instant::now()))
                }
                Ok(Some((FrameKind::Message, data))) => {
                    let at = Instant::now();
                    let reply: Reply = serde_json::from_slice(&data).unwrap();
                    let Reply::Context { answer, failed } = reply else {
                        panic!("not a context reply: {reply:?}");
                    };
                    let answer: Value = serde_json::from_str(&answer).unwrap();
                    return Answer {
                        frames,
                        answer: if failed { Err(answer) } else { Ok(answer) },
                        at,
                    };
                }
                other => panic!("no reply from the agent ({other:?})"),
            }
        }
    }

    fn execute(&self, id: &str, code: &str) -> Answer {
        self.ask(execute(id, code, None))
    }

    fn pid_of(&self, id: &str) -> u32 {
        let list = self.ask(ContextRequest::List).ok();
        let found = list["contexts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id)
            .unwrap_or_else(|| panic!("no context {id} in {list}"));
        u32::try_from(found["pid"].as_u64().unwrap()).unwrap()
    }

    /// Processes still running (not zombies) that one of this agent's contexts started.
    fn context_processes(&self) -> Vec<u32> {
        let prefix = format!("PADDOCK_CONTEXT={}.", self.process.id());
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|&pid| !ended(pid))
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
                    env.split(|&b| b == 0)
                        .any(|v| v.starts_with(prefix.as_bytes()))
                })
            })
            .collect()
    }
}

fn execute(id: &str, code: &str, timeout_ms: Option<u64>) -> ContextRequest {
    ContextRequest::Execute {
        id: id.into(),
        code: code.into(),
        timeout_ms,
        cwd: None,
        env: BTreeMap::new(),
    }
}

/// Whether `pid` is gone or a zombie.
fn ended(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X']))
    })
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < until, "{what}: still not so after 10 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn plain(answer: &Value, index: usize) -> &str {
    answer["results"][index]["text/plain"].as_str().unwrap()
}

#[test]
fn names_persist_and_results_come_as_mime_bundles() {
    let agent = Agent::start();
    let first = agent
        .execute("nb", "x = 41\ndef f(y):\n    return y + 1")
        .ok();
    assert_eq!(first["context"], "nb");
    assert_eq!(first["execution_count"], 1);
    assert_eq!(first["results"], json!([]));
    let second = agent.execute("nb", "f(x)").ok();
    assert_eq!(second["execution_count"], 2);
    assert_eq!(
        second["results"],
        json!([{"text/plain": "42", "is_main_result": true}])
    );
    let shown = agent
        .execute(
            "nb",
            "class Chart:\n    def _repr_png_(self):\n        return b'\\x89PNG\\r\\n'\n    \
             def _repr_html_(self):\n        return '<table></table>'\n    \
             def __repr__(self):\n        return 'Chart()'\ndisplay(Chart())",
        )
        .ok();
    assert_eq!(
        shown["results"],
        json!([{
            "text/plain": "Chart()",
            "text/html": "<table></table>",
            "image/png": "iVBORw0K",
            "is_main_result": false
        }])
    );
}

#[test]
fn stdout_and_stderr_stream_apart_while_the_execution_runs() {
    let agent = Agent::start();
    let sent = Instant::now();
    let reply = agent.execute(
        "io",
        "import sys, time\nprint('a')\nprint('warn', file=sys.stderr)\ntime.sleep(1)\nprint('b')",
    );
    // The two streams are two pipes: their relative order is not kept, each one's is.
    let (_, text, at) = reply
        .frames
        .iter()
        .find(|(kind, _, _)| *kind == FrameKind::Output)
        .unwrap();
    assert_eq!(text, "a\n");
    assert!(
        *at + Duration::from_millis(800) < reply.at,
        "the first chunk came {:?} after the request, the answer {:?}",
        *at - sent,
        reply.at - sent
    );
    let stream = |wanted: FrameKind| -> String {
        reply
            .frames
            .iter()
            .filter(|(k, _, _)| *k == wanted)
            .map(|(_, t, _)| t.as_str())
            .collect()
    };
    assert_eq!(stream(FrameKind::Output), "a\nb\n");
    assert_eq!(stream(FrameKind::Stderr), "warn\n");
    let answer = reply.ok();
    assert_eq!(answer["stdout"], "a\nb\n");
    assert_eq!(answer["stderr"], "warn\n");
}

#[test]
fn exceptions_and_timeouts_keep_the_context() {
    let agent = Agent::start();
    agent.execute("ex", "kept = [1, 2]").ok();
    let failed = agent
        .execute("ex", "def g():\n    return {}['missing']\ng()")
        .ok();
    let exception = &failed["exception"];
    assert_eq!(exception["name"], "KeyError");
    assert_eq!(exception["value"], "'missing'");
    let traceback = exception["traceback"].as_str().unwrap();
    assert!(
        traceback.starts_with("Traceback (most recent call last):\n  File \"<cell 2>\", line 3"),
        "{traceback}"
    );
    assert!(traceback.ends_with("KeyError: 'missing'\n"), "{traceback}");

    let started = Instant::now();
    let stopped = agent.ask(execute("ex", "while True: pass", Some(300))).ok();
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(stopped["timed_out"], true);
    assert_eq!(stopped["interrupted"], true);
    assert_eq!(stopped["exception"]["name"], "KeyboardInterrupt");
    assert_eq!(plain(&agent.execute("ex", "kept").ok(), 0), "[1, 2]");
}

#[test]
fn a_hang_up_interrupts_the_execution_and_keeps_the_names() {
    let agent = Agent::start();
    agent.execute("h", "kept = 'yes'").ok();
    let stream = agent.send(execute(
        "h",
        "import time\nfor i in range(600):\n    time.sleep(0.1)\nfinished = True",
        None,
    ));
    std::thread::sleep(Duration::from_millis(500));
    drop(stream);
    let started = Instant::now();
    // Served as soon as the interrupted execution let go of the context.
    let after = agent
        .execute("h", "kept, 'finished' in dir(), i < 100")
        .ok();
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(plain(&after, 0), "('yes', False, True)");
}

#[test]
fn contexts_are_isolated() {
    let agent = Agent::start();
    agent.execute("left", "side = 'left'").ok();
    agent.execute("right", "side = 'right'").ok();
    assert_eq!(plain(&agent.execute("left", "side").ok(), 0), "'left'");
    assert_eq!(plain(&agent.execute("right", "side").ok(), 0), "'right'");
    let missing = agent.execute("fresh", "side").ok();
    assert_eq!(missing["exception"]["name"], "NameError");
    assert_ne!(agent.pid_of("left"), agent.pid_of("right"));
}

#[test]
fn requests_that_cannot_be_served_have_typed_errors() {
    let agent = Agent::start();
    let create = || ContextRequest::Create {
        id: "c".into(),
        cwd: None,
        env: BTreeMap::new(),
    };
    let created = agent.ask(create()).ok();
    assert!(created["pid"].as_u64().is_some(), "{created}");
    assert_eq!(agent.ask(create()).code(), "context:exists");
    assert_eq!(
        agent
            .ask(ContextRequest::Restart { id: "nope".into() })
            .code(),
        "context:not_found"
    );
    assert_eq!(
        agent
            .ask(ContextRequest::Remove { id: "nope".into() })
            .code(),
        "context:not_found"
    );
    assert_eq!(agent.execute("no/slash", "1").code(), "context:invalid_id");
}

#[test]
fn an_interpreter_killed_from_outside_is_reported_then_replaced() {
    let agent = Agent::start();
    agent.execute("k", "lost = 1").ok();
    let pid = agent.pid_of("k");
    Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    wait_until("the agent saw its context die", || {
        agent.ask(ContextRequest::List).ok()["contexts"][0]["alive"] == false
    });
    assert_eq!(agent.execute("k", "lost").code(), "context:died");
    let after = agent.execute("k", "'lost' in dir()").ok();
    assert_eq!(after["restarted"], true);
    assert_eq!(after["execution_count"], 1);
    assert_eq!(plain(&after, 0), "False");
    assert_ne!(agent.pid_of("k"), pid);
}

#[test]
fn remove_and_shutdown_leave_no_interpreter_behind() {
    let agent = Agent::start();
    for id in ["gone", "stays"] {
        // Each leaves a subprocess in its group and one in a session of its own.
        agent
            .execute(
                id,
                "import subprocess\nkids = [subprocess.Popen(['sleep', '300']), \
                 subprocess.Popen(['sleep', '301'], start_new_session=True)]",
            )
            .ok();
    }
    let gone = agent.pid_of("gone");
    let stays = agent.pid_of("stays");
    assert_eq!(agent.context_processes().len(), 6);
    let removed = agent.ask(ContextRequest::Remove { id: "gone".into() }).ok();
    assert_eq!(removed, json!({"context": "gone", "removed": true}));
    assert!(ended(gone));
    wait_until("the removed context's processes ended", || {
        agent.context_processes().len() == 3
    });
    assert!(!ended(stays));

    let mut stream = UnixStream::connect(&agent.socket).unwrap();
    greet(&mut stream);
    write_message(&mut stream, &Request::Shutdown).unwrap();
    let (kind, _) = read_frame(&mut stream).unwrap().unwrap();
    assert_eq!(kind, FrameKind::Message);
    wait_until("every context process ended with the agent", || {
        agent.context_processes().is_empty() && ended(stays)
    });
}

/// Not a check: what one execution of `1+1` costs through the socket (a connection, hello,
/// the request, the driver's round trip, the answer). `--nocapture` shows it.
#[test]
fn per_execution_overhead_is_measured() {
    let agent = Agent::start();
    agent.execute("timing", "1+1").ok();
    let mut times: Vec<Duration> = (0..50)
        .map(|_| {
            let started = Instant::now();
            let answer = agent.execute("timing", "1+1").ok();
            assert_eq!(plain(&answer, 0), "2");
            started.elapsed()
        })
        .collect();
    times.sort();
    eprintln!(
        "1+1 through the agent socket, 50 executions: median {:?}, fastest {:?}, p90 {:?}",
        times[25], times[0], times[45]
    );
}
