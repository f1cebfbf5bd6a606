//! The session life cycle: a durable record per Paddock session, and closing a session (its
//! environments on every backend it used, its background processes, its local state).
//!
//! A record is one small JSON file, `$PADDOCK_HOME/session-records/<id>.json`, kept apart from
//! the shell state under `sessions/` (whose directory names are session ids too, so a record
//! file there could collide with a session named `x.json`). Every environment tool call touches
//! its session's record; any later `paddock` process can list the records and close the idle
//! ones, so environments no longer outlive the connections that made them.
//!
//! This module is a leaf of the crate: it knows backends and the process registry, nothing of
//! the tools, the registry or the engine that use it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use paddock_backends::Environment;
use paddock_backends::processes::{ProcessRegistry, ProcessState};
use serde::{Deserialize, Serialize};

/// Directory of the records, under the state root.
pub const RECORDS_DIR: &str = "session-records";

/// Directory of the big direct results spilled to files (`tools::spill`), one directory per
/// session under it; closing the session removes its directory.
pub const SPILL_DIR: &str = "spill";

pub use paddock_backends::naming::python_session;

/// A touch this soon after the last one is not written again: the record is on every
/// command's path, and idle timeouts are minutes, not milliseconds.
const TOUCH_INTERVAL: Duration = Duration::from_secs(1);

/// Errors of the session life cycle.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("no session '{0}' (see `paddock sessions list`)")]
    Unknown(String),
    #[error("session id {0:?} is invalid: use 1-128 characters from [A-Za-z0-9_.-]")]
    InvalidId(String),
    #[error("session record {path}: {source}")]
    Record {
        path: String,
        source: std::io::Error,
    },
    #[error("the workspace {path} was not taken by backend '{backend}': {reason}")]
    Workspace {
        path: String,
        backend: String,
        reason: String,
    },
    #[error("session '{id}' on backend '{backend}': {reason}")]
    Pause {
        id: String,
        backend: String,
        reason: String,
    },
}

/// What is kept about one session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRecord {
    pub id: String,
    /// Policy names of the backends its environment tools ran on.
    pub backends: BTreeSet<String>,
    /// Unix seconds.
    pub created: u64,
    /// Unix seconds of the last environment tool call.
    pub last_active: u64,
    /// Backends whose part of the session is frozen (`paddock sessions pause`); the next call
    /// that uses the session thaws them.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub paused: BTreeSet<String>,
}

impl SessionRecord {
    pub fn idle_seconds(&self, now: u64) -> u64 {
        now.saturating_sub(self.last_active)
    }
}

/// One line of `paddock sessions list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionSummary {
    pub id: String,
    pub backends: Vec<String>,
    pub idle_seconds: u64,
    /// Background processes of the session still running.
    pub background_processes: usize,
    /// Frozen by `paddock sessions pause` (its processes use no CPU); the next command thaws it.
    pub paused: bool,
    /// What its proxied environments sent through the egress proxy (`network = "proxy"`),
    /// counted since the proxy started serving them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<paddock_network::proxy::Totals>,
}

/// What closing one backend's part of a session did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BackendClosed {
    pub backend: String,
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What closing a session did (`paddock sessions close` prints it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CloseReport {
    pub id: String,
    pub closed: bool,
    pub backends: Vec<BackendClosed>,
    /// Ids of the background processes that were running and were ended (their receipts stay).
    pub processes_killed: Vec<String>,
    /// Local state directories removed.
    pub state_removed: Vec<String>,
}

impl CloseReport {
    /// Every backend closed without error.
    pub fn all_ok(&self) -> bool {
        self.backends.iter().all(|b| b.ok)
    }
}

/// What pausing a session did (`paddock sessions pause` prints it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PauseReport {
    pub id: String,
    /// Backends where something of the session was frozen.
    pub paused: Vec<String>,
}

/// What one sweep did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SweepReport {
    pub closed: Vec<CloseReport>,
    /// Environments (containers, instances) no live session owned, removed per backend.
    pub orphans_removed: BTreeMap<String, usize>,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Same rule as the backends' (`shell::check_session`): the id names a file and a directory.
