//! The filters as data: one table per filter, each entry with its reason.
//!
//! - [`COMMAND`]: a sandboxed shell command (the local backend's sandbox). An allow-list: what
//!   Docker's default profile allows an unprivileged container (moby/profiles
//!   `seccomp/default.json`, the `SCMP_ACT_ALLOW` entries that need no capability), less what
//!   only debuggers need; every call Docker refuses is refused here too, with the same
//!   argument conditions, and every other call of the x86-64 table is listed with a reason.
//!   A call newer than the table gets ENOSYS, as on a kernel without it.
//! - [`SCRIPT`]: a code-mode child. An allow-list of the few calls a running interpreter needs;
//!   the rest fails with ENOSYS, and the calls no script has an innocent reason for kill it.
//! - [`ZYGOTE_KILL_LIST`]: installed once in the zygote, inherited by every child: those same
//!   calls kill, everything else is left to the child's own filter.
//!
//! docs/sandbox-seccomp.md sets [`COMMAND`] and [`SCRIPT`] side by side with Docker's profile.

use super::program::{Action, Condition, Entry, Rule, Table};

const EPERM: Action = Action::Errno(libc::EPERM);
const ENOSYS: Action = Action::Errno(libc::ENOSYS);

/// `AF_ALG` (the kernel's crypto API, a frequent home of exploitable bugs) and `AF_VSOCK` (the
/// hypervisor's services: neither network namespaces nor Landlock cover it). Docker's profile
/// refuses the same two families.
pub const REFUSED_SOCKET_FAMILIES: &[u32] = &[38, 40];

/// The personalities Docker's profile allows: `PER_LINUX`, `PER_LINUX32`, `UNAME26`,
/// `UNAME26 | PER_LINUX32`, and the query `0xffffffff`. Others (`ADDR_NO_RANDOMIZE`,
/// `READ_IMPLIES_EXEC`, ...) weaken exploit mitigations.
pub const ALLOWED_PERSONALITIES: &[u32] = &[0, 8, 0x2_0000, 0x2_0008, 0xffff_ffff];

/// `CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID
/// | CLONE_NEWNET`: Docker's mask for `clone` without `CAP_SYS_ADMIN`.
pub const NAMESPACE_FLAGS: u32 = 0x7E02_0000;

/// `TIOCSTI` (push characters into a terminal's input, CVE-2017-5226) and `TIOCLINUX`
/// (the same through the Linux console's selection).
pub const REFUSED_IOCTLS: &[u32] = &[0x5412, 0x541C];

/// Calls that are no innocent program's business from inside a sandbox: reading or changing
/// other processes, loading code into the kernel, the kernel's most exploited interfaces. A
/// code-mode child dies for them; a shell command gets EPERM (a build tool may probe them).
const NEVER: &[&str] = &[
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "bpf",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "userfaultfd",
    "perf_event_open",
    "keyctl",
    "add_key",
    "request_key",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
];

