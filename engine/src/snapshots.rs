//! Snapshots of sessions and sessions started from them (`paddock sessions snapshot`,
//! `sessions start --from`, `sessions fork`, `snapshots list|rm`).
//!
//! A snapshot is a directory `$PADDOCK_HOME/snapshots/NAME/` (owner-only) holding
//! `manifest.json` and what each backend kept there (the sandboxed local backend's workspace
//! copy) and, when the session's notebook (code mode's `keep_state`) held names in this
//! engine, `notebook.json` (see [`crate::codemode::saved_state`]); a docker backend's part is
//! an image (`paddock-snapshot:...`), named in the manifest.
//! Each backend keeps its own part ([`Environment::snapshot_session`]); this module orders
//! them, keeps the manifest, enforces `[snapshots]` limits, and undoes a half-made snapshot or
//! fork. Running background processes are listed as not carried.

use std::collections::BTreeMap;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use paddock_backends::Environment;
use paddock_backends::processes::ProcessState;
use paddock_backends::snapshot::SavedEnvironment;
use serde::{Deserialize, Serialize};

use crate::codemode::saved_state::{self, NotebookState, SAVED_STATE_FILE, SavedStates};
use crate::sessions::Sessions;

/// Directory of the snapshots, under the state root.
pub const SNAPSHOTS_DIR: &str = "snapshots";

/// The manifest's format; another is refused.
const FORMAT: u32 = 1;

/// Errors of snapshots and forks.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("no session '{0}' (see `paddock sessions list`)")]
    UnknownSession(String),
    #[error("no snapshot '{0}' (see `paddock snapshots list`)")]
    Unknown(String),
    #[error("a snapshot named '{0}' exists: choose another --name, or remove it first")]
    Exists(String),
    #[error(
        "snapshot name {0:?} is invalid: use 1-64 characters from [a-z0-9_.-], starting with a \
         letter or digit"
    )]
    InvalidName(String),
    #[error("session '{0}' exists: a session started from a snapshot needs a new id")]
    SessionExists(String),
    #[error(
        "snapshot '{name}' cannot be read ({reason}): remove it with `paddock snapshots rm {name}`"
    )]
    Corrupt { name: String, reason: String },
    #[error(
        "snapshot '{name}' was made by another Paddock home ({home}), whose images and files \
         this one does not own: make the snapshot in this home"
    )]
    OtherHome { name: String, home: String },
    #[error("{0}")]
    Limit(String),
    #[error("backend '{backend}': {reason}")]
    Backend { backend: String, reason: String },
    #[error("snapshot '{name}' names backend '{backend}', which this policy does not define")]
    NoBackend { name: String, backend: String },
    #[error("the notebook of session '{session}': {reason}")]
    Notebook { session: String, reason: String },
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

/// `[snapshots]` of the policy.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_count: usize,
    pub max_total_bytes: u64,
}

impl Limits {
    /// The policy's `[snapshots]` (checked positive when it loaded).
    pub fn of(config: &crate::policy::SnapshotsConfig) -> Self {
        Self {
            max_count: usize::try_from(*config.max_count.get_ref()).unwrap_or(1),
            max_total_bytes: u64::try_from(*config.max_total_mb.get_ref())
                .unwrap_or(1)
                .saturating_mul(1 << 20),
        }
    }
}

/// `manifest.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub name: String,
    /// The session it was taken of.
    pub session: String,
    /// Unix seconds.
    pub created: u64,
    /// The digest of the state directory that made it (images and copies are that home's).
    pub home: String,
    /// Each backend's part, by backend name.
    pub backends: BTreeMap<String, SavedEnvironment>,
    /// Background processes that were running and are not carried.
    #[serde(default)]
    pub not_carried: Vec<String>,
    /// The notebook's names (`notebook.json`), when the session's notebook held any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notebook: Option<NotebookPart>,
}

/// What a snapshot holds of a notebook.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NotebookPart {
    /// The names kept (values by marshal or pickle, modules by name).
    pub names: Vec<String>,
    /// The names that could not be kept, with why.
    pub not_kept: Vec<NotKept>,
    /// Size of `notebook.json`.
    pub bytes: u64,
}

