//! The session's CPython contexts (`Request::Context`): long-lived interpreters whose globals
//! persist between executions, like Jupyter kernels with no dependency.
//!
//! A context is one `python3` process running `context_driver.py`. The driver's source is built
//! into the agent and sent on the interpreter's stdin at start (`python3 -u -c BOOT`, where
//! BOOT reads it): no file is written, so a context starts wherever the agent runs (even where
//! it may write nothing), always with the driver of the agent's own build, and `ps` shows a
//! short command line. The driver takes JSON requests on a private copy of its stdin and
//! answers JSON lines on a private copy of its stdout; user code's fd 1 and fd 2 are pipes it
//! forwards as stdout and stderr events while an execution runs (the driver's header says
//! more). One execution at a time per context; executions of different contexts run in
//! parallel.
//!
//! Lifetimes: a driver leads its own process group and carries [`TAG_VARIABLE`] in its
//! environment. Removing a context, restarting it, [`ContextHost::close_all`] and the host's
//! drop kill the group and every process still carrying the tag; a driver whose parent (the
//! agent) is gone ends its group itself.
//!
//! A context whose interpreter died (killed from outside, `os._exit` in user code) answers the
//! execute that finds it dead, or that it died in, with `context:died`; the execute after that
//! starts a new interpreter for it (answered with `restarted: true`), as
//! [`ContextRequest::Restart`] does at once.
//!
//! Answers ([`ContextHost::handle`]):
//! - Execute: `{"context", "execution_count", "results": [bundle...], "stdout", "stderr",
//!   "exception": null | {"name", "value", "traceback"}, "timed_out", "interrupted",
//!   "restarted", "created", "duration_ms", "stdout_cut_bytes", "stderr_cut_bytes",
//!   "notes": [text...]}`. A bundle is `{"text/plain": repr, "text/html"..., "image/png":
//!   base64..., "metadata"?: {...}, "is_main_result": bool}`: the value of the code's last
//!   expression (`is_main_result`), what `display()` showed and the open matplotlib figures.
//!   Each stream keeps [`STREAM_KEEP_BYTES`] (its start and its end, a line saying what was cut
//!   between them); `restarted` says a new interpreter was started during the execute, the
//!   notes say why;
//! - Create: `{"context", "pid", "cwd", "python"}`; Restart: the same and `"restarted": true`;
//! - List: `{"contexts": [{"id", "pid", "cwd", "execution_count", "alive", "python"}]}`;
//! - Remove: `{"context", "removed": true}`.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Value, json};

use crate::AgentError;
use crate::protocol::{ContextRequest, FrameKind, MAX_FRAME_BYTES, Reply, write_frame};

/// The driver, sent to each interpreter at its start.
const DRIVER_SOURCE: &str = include_str!("context_driver.py");
/// What the interpreter runs: the driver, read from stdin as a length line and the bytes (the
/// name it is compiled under marks the driver's frames, left out of user tracebacks).
const BOOT: &str = "import sys;exec(compile(sys.stdin.buffer.read(int(sys.stdin.buffer.readline())),'<paddock-context>','exec'))";
/// In each driver's environment: the tag that finds what it started, even outside its group.
pub const TAG_VARIABLE: &str = "PADDOCK_CONTEXT";
/// The longest context id.
pub const MAX_ID_LEN: usize = 64;
/// A driver line longer than this is skipped, never buffered (the driver keeps its own lines
/// below it; a longer one is user code writing on the driver's channel).
const MAX_DRIVER_LINE: usize = MAX_FRAME_BYTES;
/// Of each stream, the answer keeps this many bytes (half from its start, half from its end).
pub const STREAM_KEEP_BYTES: usize = 1024 * 1024;
/// The results of one execution carry at most this many bytes of JSON.
const RESULTS_BUDGET: usize = 12 * 1024 * 1024;
/// Room left in a frame for the reply's own JSON around the answer.
const REPLY_MARGIN: usize = 64 * 1024;
/// How often a waiting execution checks its deadline, its caller and its interpreter.
const POLL: Duration = Duration::from_millis(50);
/// Events a driver may have written before the agent reads them (then the driver waits).
const EVENT_QUEUE: usize = 256;
/// Bytes kept of what a driver writes on its own stderr, to explain its death.
const DIAGNOSTIC_TAIL: usize = 4096;
/// An interpreter seen exited this long with its channel still open (a forked child holds it)
/// is dead.
const EXITED_GRACE: Duration = Duration::from_secs(1);
/// Notes one answer carries at most.
const MAX_NOTES: usize = 20;

/// How contexts are started.
#[derive(Debug, Clone)]
pub struct ContextOptions {
    /// The interpreter: looked up on the context's `PATH` when it has no `/`.
    pub python: String,
    /// How long an interrupted execution (timeout, caller gone) may take to stop before its
    /// interpreter is killed and replaced (the context's names are then lost).
    pub interrupt_grace: Duration,
    /// How long a new interpreter may take to say it is ready.
    pub start_timeout: Duration,
}

impl Default for ContextOptions {
    fn default() -> Self {
        Self {
            python: "python3".into(),
            interrupt_grace: Duration::from_secs(2),
            start_timeout: Duration::from_secs(30),
        }
    }
}

/// Why a context request failed; [`ContextError::code`] is what the engine sees.
#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    #[error("there is no context {id}")]
    NotFound { id: String },
    #[error("context {id} already exists (restart or remove it first)")]
    Exists { id: String },
    #[error(
        "context id {id:?} is not 1 to {MAX_ID_LEN} characters of A-Z, a-z, 0-9, '.', '_' and '-'"
    )]
    InvalidId { id: String },
    #[error("context {id} cannot start: {reason}")]
    StartFailed { id: String, reason: String },
    #[error(
        "the interpreter of context {id} died ({how}); its names are lost, the next execute starts a new one"
    )]
    Died { id: String, how: String },
    #[error("context {id}: {reason}")]
    Failed { id: String, reason: String },
}

impl ContextError {
    /// The error's code in a failed [`Reply::Context`].
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotFound { .. } => "context:not_found",
            Self::Exists { .. } => "context:exists",
            Self::InvalidId { .. } => "context:invalid_id",
            Self::StartFailed { .. } => "context:start_failed",
            Self::Died { .. } => "context:died",
            Self::Failed { .. } => "context:failed",
        }
    }

    fn poisoned(id: &str) -> Self {
        Self::Failed {
            id: id.to_owned(),
            reason: "a lock was poisoned by a panicking thread".into(),
        }
    }
}

/// Checks a context id: 1 to [`MAX_ID_LEN`] characters of `[A-Za-z0-9._-]`.
pub fn check_id(id: &str) -> Result<(), ContextError> {
    let valid = (1..=MAX_ID_LEN).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if valid {
        Ok(())
    } else {
        // An id of any size is quoted in the message: only its start.
        let shown: String = id.chars().take(2 * MAX_ID_LEN).collect();
        Err(ContextError::InvalidId { id: shown })
    }
}

/// The session's contexts, by id: shared by the agent's connection threads.
pub struct ContextHost {
    options: ContextOptions,
    contexts: Mutex<BTreeMap<String, Arc<Entry>>>,
    /// Set by [`ContextHost::close_all`]: no interpreter starts after it.
    closed: AtomicBool,
    /// Numbers the drivers' tags.
    serial: AtomicU64,
}

impl ContextHost {
    pub fn new(options: ContextOptions) -> Self {
        Self {
            options,
            contexts: Mutex::new(BTreeMap::new()),
            closed: AtomicBool::new(false),
            serial: AtomicU64::new(0),
        }
    }

