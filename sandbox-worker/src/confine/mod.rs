//! Confinement of a sandbox child, and every other piece of `unsafe` in what Paddock ships (the
//! hostile probes, test tooling built as `paddock-sandbox-probe`, have their own).
//!
//! The zygote, once, after building the interpreter: new namespaces (user when not root,
//! mount, net, ipc, uts) and an empty read-only root (module `namespaces`); every child
//! inherits them.
//!
//! A forked child confines itself before it ever reads a script, in this order (fail closed:
//! any step that fails aborts the child, which reports `ConfinementFailed`):
//!
//! 1. drop root: no supplementary groups, uid/gid `nobody`;
//! 2. die with the zygote (`PR_SET_PDEATHSIG`, set after the uid change, which clears it),
//!    not dumpable;
//! 3. `no_new_privs`;
//! 4. Landlock: every file-system and TCP right handled with no rule granting any, abstract
//!    UNIX sockets and signals scoped; anything short of fully enforced is an error;
//! 5. the heap watchdog thread is started here, after Landlock (a thread inherits the domain of
//!    the thread that creates it; Landlock ABI 7 cannot restrict threads that already exist);
//! 6. rlimits: no new processes or threads, no files written, no core dumps, few descriptors;
//! 7. seccomp last, on every thread: an allow-list whose default is ENOSYS (`tgkill` only
//!    towards itself), on top of the kill-list the zygote installed once and every fork inherits.
//!
//! The interpreter itself is built without host access (no `open`, `os`, sockets, `ctypes`);
//! these layers are what holds if that ever stops being true.

mod capabilities;
mod heap;
mod landlock_rules;
mod namespaces;
mod process;
pub mod seccomp;
pub mod shell;
mod text;

use std::io;

pub use heap::{CountingAllocator, counting_allocator_installed, live_bytes, set_hard_ceiling};
pub use process::{
    Forked, INHERITED_FD, collapse_into_huge_pages, die_with_parent, exit_immediately, fill_random,
    fork, keep_only_inherited_fd, open_memory_map, recv_with_fds, send_with_fd, spawn_with_fd,
    take_inherited_fd,
};
pub use text::{hot_code_chunks, move_code_chunks};

/// The uid/gid a child drops to when started as root.
pub const NOBODY: u32 = 65534;

/// A confinement step that failed.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    #[error("confinement step '{step}' failed: {source}")]
    Step {
        step: &'static str,
        source: io::Error,
    },
    #[error("landlock is not fully enforced ({0}); refusing to run scripts without it")]
    LandlockNotEnforced(String),
    #[error("seccomp filter could not be built: {0}")]
    Seccomp(String),
    /// A kernel feature the sandbox relies on is missing; the message names it, and whether a
    /// policy may accept running without it.
    #[error("the kernel feature '{feature}' is missing: {reason}")]
    Missing {
        feature: &'static str,
        reason: String,
    },
}

/// `PADDOCK_SANDBOX_SIMULATE_MISSING=namespaces,landlock,seccomp`: behave as if the kernel
/// lacked these (tests of the fail-closed path; it can only make the sandbox refuse to start).
pub fn simulated_missing(feature: &str) -> bool {
    std::env::var("PADDOCK_SANDBOX_SIMULATE_MISSING")
        .unwrap_or_default()
        .split(',')
        .any(|f| f.trim() == feature)
}

/// Features the operator's policy lets the sandbox run without (`[codemode] degraded`); the
/// engine passes exactly that list, clearing whatever its own environment held.
fn degraded_allowed(feature: &str) -> bool {
    std::env::var("PADDOCK_SANDBOX_ALLOW_DEGRADED")
        .unwrap_or_default()
        .split(',')
        .any(|f| f.trim() == feature)
}

/// The zygote's isolation, described for every child's report.
static ISOLATION: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Isolates the zygote (module `namespaces`); must run while it is single-threaded. Missing
/// namespaces are an error unless the policy allows running without them.
pub fn isolate_zygote() -> Result<(), ConfineError> {
    let report = match namespaces::isolate() {
        Ok(report) => report.to_owned(),
        Err(err) if degraded_allowed("namespaces") => {
            tracing::warn!(%err, "running WITHOUT namespaces: the policy allows this degraded mode");
            format!("DEGRADED (no namespaces: {err})")
        }
        Err(err) => return Err(err),
    };
    let _ = ISOLATION.set(report);
    Ok(())
}

/// Work done once in the zygote so that each child does less: the seccomp kill-list, which
/// does not depend on the child, is installed here and inherited by every fork.
pub fn prepare_in_zygote() -> Result<(), ConfineError> {
    seccomp::prepare()
}

fn step(step: &'static str) -> impl FnOnce(io::Error) -> ConfineError {
    move |source| ConfineError::Step { step, source }
}

