//! The local backend's sandbox for shell commands: `paddock __sandbox-exec PROFILE_JSON ARGV...`.
//!
//! A fresh, single-threaded process (so every step is an ordinary system call, no
//! async-signal-safety puzzle after a fork) confines itself and becomes a small tree:
//!
//! ```text
//! __sandbox-exec (outside; waits, forwards TERM/INT/HUP, answers the status)
//!   └─ init, PID 1 of a new PID namespace (mounts a fresh /proc, forwards signals, reaps)
//!        └─ the command (bash), confined: Landlock, capabilities dropped, rlimits, seccomp
//! ```
//!
//! When the command ends, init exits and the kernel kills everything left in the namespace:
//! daemons that called `setsid` die with the command. Layers, in order:
//!
//! 0. the session's cgroups (process ceiling, CPU quota), joined before anything else;
//! 1. namespaces: user (when not root), mount, PID, IPC, UTS, and network unless allowed;
//! 2. the file-system view: a private /tmp, tmpfs over /run and /var/run (sockets), /dev/null
//!    over secrets (`~/.ssh`, cloud credentials, /etc/shadow), the workspace and the writable
//!    directories put back, protected paths inside the workspace (`.git/hooks`, ...) bound
//!    read-only; a fresh /proc showing only the namespace's processes;
//! 3. in the command: rlimits, no_new_privs, every capability dropped, Landlock (read and
//!    execute everywhere, write only to the workspace, /tmp, the writable directories and
//!    /dev's terminals and null; no TCP unless the network is allowed; signal and abstract
//!    UNIX socket scopes), then the seccomp allow-list `seccomp::tables::COMMAND` (Docker's
//!    default profile for an unprivileged container, and no ptrace, process_vm_*, kcmp,
//!    pidfd_getfd, TIOCSTI/TIOCLINUX; x32 and foreign-architecture calls kill) and exec.
//!
//! Fail closed: any step that fails ends it with status 125 and a message naming the step;
//! the command does not run.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, RulesetAttr, RulesetCreatedAttr,
    RulesetStatus, Scope, path_beneath_rules,
};
use nix::mount::{MsFlags, mount};
use nix::sched::{CloneFlags, unshare};
use nix::sys::signal::{SigSet, Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid};
use serde::{Deserialize, Serialize};

/// Exit status when the sandbox itself could not be set up.
pub const EXIT_SANDBOX_FAILED: i32 = 125;

/// What a sandboxed command may do.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ShellProfile {
    /// `read-only` or `workspace-write`.
    pub mode: String,
    /// The directory a workspace-write command may change (absolute).
    pub workspace: PathBuf,
    /// Other directories the command must be able to write (its session's state).
    #[serde(default)]
    pub writable: Vec<PathBuf>,
    /// Directories that stay visible read-only even when they lie under the replaced /tmp
    /// (the user's home: a shell and its tools start there).
    #[serde(default)]
    pub readable: Vec<PathBuf>,
    /// Paths inside the workspace that stay read-only (`.git/hooks`, ...).
    #[serde(default)]
    pub protected: Vec<String>,
    /// Directories and files hidden behind an empty tmpfs or /dev/null.
    #[serde(default)]
    pub masked: Vec<PathBuf>,
    /// Keep the host's network (default: none, loopback only, down).
    #[serde(default)]
    pub network: bool,
    /// `network = "proxy"`: no network either, but loopback up and TCP to and from this one
    /// port allowed, where the session's agent carries connections to the egress proxy.
    #[serde(default)]
    pub egress_port: Option<u16>,
    /// A host directory shown as /tmp (the session's own, kept between commands); without
    /// one, /tmp is an empty tmpfs of `tmp_mb` MiB.
    #[serde(default)]
    pub tmp_dir: Option<PathBuf>,
    #[serde(default = "default_tmp_mb")]
    pub tmp_mb: u64,
    /// The policy's name of the backend (for the message when the kernel cannot give the
    /// sandbox: it names the key that turns the sandbox off).
    #[serde(default)]
    pub backend: Option<String>,
    /// The session's cgroup directories (its process ceiling, its CPU quota), joined first:
    /// `0` written to each `cgroup.procs`, so everything the sandbox starts is born inside.
    #[serde(default)]
    pub cgroups: Vec<PathBuf>,
    /// RLIMIT_NPROC for the command (default 4096); the fallback for `max_processes` where no
    /// pids cgroup could be made (it binds the user's processes, not root's).
    #[serde(default)]
    pub nproc: Option<u64>,
    /// RLIMIT_FSIZE in MiB (default 4096): `workspace_write_mb` makes no single file larger.
    #[serde(default)]
    pub fsize_mb: Option<u64>,
}