    /// Carries out one request and answers its JSON (the module's documentation shows the
    /// shapes). An execution gives `on_output` its stdout ([`FrameKind::Output`]) and stderr
    /// ([`FrameKind::Stderr`]) as they come, and an empty chunk at least every 50 ms as a
    /// probe: `on_output` answers `false` once the caller is gone, and the execution is then
    /// interrupted (SIGINT; its names are kept).
    pub fn handle(
        &self,
        request: ContextRequest,
        on_output: &mut dyn FnMut(FrameKind, &[u8]) -> bool,
    ) -> Result<Value, ContextError> {
        match request {
            ContextRequest::Execute {
                id,
                code,
                timeout_ms,
                cwd,
                env,
            } => self.execute(
                &id,
                &code,
                timeout_ms.map(Duration::from_millis),
                Spec { cwd, env },
                on_output,
            ),
            ContextRequest::Create { id, cwd, env } => self.create(&id, Spec { cwd, env }),
            ContextRequest::List => self.list(),
            ContextRequest::Restart { id } => self.restart(&id),
            ContextRequest::Remove { id } => self.remove(&id),
        }
    }

    /// Ends every context's interpreter and what it started. Nothing starts afterwards.
    pub fn close_all(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let entries: Vec<Arc<Entry>> = {
            let mut map = lock(&self.contexts);
            std::mem::take(&mut *map).into_values().collect()
        };
        for entry in &entries {
            entry.removed.store(true, Ordering::SeqCst);
            entry.kill();
        }
        // Idle ones are reaped here; a busy one by its execution, which sees it die.
        for entry in &entries {
            if let Ok(mut state) = entry.state.try_lock() {
                *state = State::Unstarted;
            }
        }
    }

    fn execute(
        &self,
        id: &str,
        code: &str,
        timeout: Option<Duration>,
        spec: Spec,
        on_output: &mut dyn FnMut(FrameKind, &[u8]) -> bool,
    ) -> Result<Value, ContextError> {
        check_id(id)?;
        let (entry, created) = self.entry_for_execute(id, spec)?;
        let mut state = entry.state.lock().map_err(|_| ContextError::poisoned(id))?;
        if entry.removed.load(Ordering::SeqCst) {
            return Err(ContextError::NotFound { id: id.to_owned() });
        }
        // A caller who left while another execution held the context runs nothing.
        if !on_output(FrameKind::Output, &[]) {
            return Err(ContextError::Failed {
                id: id.to_owned(),
                reason: "the caller left before the execution started".into(),
            });
        }
        let mut notes = Vec::new();
        let mut restarted = false;
        let mut driver = match std::mem::replace(&mut *state, State::Unstarted) {
            State::Running(driver) if driver.is_alive() => driver,
            State::Running(mut driver) => {
                let how = driver.ending();
                drop(driver);
                *state = State::Dead { how: how.clone() };
                return Err(ContextError::Died {
                    id: id.to_owned(),
                    how,
                });
            }
            State::Unstarted => match self.start_in(&entry) {
                Ok(driver) => driver,
                Err(err) => {
                    if created {
                        drop(state);
                        self.forget(&entry);
                    }
                    return Err(err);
                }
            },
            State::Dead { how } => match self.start_in(&entry) {
                Ok(driver) => {
                    restarted = true;
                    notes.push(format!(
                        "the context's interpreter had died ({how}): this execution ran in a new \
                         one, without the old one's names"
                    ));
                    driver
                }
                Err(err) => {
                    *state = State::Dead { how };
                    return Err(err);
                }
            },
        };
        let previous_count = entry.facts().execution_count;
        let mut run = Execution::new(on_output);
        run.notes = notes;
        let started = Instant::now();
        let ending = driver.execute(code, timeout, self.options.interrupt_grace, &mut run);
        let duration_ms = started.elapsed().as_secs_f64() * 1000.0;
        let (execution_count, exception, interrupted) = match ending {
            Ending::Done {
                execution_count,
                exception,
                interrupted,
            } => {
                entry.facts().execution_count = execution_count;
                *state = State::Running(driver);
                (execution_count, exception, interrupted)
            }
            Ending::Stuck => {
                drop(driver);
                restarted = true;
                run.note(format!(
                    "the interpreter did not stop within {} ms of the interrupt: it was killed \
                     and a new one started; the context's names are lost",
                    self.options.interrupt_grace.as_millis()
                ));
                match self.start_in(&entry) {
                    Ok(fresh) => *state = State::Running(fresh),
                    Err(err) => {
                        run.note(format!(
                            "no new interpreter could be started ({err}); the next execute tries \
                             again"
                        ));
                    }
                }
                (previous_count + 1, None, true)
            }
            Ending::Died => {
                let how = driver.ending();
                drop(driver);
                if entry.removed.load(Ordering::SeqCst) {
                    return Err(ContextError::Failed {
                        id: id.to_owned(),
                        reason: "the context was removed while the execution ran".into(),
                    });
                }
                if entry.restarting.load(Ordering::SeqCst) {
                    return Err(ContextError::Failed {
                        id: id.to_owned(),
                        reason: "the context was restarted while the execution ran".into(),
                    });
                }
                *state = State::Dead { how: how.clone() };
                return Err(ContextError::Died {
                    id: id.to_owned(),
                    how,
                });
            }
        };
        drop(state);
        Ok(run.answer(Summary {
            id,
            execution_count,
            exception,
            interrupted,
            restarted,
            created,
            duration_ms,
        }))
    }

    fn create(&self, id: &str, spec: Spec) -> Result<Value, ContextError> {
        check_id(id)?;
        self.refuse_when_closed(id)?;
        let entry = {
            let mut map = lock(&self.contexts);
            if let Some(old) = map.get(id) {
                if !old.replaceable() {
                    return Err(ContextError::Exists { id: id.to_owned() });
                }
                // A dead one is replaced; its interpreter is reaped with its last user.
                old.removed.store(true, Ordering::SeqCst);
                old.kill();
            }
            let entry = Arc::new(Entry::new(id, spec));
            map.insert(id.to_owned(), entry.clone());
            entry
        };
        let mut state = entry.state.lock().map_err(|_| ContextError::poisoned(id))?;
        match self.start_in(&entry) {
            Ok(driver) => {
                let answer = json!({
                    "context": id,
                    "pid": driver.group.pid(),
                    "cwd": entry.cwd_shown,
                    "python": driver.python,
                });
                *state = State::Running(driver);
                Ok(answer)
            }
            Err(err) => {
                drop(state);
                self.forget(&entry);
                Err(err)
            }
        }
    }

    fn list(&self) -> Result<Value, ContextError> {
        let entries: Vec<Arc<Entry>> = lock(&self.contexts).values().cloned().collect();
        let contexts: Vec<Value> = entries
            .iter()
            .map(|entry| {
                let facts = entry.facts();
                json!({
                    "id": entry.id,
                    "pid": facts.group.as_ref().and_then(Group::pid),
                    "cwd": entry.cwd_shown,
                    "execution_count": facts.execution_count,
                    "alive": facts.alive.as_ref().is_some_and(|a| a.load(Ordering::SeqCst)),
                    "python": facts.python,
                })
            })
            .collect();
        Ok(json!({ "contexts": contexts }))
    }

