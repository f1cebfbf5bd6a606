//! Shell state that persists between commands of one session: working directory, exported
//! variables, functions and aliases. Every command is a fresh `bash -c` (nothing to corrupt,
//! nothing to hang); the wrapper below restores the session's state first and saves it on exit,
//! even when the command calls `exit`. The wrapper writes the new state next to the old one
//! (`env.sh.PID`, `cwd.PID`) with builtins only; the caller puts them into place once the shell
//! has exited ([`commit_state`], merged with what overlapping commands saved meanwhile): atomic
//! for concurrent readers, and no `mv` process per command (that alone cost 5 ms).

use std::path::{Path, PathBuf};

use crate::{BackendError, Result};

/// The state-keeping wrapper ([`paddock_agent::shell_state::WRAPPER`]): the agent recognises
/// it, to run the command in the session's live shell instead.
pub use paddock_agent::shell_state::{CALL_ENV, WRAPPER};

/// Where one session's shell state lives.
pub fn session_dir(state_root: &Path, session: &str) -> Result<PathBuf> {
    check_session(session)?;
    let dir = state_root.join("sessions").join(session);
    std::fs::create_dir_all(&dir).map_err(|e| BackendError::State {
        path: dir.display().to_string(),
        reason: e.to_string(),
    })?;
    Ok(dir)
}

/// Refuses session ids that could not name a directory (or a container) safely.
pub fn check_session(session: &str) -> Result<()> {
    if session.is_empty()
        || session.len() > 128
        || !session
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        || session.starts_with('.')
    {
        return Err(BackendError::InvalidCommand(format!(
            "session id {session:?} is invalid: use 1-128 characters from [A-Za-z0-9_.-]"
        )));
    }
    Ok(())
}

/// Refuses commands a shell cannot take.
pub fn check_command(command: &str) -> Result<()> {
    if command.trim().is_empty() {
        return Err(BackendError::InvalidCommand("the command is empty".into()));
    }
    if command.contains('\0') {
        return Err(BackendError::InvalidCommand(
            "the command contains a NUL byte, which no shell can take".into(),
        ));
    }
    Ok(())
}

/// Puts the state a finished shell (run with `tag`) wrote into place, merged with what
/// overlapping commands of the session saved meanwhile ([`paddock_agent::shell_state`]).
pub fn commit_state(state_dir: &Path, tag: &str) {
    paddock_agent::shell_state::commit_state(state_dir, tag);
}

/// The absolute path of bash, found once. An absolute program lets the standard library spawn
/// with `posix_spawn` (vfork) instead of forking the whole engine, and skips a PATH search per
/// command.
pub fn bash_path() -> &'static Path {
    static BASH: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BASH.get_or_init(|| {
        let path =
            std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
        std::env::split_paths(&path)
            .map(|dir| dir.join("bash"))
            .find(|candidate| candidate.is_file())
            .unwrap_or_else(|| PathBuf::from("/bin/bash"))
    })
}
