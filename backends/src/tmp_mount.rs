//! A local session's private /tmp as a tmpfs of `tmp_size_mb` (`sandbox-tmp/<session>` under
//! the state directory): mounting it once however many commands start together, and
//! unmounting it whole.

use std::path::{Path, PathBuf};

/// The mount points under `dir` (in this process's mount namespace), `dir` included.
pub(crate) fn mount_points_under(dir: &Path) -> Vec<PathBuf> {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    info.lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|field| PathBuf::from(field.replace("\\040", " ")))
        .filter(|point| point.starts_with(dir))
        .collect()
}

pub(crate) fn is_mount_point(path: &Path) -> bool {
    mount_points_under(path).iter().any(|p| p == path)
}

/// Unmounts the session's /tmp tmpfs, every layer of it (an engine before the mount lock
/// below could stack two).
pub(crate) fn unmount_tmp(path: &Path) {
    for _ in 0..8 {
        if !is_mount_point(path) {
            return;
        }
        if let Err(err) = nix::mount::umount2(path, nix::mount::MntFlags::MNT_DETACH) {
            tracing::warn!(path = %path.display(), %err, "cannot unmount a session's /tmp");
            return;
        }
    }
}

/// Mounts a `mb` MB tmpfs on the session's /tmp `tmp` unless one is there. The check and the
/// mount hold a lock on the directory of every session's /tmp: two commands of a session that
/// start together (parallel tool calls, two engine processes) would otherwise both find no
/// mount and stack two, and closing the session would unmount only the top one.
pub(crate) fn mount_tmp(tmp: &Path, mb: u64) -> std::result::Result<(), String> {
    let parent = tmp.parent().unwrap_or(tmp);
    let lock = std::fs::File::open(parent)
        .and_then(|dir| dir.lock().map(|()| dir))
        .map_err(|e| format!("cannot lock {}: {e}", parent.display()))?;
    if !is_mount_point(tmp) {
        nix::mount::mount(
            Some("paddock-tmp"),
            tmp,
            Some("tmpfs"),
            nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
            Some(format!("size={mb}m,mode=1777").as_str()),
        )
        .map_err(|e| e.to_string())?;
    }
    drop(lock);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier};

    fn layers(path: &Path) -> usize {
        mount_points_under(path)
            .iter()
            .filter(|p| *p == path)
            .count()
    }

    #[test]
    #[expect(clippy::print_stderr, reason = "a test that cannot run says why")]
    fn commands_starting_together_mount_one_tmpfs_and_closing_removes_every_layer() {
        if !nix::unistd::Uid::effective().is_root() {
            eprintln!("SKIPPED: mounting a tmpfs needs root (scripts/test-all.sh runs as root)");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let tmp = dir.path().join("sandbox-tmp").join("s");
        std::fs::create_dir_all(&tmp).unwrap();
        let start = Arc::new(Barrier::new(8));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (tmp, start) = (tmp.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    mount_tmp(&tmp, 4)
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap().unwrap();
        }
        assert_eq!(layers(&tmp), 1, "one tmpfs, not one per command");

        // Two layers, as an engine without the lock could leave: both go.
        nix::mount::mount(
            Some("paddock-tmp"),
            &tmp,
            Some("tmpfs"),
            nix::mount::MsFlags::empty(),
            Some("size=4m"),
        )
        .unwrap();
        assert_eq!(layers(&tmp), 2);
        unmount_tmp(&tmp);
        assert_eq!(layers(&tmp), 0);
        assert!(!is_mount_point(&tmp));
    }
}
