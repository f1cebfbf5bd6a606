//! Advisory exclusive locks that serialise read-modify-write cycles on one file (edit_file,
//! write_file, apply_patch), across threads and across agent connections.
//!
//! Writers replace files by renaming a temp file over them, so a lock taken on the old inode
//! does not cover the new one. After locking we therefore check that the path still names the
//! locked inode; if a rename replaced it meanwhile, we unlock and lock the new file instead.

use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Held while the file is read, changed and renamed over; closing the descriptor unlocks.
#[derive(Debug)]
pub(crate) struct FileLock {
    _file: File,
}

/// Locks the regular file at `path` (following symlinks, as the writes do). `None` when there
/// is no regular file to lock: a missing path (the write creates it) or a special file, which
/// opening could block on (a FIFO).
pub(crate) fn lock_existing(path: &Path) -> io::Result<Option<FileLock>> {
    loop {
        match std::fs::metadata(path) {
            Ok(m) if m.is_file() => {}
            Ok(_) => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        }
        let file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)?;
        let locked = file.metadata()?;
        match std::fs::metadata(path) {
            Ok(now) if now.dev() == locked.dev() && now.ino() == locked.ino() => {
                return Ok(Some(FileLock { _file: file }));
            }
            // Replaced (or removed) while we waited: drop this lock and take the current file's.
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
}
