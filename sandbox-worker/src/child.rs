//! One forked child: confine, wait for the script, run it, report, exit (or, for a notebook
//! session, wait for the session's next script).
//!
//! The layer between the zygote and the interpreter: `zygote` enters it through [`child_main`]
//! only; it drives `interpreter`, lends its channel to `host` while a script runs, and enforces
//! the script's heap budget.

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use rustpython_vm::signal::UserSignalSender;

use crate::channel::ChildChannel;
use crate::confine;
use crate::exit::{EXIT_CHANNEL_LOST, EXIT_CONFINEMENT_FAILED, EXIT_PANIC};
use crate::interpreter::SandboxInterpreter;
use crate::wire::{Message, ScriptFailure, ScriptOutcome};

/// Extra room above the soft limit before allocations fail outright.
const HARD_CEILING_HEADROOM: usize = 64 * 1024 * 1024;
/// How long a ready child waits for a script before it rehearses one.
const REHEARSAL_GRACE: Duration = Duration::from_millis(1);
/// How often the watchdog looks at the heap while a script runs.
const WATCHDOG_PERIOD: Duration = Duration::from_millis(1);
/// A script that catches `MemoryError` and keeps allocating gets another one after this long.
const MEMORY_ERROR_REPEAT: Duration = Duration::from_millis(20);

static ARMED: AtomicBool = AtomicBool::new(false);
static SOFT_LIMIT: AtomicUsize = AtomicUsize::new(usize::MAX);
static BUDGET_MB: AtomicUsize = AtomicUsize::new(0);
static WATCHDOG: OnceLock<Thread> = OnceLock::new();

/// Runs the child. Never returns: the child ends with `_exit`.
pub fn child_main(socket: OwnedFd, zygote_pid: i32, sandbox: &SandboxInterpreter) -> ! {
    let mut channel = ChildChannel::new(UnixStream::from(socket));
    let signals = sandbox.signals.clone();
    match confine::confine_child(zygote_pid, move || start_watchdog(signals)) {
        Ok(report) => {
            if channel
                .send(&Message::ChildReady {
                    confinement: report,
                })
                .is_err()
            {
                confine::exit_immediately(EXIT_CHANNEL_LOST);
            }
        }
        Err(err) => {
            let _ = channel.send(&Message::ConfinementFailed {
                reason: err.to_string(),
            });
            confine::exit_immediately(EXIT_CONFINEMENT_FAILED);
        }
    }

    // A notebook child (the first request asks for kept state) runs every script of its
    // session, one after another, in one namespace; any other child runs one script and exits.
    let mut session_baseline: Option<usize> = None;
    let mut session_budget: u64 = 0;
    let mut rehearsed = false;
    loop {
        let request = loop {
            // A child nobody needs at once rehearses (see `interpreter::rehearse`): the pages a
            // script writes are copied while it idles, not while a script waits. A child that
            // gets its script at once (the pool is busy) skips it: under load that CPU is
            // worth more to the next script.
            let wait = (!rehearsed).then_some(REHEARSAL_GRACE);
            match channel.recv(wait) {
                Ok(Some(Message::Run(request))) => break request,
                Ok(Some(Message::DumpState)) => {
                    // Pickling runs the names' own `__reduce__`: under the session's heap
                    // budget, as its scripts are.
                    if let Some(baseline) = session_baseline {
                        arm_heap_limit(session_budget, baseline);
                    }
                    let dumped = guarded(|| crate::interpreter::dump_state(&sandbox.interpreter));
                    ARMED.store(false, Ordering::SeqCst);
                    confine::set_hard_ceiling(0);
                    send_or_exit(&mut channel, Message::StateDumped(dumped));
                }
                Ok(Some(Message::LoadState(state))) => {
                    // Loaded names count against the session's budget, as names its own
                    // scripts defined would.
                    session_baseline.get_or_insert_with(confine::live_bytes);
                    let loaded =
                        guarded(|| crate::interpreter::load_state(&sandbox.interpreter, &state));
                    rehearsed = true;
                    send_or_exit(&mut channel, Message::StateLoaded(loaded));
                }
                Ok(Some(_)) => continue,
                Ok(None) if !rehearsed => {
                    crate::interpreter::rehearse(&sandbox.interpreter);
                    rehearsed = true;
                }
                Ok(None) | Err(_) => confine::exit_immediately(EXIT_CHANNEL_LOST),
            }
        };
        rehearsed = true;
        let keep_state = request.keep_state;
        // The session's budget counts from before its first script: names kept by earlier
        // scripts use it up, as they would in one long script.
        let baseline = *session_baseline.get_or_insert_with(confine::live_bytes);
        session_budget = request.max_memory_bytes;
        arm_heap_limit(request.max_memory_bytes, baseline);
        crate::host::install_channel(channel);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            crate::interpreter::run_script(&sandbox.interpreter, &request)
        }))
        .unwrap_or_else(|_| {
            ScriptOutcome::Err(ScriptFailure {
                exception: "SandboxPanic".into(),
                message: "the sandbox runtime panicked".into(),
                line: None,
                traceback: String::new(),
                error_code: Some("codemode:sandbox_failed".into()),
                unknown_tool: None,
            })
        });
        ARMED.store(false, Ordering::SeqCst);
        confine::set_hard_ceiling(0);
        // The watchdog samples; a notebook script that ends holding more than the session's
        // budget would hand the next script a heap already over it. It ends the state now.
        let outcome = if keep_state && confine::live_bytes() > SOFT_LIMIT.load(Ordering::SeqCst) {
            ScriptOutcome::Err(ScriptFailure {
                exception: "MemoryError".into(),
                message: format!(
                    "the session's names hold more than its heap limit of {} MB",
                    BUDGET_MB.load(Ordering::SeqCst)
                ),
                line: None,
                traceback: String::new(),
                error_code: Some("codemode:memory_limit".into()),
                unknown_tool: None,
            })
        } else {
            outcome
        };
        let Some(returned) = crate::host::take_channel() else {
            confine::exit_immediately(EXIT_PANIC);
        };
        channel = returned;
        if channel.send(&Message::Finished(outcome)).is_err() {
            confine::exit_immediately(EXIT_CHANNEL_LOST);
        }
        if !keep_state {
            confine::exit_immediately(0);
        }
    }
}

