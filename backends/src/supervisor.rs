//! The supervisor of one background command: `paddock __supervise DIR`.
//!
//! It detaches from the engine (its own session), starts the command (in a PTY or with pipes),
//! records it, copies its output to `DIR/log` (both streams, in the order they came) and to
//! `DIR/stdout` and `DIR/stderr` (each apart; a terminal's output is all stdout), feeds it what
//! arrives on the `stdin` FIFO, and
//! when it ends writes `exit.json` and a redacted `receipt.json`. It needs nothing from the
//! engine after the start, so the command survives the engine restarting.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::processes::{
    ExitRecord, ProcessRecord, ProcessSpec, Receipt, STDERR_FILE, STDOUT_FILE, now_ms,
    write_json_atomic,
};
use crate::shell::WRAPPER;

/// Log size beyond which output is dropped (the end still reaches the receipt).
const MAX_LOG_BYTES: u64 = 256 * 1024 * 1024;
/// Bytes of output kept for the receipt.
const RECEIPT_TAIL_BYTES: usize = 16 * 1024;

/// Runs the supervisor. Prints one line on stdout: the [`ProcessRecord`] JSON, or an error.
pub fn run_main(dir: &Path) -> ExitCode {
    match supervise(dir) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // Before the record was printed this line is what the engine reports.
            let mut out = std::io::stdout();
            let _ = writeln!(out, "{err}");
            let _ = out.flush();
            ExitCode::from(1)
        }
    }
}

type Stdin = Arc<Mutex<Option<Box<dyn Write + Send>>>>;

