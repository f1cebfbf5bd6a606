//! Hostile probes: `paddock-sandbox-probe --layers L CASE [ARG...]` (and `--list`).
//!
//! Test tooling, never shipped: the hostile suites (`tests/tests/suite/hostile_script.rs`) run
//! this binary, which `cargo build --workspace --all-targets` builds next to `paddock`; the
//! `paddock` binary itself carries no probe. It is the one place outside
//! `sandbox-worker/src/confine/` with `unsafe` (HOUSE_STYLE rule 13): raw system calls are what
//! it exists to make. Every block keeps its `// SAFETY:` comment; the lints below hold it to
//! that whatever the workspace's lint table says.
//!
//! A probe applies the sandbox's own confinement code, restricted to the layers in `L`, then
//! performs one hostile action natively — raw system calls, as an interpreter that had been
//! compromised could — and prints one JSON line:
//! `{"case": ..., "layers": ..., "blocked": true|false, "detail": "<errno or what happened>"}`.
//!
//! `L` is a comma list of `namespaces`, `uid`, `landlock`, `rlimits`, `seccomp`, or `all` (every
//! layer) or `none`. Layers always apply in the real order, whatever the order in `L`.
//!
//! The shape is the real sandbox's: this process plays the zygote. It opens what a case hands
//! the child beforehand (a private terminal, a writable file), enters the namespaces when asked
//! (`confine::layers::namespaces`, as `confine::isolate_zygote` does) and forks. The child
//! applies the other layers with the same functions `confine::confine_child` calls
//! (`confine::layers`), in its order (uid → Landlock → rlimits → seccomp), acts, and writes
//! its outcome down a pipe. A child killed by the seccomp kill-list (SIGSYS) counts as blocked.
//! A layer that cannot be applied is an error (exit 3, never a result): the probes fail closed
//! like the sandbox.
//!
//! Probes never do real damage when nothing stops them. They only touch what the caller hands
//! them (paths, ports, pids), and otherwise use harmless arguments: `chroot("/")`, a mount undone
//! at once, TIOCSTI into a pseudo-terminal of their own, a ptrace seize (the target is not
//! stopped, and is released when the probe exits), a BPF map and a key ring that die with the
//! probe, and memory released as soon as it is touched (the address space stays reserved, which
//! is what `RLIMIT_AS` counts).
//!
//! Exit status: 0 with a result line, 2 for usage errors (naming the valid cases), 3 when a
//! layer could not be applied or the probe itself failed.

#![deny(
    unsafe_op_in_unsafe_fn,
    clippy::undocumented_unsafe_blocks,
    clippy::print_stdout,
    clippy::print_stderr
)]

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::Signal;
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::Pid;

use paddock_sandbox_worker::confine::{self, ConfineError};

/// How long the confined child may take before the probe kills it (the memory bomb, the slowest
/// case, needs about a second when nothing stops it).
const CHILD_TIME_LIMIT: Duration = Duration::from_secs(30);
/// The most a child may report.
const MAX_REPORT: usize = 64 * 1024;
/// The most bytes of foreign data (a file, another process's memory) a detail quotes.
const MAX_QUOTE: usize = 4096;
/// Memory bomb: how much address space to map and touch, and in what steps.
const BOMB_BYTES: usize = 8 << 30;
const BOMB_STEP: usize = 256 << 20;
/// Descriptor exhaustion: how many new descriptors count as "not stopped".
const FD_TARGET: usize = 4096;
/// Disk fill: how many bytes to write, and in what steps.
const FILL_BYTES: usize = 16 << 20;
const FILL_STEP: usize = 1 << 20;

/// One confinement layer, in the order the real sandbox applies them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Layer {
    /// The zygote's namespaces and empty read-only root.
    Namespaces,
    /// Drop root, die with the parent, not dumpable, `no_new_privs`.
    Uid,
    /// Every file-system and TCP right handled with no rule; signal and abstract-UNIX scopes.
    Landlock,
    /// NPROC 0, FSIZE 0, CORE 0, NOFILE 16, AS 4 GiB, MEMLOCK 0, MSGQUEUE 0.
    Rlimits,
    /// The kill-list, then the allow-list (default ENOSYS).
    Seccomp,
}

impl Layer {
    const ALL: [Layer; 5] = [
        Layer::Namespaces,
        Layer::Uid,
        Layer::Landlock,
        Layer::Rlimits,
        Layer::Seccomp,
    ];

    fn name(self) -> &'static str {
        match self {
            Layer::Namespaces => "namespaces",
            Layer::Uid => "uid",
            Layer::Landlock => "landlock",
            Layer::Rlimits => "rlimits",
            Layer::Seccomp => "seccomp",
        }
    }

    fn parse(name: &str) -> Option<Layer> {
        Layer::ALL.into_iter().find(|l| l.name() == name)
    }
}

/// Parses `all`, `none` or a comma list; answers the layers in the real order.
fn parse_layers(spec: &str) -> Result<Vec<Layer>, String> {
    match spec {
        "all" => return Ok(Layer::ALL.to_vec()),
        "none" => return Ok(Vec::new()),
        _ => {}
    }
    let mut layers = Vec::new();
    for part in spec.split(',') {
        let layer = Layer::parse(part.trim()).ok_or_else(|| {
            format!(
                "unknown layer '{part}' (valid: all, none, {})",
                Layer::ALL.map(Layer::name).join(", ")
            )
        })?;
        if !layers.contains(&layer) {
            layers.push(layer);
        }
    }
    layers.sort();
    Ok(layers)
}

