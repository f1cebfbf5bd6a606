//! Watching a directory with inotify, for the `watch_files` tool: [`watch`] reports what is
//! created, modified, removed and renamed in a directory (and, if asked, in every directory under
//! it) as it happens, until a deadline or a number of events.
//!
//! A move is reported the way E2B reports it (E2B's envd uses fsnotify, which maps inotify so):
//! the old path as [`WatchKind::Renamed`], the new path as [`WatchKind::Created`]. A move within
//! the watched tree gives both; a move in from outside only the `created`, a move out only the
//! `renamed`. So a reader that keeps the set of paths that exist adds a path on `created` and
//! drops it on `removed` and `renamed`, whatever the move's ends.
//!
//! What is not reported: events in a subdirectory that cannot be watched (no permission to read
//! it; it is skipped, not an error); the contents of a directory moved into the tree (it is
//! watched from then on, but what it held is not announced as created, unlike a directory
//! created during the watch, whose contents are, since they may predate its watch).

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use rustix::io::Errno;
use serde::{Deserialize, Serialize};

/// The sysctl that bounds the watches of a user (one per watched directory).
const MAX_USER_WATCHES: &str = "fs.inotify.max_user_watches";
/// The sysctl that bounds the inotify instances of a user (one per running watch).
const MAX_USER_INSTANCES: &str = "fs.inotify.max_user_instances";
/// The sysctl that bounds the events the kernel queues for an instance before dropping them.
const MAX_QUEUED_EVENTS: &str = "fs.inotify.max_queued_events";

/// Bytes read from the inotify fd at once: room for at least 240 events of the largest size
/// (a header and a 255-byte name), so a burst costs few reads.
const READ_BUFFER_BYTES: usize = 64 * 1024;
/// Raw events handled (and their reports delivered) at most per round, so that a directory
/// written to without pause still gets its events delivered and its deadline checked.
const MAX_BATCH: usize = 4096;
/// The longest single poll: a deadline further away is waited for in steps of this, which
/// keeps the conversion to a `Timespec` trivially in range.
const MAX_POLL_WAIT: Duration = Duration::from_secs(3600);

/// What happened to a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WatchKind {
    /// Created, or moved here (the new name of a move).
    Created,
    /// Written to, closed after writing, or its metadata (mode, owner, times) changed.
    Modified,
    /// Deleted.
    Removed,
    /// Moved away from this path (the old name of a move).
    Renamed,
}

/// One change under the watched directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchEvent {
    /// The absolute path that changed (lossily converted if it is not UTF-8).
    pub path: String,
    pub kind: WatchKind,
}

/// How a watch ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchOutcome {
    /// The events passed to `on_event` (including one it answered `false` to).
    pub events: usize,
    /// The timeout passed.
    pub timed_out: bool,
    /// Why the watch stopped before its timeout, if it did: `max_events` reached, the receiver
    /// gone, the watched directory removed or moved, events lost.
    pub ended: Option<String>,
}

/// Why a watch could not start, or failed while it ran.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// A relative path: the agent's current directory is not the session's, so the caller
    /// resolves it.
    #[error("{}: not an absolute path; resolve it against the session's directory", .path.display())]
    NotAbsolute { path: PathBuf },
    #[error("{}: no such directory", .path.display())]
    NotFound { path: PathBuf },
    #[error("{}: not a directory; watch the directory that holds it", .path.display())]
    NotADirectory { path: PathBuf },
    #[error("{}: permission denied", .path.display())]
    PermissionDenied { path: PathBuf },
    /// The kernel's inotify limit for the user: too many watched directories, or too many
    /// running watches (then possibly the process's open-file limit instead).
    #[error("watching {}: the inotify limit is reached; raise the sysctl {sysctl}", .path.display())]
    TooManyWatches { path: PathBuf, sysctl: &'static str },
    #[error("{op} {}: {source}", .path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl WatchError {
    /// The stable error code the tool reports.
    pub fn code(&self) -> &'static str {
        match self {
            WatchError::NotAbsolute { .. } => "watch:invalid_argument",
            WatchError::NotFound { .. } => "watch:not_found",
            WatchError::NotADirectory { .. } => "watch:not_a_directory",
            WatchError::PermissionDenied { .. } => "watch:permission_denied",
            WatchError::TooManyWatches { .. } => "watch:too_many_watches",
            WatchError::Io { .. } => "watch:io",
        }
    }

    fn io(op: &'static str, path: &Path, errno: Errno) -> Self {
        WatchError::Io {
            op,
            path: path.to_path_buf(),
            source: errno.into(),
        }
    }
}

/// Watches the directory `path` (absolute) for up to `timeout`, and with `recursive` every
/// directory under it (those there at the start and those that appear during the watch). Calls
/// `on_event` for each event as it is read; an answer of `false` (the receiver went away) ends
/// the watch at once, and so does the `max_events`-th event.
///
/// Bursts are coalesced: the `modified` events of a file read together are reported once, at
/// the place of the last one. The watched directory being removed or moved ends the watch
/// (after its `removed` or `renamed` event), as does a kernel queue overflow (events were lost).
pub fn watch(
    path: &Path,
    recursive: bool,
    timeout: Duration,
    max_events: usize,
    on_event: &mut dyn FnMut(&WatchEvent) -> bool,
) -> Result<WatchOutcome, WatchError> {
    watch_with_ready(path, recursive, timeout, max_events, on_event, &mut || {})
}

