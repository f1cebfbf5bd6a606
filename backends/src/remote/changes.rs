//! Snapshots of environments that keep no image (apptainer, slurm with an image): the files
//! the environment changed since it started, saved by its agent (`paddock-agent
//! changes-save`) into the snapshot's directory, and made again in a forked session's new
//! environment (`changes-restore`). See `paddock_agent::changes` for what is carried.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use super::script::shell_quote;
use super::{RemoteEnvironment, Transport};
use crate::snapshot::SavedEnvironment;
use crate::{BackendError, Result};

/// The most a saved archive's text may take (base64 of 1.5 GB).
const MAX_ARCHIVE_CHARS: usize = 2 << 30;

impl<T: Transport> RemoteEnvironment<T> {
    /// The session's changed files, as `BACKEND-changes.bin` in `dir`, and its shell state.
    /// `agent`: the agent program inside ([`Transport::changes_agent`]).
    pub(super) async fn save_changes(
        &self,
        agent: &str,
        session: &str,
        dir: &Path,
        budget_bytes: u64,
    ) -> Result<SavedEnvironment> {
        // The agent's error goes apart from the archive on stdout, and is shown when it fails.
        let command = format!(
            "__p_err=\"$__p_state/changes.err\"\n\
             {} changes-save --max-bytes {budget_bytes} --exclude {} \
             --exclude /.paddock 2>\"$__p_err\"\n\
             __p_s=$?\n\
             if [ $__p_s -ne 0 ]; then cat \"$__p_err\"; fi\n\
             rm -f \"$__p_err\"\n\
             exit $__p_s",
            shell_quote(agent),
            shell_quote(self.transport.state_root())
        );
        let text = self
            .run_script(
                session,
                command,
                None,
                MAX_ARCHIVE_CHARS,
                "saving the session's changed files",
            )
            .await?;
        let archive = STANDARD
            .decode(text.trim_end())
            .map_err(|e| io_error(format!("the agent's archive is not base64: {e}")))?;
        let name = format!("{}-changes.bin", self.transport.name());
        let path = dir.join(&name);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)?;
        file.write_all(&archive)?;
        let shell = self.read_shell(session).await?;
        Ok(SavedEnvironment {
            kind: self.transport.kind().to_owned(),
            files: "changed files".to_owned(),
            image: None,
            archive: Some(name),
            workspace: None,
            workspace_was: None,
            shell,
            bytes: archive.len() as u64,
            not_carried: vec![
                "files deleted from the image (a fork has them again)".to_owned(),
                "binds from the host".to_owned(),
            ],
        })
    }

    /// Makes the (new) session's environment and the snapshot's files in it, then its shell
    /// state.
    pub(super) async fn restore_changes(
        &self,
        agent: &str,
        session: &str,
        saved: &SavedEnvironment,
        archive: &Path,
    ) -> Result<()> {
        let data = std::fs::read(archive).map_err(|e| {
            io_error(format!(
                "the snapshot's files {} cannot be read: {e}",
                archive.display()
            ))
        })?;
        self.run_script(
            session,
            format!("{} changes-restore", shell_quote(agent)),
            Some(STANDARD.encode(&data).into_bytes()),
            64 * 1024,
            "restoring the snapshot's files",
        )
        .await?;
        self.write_shell(session, &saved.shell).await
    }
}

fn io_error(message: String) -> BackendError {
    BackendError::Io(std::io::Error::other(message))
}