/// Where one of a command's streams is read from, with the name of its own file.
type Output = (&'static str, Box<dyn Read + Send>);

/// A started command: pid, its outputs, its stdin, and how to wait for its exit code.
type Started = (
    i32,
    Vec<Output>,
    Stdin,
    Box<dyn FnMut() -> std::io::Result<i32>>,
);

fn supervise(dir: &Path) -> std::io::Result<()> {
    let _ = nix::unistd::setsid();
    let spec: ProcessSpec = serde_json::from_slice(&std::fs::read(dir.join("spec.json"))?)
        .map_err(std::io::Error::other)?;
    let request = &spec.request;
    let workdir = request
        .workdir
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/".into());
    let started = Instant::now();
    let started_at_ms = now_ms();

    PTY_MODE.store(request.pty, std::sync::atomic::Ordering::Relaxed);
    let (mut shell, local_pty) = match &spec.remote {
        // docker, ssh, apptainer: the transport's client, which runs the wrapped command on
        // the target; state is kept there.
        Some(launch) => {
            let (program, args) = launch
                .argv
                .split_first()
                .ok_or_else(|| std::io::Error::other("the remote launch has no program"))?;
            let mut client = std::process::Command::new(program);
            client.args(args);
            (client, request.pty && launch.local_pty)
        }
        // A sandboxed local command: `paddock __sandbox-exec PROFILE bash -c WRAPPER ...`.
        None if spec.local_argv.is_some() => {
            let argv = spec.local_argv.clone().unwrap_or_default();
            let (program, args) = argv
                .split_first()
                .ok_or_else(|| std::io::Error::other("the local launch has no program"))?;
            let mut shell = std::process::Command::new(program);
            shell.args(args);
            (shell, request.pty)
        }
        None => {
            let mut shell = std::process::Command::new(crate::shell::bash_path());
            shell
                .arg("-c")
                .arg(WRAPPER)
                .arg("paddock")
                .arg(&spec.shell_state)
                .arg(&request.command)
                .arg(&workdir)
                .arg(&spec.id);
            (shell, request.pty)
        }
    };
    shell.env_clear().envs(&spec.env).current_dir(&home);
    // The terminal the command (or its client) runs on, for `process resize`.
    let mut terminal = None;
    let (pid, outputs, stdin, mut waiter): Started = if local_pty {
        let (pty, pts) = pty_process::blocking::open().map_err(std::io::Error::other)?;
        pty.resize(pty_process::Size::new(40, 120))
            .map_err(std::io::Error::other)?;
        let mut child = pty_process::blocking::Command::from(shell)
            .env("TERM", "xterm-256color")
            .spawn(pts)
            .map_err(std::io::Error::other)?;
        let pid = child.id() as i32;
        let pty = Arc::new(pty);
        terminal = Some(pty.clone());
        let reader = PtyReader(pty.clone());
        let writer: Box<dyn Write + Send> = Box::new(PtyWriter(pty));
        (
            pid,
            vec![(STDOUT_FILE, Box::new(reader))],
            Arc::new(Mutex::new(Some(writer))),
            Box::new(move || child.wait().map(exit_code_of)),
        )
    } else {
        // Each stream on a pipe of its own (a remote command script keeps them apart when
        // launched for a background run). A terminal on the far side (docker, ssh) has all its
        // output on the client's stdout; what the client itself says on stderr joins it.
        let merged = if request.pty {
            Some(std::io::pipe()?)
        } else {
            None
        };
        let (stdout, stderr) = match &merged {
            Some((_, writer)) => (
                Stdio::from(writer.try_clone()?),
                Stdio::from(writer.try_clone()?),
            ),
            None => (Stdio::piped(), Stdio::piped()),
        };
        let mut child = shell
            .stdin(Stdio::piped())
            .stdout(stdout)
            .stderr(stderr)
            .process_group(0)
            .spawn()?;
        let pid = child.id() as i32;
        let stdin: Option<Box<dyn Write + Send>> = child
            .stdin
            .take()
            .map(|s| Box::new(s) as Box<dyn Write + Send>);
        let mut outputs: Vec<Output> = Vec::new();
        if let Some((reader, writer)) = merged {
            // Our copy of the writing end goes, or the reader would never see the end.
            drop(writer);
            outputs.push((STDOUT_FILE, Box::new(reader)));
        }
        if let Some(out) = child.stdout.take() {
            outputs.push((STDOUT_FILE, Box::new(out)));
        }
        if let Some(err) = child.stderr.take() {
            outputs.push((STDERR_FILE, Box::new(err)));
        }
        (
            pid,
            outputs,
            Arc::new(Mutex::new(stdin)),
            Box::new(move || child.wait().map(exit_code_of)),
        )
    };

    let me = std::process::id() as i32;
    let record = ProcessRecord {
        id: spec.id.clone(),
        session: request.session.clone(),
        command: request.command.clone(),
        pid,
        start_time: crate::procfs::start_time(pid).unwrap_or(0),
        supervisor_pid: me,
        supervisor_start_time: crate::procfs::start_time(me).unwrap_or(0),
        started_at_ms,
        pty: request.pty,
        notify_on_complete: request.notify_on_complete,
    };
    // The input FIFOs are open for reading before the record says the process runs: a write
    // right after the start (a script that spawns and then writes at once) would otherwise
    // find no reader and be refused.
    let stdin_fifo = open_fifo(&dir.join("stdin"));
    let control_fifo = open_fifo(&dir.join("control"));
    // The log exists before the record does: `process log` right after the start (the id is
    // answered as soon as the record is) reads an empty log, not a missing one (seen in CI on a
    // loaded machine, where the copier thread had not opened it yet).
    let append = |name: &str| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(name))
    };
    let log = append("log");
    // Both streams' files, for a reader of each apart (`process output`).
    let stream_files = [append(STDOUT_FILE), append(STDERR_FILE)];
    write_json_atomic(&dir.join("meta.json"), &record)?;
    {
        let mut out = std::io::stdout();
        writeln!(
            out,
            "{}",
            serde_json::to_string(&record).map_err(std::io::Error::other)?
        )?;
        out.flush()?;
    }

    // Output: to the log and the stream's own file (each capped) and to the receipt's tail.
    let shared = Arc::new(Mutex::new(SharedOutput {
        log: log.ok(),
        log_written: 0,
        tail: Vec::new(),
    }));
    let [stdout_file, stderr_file] = stream_files;
    let mut files = [
        (STDOUT_FILE, stdout_file.ok()),
        (STDERR_FILE, stderr_file.ok()),
    ];
    let copiers: Vec<std::thread::JoinHandle<()>> = outputs
        .into_iter()
        .map(|(name, reader)| {
            let own = files
                .iter_mut()
                .find(|(n, _)| *n == name)
                .and_then(|(_, f)| f.take());
            let shared = shared.clone();
            std::thread::spawn(move || copy_output(reader, own, &shared))
        })
        .collect();
    // Input: the stdin FIFO feeds the command; "close" on the control FIFO ends its stdin. One
    // thread reads both, stdin first whenever it has bytes: data written before a `close`
    // reaches the command before its stdin ends (two threads let a close overtake the data).
    let on_stdin = {
        let stdin = stdin.clone();
        move |bytes: &[u8]| {
            if let Ok(mut guard) = stdin.lock()
                && let Some(w) = guard.as_mut()
            {
                let _ = w.write_all(bytes);
                let _ = w.flush();
            }
        }
    };
    let on_control = {
        let stdin = stdin.clone();
        move |bytes: &[u8]| {
            let text = String::from_utf8_lossy(bytes);
            // `resize ROWS COLS`: the terminal's new size (the kernel tells its programs with
            // SIGWINCH).
            for size in text
                .lines()
                .filter_map(|l| l.trim().strip_prefix("resize "))
            {
                let mut numbers = size.split_whitespace().map(str::parse::<u16>);
                if let (Some(Ok(rows)), Some(Ok(cols)), Some(pty)) =
                    (numbers.next(), numbers.next(), terminal.as_ref())
                {
                    let _ = pty.resize(pty_process::Size::new(rows, cols));
                }
            }
            if text.lines().any(|l| l.trim() == "close")
                && let Ok(mut guard) = stdin.lock()
            {
                if request_is_pty(&guard) {
                    // A terminal gets EOF as ^D.
                    if let Some(w) = guard.as_mut() {
                        let _ = w.write_all(b"\x04");
                    }
                } else {
                    guard.take();
                }
            }
        }
    };
    spawn_input_reader(stdin_fifo, control_fifo, on_stdin, on_control);

    let exit_code = waiter()?;
    // Output still buffered is read for a moment; leftovers of the command's group are ended.
    let until = Instant::now() + std::time::Duration::from_millis(300);
    while !copiers.iter().all(std::thread::JoinHandle::is_finished) && Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );
    crate::shell::commit_state(&spec.shell_state, &spec.id);
    let ended_at_ms = now_ms();
    let duration_ms = started.elapsed().as_millis() as u64;
    write_json_atomic(
        &dir.join("exit.json"),
        &ExitRecord {
            exit_code,
            ended_at_ms,
            duration_ms,
        },
    )?;
    let tail_text = shared
        .lock()
        .map(|o| {
            let t = &o.tail;
            String::from_utf8_lossy(&t[t.len().saturating_sub(RECEIPT_TAIL_BYTES)..]).into_owned()
        })
        .unwrap_or_default();
    let secrets =
        crate::redact::secret_values(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let receipt = Receipt {
        id: spec.id.clone(),
        session: request.session.clone(),
        command: crate::redact::redact(&request.command, &secrets),
        exit_code,
        started_at_ms,
        ended_at_ms,
        duration_ms,
        output_tail: crate::redact::redact(&tail_text, &secrets),
    };
    write_json_atomic(&dir.join("receipt.json"), &receipt)?;
    Ok(())
}

