//! The sandbox pool: one zygote per engine, a few confined children forked ahead of need, and a
//! limit on how many scripts run at once. Whatever dies is replaced: a dead zygote is respawned
//! on the next request, a dead idle child is discarded.

use std::collections::{HashMap, VecDeque};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use paddock_sandbox_worker::wire::{HEADER_BYTES, Message, WireError, payload_len};
use paddock_sandbox_worker::zygote::{ZygoteEvent, ZygoteProcess, ZygoteReader};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

/// How a child ended, as the zygote saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitInfo {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

/// Errors of the pool itself.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error("sandbox: {0}")]
    Sandbox(#[from] paddock_sandbox_worker::SandboxError),
    #[error("the sandbox zygote is gone")]
    ZygoteGone,
    #[error("the zygote could not fork a child: {0}")]
    ForkFailed(String),
    #[error("sandbox child refused to start without confinement: {0}")]
    ConfinementFailed(String),
    #[error("sandbox child: {0}")]
    Wire(#[from] WireError),
    #[error("sandbox pool task failed: {0}")]
    Join(String),
}

/// Pool settings.
#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// The `paddock` binary to re-execute as the zygote.
    pub exe: PathBuf,
    /// Children kept ready.
    pub prefork: usize,
    /// Scripts running at once.
    pub max_concurrency: usize,
    /// Kernel features the sandbox may run without (`[codemode] degraded`; empty = none).
    pub degraded: Vec<String>,
}

impl PoolConfig {
    pub fn for_current_exe(prefork: usize, max_concurrency: usize) -> std::io::Result<Self> {
        Ok(Self {
            exe: std::env::current_exe()?,
            prefork,
            max_concurrency: max_concurrency.max(1),
            degraded: Vec::new(),
        })
    }
}

enum ExitSlot {
    Waiting(oneshot::Sender<ExitInfo>),
    Done(ExitInfo),
    Ignore,
}

/// Where the zygote's answer to one fork request goes.
type ForkReply = oneshot::Sender<Result<(i32, OwnedFd), String>>;

/// The engine's live connection to one zygote.
struct ZygoteLink {
    process: Mutex<ZygoteProcess>,
    pending_forks: Mutex<VecDeque<ForkReply>>,
    exits: Mutex<HashMap<i32, ExitSlot>>,
    alive: AtomicBool,
}

/// Locks `m`, taking over a poisoned lock (its data stays consistent: no code here panics
/// halfway through an update).
pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

impl ZygoteLink {
    /// Starts a zygote and the thread that reads its events. The zygote is spawned *on* that
    /// thread because its PR_SET_PDEATHSIG fires when the thread that spawned it exits, not the
    /// process: spawned from a tokio blocking thread, it was SIGKILLed (with any script running
    /// in it) as soon as that thread retired after 10 s idle. The reader thread lives exactly as
    /// long as the zygote.
    fn start(exe: &std::path::Path, degraded: &[String]) -> Result<Arc<Self>, PoolError> {
        let (exe, degraded) = (exe.to_path_buf(), degraded.to_vec());
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("zygote-reader".into())
            .spawn(move || {
                let started = ZygoteProcess::spawn(&exe, &degraded).and_then(|process| {
                    let reader = process.reader()?;
                    Ok((process, reader))
                });
                let (process, reader) = match started {
                    Ok(started) => started,
                    Err(err) => {
                        let _ = started_tx.send(Err(PoolError::from(err)));
                        return;
                    }
                };
                tracing::debug!(
                    pid = process.pid(),
                    init_ms = process.init_ms,
                    "sandbox zygote ready"
                );
                let link = Arc::new(Self {
                    process: Mutex::new(process),
                    pending_forks: Mutex::default(),
                    exits: Mutex::default(),
                    alive: AtomicBool::new(true),
                });
                let weak = Arc::downgrade(&link);
                // Nobody waits any more: dropping the link kills the zygote.
                if started_tx.send(Ok(link)).is_err() {
                    return;
                }
                Self::read_events(&reader, &weak);
            })
            .map_err(|e| PoolError::Join(e.to_string()))?;
        started_rx.recv().map_err(|_| {
            PoolError::Join("the zygote thread ended before the zygote started".into())
        })?
    }

