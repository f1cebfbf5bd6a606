//! apply_patch: the codex patch format, applied atomically across all the files it touches.
//!
//! Everything is decided before the disk changes: the patch is parsed, every file's new
//! content is computed in memory (later hunks see earlier ones' results), the existence rules
//! are checked, and only then is the result committed (see `commit`).

mod commit;
mod compute;
mod parse;
mod seek;

use crate::error::{FileError, FileErrorKind, Result};
use crate::lock;
use crate::paths;
use commit::Outcome;
use parse::Hunk;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// A file a patch touches; `path` as written in the patch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PatchTarget {
    pub path: String,
    pub action: PatchAction,
}

/// How a patch touches a file. `MoveTo` is the destination of a move (its source is listed
/// as `Update`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PatchAction {
    Add,
    Update,
    Delete,
    MoveTo,
}

pub(crate) fn targets(patch: &str) -> Result<Vec<PatchTarget>> {
    let mut out = Vec::new();
    for hunk in parse::parse(patch)? {
        match hunk {
            Hunk::Add { path, .. } => out.push(PatchTarget {
                path,
                action: PatchAction::Add,
            }),
            Hunk::Delete { path } => out.push(PatchTarget {
                path,
                action: PatchAction::Delete,
            }),
            Hunk::Update { path, move_to, .. } => {
                out.push(PatchTarget {
                    path,
                    action: PatchAction::Update,
                });
                if let Some(to) = move_to {
                    out.push(PatchTarget {
                        path: to,
                        action: PatchAction::MoveTo,
                    });
                }
            }
        }
    }
    Ok(out)
}

/// The state of the tree as the patch sees it: what earlier hunks decided, else the disk.
struct Overlay {
    plan: BTreeMap<PathBuf, Outcome>,
}

/// An existing file's content and permission bits.
struct Existing {
    bytes: Vec<u8>,
    mode: Option<u32>,
}

impl Overlay {
    fn exists(&self, key: &Path) -> bool {
        match self.plan.get(key) {
            Some(Outcome::Write { .. }) => true,
            Some(Outcome::Remove) => false,
            None => std::fs::symlink_metadata(key).is_ok(),
        }
    }

    fn read(&self, key: &Path, shown: &str) -> Result<Existing> {
        match self.plan.get(key) {
            Some(Outcome::Write { bytes, mode }) => Ok(Existing {
                bytes: bytes.clone(),
                mode: *mode,
            }),
            Some(Outcome::Remove) => {
                Err(not_found(shown, "an earlier hunk of this patch deletes it"))
            }
            None => {
                let meta = std::fs::metadata(key).map_err(|e| disk_err(shown, &e))?;
                if meta.is_dir() {
                    return Err(FileError::new(
                        FileErrorKind::IsDirectory,
                        format!("apply_patch: {shown} is a directory; patches change files"),
                    ));
                }
                let bytes = std::fs::read(key).map_err(|e| disk_err(shown, &e))?;
                Ok(Existing {
                    bytes,
                    mode: Some(meta.permissions().mode()),
                })
            }
        }
    }
}

fn disk_err(shown: &str, e: &std::io::Error) -> FileError {
    if e.kind() == std::io::ErrorKind::NotFound {
        not_found(shown, "use `*** Add File:` to create it")
    } else {
        FileError::io("apply_patch", Path::new(shown), e)
    }
}

fn not_found(shown: &str, hint: &str) -> FileError {
    FileError::new(
        FileErrorKind::NotFound,
        format!("apply_patch: {shown} does not exist; {hint}; nothing was changed"),
    )
}