/// What a command's streams write to together: the log (both, in the order they came) and the
/// receipt's tail.
struct SharedOutput {
    log: Option<std::fs::File>,
    log_written: u64,
    tail: Vec<u8>,
}

const LIMIT_NOTE: &[u8] = b"\n[paddock: log limit reached; further output is dropped]\n";

/// Copies one stream until its end: to its own file (capped), the shared log (capped) and the
/// tail.
fn copy_output(
    mut reader: Box<dyn Read + Send>,
    mut own: Option<std::fs::File>,
    shared: &Mutex<SharedOutput>,
) {
    let mut own_written = 0u64;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        if let Some(file) = own.as_mut()
            && own_written < MAX_LOG_BYTES
        {
            let _ = file.write_all(chunk);
            own_written += n as u64;
            if own_written >= MAX_LOG_BYTES {
                let _ = file.write_all(LIMIT_NOTE);
            }
        }
        let Ok(mut out) = shared.lock() else {
            continue;
        };
        let out = &mut *out;
        if let Some(log) = out.log.as_mut()
            && out.log_written < MAX_LOG_BYTES
        {
            let _ = log.write_all(chunk);
            out.log_written += n as u64;
            if out.log_written >= MAX_LOG_BYTES {
                let _ = log.write_all(LIMIT_NOTE);
            }
        }
        out.tail.extend_from_slice(chunk);
        if out.tail.len() > RECEIPT_TAIL_BYTES * 2 {
            let cut = out.tail.len() - RECEIPT_TAIL_BYTES;
            out.tail.drain(..cut);
        }
    }
}