pub fn check_id(id: &str) -> Result<(), SessionError> {
    paddock_backends::shell::check_session(id).map_err(|_| SessionError::InvalidId(id.to_owned()))
}

/// The records on disk, with a memory of recent touches so a busy session costs no I/O.
#[derive(Debug)]
pub struct SessionStore {
    dir: PathBuf,
    /// Per session: when this process last wrote its record and the backends it then named.
    recent: Mutex<HashMap<String, (Instant, BTreeSet<String>)>>,
    /// Makes temporary file names unique among this process's concurrent writes.
    writes: AtomicU64,
    /// Held across each read-modify-write of a record in this process, so that a touch does
    /// not write back a record read before a pause marked it (the pause would be forgotten).
    updates: Mutex<()>,
}

impl SessionStore {
    pub fn new(state_root: &Path) -> Self {
        Self {
            dir: state_root.join(RECORDS_DIR),
            recent: Mutex::default(),
            writes: AtomicU64::new(0),
            updates: Mutex::default(),
        }
    }

    /// Sets the backends session `id` is paused on, the rest of its record as it is now; no
    /// record, nothing to mark.
    pub fn set_paused(&self, id: &str, paused: BTreeSet<String>) -> Result<(), SessionError> {
        let _update = self
            .updates
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match self.get(id) {
            Some(current) => self.write(&SessionRecord { paused, ..current }),
            None => Ok(()),
        }
    }

    fn path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    /// Notes activity of `session` (on `backend`, when one was used). Never fails the call it
    /// accompanies: a record that cannot be written is logged.
    pub fn touch(&self, session: &str, backend: Option<&str>) {
        if let Err(err) = self.try_touch(session, backend) {
            tracing::warn!(%session, %err, "session record not updated");
        }
    }

    fn try_touch(&self, session: &str, backend: Option<&str>) -> Result<(), SessionError> {
        check_id(session)?;
        let fresh = |(at, known): &(Instant, BTreeSet<String>)| {
            at.elapsed() < TOUCH_INTERVAL && backend.is_none_or(|b| known.contains(b))
        };
        if let Ok(recent) = self.recent.lock()
            && recent.get(session).is_some_and(fresh)
        {
            return Ok(());
        }
        let now = now_secs();
        let _update = self
            .updates
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let existing = self.get(session);
        // Another process may have written it within the interval (seconds are the record's
        // resolution): nothing to add then.
        let written_recently = existing.as_ref().is_some_and(|r| r.last_active >= now);
        let mut record = existing.unwrap_or_else(|| SessionRecord {
            id: session.to_owned(),
            backends: BTreeSet::new(),
            created: now,
            last_active: now,
            paused: BTreeSet::new(),
        });
        let new_backend = backend.is_some_and(|b| !record.backends.contains(b));
        if new_backend || !written_recently {
            if let Some(b) = backend {
                record.backends.insert(b.to_owned());
            }
            record.last_active = now;
            self.write(&record)?;
        }
        if let Ok(mut recent) = self.recent.lock() {
            recent.insert(
                session.to_owned(),
                (Instant::now(), record.backends.clone()),
            );
        }
        Ok(())
    }

