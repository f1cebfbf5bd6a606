//! Files in and out of a session's environment for operators and harnesses (`paddock files
//! put|get`, the Python package's `upload`/`download`): a file as bytes, a directory as a tar
//! stream. Unlike the file tools these are not the agent's calls, so no approval is asked;
//! they run one shell command in the environment (`cat`, `tar`, `base64` there), on the
//! backend the `files` route names.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use base64::Engine as _;
use paddock_backends::ExecRequest;
use serde_json::{Value, json};

use super::environment::Environments;

/// A transfer may take this long in the environment.
const TRANSFER_TIMEOUT: Duration = Duration::from_secs(1800);
/// The most a download carries (base64 characters), 1 GiB of data.
const MAX_DOWNLOAD_CHARS: usize = 1 << 31;

/// Precedes a download's data in the command's output.
const MARKER: &str = "PADDOCK-TRANSFER:";

/// What went wrong moving files.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    #[error("{0}")]
    Local(String),
    #[error("in the environment: {0}")]
    Remote(String),
    #[error(transparent)]
    Backend(#[from] paddock_backends::BackendError),
}

/// `path` as one shell word; a leading `~/` stays outside the quotes, so that the
/// environment's shell makes it its home, as the file tools do.
fn word(path: &str) -> String {
    let quote = |text: &str| format!("'{}'", text.replace('\'', r"'\''"));
    match path.strip_prefix("~/") {
        Some(rest) => format!("~/{}", quote(rest)),
        None if path == "~" => "~".to_owned(),
        None => quote(path),
    }
}

/// Runs the host's `tar` with `args`, feeding `input`; answers its stdout.
fn host_tar(args: &[&str], input: Option<&[u8]>) -> Result<Vec<u8>, TransferError> {
    let mut child = Command::new("tar")
        .args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| TransferError::Local(format!("cannot run tar on this machine: {e}")))?;
    if let (Some(data), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin
            .write_all(data)
            .map_err(|e| TransferError::Local(format!("tar: {e}")))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| TransferError::Local(format!("tar: {e}")))?;
    if !out.status.success() {
        return Err(TransferError::Local(format!(
            "tar {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(out.stdout)
}

impl Environments {
    async fn transfer_command(
        &self,
        session: &str,
        command: String,
        stdin: Option<Vec<u8>>,
        max_output_chars: usize,
    ) -> Result<String, TransferError> {
        let env = self
            .backend_for("files")
            .map_err(|e| TransferError::Local(e.message))?;
        // The session's record names the backend, so that closing it ends what this made.
        self.resume_if_paused(session)
            .await
            .map_err(|e| TransferError::Local(e.message))?;
        let _active = self.activity(session, Some(env));
        let out = env
            .exec(ExecRequest {
                command,
                session: session.to_owned(),
                workdir: None,
                env: Default::default(),
                stdin,
                timeout: TRANSFER_TIMEOUT,
                pty: false,
                max_output_chars,
                chunks: None,
                keep_detached: false,
            })
            .await?;
        if out.exit_code != 0 {
            return Err(TransferError::Remote(out.output.trim().to_owned()));
        }
        Ok(out.output)
    }

    /// Copies `local` (a file, or a directory's contents) to `remote` in the session's
    /// environment; parents are made.
    pub async fn upload(
        &self,
        session: &str,
        local: &Path,
        remote: &str,
    ) -> Result<Value, TransferError> {
        let meta = std::fs::metadata(local)
            .map_err(|e| TransferError::Local(format!("{}: {e}", local.display())))?;
        let target = word(remote);
        let (command, data, kind) = if meta.is_dir() {
            let dir = local.display().to_string();
            let tar = host_tar(&["-c", "-C", &dir, "."], None)?;
            (
                format!("mkdir -p -- {target} && tar -x -C {target}"),
                tar,
                "directory",
            )
        } else {
            let data = std::fs::read(local)
                .map_err(|e| TransferError::Local(format!("{}: {e}", local.display())))?;
            (
                format!("__d=$(dirname -- {target}) && mkdir -p -- \"$__d\" && cat > {target}"),
                data,
                "file",
            )
        };
        let bytes = data.len();
        self.transfer_command(session, command, Some(data), 16 * 1024)
            .await?;
        Ok(json!({"from": local.display().to_string(), "to": remote, "kind": kind, "bytes": bytes}))
    }

    /// Copies `remote` (a file, or a directory's contents) from the session's environment to
    /// `local`; parents are made.
    pub async fn download(
        &self,
        session: &str,
        remote: &str,
        local: &Path,
    ) -> Result<Value, TransferError> {
        let source = word(remote);
        // The data follows a marker: whatever the session's shell printed before it (a note
        // that its directory is gone) is not data. tar's own messages go nowhere; its failure
        // is the exit status.
        let command = format!(
            "( set -o pipefail; if [ -d {source} ]; then printf '{MARKER}D'; \
             tar -c -C {source} . 2>/dev/null | base64 -w0; \
             elif [ -f {source} ]; then printf '{MARKER}F'; base64 -w0 < {source}; \
             else echo \"no such file or directory: \"{source}; exit 2; fi )"
        );
        let text = self
            .transfer_command(session, command, None, MAX_DOWNLOAD_CHARS)
            .await?;
        let Some(at) = text.find(MARKER) else {
            return Err(TransferError::Remote(format!(
                "unexpected answer: {}",
                text.chars().take(200).collect::<String>()
            )));
        };
        let (kind, encoded) =
            text[at + MARKER.len()..].split_at(1.min(text.len() - at - MARKER.len()));
        let data = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim().as_bytes())
            .map_err(|e| TransferError::Remote(format!("the transfer was garbled: {e}")))?;
        let bytes = data.len();
        match kind {
            "D" => {
                std::fs::create_dir_all(local)
                    .map_err(|e| TransferError::Local(format!("{}: {e}", local.display())))?;
                host_tar(&["-x", "-C", &local.display().to_string()], Some(&data))?;
            }
            "F" => {
                if let Some(parent) = local.parent().filter(|p| !p.as_os_str().is_empty()) {
                    std::fs::create_dir_all(parent)
                        .map_err(|e| TransferError::Local(format!("{}: {e}", parent.display())))?;
                }
                std::fs::write(local, &data)
                    .map_err(|e| TransferError::Local(format!("{}: {e}", local.display())))?;
            }
            _ => {
                return Err(TransferError::Remote(format!(
                    "unexpected answer: {}",
                    text.chars().take(200).collect::<String>()
                )));
            }
        }
        Ok(json!({
            "from": remote,
            "to": local.display().to_string(),
            "kind": if kind == "D" { "directory" } else { "file" },
            "bytes": bytes
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remote_path_is_one_shell_word_with_home_left_to_the_shell() {
        assert_eq!(word("out dir/it's"), r"'out dir/it'\''s'");
        assert_eq!(word("~/task"), "~/'task'");
        assert_eq!(word("~"), "~");
        assert_eq!(word("/abs/~/x"), "'/abs/~/x'");
    }
}