    fn restart(&self, id: &str) -> Result<Value, ContextError> {
        check_id(id)?;
        let entry = self.existing(id)?;
        // A running execution is ended (its caller is told the context was restarted) rather
        // than waited for: a restart is how a stuck context is got back.
        entry.restarting.store(true, Ordering::SeqCst);
        entry.kill();
        let outcome = entry
            .state
            .lock()
            .map_err(|_| ContextError::poisoned(id))
            .and_then(|mut state| {
                *state = State::Unstarted;
                let driver = self.start_in(&entry)?;
                let answer = json!({
                    "context": id,
                    "pid": driver.group.pid(),
                    "cwd": entry.cwd_shown,
                    "python": driver.python,
                    "restarted": true,
                });
                *state = State::Running(driver);
                Ok(answer)
            });
        entry.restarting.store(false, Ordering::SeqCst);
        outcome
    }

    fn remove(&self, id: &str) -> Result<Value, ContextError> {
        check_id(id)?;
        let entry = lock(&self.contexts)
            .remove(id)
            .ok_or_else(|| ContextError::NotFound { id: id.to_owned() })?;
        entry.removed.store(true, Ordering::SeqCst);
        entry.kill();
        // Reaped here, once a running execution (which sees its interpreter die) let go.
        let mut state = entry.state.lock().map_err(|_| ContextError::poisoned(id))?;
        *state = State::Unstarted;
        Ok(json!({ "context": id, "removed": true }))
    }

    fn refuse_when_closed(&self, id: &str) -> Result<(), ContextError> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(ContextError::Failed {
                id: id.to_owned(),
                reason: "the agent is closing its contexts".into(),
            });
        }
        Ok(())
    }

    fn existing(&self, id: &str) -> Result<Arc<Entry>, ContextError> {
        lock(&self.contexts)
            .get(id)
            .cloned()
            .ok_or_else(|| ContextError::NotFound { id: id.to_owned() })
    }

    /// The context `id`, made (not started) when there is none; and whether it was made.
    fn entry_for_execute(&self, id: &str, spec: Spec) -> Result<(Arc<Entry>, bool), ContextError> {
        self.refuse_when_closed(id)?;
        let mut map = lock(&self.contexts);
        if let Some(entry) = map.get(id) {
            return Ok((entry.clone(), false));
        }
        let entry = Arc::new(Entry::new(id, spec));
        map.insert(id.to_owned(), entry.clone());
        Ok((entry, true))
    }

    /// Takes out an entry whose first start failed (unless another took its place).
    fn forget(&self, entry: &Arc<Entry>) {
        let mut map = lock(&self.contexts);
        if map.get(&entry.id).is_some_and(|e| Arc::ptr_eq(e, entry)) {
            map.remove(&entry.id);
        }
    }

    /// Starts an interpreter for `entry` (whose state the caller holds).
    fn start_in(&self, entry: &Entry) -> Result<Driver, ContextError> {
        self.refuse_when_closed(&entry.id)?;
        if entry.removed.load(Ordering::SeqCst) {
            return Err(ContextError::NotFound {
                id: entry.id.clone(),
            });
        }
        entry.facts().starting = true;
        let tag = format!(
            "{}.{}.{}",
            std::process::id(),
            self.serial.fetch_add(1, Ordering::SeqCst),
            entry.id
        );
        let started = Driver::start(&self.options, &entry.spec, &tag);
        {
            let mut facts = entry.facts();
            facts.starting = false;
            if let Ok(driver) = &started {
                facts.group = Some(driver.group.clone());
                facts.alive = Some(driver.alive.clone());
                facts.execution_count = 0;
                facts.python = Some(driver.python.clone());
            }
        }
        let driver = started.map_err(|reason| ContextError::StartFailed {
            id: entry.id.clone(),
            reason,
        })?;
        // Close and remove set their flag, then kill the group the facts name; the facts were
        // set before this check: one of the two sides always ends the new interpreter.
        if self.closed.load(Ordering::SeqCst) || entry.removed.load(Ordering::SeqCst) {
            drop(driver);
            return Err(ContextError::Failed {
                id: entry.id.clone(),
                reason: "the context was removed while its interpreter started".into(),
            });
        }
        Ok(driver)
    }
}

impl Default for ContextHost {
    fn default() -> Self {
        Self::new(ContextOptions::default())
    }
}

impl Drop for ContextHost {
    fn drop(&mut self) {
        self.close_all();
    }
}

/// Locks `mutex` even when a panicking thread poisoned it: the maps and facts it guards stay
/// consistent (every update is one assignment), and a context must still be killable.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Where and with what a context's interpreters start.
struct Spec {
    cwd: Option<String>,
    env: BTreeMap<String, String>,
}

/// One context.
struct Entry {
    id: String,
    spec: Spec,
    /// The directory shown in listings (absolute).
    cwd_shown: String,
    /// Out of the host (removed, replaced, closed): nothing starts in it again.
    removed: AtomicBool,
    /// A restart is ending the interpreter.
    restarting: AtomicBool,
    /// What listings, kills and replacements read without waiting for an execution.
    facts: Mutex<Facts>,
    /// Held through an execution: one at a time per context.
    state: Mutex<State>,
}

#[derive(Default)]
struct Facts {
    group: Option<Group>,
    alive: Option<Arc<AtomicBool>>,
    execution_count: u64,
    python: Option<String>,
    starting: bool,
}

enum State {
    /// No interpreter: one starts at the next execute.
    Unstarted,
    Running(Driver),
    /// Its interpreter died and an execute said so: the next one starts a new interpreter.
    Dead {
        how: String,
    },
}

impl Entry {
    fn new(id: &str, spec: Spec) -> Self {
        let here = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
        let cwd_shown = match &spec.cwd {
            Some(dir) => here.join(dir),
            None => here,
        }
        .display()
        .to_string();
        Self {
            id: id.to_owned(),
            spec,
            cwd_shown,
            removed: AtomicBool::new(false),
            restarting: AtomicBool::new(false),
            // Every entry is made to be started at once: until then it is not replaceable.
            facts: Mutex::new(Facts {
                starting: true,
                ..Facts::default()
            }),
            state: Mutex::new(State::Unstarted),
        }
    }

    fn facts(&self) -> MutexGuard<'_, Facts> {
        lock(&self.facts)
    }

    /// Kills its interpreter's group and tagged processes (reaping is its owner's).
    fn kill(&self) {
        if let Some(group) = &self.facts().group {
            group.kill();
        }
    }

    /// Whether Create may replace it: no interpreter alive or starting.
    fn replaceable(&self) -> bool {
        let facts = self.facts();
        !facts.starting
            && !facts
                .alive
                .as_ref()
                .is_some_and(|a| a.load(Ordering::SeqCst))
    }
}

/// A driver's process group, killable from any thread until its leader is reaped (a reaped
/// pid may name another process by then).
#[derive(Clone)]
struct Group {
    leader: Arc<Mutex<Option<u32>>>,
    tag: String,
}

impl Group {
    fn pid(&self) -> Option<u32> {
        *lock(&self.leader)
    }

    /// SIGINT to the interpreter alone (not its subprocesses), as Jupyter interrupts a kernel.
    fn interrupt(&self) {
        if let Some(pid) = *lock(&self.leader) {
            signal_pid(pid, rustix::process::Signal::INT);
        }
    }

    fn kill(&self) {
        let leader = lock(&self.leader);
        self.kill_locked(*leader);
    }

    /// Kills the group for good: its leader may be reaped after this.
    fn retire(&self) {
        let mut leader = lock(&self.leader);
        self.kill_locked(*leader);
        *leader = None;
    }