const COMMAND_ENTRIES: &[Entry] = &[
    Entry {
        calls: &[
            "open",
            "stat",
            "fstat",
            "lstat",
            "access",
            "flock",
            "fsync",
            "fdatasync",
            "truncate",
            "ftruncate",
            "getdents",
            "getcwd",
            "chdir",
            "fchdir",
            "rename",
            "mkdir",
            "rmdir",
            "creat",
            "link",
            "unlink",
            "symlink",
            "readlink",
            "chmod",
            "fchmod",
            "chown",
            "fchown",
            "lchown",
            "umask",
            "utime",
            "mknod",
            "statfs",
            "fstatfs",
            "sync",
            "readahead",
            "setxattr",
            "lsetxattr",
            "fsetxattr",
            "getxattr",
            "lgetxattr",
            "fgetxattr",
            "listxattr",
            "llistxattr",
            "flistxattr",
            "removexattr",
            "lremovexattr",
            "fremovexattr",
            "getdents64",
            "fadvise64",
            "utimes",
            "inotify_init",
            "inotify_add_watch",
            "inotify_rm_watch",
            "openat",
            "mkdirat",
            "mknodat",
            "fchownat",
            "futimesat",
            "newfstatat",
            "unlinkat",
            "renameat",
            "linkat",
            "symlinkat",
            "readlinkat",
            "fchmodat",
            "faccessat",
            "sync_file_range",
            "utimensat",
            "fallocate",
            "inotify_init1",
            "fanotify_mark",
            "name_to_handle_at",
            "syncfs",
            "renameat2",
            "copy_file_range",
            "statx",
            "openat2",
            "faccessat2",
            "cachestat",
            "fchmodat2",
            "statmount",
            "listmount",
            "setxattrat",
            "getxattrat",
            "listxattrat",
            "removexattrat",
        ],
        rule: Rule::Always(Action::Allow),
        reason: "files and directories: Landlock and the mount namespace decide which ones",
    },
    Entry {
        calls: &[
            "read",
            "write",
            "close",
            "poll",
            "lseek",
            "pread64",
            "pwrite64",
            "readv",
            "writev",
            "pipe",
            "select",
            "dup",
            "dup2",
            "sendfile",
            "fcntl",
            "io_setup",
            "io_destroy",
            "io_getevents",
            "io_submit",
            "io_cancel",
            "epoll_create",
            "epoll_ctl_old",
            "epoll_wait_old",
            "epoll_wait",
            "epoll_ctl",
            "pselect6",
            "ppoll",
            "splice",
            "tee",
            "vmsplice",
            "epoll_pwait",
            "signalfd",
            "timerfd_create",
            "eventfd",
            "timerfd_settime",
            "timerfd_gettime",
            "signalfd4",
            "eventfd2",
            "epoll_create1",
            "dup3",
            "pipe2",
            "preadv",
            "pwritev",
            "preadv2",
            "pwritev2",
            "io_pgetevents",
            "close_range",
            "epoll_pwait2",
        ],
        rule: Rule::Always(Action::Allow),
        reason: "I/O on descriptors the process holds, polling, pipes, event and timer descriptors",
    },
    Entry {
        calls: &[
            "mmap",
            "mprotect",
            "munmap",
            "brk",
            "mremap",
            "msync",
            "mincore",
            "madvise",
            "mlock",
            "munlock",
            "mlockall",
            "munlockall",
            "remap_file_pages",
            "memfd_create",
            "membarrier",
            "mlock2",
            "pkey_mprotect",
            "pkey_alloc",
            "pkey_free",
            "memfd_secret",
            "process_mrelease",
            "map_shadow_stack",
            "mseal",
        ],
        rule: Rule::Always(Action::Allow),
        reason: "memory of the process itself",
    },
    Entry {
        calls: &[
            "connect",
            "accept",
            "sendto",
            "recvfrom",
            "sendmsg",
            "recvmsg",
            "shutdown",
            "bind",
            "listen",
            "getsockname",
            "getpeername",
            "socketpair",
            "setsockopt",
            "getsockopt",
            "accept4",
            "recvmmsg",
            "sendmmsg",
        ],
        rule: Rule::Always(Action::Allow),
        reason: "sockets the process made (`socket` itself is below): the network namespace and Landlock decide where they reach",
    },
    Entry {
        calls: &[
            "shmget",
            "shmat",
            "shmctl",
            "semget",
            "semop",
            "semctl",
            "shmdt",
            "msgget",
            "msgsnd",
            "msgrcv",
            "msgctl",
            "semtimedop",
            "mq_open",
            "mq_unlink",
            "mq_timedsend",
            "mq_timedreceive",
            "mq_notify",
            "mq_getsetattr",
        ],
        rule: Rule::Always(Action::Allow),
        reason: "System V and POSIX IPC, private to the sandbox's IPC namespace",
    },
    Entry {
        calls: &[
            "nanosleep",
            "getitimer",
            "alarm",
            "setitimer",
            "gettimeofday",
            "times",
            "adjtimex",
            "time",
            "timer_create",
            "timer_settime",
            "timer_gettime",
            "timer_getoverrun",
            "timer_delete",
            "clock_gettime",
            "clock_getres",
            "clock_nanosleep",
            "clock_adjtime",
        ],
        rule: Rule::Always(Action::Allow),
        reason: "reading clocks and timers, sleeping (adjtimex/clock_adjtime only read without CAP_SYS_TIME)",
    },
    Entry {
        calls: &[
            "rt_sigaction",
            "rt_sigprocmask",
            "rt_sigreturn",
            "pause",
            "kill",
            "rt_sigpending",
            "rt_sigtimedwait",
            "rt_sigqueueinfo",
            "rt_sigsuspend",
            "sigaltstack",
            "tkill",
            "restart_syscall",
            "tgkill",
            "rt_tgsigqueueinfo",
            "pidfd_send_signal",
            "pidfd_open",
        ],
        rule: Rule::Always(Action::Allow),
        reason: "signals: Landlock's signal scope keeps them inside the sandbox",
    },
    Entry {
        calls: &[
            "sched_yield",
            "getpid",
            "fork",
            "vfork",
            "execve",
            "exit",
            "wait4",
            "uname",
            "getrlimit",
            "getrusage",
            "sysinfo",
            "getuid",
            "getgid",
            "setuid",
            "setgid",
            "geteuid",
            "getegid",
            "setpgid",
            "getppid",
            "getpgrp",
            "setsid",
            "setreuid",
            "setregid",
            "getgroups",
            "setgroups",
            "setresuid",
            "getresuid",
            "setresgid",
            "getresgid",
            "getpgid",
            "setfsuid",
            "setfsgid",
            "getsid",
            "capget",
            "capset",
            "getpriority",
            "setpriority",
            "sched_setparam",
            "sched_getparam",
            "sched_setscheduler",
            "sched_getscheduler",
            "sched_get_priority_max",
            "sched_get_priority_min",
            "sched_rr_get_interval",
            "modify_ldt",
            "prctl",
            "arch_prctl",
            "setrlimit",
            "gettid",
            "futex",
            "sched_setaffinity",
            "sched_getaffinity",
            "set_thread_area",
            "get_thread_area",
            "set_tid_address",
            "exit_group",
            "waitid",
            "ioprio_set",
            "ioprio_get",
            "set_robust_list",
            "get_robust_list",
            "prlimit64",
            "getcpu",
            "sched_setattr",
            "sched_getattr",
            "seccomp",
            "getrandom",
            "execveat",
            "rseq",
            "uretprobe",
            "landlock_create_ruleset",
            "landlock_add_rule",
            "landlock_restrict_self",
            "futex_waitv",
            "futex_wake",
            "futex_wait",
            "futex_requeue",
        ],
        rule: Rule::Always(Action::Allow),
        reason: "processes, threads, identity, limits, scheduling, and nested sandboxes (seccomp, Landlock)",
    },
    Entry {
        calls: &["socket"],
        rule: Rule::When {
            arg: 0,
            condition: Condition::NoneOf(REFUSED_SOCKET_FAMILIES),
            otherwise: EPERM,
        },
        reason: "new sockets of any family but AF_ALG and AF_VSOCK (Docker refuses the same)",
    },
    Entry {
        calls: &["personality"],
        rule: Rule::When {
            arg: 0,
            condition: Condition::OneOf(ALLOWED_PERSONALITIES),
            otherwise: EPERM,
        },
        reason: "only the personalities Docker allows; none that turns address randomisation \
                 off or makes data executable",
    },
    Entry {
        calls: &["clone"],
        rule: Rule::When {
            arg: 0,
            condition: Condition::BitsClear(NAMESPACE_FLAGS),
            otherwise: EPERM,
        },
        reason: "processes and threads, never in new namespaces",
    },
    Entry {
        calls: &["clone3"],
        rule: Rule::Always(ENOSYS),
        reason: "its flags lie in memory a filter cannot read: ENOSYS makes libc use clone, \
                 whose flags it can (Docker does the same)",
    },
    Entry {
        calls: &["ioctl"],
        rule: Rule::When {
            arg: 1,
            condition: Condition::NoneOf(REFUSED_IOCTLS),
            otherwise: EPERM,
        },
        reason: "device control, but never TIOCSTI or TIOCLINUX, which type into the terminal \
                 of whoever reads it next",
    },
    Entry {
        calls: NEVER,
        rule: Rule::Always(EPERM),
        reason: "other processes' memory, kernel code and the kernel's most exploited \
                 interfaces (Docker allows ptrace and process_vm_* from Linux 4.8; Paddock does \
                 not: another process of the session is the agent)",
    },
    Entry {
        calls: &["kcmp", "pidfd_getfd", "process_madvise"],
        rule: Rule::Always(EPERM),
        reason: "another process's descriptors and memory: pidfd_getfd would copy the session \
                 agent's (CAP_SYS_PTRACE in Docker)",
    },
    Entry {
        calls: &[
            "mount",
            "umount2",
            "pivot_root",
            "chroot",
            "unshare",
            "setns",
            "open_tree",
            "open_tree_attr",
            "move_mount",
            "fsopen",
            "fsconfig",
            "fsmount",
            "fspick",
            "mount_setattr",
        ],
        rule: Rule::Always(EPERM),
        reason: "mounts and namespaces: the sandbox's file-system view is fixed before the \
                 command starts (CAP_SYS_ADMIN or CAP_SYS_CHROOT in Docker)",
    },
    Entry {
        calls: &[
            "settimeofday",
            "clock_settime",
            "sethostname",
            "setdomainname",
            "swapon",
            "swapoff",
            "reboot",
            "acct",
            "syslog",
            "vhangup",
            "quotactl",
            "quotactl_fd",
            "iopl",
            "ioperm",
        ],
        rule: Rule::Always(EPERM),
        reason: "the machine's own state: clock, names, swap, power, accounting, kernel log, \
                 quotas, I/O ports (each needs a capability in Docker)",
    },
    Entry {
        calls: &[
            "create_module",
            "get_kernel_syms",
            "query_module",
            "fanotify_init",
            "open_by_handle_at",
            "lookup_dcookie",
            "uprobe",
        ],
        rule: Rule::Always(EPERM),
        reason: "kernel interfaces for administrators: modules, watching every file of a mount, \
                 opening files by handle past the mount view (the 'shocker' escape), probes",
    },
    Entry {
        calls: &[
            "mbind",
            "set_mempolicy",
            "get_mempolicy",
            "migrate_pages",
            "move_pages",
            "set_mempolicy_home_node",
        ],
        rule: Rule::Always(EPERM),
        reason: "NUMA placement of memory, one's own and other processes' (CAP_SYS_NICE in \
                 Docker)",
    },
    Entry {
        calls: &["lsm_get_self_attr", "lsm_set_self_attr", "lsm_list_modules"],
        rule: Rule::Always(EPERM),
        reason: "the security modules' attributes (CAP_SYS_ADMIN in Docker)",
    },
    Entry {
        calls: &["file_getattr", "file_setattr"],
        rule: Rule::Always(EPERM),
        reason: "new in Linux 6.17 and not in Docker's allow-list: refused until it is",
    },
    Entry {
        calls: &[
            "uselib",
            "ustat",
            "sysfs",
            "_sysctl",
            "nfsservctl",
            "getpmsg",
            "putpmsg",
            "afs_syscall",
            "tuxcall",
            "security",
            "vserver",
        ],
        rule: Rule::Always(EPERM),
        reason: "obsolete or never implemented; refused as Docker does",
    },
];