/// A notebook name a snapshot does not hold.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NotKept {
    pub name: String,
    pub why: String,
}

/// The notebook part of a snapshot's summary.
#[derive(Debug, Clone, Serialize)]
pub struct NotebookSummary {
    /// How many names it holds.
    pub names: usize,
    pub not_kept: Vec<NotKept>,
}

/// A listed snapshot, or (its name, why it cannot be read).
pub type Listed = Result<SnapshotSummary, (String, String)>;

/// One line of `paddock snapshots list` (and what `sessions snapshot` prints).
#[derive(Debug, Clone, Serialize)]
pub struct SnapshotSummary {
    pub name: String,
    pub session: String,
    pub created: u64,
    pub age_seconds: u64,
    pub bytes: u64,
    /// Backend → how its files were kept (`docker commit`, `changed files`, `reflink copy`,
    /// `copy`).
    pub files: BTreeMap<String, String>,
    pub not_carried: Vec<String>,
    /// The notebook's names, when it held any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notebook: Option<NotebookSummary>,
}

impl Manifest {
    fn summary(&self) -> SnapshotSummary {
        SnapshotSummary {
            name: self.name.clone(),
            session: self.session.clone(),
            created: self.created,
            age_seconds: now_secs().saturating_sub(self.created),
            bytes: self.bytes(),
            files: self
                .backends
                .iter()
                .map(|(name, part)| (name.clone(), part.files.clone()))
                .collect(),
            not_carried: self
                .not_carried
                .iter()
                .cloned()
                .chain(self.backends.iter().flat_map(|(name, part)| {
                    part.not_carried.iter().map(move |n| format!("{name}: {n}"))
                }))
                .collect(),
            notebook: self.notebook.as_ref().map(|n| NotebookSummary {
                names: n.names.len(),
                not_kept: n.not_kept.clone(),
            }),
        }
    }

    fn bytes(&self) -> u64 {
        self.backends.values().map(|p| p.bytes).sum::<u64>()
            + self.notebook.as_ref().map_or(0, |n| n.bytes)
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn check_name(name: &str) -> Result<(), SnapshotError> {
    let valid = !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_.-".contains(c));
    if valid {
        Ok(())
    } else {
        Err(SnapshotError::InvalidName(name.to_owned()))
    }
}

/// A name for a snapshot of `session` when none is given: the session, lowercased, and the time.
fn default_name(session: &str) -> String {
    let base: String = session
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() || "_.-".contains(c) {
                c
            } else {
                '-'
            }
        })
        .take(40)
        .collect();
    let base = base.trim_start_matches(['_', '.', '-']);
    let base = if base.is_empty() { "session" } else { base };
    format!(
        "{base}-{}",
        paddock_backends::ids::new_run_id("")
            .get(..8)
            .unwrap_or("0")
    )
}

/// The snapshots of one engine's state directory, and what making and using them needs.
pub struct Snapshots<'a> {
    sessions: &'a Arc<Sessions>,
    limits: Limits,
}

impl<'a> Snapshots<'a> {
    pub fn new(sessions: &'a Arc<Sessions>, limits: Limits) -> Self {
        Self { sessions, limits }
    }

    fn root(&self) -> PathBuf {
        self.sessions.state_root().join(SNAPSHOTS_DIR)
    }

    fn home(&self) -> String {
        paddock_backends::naming::owner_of(self.sessions.state_root())
    }

