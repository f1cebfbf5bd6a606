//! File operations served by the agent itself (`Request::Files`): the `paddock-files` library
//! run in the environment, so that a read, an edit or a search costs one socket round trip and
//! no process. The sandboxed local agent runs them inside its sandbox, where Landlock decides
//! what may be written, exactly as for a command.

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use crate::AgentError;
use crate::protocol::{FilesRequest, MAX_FRAME_BYTES, Reply, write_message};

/// Room left in a frame for the reply's own JSON around the answer.
const REPLY_MARGIN: usize = 64 * 1024;

/// The directory relative paths resolve against: the one the session's current-directory file
/// names (as its next command would start), else its start directory, else the agent's own.
pub fn base_dir(request: &FilesRequest) -> PathBuf {
    let start = request
        .start_dir
        .as_deref()
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from);
    let current = request
        .cwd_file
        .as_deref()
        .and_then(|file| std::fs::read_to_string(file).ok())
        .and_then(|text| text.lines().next().map(str::to_owned))
        .map(PathBuf::from)
        .filter(|dir| dir.is_absolute() && dir.is_dir());
    let base = current.or(start).unwrap_or_else(|| PathBuf::from("."));
    if base.is_absolute() {
        return base;
    }
    // A relative start directory is the agent's own directory's (where its commands start).
    std::env::current_dir()
        .map(|here| here.join(&base))
        .unwrap_or(base)
}

/// Carries out one file operation and answers it on `stream`.
pub fn serve_files(mut stream: UnixStream, request: FilesRequest) -> Result<(), AgentError> {
    let base = base_dir(&request);
    let reply = answer(&request, &base);
    write_message(&mut stream, &reply)?;
    Ok(())
}

fn answer(request: &FilesRequest, base: &Path) -> Reply {
    match paddock_files::execute(&request.operation, base) {
        Ok(value) => {
            let answer = value.to_string();
            if answer.len() > MAX_FRAME_BYTES - REPLY_MARGIN {
                // Never a frame the engine refuses: say what was too big instead.
                return Reply::FileFailed {
                    error: paddock_files::FileError {
                        kind: paddock_files::FileErrorKind::InvalidArgument,
                        message: format!(
                            "the answer is {} bytes, more than the {} a reply carries; ask for \
                             less (a smaller `limit`, `max_results` or a narrower `path`)",
                            answer.len(),
                            MAX_FRAME_BYTES - REPLY_MARGIN
                        ),
                    },
                };
            }
            Reply::Files { answer }
        }
        Err(error) => Reply::FileFailed { error },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(cwd_file: Option<String>, start_dir: Option<String>) -> FilesRequest {
        FilesRequest {
            operation: paddock_files::FileRequest::Info { path: ".".into() },
            cwd_file,
            start_dir,
        }
    }

    #[test]
    fn relative_paths_resolve_in_the_sessions_current_directory() {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir(&work).unwrap();
        let cwd_file = dir.path().join("cwd");
        std::fs::write(&cwd_file, format!("{}\n", work.display())).unwrap();
        let start = dir.path().display().to_string();
        let req = request(Some(cwd_file.display().to_string()), Some(start.clone()));
        assert_eq!(base_dir(&req), work);
        // A current directory that is gone: the start directory.
        std::fs::remove_dir(&work).unwrap();
        assert_eq!(base_dir(&req), dir.path());
        // No state yet at all.
        let req = request(Some("/nonexistent/cwd".into()), Some(start));
        assert_eq!(base_dir(&req), dir.path());
    }
}