/// [`watch`], calling `on_ready` once every initial watch is in place, before the first wait:
/// what changes from then on is reported. (Tests make their changes only after it.)
fn watch_with_ready(
    path: &Path,
    recursive: bool,
    timeout: Duration,
    max_events: usize,
    on_event: &mut dyn FnMut(&WatchEvent) -> bool,
    on_ready: &mut dyn FnMut(),
) -> Result<WatchOutcome, WatchError> {
    let root = checked_root(path)?;
    let mut watcher = Watcher::start(root, recursive)?;
    // A timeout too large for the clock is no deadline at all.
    let deadline = Instant::now().checked_add(timeout);
    let mut outcome = WatchOutcome {
        events: 0,
        timed_out: false,
        ended: None,
    };
    if max_events == 0 {
        outcome.ended = Some(max_events_reached(max_events));
        return Ok(outcome);
    }
    on_ready();
    let mut buf = vec![MaybeUninit::<u8>::uninit(); READ_BUFFER_BYTES];
    loop {
        let wait = match deadline {
            Some(at) => {
                let left = at.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    outcome.timed_out = true;
                    return Ok(outcome);
                }
                left.min(MAX_POLL_WAIT)
            }
            None => MAX_POLL_WAIT,
        };
        // Cannot fail: `wait` is at most `MAX_POLL_WAIT`.
        let wait = Timespec::try_from(wait).unwrap_or(Timespec {
            tv_sec: 3600,
            tv_nsec: 0,
        });
        let mut fds = [PollFd::new(&watcher.fd, PollFlags::IN)];
        match rustix::event::poll(&mut fds, Some(&wait)) {
            // Nothing yet: the loop's top checks the deadline.
            Ok(0) | Err(Errno::INTR) => continue,
            Ok(_) => {}
            Err(errno) => return Err(WatchError::io("poll", &watcher.root, errno)),
        }
        let raw = read_batch(&watcher.fd, &mut buf)
            .map_err(|errno| WatchError::io("read inotify events of", &watcher.root, errno))?;
        let budget = max_events.saturating_sub(outcome.events);
        let (batch, end) = watcher.handle(&raw, budget);
        for event in batch.into_events() {
            outcome.events += 1;
            if !on_event(&event) {
                outcome.ended = Some("the receiver went away".into());
                return Ok(outcome);
            }
            if outcome.events >= max_events {
                outcome.ended = Some(max_events_reached(max_events));
                return Ok(outcome);
            }
        }
        if let Some(end) = end {
            outcome.ended = Some(end);
            return Ok(outcome);
        }
    }
}

fn max_events_reached(max_events: usize) -> String {
    format!("{max_events} events, the most asked for")
}

/// `path`, checked to be an existing directory and normalized (no `.`, no trailing slash), so
/// that the paths of events are clean joins of it.
fn checked_root(path: &Path) -> Result<PathBuf, WatchError> {
    if !path.is_absolute() {
        return Err(WatchError::NotAbsolute {
            path: path.to_path_buf(),
        });
    }
    let root: PathBuf = path
        .components()
        .filter(|c| *c != Component::CurDir)
        .collect();
    match std::fs::metadata(&root) {
        Ok(meta) if meta.is_dir() => Ok(root),
        Ok(_) => Err(WatchError::NotADirectory { path: root }),
        Err(err) => match Errno::from_io_error(&err) {
            // A component that is a file (`/etc/passwd/x`) means the path does not exist.
            Some(Errno::NOENT | Errno::NOTDIR) => Err(WatchError::NotFound { path: root }),
            Some(Errno::ACCESS | Errno::PERM) => Err(WatchError::PermissionDenied { path: root }),
            _ => Err(WatchError::Io {
                op: "stat",
                path: root,
                source: err,
            }),
        },
    }
}

/// What the watch asks the kernel for on every directory. `EXCL_UNLINK`: a file deleted but
/// still open reports nothing more (its writes are no longer the directory's business).
fn dir_flags() -> WatchFlags {
    WatchFlags::CREATE
        | WatchFlags::MODIFY
        | WatchFlags::CLOSE_WRITE
        | WatchFlags::ATTRIB
        | WatchFlags::DELETE
        | WatchFlags::DELETE_SELF
        | WatchFlags::MOVED_FROM
        | WatchFlags::MOVED_TO
        | WatchFlags::MOVE_SELF
        | WatchFlags::ONLYDIR
        | WatchFlags::EXCL_UNLINK
}

/// One event as read, owned (the reader's events borrow its buffer).
struct RawEvent {
    wd: i32,
    mask: ReadFlags,
    cookie: u32,
    /// The entry of the watched directory it concerns; `None` for the directory itself.
    name: Option<PathBuf>,
}