fn layers_name(layers: &[Layer]) -> String {
    if layers.is_empty() {
        "none".into()
    } else {
        layers
            .iter()
            .map(|l| l.name())
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// What one argument of a case is.
#[derive(Clone, Copy)]
enum Arg {
    Path(&'static str),
    Pid,
    Port,
    /// An address in the target process (decimal or `0x` hex).
    Addr,
    /// A byte count, at most [`MAX_QUOTE`].
    Len,
    /// An abstract UNIX socket name (without the leading NUL).
    Name,
}

impl Arg {
    fn label(self) -> &'static str {
        match self {
            Arg::Path(label) => label,
            Arg::Pid => "PID",
            Arg::Port => "PORT",
            Arg::Addr => "ADDR",
            Arg::Len => "LEN",
            Arg::Name => "NAME",
        }
    }

    fn check(self, value: &str) -> Result<(), String> {
        let ok = match self {
            Arg::Path(_) | Arg::Name => !value.is_empty() && !value.contains('\0'),
            Arg::Pid => value.parse::<i32>().is_ok_and(|p| p > 0),
            Arg::Port => value.parse::<u16>().is_ok_and(|p| p > 0),
            Arg::Addr => parse_addr(value).is_some(),
            Arg::Len => value
                .parse::<usize>()
                .is_ok_and(|n| n > 0 && n <= MAX_QUOTE),
        };
        if ok {
            Ok(())
        } else {
            Err(format!("bad {} '{value}'", self.label()))
        }
    }
}

fn parse_addr(value: &str) -> Option<u64> {
    match value.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => value.parse().ok(),
    }
}

/// What the parent opens for the child before any confinement: things a real child could
/// legitimately hold when a script starts.
#[derive(Clone, Copy)]
enum Hold {
    Nothing,
    /// The first argument, opened for writing (created, truncated).
    WritableFile,
    /// A fresh pseudo-terminal whose slave becomes the child's controlling terminal and fd 0.
    Terminal,
}

enum Held {
    Nothing,
    File(File),
    Terminal { _master: OwnedFd, slave: OwnedFd },
}

/// One hostile action.
struct Case {
    name: &'static str,
    args: &'static [Arg],
    what: &'static str,
    hold: Hold,
    run: fn(&Ctx<'_>) -> Outcome,
}

const CASES: &[Case] = &[
    Case {
        name: "read-file",
        args: &[Arg::Path("PATH")],
        what: "open(PATH, O_RDONLY) and read it",
        hold: Hold::Nothing,
        run: read_file,
    },
    Case {
        name: "write-file",
        args: &[Arg::Path("PATH")],
        what: "append to an existing file",
        hold: Hold::Nothing,
        run: write_file,
    },
    Case {
        name: "create-file",
        args: &[Arg::Path("PATH")],
        what: "create a new file (O_CREAT|O_EXCL)",
        hold: Hold::Nothing,
        run: create_file,
    },
    Case {
        name: "list-dir",
        args: &[Arg::Path("DIR")],
        what: "open a directory and read its entries",
        hold: Hold::Nothing,
        run: list_dir,
    },
    Case {
        name: "stat",
        args: &[Arg::Path("PATH")],
        what: "stat a path (metadata only)",
        hold: Hold::Nothing,
        run: stat,
    },
    Case {
        name: "proc-environ",
        args: &[Arg::Pid],
        what: "read /proc/PID/environ",
        hold: Hold::Nothing,
        run: proc_environ,
    },
    Case {
        name: "proc-mem",
        args: &[Arg::Pid, Arg::Addr, Arg::Len],
        what: "read LEN bytes at ADDR through /proc/PID/mem",
        hold: Hold::Nothing,
        run: proc_mem,
    },
    Case {
        name: "process-vm-readv",
        args: &[Arg::Pid, Arg::Addr, Arg::Len],
        what: "process_vm_readv LEN bytes at ADDR of PID",
        hold: Hold::Nothing,
        run: process_vm_readv,
    },
    Case {
        name: "kill",
        args: &[Arg::Pid],
        what: "kill(PID, SIGTERM)",
        hold: Hold::Nothing,
        run: kill,
    },
    Case {
        name: "tgkill",
        args: &[Arg::Pid],
        what: "tgkill(PID, PID, SIGTERM)",
        hold: Hold::Nothing,
        run: tgkill,
    },
    Case {
        name: "ptrace",
        args: &[Arg::Pid],
        what: "ptrace(PTRACE_SEIZE, PID)",
        hold: Hold::Nothing,
        run: ptrace,
    },
    Case {
        name: "tcp-connect",
        args: &[Arg::Port],
        what: "TCP connect to 127.0.0.1:PORT",
        hold: Hold::Nothing,
        run: tcp_connect,
    },
    Case {
        name: "udp-send",
        args: &[Arg::Port],
        what: "UDP sendto 127.0.0.1:PORT",
        hold: Hold::Nothing,
        run: udp_send,
    },
    Case {
        name: "unix-connect",
        args: &[Arg::Path("SOCKET")],
        what: "connect to a path-named UNIX socket",
        hold: Hold::Nothing,
        run: unix_connect,
    },
    Case {
        name: "abstract-connect",
        args: &[Arg::Name],
        what: "connect to an abstract UNIX socket",
        hold: Hold::Nothing,
        run: abstract_connect,
    },
    Case {
        name: "raw-socket",
        args: &[],
        what: "socket(AF_INET, SOCK_RAW, IPPROTO_ICMP)",
        hold: Hold::Nothing,
        run: raw_socket,
    },
    Case {
        name: "fork",
        args: &[],
        what: "fork, then clone(SIGCHLD), then clone3 (the child exits at once)",
        hold: Hold::Nothing,
        run: fork,
    },
    Case {
        name: "thread",
        args: &[],
        what: "start a thread",
        hold: Hold::Nothing,
        run: thread,
    },
    Case {
        name: "exec",
        args: &[Arg::Path("MARKER")],
        what: "execve /bin/sh, which would create MARKER",
        hold: Hold::Nothing,
        run: exec,
    },
    Case {
        name: "unshare-user",
        args: &[],
        what: "unshare(CLONE_NEWUSER)",
        hold: Hold::Nothing,
        run: unshare_user,
    },
    Case {
        name: "setuid0",
        args: &[],
        what: "setuid(0)",
        hold: Hold::Nothing,
        run: setuid0,
    },
    Case {
        name: "chroot",
        args: &[],
        what: "chroot(\"/\")",
        hold: Hold::Nothing,
        run: chroot,
    },
    Case {
        name: "mount-tmpfs",
        args: &[Arg::Path("DIR")],
        what: "mount a tmpfs on DIR (unmounted at once when it works)",
        hold: Hold::Nothing,
        run: mount_tmpfs,
    },
    Case {
        name: "tiocsti",
        args: &[],
        what: "ioctl(0, TIOCSTI) on the controlling terminal (a private pty)",
        hold: Hold::Terminal,
        run: tiocsti,
    },
    Case {
        name: "memfd-create",
        args: &[],
        what: "memfd_create",
        hold: Hold::Nothing,
        run: memfd_create,
    },
    Case {
        name: "io-uring-setup",
        args: &[],
        what: "io_uring_setup(1)",
        hold: Hold::Nothing,
        run: io_uring_setup,
    },
    Case {
        name: "userfaultfd",
        args: &[],
        what: "userfaultfd(UFFD_USER_MODE_ONLY)",
        hold: Hold::Nothing,
        run: userfaultfd,
    },
    Case {
        name: "bpf",
        args: &[],
        what: "bpf(BPF_MAP_CREATE, a one-entry array)",
        hold: Hold::Nothing,
        run: bpf,
    },
    Case {
        name: "keyctl",
        args: &[],
        what: "keyctl(KEYCTL_GET_KEYRING_ID, process key ring, create)",
        hold: Hold::Nothing,
        run: keyctl,
    },
    Case {
        name: "perf-event-open",
        args: &[],
        what: "perf_event_open(task clock of itself, user space only)",
        hold: Hold::Nothing,
        run: perf_event_open,
    },
    Case {
        name: "fd-exhaustion",
        args: &[],
        what: "raise the soft NOFILE limit if possible, then hold 4096 more descriptors",
        hold: Hold::Nothing,
        run: fd_exhaustion,
    },
    Case {
        name: "memory-bomb",
        args: &[],
        what: "map and touch 8 GiB (each step released after touching)",
        hold: Hold::Nothing,
        run: memory_bomb,
    },
    Case {
        name: "symlink",
        args: &[Arg::Path("TARGET"), Arg::Path("LINK")],
        what: "create LINK, a symbolic link to TARGET",
        hold: Hold::Nothing,
        run: symlink,
    },
    Case {
        name: "hardlink",
        args: &[Arg::Path("TARGET"), Arg::Path("LINK")],
        what: "create LINK, a hard link to TARGET",
        hold: Hold::Nothing,
        run: hardlink,
    },
    Case {
        name: "rename",
        args: &[Arg::Path("FROM"), Arg::Path("TO")],
        what: "rename FROM to TO",
        hold: Hold::Nothing,
        run: rename,
    },
    Case {
        name: "disk-fill",
        args: &[Arg::Path("PATH")],
        what: "create PATH and write 16 MiB to it",
        hold: Hold::Nothing,
        run: disk_fill,
    },
    Case {
        name: "disk-fill-fd",
        args: &[Arg::Path("PATH")],
        what: "write 16 MiB to PATH through a descriptor opened before confinement",
        hold: Hold::WritableFile,
        run: disk_fill_fd,
    },
];

/// What the child reports.
struct Outcome {
    blocked: bool,
    detail: String,
}

impl Outcome {
    fn blocked(detail: impl Into<String>) -> Self {
        Outcome {
            blocked: true,
            detail: detail.into(),
        }
    }

    fn allowed(detail: impl Into<String>) -> Self {
        Outcome {
            blocked: false,
            detail: detail.into(),
        }
    }

    /// The failure of `op`, named by the current errno.
    fn errno(op: &str) -> Self {
        Outcome::blocked(format!("{op}: {}", Errno::last()))
    }

    fn io(op: &str, err: &io::Error) -> Self {
        Outcome::blocked(format!("{op}: {}", describe(err)))
    }
}

/// An I/O error named by its errno ("EACCES: Permission denied") when it has one.
fn describe(err: &io::Error) -> String {
    match err.raw_os_error() {
        Some(code) => Errno::from_raw(code).to_string(),
        None => err.to_string(),
    }
}

/// What a case sees in the confined child.
struct Ctx<'a> {
    args: &'a [String],
    held: &'a Held,
    /// The report pipe (not close-on-exec: `exec` hands it to the new program).
    report_fd: RawFd,
}

impl Ctx<'_> {
    fn arg(&self, i: usize) -> &str {
        self.args.get(i).map_or("", String::as_str)
    }

    fn pid(&self, i: usize) -> i32 {
        self.arg(i).parse().unwrap_or(0)
    }

    fn port(&self, i: usize) -> u16 {
        self.arg(i).parse().unwrap_or(0)
    }

    fn addr(&self, i: usize) -> u64 {
        parse_addr(self.arg(i)).unwrap_or(0)
    }

    fn len(&self, i: usize) -> usize {
        self.arg(i).parse().unwrap_or(0)
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    ExitCode::from(run(&args))
}

/// Parses the arguments, runs one probe (or lists the cases); answers the exit status.
fn run(args: &[String]) -> u8 {
    let (layers, case, case_args) = match parse(args) {
        Ok(Parsed::List) => {
            let mut out = io::stdout().lock();
            for case in CASES {
                let _ = writeln!(out, "{}\t{}", usage_of(case), case.what);
            }
            return 0;
        }
        Ok(Parsed::Probe(layers, case, case_args)) => (layers, case, case_args),
        Ok(Parsed::Filters(pid)) => {
            return match installed_filters(pid) {
                Ok(filters) => {
                    let _ = writeln!(io::stdout().lock(), "{}", serde_json::json!(filters));
                    0
                }
                Err(message) => {
                    let _ = writeln!(io::stderr(), "paddock-sandbox-probe: {message}");
                    3
                }
            };
        }
        Ok(Parsed::Check(pid)) => {
            return match check_installed(pid) {
                Ok(lines) => {
                    let mut out = io::stdout().lock();
                    for line in lines {
                        let _ = writeln!(out, "{line}");
                    }
                    0
                }
                Err(message) => {
                    let _ = writeln!(io::stderr(), "paddock-sandbox-probe: {message}");
                    3
                }
            };
        }
        Err(message) => {
            let _ = writeln!(
                io::stderr(),
                "paddock-sandbox-probe: {message}\n{}",
                usage()
            );
            return 2;
        }
    };
    let mut line = serde_json::json!({
        "case": case.name,
        "layers": layers_name(&layers),
    });
    let code = match probe(&layers, case, case_args) {
        Ok(outcome) => {
            line["blocked"] = outcome.blocked.into();
            line["detail"] = outcome.detail.into();
            0
        }
        Err(error) => {
            line["error"] = error.into();
            3
        }
    };
    let _ = writeln!(io::stdout().lock(), "{line}");
    code
}

enum Parsed<'a> {
    List,
    /// `--seccomp-filters PID`: print the seccomp programs installed in process PID.
    Filters(i32),
    /// `--seccomp-check PID`: judge those programs against Docker's default profile (one JSON
    /// line per call and arguments: what the stack answers, and whether that refuses it).
    Check(i32),
    Probe(Vec<Layer>, &'static Case, &'a [String]),
}