fn default_tmp_mb() -> u64 {
    512
}

/// The kernel feature a setup step needs, for the steps that fail when the kernel lacks it or
/// its configuration refuses it (a container, a sysctl, an LSM): the message then says so.
fn kernel_feature(step: &str) -> Option<&'static str> {
    match step {
        "namespaces" => Some("namespaces (user, mount, PID, IPC, UTS, network)"),
        "unshare(CLONE_NEWUSER)" | "setgroups deny" | "uid_map" | "gid_map" => {
            Some("unprivileged user namespaces")
        }
        "unshare(mount, pid, ipc, uts, net)" => Some("mount, PID, IPC, UTS and network namespaces"),
        "make / private"
        | "mount a tmpfs"
        | "bind a directory back"
        | "mask a file"
        | "mount a fresh /proc" => Some("mounts in a private mount namespace"),
        "landlock" => {
            Some("Landlock, ABI 6 or later (Linux 6.12 or later, with landlock among the LSMs)")
        }
        "seccomp" | "seccomp filter" | "seccomp architecture" => Some("seccomp filters"),
        "no_new_privs" => Some("no_new_privs"),
        _ => None,
    }
}

/// The one line a failed setup step prints (on stderr; the agent's start-up error quotes it).
/// When a kernel feature is the cause it names the feature and the policy key that turns the
/// sandbox off: never a silent fallback to running unconfined.
fn failure_message(step: &str, err: &str, backend: Option<&str>) -> String {
    let mut message = format!("paddock sandbox: {step}: {err}; the command was not run");
    if let Some(feature) = kernel_feature(step) {
        let name = backend.unwrap_or("local");
        message.push_str(&format!(
            ": the sandbox needs {feature}, which this machine lacks or refuses; to run the \
             commands of backend `{name}` unconfined instead, declare `[backends.{name}]` with \
             `kind = \"local\"` and `sandbox = \"none\"` in a policy file passed with \
             --policy FILE or PADDOCK_POLICY=FILE"
        ));
    }
    message
}

fn fail(profile: Option<&ShellProfile>, step: &str, err: impl std::fmt::Display) -> i32 {
    use std::io::Write;
    let backend = profile.and_then(|p| p.backend.as_deref());
    let _ = writeln!(
        io::stderr(),
        "{}",
        failure_message(step, &err.to_string(), backend)
    );
    EXIT_SANDBOX_FAILED
}

/// `PADDOCK_SANDBOX_SIMULATE_MISSING` names these to make the sandbox refuse to start.
const SIMULATED: &[&str] = &["namespaces", "landlock", "seccomp"];

/// `__sandbox-exec PROFILE_JSON PROGRAM ARGS...`.
pub fn main(args: &[String]) -> i32 {
    let Some((profile, argv)) = args.split_first() else {
        return fail(
            None,
            "usage",
            "__sandbox-exec PROFILE_JSON PROGRAM [ARGS...]",
        );
    };
    let profile: ShellProfile = match serde_json::from_str(profile) {
        Ok(p) => p,
        Err(e) => return fail(None, "profile", e),
    };
    if argv.is_empty() {
        return fail(Some(&profile), "usage", "no program to run");
    }
    if let Err(err) = close_inherited_on_exec() {
        return fail(
            Some(&profile),
            "mark inherited descriptors close-on-exec",
            err,
        );
    }
    if let Err((step, err)) = join_cgroups(&profile.cgroups) {
        return fail(Some(&profile), step, err);
    }
    match run(&profile, argv) {
        Ok(status) => status,
        Err((step, err)) => fail(Some(&profile), step, err),
    }
}