    fn kill_locked(&self, leader: Option<u32>) {
        use rustix::process::{Pid, Signal, kill_process_group};
        if let Some(pid) = leader
            .and_then(|pid| i32::try_from(pid).ok())
            .and_then(Pid::from_raw)
        {
            let _ = kill_process_group(pid, Signal::KILL);
        }
        // What left the group (a new session) still carries the tag.
        for pid in crate::run::processes_with_env(&format!("{TAG_VARIABLE}={}", self.tag)) {
            if let Ok(pid) = u32::try_from(pid) {
                signal_pid(pid, Signal::KILL);
            }
        }
    }
}

fn signal_pid(pid: u32, signal: rustix::process::Signal) {
    if let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process(pid, signal);
    }
}

/// Whether `pid` (a child not reaped yet) has exited: a zombie, or gone.
fn has_exited(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which is in parentheses and may hold any byte.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => true,
    }
}

/// What a driver says (one JSON line each).
#[derive(Debug, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
enum Event {
    Ready {
        python: String,
    },
    Stdout {
        seq: u64,
        text: String,
    },
    Stderr {
        seq: u64,
        text: String,
    },
    Display {
        seq: u64,
        bundle: Value,
        #[serde(default)]
        note: Option<String>,
    },
    Done {
        seq: u64,
        execution_count: u64,
        #[serde(default)]
        exception: Option<Value>,
        #[serde(default)]
        interrupted: bool,
    },
}

/// What the reading thread hands on.
#[derive(Debug)]
enum Incoming {
    Event {
        event: Event,
        bytes: usize,
    },
    /// A line that is not one of the driver's events (user code wrote on its channel).
    Garbled(String),
    TooLong(usize),
    /// The channel's end: the driver is gone.
    Ended,
}

/// One line of a driver's channel, read without holding more than `max` bytes of it.
#[derive(Debug, PartialEq)]
enum Line {
    Text(Vec<u8>),
    TooLong(usize),
    End,
}

fn read_line_capped(reader: &mut impl BufRead, max: usize) -> std::io::Result<Line> {
    let mut line = Vec::new();
    let mut total = 0usize;
    loop {
        let available = match reader.fill_buf() {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(match total {
                0 => Line::End,
                n if n > max => Line::TooLong(n),
                _ => Line::Text(line),
            });
        }
        let newline = available.iter().position(|&b| b == b'\n');
        let chunk = &available[..newline.unwrap_or(available.len())];
        total += chunk.len();
        if total <= max {
            line.extend_from_slice(chunk);
        } else if !line.is_empty() {
            line = Vec::new();
        }
        let used = chunk.len() + usize::from(newline.is_some());
        reader.consume(used);
        if newline.is_some() {
            return Ok(if total > max {
                Line::TooLong(total)
            } else {
                Line::Text(line)
            });
        }
    }
}

/// The last bytes a driver wrote on its own stderr.
#[derive(Default)]
struct Tail(Vec<u8>);

impl Tail {
    fn push(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
        if self.0.len() > DIAGNOSTIC_TAIL {
            let excess = self.0.len() - DIAGNOSTIC_TAIL;
            self.0.drain(..excess);
        }
    }
}

/// How an execution ended.
enum Ending {
    Done {
        execution_count: u64,
        exception: Option<Value>,
        interrupted: bool,
    },
    /// Interrupted, it did not stop within the grace.
    Stuck,
    /// The interpreter died.
    Died,
}

/// One live interpreter.
struct Driver {
    child: Child,
    stdin: ChildStdin,
    events: Receiver<Incoming>,
    group: Group,
    /// False once its channel ended.
    alive: Arc<AtomicBool>,
    diagnostics: Arc<Mutex<Tail>>,
    diagnostics_done: Receiver<()>,
    python: String,
    seq: u64,
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.alive.store(false, Ordering::SeqCst);
        self.group.retire();
        let _ = self.child.wait();
    }
}

/// `program` as the context's environment finds it.
fn find_program(program: &str, env: &BTreeMap<String, String>) -> Result<PathBuf, String> {
    if program.contains('/') {
        return Ok(PathBuf::from(program));
    }
    let path: OsString = env
        .get("PATH")
        .map(OsString::from)
        .or_else(|| std::env::var_os("PATH"))
        .unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| {
            if dir.as_os_str().is_empty() {
                Path::new(".").join(program)
            } else {
                dir.join(program)
            }
        })
        .find(|candidate| {
            std::fs::metadata(candidate)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .ok_or_else(|| {
            format!(
                "{program} was not found on PATH ({}); contexts need a Python 3.8 or newer",
                path.to_string_lossy()
            )
        })
}

fn describe_status(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(9)) => "killed by SIGKILL".into(),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => format!("ended ({status})"),
    }
}