    fn io(path: &Path) -> impl Fn(std::io::Error) -> SnapshotError + '_ {
        move |source| SnapshotError::Io {
            path: path.display().to_string(),
            source,
        }
    }

    /// The names of the snapshot directories, sorted.
    fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.root())
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().is_dir())
            .filter_map(|e| e.file_name().to_str().map(str::to_owned))
            .collect();
        names.sort();
        names
    }

    /// Every snapshot's manifest (unreadable ones as errors, so that `list` shows them).
    fn manifests(&self) -> Vec<Result<Manifest, SnapshotError>> {
        self.names().iter().map(|name| self.load(name)).collect()
    }

    /// The manifest of snapshot `name`, checked: readable, this format, this home's.
    pub fn load(&self, name: &str) -> Result<Manifest, SnapshotError> {
        check_name(name)?;
        let dir = self.root().join(name);
        if !dir.is_dir() {
            return Err(SnapshotError::Unknown(name.to_owned()));
        }
        let corrupt = |reason: String| SnapshotError::Corrupt {
            name: name.to_owned(),
            reason,
        };
        let text = std::fs::read_to_string(dir.join("manifest.json"))
            .map_err(|e| corrupt(format!("manifest.json: {e}")))?;
        let manifest: Manifest = serde_json::from_str(&text)
            .map_err(|e| corrupt(format!("manifest.json is not a snapshot manifest: {e}")))?;
        if manifest.format != FORMAT || manifest.name != name {
            return Err(corrupt(format!(
                "manifest.json is format {} of '{}', expected format {FORMAT} of '{name}'",
                manifest.format, manifest.name
            )));
        }
        if manifest.home != self.home() {
            return Err(SnapshotError::OtherHome {
                name: name.to_owned(),
                home: manifest.home,
            });
        }
        for (backend, part) in &manifest.backends {
            if let Some(archive) = &part.archive
                && (archive.contains('/') || !dir.join(archive).is_file())
            {
                return Err(corrupt(format!(
                    "backend '{backend}': its files {archive} are missing or not inside the snapshot"
                )));
            }
            if let Some(copy) = &part.workspace
                && (copy.starts_with('/')
                    || copy.split('/').any(|c| c == "..")
                    || !dir.join(copy).is_dir())
            {
                return Err(corrupt(format!(
                    "backend '{backend}': its workspace copy {copy} is missing or not inside the \
                     snapshot"
                )));
            }
        }
        if manifest.notebook.is_some() && !dir.join(SAVED_STATE_FILE).is_file() {
            return Err(corrupt(format!(
                "{SAVED_STATE_FILE}, which its manifest names, is missing"
            )));
        }
        Ok(manifest)
    }

    /// `paddock snapshots list`.
    pub fn list(&self) -> Vec<Listed> {
        self.names()
            .into_iter()
            .map(|name| {
                self.load(&name)
                    .map(|m| m.summary())
                    .map_err(|e| (name, e.to_string()))
            })
            .collect()
    }

    /// `paddock sessions snapshot ID [--name NAME]`.
    pub async fn snapshot(
        &self,
        session: &str,
        name: Option<&str>,
    ) -> Result<SnapshotSummary, SnapshotError> {
        let name = name.map_or_else(|| default_name(session), str::to_owned);
        check_name(&name)?;
        let record = self.sessions.store().get(session);
        // A session that only ran notebook scripts has names here and no record.
        let notebook = self
            .sessions
            .notebook_names(session)
            .await
            .map_err(|reason| SnapshotError::Notebook {
                session: session.to_owned(),
                reason,
            })?;
        if record.is_none() && notebook.is_none() {
            return Err(SnapshotError::UnknownSession(session.to_owned()));
        }
        let backends = record.map(|r| r.backends).unwrap_or_default();
        let existing: Vec<Manifest> = self.manifests().into_iter().flatten().collect();
        if existing.len() >= self.limits.max_count {
            return Err(SnapshotError::Limit(format!(
                "{} snapshots exist, the policy's limit ([snapshots] max_count = {}): remove one \
                 with `paddock snapshots rm NAME` (see `paddock snapshots list`)",
                existing.len(),
                self.limits.max_count
            )));
        }
        let root = self.root();
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&root)
            .map_err(Self::io(&root))?;
        let dir = root.join(&name);
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(SnapshotError::Exists(name));
            }
            Err(e) => return Err(Self::io(&dir)(e)),
        }
        let mut manifest = Manifest {
            format: FORMAT,
            name: name.clone(),
            session: session.to_owned(),
            created: now_secs(),
            home: self.home(),
            backends: BTreeMap::new(),
            notebook: None,
            not_carried: self
                .sessions
                .processes()
                .list(session)
                .into_iter()
                .filter(|p| p.state == ProcessState::Running)
                .map(|p| {
                    format!(
                        "background process {} ({}): running processes are not carried",
                        p.record.id, p.record.command
                    )
                })
                .collect(),
        };
        manifest
            .not_carried
            .extend(self.contexts_not_carried(session, &backends).await);
        let kept: u64 = existing.iter().map(Manifest::bytes).sum();
        let made = async {
            if let Some(state) = &notebook {
                manifest.notebook = Some(save_notebook(&dir, state)?);
            }
            for backend in &backends {
                let env = self.environment(&name, backend)?;
                let budget = self
                    .limits
                    .max_total_bytes
                    .saturating_sub(kept + manifest.bytes());
                let part = env
                    .snapshot_session(session, &dir, &name, budget)
                    .await
                    .map_err(|e| SnapshotError::Backend {
                        backend: backend.clone(),
                        reason: e.to_string(),
                    })?;
                manifest.backends.insert(backend.clone(), part);
            }
            let total = kept + manifest.bytes();
            if total > self.limits.max_total_bytes {
                return Err(SnapshotError::Limit(format!(
                    "the snapshots would take {} MB, over the policy's limit ([snapshots] \
                     max_total_mb = {}): remove some with `paddock snapshots rm NAME`",
                    total.div_ceil(1 << 20),
                    self.limits.max_total_bytes >> 20
                )));
            }
            write_manifest(&dir, &manifest)
        };
        if let Err(err) = made.await {
            self.remove_parts(&manifest, &dir).await;
            return Err(err);
        }
        Ok(manifest.summary())
    }

    /// The session's live Python contexts (`python_contexts`) on `backends`, each a line of
    /// what the snapshot does not carry: an interpreter's memory is not saved. A backend that
    /// cannot list them (no agent) has none.
    async fn contexts_not_carried(
        &self,
        session: &str,
        backends: &std::collections::BTreeSet<String>,
    ) -> Vec<String> {
        let mut lines = Vec::new();
        for backend in backends {
            let Some(env) = self.sessions.environment(backend) else {
                continue;
            };
            let listed = env
                .python_context(session, paddock_agent::protocol::ContextRequest::List, None)
                .await;
            let Ok(Ok(answer)) = listed else {
                continue;
            };
            let ids = answer["contexts"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["id"].as_str());
            lines.extend(ids.map(|id| {
                format!(
                    "Python context {id} on {backend}: its names are not carried (a fork or \
                     restore starts without it; create it again and re-run its code)"
                )
            }));
        }
        lines
    }

    fn environment(
        &self,
        name: &str,
        backend: &str,
    ) -> Result<&Arc<dyn Environment>, SnapshotError> {
        self.sessions
            .environment(backend)
            .ok_or_else(|| SnapshotError::NoBackend {
                name: name.to_owned(),
                backend: backend.to_owned(),
            })
    }

    /// What `manifest`'s backends keep outside its directory, then the directory.
    async fn remove_parts(&self, manifest: &Manifest, dir: &Path) {
        for (backend, part) in &manifest.backends {
            if let Some(env) = self.sessions.environment(backend)
                && let Err(err) = env.remove_snapshot(part).await
            {
                tracing::warn!(snapshot = %manifest.name, backend, %err, "a snapshot's part was not removed");
            }
        }
        let _ = std::fs::remove_dir_all(dir);
    }

    /// `paddock snapshots rm NAME`: its images and its directory. A corrupt snapshot's
    /// directory goes too (nothing of it can be read to remove more).
    pub async fn remove(&self, name: &str) -> Result<(), SnapshotError> {
        check_name(name)?;
        let dir = self.root().join(name);
        match self.load(name) {
            Ok(manifest) => {
                self.remove_parts(&manifest, &dir).await;
                Ok(())
            }
            Err(SnapshotError::Corrupt { .. }) => {
                std::fs::remove_dir_all(&dir).map_err(Self::io(&dir))
            }
            Err(err) => Err(err),
        }
    }

    /// `paddock sessions start --from NAME`: each of `ids` (new sessions) starts from the
    /// snapshot on every backend it holds. One that fails is closed again, and so are those
    /// made before it: nothing is left half made.
    pub async fn start_from(&self, name: &str, ids: &[String]) -> Result<(), SnapshotError> {
        let manifest = self.load(name)?;
        let dir = self.root().join(name);
        let notebook =
            match manifest.notebook {
                Some(_) => Some(saved_state::read(&dir.join(SAVED_STATE_FILE)).map_err(
                    |reason| SnapshotError::Corrupt {
                        name: name.to_owned(),
                        reason,
                    },
                )?),
                None => None,
            };
        let saved = SavedStates::new(self.sessions.state_root());
        for id in ids {
            if self.sessions.store().get(id).is_some() {
                return Err(SnapshotError::SessionExists(id.clone()));
            }
        }
        let mut made: Vec<String> = Vec::new();
        for id in ids {
            let mut result = Ok(());
            if let Some(state) = &notebook {
                // Recorded first, so that closing it removes the names.
                self.sessions.store().touch(id, None);
                if let Err(err) = saved.place(id, state) {
                    result = Err(SnapshotError::Io {
                        path: format!("session {id}'s {SAVED_STATE_FILE}"),
                        source: err,
                    });
                }
            }
            for (backend, part) in manifest.backends.iter().filter(|_| result.is_ok()) {
                let env = match self.environment(name, backend) {
                    Ok(env) => env,
                    Err(err) => {
                        result = Err(err);
                        break;
                    }
                };
                // Recorded first, so that closing it reaches what the backend made; and kept
                // alive, so that a fork nobody uses ends by itself like any idle session.
                self.sessions.store().touch(id, Some(backend));
                self.sessions.keep_environments_alive(id, Some(backend));
                if let Err(err) = env.start_from_snapshot(id, part, &dir).await {
                    result = Err(SnapshotError::Backend {
                        backend: backend.clone(),
                        reason: err.to_string(),
                    });
                    break;
                }
            }
            made.push(id.clone());
            if let Err(err) = result {
                for id in &made {
                    if let Err(close) = self.sessions.close(id).await {
                        tracing::warn!(session = %id, %close, "a half-made fork was not closed");
                    }
                }
                return Err(err);
            }
        }
        Ok(())
    }
}