fn parse(args: &[String]) -> Result<Parsed<'_>, String> {
    let (spec, rest) = match args {
        [flag] if flag == "--list" => return Ok(Parsed::List),
        [flag, pid] if flag == "--seccomp-filters" || flag == "--seccomp-check" => {
            let pid = pid.parse().map_err(|e| format!("{flag} PID: {pid}: {e}"))?;
            return Ok(if flag == "--seccomp-check" {
                Parsed::Check(pid)
            } else {
                Parsed::Filters(pid)
            });
        }
        [flag, spec, rest @ ..] if flag == "--layers" => (spec.as_str(), rest),
        [flag, rest @ ..] if flag.starts_with("--layers=") => {
            (flag.trim_start_matches("--layers="), rest)
        }
        _ => return Err("expected --layers L CASE [ARG...]".into()),
    };
    let layers = parse_layers(spec)?;
    let [name, case_args @ ..] = rest else {
        return Err("no CASE given".into());
    };
    let case = CASES
        .iter()
        .find(|c| c.name == name)
        .ok_or_else(|| format!("unknown case '{name}'"))?;
    if case_args.len() != case.args.len() {
        return Err(format!(
            "case '{}' takes {} argument(s): {}",
            case.name,
            case.args.len(),
            usage_of(case)
        ));
    }
    for (arg, value) in case.args.iter().zip(case_args) {
        arg.check(value)
            .map_err(|e| format!("{e}: {}", usage_of(case)))?;
    }
    Ok(Parsed::Probe(layers, case, case_args))
}

fn usage_of(case: &Case) -> String {
    std::iter::once(case.name)
        .chain(case.args.iter().map(|a| a.label()))
        .collect::<Vec<_>>()
        .join(" ")
}

