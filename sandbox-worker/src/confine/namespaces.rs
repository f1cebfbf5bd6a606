//! The zygote's isolation, entered once after the interpreter is built and inherited by every
//! child it forks: new user (when not root), mount, network, IPC and UTS namespaces, and an
//! empty, read-only root file system. A child therefore has no network interface but a down
//! loopback, no view of the host's files even if Landlock failed, no System V IPC shared with
//! the host, and no host name.
//!
//! No PID namespace: the zygote forks many children, and the first one would be the namespace's
//! init (its death would stop all later forks). Signals and ptrace on anything outside are
//! refused by Landlock's signal scope and seccomp instead.

use std::io;

use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sched::{CloneFlags, unshare};

use super::ConfineError;

fn step(step: &'static str) -> impl FnOnce(nix::errno::Errno) -> ConfineError {
    move |errno| ConfineError::Step {
        step,
        source: io::Error::from(errno),
    }
}

/// Gives an ordinary user a user namespace of its own, where it may mount; the map keeps its
/// uid and gid, so nothing it owns changes hands. Root needs none. Shared by the script
/// sandbox (here) and the command sandbox (`shell`); an error names the step that failed.
pub(crate) fn enter_user_namespace() -> Result<(), (&'static str, io::Error)> {
    let uid = nix::unistd::geteuid();
    let gid = nix::unistd::getegid();
    if uid.is_root() {
        return Ok(());
    }
    unshare(CloneFlags::CLONE_NEWUSER)
        .map_err(|e| ("unshare(CLONE_NEWUSER)", io::Error::from(e)))?;
    std::fs::write("/proc/self/setgroups", "deny").map_err(|e| ("setgroups deny", e))?;
    std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1")).map_err(|e| ("uid_map", e))?;
    std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1")).map_err(|e| ("gid_map", e))?;
    Ok(())
}

/// Enters the namespaces and the empty root. The caller must be single-threaded (a user
/// namespace cannot be entered otherwise). Returns what was set up.
pub fn isolate() -> Result<&'static str, ConfineError> {
    if crate::confine::simulated_missing("namespaces") {
        return Err(ConfineError::Missing {
            feature: "namespaces",
            reason: "simulated (PADDOCK_SANDBOX_SIMULATE_MISSING)".into(),
        });
    }
    let user_ns = !nix::unistd::geteuid().is_root();
    enter_user_namespace().map_err(|(step, source)| match step {
        "unshare(CLONE_NEWUSER)" => ConfineError::Missing {
            feature: "namespaces",
            reason: format!("{step}: {source} (unprivileged user namespaces off?)"),
        },
        _ => ConfineError::Step { step, source },
    })?;
    unshare(
        CloneFlags::CLONE_NEWNS
            | CloneFlags::CLONE_NEWNET
            | CloneFlags::CLONE_NEWIPC
            | CloneFlags::CLONE_NEWUTS,
    )
    .map_err(|e| ConfineError::Missing {
        feature: "namespaces",
        reason: format!("unshare(mount, net, ipc, uts): {e}"),
    })?;
    // Nothing done below reaches the host's mount table.
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(step("make / private"))?;
    // An empty tmpfs becomes the root: pivot onto it and drop the old root entirely.
    mount(
        Some("paddock-empty-root"),
        "/tmp",
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some("size=16k,mode=0555"),
    )
    .map_err(step("mount the empty root"))?;
    nix::unistd::chdir("/tmp").map_err(step("enter the empty root"))?;
    nix::unistd::pivot_root(".", ".").map_err(step("pivot_root"))?;
    umount2(".", MntFlags::MNT_DETACH).map_err(step("detach the old root"))?;
    nix::unistd::chdir("/").map_err(step("chdir /"))?;
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REMOUNT
            | MsFlags::MS_BIND
            | MsFlags::MS_RDONLY
            | MsFlags::MS_NOSUID
            | MsFlags::MS_NODEV
            | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .map_err(step("make the root read-only"))?;
    let _ = nix::unistd::sethostname("paddock-sandbox");
    Ok(if user_ns {
        "user+mount+net+ipc+uts, empty read-only root"
    } else {
        "mount+net+ipc+uts, empty read-only root"
    })
}

/// Brings up `lo` in the network namespace this process just entered (a new one has it down):
/// the egress proxy's port on 127.0.0.1 is the only way out of a `network = "proxy"` sandbox.
pub fn bring_loopback_up() -> io::Result<()> {
    // SAFETY: a plain socket(2) call; the descriptor is owned below and closed on drop.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor nothing else owns.
    let socket = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let raw = std::os::fd::AsRawFd::as_raw_fd(&socket);
    // SAFETY: `ifreq` is plain old data; all-zero is a valid value.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, byte) in request.ifr_name.iter_mut().zip(b"lo\0") {
        *slot = *byte as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS reads into the `ifreq` we own, whose name is NUL-terminated.
    if unsafe { libc::ioctl(raw, libc::SIOCGIFFLAGS, &mut request) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the union's flags member is what SIOCGIFFLAGS just filled in.
    unsafe {
        request.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    }
    // SAFETY: SIOCSIFFLAGS reads the `ifreq` we own.
    if unsafe { libc::ioctl(raw, libc::SIOCSIFFLAGS, &request) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