fn request_is_pty(_guard: &Option<Box<dyn Write + Send>>) -> bool {
    PTY_MODE.load(std::sync::atomic::Ordering::Relaxed)
}

static PTY_MODE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Opens a FIFO for reading; read+write, so that it never reports EOF when a writer goes away.
fn open_fifo(path: &std::path::Path) -> Option<std::fs::File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .ok()
}

/// Reads the stdin and control FIFOs on one thread, stdin first: `on_stdin` gets every byte
/// written before whatever `on_control` gets next.
fn spawn_input_reader(
    stdin: Option<std::fs::File>,
    control: Option<std::fs::File>,
    mut on_stdin: impl FnMut(&[u8]) + Send + 'static,
    mut on_control: impl FnMut(&[u8]) + Send + 'static,
) {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::os::fd::AsFd;
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let (stdin_ready, control_ready) = {
                let mut fds: Vec<PollFd<'_>> = [&stdin, &control]
                    .into_iter()
                    .flatten()
                    .map(|f| PollFd::new(f.as_fd(), PollFlags::POLLIN))
                    .collect();
                if fds.is_empty() {
                    return;
                }
                match poll(&mut fds, PollTimeout::NONE) {
                    Ok(_) => {}
                    Err(nix::errno::Errno::EINTR) => continue,
                    Err(_) => return,
                }
                let ready = |i: usize| {
                    fds.get(i)
                        .and_then(PollFd::revents)
                        .is_some_and(|r| !r.is_empty())
                };
                match (&stdin, &control) {
                    (Some(_), Some(_)) => (ready(0), ready(1)),
                    (Some(_), None) => (ready(0), false),
                    (None, Some(_)) => (false, ready(0)),
                    (None, None) => return,
                }
            };
            if stdin_ready && let Some(mut f) = stdin.as_ref() {
                match f.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => on_stdin(&buf[..n]),
                }
                // Stdin again before any control message: it may hold more.
                continue;
            }
            if control_ready && let Some(mut f) = control.as_ref() {
                match f.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => on_control(&buf[..n]),
                }
            }
        }
    });
}

fn exit_code_of(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

struct PtyReader(Arc<pty_process::blocking::Pty>);

impl Read for PtyReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        (&*self.0).read(buf)
    }
}

struct PtyWriter(Arc<pty_process::blocking::Pty>);

impl Write for PtyWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        (&*self.0).write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        (&*self.0).flush()
    }
}

#[cfg(test)]
mod tests {
    //! The supervisor runs in a child process: this test binary run again with only
    //! [`supervisor_entry_point`], which calls [`run_main`] (it calls `setsid`, prints on
    //! stdout and leaves threads behind, none of which a test process should suffer).

    use std::collections::BTreeMap;
    use std::io::BufRead;
    use std::path::PathBuf;
    use std::time::Duration;

    use pretty_assertions::assert_eq;

    use super::*;
    use crate::BackgroundRequest;
    use crate::launch::RemoteLaunch;
    use crate::processes::{ProcessRegistry, ProcessState};

    /// Set in the child: the directory to supervise.
    const SUPERVISE_DIR: &str = "PADDOCK_TEST_SUPERVISE_DIR";
    /// Printed by the child before the supervisor runs; what follows is the supervisor's.
    const STDOUT_MARK: &str = "--- supervisor stdout ---";
    const ID: &str = "p_test";

    #[test]
    #[ignore = "the supervisor's side of a re-run of this test binary (see `Supervised`)"]
    fn supervisor_entry_point() {
        let Some(dir) = std::env::var_os(SUPERVISE_DIR) else {
            return;
        };
        let mut out = std::io::stdout();
        writeln!(out, "{STDOUT_MARK}").unwrap();
        out.flush().unwrap();
        let code = run_main(Path::new(&dir));
        std::process::exit(if code == ExitCode::SUCCESS { 0 } else { 1 });
    }

    /// A process directory (`root/p_test`), the session's shell state and a home.
    struct Supervised {
        root: PathBuf,
        dir: PathBuf,
        shell_state: PathBuf,
        home: PathBuf,
        _temp: tempfile::TempDir,
    }