fn usage() -> String {
    let mut text = String::from(
        "usage: paddock-sandbox-probe --layers L CASE [ARG...]   (or --list)\n\
         L: all | none | comma list of namespaces,uid,landlock,rlimits,seccomp\n\
         valid cases:",
    );
    for case in CASES {
        text.push_str("\n  ");
        text.push_str(&usage_of(case));
    }
    text
}

/// The seccomp programs installed in process `pid`, newest first, each a list of
/// `[code, jt, jf, k]` instructions: read with `PTRACE_SECCOMP_GET_FILTER`, which needs
/// `CAP_SYS_ADMIN` (root) and a tracee stopped under this process's ptrace. The process is
/// seized, interrupted, read and released; it goes on as before.
fn installed_filters(pid: i32) -> Result<Vec<Vec<[u32; 4]>>, String> {
    const PTRACE_SECCOMP_GET_FILTER: libc::c_uint = 0x420c;
    let target = Pid::from_raw(pid);
    let request = |request: libc::c_uint| {
        // SAFETY: SEIZE, INTERRUPT and DETACH take no buffer (address and data are zero).
        let r = unsafe { libc::ptrace(request, pid, 0usize, 0usize) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    };
    request(libc::PTRACE_SEIZE).map_err(|e| format!("ptrace seize {pid}: {e}"))?;
    let read = (|| {
        request(libc::PTRACE_INTERRUPT).map_err(|e| format!("ptrace interrupt: {e}"))?;
        nix::sys::wait::waitpid(target, Some(nix::sys::wait::WaitPidFlag::__WALL))
            .map_err(|e| format!("waiting for {pid} to stop: {e}"))?;
        let mut filters = Vec::new();
        for index in 0usize.. {
            // SAFETY: with a null buffer the request only answers the filter's length.
            let len = unsafe {
                libc::ptrace(
                    PTRACE_SECCOMP_GET_FILTER,
                    pid,
                    index as *mut libc::c_void,
                    std::ptr::null_mut::<libc::c_void>(),
                )
            };
            if len < 0 {
                let err = io::Error::last_os_error();
                if err.raw_os_error() == Some(libc::ENOENT) {
                    break;
                }
                return Err(format!("PTRACE_SECCOMP_GET_FILTER {index}: {err}"));
            }
            let mut program = vec![
                libc::sock_filter {
                    code: 0,
                    jt: 0,
                    jf: 0,
                    k: 0,
                };
                usize::try_from(len).unwrap_or(0)
            ];
            // SAFETY: the buffer holds `len` instructions, the length the kernel just gave for
            // this filter (a filter never changes once installed).
            let got = unsafe {
                libc::ptrace(
                    PTRACE_SECCOMP_GET_FILTER,
                    pid,
                    index as *mut libc::c_void,
                    program.as_mut_ptr().cast::<libc::c_void>(),
                )
            };
            if got != len {
                return Err(format!(
                    "PTRACE_SECCOMP_GET_FILTER {index}: {}",
                    io::Error::last_os_error()
                ));
            }
            filters.push(
                program
                    .iter()
                    .map(|i| [u32::from(i.code), u32::from(i.jt), u32::from(i.jf), i.k])
                    .collect(),
            );
        }
        Ok(filters)
    })();
    let _ = request(libc::PTRACE_DETACH);
    read
}

/// The verdicts of the filters installed in `pid` on Docker's refusals, as JSON lines.
fn check_installed(pid: i32) -> Result<Vec<serde_json::Value>, String> {
    let filters: Vec<Vec<seccompiler::sock_filter>> = installed_filters(pid)?
        .into_iter()
        .map(|program| {
            program
                .into_iter()
                .map(|[code, jt, jf, k]| seccompiler::sock_filter {
                    code: code as u16,
                    jt: jt as u8,
                    jf: jf as u8,
                    k,
                })
                .collect()
        })
        .collect();
    if filters.is_empty() {
        return Err(format!("process {pid} has no seccomp filter"));
    }
    let verdicts = confine::seccomp::reference::check_stack(&filters)?;
    Ok(verdicts
        .into_iter()
        .map(|v| serde_json::json!(v))
        .chain(std::iter::once(
            serde_json::json!({"filters": filters.len()}),
        ))
        .collect())
}

/// The zygote's part: hold, isolate, fork, collect the child's report.
fn probe(layers: &[Layer], case: &Case, args: &[String]) -> Result<Outcome, String> {
    let held = hold(case.hold, args).map_err(|e| format!("preparing the case: {e}"))?;
    if layers.contains(&Layer::Seccomp) {
        confine::layers::seccomp_kill_list().map_err(|e| e.to_string())?;
    }
    if layers.contains(&Layer::Namespaces) {
        confine::layers::namespaces().map_err(|e| e.to_string())?;
    }
    let parent = nix::unistd::getpid().as_raw();
    let (report_rx, report_tx) = nix::unistd::pipe().map_err(|e| format!("pipe: {e}"))?;
    // SAFETY: this process is single-threaded (`main` comes here before starting anything),
    // so the child gets a consistent copy of every lock and allocator.
    match unsafe { nix::unistd::fork() }.map_err(|e| format!("fork: {e}"))? {
        nix::unistd::ForkResult::Child => {
            drop(report_rx);
            child(layers, case, args, &held, report_tx, parent)
        }
        nix::unistd::ForkResult::Parent { child } => {
            drop(report_tx);
            drop(held);
            collect(child, &report_rx)
        }
    }
}

fn hold(hold: Hold, args: &[String]) -> io::Result<Held> {
    match hold {
        Hold::Nothing => Ok(Held::Nothing),
        Hold::WritableFile => OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o666)
            .open(args.first().map_or("", String::as_str))
            .map(Held::File),
        Hold::Terminal => open_terminal(),
    }
}

