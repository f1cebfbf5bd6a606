//! The zygote (fork server) and the engine's handle on it.
//!
//! The zygote initialises the interpreter once, single-threaded, then forks one child per
//! request. Each child gets its own socketpair; the engine's end travels back over the control
//! socket (SEQPACKET, one message per datagram) with SCM_RIGHTS. The zygote reaps its children
//! and reports how each one ended, so the engine can tell a killed child from a crashed one.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::process::{Command, Stdio};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};

use crate::SandboxError;
use crate::confine::{self, Forked};
use crate::exit::EXIT_CONFINEMENT_FAILED;
use crate::interpreter::{self, SandboxInterpreter};
use crate::wire::Message;

/// The hidden subcommand the engine re-executes itself with to become a zygote.
pub const ZYGOTE_SUBCOMMAND: &str = "__sandbox-zygote";

const MAX_CONTROL_MESSAGE: usize = 64 * 1024;
/// The zygote does its [`IdleWork`] once it has had nothing to do for this long, or all of it
/// after this many forks: the first forks, which a waiting script needs, go first.
const IDLE_BEFORE_WORK_MS: u8 = 5;
const FORKS_BEFORE_WORK: usize = 8;

/// What makes later children cheaper but no script needs: importing the standard modules
/// scripts commonly use, warming the interpreter's caches up, collapsing its heap into huge
/// pages, moving its hot code into huge pages. Before, the zygote did the first three before
/// it said it was ready, and a cold `paddock run` of one
/// trivial script waited for them (about a third of its time on a loaded machine). Now they
/// are done one step per idle moment (one module import, the warm-up, the collapse, the move),
/// in this order (the imports and the warm-up grow the heap that the collapse then takes in),
/// or all at once after [`FORKS_BEFORE_WORK`] forks.
struct IdleWork {
    /// Standard modules left to import, one per step (`_preload_next`).
    preloading: bool,
    warmed: bool,
    /// The zygote's memory map, opened before it isolated itself (no /proc afterwards); `None`
    /// once collapsed, or when it could not be opened.
    memory_map: Option<std::fs::File>,
    /// Which code to move, read from /proc before the zygote isolated itself.
    hot_code: Vec<usize>,
}

impl IdleWork {
    fn pending(&self) -> bool {
        self.preloading || !self.warmed || self.memory_map.is_some() || !self.hot_code.is_empty()
    }

    /// Does the next step; false when there was none.
    fn step(&mut self, sandbox: &SandboxInterpreter) -> bool {
        let started = std::time::Instant::now();
        if self.preloading {
            match interpreter::idle_step(sandbox, "_preload_next") {
                Ok(more) => self.preloading = more,
                Err(err) => {
                    tracing::warn!(%err, "zygote preload failed");
                    self.preloading = false;
                }
            }
            if !self.preloading {
                tracing::debug!("zygote preloaded the common modules");
            }
        } else if !self.warmed {
            self.warmed = true;
            match interpreter::idle_step(sandbox, "_warm_up") {
                Ok(_) => tracing::debug!(ms = ms_since(started), "zygote warmed up"),
                Err(err) => tracing::warn!(%err, "zygote warm-up failed"),
            }
        } else if let Some(mut maps) = self.memory_map.take() {
            let collapsed = confine::collapse_into_huge_pages(&mut maps);
            tracing::debug!(
                mib = collapsed >> 20,
                ms = ms_since(started),
                "zygote heap collapsed into huge pages"
            );
        } else if !self.hot_code.is_empty() {
            let moved = confine::move_code_chunks(&self.hot_code);
            self.hot_code.clear();
            tracing::debug!(
                mib = moved >> 20,
                ms = ms_since(started),
                "zygote code moved into huge pages"
            );
        } else {
            return false;
        }
        true
    }

    fn finish(&mut self, sandbox: &SandboxInterpreter) {
        while self.step(sandbox) {}
    }
}

fn ms_since(started: std::time::Instant) -> f64 {
    started.elapsed().as_secs_f64() * 1000.0
}

fn send(control: &OwnedFd, message: &Message, fd: Option<&OwnedFd>) -> io::Result<()> {
    let bytes = serde_json::to_vec(message).map_err(io::Error::other)?;
    confine::send_with_fd(control, &bytes, fd)
}

/// Tells the engine why this zygote cannot confine its children (best effort: the error is
/// returned either way) and gives the error to return.
fn confinement_failed(control: &OwnedFd, reason: String) -> SandboxError {
    let _ = send(
        control,
        &Message::ConfinementFailed {
            reason: reason.clone(),
        },
        None,
    );
    SandboxError::RuntimeInit(reason)
}