impl Driver {
    /// Starts an interpreter and waits until its driver is ready; the reason when it cannot.
    fn start(options: &ContextOptions, spec: &Spec, tag: &str) -> Result<Self, String> {
        let program = find_program(&options.python, &spec.env)?;
        if let Some(dir) = &spec.cwd
            && !Path::new(dir).is_dir()
        {
            return Err(format!("its directory {dir} is not a directory"));
        }
        let mut command = Command::new(&program);
        command
            .args(["-u", "-c", BOOT])
            // No display in an environment: figures are rendered to PNG after each execution.
            .env("MPLBACKEND", "Agg")
            .envs(&spec.env)
            .env(TAG_VARIABLE, tag)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        if let Some(dir) = &spec.cwd {
            command.current_dir(dir);
        }
        let mut child = command
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
        let pipes = (child.stdin.take(), child.stdout.take(), child.stderr.take());
        let group = Group {
            leader: Arc::new(Mutex::new(Some(child.id()))),
            tag: tag.to_owned(),
        };
        let (events_tx, events) = mpsc::sync_channel(EVENT_QUEUE);
        let (diagnostics_tx, diagnostics_done) = mpsc::channel();
        let (Some(stdin), Some(stdout), Some(stderr)) = pipes else {
            group.retire();
            let _ = child.wait();
            return Err("its pipes were not made".into());
        };
        // From here on, the driver's drop ends the process whatever fails.
        let mut driver = Self {
            child,
            stdin,
            events,
            group,
            alive: Arc::new(AtomicBool::new(true)),
            diagnostics: Arc::new(Mutex::new(Tail::default())),
            diagnostics_done,
            python: String::new(),
            seq: 0,
        };
        let alive = driver.alive.clone();
        std::thread::Builder::new()
            .name("context-events".into())
            .spawn(move || read_events(stdout, &events_tx, &alive))
            .map_err(|e| format!("no thread for its channel: {e}"))?;
        let tail = driver.diagnostics.clone();
        std::thread::Builder::new()
            .name("context-stderr".into())
            .spawn(move || {
                let mut stderr = stderr;
                let mut buf = [0u8; 4096];
                loop {
                    match stderr.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => lock(&tail).push(&buf[..n]),
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(_) => break,
                    }
                }
                let _ = diagnostics_tx.send(());
            })
            .map_err(|e| format!("no thread for its stderr: {e}"))?;
        // A failed write is an interpreter that already ended: the wait below says how.
        let _ = write!(driver.stdin, "{}\n{DRIVER_SOURCE}", DRIVER_SOURCE.len())
            .and_then(|()| driver.stdin.flush());
        let until = Instant::now() + options.start_timeout;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match driver.events.recv_timeout(left) {
                Ok(Incoming::Event {
                    event: Event::Ready { python },
                    ..
                }) => {
                    driver.python = python;
                    return Ok(driver);
                }
                Ok(Incoming::Ended) | Err(RecvTimeoutError::Disconnected) => {
                    return Err(format!(
                        "{} ended before its driver was ready ({}); contexts need a Python 3.8 \
                         or newer",
                        program.display(),
                        driver.ending()
                    ));
                }
                Err(RecvTimeoutError::Timeout) => {
                    return Err(format!(
                        "{} was not ready after {} ms ({})",
                        program.display(),
                        options.start_timeout.as_millis(),
                        driver.ending()
                    ));
                }
                Ok(_) => {}
            }
        }
    }

    /// Whether the interpreter still runs.
    fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst) && self.group.pid().is_some_and(|pid| !has_exited(pid))
    }

    /// Ends and reaps the interpreter (if it still ran) and says how it ended, with the last
    /// words it wrote on its own stderr.
    fn ending(&mut self) -> String {
        self.alive.store(false, Ordering::SeqCst);
        self.group.retire();
        let mut how = match self.child.wait() {
            Ok(status) => describe_status(status),
            Err(e) => format!("its status is unknown: {e}"),
        };
        // Its stderr closed with it: what it held is read within moments.
        let _ = self
            .diagnostics_done
            .recv_timeout(Duration::from_millis(500));
        let tail = String::from_utf8_lossy(&lock(&self.diagnostics).0).into_owned();
        let tail = tail.trim();
        if !tail.is_empty() {
            how.push_str("; it wrote: ");
            how.push_str(tail);
        }
        how
    }

    /// Runs `code`: sends the request, hands on this execution's events until it is done,
    /// interrupts it at the deadline or when the caller is gone, and gives up on it when it
    /// does not stop within `grace` of the interrupt.
    fn execute(
        &mut self,
        code: &str,
        timeout: Option<Duration>,
        grace: Duration,
        run: &mut Execution<'_>,
    ) -> Ending {
        self.seq += 1;
        let seq = self.seq;
        let mut request = json!({ "op": "execute", "seq": seq, "code": code }).to_string();
        request.push('\n');
        if self
            .stdin
            .write_all(request.as_bytes())
            .and_then(|()| self.stdin.flush())
            .is_err()
        {
            return Ending::Died;
        }
        let started = Instant::now();
        let deadline = timeout.map(|t| started + t);
        let mut interrupted_at: Option<Instant> = None;
        let mut exited_at: Option<Instant> = None;
        let mut next_check = started + POLL;
        loop {
            let wait = next_check.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(wait) {
                Ok(Incoming::Event { event, bytes }) => match event {
                    Event::Stdout { seq: s, text } if s == seq => {
                        run.output(FrameKind::Output, &text);
                    }
                    Event::Stderr { seq: s, text } if s == seq => {
                        run.output(FrameKind::Stderr, &text);
                    }
                    Event::Display {
                        seq: s,
                        bundle,
                        note,
                    } if s == seq => run.result(bundle, bytes, note),
                    Event::Done {
                        seq: s,
                        execution_count,
                        exception,
                        interrupted,
                    } if s == seq => {
                        return Ending::Done {
                            execution_count,
                            exception,
                            interrupted,
                        };
                    }
                    // Another execution's (a background thread's display between two) or a
                    // stray ready: not this one's.
                    Event::Stdout { .. }
                    | Event::Stderr { .. }
                    | Event::Display { .. }
                    | Event::Done { .. }
                    | Event::Ready { .. } => {}
                },
                Ok(Incoming::Garbled(why)) => run.note(format!(
                    "a line on the driver's channel was not the driver's and was ignored: {why}"
                )),
                Ok(Incoming::TooLong(bytes)) => run.note(format!(
                    "a line of {bytes} bytes on the driver's channel was over the \
                     {MAX_DRIVER_LINE}-byte limit and was skipped"
                )),
                Ok(Incoming::Ended) | Err(RecvTimeoutError::Disconnected) => return Ending::Died,
                Err(RecvTimeoutError::Timeout) => {}
            }
            let now = Instant::now();
            if now < next_check {
                continue;
            }
            next_check = now + POLL;
            run.probe();
            match interrupted_at {
                None => {
                    let late = deadline.is_some_and(|d| now >= d);
                    if late || run.caller_gone {
                        run.timed_out = late;
                        self.group.interrupt();
                        interrupted_at = Some(now);
                    }
                }
                Some(at) if now >= at + grace => return Ending::Stuck,
                Some(_) => {}
            }
            if self.group.pid().is_none_or(has_exited) {
                let since = *exited_at.get_or_insert(now);
                if now >= since + EXITED_GRACE {
                    return Ending::Died;
                }
            }
        }
    }
}

/// Reads a driver's channel until it ends, handing each line on.
fn read_events(stdout: impl Read, events: &SyncSender<Incoming>, alive: &AtomicBool) {
    let mut reader = BufReader::with_capacity(64 * 1024, stdout);
    loop {
        let incoming = match read_line_capped(&mut reader, MAX_DRIVER_LINE) {
            Ok(Line::Text(line)) => match serde_json::from_slice::<Event>(&line) {
                Ok(event) => Incoming::Event {
                    event,
                    bytes: line.len(),
                },
                Err(e) => Incoming::Garbled(e.to_string()),
            },
            Ok(Line::TooLong(bytes)) => Incoming::TooLong(bytes),
            Ok(Line::End) | Err(_) => break,
        };
        if events.send(incoming).is_err() {
            break;
        }
    }
    alive.store(false, Ordering::SeqCst);
    let _ = events.send(Incoming::Ended);
}

/// A stream's text as the answer keeps it: its first and its last half of
/// [`STREAM_KEEP_BYTES`], and how many bytes were cut between them.
#[derive(Default)]
struct Capped {
    head: String,
    /// Once text went to the tail, the head takes no more (order is kept).
    head_full: bool,
    tail: String,
    cut: u64,
}

impl Capped {
    const HALF: usize = STREAM_KEEP_BYTES / 2;

    fn push(&mut self, mut text: &str) {
        if !self.head_full {
            let room = Self::HALF - self.head.len();
            let take = text.floor_char_boundary(room.min(text.len()));
            self.head.push_str(&text[..take]);
            text = &text[take..];
            if text.is_empty() {
                return;
            }
            self.head_full = true;
        }
        self.tail.push_str(text);
        // Trimmed by halves, so that a stream of small chunks costs no quadratic copying.
        if self.tail.len() > 2 * Self::HALF {
            self.trim_tail();
        }
    }

    fn trim_tail(&mut self) {
        if self.tail.len() > Self::HALF {
            let cut = self.tail.ceil_char_boundary(self.tail.len() - Self::HALF);
            self.tail.drain(..cut);
            self.cut += cut as u64;
        }
    }

    /// The kept text (with a line where bytes were cut) and how many were cut.
    fn finish(mut self, name: &str) -> (String, u64) {
        self.trim_tail();
        let mut text = self.head;
        if self.cut > 0 {
            text.push_str(&format!(
                "\n[paddock: {} bytes of {name} cut here]\n",
                self.cut
            ));
        }
        text.push_str(&self.tail);
        (text, self.cut)
    }
}

/// What one execution gathers for its answer.
struct Execution<'a> {
    on_output: &'a mut dyn FnMut(FrameKind, &[u8]) -> bool,
    caller_gone: bool,
    timed_out: bool,
    stdout: Capped,
    stderr: Capped,
    results: Vec<Value>,
    results_bytes: usize,
    notes: Vec<String>,
}

/// The rest of an execution's answer.
struct Summary<'a> {
    id: &'a str,
    execution_count: u64,
    exception: Option<Value>,
    interrupted: bool,
    restarted: bool,
    created: bool,
    duration_ms: f64,
}

