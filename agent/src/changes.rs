//! The files an environment changed since it started, saved and restored for snapshots of
//! backends that keep no image (apptainer, slurm with an image): `changes-save` walks the
//! environment's own file systems (its root overlay and its tmpfs mounts; never a bind from
//! the host, `/proc`, `/sys` or `/dev`) for entries whose status changed after the
//! environment's first process started, and writes them to stdout; `changes-restore` makes
//! them in a new environment from stdin. Both run inside, so the image's own tools (a busybox
//! `find` has no `-newer` of a time) do not matter.
//!
//! The stream is base64 (it travels as a command's output) of records: a little-endian `u32`
//! length, that many bytes of a JSON [`Entry`], then a file's `size` bytes.
//!
//! Not carried: files deleted from the image (a fork sees them again), sockets, fifos and
//! devices, and names that are not UTF-8 (counted on stderr).

use std::collections::HashSet;
use std::fs::{File, FileTimes};
use std::io::{BufReader, BufWriter, Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::STANDARD;
use base64::read::DecoderReader;
use base64::write::EncoderWriter;
use serde::{Deserialize, Serialize};

use crate::AgentError;

/// Exit status of `changes-save` when the files are over `--max-bytes`.
pub const OVER_BUDGET: i32 = 3;

/// One saved entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub path: String,
    pub kind: Kind,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// Seconds since the epoch.
    pub mtime: i64,
    /// A file's length (its bytes follow the entry).
    #[serde(default)]
    pub size: u64,
    /// A symbolic link's target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    File,
    Dir,
    Symlink,
}

/// `changes-save [--max-bytes N] [--exclude PATH]...`.
pub fn save_main(args: &[String]) -> Result<i32, AgentError> {
    let mut max_bytes = u64::MAX;
    let mut excluded = vec![
        PathBuf::from("/proc"),
        PathBuf::from("/sys"),
        PathBuf::from("/dev"),
    ];
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let value = rest.next().ok_or_else(|| usage(arg))?;
        match arg.as_str() {
            "--max-bytes" => {
                max_bytes = value
                    .parse()
                    .map_err(|_| AgentError::Usage(format!("--max-bytes {value}: not a number")))?;
            }
            "--exclude" => excluded.push(PathBuf::from(value)),
            other => return Err(usage(other)),
        }
    }
    let since = environment_start()?;
    let mounts = Mounts::read(Path::new("/"))?;
    // Whatever is mounted over the environment's own file systems (/dev and the other kernel
    // trees, binds from the host, files apptainer binds such as /etc/resolv.conf) is not its
    // files.
    excluded.extend(mounts.others);
    let mut found = Found::default();
    walk(Path::new("/"), &mounts.kept, &excluded, since, &mut found)?;
    let total: u64 = found.entries.iter().map(|e| e.size).sum();
    if total > max_bytes {
        let _ = writeln!(
            std::io::stderr(),
            "the changed files take {} MB, over the {} MB the snapshot may still take",
            total.div_ceil(1 << 20),
            max_bytes >> 20
        );
        return Ok(OVER_BUDGET);
    }
    if found.skipped > 0 {
        let _ = writeln!(
            std::io::stderr(),
            "{} entries not saved (sockets, fifos, devices, names that are not UTF-8)",
            found.skipped
        );
    }
    let stdout = std::io::stdout().lock();
    let mut out = EncoderWriter::new(BufWriter::with_capacity(1 << 20, stdout), &STANDARD);
    for entry in &found.entries {
        write_entry(&mut out, entry)?;
    }
    out.finish()?.flush()?;
    Ok(0)
}

/// `changes-restore`: the entries on stdin, made under `/`.
pub fn restore_main(args: &[String]) -> Result<i32, AgentError> {
    if let Some(arg) = args.first() {
        return Err(usage(arg));
    }
    let stdin = std::io::stdin().lock();
    let mut input = DecoderReader::new(BufReader::with_capacity(1 << 20, stdin), &STANDARD);
    let made = restore(&mut input, Path::new("/"))?;
    let _ = writeln!(std::io::stderr(), "{made} entries restored");
    Ok(0)
}

fn usage(arg: &str) -> AgentError {
    AgentError::Usage(format!(
        "{arg}: changes-save [--max-bytes N] [--exclude PATH]... | changes-restore"
    ))
}

/// When the environment's first process (PID 1 of its PID namespace) started. An agent that
/// is not in a PID namespace of its own (PID 1 is the machine's init) cannot tell its
/// environment's files from the machine's: refused.
fn environment_start() -> Result<SystemTime, AgentError> {
    let stat = std::fs::read_to_string("/proc/1/stat")?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let after = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .unwrap_or_default();
    let ticks: u64 = after
        .split_whitespace()
        .nth(19)
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| std::io::Error::other("/proc/1/stat: no start time"))?;
    let boot: u64 = std::fs::read_to_string("/proc/stat")?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|t| t.trim().parse().ok())
        .ok_or_else(|| std::io::Error::other("/proc/stat: no btime"))?;
    // /proc counts in USER_HZ, 100 on every Linux architecture Paddock runs on.
    let after_boot = Duration::from_millis(ticks.saturating_mul(10));
    if after_boot < Duration::from_secs(5) {
        return Err(AgentError::StartFailed(
            "this environment has no PID namespace of its own (its PID 1 is the machine's \
             init), so its changed files cannot be told from the machine's"
                .into(),
        ));
    }
    // A second of slack: ctimes are compared in whole seconds.
    Ok(UNIX_EPOCH + Duration::from_secs(boot) + after_boot - Duration::from_secs(1))
}

