//! The file tools of DESIGN §7 (read, write, edit, apply_patch, move, delete, grep, glob,
//! list, info, and watching a directory: [`watch`]), shared by the in-environment agent and the
//! engine. Plain std, no async
//! runtime: the agent is a small static binary.
#![forbid(unsafe_code)]
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod error;
pub mod request;

mod atomic;
mod edit;
mod lock;
mod nearest;
mod ops;
mod patch;
mod paths;
mod read;
mod search;
pub mod watch;

pub use error::{FileError, FileErrorKind};
pub use patch::{PatchAction, PatchTarget};
pub use request::{FileRequest, GrepMode};

use std::path::{Path, PathBuf};

/// Runs one file operation; relative paths resolve against `base` (the session's current dir).
pub fn execute(request: &FileRequest, base: &Path) -> Result<serde_json::Value, FileError> {
    match request {
        FileRequest::Read {
            path,
            offset,
            limit,
        } => read::read(base, path, *offset, *limit),
        FileRequest::Write { path, content } => edit::write(base, path, content),
        FileRequest::Edit {
            path,
            old_string,
            new_string,
            replace_all,
        } => edit::edit(base, path, old_string, new_string, *replace_all),
        FileRequest::ApplyPatch { patch } => patch::apply(base, patch),
        FileRequest::Move {
            from,
            to,
            overwrite,
        } => ops::move_file(base, from, to, *overwrite),
        FileRequest::Delete { path, recursive } => ops::delete(base, path, *recursive),
        FileRequest::Grep {
            pattern,
            path,
            glob,
            ignore_case,
            fixed_strings,
            output_mode,
            context,
            max_results,
        } => search::grep(
            base,
            &search::GrepArgs {
                pattern,
                path: path.as_deref(),
                glob: glob.as_deref(),
                ignore_case: *ignore_case,
                fixed_strings: *fixed_strings,
                mode: output_mode.unwrap_or_default(),
                context: *context,
                max_results: *max_results,
            },
        ),
        FileRequest::Glob { pattern, path } => search::glob(base, pattern, path.as_deref()),
        FileRequest::List { path, depth } => ops::list(base, path.as_deref(), *depth),
        FileRequest::Info { path } => ops::info(base, path),
        FileRequest::Watch {
            path,
            recursive,
            timeout_ms,
            max_events,
        } => watch::watch_answer(
            &paths::checked("watch", base, path)?,
            *recursive,
            *timeout_ms,
            *max_events,
        ),
    }
}

/// Where `path` lands, lexically (no symlinks followed): absolute paths as they are, relative
/// ones joined to `base`, `.` and `..` folded. Used by the engine's approvals.
pub fn resolve(base: &Path, path: &str) -> PathBuf {
    paths::resolve(base, path)
}

/// The files a patch touches, for the engine's approvals, without touching the disk.
pub fn patch_targets(patch: &str) -> Result<Vec<PatchTarget>, FileError> {
    patch::targets(patch)
}