/// Runs a state dump or load; a panic of the runtime is an error, not the child's end.
fn guarded<T>(work: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(work))
        .unwrap_or_else(|_| Err("the sandbox runtime panicked".into()))
}

/// Sends an answer between scripts; one too large for a frame is sent as that error instead
/// (the state stays). A lost channel ends the child.
fn send_or_exit(channel: &mut ChildChannel, message: Message) {
    let message = match message.to_frame() {
        Ok(_) => message,
        Err(err) => {
            let reason = format!("the notebook's names do not fit in one message: {err}");
            match message {
                Message::StateDumped(_) => Message::StateDumped(Err(reason)),
                _ => Message::StateLoaded(Err(reason)),
            }
        }
    };
    if channel.send(&message).is_err() {
        confine::exit_immediately(EXIT_CHANNEL_LOST);
    }
}

fn arm_heap_limit(budget_bytes: u64, baseline: usize) {
    let budget = usize::try_from(budget_bytes).unwrap_or(usize::MAX);
    let soft = baseline.saturating_add(budget);
    SOFT_LIMIT.store(soft, Ordering::SeqCst);
    BUDGET_MB.store(budget / (1024 * 1024), Ordering::SeqCst);
    confine::set_hard_ceiling(soft.saturating_add(budget.max(HARD_CEILING_HEADROOM)));
    ARMED.store(true, Ordering::SeqCst);
    if let Some(t) = WATCHDOG.get() {
        t.unpark();
    }
}

/// Starts the heap watchdog: while a script runs it compares the live heap with the budget and
/// raises `MemoryError` inside the script through the VM's signal channel.
fn start_watchdog(signals: UserSignalSender) -> std::io::Result<()> {
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let handle = thread::Builder::new()
        .name("heap-watchdog".into())
        .stack_size(64 * 1024)
        .spawn(move || {
            let _ = started_tx.send(());
            watchdog_loop(&signals)
        })?;
    let _ = WATCHDOG.set(handle.thread().clone());
    // Wait until the thread runs: its start-up syscalls must happen before seccomp.
    started_rx
        .recv_timeout(Duration::from_secs(5))
        .map_err(|_| std::io::Error::other("heap watchdog thread did not start"))
}

fn watchdog_loop(signals: &UserSignalSender) {
    let mut last_sent: Option<Instant> = None;
    loop {
        if !ARMED.load(Ordering::SeqCst) {
            thread::park();
            continue;
        }
        thread::sleep(WATCHDOG_PERIOD);
        if confine::live_bytes() <= SOFT_LIMIT.load(Ordering::Relaxed) {
            continue;
        }
        if last_sent.is_some_and(|t| t.elapsed() < MEMORY_ERROR_REPEAT) {
            continue;
        }
        last_sent = Some(Instant::now());
        let budget = BUDGET_MB.load(Ordering::Relaxed);
        let _ = signals.send(Box::new(move |vm| {
            Err(vm.new_memory_error(format!("script heap limit of {budget} MB exceeded")))
        }));
    }
}