/// Writes a notebook's names into snapshot directory `dir`.
fn save_notebook(dir: &Path, state: &NotebookState) -> Result<NotebookPart, SnapshotError> {
    let path = dir.join(SAVED_STATE_FILE);
    let io = |source| SnapshotError::Io {
        path: path.display().to_string(),
        source,
    };
    saved_state::write_private(&path, state).map_err(io)?;
    Ok(NotebookPart {
        names: state.names.clone(),
        not_kept: state
            .not_kept
            .iter()
            .map(|(name, why)| NotKept {
                name: name.clone(),
                why: why.clone(),
            })
            .collect(),
        bytes: std::fs::metadata(&path).map_err(io)?.len(),
    })
}

/// Writes `manifest.json` owner-only, atomically.
fn write_manifest(dir: &Path, manifest: &Manifest) -> Result<(), SnapshotError> {
    let path = dir.join("manifest.json");
    let tmp = dir.join("manifest.json.tmp");
    let io = |source| SnapshotError::Io {
        path: path.display().to_string(),
        source,
    };
    let text = serde_json::to_vec_pretty(manifest).map_err(|e| io(std::io::Error::other(e)))?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io)?;
    std::io::Write::write_all(&mut file, &text).map_err(io)?;
    std::fs::rename(&tmp, &path).map_err(io)
}

/// New session ids for `count` forks of `base`.
pub fn fork_ids(base: &str, count: usize) -> Vec<String> {
    let stem: String = base.chars().take(100).collect();
    (1..=count)
        .map(|i| {
            format!(
                "{stem}-fork{i}-{}",
                paddock_backends::ids::new_run_id("")
                    .get(..6)
                    .unwrap_or("0")
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_and_made_from_session_ids() {
        for good in ["a", "run-1", "x.y_z", "0abc"] {
            check_name(good).unwrap();
        }
        for bad in ["", "-a", ".a", "A", "a b", "a/b", &"a".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
        let made = default_name("My Session/1");
        check_name(&made).unwrap();
        assert!(made.starts_with("my-session-1-"), "{made}");
        let forks = fork_ids("s", 3);
        assert_eq!(forks.len(), 3);
        assert!(forks[0].starts_with("s-fork1-"));
        assert_ne!(forks[0], forks[1]);
    }
}