/// Marks every descriptor above stdio close-on-exec: whatever the caller of `paddock` left
/// open without the flag (a terminal multiplexer's, a CI runner's, a parent shell's) would
/// otherwise reach the sandboxed command, and through it whatever that descriptor opens. The
/// command gets stdin, stdout and stderr; the sandbox's own descriptors carry the flag already.
fn close_inherited_on_exec() -> io::Result<()> {
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC closes nothing: it sets a flag on the
    // descriptors 3 and up, which stay valid for this process.
    let r = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

type StepResult<T> = std::result::Result<T, (&'static str, String)>;

/// Moves this process into each of the session's cgroups (before anything else: every
/// process the sandbox starts then counts against the session's ceilings).
fn join_cgroups(groups: &[PathBuf]) -> StepResult<()> {
    for group in groups {
        std::fs::write(group.join("cgroup.procs"), "0").map_err(|e| {
            (
                "join the session's cgroup",
                format!("{}: {e}", group.display()),
            )
        })?;
    }
    Ok(())
}

fn at<E: std::fmt::Display>(step: &'static str) -> impl FnOnce(E) -> (&'static str, String) {
    move |e| (step, e.to_string())
}

fn run(profile: &ShellProfile, argv: &[String]) -> StepResult<i32> {
    if let Some(feature) = SIMULATED
        .iter()
        .copied()
        .find(|f| crate::confine::simulated_missing(f))
    {
        return Err((
            feature,
            "simulated missing (PADDOCK_SANDBOX_SIMULATE_MISSING)".into(),
        ));
    }
    let workspace = profile
        .workspace
        .canonicalize()
        .map_err(at("the workspace"))?;
    enter_namespaces(profile.network)?;
    if !profile.network && profile.egress_port.is_some() {
        super::namespaces::bring_loopback_up().map_err(at("bring loopback up"))?;
    }
    let tmp_dir = match &profile.tmp_dir {
        Some(dir) => Some(
            nix::fcntl::open(
                dir.as_path(),
                nix::fcntl::OFlag::O_PATH
                    | nix::fcntl::OFlag::O_DIRECTORY
                    | nix::fcntl::OFlag::O_CLOEXEC,
                nix::sys::stat::Mode::empty(),
            )
            .map_err(|e| ("open the session's /tmp", format!("{}: {e}", dir.display())))?,
        ),
        None => None,
    };
    // Opened in the new mount namespace (a bind from another one is refused) and before
    // anything is masked, to be put back at their own paths afterwards.
    let mut keep: Vec<(PathBuf, OwnedFd)> = Vec::new();
    for dir in std::iter::once(&workspace).chain(profile.writable.iter()) {
        let fd = nix::fcntl::open(
            dir.as_path(),
            nix::fcntl::OFlag::O_PATH
                | nix::fcntl::OFlag::O_DIRECTORY
                | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .map_err(|e| {
            (
                "open a writable directory",
                format!("{}: {e}", dir.display()),
            )
        })?;
        keep.push((dir.clone(), fd));
    }

    let mut readable: Vec<(PathBuf, OwnedFd)> = Vec::new();
    for dir in &profile.readable {
        // Only what /tmp would hide needs putting back; elsewhere it is visible already.
        if dir.starts_with("/tmp")
            && let Ok(fd) = nix::fcntl::open(
                dir.as_path(),
                nix::fcntl::OFlag::O_PATH
                    | nix::fcntl::OFlag::O_DIRECTORY
                    | nix::fcntl::OFlag::O_CLOEXEC,
                nix::sys::stat::Mode::empty(),
            )
        {
            readable.push((dir.clone(), fd));
        }
    }
    build_file_view(profile, &workspace, &keep, &readable, tmp_dir.as_ref())?;

    // Signals the outside sends (timeouts) are taken synchronously and passed on.
    let mut forwarded = SigSet::empty();
    for sig in [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGCHLD,
    ] {
        forwarded.add(sig);
    }
    forwarded.thread_block().map_err(at("block signals"))?;
    // SAFETY: this process is single-threaded (a fresh exec of the paddock binary that started
    // no thread), so the child may run arbitrary code after fork.
    match unsafe { nix::unistd::fork() }.map_err(at("fork init"))? {
        ForkResult::Parent { child } => Ok(wait_and_forward(child, &forwarded, false)),
        ForkResult::Child => {
            let status = match init(profile, &workspace, argv, &forwarded) {
                Ok(status) => status,
                Err((step, err)) => fail(Some(profile), step, err),
            };
            super::exit_immediately(status)
        }
    }
}

fn enter_namespaces(network: bool) -> StepResult<()> {
    super::namespaces::enter_user_namespace().map_err(|(step, e)| (step, e.to_string()))?;
    let mut flags = CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWUTS;
    if !network {
        flags |= CloneFlags::CLONE_NEWNET;
    }
    unshare(flags).map_err(at("unshare(mount, pid, ipc, uts, net)"))?;
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(at("make / private"))?;
    Ok(())
}

fn bind_fd(fd: &OwnedFd, target: &Path, read_only: bool) -> StepResult<()> {
    let source = format!("/proc/self/fd/{}", fd.as_raw_fd());
    mount(
        Some(source.as_str()),
        target,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(|e| {
        (
            "bind a directory back",
            format!("{}: {e}", target.display()),
        )
    })?;
    if read_only {
        mount(
            None::<&str>,
            target,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
            None::<&str>,
        )
        .map_err(|e| {
            (
                "make a path read-only",
                format!("{}: {e}", target.display()),
            )
        })?;
    }
    Ok(())
}

fn build_file_view(
    profile: &ShellProfile,
    workspace: &Path,
    keep: &[(PathBuf, OwnedFd)],
    readable: &[(PathBuf, OwnedFd)],
    tmp_dir: Option<&OwnedFd>,
) -> StepResult<()> {
    let tmpfs = |target: &Path, options: &str| {
        mount(
            Some("paddock-sandbox"),
            target,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some(options),
        )
        .map_err(|e| ("mount a tmpfs", format!("{}: {e}", target.display())))
    };
    match tmp_dir {
        Some(fd) => bind_fd(fd, Path::new("/tmp"), false)?,
        None => tmpfs(
            Path::new("/tmp"),
            &format!("size={}m,mode=1777", profile.tmp_mb),
        )?,
    }
    // Read-only directories the new /tmp hid come back before the masks, which apply inside
    // them too (a home under /tmp keeps its ~/.ssh hidden).
    for (path, fd) in readable {
        std::fs::create_dir_all(path)
            .map_err(|e| ("recreate a mount point", format!("{}: {e}", path.display())))?;
        bind_fd(fd, path, true)?;
    }
    for masked in &profile.masked {
        let Ok(meta) = std::fs::metadata(masked) else {
            continue;
        };
        if meta.is_dir() {
            tmpfs(masked, "size=64k,mode=0755")?;
        } else {
            mount(
                Some("/dev/null"),
                masked.as_path(),
                None::<&str>,
                MsFlags::MS_BIND,
                None::<&str>,
            )
            .map_err(|e| ("mask a file", format!("{}: {e}", masked.display())))?;
        }
    }
    // The workspace and writable directories come back at their paths (they may lie under a
    // masked or private directory); in read-only mode the workspace comes back read-only.
    for (path, fd) in keep {
        std::fs::create_dir_all(path)
            .map_err(|e| ("recreate a mount point", format!("{}: {e}", path.display())))?;
        let read_only = path == workspace && profile.mode == "read-only";
        bind_fd(fd, path, read_only)?;
    }
    for rel in &profile.protected {
        let path = workspace.join(rel);
        if path
            .symlink_metadata()
            .is_ok_and(|m| m.is_dir() || m.is_file())
        {
            let fd = nix::fcntl::open(
                path.as_path(),
                nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_CLOEXEC,
                nix::sys::stat::Mode::empty(),
            )
            .map_err(|e| ("open a protected path", format!("{}: {e}", path.display())))?;
            bind_fd(&fd, &path, true)?;
        }
    }
    Ok(())
}

/// PID 1 of the namespace.
fn init(
    profile: &ShellProfile,
    workspace: &Path,
    argv: &[String],
    forwarded: &SigSet,
) -> StepResult<i32> {
    super::die_with_parent(nix::unistd::getppid().as_raw()).map_err(at("die with parent"))?;
    mount(
        Some("proc"),
        "/proc",
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .map_err(at("mount a fresh /proc"))?;
    let _ = nix::unistd::sethostname("paddock-sandbox");
    let program = CString::new(argv[0].as_str()).map_err(at("program name"))?;
    let args: Vec<CString> = argv
        .iter()
        .map(|a| CString::new(a.as_str()))
        .collect::<Result<_, _>>()
        .map_err(at("arguments"))?;
    let filter = command_filter()?;
    // SAFETY: still single-threaded (init started no thread).
    match unsafe { nix::unistd::fork() }.map_err(at("fork the command"))? {
        ForkResult::Parent { child } => Ok(wait_and_forward(child, forwarded, true)),
        ForkResult::Child => {
            let result = (|| -> StepResult<std::convert::Infallible> {
                forwarded.thread_unblock().map_err(at("unblock signals"))?;
                confine_command(profile, workspace)?;
                seccompiler::apply_filter(&filter).map_err(at("seccomp"))?;
                nix::unistd::execvp(&program, &args)
                    .map_err(|e| ("exec", format!("{}: {e}", argv[0])))
            })();
            let status = match result {
                Ok(never) => match never {},
                Err((step, err)) => fail(Some(profile), step, err),
            };
            super::exit_immediately(status)
        }
    }
}

/// Waits for `child`, passing on TERM/INT/HUP; as PID 1 also reaps orphans. Answers the
/// child's status the way a shell reports it.
fn wait_and_forward(child: Pid, forwarded: &SigSet, reap_all: bool) -> i32 {
    loop {
        let Ok(signal) = forwarded.wait() else {
            continue;
        };
        if signal != Signal::SIGCHLD {
            let _ = kill(child, signal);
            continue;
        }
        loop {
            let target = if reap_all { Pid::from_raw(-1) } else { child };
            match waitpid(target, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) if pid == child => return code,
                Ok(WaitStatus::Signaled(pid, sig, _)) if pid == child => return 128 + sig as i32,
                Ok(WaitStatus::StillAlive) | Err(_) => break,
                Ok(_) => {}
            }
        }
    }
}

fn confine_command(profile: &ShellProfile, workspace: &Path) -> StepResult<()> {
    use nix::sys::resource::{Resource, setrlimit};
    for (resource, limit) in [
        (Resource::RLIMIT_CORE, 0),
        (Resource::RLIMIT_NOFILE, 4096),
        (
            Resource::RLIMIT_FSIZE,
            profile
                .fsize_mb
                .map_or(4 << 30, |mb| mb.saturating_mul(1 << 20)),
        ),
        (Resource::RLIMIT_NPROC, profile.nproc.unwrap_or(4096)),
    ] {
        setrlimit(resource, limit, limit).map_err(at("rlimits"))?;
    }
    // SAFETY: integer-only prctl.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(("no_new_privs", io::Error::last_os_error().to_string()));
    }
    super::capabilities::drop_all().map_err(at("drop capabilities"))?;
    let abi = ABI::V5;
    let writable: Vec<PathBuf> = if profile.mode == "workspace-write" {
        std::iter::once(workspace.to_path_buf())
            .chain(profile.writable.iter().cloned())
            .chain([PathBuf::from("/tmp")])
            .collect()
    } else {
        profile
            .writable
            .iter()
            .cloned()
            .chain([PathBuf::from("/tmp")])
            .collect()
    };
    let devices = [
        "/dev/null",
        "/dev/zero",
        "/dev/tty",
        "/dev/pts",
        "/dev/ptmx",
        "/dev/full",
    ];
    let mut ruleset = landlock::Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(abi))
        .map_err(at("landlock"))?;
    if !profile.network {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(ABI::V4))
            .map_err(at("landlock"))?;
    }
    let mut created = ruleset
        .scope(Scope::from_all(ABI::V6))
        .map_err(at("landlock"))?
        .create()
        .map_err(at("landlock"))?;
    if let (false, Some(port)) = (profile.network, profile.egress_port) {
        created = created
            .add_rule(landlock::NetPort::new(
                port,
                AccessNet::BindTcp | AccessNet::ConnectTcp,
            ))
            .map_err(at("landlock"))?;
    }
    let status = created
        .add_rules(path_beneath_rules(["/"], AccessFs::from_read(abi)))
        .map_err(at("landlock"))?
        .add_rules(path_beneath_rules(&writable, AccessFs::from_all(abi)))
        .map_err(at("landlock"))?
        .add_rules(path_beneath_rules(devices, AccessFs::from_all(abi)))
        .map_err(at("landlock"))?
        .restrict_self()
        .map_err(at("landlock"))?;
    if status.ruleset != RulesetStatus::FullyEnforced {
        return Err((
            "landlock",
            format!("not fully enforced ({:?})", status.ruleset),
        ));
    }
    Ok(())
}

/// The seccomp filter of a sandboxed command (`seccomp::tables::COMMAND`).
fn command_filter() -> StepResult<seccompiler::BpfProgram> {
    super::seccomp::command_program().map_err(at("seccomp filter"))
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    #[test]
    fn a_missing_kernel_feature_is_named_with_the_key_that_turns_the_sandbox_off() {
        assert_eq!(
            failure_message(
                "unshare(CLONE_NEWUSER)",
                "EPERM: Operation not permitted",
                Some("local")
            ),
            "paddock sandbox: unshare(CLONE_NEWUSER): EPERM: Operation not permitted; the \
             command was not run: the sandbox needs unprivileged user namespaces, which this \
             machine lacks or refuses; to run the commands of backend `local` unconfined \
             instead, declare `[backends.local]` with `kind = \"local\"` and `sandbox = \
             \"none\"` in a policy file passed with --policy FILE or PADDOCK_POLICY=FILE"
        );
        // Every feature the sandbox can miss is named, under the backend's own name.
        for (step, feature) in [
            (
                "namespaces",
                "namespaces (user, mount, PID, IPC, UTS, network)",
            ),
            ("unshare(mount, pid, ipc, uts, net)", "network namespaces"),
            ("mount a fresh /proc", "mount namespace"),
            ("landlock", "Landlock, ABI 6 or later"),
            ("seccomp", "seccomp filters"),
            ("no_new_privs", "no_new_privs"),
        ] {
            let message = failure_message(step, "refused", Some("box"));
            assert!(message.contains(feature), "{step}: {message}");
            assert!(
                message.contains(
                    "declare `[backends.box]` with `kind = \"local\"` and `sandbox = \"none\"`"
                ),
                "{step}: {message}"
            );
            assert!(
                message.contains("--policy FILE or PADDOCK_POLICY=FILE"),
                "{message}"
            );
        }
    }

    #[test]
    fn other_failures_say_what_failed_and_suggest_nothing() {
        assert_eq!(
            failure_message(
                "the workspace",
                "/w: No such file or directory",
                Some("local")
            ),
            "paddock sandbox: the workspace: /w: No such file or directory; the command was not \
             run"
        );
        assert!(kernel_feature("exec").is_none());
        assert!(kernel_feature("profile").is_none());
    }

    #[test]
    fn every_simulated_feature_fails_with_the_hint() {
        for feature in SIMULATED {
            assert!(kernel_feature(feature).is_some(), "{feature}");
        }
    }

    #[test]
    fn a_profile_without_a_backend_name_still_parses() {
        let profile: ShellProfile =
            serde_json::from_str(r#"{"mode": "workspace-write", "workspace": "/w"}"#).unwrap();
        assert_eq!(profile.backend, None);
        assert!(failure_message("landlock", "x", None).contains("[backends.local]"));
    }
}