    /// Writes a record atomically: a temporary file, then a rename. No fsync: a record lost in
    /// a crash only means a session is swept later (or its environment as an orphan).
    fn write(&self, record: &SessionRecord) -> Result<(), SessionError> {
        let io = |path: &Path, source| SessionError::Record {
            path: path.display().to_string(),
            source,
        };
        std::fs::create_dir_all(&self.dir).map_err(|e| io(&self.dir, e))?;
        // Dot files: never taken for records (an id cannot start with a dot).
        let tmp = self.dir.join(format!(
            ".{}.{}.{}.tmp",
            record.id,
            std::process::id(),
            self.writes.fetch_add(1, Ordering::Relaxed)
        ));
        let bytes = serde_json::to_vec(record).map_err(|e| io(&tmp, std::io::Error::other(e)))?;
        std::fs::write(&tmp, bytes).map_err(|e| io(&tmp, e))?;
        let path = self.path(&record.id);
        std::fs::rename(&tmp, &path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            io(&path, e)
        })
    }

    /// The record of `id`, if there is one (and it can be read).
    pub fn get(&self, id: &str) -> Option<SessionRecord> {
        check_id(id).ok()?;
        let bytes = std::fs::read(self.path(id)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Every record, by id.
    pub fn list(&self) -> Vec<SessionRecord> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut records: Vec<SessionRecord> = entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let id = name.strip_suffix(".json")?;
                if name.starts_with('.') {
                    return None;
                }
                self.get(id)
            })
            .collect();
        records.sort_by(|a, b| a.id.cmp(&b.id));
        records
    }

    /// Records idle for longer than `idle`.
    pub fn expired(&self, idle: Duration) -> Vec<SessionRecord> {
        let now = now_secs();
        self.list()
            .into_iter()
            .filter(|r| r.idle_seconds(now) > idle.as_secs())
            .collect()
    }

    /// Forgets `id` (here and in this process's memory of touches).
    pub fn remove(&self, id: &str) -> Result<(), SessionError> {
        check_id(id)?;
        if let Ok(mut recent) = self.recent.lock() {
            recent.remove(id);
        }
        let path = self.path(id);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(SessionError::Record {
                path: path.display().to_string(),
                source,
            }),
        }
    }
}

/// The sessions of one engine: their records, and what closing one needs (the backends, the
/// process registry, the state root).
pub struct Sessions {
    store: SessionStore,
    backends: BTreeMap<String, Arc<dyn Environment>>,
    processes: ProcessRegistry,
    state_root: PathBuf,
    idle_timeout: Duration,
    /// `[sessions] idle_action = "pause"`: how long a session stays idle before it is paused.
    pause_after: Option<Duration>,
    /// The engine's notebooks, whose names a snapshot saves.
    notebook_saver: std::sync::OnceLock<crate::codemode::NotebookSaver>,
    /// Per (session, backend): when its environment was last told to stay alive
    /// ([`Sessions::keep_environments_alive`]).
    kept: Mutex<HashMap<(String, String), Instant>>,
}

impl Sessions {
    pub fn new(
        state_root: PathBuf,
        backends: BTreeMap<String, Arc<dyn Environment>>,
        processes: ProcessRegistry,
        idle_timeout: Duration,
    ) -> Self {
        Self {
            store: SessionStore::new(&state_root),
            backends,
            processes,
            state_root,
            idle_timeout,
            pause_after: None,
            notebook_saver: std::sync::OnceLock::new(),
            kept: Mutex::default(),
        }
    }

    /// Gives snapshots the engine's notebooks (once; later calls change nothing).
    pub fn set_notebook_saver(&self, saver: crate::codemode::NotebookSaver) {
        let _ = self.notebook_saver.set(saver);
    }

    /// The names of `session`'s notebook in this engine, for a snapshot.
    pub async fn notebook_names(
        &self,
        session: &str,
    ) -> Result<Option<crate::codemode::saved_state::NotebookState>, String> {
        match self.notebook_saver.get() {
            Some(saver) => saver.dump(session).await,
            None => Ok(None),
        }
    }

    /// Idle sessions are paused after `pause_after` (`None`: only closed).
    pub fn with_pause_after(mut self, pause_after: Option<Duration>) -> Self {
        self.pause_after = pause_after;
        self
    }

    /// Sessions but `keep` idle past `pause_after` and not paused yet, nor expired.
    pub fn due_for_pause(&self, keep: &str) -> Vec<String> {
        let Some(after) = self.pause_after else {
            return Vec::new();
        };
        let now = now_secs();
        self.store
            .list()
            .into_iter()
            .filter(|r| {
                let idle = r.idle_seconds(now);
                r.paused.is_empty()
                    && idle > after.as_secs()
                    && idle <= self.idle_timeout.as_secs()
                    && r.id != keep
            })
            .map(|r| r.id)
            .collect()
    }