pub(crate) fn apply(base: &Path, patch: &str) -> Result<serde_json::Value> {
    let hunks = parse::parse(patch)?;
    for target in targets(patch)? {
        if target.path.is_empty() {
            return Err(FileError::new(
                FileErrorKind::InvalidPatch,
                "apply_patch: a hunk has an empty path",
            ));
        }
    }
    let write_key = |p: &str| paths::follow_links(&paths::resolve(base, p));
    // Lock every existing file the patch reads or replaces, in one global order (no deadlock
    // between two patches), and hold the locks until the commit is done.
    let mut keys: Vec<PathBuf> = Vec::new();
    for hunk in &hunks {
        match hunk {
            Hunk::Add { path, .. } | Hunk::Delete { path } => keys.push(write_key(path)),
            Hunk::Update { path, move_to, .. } => {
                keys.push(write_key(path));
                keys.extend(move_to.as_deref().map(write_key));
            }
        }
    }
    keys.sort();
    keys.dedup();
    let mut _locks = Vec::new();
    for key in &keys {
        let lock = lock::lock_existing(key).map_err(|e| FileError::io("apply_patch", key, &e))?;
        _locks.push(lock);
    }

    let mut overlay = Overlay {
        plan: BTreeMap::new(),
    };
    let (mut added, mut updated, mut deleted, mut moved) = (vec![], vec![], vec![], vec![]);
    let mut overwritten: Vec<String> = Vec::new();
    for hunk in &hunks {
        match hunk {
            Hunk::Add { path, contents } => {
                let key = write_key(path);
                // As in codex (its `add_overwrites_existing_file`), which models learned the
                // format from: Add over an existing file replaces its content, keeping its
                // permission bits as an Update does. A directory stays an error.
                let mode = if overlay.exists(&key) {
                    overwritten.push(path.clone());
                    overlay.read(&key, path)?.mode
                } else {
                    None
                };
                overlay.plan.insert(
                    key,
                    Outcome::Write {
                        bytes: contents.clone().into_bytes(),
                        mode,
                    },
                );
                added.push(path.clone());
            }
            Hunk::Delete { path } => {
                // The link itself is deleted, not what it points to.
                let key = paths::resolve(base, path);
                if !overlay.exists(&key) {
                    return Err(not_found(path, "check the path"));
                }
                if !overlay.plan.contains_key(&key) && key.is_dir() && !key.is_symlink() {
                    return Err(FileError::new(
                        FileErrorKind::IsDirectory,
                        format!(
                            "apply_patch: {path} is a directory; use delete_file with recursive; nothing was changed"
                        ),
                    ));
                }
                overlay.plan.insert(key, Outcome::Remove);
                deleted.push(path.clone());
            }
            Hunk::Update {
                path,
                move_to,
                chunks,
            } => {
                let key = write_key(path);
                let existing = overlay.read(&key, path)?;
                if existing
                    .bytes
                    .iter()
                    .take(crate::read::SNIFF_BYTES)
                    .any(|&b| b == 0)
                {
                    return Err(FileError::new(
                        FileErrorKind::Binary,
                        format!("apply_patch: {path} is a binary file; patches change text files"),
                    ));
                }
                let text = String::from_utf8(existing.bytes).map_err(|_| {
                    FileError::invalid(format!(
                        "apply_patch: {path} is not valid UTF-8; change it with a script"
                    ))
                })?;
                let new_text = if chunks.is_empty() {
                    text
                } else {
                    compute::apply_chunks(&text, chunks, path)?
                };
                let outcome = Outcome::Write {
                    bytes: new_text.into_bytes(),
                    mode: existing.mode,
                };
                match move_to {
                    Some(to) => {
                        let dest = write_key(to);
                        if dest.is_dir() && !overlay.plan.contains_key(&dest) {
                            return Err(FileError::new(
                                FileErrorKind::IsDirectory,
                                format!(
                                    "apply_patch: cannot move {path} to {to}: it is a directory; nothing was changed"
                                ),
                            ));
                        }
                        if dest != key {
                            overlay.plan.insert(key, Outcome::Remove);
                        }
                        overlay.plan.insert(dest, outcome);
                        moved.push(json!({"from": path, "to": to}));
                    }
                    None => {
                        overlay.plan.insert(key, outcome);
                        updated.push(path.clone());
                    }
                }
            }
        }
    }
    commit::commit(&overlay.plan).map_err(|(path, e)| {
        let err = FileError::io("apply_patch", &path, &e);
        FileError::new(
            err.kind,
            format!(
                "{}; the patch was rolled back, nothing was changed",
                err.message
            ),
        )
    })?;
    let mut answer =
        json!({"added": added, "updated": updated, "deleted": deleted, "moved": moved});
    if !overwritten.is_empty() {
        // `added` lists them too; these existed and were replaced.
        answer["overwritten"] = json!(true);
        answer["overwritten_files"] = json!(overwritten);
    }
    Ok(answer)
}
