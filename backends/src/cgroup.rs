//! Per-session control groups: a process ceiling (`pids`), a CPU quota (`cpu`) and a memory
//! ceiling (`memory`) that bind root too, for the local backend's sessions.
//!
//! Each controller is found in `/proc/self/mountinfo`: a cgroup v1 hierarchy that carries it
//! (a hybrid machine binds `pids` and `cpu` to v1, and its v2 mount then has no controllers),
//! else the cgroup v2 mount when its `cgroup.controllers` lists it. A session's group is
//! `<mount>/paddock/<owner>/<session>` in each hierarchy used (the owner: the backend's name and
//! a digest of the engine's state directory, so that engines with different `PADDOCK_HOME`s,
//! whose session ids repeat, never share or sweep each other's groups). The engine creates it and
//! writes the limits; the sandbox helper writes `0` to its `cgroup.procs` as its first step
//! (no `unsafe`, no race: everything it starts is born inside). Closing the session kills what
//! is left in it (`cgroup.kill` on v2, SIGKILL per process on v1) and removes it.
//!
//! Delegation: an engine that is not root uses the groups only when `<mount>/paddock` exists
//! and is writable by it (an operator created and chowned it, and on v2 enabled
//! `+pids +cpu +memory` in its parent's `cgroup.subtree_control`); otherwise
//! [`CgroupError::NotWritable`] says so.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The directory under each hierarchy that holds Paddock's groups.
pub const PADDOCK_DIR: &str = "paddock";

/// The CFS period written with a CPU quota (100 ms, the kernel's default).
const CPU_PERIOD_US: u64 = 100_000;

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error(
        "no cgroup hierarchy with the `{controller}` controller is mounted (looked for a cgroup v1 \
         mount carrying it and a cgroup v2 mount listing it in cgroup.controllers, in \
         /proc/self/mountinfo)"
    )]
    NotMounted { controller: &'static str },
    #[error(
        "cannot create the session's `{controller}` cgroup {path}: {reason}; as root this works; \
         otherwise delegate one: create {base} and chown it to this user (on cgroup v2 also \
         enable the controller with `echo +{controller} > PARENT/cgroup.subtree_control`)"
    )]
    NotWritable {
        controller: &'static str,
        path: String,
        base: String,
        reason: String,
    },
    #[error("cgroup {path}: {op}: {source}")]
    Io {
        path: String,
        op: &'static str,
        source: std::io::Error,
    },
    #[error("cgroup {path} still holds processes after {waited_ms} ms of SIGKILL; not removed")]
    Busy { path: String, waited_ms: u64 },
}

pub type Result<T> = std::result::Result<T, CgroupError>;

/// The controllers Paddock sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Controller {
    Pids,
    Cpu,
    Memory,
}