    /// Pauses `due` (from [`Sessions::due_for_pause`]) that are still idle; answers those paused.
    pub async fn pause_idle(&self, due: &[String]) -> Vec<String> {
        let Some(after) = self.pause_after else {
            return Vec::new();
        };
        let mut paused = Vec::new();
        for id in due {
            let still_idle = self.store.get(id).is_some_and(|r| {
                r.paused.is_empty() && r.idle_seconds(now_secs()) > after.as_secs()
            });
            if !still_idle {
                continue;
            }
            match self.pause(id).await {
                Ok(_) => paused.push(id.clone()),
                Err(err) => tracing::warn!(session = %id, %err, "idle session not paused"),
            }
        }
        paused
    }

    /// Backend `name`'s environment in this engine's policy.
    pub fn environment(&self, name: &str) -> Option<&Arc<dyn Environment>> {
        self.backends.get(name)
    }

    /// The durable registry of background processes.
    pub fn processes(&self) -> &ProcessRegistry {
        &self.processes
    }

    /// The engine's state directory (`$PADDOCK_HOME`).
    pub fn state_root(&self) -> &Path {
        &self.state_root
    }

    pub fn store(&self) -> &SessionStore {
        &self.store
    }

    pub fn idle_timeout(&self) -> Duration {
        self.idle_timeout
    }

    /// Keeps `session` marked active for as long as the guard lives: a command may run longer
    /// than the idle timeout, and another `paddock` process must not sweep its session
    /// meanwhile.
    pub fn activity(self: &Arc<Self>, session: &str, backend: Option<&str>) -> ActivityGuard {
        self.store.touch(session, backend);
        self.keep_environments_alive(session, backend);
        let period = (self.idle_timeout / 3).clamp(TOUCH_INTERVAL, Duration::from_secs(60));
        let this = self.clone();
        let id = session.to_owned();
        let backend = backend.map(str::to_owned);
        let keeper = tokio::runtime::Handle::try_current().ok().map({
            let backend = backend.clone();
            |handle| {
                handle.spawn(async move {
                    let mut tick =
                        tokio::time::interval_at(tokio::time::Instant::now() + period, period);
                    loop {
                        tick.tick().await;
                        this.store.touch(&id, backend.as_deref());
                        this.keep_environments_alive(&id, backend.as_deref());
                    }
                })
            }
        });
        ActivityGuard {
            sessions: self.clone(),
            session: session.to_owned(),
            backend,
            keeper,
        }
    }

    /// Tells the environments of `session` (on `backend`, or on every backend its record
    /// names: a `process` call polls a background command without naming one) that it is
    /// active now, so that each ends by itself only once the idle timeout has passed without
    /// another word, whether or not any `paddock` runs then ([`Environment::keep_alive`]).
    /// The same moments as the record's touches, so an environment ends when the sweep would
    /// close its session. Told at most once per [`TOUCH_INTERVAL`]: the time is in seconds.
    pub fn keep_environments_alive(&self, session: &str, backend: Option<&str>) {
        let backends: Vec<String> = match backend {
            Some(name) => vec![name.to_owned()],
            None => self
                .store
                .get(session)
                .map(|r| r.backends.into_iter().collect())
                .unwrap_or_default(),
        };
        let until = SystemTime::now() + self.idle_timeout;
        for name in backends {
            let Some(env) = self.backends.get(&name) else {
                continue;
            };
            let due = self.kept.lock().map_or(true, |mut kept| {
                let key = (session.to_owned(), name);
                let due = kept
                    .get(&key)
                    .is_none_or(|at| at.elapsed() >= TOUCH_INTERVAL);
                if due {
                    kept.insert(key, Instant::now());
                }
                due
            });
            if due {
                env.keep_alive(session, until);
            }
        }
    }

    /// Makes `workspace` (a directory a client named) the workspace of `session` on every
    /// backend that takes one (the local backend without a `workspace` of its own). Answers
    /// the backends that took it.
    pub async fn set_workspace(
        &self,
        session: &str,
        workspace: &Path,
    ) -> Result<Vec<String>, SessionError> {
        check_id(session)?;
        let mut took = Vec::new();
        for (name, env) in &self.backends {
            match env.set_session_workspace(session, workspace).await {
                Ok(true) => took.push(name.clone()),
                Ok(false) => {}
                Err(err) => {
                    return Err(SessionError::Workspace {
                        path: workspace.display().to_string(),
                        backend: name.clone(),
                        reason: err.to_string(),
                    });
                }
            }
        }
        Ok(took)
    }

