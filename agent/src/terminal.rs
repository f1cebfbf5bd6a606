//! `paddock-agent terminal -- PROGRAM ARGS...`: runs one program on a terminal allocated where
//! the agent runs, and relays it to the agent's own stdin and stdout.
//!
//! Why: a client that allocates the terminal on the host (`apptainer exec` under the
//! supervisor's PTY, `srun --pty` on a node) hands the program a terminal of the host's devpts.
//! An Apptainer instance started with `--containall` has a devpts of its own at `/dev/pts`, so
//! that terminal has no name there: `tty` says "not a tty" and every program that looks its
//! terminal up fails. A terminal opened from inside (the instance's `/dev/ptmx`) is a
//! `/dev/pts/N` of the instance, like the one the agent's own PTY runs get.
//!
//! When the agent's stdin is itself a terminal (`srun --pty`), that outer one is put in raw mode
//! for the run, so that only the inner terminal edits lines, echoes and turns ^C into SIGINT,
//! and the inner one starts with its size.

use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::sync::mpsc;

use rustix::termios::{OptionalActions, Termios};

use crate::AgentError;
use crate::run::{DRAIN_AFTER_EXIT, PTY_COLS, PTY_ROWS};

/// Runs `argv` on a new terminal, relays it, and answers the program's exit status (128 +
/// signal when a signal ended it).
pub fn run_on_terminal(argv: &[String]) -> Result<i32, AgentError> {
    let Some((program, args)) = argv.split_first() else {
        return Err(AgentError::Usage(
            "terminal needs a program: paddock-agent terminal -- PROGRAM ARGS...".into(),
        ));
    };
    let stdin = std::io::stdin();
    let outer = rustix::termios::isatty(&stdin);
    let size = if outer {
        rustix::termios::tcgetwinsize(&stdin)
            .ok()
            .filter(|s| s.ws_row > 0 && s.ws_col > 0)
            .map_or((PTY_ROWS, PTY_COLS), |s| (s.ws_row, s.ws_col))
    } else {
        (PTY_ROWS, PTY_COLS)
    };
    let (pty, pts) = pty_process::blocking::open().map_err(std::io::Error::other)?;
    pty.resize(pty_process::Size::new(size.0, size.1))
        .map_err(std::io::Error::other)?;
    // Restores the outer terminal when the run ends, however it ends.
    let _raw = if outer { Some(RawMode::enter()?) } else { None };
    let pty = std::sync::Arc::new(pty);

    // Input: everything that arrives is typed on the terminal (^D included: the supervisor's
    // "close"); the end of our stdin leaves the terminal open, as a closed keyboard would.
    let input = pty.clone();
    std::thread::Builder::new().spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buf = [0u8; 16 * 1024];
        loop {
            match stdin.read(&mut buf) {
                Ok(0) => return,
                Ok(n) => {
                    if (&*input).write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return,
            }
        }
    })?;

    // Output: until every holder of the terminal is gone (the master answers EIO then).
    let (drained_tx, drained_rx) = mpsc::channel::<()>();
    let output = pty.clone();
    std::thread::Builder::new().spawn(move || {
        let mut stdout = std::io::stdout().lock();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match (&*output).read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    if stdout
                        .write_all(&buf[..n])
                        .and_then(|()| stdout.flush())
                        .is_err()
                    {
                        break;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        let _ = drained_tx.send(());
    })?;

    // The threads are there before the program: a program that fills a process ceiling at
    // once (threads count) cannot leave its terminal unrelayed. The program becomes a session
    // leader with the new terminal as its controlling terminal.
    let mut child = pty_process::blocking::Command::new(program)
        .args(args)
        .env("TERM", "xterm-256color")
        .spawn(pts)
        .map_err(|e| {
            AgentError::Io(std::io::Error::other(format!(
                "cannot start {program}: {e}"
            )))
        })?;
    let status = child.wait()?;
    // A background grandchild holding the terminal is not waited for longer.
    let _ = drained_rx.recv_timeout(DRAIN_AFTER_EXIT);
    Ok(status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}

/// The outer terminal in raw mode; its settings come back when this is dropped.
struct RawMode {
    saved: Termios,
}

impl RawMode {
    fn enter() -> Result<Self, AgentError> {
        let stdin = std::io::stdin();
        let saved = rustix::termios::tcgetattr(&stdin).map_err(std::io::Error::from)?;
        let mut raw = saved.clone();
        raw.make_raw();
        rustix::termios::tcsetattr(&stdin, OptionalActions::Now, &raw)
            .map_err(std::io::Error::from)?;
        Ok(Self { saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = rustix::termios::tcsetattr(std::io::stdin(), OptionalActions::Now, &self.saved);
    }
}
