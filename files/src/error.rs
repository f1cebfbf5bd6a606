//! The one error type of the crate. It crosses the agent's socket, so it is plain data: a kind
//! the caller can match on (and turn into a `file:*` code) and a message that names the file
//! and says how to fix the call.

use serde::{Deserialize, Serialize};
use std::io;
use std::path::Path;

/// What went wrong, coarse enough for a caller to act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileErrorKind {
    NotFound,
    Binary,
    NoMatch,
    Ambiguous,
    Exists,
    IsDirectory,
    NotDirectory,
    PermissionDenied,
    InvalidPatch,
    PatchFailed,
    InvalidArgument,
    Io,
}

impl FileErrorKind {
    /// The stable error code the tools report (DESIGN §7).
    pub fn code(&self) -> &'static str {
        match self {
            FileErrorKind::NotFound => "file:not_found",
            FileErrorKind::Binary => "file:binary",
            FileErrorKind::NoMatch => "file:no_match",
            FileErrorKind::Ambiguous => "file:ambiguous",
            FileErrorKind::Exists => "file:exists",
            FileErrorKind::IsDirectory => "file:is_directory",
            FileErrorKind::NotDirectory => "file:not_directory",
            FileErrorKind::PermissionDenied => "file:permission_denied",
            FileErrorKind::InvalidPatch => "file:invalid_patch",
            FileErrorKind::PatchFailed => "file:patch_failed",
            FileErrorKind::InvalidArgument => "file:invalid_argument",
            FileErrorKind::Io => "file:io",
        }
    }
}

/// A failed file operation. `Display` is the message alone; the code comes from `kind`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct FileError {
    pub kind: FileErrorKind,
    pub message: String,
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, FileError>;

impl FileError {
    pub fn new(kind: FileErrorKind, message: impl Into<String>) -> Self {
        FileError {
            kind,
            message: message.into(),
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        FileError::new(FileErrorKind::InvalidArgument, message)
    }

    /// An I/O failure of `op` on `path`, classified by the io error's kind so that a caller
    /// sees `file:not_found` rather than a generic `file:io` for a missing file.
    pub fn io(op: &str, path: &Path, err: &io::Error) -> Self {
        let kind = kind_of(err);
        let hint = match kind {
            FileErrorKind::NotFound => {
                "; check the path (relative paths resolve against the current directory)"
            }
            FileErrorKind::PermissionDenied => "; the sandbox or the file's mode forbids it",
            FileErrorKind::IsDirectory => "; give a file path",
            FileErrorKind::NotDirectory => "; a component of the path is a file",
            FileErrorKind::Binary
            | FileErrorKind::NoMatch
            | FileErrorKind::Ambiguous
            | FileErrorKind::Exists
            | FileErrorKind::InvalidPatch
            | FileErrorKind::PatchFailed
            | FileErrorKind::InvalidArgument
            | FileErrorKind::Io => "",
        };
        FileError::new(kind, format!("{op}: {}: {err}{hint}", path.display()))
    }
}

/// Maps an io error to our kinds; anything without a closer kind is `Io`.
fn kind_of(err: &io::Error) -> FileErrorKind {
    match err.kind() {
        io::ErrorKind::NotFound => FileErrorKind::NotFound,
        io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem => {
            FileErrorKind::PermissionDenied
        }
        io::ErrorKind::IsADirectory | io::ErrorKind::DirectoryNotEmpty => {
            FileErrorKind::IsDirectory
        }
        io::ErrorKind::NotADirectory => FileErrorKind::NotDirectory,
        io::ErrorKind::AlreadyExists => FileErrorKind::Exists,
        io::ErrorKind::InvalidInput | io::ErrorKind::InvalidFilename => {
            FileErrorKind::InvalidArgument
        }
        _ => match err.raw_os_error() {
            // EPERM (e.g. a seccomp or Landlock refusal) reads as "permission denied" too.
            Some(1) => FileErrorKind::PermissionDenied,
            _ => FileErrorKind::Io,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_map_to_kinds() {
        let p = Path::new("a.txt");
        let e = FileError::io("read_file", p, &io::Error::from(io::ErrorKind::NotFound));
        assert_eq!(e.kind.code(), "file:not_found");
        assert!(e.message.contains("a.txt"));
        let e = FileError::io("read_file", p, &io::Error::from_raw_os_error(21));
        assert_eq!(e.kind, FileErrorKind::IsDirectory);
        let e = FileError::io("read_file", p, &io::Error::from_raw_os_error(13));
        assert_eq!(e.kind, FileErrorKind::PermissionDenied);
    }

    #[test]
    fn error_round_trips_through_json() {
        let e = FileError::new(FileErrorKind::Ambiguous, "x");
        let s = serde_json::to_string(&e).unwrap();
        assert_eq!(serde_json::from_str::<FileError>(&s).unwrap(), e);
        assert_eq!(e.to_string(), "x");
    }
}