    /// What a supervisor run left.
    struct Ended {
        code: Option<i32>,
        supervisor_pid: i32,
        /// The supervisor's stdout lines.
        lines: Vec<String>,
    }

    impl Supervised {
        fn new() -> Self {
            let temp = tempfile::tempdir().unwrap();
            let root = temp.path().join("processes");
            let dir = root.join(ID);
            let shell_state = temp.path().join("shell");
            let home = temp.path().join("home");
            for d in [&dir, &shell_state, &home] {
                std::fs::create_dir_all(d).unwrap();
            }
            Self {
                root,
                dir,
                shell_state,
                home,
                _temp: temp,
            }
        }

        fn spec(&self, command: &str) -> ProcessSpec {
            ProcessSpec {
                id: ID.to_owned(),
                request: BackgroundRequest {
                    command: command.to_owned(),
                    session: "s1".into(),
                    workdir: None,
                    env: BTreeMap::new(),
                    pty: false,
                    notify_on_complete: true,
                },
                shell_state: self.shell_state.clone(),
                env: BTreeMap::from([("PATH".to_owned(), "/usr/bin:/bin".to_owned())]),
                remote: None,
                local_argv: None,
            }
        }

        fn write_spec(&self, spec: &ProcessSpec) {
            write_json_atomic(&self.dir.join("spec.json"), spec).unwrap();
        }

        fn fifos(&self) {
            for fifo in ["stdin", "control"] {
                nix::unistd::mkfifo(
                    &self.dir.join(fifo),
                    nix::sys::stat::Mode::from_bits_truncate(0o600),
                )
                .unwrap();
            }
        }

        fn spawn(&self) -> std::process::Child {
            std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "supervisor::tests::supervisor_entry_point",
                    "--exact",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(SUPERVISE_DIR, &self.dir)
                .env("HOME", &self.home)
                .env("LEAKED_FROM_THE_ENGINE", "yes")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        }

        /// Runs the supervisor to its end.
        fn run(&self) -> Ended {
            let child = self.spawn();
            let supervisor_pid = child.id() as i32;
            let out = child.wait_with_output().unwrap();
            let stdout = String::from_utf8(out.stdout).unwrap();
            let (_, after) = stdout
                .split_once(&format!("{STDOUT_MARK}\n"))
                .unwrap_or_else(|| panic!("the child never ran the supervisor: {stdout}"));
            Ended {
                code: out.status.code(),
                supervisor_pid,
                lines: after.lines().map(str::to_owned).collect(),
            }
        }

        fn read<T: for<'de> serde::Deserialize<'de>>(&self, name: &str) -> T {
            serde_json::from_slice(&std::fs::read(self.dir.join(name)).unwrap()).unwrap()
        }

        fn log(&self) -> String {
            std::fs::read_to_string(self.dir.join("log")).unwrap()
        }
    }

    #[test]
    fn the_supervisor_records_the_command_then_its_exit_and_receipt() {
        let s = Supervised::new();
        s.write_spec(&s.spec("echo hi; exit 3"));
        let ended = s.run();
        assert_eq!(ended.code, Some(0));
        let meta: ProcessRecord = s.read("meta.json");
        // The one line the engine reads is the record it keeps.
        assert_eq!(ended.lines, vec![serde_json::to_string(&meta).unwrap()]);
        assert_eq!(
            meta,
            ProcessRecord {
                id: ID.into(),
                session: "s1".into(),
                command: "echo hi; exit 3".into(),
                pid: meta.pid,
                start_time: meta.start_time,
                supervisor_pid: ended.supervisor_pid,
                supervisor_start_time: meta.supervisor_start_time,
                started_at_ms: meta.started_at_ms,
                pty: false,
                notify_on_complete: true,
            }
        );
        assert_ne!(meta.pid, ended.supervisor_pid);
        assert!(meta.start_time > 0 && meta.supervisor_start_time > 0);
        let exit: ExitRecord = s.read("exit.json");
        assert_eq!(exit.exit_code, 3);
        assert!(exit.ended_at_ms >= meta.started_at_ms);
        assert_eq!(
            s.read::<Receipt>("receipt.json"),
            Receipt {
                id: ID.into(),
                session: "s1".into(),
                command: "echo hi; exit 3".into(),
                exit_code: 3,
                started_at_ms: meta.started_at_ms,
                ended_at_ms: exit.ended_at_ms,
                duration_ms: exit.duration_ms,
                output_tail: "hi\n".into(),
            }
        );
        assert_eq!(s.log(), "hi\n");
    }

