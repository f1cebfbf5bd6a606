//! The relay through the real binary: `relay-listen` runs a program whose standard input and
//! output are the stream (here `bash -c` in place of `srun`, copying the agent binary it is sent
//! and starting `serve --relay-stdio` from the copy, as the Slurm holder step does), and offers
//! the agent's socket on this side. Runs go through it as through a local agent; the stream's
//! end removes the socket and ends open connections; a stray line on the stream is reported.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use paddock_agent::protocol::{
    FrameKind, PROTOCOL_VERSION, Reply, Request, RunRequest, read_frame, read_message,
    write_message,
};

const AGENT: &str = env!("CARGO_BIN_EXE_paddock-agent");

/// The far end's script: what the Slurm holder step runs on the node.
const FAR_END: &str = r#"d=$1; size=$2; extra=$3
mkdir -p "$d/run" || exit 1
trap 'rm -rf "$d"' EXIT
head -c "$size" > "$d/paddock-agent" && chmod 0700 "$d/paddock-agent" || exit 1
eval "$extra"
"$d/paddock-agent" serve --socket "$d/run/agent.sock" --relay-stdio <&0 &
wait $!"#;

struct Relay {
    child: Child,
    socket: PathBuf,
    far: PathBuf,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Relay {
    /// Starts `relay-listen`; `extra` runs on the far end before its agent (a stray print).
    fn start(extra: &str) -> Relay {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("near/agent.sock");
        std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
        let far = dir.path().join("far");
        let log = dir.path().join("relay.log");
        let size = std::fs::metadata(AGENT).unwrap().len().to_string();
        let child = Command::new(AGENT)
            .args(["relay-listen", "--socket"])
            .arg(&socket)
            .args(["--send", AGENT, "--", "bash", "-c", FAR_END, "far-end"])
            .arg(&far)
            .args([&size, extra])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let relay = Relay {
            child,
            socket,
            far,
            log,
            _dir: dir,
        };
        let started = Instant::now();
        while UnixStream::connect(&relay.socket).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the relay did not listen: {}",
                relay.log_text()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        relay
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn connect(&self) -> UnixStream {
        let mut stream = UnixStream::connect(&self.socket).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
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
        stream
    }

    /// Runs `bash -c command` through the relay: (exit code, output).
    fn run(&self, command: &str) -> (i32, Vec<u8>) {
        let mut stream = self.connect();
        let request = RunRequest {
            argv: vec!["bash".into(), "-c".into(), command.into()],
            env: Default::default(),
            clear_env: false,
            cwd: None,
            timeout_ms: Some(20_000),
            renames: Vec::new(),
            pty: false,
            stdin: false,
            run_id: None,
        };
        write_message(&mut stream, &Request::Run(request)).unwrap();
        stream.flush().unwrap();
        let mut output = Vec::new();
        loop {
            match read_frame(&mut stream) {
                Ok(Some((FrameKind::Output, data))) => output.extend(data),
                Ok(Some((_, data))) => match serde_json::from_slice::<Reply>(&data).unwrap() {
                    Reply::Exit { code, .. } => return (code, output),
                    other => panic!("{other:?}"),
                },
                other => panic!("no reply ({other:?}); log: {}", self.log_text()),
            }
        }
    }
}

fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < limit, "{what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn runs_cross_the_relay_byte_for_byte_and_concurrently() {
    let relay = Relay::start("");
    let (code, out) =
        relay.run("echo hello from $(basename $(dirname $(dirname $PWD/x)))x; exit 3");
    assert_eq!(code, 3);
    assert!(String::from_utf8_lossy(&out).starts_with("hello from"));
    // Every byte value, more than the relay's window, and a line-less tail.
    let (code, out) =
        relay.run("head -c 1000000 /dev/zero | tr '\\0' '\\377'; printf 'a\\0b\\r\\nc'");
    assert_eq!(code, 0);
    assert_eq!(out.len(), 1_000_000 + 6);
    assert!(out[..1_000_000].iter().all(|&b| b == 0xff));
    assert_eq!(&out[1_000_000..], b"a\0b\r\nc");
    // Twenty at once, each its own output in its own order.
    let relay = std::sync::Arc::new(relay);
    let threads: Vec<_> = (0..20)
        .map(|i| {
            let relay = relay.clone();
            std::thread::spawn(move || {
                let (code, out) =
                    relay.run(&format!("for n in $(seq 1 200); do echo {i}:$n; done"));
                assert_eq!(code, 0);
                let expected: String = (1..=200).map(|n| format!("{i}:{n}\n")).collect();
                assert_eq!(String::from_utf8_lossy(&out), expected);
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn the_streams_end_removes_the_socket_and_ends_open_connections() {
    let mut relay = Relay::start("");
    let mut stream = relay.connect();
    let request = RunRequest {
        argv: vec!["sleep".into(), "30".into()],
        env: Default::default(),
        clear_env: false,
        cwd: None,
        timeout_ms: None,
        renames: Vec::new(),
        pty: false,
        stdin: false,
        run_id: None,
    };
    write_message(&mut stream, &Request::Run(request)).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    // The far end dies (a node lost, the step killed): every process of it.
    let far_agent = far_agent_pid(&relay.far);
    Command::new("kill")
        .args(["-KILL", &far_agent])
        .status()
        .unwrap();
    let started = Instant::now();
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the open connection hung"
    );
    wait_until(
        "the relay's socket is removed",
        Duration::from_secs(5),
        || !relay.socket.exists(),
    );
    wait_until("relay-listen exits", Duration::from_secs(5), || {
        relay.child.try_wait().unwrap().is_some()
    });
    assert!(
        relay.log_text().contains("the stream ended"),
        "{}",
        relay.log_text()
    );
    // The far end cleaned up after itself.
    wait_until(
        "the far end's directory is removed",
        Duration::from_secs(5),
        || !relay.far.exists(),
    );
}

#[test]
fn killing_the_relay_ends_the_far_agent_and_a_second_relay_gives_way() {
    let mut relay = Relay::start("");
    // A second relay for the same socket: the first keeps it.
    let second = Command::new(AGENT)
        .args(["relay-listen", "--socket"])
        .arg(&relay.socket)
        .args(["--", "cat"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        second.status.code(),
        Some(paddock_agent::EXIT_ALREADY_RUNNING)
    );
    assert_eq!(relay.run("echo still").1, b"still\n");
    relay.child.kill().unwrap();
    relay.child.wait().unwrap();
    // The far end sees its input end and goes, taking its directory with it.
    wait_until(
        "the far agent exits when its relay is killed",
        Duration::from_secs(5),
        || !relay.far.exists(),
    );
}

#[test]
fn a_stray_line_on_the_stream_is_reported_not_taken_for_data() {
    let relay = Relay::start("echo 'a message printed on the node'");
    assert_eq!(relay.run("echo ok").1, b"ok\n");
    assert!(
        relay
            .log_text()
            .contains("the far end printed: a message printed on the node"),
        "{}",
        relay.log_text()
    );
}

#[test]
fn a_far_end_that_never_starts_its_agent_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("agent.sock");
    let out = Command::new(AGENT)
        .args(["relay-listen", "--socket"])
        .arg(&socket)
        .args([
            "--",
            "bash",
            "-c",
            "echo srun: error: Unable to create step; exit 1",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("Unable to create step"), "{said}");
    assert!(said.contains("ended before its agent listened"), "{said}");
    assert!(!Path::new(&socket).exists());
}

/// The far agent's pid, found by its socket path in /proc.
fn far_agent_pid(far: &Path) -> String {
    let needle = far.join("run/agent.sock").display().to_string();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(&needle) && cmdline.contains("--relay-stdio") {
            return entry.file_name().to_string_lossy().into_owned();
        }
    }
    panic!("no far agent serving {needle}");
}