    /// Every session within its idle timeout, as `paddock sessions list` shows it. An
    /// expired one is never shown, even when its close failed: it is not usable as it was
    /// (its next command finds it swept), and the failure is a warning.
    pub fn list_live(&self) -> Vec<SessionSummary> {
        let now = now_secs();
        let timeout = self.idle_timeout.as_secs();
        self.store
            .list()
            .into_iter()
            .filter(|r| {
                let live = r.idle_seconds(now) <= timeout;
                if !live {
                    tracing::warn!(session = %r.id, "session past its idle timeout not closed; \
                        `paddock sessions close {}` tries again", r.id);
                }
                live
            })
            .map(|r| SessionSummary {
                background_processes: self
                    .processes
                    .list(&r.id)
                    .iter()
                    .filter(|p| p.state == ProcessState::Running)
                    .count(),
                idle_seconds: r.idle_seconds(now),
                paused: !r.paused.is_empty(),
                backends: r.backends.into_iter().collect(),
                id: r.id,
                network: None,
            })
            .collect()
    }

    /// Freezes session `id` on every backend it used (also its `ID.python` part): its
    /// processes stop using CPU; the next call that uses the session thaws them. Answers the
    /// backends that held something to freeze. A backend that cannot pause is an error naming
    /// it, and what was frozen before it is thawed again: nothing is left half paused.
    pub async fn pause(&self, id: &str) -> Result<PauseReport, SessionError> {
        check_id(id)?;
        let record = self
            .store
            .get(id)
            .ok_or_else(|| SessionError::Unknown(id.to_owned()))?;
        let python = python_session(id);
        let mut paused = BTreeSet::new();
        let mut frozen = Vec::new();
        for name in &record.backends {
            let Some(env) = self.backends.get(name) else {
                continue;
            };
            for session in [id, python.as_str()] {
                match env.pause_session(session).await {
                    Ok(true) => {
                        paused.insert(name.clone());
                        frozen.push((env.clone(), session.to_owned()));
                    }
                    Ok(false) => {}
                    Err(err) => {
                        for (env, session) in &frozen {
                            let _ = env.resume_session(session).await;
                        }
                        return Err(SessionError::Pause {
                            id: id.to_owned(),
                            backend: name.clone(),
                            reason: err.to_string(),
                        });
                    }
                }
            }
        }
        // The record as it is now: a command may have touched it meanwhile.
        self.store.set_paused(id, paused.clone())?;
        Ok(PauseReport {
            id: id.to_owned(),
            paused: paused.into_iter().collect(),
        })
    }

    /// Thaws what [`Sessions::pause`] froze; a session not paused is left as it is.
    pub async fn resume(&self, id: &str) -> Result<(), SessionError> {
        check_id(id)?;
        let Some(record) = self.store.get(id) else {
            return Ok(());
        };
        if record.paused.is_empty() {
            return Ok(());
        }
        let python = python_session(id);
        // A backend not in this engine's policy stays paused (and said so in the record) until
        // an engine that has it resumes or closes the session.
        let mut still = BTreeSet::new();
        for name in &record.paused {
            let Some(env) = self.backends.get(name) else {
                still.insert(name.clone());
                continue;
            };
            for session in [id, python.as_str()] {
                env.resume_session(session)
                    .await
                    .map_err(|err| SessionError::Pause {
                        id: id.to_owned(),
                        backend: name.clone(),
                        reason: format!("resuming: {err}"),
                    })?;
            }
        }
        // The record as it is now: a command may have touched it meanwhile.
        self.store.set_paused(id, still)
    }