/// Entry point of the zygote process (`paddock __sandbox-zygote`).
pub fn run_main() -> Result<(), SandboxError> {
    let control = confine::take_inherited_fd().map_err(SandboxError::Control)?;
    if !confine::counting_allocator_installed() {
        let reason = "this binary does not allocate through paddock's counting allocator \
                      (`#[global_allocator] static A: paddock_sandbox_worker::confine::\
                      CountingAllocator = CountingAllocator;`), so no script's memory limit \
                      could hold"
            .to_owned();
        return Err(confinement_failed(&control, reason));
    }
    let sandbox = interpreter::build()?;
    let mut idle_work = IdleWork {
        preloading: true,
        warmed: false,
        memory_map: confine::open_memory_map(),
        hot_code: confine::hot_code_chunks(),
    };
    // Fail closed: a zygote that cannot confine itself says why and forks nothing.
    if let Err(err) = confine::prepare_in_zygote().and_then(|()| confine::isolate_zygote()) {
        return Err(confinement_failed(&control, err.to_string()));
    }
    send(
        &control,
        &Message::ZygoteReady {
            init_ms: sandbox.init_ms,
        },
        None,
    )
    .map_err(SandboxError::Control)?;

    let mut sigchld = SigSet::empty();
    sigchld.add(Signal::SIGCHLD);
    sigchld
        .thread_block()
        .map_err(|e| SandboxError::Control(e.into()))?;
    let signals = SignalFd::with_flags(&sigchld, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
        .map_err(|e| SandboxError::Control(e.into()))?;

    let mut buf = vec![0u8; MAX_CONTROL_MESSAGE];
    let mut forks = 0usize;
    loop {
        let (control_ready, children_exited) = {
            let mut fds = [
                PollFd::new(control.as_fd(), PollFlags::POLLIN),
                PollFd::new(signals.as_fd(), PollFlags::POLLIN),
            ];
            let wait = if idle_work.pending() {
                PollTimeout::from(IDLE_BEFORE_WORK_MS)
            } else {
                PollTimeout::NONE
            };
            match poll(&mut fds, wait) {
                Ok(0) => {
                    idle_work.step(&sandbox);
                    continue;
                }
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(SandboxError::Control(e.into())),
            }
            (fds[0].any().unwrap_or(true), fds[1].any().unwrap_or(false))
        };
        if children_exited {
            while let Ok(Some(_)) = signals.read_signal() {}
            reap_children(&control)?;
        }
        if control_ready {
            let (n, _) =
                confine::recv_with_fds(&control, &mut buf).map_err(SandboxError::Control)?;
            if n == 0 {
                // The engine is gone; children die with us (PR_SET_PDEATHSIG).
                return Ok(());
            }
            match serde_json::from_slice::<Message>(&buf[..n]) {
                Ok(Message::Fork) => {
                    fork_child(&control, &sigchld, &sandbox)?;
                    forks += 1;
                    if forks >= FORKS_BEFORE_WORK {
                        idle_work.finish(&sandbox);
                    }
                }
                Ok(other) => tracing::warn!(?other, "zygote ignored an unexpected message"),
                Err(err) => tracing::warn!(%err, "zygote ignored a malformed message"),
            }
        }
    }
}

fn reap_children(control: &OwnedFd) -> Result<(), SandboxError> {
    loop {
        let (pid, code, signal) = match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, code)) => (pid.as_raw(), Some(code), None),
            Ok(WaitStatus::Signaled(pid, sig, _)) => (pid.as_raw(), None, Some(sig as i32)),
            Ok(WaitStatus::StillAlive) | Err(nix::errno::Errno::ECHILD) => return Ok(()),
            Ok(_) => continue,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(SandboxError::Control(e.into())),
        };
        send(control, &Message::Exited { pid, code, signal }, None)
            .map_err(SandboxError::Control)?;
    }
}

fn fork_child(
    control: &OwnedFd,
    sigchld: &SigSet,
    sandbox: &SandboxInterpreter,
) -> Result<(), SandboxError> {
    let (engine_end, child_end) = match socketpair(
        AddressFamily::Unix,
        SockType::Stream,
        None,
        SockFlag::SOCK_CLOEXEC,
    ) {
        Ok(pair) => pair,
        Err(e) => {
            let reason = format!("socketpair failed: {e}");
            return send(control, &Message::ForkFailed { reason }, None)
                .map_err(SandboxError::Control);
        }
    };
    let zygote_pid = nix::unistd::getpid().as_raw();
    match confine::fork() {
        Ok(Forked::Child) => {
            drop(engine_end);
            let _ = sigchld.thread_unblock();
            let socket = match confine::keep_only_inherited_fd(child_end) {
                Ok(fd) => fd,
                Err(_) => confine::exit_immediately(EXIT_CONFINEMENT_FAILED),
            };
            crate::child::child_main(socket, zygote_pid, sandbox)
        }
        Ok(Forked::Parent { pid }) => {
            drop(child_end);
            send(control, &Message::Forked { pid }, Some(&engine_end))
                .map_err(SandboxError::Control)
        }
        Err(e) => send(
            control,
            &Message::ForkFailed {
                reason: format!("fork failed: {e}"),
            },
            None,
        )
        .map_err(SandboxError::Control),
    }
}

