//! Atomic replacement of a file: the new bytes go to a temp file in the same directory
//! (same filesystem, so the rename is atomic), are fsynced, and are renamed over the target.
//! Readers see the old file or the new one, never a half-written one.

use std::fs::{self, File, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Mode of files we create (the umask still applies, as for any new file).
const NEW_FILE_MODE: u32 = 0o644;

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A fresh dot-name next to `target`: `.name.paddock-<tag>-<pid>-<random>`. The kernel's
/// random bytes (with the clock and a counter as fallback) keep names unguessable and
/// distinct; `create_new` catches the rare collision.
pub(crate) fn sibling_name(target: &Path, tag: &str) -> PathBuf {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut random = [0u8; 8];
    if rustix::rand::getrandom(&mut random, rustix::rand::GetRandomFlags::empty()).is_err() {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        random[..4].copy_from_slice(&nanos.to_le_bytes());
    }
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let suffix = u64::from_le_bytes(random) ^ n.rotate_left(48);
    let dir = target.parent().unwrap_or(Path::new("."));
    dir.join(format!(
        ".{name}.paddock-{tag}-{}-{suffix:016x}",
        std::process::id()
    ))
}

/// Writes `bytes` to a new temp file beside `target`, fsynced, with `mode` (the replaced
/// file's permission bits) or the default for new files. Returns the temp file's path.
pub(crate) fn stage(target: &Path, bytes: &[u8], mode: Option<u32>) -> io::Result<PathBuf> {
    loop {
        let temp = sibling_name(target, "tmp");
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(NEW_FILE_MODE)
            .open(&temp);
        let mut file = match file {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        };
        let written = (|| {
            file.write_all(bytes)?;
            if let Some(mode) = mode {
                file.set_permissions(Permissions::from_mode(mode & 0o7777))?;
            }
            file.sync_all()
        })();
        if let Err(e) = written {
            let _ = fs::remove_file(&temp);
            return Err(e);
        }
        return Ok(temp);
    }
}

/// Replaces (or creates) `target` atomically. The parent directory must exist.
pub(crate) fn replace(target: &Path, bytes: &[u8], mode: Option<u32>) -> io::Result<()> {
    let temp = stage(target, bytes, mode)?;
    if let Err(e) = fs::rename(&temp, target) {
        let _ = fs::remove_file(&temp);
        return Err(e);
    }
    sync_parent(target);
    Ok(())
}

/// Makes a rename durable. Best effort: some filesystems refuse fsync on directories, and the
/// rename itself has already happened.
pub(crate) fn sync_parent(path: &Path) {
    if let Some(dir) = path.parent() {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
}