    /// Ends session `id`: its background processes (receipts kept), what it holds on every
    /// backend it used (also the `ID.python` session python_execute runs in), its local
    /// state, then its record. A backend that fails is reported and the others are closed
    /// anyway; the record goes in every case, and a container left behind is removed later as
    /// an orphan.
    pub async fn close(&self, id: &str) -> Result<CloseReport, SessionError> {
        check_id(id)?;
        let record = self
            .store
            .get(id)
            .ok_or_else(|| SessionError::Unknown(id.to_owned()))?;
        tracing::info!(session = %id, "closing the session");
        // A frozen agent would not answer its shutdown, nor a stopped process its SIGTERM.
        if !record.paused.is_empty()
            && let Err(err) = self.resume(id).await
        {
            tracing::warn!(session = %id, %err, "a paused session was not thawed before closing");
        }
        // Processes first: ending a remote one runs its kill script through the transport,
        // which needs the container or instance still there.
        let mut processes_killed = Vec::new();
        for status in self.processes.list(id) {
            if status.state != ProcessState::Running {
                continue;
            }
            match self.processes.kill(&status.record).await {
                Ok(true) => {
                    // The supervisor writes the receipt as the command ends.
                    let _ = self
                        .processes
                        .wait(&status.record, Duration::from_secs(3))
                        .await;
                    processes_killed.push(status.record.id.clone());
                }
                Ok(false) => {}
                Err(err) => {
                    tracing::warn!(session = %id, process = %status.record.id, %err, "could not end a background process");
                }
            }
        }
        let python = python_session(id);
        let mut backends = Vec::new();
        for name in &record.backends {
            let Some(env) = self.backends.get(name) else {
                backends.push(BackendClosed {
                    backend: name.clone(),
                    ok: false,
                    error: Some(format!(
                        "backend '{name}' is not in this policy: its environment was not closed"
                    )),
                });
                continue;
            };
            let mut errors = Vec::new();
            for session in [id, python.as_str()] {
                if let Err(err) = env.close_session(session).await {
                    errors.push(format!("{session}: {err}"));
                }
            }
            if !errors.is_empty() {
                tracing::warn!(session = %id, backend = %name, errors = %errors.join("; "), "closing a backend's part failed");
            }
            backends.push(BackendClosed {
                backend: name.clone(),
                ok: errors.is_empty(),
                error: (!errors.is_empty()).then(|| errors.join("; ")),
            });
        }
        let state_removed = self.remove_local_state(id, &python);
        // A backend that could not be closed (down, or not in this policy) keeps the record,
        // naming only what is left: a later close or sweep tries again instead of forgetting
        // a container or remote state.
        let unclosed: BTreeSet<String> = backends
            .iter()
            .filter(|b| !b.ok)
            .map(|b| b.backend.clone())
            .collect();
        let closed = unclosed.is_empty();
        if closed {
            self.store.remove(id)?;
        } else {
            self.store.write(&SessionRecord {
                backends: unclosed,
                ..record
            })?;
        }
        Ok(CloseReport {
            id: id.to_owned(),
            closed,
            backends,
            processes_killed,
            state_removed,
        })
    }