impl Controller {
    pub fn name(self) -> &'static str {
        match self {
            Controller::Pids => "pids",
            Controller::Cpu => "cpu",
            Controller::Memory => "memory",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// Where each controller lives on this machine.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Layout {
    /// Per controller: its hierarchy's version and mount point.
    pub pids: Option<(Version, PathBuf)>,
    pub cpu: Option<(Version, PathBuf)>,
    pub memory: Option<(Version, PathBuf)>,
}

/// A mount point as mountinfo writes it (space, tab, newline and backslash as `\ooo`).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && bytes[i + 1..i + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b))
        {
            let value =
                (bytes[i + 1] - b'0') * 64 + (bytes[i + 2] - b'0') * 8 + (bytes[i + 3] - b'0');
            out.push(value);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Layout {
    /// Reads `/proc/self/mountinfo` and the v2 mount's `cgroup.controllers`.
    pub fn detect() -> Self {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        Self::from_mountinfo(&mountinfo, |mount| {
            std::fs::read_to_string(mount.join("cgroup.controllers")).unwrap_or_default()
        })
    }

    /// The layout a mountinfo text describes; `controllers_of` reads a v2 mount's
    /// `cgroup.controllers`. A v1 hierarchy carrying a controller wins (on a hybrid machine
    /// the v2 mount cannot have it).
    pub fn from_mountinfo(mountinfo: &str, controllers_of: impl Fn(&Path) -> String) -> Self {
        let mut layout = Layout::default();
        let mut v2: Option<PathBuf> = None;
        for line in mountinfo.lines() {
            let Some((left, right)) = line.split_once(" - ") else {
                continue;
            };
            let Some(mount_point) = left.split(' ').nth(4) else {
                continue;
            };
            let mut right = right.split(' ');
            let (Some(fstype), _, Some(options)) = (right.next(), right.next(), right.next())
            else {
                continue;
            };
            let mount_point = PathBuf::from(unescape(mount_point));
            match fstype {
                "cgroup" => {
                    for option in options.split(',') {
                        match option {
                            "pids" if layout.pids.is_none() => {
                                layout.pids = Some((Version::V1, mount_point.clone()));
                            }
                            "cpu" if layout.cpu.is_none() => {
                                layout.cpu = Some((Version::V1, mount_point.clone()));
                            }
                            "memory" if layout.memory.is_none() => {
                                layout.memory = Some((Version::V1, mount_point.clone()));
                            }
                            _ => {}
                        }
                    }
                }
                "cgroup2" if v2.is_none() => v2 = Some(mount_point),
                _ => {}
            }
        }
        if let Some(mount) = v2 {
            let listed = controllers_of(&mount);
            let has = |name: &str| listed.split_whitespace().any(|c| c == name);
            if layout.pids.is_none() && has("pids") {
                layout.pids = Some((Version::V2, mount.clone()));
            }
            if layout.cpu.is_none() && has("cpu") {
                layout.cpu = Some((Version::V2, mount.clone()));
            }
            if layout.memory.is_none() && has("memory") {
                layout.memory = Some((Version::V2, mount));
            }
        }
        layout
    }

    fn of(&self, controller: Controller) -> Option<&(Version, PathBuf)> {
        match controller {
            Controller::Pids => self.pids.as_ref(),
            Controller::Cpu => self.cpu.as_ref(),
            Controller::Memory => self.memory.as_ref(),
        }
    }

    /// The hierarchy a controller lives in, or why there is none.
    pub fn hierarchy(&self, controller: Controller) -> Result<(Version, &Path)> {
        self.of(controller)
            .map(|(version, mount)| (*version, mount.as_path()))
            .ok_or(CgroupError::NotMounted {
                controller: controller.name(),
            })
    }
}

/// The limits of one session's groups.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Limits {
    /// Processes and threads of the whole session (`pids.max`).
    pub max_processes: Option<u64>,
    /// CPUs' worth of time per period (`cpu.max`, `cpu.cfs_quota_us`).
    pub cpus: Option<f64>,
    /// Memory of the whole session, swap included where the kernel accounts it (`memory.max`
    /// and `memory.swap.max = 0`; v1 `memory.limit_in_bytes` and `memory.memsw.limit_in_bytes`).
    pub memory_mb: Option<u64>,
}

impl Limits {
    /// The controllers these limits need, in a fixed order.
    fn controllers(&self) -> Vec<Controller> {
        [
            (self.max_processes.is_some(), Controller::Pids),
            (self.cpus.is_some(), Controller::Cpu),
            (self.memory_mb.is_some(), Controller::Memory),
        ]
        .into_iter()
        .filter_map(|(wanted, controller)| wanted.then_some(controller))
        .collect()
    }
}

/// One session's group in one hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub version: Version,
    pub path: PathBuf,
    /// The controllers this group limits.
    pub controllers: Vec<Controller>,
}

impl Group {
    /// Writes `value` into the group's control file `file`; `op` names it in an error.
    fn set(&self, file: &str, value: &str, op: &'static str) -> Result<()> {
        write(&self.path.join(file), value, op)
    }
}

/// The session's groups (one per hierarchy used; on v2 both controllers share one).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionGroups {
    pub groups: Vec<Group>,
}

fn io<'a>(path: &'a Path, op: &'static str) -> impl FnOnce(std::io::Error) -> CgroupError + 'a {
    move |source| CgroupError::Io {
        path: path.display().to_string(),
        op,
        source,
    }
}

fn write(path: &Path, value: &str, op: &'static str) -> Result<()> {
    std::fs::write(path, value).map_err(io(path, op))
}

/// The directory of a session's group under one hierarchy.
pub fn session_path(mount: &Path, backend: &str, session: &str) -> PathBuf {
    mount.join(PADDOCK_DIR).join(backend).join(session)
}