/// Opens a fresh pseudo-terminal pair (neither becomes this process's controlling terminal).
fn open_terminal() -> io::Result<Held> {
    // SAFETY: posix_openpt takes flags only and returns a new descriptor or -1.
    let raw = unsafe { libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` was just returned by posix_openpt and nothing else owns it.
    let master = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: grantpt and unlockpt take the master descriptor, valid for this call.
    if unsafe { libc::grantpt(master.as_raw_fd()) } != 0
        // SAFETY: as above.
        || unsafe { libc::unlockpt(master.as_raw_fd()) } != 0
    {
        return Err(io::Error::last_os_error());
    }
    let mut name = [0 as libc::c_char; 128];
    // SAFETY: the buffer and its length describe `name`, valid for writes.
    let rc = unsafe { libc::ptsname_r(master.as_raw_fd(), name.as_mut_ptr(), name.len()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    // SAFETY: ptsname_r succeeded, so `name` holds a NUL-terminated path.
    let path = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) };
    // SAFETY: `path` is NUL-terminated and outlives the call.
    let raw = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` was just returned by open and nothing else owns it.
    let slave = unsafe { OwnedFd::from_raw_fd(raw) };
    Ok(Held::Terminal {
        _master: master,
        slave,
    })
}

/// Reads the child's report (until every copy of the pipe is closed) and its end.
fn collect(child: Pid, report: &OwnedFd) -> Result<Outcome, String> {
    let deadline = Instant::now() + CHILD_TIME_LIMIT;
    let mut bytes = Vec::new();
    let mut timed_out = false;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            let _ = nix::sys::signal::kill(child, Signal::SIGKILL);
            timed_out = true;
            break;
        }
        let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
        let mut fds = [nix::poll::PollFd::new(
            report.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        match nix::poll::poll(&mut fds, ms) {
            Ok(0) | Err(Errno::EINTR) => continue,
            Ok(_) => {}
            Err(e) => return Err(format!("poll: {e}")),
        }
        let mut buf = [0u8; 4096];
        match nix::unistd::read(report, &mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if bytes.len() < MAX_REPORT {
                    bytes.extend_from_slice(buf.get(..n).unwrap_or_default());
                }
            }
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(format!("reading the report: {e}")),
        }
    }
    let status = loop {
        match waitpid(child, None) {
            Err(Errno::EINTR) => continue,
            other => break other.map_err(|e| format!("waitpid: {e}"))?,
        }
    };
    let report = String::from_utf8_lossy(&bytes);
    let reported = report.split_once('\t');
    match (reported, status) {
        (Some(("E", error)), _) => Err(error.to_owned()),
        (_, WaitStatus::Signaled(_, Signal::SIGSYS, _)) => {
            Ok(Outcome::blocked("killed by SIGSYS (seccomp kill-list)"))
        }
        _ if timed_out => Ok(Outcome::allowed(format!(
            "still running after {CHILD_TIME_LIMIT:?}: killed"
        ))),
        (Some(("1", detail)), _) => Ok(Outcome::blocked(detail)),
        (Some(("0", detail)), _) => Ok(Outcome::allowed(detail)),
        (_, WaitStatus::Signaled(_, signal, _)) => Ok(Outcome::allowed(format!(
            "killed by {signal} before reporting (not a refusal)"
        ))),
        (_, status) => Err(format!("the child ended without a report: {status:?}")),
    }
}

/// The confined child: never returns.
fn child(
    layers: &[Layer],
    case: &Case,
    args: &[String],
    held: &Held,
    report: OwnedFd,
    parent: i32,
) -> ! {
    // A panic must not unwind into the parent's code: whatever happens, the child ends here.
    let message = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        if let Err(e) = before_confinement(held) {
            return format!("E\tpreparing the child: {e}");
        }
        if let Err(e) = apply_layers(layers, parent) {
            return format!("E\tapplying the layers: {e}");
        }
        let ctx = Ctx {
            args,
            held,
            report_fd: report.as_raw_fd(),
        };
        let outcome = (case.run)(&ctx);
        let flag = if outcome.blocked { "1" } else { "0" };
        format!("{flag}\t{}", outcome.detail)
    }))
    .unwrap_or_else(|_| "E\tthe probe panicked".into());
    let mut rest = message.as_bytes();
    while !rest.is_empty() {
        match nix::unistd::write(&report, rest) {
            Ok(n) => rest = rest.get(n..).unwrap_or_default(),
            Err(Errno::EINTR) => continue,
            Err(_) => break,
        }
    }
    confine::exit_immediately(0)
}