    /// Dispatches the zygote's events until it exits or the link is dropped.
    fn read_events(reader: &ZygoteReader, weak: &std::sync::Weak<Self>) {
        loop {
            let event = reader.next_event();
            let Some(link) = weak.upgrade() else { return };
            match event {
                Ok(Some(ZygoteEvent::Forked { pid, socket })) => {
                    if let Some(tx) = lock(&link.pending_forks).pop_front() {
                        let _ = tx.send(Ok((pid, socket)));
                    }
                }
                Ok(Some(ZygoteEvent::ForkFailed { reason })) => {
                    if let Some(tx) = lock(&link.pending_forks).pop_front() {
                        let _ = tx.send(Err(reason));
                    }
                }
                Ok(Some(ZygoteEvent::Exited { pid, code, signal })) => {
                    link.record_exit(pid, ExitInfo { code, signal });
                }
                Ok(None) | Err(_) => {
                    if let Err(err) = event {
                        tracing::error!(%err, "sandbox zygote connection failed");
                    } else {
                        tracing::warn!("sandbox zygote exited; the next script starts a new one");
                    }
                    link.alive.store(false, Ordering::SeqCst);
                    for tx in lock(&link.pending_forks).drain(..) {
                        let _ = tx.send(Err("the zygote exited".into()));
                    }
                    return;
                }
            }
        }
    }

    fn record_exit(&self, pid: i32, info: ExitInfo) {
        let mut exits = lock(&self.exits);
        match exits.remove(&pid) {
            Some(ExitSlot::Waiting(tx)) => {
                let _ = tx.send(info);
            }
            Some(ExitSlot::Ignore) => {}
            Some(ExitSlot::Done(_)) | None => {
                exits.insert(pid, ExitSlot::Done(info));
            }
        }
    }

    /// Waits (briefly) for how `pid` ended.
    async fn exit_of(&self, pid: i32, wait: Duration) -> Option<ExitInfo> {
        let rx = {
            let mut exits = lock(&self.exits);
            match exits.remove(&pid) {
                Some(ExitSlot::Done(info)) => return Some(info),
                _ => {
                    let (tx, rx) = oneshot::channel();
                    exits.insert(pid, ExitSlot::Waiting(tx));
                    rx
                }
            }
        };
        let info = tokio::time::timeout(wait, rx)
            .await
            .ok()
            .and_then(Result::ok);
        if info.is_none() {
            lock(&self.exits).insert(pid, ExitSlot::Ignore);
        }
        info
    }

    /// Nobody will ask how `pid` ended.
    fn forget(&self, pid: i32) {
        let mut exits = lock(&self.exits);
        if let Some(ExitSlot::Done(_)) = exits.remove(&pid) {
            return;
        }
        exits.insert(pid, ExitSlot::Ignore);
    }

    async fn fork(&self) -> Result<(i32, OwnedFd), PoolError> {
        if !self.alive.load(Ordering::SeqCst) {
            return Err(PoolError::ZygoteGone);
        }
        let (tx, rx) = oneshot::channel();
        {
            // Queue the waiter and send under one lock so answers match requests in order.
            let mut pending = lock(&self.pending_forks);
            pending.push_back(tx);
            if let Err(err) = lock(&self.process).request_fork() {
                pending.pop_back();
                self.alive.store(false, Ordering::SeqCst);
                return Err(err.into());
            }
        }
        match rx.await {
            Ok(Ok(pair)) => Ok(pair),
            Ok(Err(reason)) => Err(PoolError::ForkFailed(reason)),
            Err(_) => Err(PoolError::ZygoteGone),
        }
    }
}

/// A confined child waiting for its script.
pub struct ReadyChild {
    pub pid: i32,
    reader: OwnedReadHalf,
    writer: OwnedWriteHalf,
    link: Arc<ZygoteLink>,
}

/// A child checked out for one script (its read half is handed out separately).
pub struct Checkout {
    pub pid: i32,
    /// Kill the child when this checkout is dropped: its script has not reported an end (the
    /// run was cancelled, e.g. an MCP client gave up on the call).
    armed: bool,
    writer: OwnedWriteHalf,
    link: Arc<ZygoteLink>,
    /// The concurrency slot of the script running in the child. A notebook child keeps its
    /// state between scripts but gives the slot back while it waits.
    slot: Option<OwnedSemaphorePermit>,
    /// The pool to refill when this checkout ends: while other children were idle at checkout,
    /// forking the replacement waits until the script is over instead of competing with it for
    /// the CPU.
    refill_later: Option<SandboxPool>,
}

impl Checkout {
    /// Takes a concurrency slot for the next script of a notebook child.
    pub fn hold_slot(&mut self, slot: OwnedSemaphorePermit) {
        self.slot = Some(slot);
    }

    /// Gives the slot back: the child waits for its session's next script.
    pub fn release_slot(&mut self) {
        self.slot = None;
    }

    /// Refills the pool now rather than when this checkout ends (a notebook child is kept for
    /// a whole session).
    pub fn refill_now(&mut self) {
        if let Some(pool) = self.refill_later.take() {
            pool.spawn_refill();
        }
    }

    /// True while the zygote that forked the child is alive (a child dies with it).
    pub fn zygote_alive(&self) -> bool {
        self.link.alive.load(Ordering::SeqCst)
    }