impl<'a> Execution<'a> {
    fn new(on_output: &'a mut dyn FnMut(FrameKind, &[u8]) -> bool) -> Self {
        Self {
            on_output,
            caller_gone: false,
            timed_out: false,
            stdout: Capped::default(),
            stderr: Capped::default(),
            results: Vec::new(),
            results_bytes: 0,
            notes: Vec::new(),
        }
    }

    fn output(&mut self, kind: FrameKind, text: &str) {
        if !self.caller_gone && !(self.on_output)(kind, text.as_bytes()) {
            self.caller_gone = true;
        }
        match kind {
            FrameKind::Stderr => self.stderr.push(text),
            FrameKind::Output | FrameKind::Message | FrameKind::Stdin => self.stdout.push(text),
        }
    }

    fn probe(&mut self) {
        if !self.caller_gone && !(self.on_output)(FrameKind::Output, &[]) {
            self.caller_gone = true;
        }
    }

    fn result(&mut self, bundle: Value, bytes: usize, note: Option<String>) {
        if let Some(note) = note {
            self.note(note);
        }
        if self.results_bytes + bytes > RESULTS_BUDGET {
            self.note(format!(
                "a result of {bytes} bytes was left out: the results of one execution carry at \
                 most {RESULTS_BUDGET} bytes"
            ));
            return;
        }
        self.results_bytes += bytes;
        self.results.push(bundle);
    }

    fn note(&mut self, note: String) {
        if self.notes.len() < MAX_NOTES {
            self.notes.push(note);
        }
    }

    fn answer(mut self, summary: Summary<'_>) -> Value {
        let (stdout, stdout_cut) = std::mem::take(&mut self.stdout).finish("stdout");
        let (stderr, stderr_cut) = std::mem::take(&mut self.stderr).finish("stderr");
        let mut answer = json!({
            "context": summary.id,
            "execution_count": summary.execution_count,
            "results": std::mem::take(&mut self.results),
            "stdout": stdout,
            "stderr": stderr,
            "exception": summary.exception,
            "timed_out": self.timed_out,
            "interrupted": summary.interrupted,
            "restarted": summary.restarted,
            "created": summary.created,
            "duration_ms": summary.duration_ms,
            "stdout_cut_bytes": stdout_cut,
            "stderr_cut_bytes": stderr_cut,
            "notes": self.notes,
        });
        // Never a frame the engine refuses (text escaped in JSON grows): results go first.
        if answer.to_string().len() > MAX_FRAME_BYTES - REPLY_MARGIN {
            answer["results"] = json!([]);
            if let Some(notes) = answer["notes"].as_array_mut() {
                notes.push(json!(
                    "the results were left out: with the output they were more than a reply carries"
                ));
            }
        }
        answer
    }
}