/// Per-child set-up that a real child would have had before its confinement.
fn before_confinement(held: &Held) -> io::Result<()> {
    // An oversized write then fails with EFBIG instead of killing the probe.
    // SAFETY: SIG_IGN installs no handler code; the child is single-threaded.
    unsafe { nix::sys::signal::signal(Signal::SIGXFSZ, nix::sys::signal::SigHandler::SigIgn) }
        .map_err(io::Error::from)?;
    if let Held::Terminal { slave, .. } = held {
        nix::unistd::setsid().map_err(io::Error::from)?;
        // SAFETY: TIOCSCTTY takes an integer argument; `slave` is a valid terminal descriptor.
        if unsafe { libc::ioctl(slave.as_raw_fd(), libc::TIOCSCTTY, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: dup2 on two descriptor numbers; `slave` is valid and 0 is replaced atomically.
        if unsafe { libc::dup2(slave.as_raw_fd(), 0) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The child's layers, with the functions `confine_child` uses (`confine::layers`), in its
/// order.
fn apply_layers(layers: &[Layer], parent: i32) -> Result<(), ConfineError> {
    for layer in layers {
        match layer {
            // Entered by the parent before the fork, as the zygote does.
            Layer::Namespaces => {}
            Layer::Uid => {
                confine::layers::uid(parent)?;
            }
            Layer::Landlock => {
                confine::layers::landlock()?;
            }
            Layer::Rlimits => confine::layers::rlimits()?,
            Layer::Seccomp => {
                confine::layers::seccomp()?;
            }
        }
    }
    Ok(())
}

/// Printable ASCII of foreign bytes (NUL as space, other bytes as '.'), at most [`MAX_QUOTE`].
fn quote(bytes: &[u8]) -> String {
    bytes
        .iter()
        .take(MAX_QUOTE)
        .map(|&b| match b {
            0 => ' ',
            0x20..=0x7e => char::from(b),
            _ => '.',
        })
        .collect()
}

fn read_some(mut file: File) -> Outcome {
    let mut buf = vec![0u8; MAX_QUOTE];
    match file.read(&mut buf) {
        Ok(n) => Outcome::allowed(format!(
            "read {n} bytes: {}",
            quote(buf.get(..n).unwrap_or_default())
        )),
        Err(e) => Outcome::io("read", &e),
    }
}

fn read_file(c: &Ctx<'_>) -> Outcome {
    match File::open(c.arg(0)) {
        Ok(file) => read_some(file),
        Err(e) => Outcome::io("open", &e),
    }
}

fn write_file(c: &Ctx<'_>) -> Outcome {
    let mut file = match OpenOptions::new().append(true).open(c.arg(0)) {
        Ok(file) => file,
        Err(e) => return Outcome::io("open for writing", &e),
    };
    match file.write_all(b"written by a hostile probe\n") {
        Ok(()) => Outcome::allowed("appended to the file"),
        Err(e) => Outcome::io("opened, but write", &e),
    }
}

fn create_file(c: &Ctx<'_>) -> Outcome {
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(c.arg(0))
    {
        Ok(_) => Outcome::allowed("created the file"),
        Err(e) => Outcome::io("open(O_CREAT|O_EXCL)", &e),
    }
}

fn list_dir(c: &Ctx<'_>) -> Outcome {
    let entries = match std::fs::read_dir(c.arg(0)) {
        Ok(entries) => entries,
        Err(e) => return Outcome::io("opendir", &e),
    };
    let mut names = Vec::new();
    for entry in entries {
        match entry {
            Ok(entry) => names.push(entry.file_name().to_string_lossy().into_owned()),
            Err(e) => return Outcome::io("readdir", &e),
        }
    }
    names.sort();
    Outcome::allowed(format!("{} entries: {}", names.len(), names.join(", ")))
}

fn stat(c: &Ctx<'_>) -> Outcome {
    match std::fs::symlink_metadata(c.arg(0)) {
        Ok(meta) => Outcome::allowed(format!(
            "ino {} size {} mode {:o} uid {}",
            meta.ino(),
            meta.len(),
            meta.mode(),
            meta.uid()
        )),
        Err(e) => Outcome::io("stat", &e),
    }
}

fn proc_environ(c: &Ctx<'_>) -> Outcome {
    match File::open(format!("/proc/{}/environ", c.pid(0))) {
        Ok(file) => read_some(file),
        Err(e) => Outcome::io("open", &e),
    }
}

fn proc_mem(c: &Ctx<'_>) -> Outcome {
    let file = match File::open(format!("/proc/{}/mem", c.pid(0))) {
        Ok(file) => file,
        Err(e) => return Outcome::io("open", &e),
    };
    let mut buf = vec![0u8; c.len(2)];
    match file.read_at(&mut buf, c.addr(1)) {
        Ok(n) => Outcome::allowed(format!(
            "read {n} bytes: {}",
            quote(buf.get(..n).unwrap_or_default())
        )),
        Err(e) => Outcome::io("pread", &e),
    }
}

fn process_vm_readv(c: &Ctx<'_>) -> Outcome {
    let mut buf = vec![0u8; c.len(2)];
    let remote = [nix::sys::uio::RemoteIoVec {
        base: usize::try_from(c.addr(1)).unwrap_or(0),
        len: buf.len(),
    }];
    match nix::sys::uio::process_vm_readv(
        Pid::from_raw(c.pid(0)),
        &mut [io::IoSliceMut::new(&mut buf)],
        &remote,
    ) {
        Ok(n) => Outcome::allowed(format!(
            "read {n} bytes: {}",
            quote(buf.get(..n).unwrap_or_default())
        )),
        Err(e) => Outcome::blocked(format!("process_vm_readv: {e}")),
    }
}

fn kill(c: &Ctx<'_>) -> Outcome {
    match nix::sys::signal::kill(Pid::from_raw(c.pid(0)), Signal::SIGTERM) {
        Ok(()) => Outcome::allowed("delivered SIGTERM"),
        Err(e) => Outcome::blocked(format!("kill: {e}")),
    }
}

fn tgkill(c: &Ctx<'_>) -> Outcome {
    let pid = c.pid(0);
    // SAFETY: tgkill takes integers only.
    if unsafe { libc::syscall(libc::SYS_tgkill, pid, pid, libc::SIGTERM) } != 0 {
        return Outcome::errno("tgkill");
    }
    Outcome::allowed("delivered SIGTERM")
}

fn ptrace(c: &Ctx<'_>) -> Outcome {
    // SAFETY: PTRACE_SEIZE takes a pid and no pointers (addr and data are 0); the tracee is not
    // stopped, and it is detached when this process exits.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_ptrace,
            libc::PTRACE_SEIZE,
            c.pid(0),
            0usize,
            0usize,
        )
    };
    if rc != 0 {
        return Outcome::errno("ptrace(PTRACE_SEIZE)");
    }
    Outcome::allowed("seized the process (released when the probe exits)")
}

fn tcp_connect(c: &Ctx<'_>) -> Outcome {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], c.port(0)));
    match std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
        Ok(_) => Outcome::allowed("connected"),
        Err(e) => Outcome::io("connect", &e),
    }
}

fn udp_send(c: &Ctx<'_>) -> Outcome {
    use nix::sys::socket::{AddressFamily, MsgFlags, SockFlag, SockType, SockaddrIn};
    let socket = match nix::sys::socket::socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    ) {
        Ok(socket) => socket,
        Err(e) => return Outcome::blocked(format!("socket(AF_INET, SOCK_DGRAM): {e}")),
    };
    let to = SockaddrIn::new(127, 0, 0, 1, c.port(0));
    match nix::sys::socket::sendto(socket.as_raw_fd(), b"hostile probe", &to, MsgFlags::empty()) {
        Ok(n) => Outcome::allowed(format!("sent {n} bytes")),
        Err(e) => Outcome::blocked(format!("sendto: {e}")),
    }
}

fn unix_connect(c: &Ctx<'_>) -> Outcome {
    match std::os::unix::net::UnixStream::connect(c.arg(0)) {
        Ok(_) => Outcome::allowed("connected"),
        Err(e) => Outcome::io("connect", &e),
    }
}

fn abstract_connect(c: &Ctx<'_>) -> Outcome {
    use std::os::linux::net::SocketAddrExt;
    let addr = match std::os::unix::net::SocketAddr::from_abstract_name(c.arg(0).as_bytes()) {
        Ok(addr) => addr,
        Err(e) => return Outcome::io("abstract address", &e),
    };
    match std::os::unix::net::UnixStream::connect_addr(&addr) {
        Ok(_) => Outcome::allowed("connected"),
        Err(e) => Outcome::io("connect", &e),
    }
}

/// Wraps a raw syscall result that is a new descriptor: closes it and reports success.
fn new_fd(op: &str, rc: libc::c_long) -> Outcome {
    if rc < 0 {
        return Outcome::errno(op);
    }
    if let Ok(raw) = RawFd::try_from(rc) {
        // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
        drop(unsafe { OwnedFd::from_raw_fd(raw) });
    }
    Outcome::allowed(format!("{op} returned a descriptor"))
}

fn raw_socket(_: &Ctx<'_>) -> Outcome {
    // SAFETY: socket takes integers only.
    let rc = unsafe {
        libc::socket(
            libc::AF_INET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::IPPROTO_ICMP,
        )
    };
    new_fd("socket(AF_INET, SOCK_RAW)", libc::c_long::from(rc))
}

/// Waits for a process this probe created with a raw fork-like syscall.
fn reap(pid: libc::c_long) {
    if let Ok(pid) = i32::try_from(pid) {
        let _ = waitpid(Pid::from_raw(pid), None);
    }
}

/// The ways to make a process, tried in turn.
#[derive(Clone, Copy)]
enum Spawn {
    Fork,
    Clone,
    Clone3,
}

impl Spawn {
    fn name(self) -> &'static str {
        match self {
            Spawn::Fork => "fork",
            Spawn::Clone => "clone(SIGCHLD)",
            Spawn::Clone3 => "clone3",
        }
    }

    /// The raw system call: in the new process (result 0) the caller must only `_exit`.
    fn call(self) -> libc::c_long {
        match self {
            // SAFETY: a plain fork; the new process only calls _exit (see `fork`).
            Spawn::Fork => unsafe { libc::syscall(libc::SYS_fork) },
            // SAFETY: without CLONE_VM this is fork (a copy of the address space, the same
            // stack); the new process only calls _exit.
            Spawn::Clone => unsafe {
                libc::syscall(
                    libc::SYS_clone,
                    libc::SIGCHLD,
                    0usize,
                    0usize,
                    0usize,
                    0usize,
                )
            },
            Spawn::Clone3 => {
                // struct clone_args, version 0 (64 bytes): only `exit_signal` (the fifth
                // field) is set, which makes it a plain fork.
                let mut args = [0u64; 8];
                args[4] = libc::SIGCHLD as u64;
                // SAFETY: `args` is a valid 64-byte clone_args that outlives the call; the new
                // process only calls _exit.
                unsafe { libc::syscall(libc::SYS_clone3, args.as_mut_ptr(), 64usize) }
            }
        }
    }
}