    /// Sends one message to the child.
    pub async fn send(&mut self, message: &Message) -> Result<(), PoolError> {
        let frame = message.to_frame()?;
        self.writer
            .write_all(&frame)
            .await
            .map_err(WireError::from)?;
        Ok(())
    }

    /// SIGKILLs the child. The zygote has not reaped it until it reports the exit, so the pid
    /// cannot have been reused yet.
    pub fn kill(&self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }

    /// True when the zygote has already reported the child's end (a notebook child that died
    /// while it waited for its next script).
    pub fn has_exited(&self) -> bool {
        matches!(
            lock(&self.link.exits).get(&self.pid),
            Some(ExitSlot::Done(_))
        )
    }

    pub async fn exit_info(&self, wait: Duration) -> Option<ExitInfo> {
        self.link.exit_of(self.pid, wait).await
    }

    /// The conversation is over (the script ended, or the child was killed or died): stop
    /// tracking its exit, and dropping no longer kills.
    pub fn forget_exit(&mut self) {
        self.armed = false;
        self.link.forget(self.pid);
    }
}

impl Drop for Checkout {
    fn drop(&mut self) {
        self.refill_now();
        if self.armed {
            // The zygote has not reaped the child (its exit is unreported), so the pid is still
            // this child's.
            self.kill();
            self.link.forget(self.pid);
        }
    }
}

/// A child kept past one script (a notebook's) and the reader of its frames (bytes already read
/// stay buffered in it).
pub struct LiveChild {
    pub checkout: Checkout,
    pub frames: FrameReader,
}

/// Reads frames from a child. `next` is cancel-safe (bytes read stay in the buffer), so it can
/// sit in a `select!` loop without a reader task in between.
pub struct FrameReader {
    half: OwnedReadHalf,
    buf: Vec<u8>,
    start: usize,
}

impl FrameReader {
    pub fn new(half: OwnedReadHalf) -> Self {
        Self {
            half,
            buf: Vec::with_capacity(64 * 1024),
            start: 0,
        }
    }

    fn take_frame(&mut self) -> Result<Option<Message>, WireError> {
        let available = &self.buf[self.start..];
        if available.len() < HEADER_BYTES {
            return Ok(None);
        }
        let mut header = [0u8; HEADER_BYTES];
        header.copy_from_slice(&available[..HEADER_BYTES]);
        let len = payload_len(header)?;
        if available.len() < HEADER_BYTES + len {
            return Ok(None);
        }
        let message = Message::from_payload(&available[HEADER_BYTES..HEADER_BYTES + len])?;
        self.start += HEADER_BYTES + len;
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        } else if self.start > 1 << 20 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        Ok(Some(message))
    }

    pub async fn next(&mut self) -> Result<Message, WireError> {
        loop {
            if let Some(message) = self.take_frame()? {
                return Ok(message);
            }
            self.buf.reserve(64 * 1024);
            let n = self.half.read_buf(&mut self.buf).await?;
            if n == 0 {
                return Err(if self.buf.len() == self.start {
                    WireError::Closed
                } else {
                    WireError::Io(std::io::ErrorKind::UnexpectedEof.into())
                });
            }
        }
    }
}

/// Reads one frame from a child.
pub async fn read_frame(reader: &mut OwnedReadHalf) -> Result<Message, WireError> {
    let mut header = [0u8; HEADER_BYTES];
    match reader.read_exact(&mut header).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Err(WireError::Closed),
        Err(e) => return Err(e.into()),
    }
    let len = payload_len(header)?;
    let mut payload = vec![0u8; len];
    reader.read_exact(&mut payload).await?;
    Message::from_payload(&payload)
}

struct PoolInner {
    config: PoolConfig,
    zygote: tokio::sync::Mutex<Option<Arc<ZygoteLink>>>,
    idle: Mutex<VecDeque<ReadyChild>>,
    forking: AtomicUsize,
    permits: Arc<Semaphore>,
}

/// The engine's pool of sandbox children. Cheap to clone.
#[derive(Clone)]
pub struct SandboxPool {
    inner: Arc<PoolInner>,
}

impl SandboxPool {
    pub fn new(config: PoolConfig) -> Self {
        let permits = Arc::new(Semaphore::new(config.max_concurrency));
        Self {
            inner: Arc::new(PoolInner {
                config,
                zygote: tokio::sync::Mutex::new(None),
                idle: Mutex::default(),
                forking: AtomicUsize::new(0),
                permits,
            }),
        }
    }

    /// Starts the zygote and fills the idle pool now instead of on the first script.
    pub async fn warm_up(&self) -> Result<(), PoolError> {
        self.zygote().await?;
        self.refill().await;
        Ok(())
    }

    /// Number of children ready right now.
    pub fn idle_children(&self) -> usize {
        lock(&self.inner.idle).len()
    }

