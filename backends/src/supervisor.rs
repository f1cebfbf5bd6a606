//! The supervisor of one background command: `paddock __supervise DIR`.
//!
//! It detaches from the engine (its own session), starts the command (in a PTY or with pipes),
//! records it, copies its output to `DIR/log`, feeds it what arrives on the `stdin` FIFO, and
//! when it ends writes `exit.json` and a redacted `receipt.json`. It needs nothing from the
//! engine after the start, so the command survives the engine restarting.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::processes::{
    ExitRecord, ProcessRecord, ProcessSpec, Receipt, now_ms, write_json_atomic,
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

/// A started command: pid, its output, its stdin, and how to wait for its exit code.
type Started = (
    i32,
    Box<dyn Read + Send>,
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
    let (pid, output, stdin, mut waiter): Started = if local_pty {
        let (pty, pts) = pty_process::blocking::open().map_err(std::io::Error::other)?;
        pty.resize(pty_process::Size::new(40, 120))
            .map_err(std::io::Error::other)?;
        let mut child = pty_process::blocking::Command::from(shell)
            .env("TERM", "xterm-256color")
            .spawn(pts)
            .map_err(std::io::Error::other)?;
        let pid = child.id() as i32;
        let pty = Arc::new(pty);
        let reader = PtyReader(pty.clone());
        let writer: Box<dyn Write + Send> = Box::new(PtyWriter(pty));
        (
            pid,
            Box::new(reader),
            Arc::new(Mutex::new(Some(writer))),
            Box::new(move || child.wait().map(exit_code_of)),
        )
    } else {
        let (reader, writer) = std::io::pipe()?;
        let mut child = shell
            .stdin(Stdio::piped())
            .stdout(Stdio::from(writer.try_clone()?))
            .stderr(Stdio::from(writer))
            .process_group(0)
            .spawn()?;
        let pid = child.id() as i32;
        let stdin: Option<Box<dyn Write + Send>> = child
            .stdin
            .take()
            .map(|s| Box::new(s) as Box<dyn Write + Send>);
        (
            pid,
            Box::new(reader),
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

    // Output: to the log (capped) and to the receipt's tail.
    let tail = Arc::new(Mutex::new(Vec::<u8>::new()));
    let log_path = dir.join("log");
    let copier = {
        let tail = tail.clone();
        let mut output = output;
        std::thread::spawn(move || {
            let Ok(mut log) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log_path)
            else {
                return;
            };
            let mut written = 0u64;
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = match output.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                if written < MAX_LOG_BYTES {
                    let _ = log.write_all(&buf[..n]);
                    written += n as u64;
                    if written >= MAX_LOG_BYTES {
                        let _ = log.write_all(
                            b"\n[paddock: log limit reached; further output is dropped]\n",
                        );
                    }
                }
                if let Ok(mut t) = tail.lock() {
                    t.extend_from_slice(&buf[..n]);
                    if t.len() > RECEIPT_TAIL_BYTES * 2 {
                        let cut = t.len() - RECEIPT_TAIL_BYTES;
                        t.drain(..cut);
                    }
                }
            }
        })
    };
    // Input: the stdin FIFO feeds the command; "close" on the control FIFO ends its stdin.
    spawn_fifo_reader(dir.join("stdin"), {
        let stdin = stdin.clone();
        move |bytes: &[u8]| {
            if let Ok(mut guard) = stdin.lock()
                && let Some(w) = guard.as_mut()
            {
                let _ = w.write_all(bytes);
                let _ = w.flush();
            }
        }
    });
    spawn_fifo_reader(dir.join("control"), {
        let stdin = stdin.clone();
        move |bytes: &[u8]| {
            if String::from_utf8_lossy(bytes)
                .lines()
                .any(|l| l.trim() == "close")
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
    });

    let exit_code = waiter()?;
    // Output still buffered is read for a moment; leftovers of the command's group are ended.
    let until = Instant::now() + std::time::Duration::from_millis(300);
    while !copier.is_finished() && Instant::now() < until {
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
    let tail_text = tail
        .lock()
        .map(|t| {
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

fn request_is_pty(_guard: &Option<Box<dyn Write + Send>>) -> bool {
    PTY_MODE.load(std::sync::atomic::Ordering::Relaxed)
}

static PTY_MODE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn spawn_fifo_reader(path: std::path::PathBuf, mut on_data: impl FnMut(&[u8]) + Send + 'static) {
    std::thread::spawn(move || {
        // Read+write open: the FIFO never reports EOF when a writer goes away.
        let Ok(mut fifo) = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
        else {
            return;
        };
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match fifo.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => on_data(&buf[..n]),
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