/// Confines the calling process. `start_watchdog` runs at step 5 and must start every thread
/// the child will ever have. Returns a one-line report of what is enforced.
pub fn confine_child(
    zygote_pid: i32,
    start_watchdog: impl FnOnce() -> io::Result<()>,
) -> Result<String, ConfineError> {
    let was_root = drop_privileges(zygote_pid)?;
    // Without root the child still holds every capability of the zygote's user namespace.
    capabilities::drop_all().map_err(step("drop capabilities"))?;
    let landlock = match landlock_rules::restrict_everything() {
        Ok(status) => status.to_owned(),
        Err(err) if degraded_allowed("landlock") => format!("DEGRADED (no landlock: {err})"),
        Err(err) => return Err(err),
    };
    start_watchdog().map_err(step("start watchdog"))?;
    set_rlimits().map_err(step("rlimits"))?;
    let syscalls = seccomp::install()?;
    Ok(format!(
        "namespaces={} uid={} no_new_privs capabilities=none landlock={landlock} \
         rlimits(nproc=0,fsize=0,core=0,nofile=16,as={}MiB) seccomp(allow {syscalls} syscalls, \
         default ENOSYS)",
        ISOLATION.get().map_or("none", String::as_str),
        if was_root { "nobody" } else { "unchanged" },
        ADDRESS_SPACE_LIMIT >> 20
    ))
}

/// Steps 1–3 of [`confine_child`] ([`layers::uid`]): drop root when root, die with `parent`,
/// not dumpable, `no_new_privs`. Answers whether the process was root.
fn drop_privileges(parent: i32) -> Result<bool, ConfineError> {
    let was_root = nix::unistd::geteuid().is_root();
    if was_root {
        drop_root().map_err(step("drop root"))?;
    }
    die_with_parent(parent).map_err(step("die with parent"))?;
    // SAFETY: PR_SET_DUMPABLE and PR_SET_NO_NEW_PRIVS take integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
        return Err(step("not dumpable")(io::Error::last_os_error()));
    }
    set_no_new_privs().map_err(step("no_new_privs"))?;
    Ok(was_root)
}

/// The layers one at a time, for the hostile probes (`paddock-sandbox-probe`, test tooling built
/// from `src/bin/`, never shipped): the very functions [`prepare_in_zygote`], [`isolate_zygote`]
/// and [`confine_child`] call, without their degraded modes. A layer that cannot be applied is
/// an error. The real order is the caller's to keep: in the zygote `seccomp_kill_list` and
/// `namespaces`; in a child `uid` → `landlock` → `rlimits` → `seccomp`.
pub mod layers {
    use super::ConfineError;

    /// The seccomp kill-list the zygote installs once and every fork inherits.
    pub fn seccomp_kill_list() -> Result<(), ConfineError> {
        super::seccomp::prepare()
    }

    /// The zygote's namespaces and empty read-only root; answers what was entered.
    pub fn namespaces() -> Result<&'static str, ConfineError> {
        super::namespaces::isolate()
    }

    /// Drop root when root, die with `parent`, not dumpable, `no_new_privs`; answers whether
    /// the process was root.
    pub fn uid(parent: i32) -> Result<bool, ConfineError> {
        super::drop_privileges(parent)
    }

    /// Every file-system and TCP right handled with no rule, signal and abstract-UNIX scopes,
    /// fully enforced; answers the status.
    pub fn landlock() -> Result<&'static str, ConfineError> {
        super::landlock_rules::restrict_everything()
    }

    /// The child's rlimits (NPROC 0, FSIZE 0, CORE 0, NOFILE 16, AS 4 GiB, MEMLOCK 0,
    /// MSGQUEUE 0).
    pub fn rlimits() -> Result<(), ConfineError> {
        super::set_rlimits().map_err(super::step("rlimits"))
    }

    /// The child's seccomp allow-list (default ENOSYS), on every thread; answers how many
    /// syscalls it allows.
    pub fn seccomp() -> Result<usize, ConfineError> {
        super::seccomp::install()
    }
}

/// `no_new_privs`: nothing this process executes can gain privileges.
fn set_no_new_privs() -> io::Result<()> {
    // SAFETY: PR_SET_NO_NEW_PRIVS takes integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn drop_root() -> io::Result<()> {
    let gid = nix::unistd::Gid::from_raw(NOBODY);
    let uid = nix::unistd::Uid::from_raw(NOBODY);
    nix::unistd::setgroups(&[]).map_err(io::Error::from)?;
    nix::unistd::setresgid(gid, gid, gid).map_err(io::Error::from)?;
    nix::unistd::setresuid(uid, uid, uid).map_err(io::Error::from)?;
    if nix::unistd::setuid(nix::unistd::Uid::from_raw(0)).is_ok() {
        return Err(io::Error::other("regained root after dropping it"));
    }
    Ok(())
}

/// Address-space ceiling of a child: far above what a script's heap cap allows (the counting
/// allocator enforces that), low enough that no mapping trick reaches the machine's memory.
const ADDRESS_SPACE_LIMIT: u64 = 4 << 30;

fn set_rlimits() -> io::Result<()> {
    use nix::sys::resource::{Resource, setrlimit};
    for (resource, limit) in [
        (Resource::RLIMIT_AS, ADDRESS_SPACE_LIMIT),
        (Resource::RLIMIT_NPROC, 0),
        (Resource::RLIMIT_FSIZE, 0),
        (Resource::RLIMIT_CORE, 0),
        (Resource::RLIMIT_NOFILE, 16),
        (Resource::RLIMIT_MEMLOCK, 0),
        (Resource::RLIMIT_MSGQUEUE, 0),
    ] {
        setrlimit(resource, limit, limit).map_err(io::Error::from)?;
    }
    Ok(())
}