/// The mounts of this environment, from `/proc/self/mountinfo`.
struct Mounts {
    /// The devices whose entries can be saved: `root`'s, and the tmpfs directories mounted
    /// as the environment's own (not under /dev, /proc or /sys: its /tmp and /var/tmp).
    kept: HashSet<u64>,
    /// Every other mount point: never entered.
    others: Vec<PathBuf>,
}

impl Mounts {
    fn read(root: &Path) -> Result<Self, AgentError> {
        let mut kept = HashSet::from([std::fs::symlink_metadata(root)?.dev()]);
        let mut others = Vec::new();
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")?;
        for line in mountinfo.lines() {
            let fields: Vec<&str> = line.split(' ').collect();
            let Some(dash) = fields.iter().position(|f| *f == "-") else {
                continue;
            };
            let (Some(mount_point), Some(fstype)) = (fields.get(4), fields.get(dash + 1)) else {
                continue;
            };
            if Path::new(mount_point) == root {
                continue;
            }
            let under =
                |dir: &str| *mount_point == dir || mount_point.starts_with(&format!("{dir}/"));
            // Octal escapes (`\040` for a space) are left as they are: such a mount point is
            // not found, and its entries are neither saved nor entered.
            let own_tmpfs = *fstype == "tmpfs"
                && !under("/dev")
                && !under("/proc")
                && !under("/sys")
                && Path::new(mount_point).is_dir();
            match std::fs::symlink_metadata(mount_point) {
                Ok(meta) if own_tmpfs => {
                    kept.insert(meta.dev());
                }
                // A file apptainer binds from its own tmpfs (/etc/resolv.conf) is its, not the
                // session's.
                _ => others.push(PathBuf::from(mount_point)),
            }
        }
        Ok(Self { kept, others })
    }
}

#[derive(Default)]
struct Found {
    entries: Vec<Entry>,
    skipped: u64,
}

/// Entries under `dir` changed since `since`, parents before children. Every directory is
/// entered: a file changed in place does not change its directory.
fn walk(
    dir: &Path,
    devices: &HashSet<u64>,
    excluded: &[PathBuf],
    since: SystemTime,
    found: &mut Found,
) -> Result<(), AgentError> {
    let Ok(listing) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    let mut names: Vec<_> = listing.flatten().collect();
    names.sort_by_key(std::fs::DirEntry::file_name);
    for item in names {
        let path = item.path();
        if excluded.iter().any(|e| path.starts_with(e)) {
            continue;
        }
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !devices.contains(&meta.dev()) {
            continue;
        }
        let changed =
            UNIX_EPOCH + Duration::from_secs(u64::try_from(meta.ctime()).unwrap_or(0)) >= since;
        let kind = if meta.is_dir() {
            Kind::Dir
        } else if meta.is_file() {
            Kind::File
        } else if meta.file_type().is_symlink() {
            Kind::Symlink
        } else {
            if changed {
                found.skipped += 1;
            }
            continue;
        };
        if changed {
            match path.to_str() {
                Some(name) => found.entries.push(Entry {
                    path: name.to_owned(),
                    kind,
                    mode: meta.mode() & 0o7777,
                    uid: meta.uid(),
                    gid: meta.gid(),
                    mtime: meta.mtime(),
                    size: if kind == Kind::File { meta.len() } else { 0 },
                    target: (kind == Kind::Symlink)
                        .then(|| std::fs::read_link(&path).ok())
                        .flatten()
                        .and_then(|t| t.to_str().map(str::to_owned)),
                }),
                None => found.skipped += 1,
            }
        }
        if kind == Kind::Dir {
            walk(&path, devices, excluded, since, found)?;
        }
    }
    Ok(())
}

/// One record: the entry, then a file's bytes (exactly `size` of them: a file that changed
/// length since it was listed is cut or padded with zeros, so the stream stays readable).
fn write_entry(out: &mut impl Write, entry: &Entry) -> Result<(), AgentError> {
    let header = serde_json::to_vec(entry).map_err(std::io::Error::other)?;
    let len = u32::try_from(header.len()).map_err(std::io::Error::other)?;
    out.write_all(&len.to_le_bytes())?;
    out.write_all(&header)?;
    if entry.kind == Kind::File {
        let copied = match File::open(&entry.path) {
            Ok(file) => std::io::copy(&mut file.take(entry.size), out)?,
            Err(_) => 0,
        };
        std::io::copy(&mut std::io::repeat(0).take(entry.size - copied), out)?;
    }
    Ok(())
}