/// A sandboxed shell command's filter.
pub const COMMAND: Table = Table {
    name: "command",
    entries: COMMAND_ENTRIES,
    default: ENOSYS,
};

const SCRIPT_ENTRIES: &[Entry] = &[
    Entry {
        calls: &[
            "read", "write", "readv", "writev", "close", "fcntl", "sendmsg", "recvmsg", "sendto",
            "recvfrom", "poll", "ppoll",
        ],
        rule: Rule::Always(Action::Allow),
        reason: "I/O on the descriptors the child holds: its socketpair to the engine, stdio",
    },
    Entry {
        calls: &["mmap", "munmap", "mremap", "madvise", "brk", "mprotect"],
        rule: Rule::Always(Action::Allow),
        reason: "the interpreter's heap (capped by the heap watchdog and RLIMIT_AS)",
    },
    Entry {
        calls: &[
            "futex",
            "clock_gettime",
            "clock_getres",
            "clock_nanosleep",
            "nanosleep",
            "gettimeofday",
            "sched_yield",
            "getrandom",
        ],
        rule: Rule::Always(Action::Allow),
        reason: "locks, clocks, sleeping and randomness for the runtime",
    },
    Entry {
        calls: &[
            "getpid",
            "gettid",
            "getppid",
            "getuid",
            "geteuid",
            "getgid",
            "getegid",
            "getrusage",
            "times",
            "sched_getaffinity",
        ],
        rule: Rule::Always(Action::Allow),
        reason: "questions about itself",
    },
    Entry {
        calls: &[
            "rt_sigreturn",
            "rt_sigprocmask",
            "rt_sigaction",
            "sigaltstack",
            "exit",
            "exit_group",
            "restart_syscall",
        ],
        rule: Rule::Always(Action::Allow),
        reason: "signal handling and exit",
    },
    Entry {
        calls: &["rseq", "set_robust_list"],
        rule: Rule::Always(Action::Allow),
        reason: "thread start-up bookkeeping (the heap watchdog starts just before the filter)",
    },
    Entry {
        calls: &["tgkill"],
        rule: Rule::When {
            arg: 0,
            condition: Condition::OwnPid,
            otherwise: ENOSYS,
        },
        reason: "abort() on the memory ceiling, towards the child itself only: a child running \
                 as the engine's user cannot signal the engine even without Landlock's scope",
    },
    Entry {
        calls: NEVER,
        rule: Rule::Always(Action::Kill),
        reason: "other processes' memory, kernel code and the kernel's most exploited \
                 interfaces: no script gets here innocently",
    },
];