/// The events ready now (up to about [`MAX_BATCH`]), read without blocking.
fn read_batch(fd: &OwnedFd, buf: &mut [MaybeUninit<u8>]) -> Result<Vec<RawEvent>, Errno> {
    let mut reader = inotify::Reader::new(fd, buf);
    let mut raw = Vec::new();
    loop {
        match reader.next() {
            Ok(event) => raw.push(RawEvent {
                wd: event.wd(),
                mask: event.events(),
                cookie: event.cookie(),
                name: event
                    .file_name()
                    .map(|name| name.to_bytes())
                    .filter(|name| !name.is_empty())
                    .map(|name| PathBuf::from(OsStr::from_bytes(name))),
            }),
            Err(Errno::AGAIN) => return Ok(raw),
            Err(Errno::INTR) => continue,
            Err(errno) => return Err(errno),
        }
        // Only between reads: the reader's buffer is lost with it.
        if raw.len() >= MAX_BATCH && reader.is_buffer_empty() {
            return Ok(raw);
        }
    }
}

/// The reports of one round, with `modified` coalesced per path.
#[derive(Default)]
struct Batch {
    events: Vec<Option<WatchEvent>>,
    /// Where the last event of each path is in `events`.
    last: HashMap<String, usize>,
    len: usize,
}

impl Batch {
    fn push(&mut self, path: &Path, kind: WatchKind) {
        let path = path.to_string_lossy().into_owned();
        // A `modified` right after another of the same path (nothing else happened to the path
        // in between) replaces it: the later one is kept, so the report never precedes a write.
        if kind == WatchKind::Modified
            && let Some(&at) = self.last.get(&path)
            && let Some(slot) = self.events.get_mut(at)
            && slot
                .as_ref()
                .is_some_and(|earlier| earlier.kind == WatchKind::Modified)
        {
            *slot = None;
            self.len -= 1;
        }
        self.last.insert(path.clone(), self.events.len());
        self.events.push(Some(WatchEvent { path, kind }));
        self.len += 1;
    }

    fn len(&self) -> usize {
        self.len
    }

    fn into_events(self) -> impl Iterator<Item = WatchEvent> {
        self.events.into_iter().flatten()
    }
}

/// The inotify instance and what its watch descriptors stand for.
struct Watcher {
    fd: OwnedFd,
    root: PathBuf,
    root_wd: i32,
    recursive: bool,
    /// Every watched directory, by its watch descriptor.
    dirs: HashMap<i32, PathBuf>,
    /// Paths a scan of a new directory reported as created: their own `IN_CREATE` may still be
    /// queued, and is then not reported a second time.
    scanned: HashSet<PathBuf>,
    /// Cookies of this round's directory moves within the tree, whose watches were already
    /// given their new paths at the `IN_MOVED_FROM`.
    moved_within: HashSet<u32>,
}