    /// Pids of the idle children (for memory measurements).
    pub fn idle_pids(&self) -> Vec<i32> {
        lock(&self.inner.idle).iter().map(|c| c.pid).collect()
    }

    async fn zygote(&self) -> Result<Arc<ZygoteLink>, PoolError> {
        let mut slot = self.inner.zygote.lock().await;
        if let Some(link) = slot.as_ref()
            && link.alive.load(Ordering::SeqCst)
        {
            return Ok(link.clone());
        }
        let exe = self.inner.config.exe.clone();
        let degraded = self.inner.config.degraded.clone();
        let link = tokio::task::spawn_blocking(move || ZygoteLink::start(&exe, &degraded))
            .await
            .map_err(|e| PoolError::Join(e.to_string()))??;
        *slot = Some(link.clone());
        Ok(link)
    }

    async fn fork_ready_child(&self) -> Result<ReadyChild, PoolError> {
        let link = self.zygote().await?;
        let (pid, socket) = link.fork().await?;
        let stream = std::os::unix::net::UnixStream::from(socket);
        stream.set_nonblocking(true).map_err(WireError::from)?;
        let stream = UnixStream::from_std(stream).map_err(WireError::from)?;
        let (mut reader, writer) = stream.into_split();
        match read_frame(&mut reader).await {
            Ok(Message::ChildReady { confinement }) => {
                tracing::trace!(pid, %confinement, "sandbox child ready");
                Ok(ReadyChild {
                    pid,
                    reader,
                    writer,
                    link,
                })
            }
            Ok(Message::ConfinementFailed { reason }) => {
                link.forget(pid);
                Err(PoolError::ConfinementFailed(reason))
            }
            Ok(other) => {
                link.forget(pid);
                Err(PoolError::Sandbox(
                    paddock_sandbox_worker::SandboxError::Protocol(format!(
                        "child sent {other:?} before it was ready"
                    )),
                ))
            }
            Err(err) => {
                let info = link.exit_of(pid, Duration::from_millis(500)).await;
                Err(PoolError::ForkFailed(format!(
                    "child {pid} died while starting ({err}; exit {info:?})"
                )))
            }
        }
    }

    /// Waits for one of the `max_concurrency` slots scripts run in.
    pub async fn slot(&self) -> Result<OwnedSemaphorePermit, PoolError> {
        self.inner
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|e| PoolError::Join(e.to_string()))
    }

    /// Checks out a confined child for one script, waiting for a concurrency slot first.
    pub async fn checkout(&self) -> Result<(Checkout, OwnedReadHalf), PoolError> {
        let permit = self.slot().await?;
        let (child, others_idle) = loop {
            let (candidate, left) = {
                let mut idle = lock(&self.inner.idle);
                let candidate = idle.pop_front();
                (candidate, idle.len())
            };
            match candidate {
                Some(child) if child.link.alive.load(Ordering::SeqCst) => break (child, left),
                Some(stale) => {
                    stale.link.forget(stale.pid);
                    continue;
                }
                None => break (self.fork_ready_child().await?, 0),
            }
        };
        // With no child left idle the next script would wait for a fork: refill now.
        // Otherwise the fork waits until this script is over (on a small machine it would
        // otherwise share the CPU with the script).
        let refill_later = if others_idle == 0 {
            self.spawn_refill();
            None
        } else {
            Some(self.clone())
        };
        let checkout = Checkout {
            pid: child.pid,
            armed: true,
            writer: child.writer,
            link: child.link,
            slot: Some(permit),
            refill_later,
        };
        Ok((checkout, child.reader))
    }

    /// Refills the idle pool in the background. Outside a runtime (a checkout dropped while
    /// the program shuts down) there is nothing to refill for.
    fn spawn_refill(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let pool = self.clone();
        runtime.spawn(async move { pool.refill().await });
    }

    async fn refill(&self) {
        loop {
            let have = lock(&self.inner.idle).len() + self.inner.forking.load(Ordering::SeqCst);
            if have >= self.inner.config.prefork {
                return;
            }
            self.inner.forking.fetch_add(1, Ordering::SeqCst);
            let result = self.fork_ready_child().await;
            self.inner.forking.fetch_sub(1, Ordering::SeqCst);
            match result {
                Ok(child) => lock(&self.inner.idle).push_back(child),
                Err(err) => {
                    tracing::warn!(%err, "could not pre-fork a sandbox child");
                    return;
                }
            }
        }
    }

    /// Pid of the current zygote, if one runs.
    pub async fn zygote_pid(&self) -> Option<u32> {
        let slot = self.inner.zygote.lock().await;
        slot.as_ref()
            .filter(|l| l.alive.load(Ordering::SeqCst))
            .map(|l| lock(&l.process).pid())
    }
}