/// Makes every entry of `input` under `root`; answers how many.
pub fn restore(input: &mut impl Read, root: &Path) -> Result<u64, AgentError> {
    let mut made = 0;
    loop {
        let mut len = [0u8; 4];
        match input.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(made),
            Err(e) => return Err(e.into()),
        }
        let mut header = vec![0u8; u32::from_le_bytes(len) as usize];
        input.read_exact(&mut header)?;
        let entry: Entry = serde_json::from_slice(&header).map_err(std::io::Error::other)?;
        let path = inside(root, &entry.path)?;
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        match entry.kind {
            Kind::Dir => {
                if !path.is_dir() {
                    let _ = std::fs::remove_file(&path);
                    std::fs::create_dir(&path)?;
                }
            }
            Kind::File => {
                if std::fs::symlink_metadata(&path).is_ok_and(|m| !m.is_file()) {
                    remove_any(&path)?;
                }
                let mut file = File::create(&path)?;
                std::io::copy(&mut input.take(entry.size), &mut file)?;
                let when =
                    UNIX_EPOCH + Duration::from_secs(u64::try_from(entry.mtime).unwrap_or(0));
                file.set_times(FileTimes::new().set_modified(when))?;
            }
            Kind::Symlink => {
                if std::fs::symlink_metadata(&path).is_ok() {
                    remove_any(&path)?;
                }
                let target = entry.target.as_deref().unwrap_or_default();
                std::os::unix::fs::symlink(target, &path)?;
            }
        }
        // Ownership needs root; a user's files are that user's anyway.
        let _ = std::os::unix::fs::lchown(&path, Some(entry.uid), Some(entry.gid));
        if entry.kind != Kind::Symlink {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(entry.mode))?;
        }
        made += 1;
    }
}

fn remove_any(path: &Path) -> std::io::Result<()> {
    if std::fs::symlink_metadata(path)?.is_dir() {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    }
}

/// `path` (absolute, as saved) under `root`; a path that climbs out is refused.
fn inside(root: &Path, path: &str) -> Result<PathBuf, AgentError> {
    let relative = Path::new(path);
    let mut out = root.to_path_buf();
    for part in relative.components() {
        match part {
            Component::RootDir => {}
            Component::Normal(name) => out.push(name),
            _ => {
                return Err(AgentError::Io(std::io::Error::other(format!(
                    "{path}: not a plain absolute path"
                ))));
            }
        }
    }
    if out == root {
        return Err(AgentError::Io(std::io::Error::other(format!(
            "{path}: names no entry"
        ))));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_paths_cannot_climb_out() {
        let from = tempfile::tempdir().unwrap();
        let base = from.path();
        std::fs::create_dir(base.join("d")).unwrap();
        std::fs::write(base.join("d/f.txt"), b"hello").unwrap();
        std::fs::set_permissions(base.join("d/f.txt"), PermissionsExt::from_mode(0o751)).unwrap();
        std::os::unix::fs::symlink("f.txt", base.join("d/l")).unwrap();
        let mut found = Found::default();
        let devices = HashSet::from([std::fs::metadata(base).unwrap().dev()]);
        walk(base, &devices, &[base.join("skip")], UNIX_EPOCH, &mut found).unwrap();
        let kinds: Vec<Kind> = found.entries.iter().map(|e| e.kind).collect();
        assert_eq!(kinds, [Kind::Dir, Kind::File, Kind::Symlink]);
        let mut stream = Vec::new();
        for entry in &found.entries {
            write_entry(&mut stream, entry).unwrap();
        }
        let to = tempfile::tempdir().unwrap();
        assert_eq!(restore(&mut stream.as_slice(), to.path()).unwrap(), 3);
        let copy = to.path().join(base.strip_prefix("/").unwrap());
        assert_eq!(std::fs::read(copy.join("d/f.txt")).unwrap(), b"hello");
        assert_eq!(
            std::fs::metadata(copy.join("d/f.txt")).unwrap().mode() & 0o777,
            0o751
        );
        assert_eq!(
            std::fs::read_link(copy.join("d/l")).unwrap(),
            Path::new("f.txt")
        );
        assert!(inside(to.path(), "/a/../../etc/passwd").is_err());
        assert!(inside(to.path(), "/").is_err());
    }

    #[test]
    fn only_entries_changed_since_the_start_are_found() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("new"), b"x").unwrap();
        let devices = HashSet::from([std::fs::metadata(dir.path()).unwrap().dev()]);
        let mut found = Found::default();
        let later = SystemTime::now() + Duration::from_secs(60);
        walk(dir.path(), &devices, &[], later, &mut found).unwrap();
        assert!(found.entries.is_empty());
        walk(dir.path(), &devices, &[], UNIX_EPOCH, &mut found).unwrap();
        assert_eq!(found.entries.len(), 1);
    }
}