    #[test]
    fn the_command_gets_only_the_spec_env_and_starts_in_home() {
        let s = Supervised::new();
        let mut spec = s.spec(r#"echo "${ONLY-unset} ${LEAKED_FROM_THE_ENGINE-unset}"; pwd -P"#);
        spec.env.insert("ONLY".into(), "from-the-spec".into());
        s.write_spec(&spec);
        assert_eq!(s.run().code, Some(0));
        assert_eq!(
            s.log(),
            format!(
                "from-the-spec unset\n{}\n",
                s.home.canonicalize().unwrap().display()
            )
        );
    }

    #[test]
    fn the_receipt_redacts_secret_values_and_the_log_keeps_them() {
        let s = Supervised::new();
        let mut spec = s.spec(r#"echo s3cr3t-value; echo "$API_TOKEN""#);
        spec.env.insert("API_TOKEN".into(), "s3cr3t-value".into());
        s.write_spec(&spec);
        assert_eq!(s.run().code, Some(0));
        let receipt: Receipt = s.read("receipt.json");
        assert_eq!(
            (receipt.command.as_str(), receipt.output_tail.as_str()),
            (
                r#"echo [REDACTED]; echo "$API_TOKEN""#,
                "[REDACTED]\n[REDACTED]\n"
            )
        );
        assert_eq!(s.log(), "s3cr3t-value\ns3cr3t-value\n");
    }

    #[test]
    fn the_shell_state_the_command_leaves_is_committed_for_the_session() {
        let s = Supervised::new();
        s.write_spec(&s.spec("cd /; export KEPT=yes"));
        assert_eq!(s.run().code, Some(0));
        assert_eq!(
            std::fs::read_to_string(s.shell_state.join("cwd")).unwrap(),
            "/\n"
        );
        let env = std::fs::read_to_string(s.shell_state.join("env.sh")).unwrap();
        assert!(env.contains("declare -x KEPT=\"yes\""), "{env}");
        let mut names: Vec<String> = std::fs::read_dir(&s.shell_state)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, vec!["cwd", "env.sh"]);
    }

    #[test]
    fn a_remote_launch_runs_its_client_and_a_signal_death_is_128_plus_the_signal() {
        let s = Supervised::new();
        let mut spec = s.spec("the command travels in the client's argv");
        spec.remote = Some(RemoteLaunch {
            argv: ["/bin/sh", "-c", "echo client $0; kill -KILL $$", "arg0"]
                .map(str::to_owned)
                .to_vec(),
            kill_argv: Vec::new(),
            signal_argv: Vec::new(),
            local_pty: false,
            resizable: false,
        });
        s.write_spec(&spec);
        assert_eq!(s.run().code, Some(0));
        assert_eq!(s.log(), "client arg0\n");
        assert_eq!(s.read::<ExitRecord>("exit.json").exit_code, 128 + 9);
        // Nothing ran the local wrapper: no state was saved.
        assert_eq!(std::fs::read_dir(&s.shell_state).unwrap().count(), 0);
    }

    #[test]
    fn a_sandboxed_local_launch_runs_its_whole_argv() {
        let s = Supervised::new();
        let mut spec = s.spec("unused");
        spec.local_argv = Some(
            ["/bin/sh", "-c", "echo sandboxed; exit 5"]
                .map(str::to_owned)
                .to_vec(),
        );
        s.write_spec(&spec);
        assert_eq!(s.run().code, Some(0));
        assert_eq!(
            (s.log(), s.read::<ExitRecord>("exit.json").exit_code),
            ("sandboxed\n".to_owned(), 5)
        );
    }

    #[test]
    fn a_missing_spec_is_the_one_line_the_engine_reads_and_nothing_is_recorded() {
        let s = Supervised::new();
        let ended = s.run();
        assert_eq!(
            (ended.code, ended.lines),
            (
                Some(1),
                vec!["No such file or directory (os error 2)".to_owned()]
            )
        );
        assert_eq!(std::fs::read_dir(&s.dir).unwrap().count(), 0);
    }

    #[test]
    fn a_remote_launch_without_a_program_is_refused_before_anything_starts() {
        let s = Supervised::new();
        let mut spec = s.spec("true");
        spec.remote = Some(RemoteLaunch {
            argv: Vec::new(),
            kill_argv: Vec::new(),
            signal_argv: Vec::new(),
            local_pty: false,
            resizable: false,
        });
        s.write_spec(&spec);
        let ended = s.run();
        assert_eq!(
            (ended.code, ended.lines),
            (Some(1), vec!["the remote launch has no program".to_owned()])
        );
        assert!(!s.dir.join("meta.json").exists());
    }

    /// Retries `attempt` for up to 5 s (the supervisor opens its FIFOs just after it printed
    /// the record).
    fn eventually<T>(mut attempt: impl FnMut() -> crate::Result<T>) -> T {
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            match attempt() {
                Ok(value) => return value,
                Err(err) if Instant::now() > until => panic!("{err}"),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    #[test]
    fn input_through_the_registry_reaches_the_command_and_close_ends_it() {
        let s = Supervised::new();
        s.write_spec(&s.spec(r#"read line; echo "got $line"; cat; echo eof"#));
        s.fifos();
        let mut child = s.spawn();
        let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let record: ProcessRecord = loop {
            let mut line = String::new();
            assert!(stdout.read_line(&mut line).unwrap() > 0, "no record");
            if line.starts_with('{') {
                break serde_json::from_str(&line).unwrap();
            }
        };
        let registry = ProcessRegistry::new(s.root.clone());
        assert_eq!(registry.status_of(&record).state, ProcessState::Running);
        // The FIFOs are open before the record is printed: a write at once is taken.
        registry.write(&record, b"hello\n").unwrap();
        // Input and close travel through two FIFOs: wait until the input was read.
        eventually(|| match registry.log(&record, 0, 10)?.0.first() {
            Some(line) if line == "got hello" => Ok(()),
            _ => Err(crate::BackendError::InvalidCommand("not yet".into())),
        });
        eventually(|| registry.close_stdin(&record));
        assert_eq!(child.wait().unwrap().code(), Some(0));
        let status = registry.status_of(&record);
        assert_eq!(
            (status.state, status.exit_code),
            (ProcessState::Exited, Some(0))
        );
        assert_eq!(s.log(), "got hello\neof\n");
    }

    #[test]
    fn input_written_just_before_a_close_is_not_lost() {
        let s = Supervised::new();
        s.write_spec(&s.spec("cat; echo eof"));
        s.fifos();
        let mut child = s.spawn();
        let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let record: ProcessRecord = loop {
            let mut line = String::new();
            assert!(stdout.read_line(&mut line).unwrap() > 0, "no record");
            if line.starts_with('{') {
                break serde_json::from_str(&line).unwrap();
            }
        };
        let registry = ProcessRegistry::new(s.root.clone());
        // Back to back, as an SDK's send_stdin then close_stdin: the close waits its turn.
        eventually(|| registry.write(&record, b"abc\n"));
        registry.close_stdin(&record).unwrap();
        assert_eq!(child.wait().unwrap().code(), Some(0));
        assert_eq!(s.log(), "abc\neof\n");
    }

    #[test]
    fn a_pty_command_sees_a_terminal() {
        let s = Supervised::new();
        let mut spec = s.spec("[ -t 0 ] && [ -t 1 ] && echo tty");
        spec.request.pty = true;
        s.write_spec(&spec);
        assert_eq!(s.run().code, Some(0));
        let record: ProcessRecord = s.read("meta.json");
        assert!(record.pty);
        assert_eq!(s.read::<ExitRecord>("exit.json").exit_code, 0);
        let (lines, _) = ProcessRegistry::new(s.root.clone())
            .log(&record, 0, 10)
            .unwrap();
        assert_eq!(lines, vec!["tty".to_owned()]);
    }

    #[test]
    fn what_the_command_left_running_in_its_group_is_ended_with_it() {
        let s = Supervised::new();
        s.write_spec(&s.spec("sleep 30 & echo $!"));
        assert_eq!(s.run().code, Some(0));
        let pid: i32 = s.log().trim().parse().unwrap();
        let until = Instant::now() + Duration::from_secs(5);
        while crate::procfs::start_time(pid).is_some_and(|t| crate::procfs::is_same_process(pid, t))
        {
            assert!(
                Instant::now() < until,
                "sleep {pid} outlived its supervisor"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
