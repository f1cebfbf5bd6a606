//! Shell state that persists between commands of one session: working directory, exported
//! variables, functions and aliases. Every command is a fresh `bash -c` (nothing to corrupt,
//! nothing to hang); the wrapper below restores the session's state first and saves it on exit,
//! even when the command calls `exit`. The wrapper writes the new state next to the old one
//! (`env.sh.PID`, `cwd.PID`) with builtins only; the caller puts them into place once the shell
//! has exited ([`commit_state`], merged with what overlapping commands saved meanwhile): atomic
//! for concurrent readers, and no `mv` process per command (that alone cost 5 ms).

use std::path::{Path, PathBuf};

use crate::{BackendError, Result};

/// `bash -c WRAPPER paddock STATE_DIR COMMAND WORKDIR TAG`: the new state is written as
/// `env.sh.TAG` and `cwd.TAG` (a tag rather than `$$`: inside the sandbox's PID namespace every
/// shell is PID 2), the state the command started from as `env.sh.start.TAG` and
/// `cwd.start.TAG` (builtins only, after the restore: what [`commit_state`] merges against).
pub const WRAPPER: &str = r#"__paddock_state=$1; __paddock_cmd=$2; __paddock_workdir=$3; __paddock_tag=${4:-$$}
if [ -f "$__paddock_state/env.sh" ]; then . "$__paddock_state/env.sh" >/dev/null 2>&1; fi
if [ -n "$__paddock_workdir" ]; then
    builtin cd -- "$__paddock_workdir" || { echo "paddock: cannot change into workdir $__paddock_workdir" >&2; exit 126; }
elif [ -f "$__paddock_state/cwd" ]; then
    IFS= read -r __paddock_cwd < "$__paddock_state/cwd"
    builtin cd -- "$__paddock_cwd" 2>/dev/null || { echo "paddock: the session's directory $__paddock_cwd no longer exists; starting in ${HOME:-/}" >&2; builtin cd -- "${HOME:-/}"; }
fi
__paddock_save() {
    __paddock_status=$?
    export -n PADDOCK_RUN 2>/dev/null
    { export -p; declare -f; alias -p; } > "$__paddock_state/env.sh.$__paddock_tag" 2>/dev/null
    if [ -z "$__paddock_workdir" ]; then
        pwd -P > "$__paddock_state/cwd.$__paddock_tag" 2>/dev/null
    fi
    return $__paddock_status
}
trap __paddock_save EXIT
shopt -s expand_aliases
unset __paddock_cwd
{ export -p; declare -f; alias -p; } > "$__paddock_state/env.sh.start.$__paddock_tag" 2>/dev/null
if [ -z "$__paddock_workdir" ]; then
    pwd -P > "$__paddock_state/cwd.start.$__paddock_tag" 2>/dev/null
fi
eval "$__paddock_cmd""#;

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
