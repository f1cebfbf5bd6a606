//! seccomp: what a running script may still ask of the kernel.

use std::collections::BTreeMap;

use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, SeccompRule, TargetArch};

use super::ConfineError;

/// Syscalls a confined child keeps: I/O on descriptors it already has (its socket, stdio),
/// memory, time, futexes, signals for abort, exit. Everything else (open, socket, connect,
/// execve, fork, kill, ioctl, prlimit, ...) fails with ENOSYS.
const ALLOWED: &[libc::c_long] = &[
    libc::SYS_read,
    libc::SYS_write,
    libc::SYS_readv,
    libc::SYS_writev,
    libc::SYS_close,
    libc::SYS_fcntl,
    libc::SYS_sendmsg,
    libc::SYS_recvmsg,
    libc::SYS_sendto,
    libc::SYS_recvfrom,
    libc::SYS_poll,
    libc::SYS_ppoll,
    libc::SYS_mmap,
    libc::SYS_munmap,
    libc::SYS_mremap,
    libc::SYS_madvise,
    libc::SYS_brk,
    libc::SYS_mprotect,
    libc::SYS_futex,
    libc::SYS_clock_gettime,
    libc::SYS_clock_getres,
    libc::SYS_clock_nanosleep,
    libc::SYS_nanosleep,
    libc::SYS_gettimeofday,
    libc::SYS_sched_yield,
    libc::SYS_getrandom,
    libc::SYS_getpid,
    libc::SYS_gettid,
    libc::SYS_getppid,
    libc::SYS_getuid,
    libc::SYS_geteuid,
    libc::SYS_getgid,
    libc::SYS_getegid,
    libc::SYS_getrusage,
    libc::SYS_times,
    libc::SYS_sched_getaffinity,
    libc::SYS_rt_sigreturn,
    libc::SYS_rt_sigprocmask,
    libc::SYS_rt_sigaction,
    libc::SYS_sigaltstack,
    libc::SYS_tgkill,
    libc::SYS_exit,
    libc::SYS_exit_group,
    libc::SYS_restart_syscall,
    // Thread start-up bookkeeping (the heap watchdog starts just before the filter).
    libc::SYS_rseq,
    libc::SYS_set_robust_list,
];

/// Syscalls that kill the child outright: there is no innocent reason for a script to get there.
/// A sandboxed shell command gets EPERM for the same ones (`shell::deny_list`, with more).
pub(crate) const KILLED: &[libc::c_long] = &[
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_bpf,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_userfaultfd,
    libc::SYS_perf_event_open,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
];

fn program(
    syscalls: &[libc::c_long],
    mismatch: SeccompAction,
    matched: SeccompAction,
) -> Result<BpfProgram, ConfineError> {
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| ConfineError::Seccomp(format!("unsupported architecture: {e}")))?;
    let rules: BTreeMap<i64, Vec<SeccompRule>> =
        syscalls.iter().map(|&nr| (nr, Vec::new())).collect();
    let filter = SeccompFilter::new(rules, mismatch, matched, arch)
        .map_err(|e| ConfineError::Seccomp(e.to_string()))?;
    filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| ConfineError::Seccomp(e.to_string()))
}

/// The child's one filter: the allow-list, with `tgkill` allowed only towards this process.
/// `tgkill` stays for `abort()` (the memory ceiling ends a child with SIGABRT); limited to the
/// child's own pid, a child running as the engine's own user cannot signal the engine even
/// where Landlock's signal scope is missing. Built per child, since the pid differs: one small
/// program, laid out as a search tree (`bpf_tree`), so the kernel converts, JIT-compiles and
/// caches one small filter per script.
fn child_filter() -> Result<BpfProgram, ConfineError> {
    super::bpf_tree::allow_list(
        ALLOWED,
        libc::SYS_tgkill,
        std::process::id(),
        libc::ENOSYS as u32,
    )
}

static KILL_LIST: std::sync::OnceLock<Result<BpfProgram, String>> = std::sync::OnceLock::new();

/// Installs the kill-list in the calling process (the zygote, once): it does not depend on the
/// child, and every child inherits it across `fork`. Sets `no_new_privs` first, which
/// installing a filter without `CAP_SYS_ADMIN` requires (the zygote never executes anything, so
/// it loses nothing by it).
pub fn prepare() -> Result<(), ConfineError> {
    if super::simulated_missing("seccomp") {
        return Err(ConfineError::Missing {
            feature: "seccomp",
            reason: "simulated (PADDOCK_SANDBOX_SIMULATE_MISSING)".into(),
        });
    }
    let kill = KILL_LIST
        .get_or_init(|| {
            program(KILLED, SeccompAction::Allow, SeccompAction::KillProcess)
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| ConfineError::Seccomp(e.clone()))?;
    super::set_no_new_privs().map_err(super::step("no_new_privs"))?;
    seccompiler::apply_filter(kill)
        .map_err(|e| ConfineError::Seccomp(format!("kill-list install failed: {e}")))
}

/// Installs the child's filter on every thread of the process (last: it also forbids
/// installing filters). The kill-list is already there, inherited from the zygote. Returns the
/// number of allowed syscalls.
pub fn install() -> Result<usize, ConfineError> {
    if super::simulated_missing("seccomp") {
        return Err(ConfineError::Missing {
            feature: "seccomp",
            reason: "simulated (PADDOCK_SANDBOX_SIMULATE_MISSING)".into(),
        });
    }
    if KILL_LIST.get().is_none() {
        return Err(ConfineError::Seccomp(
            "the kill-list was not installed before the fork (seccomp::prepare)".into(),
        ));
    }
    seccompiler::apply_filter_all_threads(&child_filter()?)
        .map_err(|e| ConfineError::Seccomp(format!("install failed: {e}")))?;
    Ok(ALLOWED.len())
}