fn fork(_: &Ctx<'_>) -> Outcome {
    let mut tried = Vec::new();
    for spawn in [Spawn::Fork, Spawn::Clone, Spawn::Clone3] {
        let rc = spawn.call();
        if rc == 0 {
            confine::exit_immediately(0);
        }
        if rc > 0 {
            reap(rc);
            tried.push(format!("{}: created process {rc}", spawn.name()));
            return Outcome::allowed(tried.join("; "));
        }
        tried.push(format!("{}: {}", spawn.name(), Errno::last()));
    }
    Outcome::blocked(tried.join("; "))
}

fn thread(_: &Ctx<'_>) -> Outcome {
    match std::thread::Builder::new()
        .stack_size(64 * 1024)
        .spawn(|| 42)
    {
        Ok(handle) => match handle.join() {
            Ok(_) => Outcome::allowed("started and joined a thread"),
            Err(_) => Outcome::allowed("started a thread (it panicked)"),
        },
        Err(e) => Outcome::io("thread spawn", &e),
    }
}

fn exec(c: &Ctx<'_>) -> Outcome {
    // When the exec works, the shell creates the marker and writes the report itself.
    let script = format!(
        ": > \"$1\"; printf '0\\texecve worked: /bin/sh ran and created the marker' >&{}",
        c.report_fd
    );
    let argv = ["/bin/sh", "-c", &script, "sh", c.arg(0)].map(CString::new);
    let argv: Result<Vec<CString>, _> = argv.into_iter().collect();
    let Ok(argv) = argv else {
        return Outcome::blocked("argument contains NUL");
    };
    let Some(program) = argv.first() else {
        return Outcome::blocked("no program");
    };
    match nix::unistd::execv(program, &argv) {
        Ok(never) => match never {},
        Err(e) => Outcome::blocked(format!("execve(/bin/sh): {e}")),
    }
}

fn unshare_user(_: &Ctx<'_>) -> Outcome {
    match nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER) {
        Ok(()) => Outcome::allowed("entered a new user namespace"),
        Err(e) => Outcome::blocked(format!("unshare(CLONE_NEWUSER): {e}")),
    }
}

fn setuid0(_: &Ctx<'_>) -> Outcome {
    // The raw call: glibc's wrapper would also try every thread, which is beside the point.
    // SAFETY: setuid takes an integer only.
    if unsafe { libc::syscall(libc::SYS_setuid, 0) } != 0 {
        return Outcome::errno("setuid(0)");
    }
    Outcome::allowed("uid is 0")
}

fn chroot(_: &Ctx<'_>) -> Outcome {
    match nix::unistd::chroot("/") {
        Ok(()) => Outcome::allowed("chroot(\"/\") worked"),
        Err(e) => Outcome::blocked(format!("chroot: {e}")),
    }
}

fn mount_tmpfs(c: &Ctx<'_>) -> Outcome {
    use nix::mount::{MntFlags, MsFlags};
    let dir = c.arg(0);
    match nix::mount::mount(
        Some("paddock-probe"),
        dir,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some("size=4k"),
    ) {
        Ok(()) => {
            let undone = nix::mount::umount2(dir, MntFlags::MNT_DETACH);
            Outcome::allowed(format!(
                "mounted a tmpfs (unmount: {})",
                undone.map_or_else(|e| e.to_string(), |()| "done".into())
            ))
        }
        Err(e) => Outcome::blocked(format!("mount: {e}")),
    }
}

fn tiocsti(c: &Ctx<'_>) -> Outcome {
    if !matches!(c.held, Held::Terminal { .. }) {
        return Outcome::blocked("no terminal held");
    }
    let byte: libc::c_char = b'x' as libc::c_char;
    // SAFETY: TIOCSTI reads one byte through the pointer, which points at `byte`.
    if unsafe { libc::ioctl(0, libc::TIOCSTI, &byte) } != 0 {
        return Outcome::errno("ioctl(TIOCSTI)");
    }
    Outcome::allowed("injected a byte into the terminal's input")
}

fn memfd_create(_: &Ctx<'_>) -> Outcome {
    // SAFETY: the name is a NUL-terminated literal; the flags are integers.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_memfd_create,
            c"paddock-probe".as_ptr(),
            libc::MFD_CLOEXEC,
        )
    };
    new_fd("memfd_create", rc)
}

fn io_uring_setup(_: &Ctx<'_>) -> Outcome {
    // struct io_uring_params is 120 bytes; all zero asks for the defaults.
    let mut params = [0u64; 15];
    // SAFETY: `params` is a writable, zeroed io_uring_params the kernel fills in.
    let rc = unsafe { libc::syscall(libc::SYS_io_uring_setup, 1u32, params.as_mut_ptr()) };
    new_fd("io_uring_setup", rc)
}

fn userfaultfd(_: &Ctx<'_>) -> Outcome {
    /// Allowed to unprivileged callers even with `vm.unprivileged_userfaultfd = 0`.
    const UFFD_USER_MODE_ONLY: libc::c_int = 1;
    // SAFETY: userfaultfd takes flags only.
    let rc = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | UFFD_USER_MODE_ONLY) };
    new_fd("userfaultfd", rc)
}

fn bpf(_: &Ctx<'_>) -> Outcome {
    const BPF_MAP_CREATE: libc::c_int = 0;
    const BPF_MAP_TYPE_ARRAY: u32 = 2;
    // union bpf_attr, map-create part: map_type, key_size, value_size, max_entries; the rest 0.
    let mut attr = [0u32; 32];
    attr[..4].copy_from_slice(&[BPF_MAP_TYPE_ARRAY, 4, 4, 1]);
    // SAFETY: `attr` is a zeroed bpf_attr of the size passed.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_MAP_CREATE,
            attr.as_ptr(),
            std::mem::size_of_val(&attr),
        )
    };
    new_fd("bpf(BPF_MAP_CREATE)", rc)
}

fn keyctl(_: &Ctx<'_>) -> Outcome {
    const KEYCTL_GET_KEYRING_ID: libc::c_int = 0;
    const KEY_SPEC_PROCESS_KEYRING: libc::c_int = -2;
    // SAFETY: keyctl(GET_KEYRING_ID) takes integers only.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_keyctl,
            KEYCTL_GET_KEYRING_ID,
            KEY_SPEC_PROCESS_KEYRING,
            1,
        )
    };
    if rc < 0 {
        return Outcome::errno("keyctl(GET_KEYRING_ID)");
    }
    Outcome::allowed(format!("key ring {rc}"))
}