/// `+pids`/`+cpu`/`+memory` into `dir`'s `cgroup.subtree_control`, unless already enabled
/// there.
fn enable_v2(dir: &Path, controller: Controller) -> Result<()> {
    let control = dir.join("cgroup.subtree_control");
    let enabled = std::fs::read_to_string(&control).unwrap_or_default();
    if enabled.split_whitespace().any(|c| c == controller.name()) {
        return Ok(());
    }
    write(
        &control,
        &format!("+{}", controller.name()),
        "enable the controller for child groups",
    )
}

/// The session's group directories, without creating anything: where they will be, or why
/// they cannot be (no hierarchy carries a controller; an engine that is not root and has no
/// writable `<mount>/paddock` delegated to it). The same answer every time on one machine,
/// so what is derived from it (the sandbox's profile) is stable across engine processes.
pub fn plan(
    layout: &Layout,
    backend: &str,
    session: &str,
    limits: Limits,
    root: bool,
) -> Result<Vec<PathBuf>> {
    let mut paths: Vec<PathBuf> = Vec::new();
    for controller in limits.controllers() {
        let (_, mount) = layout.hierarchy(controller)?;
        let base = mount.join(PADDOCK_DIR);
        if !root && nix::unistd::access(&base, nix::unistd::AccessFlags::W_OK).is_err() {
            return Err(CgroupError::NotWritable {
                controller: controller.name(),
                path: session_path(mount, backend, session).display().to_string(),
                base: base.display().to_string(),
                reason: "the engine is not root and the directory is missing or not writable"
                    .into(),
            });
        }
        let path = session_path(mount, backend, session);
        if !paths.contains(&path) {
            paths.push(path);
        }
    }
    Ok(paths)
}

impl SessionGroups {
    /// Creates (or finds) the session's groups and writes `limits`. Nothing is created for a
    /// limit that is not set.
    pub fn create(layout: &Layout, backend: &str, session: &str, limits: Limits) -> Result<Self> {
        let mut groups: Vec<Group> = Vec::new();
        for controller in limits.controllers() {
            let (version, mount) = layout.hierarchy(controller)?;
            let path = session_path(mount, backend, session);
            if let Some(group) = groups.iter_mut().find(|g| g.path == path) {
                group.controllers.push(controller);
                continue;
            }
            if !path.is_dir() {
                let base = mount.join(PADDOCK_DIR);
                let not_writable = |reason: String| CgroupError::NotWritable {
                    controller: controller.name(),
                    path: path.display().to_string(),
                    base: base.display().to_string(),
                    reason,
                };
                if version == Version::V2 {
                    if !base.is_dir() {
                        std::fs::create_dir(&base).map_err(|e| not_writable(e.to_string()))?;
                    }
                    // Enabled at each level down to the session's parent; a delegated base
                    // was enabled in its parent by the operator.
                    // At the root only root can; a delegated base's parent was enabled by the
                    // operator, and a refusal shows at the base's own write below.
                    let _ = enable_v2(mount, controller);
                    enable_v2(&base, controller).map_err(|e| not_writable(e.to_string()))?;
                    let backend_dir = base.join(backend);
                    std::fs::create_dir_all(&backend_dir)
                        .map_err(|e| not_writable(e.to_string()))?;
                    enable_v2(&backend_dir, controller).map_err(|e| not_writable(e.to_string()))?;
                }
                std::fs::create_dir_all(&path).map_err(|e| not_writable(e.to_string()))?;
            }
            groups.push(Group {
                version,
                path,
                controllers: vec![controller],
            });
        }
        let made = SessionGroups { groups };
        made.set_limits(limits)?;
        Ok(made)
    }

