//! The relay through the real binary: `relay-listen` runs a program whose standard input and
//! output are the stream (here `bash -c` in place of `srun`, copying the agent binary it is sent
//! and starting `serve --relay-stdio` from the copy, as the Slurm holder step does), and offers
//! the agent's socket on this side. Runs go through it as through a local agent; the stream's
//! end removes the socket and ends open connections; a stray line on the stream is reported.

#![expect(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test helpers: a failed unwrap is a failed test"
)]

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use paddock_agent::protocol::{FrameKind, Reply, read_frame};

mod common;
use common::{greet, plain_run, start_run};

const AGENT: &str = env!("CARGO_BIN_EXE_paddock-agent");

/// The far end's script: what the Slurm holder step runs on the node.
const FAR_END: &str = r#"d=$1; size=$2; extra=$3; mode=$4
mkdir -p "$d/run" || exit 1
trap 'rm -rf "$d"' EXIT
head -c "$size" > "$d/paddock-agent" && chmod 0700 "$d/paddock-agent" || exit 1
eval "$extra"
"$d/paddock-agent" serve --socket "$d/run/agent.sock" --relay-stdio $mode <&0 &
wait $!"#;

/// The far end for an agent in another program (an Apptainer instance on a node): `relay-node`
/// carries the stream to the socket that program serves.
const FAR_END_NODE: &str = r#"d=$1; size=$2; extra=$3; mode=$4
mkdir -p "$d/run" || exit 1
trap 'rm -rf "$d"' EXIT
head -c "$size" > "$d/paddock-agent" && chmod 0700 "$d/paddock-agent" || exit 1
"$d/paddock-agent" relay-node --socket "$d/run/agent.sock" $mode -- "$d/paddock-agent" serve --socket "$d/run/agent.sock" <&0 &
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
        Self::start_with(extra, false)
    }

    /// With `direct`, connections go over TCP to the far agent's listener (on this machine's
    /// loopback here), the stream carrying the token and the port.
    fn start_with(extra: &str, direct: bool) -> Relay {
        Self::start_far(extra, direct, FAR_END, "--relay-direct")
    }

    fn start_far(extra: &str, direct: bool, far_end: &str, direct_flag: &str) -> Relay {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("near/agent.sock");
        std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
        let far = dir.path().join("far");
        let log = dir.path().join("relay.log");
        let size = std::fs::metadata(AGENT).unwrap().len().to_string();
        let mut command = Command::new(AGENT);
        command.args(["relay-listen", "--socket"]).arg(&socket);
        if direct {
            command.args(["--direct-host", "127.0.0.1"]);
        }
        let child = command
            .args(["--send", AGENT, "--", "bash", "-c", far_end, "far-end"])
            .arg(&far)
            .args([size.as_str(), extra, if direct { direct_flag } else { "" }])
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
        greet(&mut stream);
        stream
    }

    /// Runs `bash -c command` through the relay: (exit code, output).
    fn run(&self, command: &str) -> (i32, Vec<u8>) {
        let mut stream = self.connect();
        let argv = vec!["bash".into(), "-c".into(), command.into()];
        start_run(&mut stream, plain_run(argv, Some(20_000)));
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
    twenty_at_once(relay, 200);
}

/// Twenty commands at once through `relay`, each printing `lines` numbered lines of its own.
fn twenty_at_once(relay: Relay, lines: usize) -> std::sync::Arc<Relay> {
    let relay = std::sync::Arc::new(relay);
    let threads: Vec<_> = (0..20)
        .map(|i| {
            let relay = relay.clone();
            std::thread::spawn(move || {
                let (code, out) =
                    relay.run(&format!("for n in $(seq 1 {lines}); do echo {i}:$n; done"));
                assert_eq!(code, 0);
                let expected: String = (1..=lines).map(|n| format!("{i}:{n}\n")).collect();
                assert_eq!(String::from_utf8_lossy(&out), expected);
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    relay
}

#[test]
fn runs_cross_the_direct_path_and_the_stream_keeps_only_its_life() {
    let relay = Relay::start_with("", true);
    let (code, out) = relay.run("head -c 300000 /dev/zero | tr '\\0' 'z'; exit 4");
    assert_eq!(code, 4);
    assert_eq!(out.len(), 300_000);
    let relay = twenty_at_once(relay, 100);
    // A connection to the far agent's port without the token is refused and logged.
    let port = far_listening_port(&relay).expect("the far agent's port");
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    conn.write_all(b"guess\n").unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut rest = Vec::new();
    let _ = conn.read_to_end(&mut rest);
    assert!(rest.is_empty());
    wait_until("the refusal is logged", Duration::from_secs(5), || {
        relay
            .log_text()
            .contains("refused a connection from 127.0.0.1")
    });
}

#[test]
fn an_agent_in_another_program_is_carried_by_relay_node_and_ended_with_the_stream() {
    for direct in [true, false] {
        let mut relay = Relay::start_far("", direct, FAR_END_NODE, "--direct");
        let (code, out) = relay.run("echo through relay-node; exit 5");
        assert_eq!(
            (code, out.as_slice()),
            (5, b"through relay-node\n".as_slice())
        );
        relay.child.kill().unwrap();
        relay.child.wait().unwrap();
        wait_until(
            "the relayed agent ends with the stream",
            Duration::from_secs(5),
            || !relay.far.exists(),
        );
    }
}

/// The TCP port the far agent listens on (its socket's inode among its descriptors, found in
/// /proc/net/tcp).
fn far_listening_port(relay: &Relay) -> Option<u16> {
    let pid = far_agent_pid(&relay.far);
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()?
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter_map(|l| {
            l.to_string_lossy()
                .strip_prefix("socket:[")
                .map(|i| i.trim_end_matches(']').to_owned())
        })
        .collect();
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).ok()?;
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // State 0A: listening.
        (fields.get(3) == Some(&"0A") && inodes.iter().any(|i| Some(&i.as_str()) == fields.get(9)))
            .then(|| u16::from_str_radix(fields[1].rsplit(':').next()?, 16).ok())
            .flatten()
    })
}

#[test]
fn the_streams_end_removes_the_socket_and_ends_open_connections() {
    let mut relay = Relay::start("");
    let mut stream = relay.connect();
    start_run(
        &mut stream,
        plain_run(vec!["sleep".into(), "30".into()], None),
    );
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