/// What the zygote tells the engine.
#[derive(Debug)]
pub enum ZygoteEvent {
    /// A new child and the engine's end of its socket.
    Forked {
        pid: i32,
        socket: OwnedFd,
    },
    ForkFailed {
        reason: String,
    },
    Exited {
        pid: i32,
        code: Option<i32>,
        signal: Option<i32>,
    },
}

/// The engine's side of a running zygote.
pub struct ZygoteProcess {
    process: std::process::Child,
    control: OwnedFd,
    pub init_ms: f64,
}

impl ZygoteProcess {
    /// Starts `exe __sandbox-zygote` and waits until its interpreter is ready.
    /// `degraded`: kernel features the policy lets the sandbox run without.
    pub fn spawn(exe: &Path, degraded: &[String]) -> Result<Self, SandboxError> {
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .map_err(|e| SandboxError::Control(e.into()))?;
        let mut command = Command::new(exe);
        command
            .arg(ZYGOTE_SUBCOMMAND)
            .env_clear()
            .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_default())
            .env("PADDOCK_SANDBOX_ALLOW_DEGRADED", degraded.join(","))
            .env(
                "PADDOCK_PROFILING",
                std::env::var("PADDOCK_PROFILING").unwrap_or_default(),
            )
            .env(
                "PADDOCK_SANDBOX_SIMULATE_MISSING",
                std::env::var("PADDOCK_SANDBOX_SIMULATE_MISSING").unwrap_or_default(),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        let process =
            confine::spawn_with_fd(&mut command, &theirs).map_err(|e| SandboxError::Spawn {
                exe: exe.display().to_string(),
                source: e,
            })?;
        drop(theirs);
        let mut zygote = Self {
            process,
            control: ours,
            init_ms: 0.0,
        };
        match zygote.recv_raw()? {
            Some(Message::ZygoteReady { init_ms }) => {
                zygote.init_ms = init_ms;
                Ok(zygote)
            }
            Some(Message::ConfinementFailed { reason }) => {
                let _ = zygote.process.wait();
                Err(SandboxError::RuntimeInit(format!(
                    "the sandbox could not be confined, so no script runs: {reason}"
                )))
            }
            Some(other) => Err(SandboxError::Protocol(format!(
                "zygote sent {other:?} first"
            ))),
            None => {
                let status = zygote.process.wait().ok();
                Err(SandboxError::ZygoteDied(format!(
                    "the zygote exited during start-up ({})",
                    status.map_or("unknown status".into(), |s| s.to_string())
                )))
            }
        }
    }

    /// A second handle on the control socket, for a reader thread.
    pub fn reader(&self) -> Result<ZygoteReader, SandboxError> {
        Ok(ZygoteReader {
            control: self.control.try_clone().map_err(SandboxError::Control)?,
        })
    }

    /// Asks for one more child; the answer arrives as a [`ZygoteEvent`] on the reader.
    pub fn request_fork(&self) -> Result<(), SandboxError> {
        send(&self.control, &Message::Fork, None).map_err(SandboxError::Control)
    }

    pub fn pid(&self) -> u32 {
        self.process.id()
    }

    fn recv_raw(&self) -> Result<Option<Message>, SandboxError> {
        let mut buf = vec![0u8; MAX_CONTROL_MESSAGE];
        let (n, _) =
            confine::recv_with_fds(&self.control, &mut buf).map_err(SandboxError::Control)?;
        if n == 0 {
            return Ok(None);
        }
        serde_json::from_slice(&buf[..n])
            .map(Some)
            .map_err(|e| SandboxError::Protocol(e.to_string()))
    }
}

impl Drop for ZygoteProcess {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// Reads [`ZygoteEvent`]s (blocking); meant for a dedicated thread.
pub struct ZygoteReader {
    control: OwnedFd,
}

impl ZygoteReader {
    /// The next event, or `None` once the zygote is gone.
    pub fn next_event(&self) -> Result<Option<ZygoteEvent>, SandboxError> {
        let mut buf = vec![0u8; MAX_CONTROL_MESSAGE];
        loop {
            let (n, mut fds) =
                confine::recv_with_fds(&self.control, &mut buf).map_err(SandboxError::Control)?;
            if n == 0 {
                return Ok(None);
            }
            let message: Message = serde_json::from_slice(&buf[..n])
                .map_err(|e| SandboxError::Protocol(e.to_string()))?;
            return Ok(Some(match message {
                Message::Forked { pid } => match fds.pop() {
                    Some(socket) => ZygoteEvent::Forked { pid, socket },
                    None => {
                        return Err(SandboxError::Protocol("fork reply without a socket".into()));
                    }
                },
                Message::ForkFailed { reason } => ZygoteEvent::ForkFailed { reason },
                Message::Exited { pid, code, signal } => ZygoteEvent::Exited { pid, code, signal },
                other => {
                    tracing::warn!(?other, "unexpected message from the zygote");
                    continue;
                }
            }));
        }
    }
}