fn perf_event_open(_: &Ctx<'_>) -> Outcome {
    const PERF_TYPE_SOFTWARE: u64 = 1;
    const PERF_COUNT_SW_TASK_CLOCK: u64 = 1;
    const ATTR_SIZE: u64 = 128;
    const DISABLED: u64 = 1;
    const EXCLUDE_KERNEL: u64 = 1 << 5;
    const EXCLUDE_HV: u64 = 1 << 6;
    const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
    // struct perf_event_attr: type (u32) and size (u32), config, sample period, sample type,
    // read format, then the flag bits.
    let mut attr = [0u64; 16];
    attr[0] = PERF_TYPE_SOFTWARE | (ATTR_SIZE << 32);
    attr[1] = PERF_COUNT_SW_TASK_CLOCK;
    attr[5] = DISABLED | EXCLUDE_KERNEL | EXCLUDE_HV;
    // SAFETY: `attr` is a valid 128-byte perf_event_attr; the other arguments are integers.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr.as_ptr(),
            0,
            -1,
            -1,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    new_fd("perf_event_open", rc)
}

fn fd_exhaustion(_: &Ctx<'_>) -> Outcome {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let raised = getrlimit(Resource::RLIMIT_NOFILE)
        .and_then(|(_, hard)| setrlimit(Resource::RLIMIT_NOFILE, hard, hard).map(|()| hard));
    let raised = match raised {
        Ok(hard) => format!("soft limit raised to {hard}"),
        Err(e) => format!("limit not raised ({e})"),
    };
    let mut fds = Vec::with_capacity(FD_TARGET);
    while fds.len() < FD_TARGET {
        // SAFETY: F_DUPFD_CLOEXEC duplicates stderr, a valid descriptor; no pointers.
        let raw = unsafe { libc::fcntl(2, libc::F_DUPFD_CLOEXEC, 0) };
        if raw < 0 {
            return Outcome::blocked(format!(
                "{raised}; fcntl(F_DUPFD) failed after {} new descriptors: {}",
                fds.len(),
                Errno::last()
            ));
        }
        // SAFETY: the kernel just returned this descriptor; nothing else owns it.
        fds.push(unsafe { OwnedFd::from_raw_fd(raw) });
    }
    Outcome::allowed(format!("{raised}; holds {FD_TARGET} more descriptors"))
}

fn memory_bomb(_: &Ctx<'_>) -> Outcome {
    const PAGE: usize = 4096;
    let mut maps: Vec<*mut libc::c_void> = Vec::with_capacity(BOMB_BYTES / BOMB_STEP);
    let mut total = 0usize;
    let outcome = loop {
        if total >= BOMB_BYTES {
            break Outcome::allowed(format!("mapped and touched {} MiB", total >> 20));
        }
        // SAFETY: a new anonymous private mapping at an address the kernel picks: it aliases
        // nothing.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                BOMB_STEP,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            break Outcome::blocked(format!(
                "mmap failed after {} MiB of {} MiB: {}",
                total >> 20,
                BOMB_BYTES >> 20,
                Errno::last()
            ));
        }
        maps.push(map);
        // SAFETY: `map` is the BOMB_STEP-byte mapping just created, owned by this function.
        unsafe { libc::madvise(map, BOMB_STEP, libc::MADV_HUGEPAGE) };
        let base = map.cast::<u8>();
        for offset in (0..BOMB_STEP).step_by(PAGE) {
            // SAFETY: `offset` < BOMB_STEP, inside the writable mapping just created.
            unsafe { base.add(offset).write_volatile(1) };
        }
        // The pages were really allocated; give them back so that a probe nothing stops
        // does not exhaust the host. The address space stays reserved.
        // SAFETY: as above: our own mapping, whose contents nothing needs.
        unsafe { libc::madvise(map, BOMB_STEP, libc::MADV_DONTNEED) };
        total += BOMB_STEP;
    };
    for map in maps {
        // SAFETY: each entry is a BOMB_STEP-byte mapping made above and not yet unmapped.
        unsafe { libc::munmap(map, BOMB_STEP) };
    }
    outcome
}

fn symlink(c: &Ctx<'_>) -> Outcome {
    match std::os::unix::fs::symlink(c.arg(0), c.arg(1)) {
        Ok(()) => Outcome::allowed("created the symbolic link"),
        Err(e) => Outcome::io("symlink", &e),
    }
}

fn hardlink(c: &Ctx<'_>) -> Outcome {
    match std::fs::hard_link(c.arg(0), c.arg(1)) {
        Ok(()) => Outcome::allowed("created the hard link"),
        Err(e) => Outcome::io("link", &e),
    }
}

fn rename(c: &Ctx<'_>) -> Outcome {
    match std::fs::rename(c.arg(0), c.arg(1)) {
        Ok(()) => Outcome::allowed("renamed"),
        Err(e) => Outcome::io("rename", &e),
    }
}

fn fill(mut file: impl Write) -> Outcome {
    let chunk = vec![b'x'; FILL_STEP];
    let mut written = 0usize;
    while written < FILL_BYTES {
        match file.write(&chunk) {
            Ok(0) => {
                return Outcome::blocked(format!("write wrote nothing after {written} bytes"));
            }
            Ok(n) => written += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                return Outcome::blocked(format!(
                    "write failed after {written} bytes: {}",
                    describe(&e)
                ));
            }
        }
    }
    Outcome::allowed(format!("wrote {} MiB", written >> 20))
}

fn disk_fill(c: &Ctx<'_>) -> Outcome {
    match OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .open(c.arg(0))
    {
        Ok(file) => fill(file),
        Err(e) => Outcome::io("open(O_CREAT)", &e),
    }
}

fn disk_fill_fd(c: &Ctx<'_>) -> Outcome {
    match c.held {
        Held::File(file) => fill(file),
        Held::Nothing | Held::Terminal { .. } => Outcome::blocked("no file held"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn layers_parse_in_the_real_order() {
        assert_eq!(parse_layers("all").unwrap(), Layer::ALL.to_vec());
        assert_eq!(parse_layers("none").unwrap(), Vec::new());
        assert_eq!(
            parse_layers("seccomp,uid,seccomp").unwrap(),
            vec![Layer::Uid, Layer::Seccomp]
        );
        assert!(parse_layers("uid,selinux").is_err());
        assert!(parse_layers("").is_err());
    }

    #[test]
    fn usage_errors_are_caught_before_anything_runs() {
        assert!(parse(&strings(&["--layers", "all"])).is_err());
        assert!(parse(&strings(&["--layers", "all", "nope"])).is_err());
        assert!(parse(&strings(&["--layers", "all", "kill"])).is_err());
        assert!(parse(&strings(&["--layers", "all", "kill", "0"])).is_err());
        assert!(
            parse(&strings(&[
                "--layers", "all", "proc-mem", "1", "0x10", "99999"
            ]))
            .is_err()
        );
        assert!(parse(&strings(&["--layers=uid", "kill", "12"])).is_ok());
        assert!(
            parse(&strings(&[
                "--layers", "all", "proc-mem", "1", "0x10", "16"
            ]))
            .is_ok()
        );
    }

    #[test]
    fn case_names_are_unique() {
        let mut names: Vec<_> = CASES.iter().map(|c| c.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), CASES.len());
    }
}
