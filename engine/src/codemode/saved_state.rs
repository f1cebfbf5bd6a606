//! A notebook's names carried through a snapshot. A snapshot asks the session's live child for
//! its names ([`dump`]: made inside the confined child, by `marshal` for plain data and
//! `pickle` for the rest, modules by name, and the names that could not be kept with why); a session started from the snapshot finds them in
//! `sessions/ID/notebook.json` and its first notebook script's fresh child loads them
//! ([`load`]) before the script runs. The file is used once: a later lost state (a timeout, a
//! crash) starts empty, as it would in the original session.
//!
//! Loading happens in whichever engine process runs that first script, so names dumped by a
//! long-lived engine (an MCP server, the Python package) reach a `paddock run --keep-state` or
//! another program's engine.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use paddock_sandbox_worker::wire::Message;
pub use paddock_sandbox_worker::wire::{LoadedState, NotebookState};

use super::pool::LiveChild;

/// The file of a notebook's names, in a snapshot and in a session's state directory.
pub const SAVED_STATE_FILE: &str = "notebook.json";

/// How long a dump or a load may take; a child slower than this is ended (a script can give
/// an object a `__reduce__` that never returns).
const EXCHANGE_LIMIT: Duration = Duration::from_secs(10);

/// Why a dump or load failed, and whether the child is still usable.
#[derive(Debug)]
pub enum ExchangeError {
    /// The child answered with an error: its state is as it was.
    Refused(String),
    /// The child died, broke the protocol or took too long: it has been killed.
    ChildLost(String),
}

impl std::fmt::Display for ExchangeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Refused(reason) | Self::ChildLost(reason) => f.write_str(reason),
        }
    }
}

/// Sends `request` to an idle notebook child and answers its one reply.
async fn exchange(live: &mut LiveChild, request: &Message) -> Result<Message, ExchangeError> {
    let lost = |live: &mut LiveChild, reason: String| {
        live.checkout.kill();
        ExchangeError::ChildLost(reason)
    };
    if let Err(err) = live.checkout.send(request).await {
        return Err(lost(
            live,
            format!("the notebook's sandbox child is gone: {err}"),
        ));
    }
    match tokio::time::timeout(EXCHANGE_LIMIT, live.frames.next()).await {
        Ok(Ok(reply)) => Ok(reply),
        Ok(Err(err)) => Err(lost(
            live,
            format!("the notebook's sandbox child is gone: {err}"),
        )),
        Err(_) => Err(lost(
            live,
            format!(
                "the notebook's sandbox child did not answer within {} s and was ended",
                EXCHANGE_LIMIT.as_secs()
            ),
        )),
    }
}

/// The names of `live`'s notebook.
pub(super) async fn dump(live: &mut LiveChild) -> Result<NotebookState, ExchangeError> {
    match exchange(live, &Message::DumpState).await? {
        Message::StateDumped(Ok(state)) => Ok(state),
        Message::StateDumped(Err(reason)) => Err(ExchangeError::Refused(format!(
            "the notebook's names could not be saved: {reason}"
        ))),
        other => {
            live.checkout.kill();
            Err(ExchangeError::ChildLost(format!(
                "the notebook's sandbox child answered a dump with {other:?}"
            )))
        }
    }
}

/// Makes `live` (a fresh child) a notebook holding `state`'s names.
pub(super) async fn load(
    live: &mut LiveChild,
    state: NotebookState,
) -> Result<LoadedState, ExchangeError> {
    match exchange(live, &Message::LoadState(state)).await? {
        Message::StateLoaded(Ok(loaded)) => Ok(loaded),
        Message::StateLoaded(Err(reason)) => Err(ExchangeError::Refused(reason)),
        other => {
            live.checkout.kill();
            Err(ExchangeError::ChildLost(format!(
                "the notebook's sandbox child answered a load with {other:?}"
            )))
        }
    }
}

/// Where sessions' saved names wait for their first notebook script (`STATE/sessions`).
#[derive(Debug, Clone)]
pub struct SavedStates {
    sessions_dir: PathBuf,
}

impl SavedStates {
    pub fn new(state_root: &Path) -> Self {
        Self {
            sessions_dir: state_root.join("sessions"),
        }
    }

    fn path(&self, session: &str) -> PathBuf {
        self.sessions_dir.join(session).join(SAVED_STATE_FILE)
    }

    /// Takes `session`'s waiting names, if any: the file is gone afterwards, read or not.
    pub fn take(&self, session: &str) -> Option<Result<NotebookState, String>> {
        let path = self.path(session);
        let text = match std::fs::read(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => return Some(Err(format!("{}: {e}", path.display()))),
        };
        if let Err(err) = std::fs::remove_file(&path) {
            tracing::warn!(path = %path.display(), %err, "saved notebook names not removed");
        }
        Some(
            serde_json::from_slice(&text)
                .map_err(|e| format!("{} is not a notebook's names: {e}", path.display())),
        )
    }

    /// Makes `state` wait for `session`'s first notebook script.
    pub fn place(&self, session: &str, state: &NotebookState) -> std::io::Result<()> {
        let path = self.path(session);
        if let Some(dir) = path.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
        }
        write_private(&path, state)
    }
}

/// Writes `state` owner-only, whole or not at all.
pub fn write_private(path: &Path, state: &NotebookState) -> std::io::Result<()> {
    let text = serde_json::to_vec(state).map_err(std::io::Error::other)?;
    let tmp = path.with_extension("json.tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(&text)?;
    std::fs::rename(&tmp, path)
}

/// Reads the names a snapshot holds.
pub fn read(path: &Path) -> Result<NotebookState, String> {
    let text = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_slice(&text)
        .map_err(|e| format!("{} is not a notebook's names: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> NotebookState {
        NotebookState {
            encoding: "pickle".into(),
            data_base64: "gAR9lC4=".into(),
            modules: vec![("m".into(), "math".into())],
            names: vec!["m".into()],
            not_kept: vec![("f".into(), "defined by a script".into())],
        }
    }

    #[test]
    fn placed_names_are_private_and_taken_once() {
        let root = tempfile::tempdir().unwrap();
        let saved = SavedStates::new(root.path());
        assert!(saved.take("s1").is_none());
        saved.place("s1", &state()).unwrap();
        let file = root.path().join("sessions/s1").join(SAVED_STATE_FILE);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(saved.take("s1").unwrap().unwrap(), state());
        assert!(saved.take("s1").is_none());
        assert!(!file.exists());
    }

    #[test]
    fn a_corrupt_file_is_an_error_and_is_not_read_again() {
        let root = tempfile::tempdir().unwrap();
        let saved = SavedStates::new(root.path());
        let dir = root.path().join("sessions/s2");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(SAVED_STATE_FILE), b"{\"data_base64\": 1").unwrap();
        let err = saved.take("s2").unwrap().unwrap_err();
        assert!(err.contains("is not a notebook's names"), "{err}");
        assert!(saved.take("s2").is_none());
    }
}
