//! A sandboxed local session's files in a snapshot: a copy of its workspace (reflink where the
//! file system can, a plain copy otherwise, said in the snapshot), and a forked session's own
//! copy of it, which is its workspace until it closes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::LocalEnvironment;
use crate::snapshot::{SHELL_FILES, SavedEnvironment, shell_for_new_session};
use crate::{BackendError, Result};

/// The file in a session's state directory that names the workspace a fork gave it (a
/// `paddock call` is a new engine each time: the choice must outlive the process).
const WORKSPACE_FILE: &str = "workspace";

/// Copies `from`'s contents into `to` (made here), by reflink when the file system can;
/// answers how (`reflink copy` or `copy`).
async fn copy_tree(from: &Path, to: &Path) -> Result<&'static str> {
    let state = |e: std::io::Error| BackendError::State {
        path: to.display().to_string(),
        reason: e.to_string(),
    };
    std::fs::create_dir_all(to).map_err(state)?;
    let source = format!("{}/.", from.display());
    for (how, reflink) in [
        ("reflink copy", "--reflink=always"),
        ("copy", "--reflink=never"),
    ] {
        let out = tokio::process::Command::new("cp")
            .args(["-a", reflink, "--", &source])
            .arg(to)
            .output()
            .await
            .map_err(state)?;
        if out.status.success() {
            return Ok(how);
        }
        if how == "copy" {
            return Err(BackendError::State {
                path: to.display().to_string(),
                reason: format!(
                    "copying {} failed: {}",
                    from.display(),
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
            });
        }
        // No reflink here: start again from an empty directory.
        let _ = std::fs::remove_dir_all(to);
        std::fs::create_dir_all(to).map_err(state)?;
    }
    Ok("copy")
}

/// Bytes under `dir` (files' lengths; links not followed).
fn tree_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(|e| e.ok())
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => tree_bytes(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}

impl LocalEnvironment {
    /// Where forked sessions' workspaces are: `STATE/forks/BACKEND/SESSION`.
    fn fork_dir(&self, session: &str) -> PathBuf {
        self.state_root.join("forks").join(&self.name).join(session)
    }

    /// The workspace a fork gave `session`, from its state directory.
    pub(super) fn forked_workspace(&self, session: &str) -> Option<PathBuf> {
        let file = self
            .state_root
            .join("sessions")
            .join(session)
            .join(WORKSPACE_FILE);
        let text = std::fs::read_to_string(file).ok()?;
        let path = PathBuf::from(text.trim());
        path.starts_with(self.state_root.join("forks"))
            .then_some(path)
    }

    /// Removes a forked session's workspace copy (at close).
    pub(super) fn remove_fork(&self, session: &str) {
        let dir = self.fork_dir(session);
        if dir.exists() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    pub(super) async fn snapshot(
        &self,
        session: &str,
        dir: &Path,
        budget_bytes: u64,
    ) -> Result<SavedEnvironment> {
        crate::shell::check_session(session)?;
        let unavailable = |reason: String| BackendError::Unavailable {
            kind: "local".into(),
            name: self.name.clone(),
            reason,
        };
        let Some(sandbox) = self.sandbox_of(session) else {
            return Err(unavailable(
                "a snapshot keeps a sandboxed session's workspace; with `sandbox = \"none\"` \
                 commands change this machine's own files, which no snapshot can hold"
                    .into(),
            ));
        };
        let state = self.state_root.join("sessions").join(session);
        if !state.is_dir() {
            return Err(unavailable(format!(
                "session '{session}' has nothing here (closed, or it never ran a command on \
                 this backend)"
            )));
        }
        let mut shell = BTreeMap::new();
        for name in SHELL_FILES {
            if let Ok(text) = std::fs::read_to_string(state.join(name)) {
                shell.insert(name.to_owned(), text);
            }
        }
        if dir.starts_with(&sandbox.workspace) {
            return Err(unavailable(format!(
                "the snapshot would be kept inside the workspace it copies ({} is under {}): \
                 set PADDOCK_HOME to a directory outside the workspace",
                dir.display(),
                sandbox.workspace.display()
            )));
        }
        // Measured first: a workspace over the limit is refused before it is copied.
        let workspace_bytes = tree_bytes(&sandbox.workspace);
        if workspace_bytes > budget_bytes {
            return Err(unavailable(format!(
                "the workspace {} holds {} MB, over what the snapshots may still take ({} MB: \
                 [snapshots] max_total_mb, less the snapshots kept); remove snapshots or raise \
                 the limit",
                sandbox.workspace.display(),
                workspace_bytes.div_ceil(1 << 20),
                budget_bytes >> 20
            )));
        }
        let relative = format!("{}/workspace", self.name);
        let copy = dir.join(&relative);
        let how = copy_tree(&sandbox.workspace, &copy).await?;
        Ok(SavedEnvironment {
            kind: "local".into(),
            files: how.into(),
            image: None,
            archive: None,
            workspace: Some(relative),
            workspace_was: Some(sandbox.workspace.display().to_string()),
            shell,
            bytes: tree_bytes(&copy),
            not_carried: vec!["the session's private /tmp".into()],
        })
    }

    pub(super) async fn start_from(
        &self,
        session: &str,
        saved: &SavedEnvironment,
        dir: &Path,
    ) -> Result<()> {
        crate::shell::check_session(session)?;
        let (Some(copy), Some(_)) = (&saved.workspace, &self.sandbox) else {
            return Err(BackendError::Unavailable {
                kind: "local".into(),
                name: self.name.clone(),
                reason: "this snapshot has no workspace for a sandboxed local backend".into(),
            });
        };
        let state = self.state_root.join("sessions").join(session);
        if state.join("cwd").exists() || self.fork_dir(session).exists() {
            return Err(BackendError::State {
                path: state.display().to_string(),
                reason: format!("session '{session}' exists: a fork needs a new session id"),
            });
        }
        let workspace = self.fork_dir(session).join("workspace");
        let made = async {
            copy_tree(&dir.join(copy), &workspace).await?;
            let state = crate::shell::session_dir(&self.state_root, session)?;
            let write = |name: &str, text: &str| {
                std::fs::write(state.join(name), text).map_err(|e| BackendError::State {
                    path: state.join(name).display().to_string(),
                    reason: e.to_string(),
                })
            };
            write(WORKSPACE_FILE, &format!("{}\n", workspace.display()))?;
            if let Some(env) = saved.shell.get("env.sh") {
                write("env.sh", &shell_for_new_session(env))?;
            }
            // The shell's directory, moved with the workspace it was in.
            let cwd = saved.shell.get("cwd").map(|c| c.trim_end_matches('\n'));
            let moved = match (cwd, &saved.workspace_was) {
                (Some(cwd), Some(was)) => match Path::new(cwd).strip_prefix(was) {
                    Ok(rest) => workspace.join(rest),
                    Err(_) => PathBuf::from(cwd),
                },
                _ => workspace.clone(),
            };
            write("cwd", &format!("{}\n", moved.display()))?;
            if let Ok(mut map) = self.session_workspaces.lock() {
                map.insert(session.to_owned(), workspace.clone());
            }
            Ok::<(), BackendError>(())
        };
        if let Err(err) = made.await {
            self.remove_fork(session);
            let _ = std::fs::remove_dir_all(&state);
            return Err(err);
        }
        Ok(())
    }
}