/// A code-mode child's filter (its `tgkill` rule names the child's pid).
pub const SCRIPT: Table = Table {
    name: "script",
    entries: SCRIPT_ENTRIES,
    default: ENOSYS,
};

const ZYGOTE_ENTRIES: &[Entry] = &[Entry {
    calls: NEVER,
    rule: Rule::Always(Action::Kill),
    reason: "as in SCRIPT, installed before the fork so that no child ever runs without it",
}];

/// The zygote's kill-list, inherited by every child.
pub const ZYGOTE_KILL_LIST: Table = Table {
    name: "zygote kill-list",
    entries: ZYGOTE_ENTRIES,
    default: Action::Allow,
};

#[cfg(test)]
mod tests {
    use super::super::syscalls;
    use super::*;

    #[test]
    fn the_command_table_decides_every_call_of_the_kernel_table() {
        let unlisted: Vec<&str> = syscalls::X86_64
            .iter()
            .map(|(_, name)| *name)
            .filter(|name| COMMAND.entry_of(name).is_none())
            .collect();
        assert!(
            unlisted.is_empty(),
            "not in the command table: {unlisted:?}"
        );
    }

    #[test]
    fn every_table_compiles() {
        for table in [COMMAND, SCRIPT, ZYGOTE_KILL_LIST] {
            let program = table.compile(1).unwrap();
            assert!(program.len() < 1000, "{}: {}", table.name, program.len());
            assert!(table.entries.iter().all(|e| !e.reason.is_empty()));
        }
    }
}