impl Watcher {
    /// An inotify instance watching `root` and, recursive, every directory under it.
    fn start(root: PathBuf, recursive: bool) -> Result<Self, WatchError> {
        let fd =
            inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).map_err(
                |errno| match errno {
                    Errno::MFILE => WatchError::TooManyWatches {
                        path: root.clone(),
                        sysctl: MAX_USER_INSTANCES,
                    },
                    errno => WatchError::io("inotify_init", &root, errno),
                },
            )?;
        let root_wd = inotify::add_watch(&fd, &root, dir_flags()).map_err(|errno| match errno {
            Errno::NOENT => WatchError::NotFound { path: root.clone() },
            Errno::NOTDIR => WatchError::NotADirectory { path: root.clone() },
            Errno::ACCESS | Errno::PERM => WatchError::PermissionDenied { path: root.clone() },
            Errno::NOSPC => WatchError::TooManyWatches {
                path: root.clone(),
                sysctl: MAX_USER_WATCHES,
            },
            errno => WatchError::io("inotify_add_watch", &root, errno),
        })?;
        let mut watcher = Watcher {
            fd,
            root: root.clone(),
            root_wd,
            recursive,
            dirs: HashMap::from([(root_wd, root.clone())]),
            scanned: HashSet::new(),
            moved_within: HashSet::new(),
        };
        if recursive {
            let subdirs = subdirectories(&root).map_err(|err| match err.kind() {
                std::io::ErrorKind::PermissionDenied => {
                    WatchError::PermissionDenied { path: root.clone() }
                }
                _ => WatchError::Io {
                    op: "list",
                    path: root.clone(),
                    source: err,
                },
            })?;
            watcher
                .add_tree(subdirs, None, 0)
                .map_err(|full| WatchError::TooManyWatches {
                    path: full,
                    sysctl: MAX_USER_WATCHES,
                })?;
        }
        Ok(watcher)
    }

    /// Watches `dirs` and every directory under them. With `report`, what is in them goes into
    /// the batch as created (while it holds fewer than `budget` events): for a directory
    /// created during the watch, whose first entries may predate its watch. A directory that
    /// vanished or cannot be read is skipped; the error is the directory that hit the watch
    /// limit.
    fn add_tree(
        &mut self,
        mut dirs: Vec<PathBuf>,
        mut report: Option<&mut Batch>,
        budget: usize,
    ) -> Result<(), PathBuf> {
        while let Some(dir) = dirs.pop() {
            // DONT_FOLLOW: a subdirectory replaced by a symlink since it was listed must not
            // take the watch out of the tree.
            let wd = match inotify::add_watch(&self.fd, &dir, dir_flags() | WatchFlags::DONT_FOLLOW)
            {
                Ok(wd) => wd,
                Err(Errno::NOSPC) => return Err(dir),
                Err(_) => continue,
            };
            // A directory already watched (seen again through a bind mount, or created and
            // scanned already): its subtree is watched too.
            if self.dirs.contains_key(&wd) {
                continue;
            }
            self.dirs.insert(wd, dir.clone());
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                if let Some(batch) = report.as_deref_mut()
                    && batch.len() < budget
                {
                    batch.push(&path, WatchKind::Created);
                    self.scanned.insert(path.clone());
                }
                // Not following symlinks: the tree is what is under the root, and has no loops.
                if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                    dirs.push(path);
                }
            }
        }
        Ok(())
    }

    /// Turns one round of raw events into reports; the second half is why the watch ends, if
    /// it does.
    fn handle(&mut self, raw: &[RawEvent], budget: usize) -> (Batch, Option<String>) {
        let mut batch = Batch::default();
        let end = self.handle_into(raw, budget, &mut batch);
        // A move's two halves are matched within a round (see `moved_to`).
        self.moved_within.clear();
        (batch, end)
    }

    fn handle_into(
        &mut self,
        raw: &[RawEvent],
        budget: usize,
        batch: &mut Batch,
    ) -> Option<String> {
        for (at, event) in raw.iter().enumerate() {
            if event.mask.contains(ReadFlags::QUEUE_OVERFLOW) {
                return Some(format!(
                    "events were lost: the kernel's inotify queue overflowed; raise the sysctl \
                     {MAX_QUEUED_EVENTS}"
                ));
            }
            // A directory no longer watched (moved out, removed) may still have events queued.
            let Some(dir) = self.dirs.get(&event.wd) else {
                continue;
            };
            let Some(name) = &event.name else {
                if let Some(end) = self.self_event(event, batch) {
                    return Some(end);
                }
                continue;
            };
            let path = dir.join(name);
            let is_dir = event.mask.contains(ReadFlags::ISDIR);
            if event
                .mask
                .intersects(ReadFlags::CREATE | ReadFlags::MOVED_TO)
            {
                if !self.scanned.remove(&path) {
                    batch.push(&path, WatchKind::Created);
                }
                if is_dir && self.recursive && !self.moved_within.contains(&event.cookie) {
                    // Created here: what it already holds is reported. Moved in from outside:
                    // only watched.
                    let report = event.mask.contains(ReadFlags::CREATE);
                    let scan = if report { Some(&mut *batch) } else { None };
                    if let Err(full) = self.add_tree(vec![path.clone()], scan, budget) {
                        return Some(format!(
                            "{}: the inotify limit is reached; raise the sysctl {MAX_USER_WATCHES}",
                            full.display()
                        ));
                    }
                }
            }
            if event
                .mask
                .intersects(ReadFlags::MODIFY | ReadFlags::CLOSE_WRITE | ReadFlags::ATTRIB)
            {
                batch.push(&path, WatchKind::Modified);
            }
            if event.mask.contains(ReadFlags::DELETE) {
                self.scanned.remove(&path);
                batch.push(&path, WatchKind::Removed);
            }
            if event.mask.contains(ReadFlags::MOVED_FROM) {
                self.scanned.remove(&path);
                batch.push(&path, WatchKind::Renamed);
                if is_dir {
                    match self.moved_to(&raw[at + 1..], event.cookie) {
                        Some(to) => {
                            self.rebase(&path, &to);
                            self.moved_within.insert(event.cookie);
                        }
                        None => self.unwatch_under(&path),
                    }
                }
            }
        }
        None
    }

    /// An event of a watched directory itself. Only the root's are reported: a subdirectory's
    /// are reported by name by its parent's watch.
    fn self_event(&mut self, event: &RawEvent, batch: &mut Batch) -> Option<String> {
        let is_root = event.wd == self.root_wd;
        if event.mask.contains(ReadFlags::IGNORED) {
            self.dirs.remove(&event.wd);
            return is_root.then(|| "the kernel dropped the watch of the directory".into());
        }
        if !is_root {
            return None;
        }
        if event.mask.contains(ReadFlags::DELETE_SELF) {
            batch.push(&self.root, WatchKind::Removed);
            return Some("the watched directory was removed".into());
        }
        if event.mask.contains(ReadFlags::MOVE_SELF) {
            // Its new path is unknown: the paths of later events would be wrong.
            batch.push(&self.root, WatchKind::Renamed);
            return Some("the watched directory was moved".into());
        }
        if event.mask.contains(ReadFlags::UNMOUNT) {
            return Some("the file system of the watched directory was unmounted".into());
        }
        if event
            .mask
            .intersects(ReadFlags::MODIFY | ReadFlags::CLOSE_WRITE | ReadFlags::ATTRIB)
        {
            batch.push(&self.root, WatchKind::Modified);
        }
        None
    }

    /// Where the directory moved with `cookie` went, if into the tree: the kernel queues the
    /// `IN_MOVED_TO` right after the `IN_MOVED_FROM`, so it is looked for in the rest of the
    /// round. (Should a read split the two, the move counts as out and then in: the directory
    /// is watched again, only what changed in it in between is missed.)
    fn moved_to(&self, rest: &[RawEvent], cookie: u32) -> Option<PathBuf> {
        let to = rest
            .iter()
            .find(|event| event.mask.contains(ReadFlags::MOVED_TO) && event.cookie == cookie)?;
        Some(self.dirs.get(&to.wd)?.join(to.name.as_ref()?))
    }

    /// The watches of a directory moved from `from` to `to` (and of those under it) take the
    /// new path; they stay, since the directories did not change.
    fn rebase(&mut self, from: &Path, to: &Path) {
        let moved = |path: &Path| {
            path.strip_prefix(from).ok().map(|rest| {
                if rest.as_os_str().is_empty() {
                    to.to_path_buf()
                } else {
                    to.join(rest)
                }
            })
        };
        for path in self.dirs.values_mut() {
            if let Some(new) = moved(path) {
                *path = new;
            }
        }
        self.scanned = self
            .scanned
            .drain()
            .map(|path| moved(&path).unwrap_or(path))
            .collect();
    }

    /// A directory moved out of the tree: its watches (and those under it) go, and the events
    /// they still have queued are dropped (their wds are no longer known).
    fn unwatch_under(&mut self, dir: &Path) {
        let gone: Vec<i32> = self
            .dirs
            .iter()
            .filter(|(_, path)| path.starts_with(dir))
            .map(|(wd, _)| *wd)
            .collect();
        for wd in gone {
            self.dirs.remove(&wd);
            // EINVAL if the kernel dropped it already (the directory was deleted meanwhile):
            // nothing is left to undo either way.
            let _ = inotify::remove_watch(&self.fd, wd);
        }
        self.scanned.retain(|path| !path.starts_with(dir));
    }
}