    /// The per-session directories (shell state, the sandbox's /tmp, spilled results,
    /// python_execute's runs), also when the session used only remote backends or the local
    /// backend was left out.
    fn remove_local_state(&self, id: &str, python: &str) -> Vec<String> {
        let mut removed = Vec::new();
        for kind in ["sessions", "sandbox-tmp", SPILL_DIR] {
            for session in [id, python] {
                let dir = self.state_root.join(kind).join(session);
                match std::fs::remove_dir_all(&dir) {
                    Ok(()) => removed.push(dir.display().to_string()),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(err) => {
                        tracing::warn!(dir = %dir.display(), %err, "session state not removed");
                    }
                }
            }
        }
        // python_execute's runs (script and artifacts): `python/<session>/<call id>`, and
        // those of a state directory written before runs had a directory per session
        // (`python/<session>@<call id>`).
        let runs = paddock_backends::local::python_runs_dir(&self.state_root, id);
        let legacy_prefix = format!("{id}@");
        let legacy = std::fs::read_dir(self.state_root.join("python"))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(&legacy_prefix))
            .map(|e| e.path());
        for dir in std::iter::once(runs).chain(legacy) {
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => removed.push(dir.display().to_string()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(err) => {
                    tracing::warn!(dir = %dir.display(), %err, "python runs not removed");
                }
            }
        }
        removed
    }

    /// Starts filling every backend's warm pool.
    pub fn prewarm(&self) {
        for env in self.backends.values() {
            env.prewarm();
        }
    }

    /// Sessions idle longer than the timeout, except `keep` (the caller's own).
    pub fn expired(&self, keep: &str) -> Vec<String> {
        self.store
            .expired(self.idle_timeout)
            .into_iter()
            .map(|r| r.id)
            .filter(|id| id != keep)
            .collect()
    }

    /// Closes `expired`, then removes environments of the backends that no session owns any
    /// more.
    pub async fn sweep(&self, expired: &[String]) -> SweepReport {
        let mut report = SweepReport::default();
        for id in expired {
            // Touched again since it was found idle: someone is using it.
            let still_idle = self
                .store
                .get(id)
                .is_some_and(|r| r.idle_seconds(now_secs()) > self.idle_timeout.as_secs());
            if !still_idle {
                continue;
            }
            match self.close(id).await {
                Ok(closed) => report.closed.push(closed),
                Err(err) => tracing::warn!(session = %id, %err, "idle session not closed"),
            }
        }
        // Listed as late as possible: a session that started meanwhile has its record written
        // before its first environment is made.
        // A session's python_execute environment lives as long as the session.
        let live: Vec<String> = self
            .store
            .list()
            .into_iter()
            .flat_map(|r| {
                let python = python_session(&r.id);
                [r.id, python]
            })
            .collect();
        for (name, env) in &self.backends {
            match env.sweep_orphans(&live).await {
                Ok(0) => {}
                Ok(n) => {
                    tracing::info!(backend = %name, removed = n, "orphaned environments removed");
                    report.orphans_removed.insert(name.clone(), n);
                }
                Err(err) => tracing::warn!(backend = %name, %err, "orphan sweep failed"),
            }
        }
        report
    }
}

/// Marks a session active while a command runs; touches it once more when dropped.
pub struct ActivityGuard {
    sessions: Arc<Sessions>,
    session: String,
    /// The backend the command runs on, if any: its environment is kept alive too.
    backend: Option<String>,
    keeper: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for ActivityGuard {
    fn drop(&mut self) {
        if let Some(keeper) = self.keeper.take() {
            keeper.abort();
        }
        self.sessions.store.touch(&self.session, None);
        // The idle time counts from the command's end, in the environment as in the record.
        self.sessions
            .keep_environments_alive(&self.session, self.backend.as_deref());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn touch_creates_merges_and_skips_recent_writes() {
        let root = tempfile::tempdir().unwrap();
        let store = SessionStore::new(root.path());
        store.touch("s1", Some("local"));
        let first = store.get("s1").unwrap();
        assert_eq!(first.backends, BTreeSet::from(["local".to_owned()]));
        store.touch("s1", Some("box"));
        let second = store.get("s1").unwrap();
        assert_eq!(
            second.backends,
            BTreeSet::from(["box".to_owned(), "local".to_owned()])
        );
        assert_eq!(second.created, first.created);
        // No temporary file is left behind, and only the record is listed.
        let names: Vec<String> = std::fs::read_dir(root.path().join(RECORDS_DIR))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, vec!["s1.json".to_owned()]);
        assert_eq!(store.list(), vec![second]);
    }

    #[test]
    fn invalid_ids_are_never_files() {
        let root = tempfile::tempdir().unwrap();
        let store = SessionStore::new(root.path());
        store.touch("../x", None);
        assert!(store.list().is_empty());
        assert!(matches!(
            store.remove("a/b"),
            Err(SessionError::InvalidId(_))
        ));
    }

    #[test]
    fn expired_compares_idle_time() {
        let root = tempfile::tempdir().unwrap();
        let store = SessionStore::new(root.path());
        let old = SessionRecord {
            id: "old".into(),
            backends: BTreeSet::new(),
            created: 1,
            last_active: now_secs() - 100,
            paused: BTreeSet::new(),
        };
        store.write(&old).unwrap();
        store.touch("new", None);
        let expired: Vec<String> = store
            .expired(Duration::from_secs(50))
            .into_iter()
            .map(|r| r.id)
            .collect();
        assert_eq!(expired, vec!["old".to_owned()]);
    }
}