    fn set_limits(&self, limits: Limits) -> Result<()> {
        for group in &self.groups {
            for controller in &group.controllers {
                match (controller, group.version) {
                    (Controller::Pids, _) => {
                        if let Some(max) = limits.max_processes {
                            group.set("pids.max", &max.to_string(), "set pids.max")?;
                        }
                    }
                    (Controller::Cpu, version) => {
                        let Some(cpus) = limits.cpus else { continue };
                        // At least 1 ms per period: the kernel's minimum quota.
                        let quota = ((cpus * CPU_PERIOD_US as f64).round() as u64).max(1000);
                        if version == Version::V2 {
                            group.set(
                                "cpu.max",
                                &format!("{quota} {CPU_PERIOD_US}"),
                                "set cpu.max",
                            )?;
                        } else {
                            group.set(
                                "cpu.cfs_period_us",
                                &CPU_PERIOD_US.to_string(),
                                "set cpu.cfs_period_us",
                            )?;
                            group.set(
                                "cpu.cfs_quota_us",
                                &quota.to_string(),
                                "set cpu.cfs_quota_us",
                            )?;
                        }
                    }
                    (Controller::Memory, version) => {
                        let Some(mb) = limits.memory_mb else { continue };
                        let bytes = (mb.saturating_mul(1024 * 1024)).to_string();
                        // Swap would let the session pass its ceiling: none where the kernel
                        // accounts it (the files are absent where it does not).
                        if version == Version::V2 {
                            group.set("memory.max", &bytes, "set memory.max")?;
                            let swap = group.path.join("memory.swap.max");
                            if swap.exists() {
                                write(&swap, "0", "set memory.swap.max")?;
                            }
                        } else {
                            // memsw must stay at least the limit: lowered after it, raised
                            // before it (a group made earlier with other limits).
                            let memsw = group.path.join("memory.memsw.limit_in_bytes");
                            let limit = group.path.join("memory.limit_in_bytes");
                            if memsw.exists() {
                                let _ = write(&memsw, &bytes, "set memory.memsw.limit_in_bytes");
                            }
                            write(&limit, &bytes, "set memory.limit_in_bytes")?;
                            if memsw.exists() {
                                write(&memsw, &bytes, "set memory.memsw.limit_in_bytes")?;
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The directories whose `cgroup.procs` a process writes `0` into to join.
    pub fn paths(&self) -> Vec<PathBuf> {
        self.groups.iter().map(|g| g.path.clone()).collect()
    }

    /// How often the session's forks failed at the process ceiling so far (`pids.events`'
    /// `max` counter), when it has a pids group.
    pub fn process_ceiling_hits(&self) -> Option<u64> {
        self.counter(Controller::Pids, |_| "pids.events", "max")
    }

    /// How many of the session's processes the kernel killed at the memory ceiling so far
    /// (`oom_kill` in v2 `memory.events`, v1 `memory.oom_control`), when it has a memory group.
    pub fn memory_ceiling_kills(&self) -> Option<u64> {
        self.counter(
            Controller::Memory,
            |version| match version {
                Version::V2 => "memory.events",
                Version::V1 => "memory.oom_control",
            },
            "oom_kill",
        )
    }

    /// The `key value` line `key` of a flat-keyed file of the group limiting `controller`.
    fn counter(
        &self,
        controller: Controller,
        file: impl Fn(Version) -> &'static str,
        key: &str,
    ) -> Option<u64> {
        let group = self
            .groups
            .iter()
            .find(|g| g.controllers.contains(&controller))?;
        let text = std::fs::read_to_string(group.path.join(file(group.version))).ok()?;
        text.lines().find_map(|line| {
            let (name, value) = line.split_once(' ')?;
            (name == key).then(|| value.trim().parse().ok())?
        })
    }

    /// Kills what is left in the groups and removes them.
    pub fn remove(&self) -> Result<()> {
        let mut first_error = None;
        for group in &self.groups {
            if let Err(err) = remove_group(&group.path) {
                first_error.get_or_insert(err);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// The processes of a group (`cgroup.procs`; an absent group has none).
pub fn processes(path: &Path) -> Vec<i32> {
    std::fs::read_to_string(path.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Kills every process of a group and removes its directory; an absent group is removed.
pub fn remove_group(path: &Path) -> Result<()> {
    if !path.is_dir() {
        return Ok(());
    }
    let kill_file = path.join("cgroup.kill");
    let started = Instant::now();
    let limit = Duration::from_secs(5);
    loop {
        let pids = processes(path);
        if pids.is_empty() {
            match std::fs::remove_dir(path) {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                // EBUSY while the last ones are still exiting.
                Err(_) if started.elapsed() < limit => {}
                Err(e) => return Err(io(path, "remove the group")(e)),
            }
        } else if kill_file.exists() {
            write(&kill_file, "1", "write cgroup.kill")?;
        } else {
            // v1 has no cgroup.kill: SIGKILL each; a fork bomb at its ceiling cannot grow while
            // this runs, and the loop catches what was forked in between.
            for pid in pids {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        if started.elapsed() > limit {
            return Err(CgroupError::Busy {
                path: path.display().to_string(),
                waited_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            });
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Removes the groups of `backend`'s sessions that are not in `live` (an engine killed before
/// it closed them); returns how many.
pub fn sweep(layout: &Layout, backend: &str, live: &[String]) -> usize {
    let mut mounts: Vec<&Path> = Vec::new();
    for controller in [Controller::Pids, Controller::Cpu, Controller::Memory] {
        if let Ok((_, mount)) = layout.hierarchy(controller)
            && !mounts.contains(&mount)
        {
            mounts.push(mount);
        }
    }
    let mut removed = 0;
    for mount in mounts {
        removed += sweep_abandoned(&mount.join(PADDOCK_DIR), backend);
        let dir = mount.join(PADDOCK_DIR).join(backend);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            // A young group may be a session's that started after `live` was listed.
            if entry.path().is_dir() && !live.contains(&name) && !younger(&entry.path(), YOUNG) {
                match remove_group(&entry.path()) {
                    Ok(()) => removed += 1,
                    Err(err) => tracing::warn!(%err, "orphaned session cgroup not removed"),
                }
            }
        }
    }
    removed
}

/// Groups of other engines (other state directories) that are empty and older than
/// [`ABANDONED_AFTER`]: their engine's state directory is gone (a deleted temporary
/// `PADDOCK_HOME`) or their session never closed. Only an empty group is removed (the kernel
/// refuses `rmdir` of one with a process in it) and nothing is killed; a live session whose
/// group went gets it again before its next command.
fn sweep_abandoned(base: &Path, own: &str) -> usize {
    let mut removed = 0;
    let old = |path: &Path| !younger(path, ABANDONED_AFTER);
    let Ok(owners) = std::fs::read_dir(base) else {
        return 0;
    };
    for owner in owners.flatten() {
        if owner.file_name().to_string_lossy() == own || !owner.path().is_dir() {
            continue;
        }
        let Ok(groups) = std::fs::read_dir(owner.path()) else {
            continue;
        };
        for group in groups.flatten() {
            let path = group.path();
            if path.is_dir()
                && old(&path)
                && processes(&path).is_empty()
                && std::fs::remove_dir(&path).is_ok()
            {
                removed += 1;
            }
        }
        // An owner left without groups goes too (it fails harmlessly when not empty).
        if old(&owner.path()) {
            let _ = std::fs::remove_dir(owner.path());
        }
    }
    removed
}

/// How long an empty group of another engine is left alone before [`sweep`] removes it.
const ABANDONED_AFTER: Duration = Duration::from_secs(3600);

/// A group of a session not listed live is left alone this long: its session may have
/// started (record, then group) after [`sweep`]'s caller listed the live ones.
pub const YOUNG: Duration = Duration::from_secs(60);

/// Whether `path` was modified less than `age` ago (an unreadable time counts as young: a
/// sweep errs on the side of leaving a group for the next one).
pub fn younger(path: &Path, age: Duration) -> bool {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_none_or(|elapsed| elapsed < age)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of a fake cgroup tree.
    fn read(path: PathBuf) -> String {
        std::fs::read_to_string(path).unwrap()
    }

    /// A controller's hierarchy as [`Layout`] records it.
    fn mounted(version: Version, path: &str) -> Option<(Version, PathBuf)> {
        Some((version, PathBuf::from(path)))
    }

    /// Writes a file of a fake cgroup tree, as the kernel would.
    fn put(path: PathBuf, text: &str) {
        std::fs::write(path, text).unwrap();
    }

    const HYBRID: &str = "\
25 31 0:22 / /sys/fs/cgroup rw,relatime shared:9 - tmpfs tmpfs rw,mode=755
26 25 0:23 / /sys/fs/cgroup/unified rw,relatime shared:10 - cgroup2 cgroup2 rw
27 25 0:24 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:11 - cgroup cgroup rw,cpu,cpuacct
28 25 0:25 / /sys/fs/cgroup/pids rw,relatime shared:12 - cgroup cgroup rw,pids
29 25 0:26 / /sys/fs/cgroup/memory rw,relatime shared:13 - cgroup cgroup rw,memory
";
    const UNIFIED: &str =
        "30 24 0:27 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n";

    #[test]
    fn hybrid_uses_v1_for_its_controllers() {
        let layout = Layout::from_mountinfo(HYBRID, |_| String::new());
        assert_eq!(layout.pids, mounted(Version::V1, "/sys/fs/cgroup/pids"));
        assert_eq!(
            layout.cpu,
            mounted(Version::V1, "/sys/fs/cgroup/cpu,cpuacct")
        );
    }

    #[test]
    fn unified_uses_v2_only_for_listed_controllers() {
        let layout = Layout::from_mountinfo(UNIFIED, |_| "cpuset cpu io memory pids".into());
        assert_eq!(layout.pids, mounted(Version::V2, "/sys/fs/cgroup"));
        assert_eq!(layout.cpu, mounted(Version::V2, "/sys/fs/cgroup"));
        let bare = Layout::from_mountinfo(UNIFIED, |_| "memory".into());
        assert!(matches!(
            bare.hierarchy(Controller::Pids),
            Err(CgroupError::NotMounted { controller: "pids" })
        ));
    }

    #[test]
    fn escaped_mount_points_are_read() {
        let line = "1 2 0:3 / /mnt/with\\040space rw - cgroup cgroup rw,pids\n";
        let layout = Layout::from_mountinfo(line, |_| String::new());
        assert_eq!(layout.pids, mounted(Version::V1, "/mnt/with space"));
    }

    /// A fake hierarchy: directories and the files the kernel would provide.
    fn fake_v1(root: &Path) -> Layout {
        let pids = root.join("pids");
        let cpu = root.join("cpu");
        let memory = root.join("memory");
        for dir in [&pids, &cpu, &memory] {
            std::fs::create_dir_all(dir).unwrap();
        }
        Layout {
            pids: Some((Version::V1, pids)),
            cpu: Some((Version::V1, cpu)),
            memory: Some((Version::V1, memory)),
        }
    }

    #[test]
    fn v1_groups_get_their_limits_and_are_removed() {
        let root = tempfile::tempdir().unwrap();
        let layout = fake_v1(root.path());
        let limits = Limits {
            max_processes: Some(64),
            cpus: Some(0.5),
            memory_mb: Some(128),
        };
        // A kernel that accounts swap has the memsw file; the limit lands in both.
        let memory = root.path().join("memory/paddock/local/s1");
        std::fs::create_dir_all(&memory).unwrap();
        put(memory.join("memory.memsw.limit_in_bytes"), "");
        let groups = SessionGroups::create(&layout, "local", "s1", limits).unwrap();
        let pids = root.path().join("pids/paddock/local/s1");
        let cpu = root.path().join("cpu/paddock/local/s1");
        assert_eq!(
            groups.paths(),
            vec![pids.clone(), cpu.clone(), memory.clone()]
        );
        for (file, limit) in [
            (memory.join("memory.limit_in_bytes"), "134217728"),
            (memory.join("memory.memsw.limit_in_bytes"), "134217728"),
            (pids.join("pids.max"), "64"),
            (cpu.join("cpu.cfs_quota_us"), "50000"),
            (cpu.join("cpu.cfs_period_us"), "100000"),
        ] {
            assert_eq!(read(file.clone()), limit, "{}", file.display());
        }
        put(
            memory.join("memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
        );
        assert_eq!(groups.memory_ceiling_kills(), Some(2));
        put(pids.join("pids.events"), "max 7\n");
        assert_eq!(groups.process_ceiling_hits(), Some(7));
        // A real group's files vanish with rmdir; the fake's must go first.
        for dir in [&pids, &cpu, &memory] {
            for file in std::fs::read_dir(dir).unwrap() {
                std::fs::remove_file(file.unwrap().path()).unwrap();
            }
        }
        groups.remove().unwrap();
        assert!(!pids.exists() && !cpu.exists() && !memory.exists());
    }

    #[test]
    fn v2_shares_one_group_and_enables_controllers_on_the_way_down() {
        let root = tempfile::tempdir().unwrap();
        let mount = root.path().to_path_buf();
        let layout = Layout {
            pids: Some((Version::V2, mount.clone())),
            cpu: Some((Version::V2, mount.clone())),
            memory: Some((Version::V2, mount.clone())),
        };
        let limits = Limits {
            max_processes: Some(100),
            cpus: Some(1.5),
            memory_mb: Some(64),
        };
        let path = mount.join("paddock/local/s2");
        let groups = SessionGroups::create(&layout, "local", "s2", limits).unwrap();
        assert_eq!(groups.paths(), vec![path.clone()]);
        assert_eq!(read(path.join("memory.max")), "67108864");
        // Without swap accounting there is no file to write; with it, swap is closed.
        assert!(!path.join("memory.swap.max").exists());
        put(path.join("memory.swap.max"), "max");
        SessionGroups::create(&layout, "local", "s2", limits).unwrap();
        assert_eq!(read(path.join("memory.swap.max")), "0");
        put(
            path.join("memory.events"),
            "low 0\nhigh 0\nmax 9\noom 1\noom_kill 1\n",
        );
        assert_eq!(groups.memory_ceiling_kills(), Some(1));
        assert_eq!(read(path.join("pids.max")), "100");
        assert_eq!(read(path.join("cpu.max")), "150000 100000");
        // The last write to each level's subtree_control enabled the controller asked last.
        for level in [
            mount.clone(),
            mount.join("paddock"),
            mount.join("paddock/local"),
        ] {
            let text = read(level.join("cgroup.subtree_control"));
            assert!(text.starts_with('+'), "{}: {text}", level.display());
        }
    }

    #[test]
    fn no_limit_creates_nothing_and_missing_controller_is_named() {
        let root = tempfile::tempdir().unwrap();
        let layout = fake_v1(root.path());
        let groups = SessionGroups::create(&layout, "local", "s3", Limits::default()).unwrap();
        assert!(groups.groups.is_empty());
        assert!(!root.path().join("pids/paddock").exists());
        let err = SessionGroups::create(
            &Layout::default(),
            "local",
            "s3",
            Limits {
                max_processes: Some(10),
                ..Limits::default()
            },
        )
        .unwrap_err();
        assert!(err.to_string().contains("`pids` controller"), "{err}");
    }

    #[test]
    fn sweep_removes_only_dead_sessions() {
        let root = tempfile::tempdir().unwrap();
        let layout = fake_v1(root.path());
        let minutes_ago = std::time::SystemTime::now() - 2 * YOUNG;
        for session in ["alive", "dead", "starting"] {
            let group = root.path().join("pids/paddock/local").join(session);
            std::fs::create_dir_all(&group).unwrap();
            if session != "starting" {
                std::fs::File::open(&group)
                    .unwrap()
                    .set_modified(minutes_ago)
                    .unwrap();
            }
        }
        assert_eq!(sweep(&layout, "local", &["alive".to_owned()]), 1);
        assert!(root.path().join("pids/paddock/local/alive").is_dir());
        assert!(!root.path().join("pids/paddock/local/dead").exists());
        // Not listed live, but made just now: a session that started after the listing.
        assert!(root.path().join("pids/paddock/local/starting").is_dir());
    }

    #[test]
    fn another_engines_groups_go_only_when_empty_and_old() {
        let root = tempfile::tempdir().unwrap();
        let layout = fake_v1(root.path());
        let other = root.path().join("pids/paddock/local.other");
        let hours_ago = std::time::SystemTime::now() - Duration::from_secs(2 * 3600);
        for group in ["fresh", "old", "busy"] {
            std::fs::create_dir_all(other.join(group)).unwrap();
        }
        // A process in it: the kernel refuses rmdir (here: the file keeps it non-empty).
        put(other.join("busy/cgroup.procs"), "1\n");
        for group in ["old", "busy"] {
            std::fs::File::open(other.join(group))
                .unwrap()
                .set_modified(hours_ago)
                .unwrap();
        }
        assert_eq!(sweep(&layout, "local.mine", &[]), 1);
        assert!(other.join("fresh").is_dir());
        assert!(other.join("busy").is_dir());
        assert!(!other.join("old").exists());
    }
}
