//! What a snapshot keeps of one backend's part of a session (`paddock sessions snapshot`), and
//! the shell state every backend keeps the same way: the files of the session's state
//! directory (`cwd`, and `env.sh`: exports, functions, aliases), carried as text.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::BackendError;

/// One backend's part of a snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedEnvironment {
    /// The backend's kind when it was saved; a fork on a backend of another kind is refused.
    pub kind: String,
    /// How the environment's files were kept: `docker commit`, `changed files`, `reflink
    /// copy` or `copy`.
    pub files: String,
    /// docker: the committed image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// apptainer, slurm with an image: the environment's changed files, a file in the
    /// snapshot's directory (see `paddock_agent::changes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive: Option<String>,
    /// local: the workspace's copy, relative to the snapshot's directory, and where the
    /// workspace was (the shell's directory is carried relative to it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_was: Option<String>,
    /// The shell state's files, by name.
    pub shell: BTreeMap<String, String>,
    /// Bytes the files take (the image's size, or the copy's).
    pub bytes: u64,
    /// What was there and is not carried (running background processes, a workspace bound
    /// from the host).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_carried: Vec<String>,
}

/// The shell state's files a snapshot carries.
pub const SHELL_FILES: [&str; 2] = ["cwd", "env.sh"];

/// `env.sh` as a new session gets it: without the variables each run sets for its own
/// session and run (the new session's are set by its own runs).
pub fn shell_for_new_session(env_sh: &str) -> String {
    env_sh
        .lines()
        .filter(|line| {
            !["PADDOCK_SESSION=", "PADDOCK_RUN="]
                .iter()
                .any(|var| line.starts_with(&format!("declare -x {var}")))
        })
        .map(|line| format!("{line}\n"))
        .collect()
}

/// What a backend that keeps no snapshot answers.
pub fn snapshot_not_offered(kind: &str, name: &str) -> BackendError {
    BackendError::Unavailable {
        kind: kind.to_owned(),
        name: name.to_owned(),
        reason: "snapshots of a session are offered on docker, apptainer (with its agent), slurm \
                 with an image, and the sandboxed local backend only"
            .into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_session_keeps_the_shell_but_not_the_old_sessions_own_variables() {
        let old = "declare -x HOME=\"/root\"\ndeclare -x PADDOCK_SESSION=\"a\"\n\
                   declare -x PADDOCK_RUN=\"r1\"\ndeclare -x KEPT=\"yes\"\ngreet () \n{ \n    echo hi\n}\n\
                   alias ll='ls -l'\n";
        let new = shell_for_new_session(old);
        assert!(new.contains("KEPT=\"yes\""));
        assert!(new.contains("alias ll='ls -l'"));
        assert!(new.contains("greet ()"));
        assert!(!new.contains("PADDOCK_SESSION"));
        assert!(!new.contains("PADDOCK_RUN"));
    }
}