/// The subdirectories of `dir` (not following symlinks).
fn subdirectories(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    Ok(std::fs::read_dir(dir)?
        .flatten()
        .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_dir()))
        .map(|entry| entry.path())
        .collect())
}

/// How long a `watch_files` call watches when it does not say, and at most.
pub const DEFAULT_WATCH_MS: u64 = 5_000;
pub const MAX_WATCH_MS: u64 = 300_000;
/// Events one call answers at most (by default, and the ceiling a caller may ask for).
pub const MAX_EVENTS: usize = 10_000;

/// The `watch` file operation: the events under `path` (absolute) for `timeout_ms`, as the
/// tool answers them (`{"path", "events": [{"path", "kind"}], "timed_out", "ended"}`).
pub fn watch_answer(
    path: &Path,
    recursive: bool,
    timeout_ms: Option<u64>,
    max_events: Option<usize>,
) -> Result<serde_json::Value, crate::FileError> {
    let timeout = Duration::from_millis(timeout_ms.unwrap_or(DEFAULT_WATCH_MS).min(MAX_WATCH_MS));
    let max_events = max_events.unwrap_or(MAX_EVENTS).clamp(1, MAX_EVENTS);
    let mut events = Vec::new();
    let outcome = watch(path, recursive, timeout, max_events, &mut |event| {
        events.push(event.clone());
        true
    })
    .map_err(|err| {
        use crate::FileErrorKind as Kind;
        let kind = match &err {
            WatchError::NotFound { .. } => Kind::NotFound,
            WatchError::NotADirectory { .. } => Kind::NotDirectory,
            WatchError::PermissionDenied { .. } => Kind::PermissionDenied,
            WatchError::NotAbsolute { .. } => Kind::InvalidArgument,
            WatchError::TooManyWatches { .. } | WatchError::Io { .. } => Kind::Io,
        };
        crate::FileError::new(kind, format!("watch_files: {err}"))
    })?;
    Ok(serde_json::json!({
        "path": path.display().to_string(),
        "events": events,
        "timed_out": outcome.timed_out,
        "ended": outcome.ended,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::io::Write;
    use std::sync::mpsc;
    use std::thread;

    /// How long a test waits for events it expects: long, since a busy machine may be slow; a
    /// passing test stops as soon as they came.
    const LONG: Duration = Duration::from_secs(60);
    /// How long a test waits where it asserts that nothing happens.
    const SHORT: Duration = Duration::from_millis(300);

    struct Run {
        outcome: WatchOutcome,
        events: Vec<WatchEvent>,
    }

    /// Watches `root`, making `changes` from a thread once the watch is in place, until `done`
    /// says the events so far are enough (or the watch ends).
    fn run(
        root: &Path,
        recursive: bool,
        timeout: Duration,
        max_events: usize,
        changes: impl FnOnce() + Send + 'static,
        done: impl Fn(&[WatchEvent]) -> bool,
    ) -> Run {
        let (ready_tx, ready_rx) = mpsc::channel();
        let changer = thread::spawn(move || {
            if ready_rx.recv().is_ok() {
                changes();
            }
        });
        let mut events = Vec::new();
        let outcome = watch_with_ready(
            root,
            recursive,
            timeout,
            max_events,
            &mut |event| {
                events.push(event.clone());
                !done(&events)
            },
            &mut || ready_tx.send(()).unwrap(),
        )
        .unwrap();
        drop(ready_tx);
        changer.join().unwrap();
        Run { outcome, events }
    }

    fn event(path: &Path, kind: WatchKind) -> WatchEvent {
        WatchEvent {
            path: path.to_str().unwrap().to_owned(),
            kind,
        }
    }

    fn has(events: &[WatchEvent], path: &Path, kind: WatchKind) -> bool {
        events.contains(&event(path, kind))
    }

    fn under(events: &[WatchEvent], dir: &Path) -> Vec<WatchEvent> {
        events
            .iter()
            .filter(|e| Path::new(&e.path).starts_with(dir) && Path::new(&e.path) != dir)
            .cloned()
            .collect()
    }

    fn never(_: &[WatchEvent]) -> bool {
        false
    }

    #[test]
    fn a_created_file_is_created_then_modified() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("a");
        let written = file.clone();
        let run = run(
            tmp.path(),
            false,
            LONG,
            100,
            move || fs::write(written, "x").unwrap(),
            |events| has(events, &file, WatchKind::Modified),
        );
        assert_eq!(run.events[0], event(&file, WatchKind::Created));
        assert!(
            run.events[1..]
                .iter()
                .all(|e| *e == event(&file, WatchKind::Modified)),
            "{:?}",
            run.events
        );
        assert!(!run.outcome.timed_out);
    }

    #[test]
    fn a_written_file_is_modified() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("a");
        fs::write(&file, "x").unwrap();
        let written = file.clone();
        let run = run(
            tmp.path(),
            false,
            LONG,
            100,
            move || {
                let mut f = fs::OpenOptions::new().append(true).open(written).unwrap();
                for _ in 0..50 {
                    f.write_all(b"more").unwrap();
                }
            },
            |events| has(events, &file, WatchKind::Modified),
        );
        assert!(
            run.events
                .iter()
                .all(|e| *e == event(&file, WatchKind::Modified)),
            "{:?}",
            run.events
        );
    }

    #[test]
    fn a_removed_file_is_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("a");
        fs::write(&file, "x").unwrap();
        let removed = file.clone();
        let run = run(
            tmp.path(),
            false,
            LONG,
            100,
            move || fs::remove_file(removed).unwrap(),
            |events| has(events, &file, WatchKind::Removed),
        );
        assert_eq!(run.events.last(), Some(&event(&file, WatchKind::Removed)));
        assert!(
            run.events
                .iter()
                .all(|e| e.kind == WatchKind::Removed || e.kind == WatchKind::Modified),
            "{:?}",
            run.events
        );
    }

    #[test]
    fn a_renamed_file_is_renamed_then_created() {
        let tmp = tempfile::tempdir().unwrap();
        let (from, to) = (tmp.path().join("a"), tmp.path().join("b"));
        fs::write(&from, "x").unwrap();
        let (f, t) = (from.clone(), to.clone());
        let run = run(
            tmp.path(),
            false,
            LONG,
            100,
            move || fs::rename(f, t).unwrap(),
            |events| has(events, &to, WatchKind::Created),
        );
        assert_eq!(
            run.events,
            vec![
                event(&from, WatchKind::Renamed),
                event(&to, WatchKind::Created)
            ]
        );
    }

    #[test]
    fn moves_in_and_out_report_their_watched_end() {
        let tmp = tempfile::tempdir().unwrap();
        let (root, outside) = (tmp.path().join("root"), tmp.path().join("outside"));
        fs::create_dir_all(&root).unwrap();
        fs::create_dir_all(&outside).unwrap();
        fs::write(outside.join("in"), "x").unwrap();
        fs::write(root.join("out"), "x").unwrap();
        let (r, o) = (root.clone(), outside.clone());
        let run = run(
            &root,
            true,
            LONG,
            100,
            move || {
                fs::rename(o.join("in"), r.join("in")).unwrap();
                fs::rename(r.join("out"), o.join("out")).unwrap();
            },
            |events| events.len() >= 2,
        );
        assert_eq!(
            run.events,
            vec![
                event(&root.join("in"), WatchKind::Created),
                event(&root.join("out"), WatchKind::Renamed)
            ]
        );
    }

    #[test]
    fn recursive_sees_files_in_new_subdirectories() {
        // Several times: the file is written right after mkdir, racing the new watch.
        for _ in 0..5 {
            let tmp = tempfile::tempdir().unwrap();
            let root = tmp.path().to_path_buf();
            let (sub, deep) = (root.join("sub"), root.join("deep/a/b"));
            let (s, d) = (sub.clone(), deep.clone());
            let run = run(
                &root,
                true,
                LONG,
                1000,
                move || {
                    fs::create_dir(&s).unwrap();
                    fs::write(s.join("f"), "x").unwrap();
                    fs::create_dir_all(&d).unwrap();
                    fs::write(d.join("g"), "x").unwrap();
                },
                |events| {
                    has(events, &root.join("sub/f"), WatchKind::Created)
                        && has(events, &root.join("deep/a/b/g"), WatchKind::Created)
                },
            );
            for path in [
                sub.clone(),
                sub.join("f"),
                root.join("deep"),
                root.join("deep/a"),
                deep.clone(),
                deep.join("g"),
            ] {
                let created = run
                    .events
                    .iter()
                    .filter(|e| **e == event(&path, WatchKind::Created))
                    .count();
                assert_eq!(created, 1, "{path:?} in {:?}", run.events);
            }
        }
    }

    #[test]
    fn a_new_directory_is_scanned_and_its_entries_reported_once() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        let mut watcher = Watcher::start(root.clone(), true).unwrap();
        let mut buf = vec![MaybeUninit::<u8>::uninit(); READ_BUFFER_BYTES];
        fs::create_dir(root.join("sub")).unwrap();
        let raw = read_batch(&watcher.fd, &mut buf).unwrap();
        // Entries made before the new directory's watch (the race the scan is for): no event
        // of their own will come.
        fs::create_dir(root.join("sub/inner")).unwrap();
        fs::write(root.join("sub/inner/f"), "x").unwrap();
        let (batch, end) = watcher.handle(&raw, 100);
        assert_eq!(end, None);
        assert_eq!(
            batch.into_events().collect::<Vec<_>>(),
            vec![
                event(&root.join("sub"), WatchKind::Created),
                event(&root.join("sub/inner"), WatchKind::Created),
                event(&root.join("sub/inner/f"), WatchKind::Created),
            ]
        );
        // An entry made between the watch and the scan has its own event too: not reported
        // twice. A second creation of it (after a removal) is.
        let inner_wd = watcher
            .dirs
            .iter()
            .find(|(_, path)| **path == root.join("sub/inner"))
            .map(|(wd, _)| *wd)
            .unwrap();
        let created = || RawEvent {
            wd: inner_wd,
            mask: ReadFlags::CREATE,
            cookie: 0,
            name: Some(PathBuf::from("f")),
        };
        let (batch, _) = watcher.handle(&[created()], 100);
        assert_eq!(batch.into_events().count(), 0);
        let (batch, _) = watcher.handle(&[created()], 100);
        assert_eq!(
            batch.into_events().collect::<Vec<_>>(),
            vec![event(&root.join("sub/inner/f"), WatchKind::Created)]
        );
        // The new directories are watched.
        fs::write(root.join("sub/inner/g"), "x").unwrap();
        let raw = read_batch(&watcher.fd, &mut buf).unwrap();
        let (batch, _) = watcher.handle(&raw, 100);
        assert!(
            batch
                .into_events()
                .any(|e| e == event(&root.join("sub/inner/g"), WatchKind::Created))
        );
    }

    #[test]
    fn recursive_sees_files_in_existing_subdirectories() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/b");
        fs::create_dir_all(&dir).unwrap();
        let file = dir.join("f");
        let written = file.clone();
        let run = run(
            tmp.path(),
            true,
            LONG,
            100,
            move || fs::write(written, "x").unwrap(),
            |events| has(events, &file, WatchKind::Created),
        );
        assert_eq!(run.events, vec![event(&file, WatchKind::Created)]);
    }

    #[test]
    fn non_recursive_ignores_subdirectories() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        let (old, new, marker) = (root.join("old"), root.join("new"), root.join("marker"));
        fs::create_dir(&old).unwrap();
        let (o, n, m) = (old.clone(), new.clone(), marker.clone());
        let run = run(
            &root,
            false,
            LONG,
            100,
            move || {
                fs::write(o.join("f"), "x").unwrap();
                fs::create_dir(&n).unwrap();
                fs::write(n.join("f"), "x").unwrap();
                // Last: the events before it came before it.
                fs::write(m, "x").unwrap();
            },
            |events| has(events, &marker, WatchKind::Created),
        );
        assert!(under(&run.events, &old).is_empty(), "{:?}", run.events);
        assert!(under(&run.events, &new).is_empty(), "{:?}", run.events);
        assert!(has(&run.events, &new, WatchKind::Created));
    }

    #[test]
    fn a_directory_renamed_within_the_tree_keeps_its_watch() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        let (from, to) = (root.join("a"), root.join("b"));
        fs::create_dir_all(from.join("inner")).unwrap();
        let (f, t) = (from.clone(), to.clone());
        let run = run(
            &root,
            true,
            LONG,
            100,
            move || {
                fs::rename(&f, &t).unwrap();
                fs::write(t.join("inner/g"), "x").unwrap();
            },
            |events| has(events, &to.join("inner/g"), WatchKind::Created),
        );
        assert!(has(&run.events, &from, WatchKind::Renamed));
        assert!(has(&run.events, &to, WatchKind::Created));
        assert!(under(&run.events, &from).is_empty(), "{:?}", run.events);
    }

    #[test]
    fn a_directory_moved_out_is_no_longer_watched() {
        let tmp = tempfile::tempdir().unwrap();
        let (root, outside) = (tmp.path().join("root"), tmp.path().join("outside"));
        let dir = root.join("d");
        fs::create_dir_all(dir.join("inner")).unwrap();
        fs::create_dir_all(&outside).unwrap();
        let marker = root.join("marker");
        let (d, o, m) = (dir.clone(), outside.clone(), marker.clone());
        let run = run(
            &root,
            true,
            LONG,
            100,
            move || {
                fs::rename(&d, o.join("d")).unwrap();
                fs::write(o.join("d/f"), "x").unwrap();
                fs::write(o.join("d/inner/f"), "x").unwrap();
                fs::write(m, "x").unwrap();
            },
            |events| has(events, &marker, WatchKind::Created),
        );
        assert!(has(&run.events, &dir, WatchKind::Renamed));
        assert!(under(&run.events, &dir).is_empty(), "{:?}", run.events);
    }

    #[test]
    fn the_timeout_ends_a_quiet_watch() {
        let tmp = tempfile::tempdir().unwrap();
        let started = Instant::now();
        let run = run(tmp.path(), true, SHORT, 100, || {}, never);
        assert!(started.elapsed() >= SHORT);
        assert_eq!(
            run.outcome,
            WatchOutcome {
                events: 0,
                timed_out: true,
                ended: None
            }
        );
        assert!(run.events.is_empty());
    }

    #[test]
    fn bad_paths_are_typed_errors() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("file");
        fs::write(&file, "x").unwrap();
        let code = |path: &Path| {
            watch(path, true, SHORT, 10, &mut |_| true)
                .unwrap_err()
                .code()
        };
        assert_eq!(code(&tmp.path().join("missing")), "watch:not_found");
        assert_eq!(code(&file.join("below")), "watch:not_found");
        assert_eq!(code(&file), "watch:not_a_directory");
        assert_eq!(code(Path::new("relative")), "watch:invalid_argument");
        let err = watch(&file, false, SHORT, 10, &mut |_| true).unwrap_err();
        assert!(err.to_string().contains("not a directory"), "{err}");
    }

    #[test]
    fn a_false_from_on_event_stops_at_once() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        let r = root.clone();
        // No deadline at all: only the answer can end it.
        let run = run(
            &root,
            false,
            Duration::MAX,
            100,
            move || {
                for i in 0..5 {
                    fs::write(r.join(i.to_string()), "x").unwrap();
                }
            },
            |_| true,
        );
        assert_eq!(run.events.len(), 1);
        assert_eq!(run.outcome.events, 1);
        assert!(!run.outcome.timed_out);
        assert_eq!(run.outcome.ended.as_deref(), Some("the receiver went away"));
    }

    #[test]
    fn max_events_ends_the_watch() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        let r = root.clone();
        let run = run(
            &root,
            false,
            LONG,
            2,
            move || {
                for name in ["a", "b", "c"] {
                    fs::write(r.join(name), "x").unwrap();
                }
            },
            never,
        );
        assert_eq!(run.events.len(), 2);
        assert_eq!(run.outcome.events, 2);
        assert!(!run.outcome.timed_out);
        assert!(run.outcome.ended.is_some());
    }

    #[test]
    fn removing_the_watched_directory_ends_the_watch() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("watched");
        fs::create_dir_all(root.join("sub")).unwrap();
        fs::write(root.join("f"), "x").unwrap();
        fs::write(root.join("sub/g"), "x").unwrap();
        let r = root.clone();
        let run = run(
            &root,
            true,
            LONG,
            100,
            move || fs::remove_dir_all(r).unwrap(),
            never,
        );
        assert!(!run.outcome.timed_out);
        assert_eq!(
            run.outcome.ended.as_deref(),
            Some("the watched directory was removed")
        );
        assert_eq!(run.events.last(), Some(&event(&root, WatchKind::Removed)));
        for path in [root.join("f"), root.join("sub"), root.join("sub/g")] {
            assert!(has(&run.events, &path, WatchKind::Removed), "{path:?}");
        }
    }

    #[test]
    fn a_burst_of_modified_is_reported_once_at_its_end() {
        let mut batch = Batch::default();
        let (a, b) = (Path::new("/a"), Path::new("/b"));
        batch.push(a, WatchKind::Created);
        batch.push(a, WatchKind::Modified);
        batch.push(b, WatchKind::Modified);
        batch.push(a, WatchKind::Modified);
        batch.push(a, WatchKind::Renamed);
        batch.push(a, WatchKind::Modified);
        assert_eq!(batch.len(), 5);
        assert_eq!(
            batch.into_events().collect::<Vec<_>>(),
            vec![
                event(a, WatchKind::Created),
                event(b, WatchKind::Modified),
                event(a, WatchKind::Modified),
                event(a, WatchKind::Renamed),
                event(a, WatchKind::Modified),
            ]
        );
    }

    #[test]
    fn events_serialize_with_lowercase_kinds() {
        let json = serde_json::to_string(&event(Path::new("/w/a"), WatchKind::Renamed)).unwrap();
        assert_eq!(json, r#"{"path":"/w/a","kind":"renamed"}"#);
        let back: WatchEvent = serde_json::from_str(r#"{"path":"/w/b","kind":"created"}"#).unwrap();
        assert_eq!(back, event(Path::new("/w/b"), WatchKind::Created));
    }
}
