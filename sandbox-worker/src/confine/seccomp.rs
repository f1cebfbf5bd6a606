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
const KILLED: &[libc::c_long] = &[
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

/// `tgkill` stays allowed for `abort()` (the memory ceiling ends a child with SIGABRT), but
/// only towards this process: a filter built per child, since the pid differs. Otherwise a
/// child running as the engine's own user could signal the engine wherever Landlock's signal
/// scope is missing.
fn own_signals_only() -> Result<BpfProgram, ConfineError> {
    use seccompiler::{SeccompCmpArgLen, SeccompCmpOp, SeccompCondition};
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| ConfineError::Seccomp(format!("unsupported architecture: {e}")))?;
    let pid = u64::from(std::process::id());
    let other_process = SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, pid)
        .and_then(|c| SeccompRule::new(vec![c]))
        .map_err(|e| ConfineError::Seccomp(e.to_string()))?;
    let filter = SeccompFilter::new(
        BTreeMap::from([(libc::SYS_tgkill, vec![other_process])]),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| ConfineError::Seccomp(e.to_string()))?;
    filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| ConfineError::Seccomp(e.to_string()))
}

type Programs = (BpfProgram, BpfProgram);

static PROGRAMS: std::sync::OnceLock<Result<Programs, String>> = std::sync::OnceLock::new();

/// Compiles both filters once (the zygote calls this before forking, so children only install).
pub fn prepare() -> Result<(), ConfineError> {
    programs().map(drop)
}

fn programs() -> Result<&'static Programs, ConfineError> {
    PROGRAMS
        .get_or_init(|| {
            let kill = program(KILLED, SeccompAction::Allow, SeccompAction::KillProcess)
                .map_err(|e| e.to_string())?;
            let allow = program(
                ALLOWED,
                SeccompAction::Errno(libc::ENOSYS as u32),
                SeccompAction::Allow,
            )
            .map_err(|e| e.to_string())?;
            Ok((kill, allow))
        })
        .as_ref()
        .map_err(|e| ConfineError::Seccomp(e.clone()))
}

/// Installs the kill-list, then the allow-list (last: it also forbids installing filters), on
/// every thread of the process. Returns the number of allowed syscalls.
pub fn install() -> Result<usize, ConfineError> {
    if super::simulated_missing("seccomp") {
        return Err(ConfineError::Missing {
            feature: "seccomp",
            reason: "simulated (PADDOCK_SANDBOX_SIMULATE_MISSING)".into(),
        });
    }
    let (kill, allow) = programs()?;
    let own_signals = own_signals_only()?;
    // The allow-list goes last: it refuses seccomp() itself.
    for filter in [kill, &own_signals, allow] {
        seccompiler::apply_filter_all_threads(filter)
            .map_err(|e| ConfineError::Seccomp(format!("install failed: {e}")))?;
    }
    Ok(ALLOWED.len())
}