/// Serves one [`ContextRequest`] on `stream`: an execution's stdout and stderr as
/// [`FrameKind::Output`] and [`FrameKind::Stderr`] frames as they come, then
/// [`Reply::Context`] with the answer's JSON, or with `{"code", "message"}` and `failed` set.
/// Closing the connection before the answer interrupts the execution (its names are kept).
pub fn serve_context(
    stream: UnixStream,
    request: ContextRequest,
    host: &ContextHost,
) -> Result<(), AgentError> {
    let gone = Arc::new(AtomicBool::new(false));
    if matches!(request, ContextRequest::Execute { .. }) {
        let mut reader = stream.try_clone()?;
        let watch = gone.clone();
        // Without this thread (the session at its process ceiling) a hang-up is still seen at
        // the next output written.
        let _ = std::thread::Builder::new()
            .name("context-hangup".into())
            .spawn(move || {
                // Nothing more is expected from the engine: a read returns only when it hangs
                // up, or when the answer is sent and the connection shut down.
                let mut byte = [0u8; 1];
                let _ = reader.read(&mut byte);
                watch.store(true, Ordering::SeqCst);
            });
    }
    let outcome = {
        let mut writer = &stream;
        let mut on_output = |kind: FrameKind, data: &[u8]| {
            if gone.load(Ordering::SeqCst) {
                return false;
            }
            if !data.is_empty() && write_frame(&mut writer, kind, data).is_err() {
                gone.store(true, Ordering::SeqCst);
                return false;
            }
            true
        };
        host.handle(request, &mut on_output)
    };
    let reply = match outcome {
        Ok(answer) => Reply::Context {
            answer: answer.to_string(),
            failed: false,
        },
        Err(err) => Reply::Context {
            answer: json!({ "code": err.code(), "message": err.to_string() }).to_string(),
            failed: true,
        },
    };
    let mut stream = stream;
    let written = crate::protocol::write_message(&mut stream, &reply);
    let _ = stream.shutdown(std::net::Shutdown::Both);
    written?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> ContextHost {
        ContextHost::new(ContextOptions::default())
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

    /// Runs `code` in `id`, keeping the output chunks as they came.
    fn run(host: &ContextHost, id: &str, code: &str) -> Value {
        host.handle(execute(id, code, None), &mut |_, _| true)
            .unwrap()
    }

    fn process_gone(pid: u64) -> bool {
        has_exited(u32::try_from(pid).unwrap())
    }

    fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
        let until = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < until, "{what}: still not so after 10 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn pid_of(host: &ContextHost, id: &str) -> u64 {
        let list = host.handle(ContextRequest::List, &mut |_, _| true).unwrap();
        list["contexts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id)
            .and_then(|c| c["pid"].as_u64())
            .unwrap()
    }

    #[test]
    fn ids_are_checked() {
        for good in ["a", "ctx-1", "A.b_c", &"x".repeat(64)] {
            assert!(check_id(good).is_ok(), "{good}");
        }
        for bad in ["", "a b", "a/b", "é", &"x".repeat(65)] {
            assert_eq!(
                check_id(bad).unwrap_err().code(),
                "context:invalid_id",
                "{bad}"
            );
        }
    }

    #[test]
    fn driver_lines_are_capped_not_buffered() {
        let input = b"short\nthis one is long\nlast";
        let mut reader = BufReader::with_capacity(4, &input[..]);
        assert_eq!(
            read_line_capped(&mut reader, 8).unwrap(),
            Line::Text(b"short".to_vec())
        );
        assert_eq!(read_line_capped(&mut reader, 8).unwrap(), Line::TooLong(16));
        assert_eq!(
            read_line_capped(&mut reader, 8).unwrap(),
            Line::Text(b"last".to_vec())
        );
        assert_eq!(read_line_capped(&mut reader, 8).unwrap(), Line::End);
    }

    #[test]
    fn a_stream_keeps_its_start_and_its_end() {
        let mut small = Capped::default();
        small.push("abc");
        small.push("é\n");
        assert_eq!(small.finish("stdout"), ("abcé\n".to_owned(), 0));

        let mut big = Capped::default();
        let line = format!("{}\n", "é".repeat(1000));
        for _ in 0..2000 {
            big.push(&line);
        }
        big.push("the end\n");
        let total = line.len() * 2000 + 8;
        let (text, cut) = big.finish("stdout");
        assert!(text.starts_with('é'));
        assert!(text.ends_with("the end\n"));
        assert!(text.contains(&format!("[paddock: {cut} bytes of stdout cut here]")));
        let marker = format!("\n[paddock: {cut} bytes of stdout cut here]\n").len();
        assert_eq!(text.len() - marker + cut as usize, total);
        assert!(text.len() <= STREAM_KEEP_BYTES + marker);
    }

    #[test]
    fn names_persist_and_the_last_expression_is_the_main_result() {
        let host = host();
        let first = run(&host, "a", "x = 41\ndef f(y):\n    return y + 1");
        assert_eq!(first["execution_count"], 1);
        assert_eq!(first["created"], true);
        assert_eq!(first["results"], json!([]));
        let second = run(&host, "a", "f(x)");
        assert_eq!(second["execution_count"], 2);
        assert_eq!(second["created"], false);
        assert_eq!(
            second["results"],
            json!([{"text/plain": "42", "is_main_result": true}])
        );
        assert_eq!(second["exception"], Value::Null);
        assert!(second["duration_ms"].as_f64().unwrap() > 0.0);
        // None is no result, nor is a value hidden by a semicolon.
        assert_eq!(run(&host, "a", "None")["results"], json!([]));
        assert_eq!(run(&host, "a", "x;")["results"], json!([]));
        // Top-level await runs on the context's loop.
        let awaited = run(&host, "a", "import asyncio\nawait asyncio.sleep(0)\nx + 2");
        assert_eq!(awaited["results"][0]["text/plain"], "43");
    }

    #[test]
    fn display_shows_the_rich_representations() {
        let host = host();
        let answer = run(
            &host,
            "d",
            "class Pic:\n    def _repr_png_(self):\n        return b'\\x89PNG-bytes'\n    \
             def _repr_html_(self):\n        return '<b>pic</b>'\n    def __repr__(self):\n        \
             return 'Pic()'\ndisplay(Pic())\ndisplay({'k': 1})\nPic()",
        );
        assert_eq!(
            answer["results"],
            json!([
                {
                    "text/plain": "Pic()",
                    "text/html": "<b>pic</b>",
                    "image/png": "iVBORy1ieXRlcw==",
                    "is_main_result": false
                },
                {"text/plain": "{'k': 1}", "is_main_result": false},
                {
                    "text/plain": "Pic()",
                    "text/html": "<b>pic</b>",
                    "image/png": "iVBORy1ieXRlcw==",
                    "is_main_result": true
                }
            ])
        );
    }

    #[test]
    fn stdout_and_stderr_are_kept_apart_and_streamed() {
        let host = host();
        let started = Instant::now();
        let mut chunks: Vec<(FrameKind, String, Duration)> = Vec::new();
        let answer = host
            .handle(
                execute(
                    "s",
                    "import sys, time, subprocess\nprint('a')\nprint('oops', file=sys.stderr)\n\
                     time.sleep(1)\nsubprocess.run(['sh', '-c', 'echo sub; echo suberr >&2'])\n\
                     print('b')",
                    None,
                ),
                &mut |kind, data| {
                    if !data.is_empty() {
                        chunks.push((
                            kind,
                            String::from_utf8_lossy(data).into_owned(),
                            started.elapsed(),
                        ));
                    }
                    true
                },
            )
            .unwrap();
        let ended = started.elapsed();
        assert_eq!(answer["stdout"], "a\nsub\nb\n");
        assert_eq!(answer["stderr"], "oops\nsuberr\n");
        let (_, text, at) = chunks
            .iter()
            .find(|(kind, _, _)| *kind == FrameKind::Output)
            .unwrap();
        assert_eq!(text, "a\n");
        assert!(
            *at + Duration::from_millis(800) < ended,
            "the first line came at {at:?}, the execution ended at {ended:?}"
        );
        let stderr: String = chunks
            .iter()
            .filter(|(k, _, _)| *k == FrameKind::Stderr)
            .map(|(_, t, _)| t.as_str())
            .collect();
        assert_eq!(stderr, "oops\nsuberr\n");
    }

    #[test]
    fn output_written_between_executions_comes_with_the_next_one() {
        let host = host();
        let started = run(
            &host,
            "bg",
            "import threading, time\n\
             threading.Thread(target=lambda: (time.sleep(0.3), print('late'))).start()",
        );
        assert_eq!(started["stdout"], "");
        std::thread::sleep(Duration::from_millis(600));
        let next = run(&host, "bg", "print('now')");
        assert_eq!(next["stdout"], "late\nnow\n");
    }

    #[test]
    fn an_exception_is_named_with_a_user_traceback() {
        let host = host();
        let answer = run(
            &host,
            "e",
            "def g():\n    raise ValueError('bad value')\ng()",
        );
        let exception = &answer["exception"];
        assert_eq!(exception["name"], "ValueError");
        assert_eq!(exception["value"], "bad value");
        let traceback = exception["traceback"].as_str().unwrap();
        assert!(
            traceback.starts_with("Traceback (most recent call last):\n"),
            "{traceback}"
        );
        assert!(
            traceback.contains("line 2, in g\n    raise ValueError('bad value')"),
            "{traceback}"
        );
        assert!(
            traceback.ends_with("ValueError: bad value\n"),
            "{traceback}"
        );
        assert!(!traceback.contains("paddock-context"), "{traceback}");
        let syntax = run(&host, "e", "x = (");
        assert_eq!(syntax["exception"]["name"], "SyntaxError");
        // The context goes on.
        assert_eq!(run(&host, "e", "1 + 1")["results"][0]["text/plain"], "2");
    }

    #[test]
    fn a_timeout_interrupts_and_the_names_stay() {
        let host = host();
        run(&host, "t", "kept = 'yes'");
        let started = Instant::now();
        let answer = host
            .handle(execute("t", "while True: pass", Some(300)), &mut |_, _| {
                true
            })
            .unwrap();
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(answer["timed_out"], true);
        assert_eq!(answer["interrupted"], true);
        assert_eq!(answer["restarted"], false);
        assert_eq!(answer["exception"]["name"], "KeyboardInterrupt");
        assert_eq!(run(&host, "t", "kept")["results"][0]["text/plain"], "'yes'");
    }

    #[test]
    fn an_interpreter_deaf_to_the_interrupt_is_replaced() {
        let host = ContextHost::new(ContextOptions {
            interrupt_grace: Duration::from_millis(300),
            ..ContextOptions::default()
        });
        run(&host, "deaf", "lost = 1");
        let pid = pid_of(&host, "deaf");
        let answer = host
            .handle(
                execute(
                    "deaf",
                    "import time\nwhile True:\n    try:\n        time.sleep(10)\n    except KeyboardInterrupt:\n        pass",
                    Some(200),
                ),
                &mut |_, _| true,
            )
            .unwrap();
        assert_eq!(answer["timed_out"], true, "{answer}");
        assert_eq!(answer["restarted"], true, "{answer}");
        assert!(
            answer["notes"][0]
                .as_str()
                .unwrap()
                .contains("names are lost")
        );
        assert!(process_gone(pid));
        let after = run(&host, "deaf", "'lost' in dir()");
        assert_eq!(after["results"][0]["text/plain"], "False");
        assert_eq!(after["execution_count"], 1);
    }

    #[test]
    fn a_caller_that_leaves_interrupts_the_execution() {
        let host = host();
        let started = Instant::now();
        let answer = host
            .handle(
                execute(
                    "c",
                    "import time\nfor i in range(100):\n    time.sleep(0.1)\nfinished = True",
                    None,
                ),
                &mut |_, _| started.elapsed() < Duration::from_millis(300),
            )
            .unwrap();
        assert!(started.elapsed() < Duration::from_secs(3));
        assert_eq!(answer["interrupted"], true);
        assert_eq!(answer["timed_out"], false);
        let check = run(&host, "c", "'finished' in dir(), i < 99");
        assert_eq!(check["results"][0]["text/plain"], "(False, True)");
    }

    #[test]
    fn contexts_are_isolated_and_run_in_parallel() {
        let host = Arc::new(host());
        run(&host, "one", "name = 'one'");
        run(&host, "two", "name = 'two'");
        let threads: Vec<_> = ["one", "two"]
            .into_iter()
            .map(|id| {
                let host = host.clone();
                std::thread::spawn(move || run(&host, id, "import time\ntime.sleep(1)\nname"))
            })
            .collect();
        let started = Instant::now();
        let answers: Vec<Value> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        assert!(
            started.elapsed() < Duration::from_millis(1900),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(answers[0]["results"][0]["text/plain"], "'one'");
        assert_eq!(answers[1]["results"][0]["text/plain"], "'two'");
        assert_ne!(pid_of(&host, "one"), pid_of(&host, "two"));
    }

    #[test]
    fn requests_that_cannot_be_served_are_typed_errors() {
        let host = host();
        let create = || ContextRequest::Create {
            id: "x".into(),
            cwd: None,
            env: BTreeMap::new(),
        };
        let created = host.handle(create(), &mut |_, _| true).unwrap();
        assert!(created["pid"].as_u64().is_some());
        let code = |request| host.handle(request, &mut |_, _| true).unwrap_err().code();
        assert_eq!(code(create()), "context:exists");
        assert_eq!(
            code(ContextRequest::Restart { id: "nope".into() }),
            "context:not_found"
        );
        assert_eq!(
            code(ContextRequest::Remove { id: "nope".into() }),
            "context:not_found"
        );
        assert_eq!(code(execute("bad id", "1", None)), "context:invalid_id");
        assert_eq!(
            code(ContextRequest::Create {
                id: "y".into(),
                cwd: Some("/nonexistent/dir".into()),
                env: BTreeMap::new(),
            }),
            "context:start_failed"
        );
        let empty = tempfile::tempdir().unwrap();
        let path = empty.path().display().to_string();
        let err = host
            .handle(
                ContextRequest::Execute {
                    id: "nopython".into(),
                    code: "1".into(),
                    timeout_ms: None,
                    cwd: None,
                    env: [("PATH".to_owned(), path.clone())].into_iter().collect(),
                },
                &mut |_, _| true,
            )
            .unwrap_err();
        assert_eq!(err.code(), "context:start_failed");
        let message = err.to_string();
        assert!(
            message.contains("python3 was not found on PATH"),
            "{message}"
        );
        assert!(message.contains(&path), "{message}");
        // Failed starts leave no context behind.
        let list = host.handle(ContextRequest::List, &mut |_, _| true).unwrap();
        let ids: Vec<&str> = list["contexts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["x"]);
    }

    #[test]
    fn restart_keeps_the_directory_and_environment() {
        let host = host();
        let dir = tempfile::tempdir().unwrap();
        let created = host
            .handle(
                ContextRequest::Create {
                    id: "r".into(),
                    cwd: Some(dir.path().display().to_string()),
                    env: [("PADDOCK_TEST_VALUE".to_owned(), "v1".to_owned())]
                        .into_iter()
                        .collect(),
                },
                &mut |_, _| true,
            )
            .unwrap();
        run(&host, "r", "mark = 1");
        let restarted = host
            .handle(ContextRequest::Restart { id: "r".into() }, &mut |_, _| true)
            .unwrap();
        assert_eq!(restarted["restarted"], true);
        assert_ne!(restarted["pid"], created["pid"]);
        assert!(process_gone(created["pid"].as_u64().unwrap()));
        let answer = run(
            &host,
            "r",
            "import os\n(os.getcwd(), os.environ['PADDOCK_TEST_VALUE'], os.environ['MPLBACKEND'], 'mark' in dir())",
        );
        let expected = format!(
            "({:?}, 'v1', 'Agg', False)",
            dir.path().canonicalize().unwrap().display().to_string()
        )
        .replace('"', "'");
        assert_eq!(answer["results"][0]["text/plain"], expected);
        assert_eq!(answer["execution_count"], 1);
    }

    #[test]
    fn a_dead_interpreter_is_reported_then_replaced() {
        let host = host();
        run(&host, "k", "gone = 1");
        // Dies within an execution.
        let err = host
            .handle(execute("k", "import os\nos._exit(7)", None), &mut |_, _| {
                true
            })
            .unwrap_err();
        assert_eq!(err.code(), "context:died");
        assert!(err.to_string().contains("exited with status 7"), "{err}");
        let after = run(&host, "k", "'gone' in dir()");
        assert_eq!(after["restarted"], true);
        assert_eq!(after["results"][0]["text/plain"], "False");
        // Killed from outside between two executions.
        let pid = pid_of(&host, "k");
        signal_pid(u32::try_from(pid).unwrap(), rustix::process::Signal::KILL);
        wait_until("the list says the context is dead", || {
            let list = host.handle(ContextRequest::List, &mut |_, _| true).unwrap();
            list["contexts"][0]["alive"] == false
        });
        let err = host
            .handle(execute("k", "1", None), &mut |_, _| true)
            .unwrap_err();
        assert_eq!(err.code(), "context:died");
        assert!(err.to_string().contains("SIGKILL"), "{err}");
        assert!(process_gone(pid));
        assert_eq!(run(&host, "k", "2")["results"][0]["text/plain"], "2");
    }

    #[test]
    fn remove_and_close_all_leave_no_process_behind() {
        let host = host();
        // Each context leaves a child in its group and one in a session of its own.
        let spawn = "import subprocess\nkids = [subprocess.Popen(['sleep', '300']), \
                     subprocess.Popen(['sleep', '301'], start_new_session=True)]\n\
                     [k.pid for k in kids]";
        let mut pids = Vec::new();
        for id in ["r1", "r2", "r3"] {
            let answer = run(&host, id, spawn);
            let kids: Vec<u64> =
                serde_json::from_str(answer["results"][0]["text/plain"].as_str().unwrap()).unwrap();
            pids.push(pid_of(&host, id));
            pids.extend(kids);
        }
        let removed = host
            .handle(ContextRequest::Remove { id: "r1".into() }, &mut |_, _| true)
            .unwrap();
        assert_eq!(removed, json!({"context": "r1", "removed": true}));
        for pid in &pids[..3] {
            wait_until(&format!("process {pid} ended"), || process_gone(*pid));
        }
        assert!(pids[3..].iter().all(|pid| !process_gone(*pid)));
        host.close_all();
        for pid in &pids {
            wait_until(&format!("process {pid} ended"), || process_gone(*pid));
        }
        let list = host.handle(ContextRequest::List, &mut |_, _| true).unwrap();
        assert_eq!(list, json!({"contexts": []}));
        assert_eq!(
            host.handle(execute("r4", "1", None), &mut |_, _| true)
                .unwrap_err()
                .code(),
            "context:failed"
        );
    }

    #[test]
    fn a_flood_of_output_is_cut_in_the_answer_but_streamed_whole() {
        let host = host();
        let mut streamed = 0usize;
        let answer = host
            .handle(
                execute(
                    "f",
                    "import sys\nfor i in range(30000):\n    print('x' * 99)",
                    None,
                ),
                &mut |_, data| {
                    streamed += data.len();
                    true
                },
            )
            .unwrap();
        assert_eq!(streamed, 3_000_000);
        let cut = answer["stdout_cut_bytes"].as_u64().unwrap();
        assert_eq!(cut, 3_000_000 - STREAM_KEEP_BYTES as u64);
        assert!(
            answer["stdout"]
                .as_str()
                .unwrap()
                .contains("bytes of stdout cut here")
        );
    }
}
