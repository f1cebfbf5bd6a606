//! Hostile actions against the script sandbox's OS layers, through the real binaries.
//!
//! `paddock-sandbox-probe --layers L CASE ARGS` (test tooling built from sandbox-worker's
//! `src/bin/`, next to `paddock`; never shipped) applies the sandbox's own confinement code
//! (restricted to the layers in `L`), then performs one hostile action with raw system calls —
//! what a script could do if it ever escaped the interpreter — and prints
//! `{"case", "layers", "blocked", "detail"}`. Every run here gets fresh host-side bait: a secret
//! file, a canary file, TCP/UDP/UNIX/abstract listeners and a sleeper process standing in for
//! the engine (with a secret in its environment). After each run the host side is checked: bait
//! untouched, listeners saw nothing, sleeper alive and untraced, nothing mounted, no process left.
//!
//! - `every_case_is_blocked_by_all_layers`: every case with `--layers all`;
//! - `every_case_is_blocked_for_an_unprivileged_caller`: the same as uid 65534 (`setpriv`), with
//!   bait and sleeper owned by that uid too, as in a deployment that does not run as root;
//! - `layer_matrix` / `layer_matrix_unprivileged`: every case under each layer alone and under
//!   `none`, against the tables below (measured on Linux 6.18, Landlock ABI 7, x86_64);
//! - script-level tricks through `paddock run` (the interpreter layer).

use std::collections::BTreeMap;
use std::net::{TcpListener, UdpSocket};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::{SocketAddr, UnixListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use paddock_tests::{paddock_env, sandbox_probe_bin};

/// The uid/gid of the unprivileged runs.
const NOBODY: &str = "65534";
/// Hard limit on one probe run (the probe kills its own child after 30 s).
const PROBE_LIMIT: Duration = Duration::from_secs(45);
/// Probe runs in flight at once.
const WORKERS: usize = 4;
/// Single-layer configurations of the matrix, in column order.
const CONFIGS: [&str; 6] = [
    "none",
    "namespaces",
    "uid",
    "landlock",
    "rlimits",
    "seccomp",
];

/// Which configurations block each case when the probe runs as root (engine running as root:
/// the child drops to nobody). Measured; `none` appears nowhere, so every probe is proven able
/// to do its damage.
///
/// Stopped by ONE layer alone (the only single-layer "B" in its row): seccomp for `fork`,
/// `thread` (RLIMIT_NPROC does not apply to root), `unshare-user`, `tiocsti`, `memfd-create`,
/// `io-uring-setup`, `userfaultfd`, `keyctl` and `perf-event-open`; rlimits for `fd-exhaustion`
/// (seccomp allows `fcntl(F_DUPFD)`), `memory-bomb` (seccomp allows `mmap`) and `disk-fill-fd`
/// (a descriptor opened before confinement escapes Landlock). Landlock ABI 7 alone lets `stat`,
/// UDP and path-named UNIX sockets through. `tgkill` is allowed by seccomp only towards the
/// child itself (a per-child filter; `abort` needs it), so another process's pid is refused.
///
/// Leaving one layer out of `all` (measured, not asserted here): without seccomp, the nine
/// seccomp-only cases above get through even though the child is nobody; without rlimits, the
/// three rlimits-only ones do.
const MATRIX_ROOT: &[(&str, &str)] = &[
    ("read-file", "namespaces landlock seccomp"),
    ("write-file", "namespaces landlock rlimits seccomp"),
    ("create-file", "namespaces landlock seccomp"),
    ("list-dir", "namespaces landlock seccomp"),
    ("stat", "namespaces seccomp"),
    ("proc-environ", "namespaces uid landlock seccomp"),
    ("proc-mem", "namespaces uid landlock seccomp"),
    ("process-vm-readv", "uid landlock seccomp"),
    ("kill", "uid landlock seccomp"),
    ("tgkill", "uid landlock seccomp"),
    ("ptrace", "uid landlock seccomp"),
    ("tcp-connect", "namespaces landlock seccomp"),
    ("udp-send", "namespaces seccomp"),
    ("unix-connect", "namespaces seccomp"),
    ("abstract-connect", "namespaces landlock seccomp"),
    ("raw-socket", "uid seccomp"),
    ("fork", "seccomp"),
    ("thread", "seccomp"),
    ("exec", "namespaces landlock seccomp"),
    ("unshare-user", "seccomp"),
    ("setuid0", "uid seccomp"),
    ("chroot", "uid seccomp"),
    ("mount-tmpfs", "namespaces uid landlock seccomp"),
    ("tiocsti", "seccomp"),
    ("memfd-create", "seccomp"),
    ("io-uring-setup", "seccomp"),
    ("userfaultfd", "seccomp"),
    ("bpf", "uid seccomp"),
    ("keyctl", "seccomp"),
    ("perf-event-open", "seccomp"),
    ("fd-exhaustion", "rlimits"),
    ("memory-bomb", "rlimits"),
    ("symlink", "namespaces landlock seccomp"),
    ("hardlink", "namespaces landlock seccomp"),
    ("rename", "namespaces landlock seccomp"),
    ("disk-fill", "namespaces landlock rlimits seccomp"),
    ("disk-fill-fd", "rlimits"),
];

/// The same as uid 65534, with the bait and the sleeper owned by that uid: what holds when the
/// engine does not run as root. `none` marks what an unprivileged user cannot do anyway.
///
/// Stopped by two layers, where one used to be: `tgkill` (Landlock's signal scope, and
/// seccomp's per-child filter that allows it only towards the child itself). Stopped by ONE
/// layer alone: seccomp for `unshare-user`, `tiocsti`, `memfd-create`,
/// `userfaultfd`, `keyctl`, `perf-event-open`; rlimits for `fd-exhaustion`, `memory-bomb`,
/// `disk-fill-fd`. Note `raw-socket` and `chroot`: blocked with `none` but not with
/// `namespaces` alone, because a process in a user namespace of its own holds its full
/// capability set there (harmless: its own network and mount namespaces). The real child also
/// empties its capability sets right after the uid step (`confine_child`); the probe's layers
/// model the steps that hostile code meets, and that drop is not a separate layer here.
const MATRIX_UNPRIVILEGED: &[(&str, &str)] = &[
    ("read-file", "namespaces landlock seccomp"),
    ("write-file", "namespaces landlock rlimits seccomp"),
    ("create-file", "namespaces landlock seccomp"),
    ("list-dir", "namespaces landlock seccomp"),
    ("stat", "namespaces seccomp"),
    ("proc-environ", "namespaces landlock seccomp"),
    ("proc-mem", "namespaces landlock seccomp"),
    ("process-vm-readv", "namespaces landlock seccomp"),
    ("kill", "landlock seccomp"),
    ("tgkill", "landlock seccomp"),
    ("ptrace", "namespaces landlock seccomp"),
    ("tcp-connect", "namespaces landlock seccomp"),
    ("udp-send", "namespaces seccomp"),
    ("unix-connect", "namespaces seccomp"),
    ("abstract-connect", "namespaces landlock seccomp"),
    ("raw-socket", "none uid landlock rlimits seccomp"),
    ("fork", "rlimits seccomp"),
    ("thread", "rlimits seccomp"),
    ("exec", "namespaces landlock seccomp"),
    ("unshare-user", "seccomp"),
    ("setuid0", "none namespaces uid landlock rlimits seccomp"),
    ("chroot", "none uid landlock rlimits seccomp"),
    (
        "mount-tmpfs",
        "none namespaces uid landlock rlimits seccomp",
    ),
    ("tiocsti", "seccomp"),
    ("memfd-create", "seccomp"),
    ("io-uring-setup", "rlimits seccomp"),
    ("userfaultfd", "seccomp"),
    ("bpf", "none namespaces uid landlock rlimits seccomp"),
    ("keyctl", "seccomp"),
    ("perf-event-open", "seccomp"),
    ("fd-exhaustion", "rlimits"),
    ("memory-bomb", "rlimits"),
    ("symlink", "namespaces landlock seccomp"),
    ("hardlink", "namespaces landlock seccomp"),
    ("rename", "namespaces landlock seccomp"),
    ("disk-fill", "namespaces landlock rlimits seccomp"),
    ("disk-fill-fd", "rlimits"),
];

// ---------------------------------------------------------------------------------------------
// Who runs the probes.

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Runner {
    /// The test's own uid.
    Same,
    /// uid/gid 65534 through `setpriv` (only when the tests run as root).
    Nobody,
}

fn running_as_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

impl Runner {
    fn command(self, program: &Path) -> Command {
        match self {
            Runner::Same => Command::new(program),
            Runner::Nobody => {
                let mut command = Command::new("setpriv");
                command
                    .arg(format!("--reuid={NOBODY}"))
                    .arg(format!("--regid={NOBODY}"))
                    .arg("--clear-groups")
                    .arg(paddock_tests::reachable_by_anyone(program));
                command
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Host-side bait.

static SERIAL: AtomicUsize = AtomicUsize::new(0);

struct Fixture {
    dir: tempfile::TempDir,
    tag: String,
    secret_path: PathBuf,
    secret: String,
    canary_path: PathBuf,
    canary: String,
    tcp: TcpListener,
    udp: UdpSocket,
    unix_path: PathBuf,
    unix: UnixListener,
    abstract_name: String,
    abstract_listener: UnixListener,
    sleeper: Child,
    sleeper_secret: String,
    /// The last page of the sleeper's stack, where its environment strings live.
    stack_top: (u64, usize),
}

fn world_writable(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

impl Fixture {
    fn new(runner: Runner) -> Fixture {
        let tag = format!(
            "{}-{}-{}",
            std::process::id(),
            SERIAL.fetch_add(1, Ordering::Relaxed),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .subsec_nanos()
        );
        let dir = tempfile::Builder::new()
            .prefix("paddock-hostile-")
            .tempdir()
            .unwrap();
        // Everything is reachable by anyone: what stops a probe must be the sandbox, not the
        // permissions of the bait.
        world_writable(dir.path(), 0o777);
        let secret = format!("FILE-SECRET-{tag}");
        let secret_path = dir.path().join(format!("secret-{tag}.txt"));
        std::fs::write(&secret_path, &secret).unwrap();
        world_writable(&secret_path, 0o666);
        let canary = format!("CANARY-{tag}\n");
        let canary_path = dir.path().join("canary.txt");
        std::fs::write(&canary_path, &canary).unwrap();
        world_writable(&canary_path, 0o666);
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        world_writable(&mnt, 0o777);

        let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
        tcp.set_nonblocking(true).unwrap();
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        udp.set_nonblocking(true).unwrap();
        let unix_path = dir.path().join("listener.sock");
        let unix = UnixListener::bind(&unix_path).unwrap();
        unix.set_nonblocking(true).unwrap();
        world_writable(&unix_path, 0o777);
        let abstract_name = format!("paddock-hostile-{tag}");
        let abstract_listener =
            UnixListener::bind_addr(&SocketAddr::from_abstract_name(&abstract_name).unwrap())
                .unwrap();
        abstract_listener.set_nonblocking(true).unwrap();

        let sleeper_secret = format!("ENGINE-SECRET-{tag}");
        let sleeper = runner
            .command(Path::new("sleep"))
            .arg("600")
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("PADDOCK_ENGINE_SECRET", &sleeper_secret)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stack_top = wait_for_sleep(sleeper.id());
        Fixture {
            dir,
            tag,
            secret_path,
            secret,
            canary_path,
            canary,
            tcp,
            udp,
            unix_path,
            unix,
            abstract_name,
            abstract_listener,
            sleeper,
            sleeper_secret,
            stack_top,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn pid(&self) -> String {
        self.sleeper.id().to_string()
    }

    fn sleeper_alive(&mut self) -> bool {
        self.sleeper.try_wait().unwrap().is_none()
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = self.sleeper.kill();
        let _ = self.sleeper.wait();
    }
}

/// Waits until `pid` runs `sleep` (not `setpriv` any more), then answers its stack's last page.
///
/// The kernel renames the process before it sets up the new stack (`begin_new_exec` comes before
/// `setup_arg_pages`), so under load `comm` can say "sleep" while maps has no `[stack]` yet:
/// both are waited for.
fn wait_for_sleep(pid: u32) -> (u64, usize) {
    let started = Instant::now();
    let line = loop {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if comm.trim() == "sleep" {
            let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
            if let Some(line) = maps.lines().find(|l| l.ends_with("[stack]")) {
                break line.to_owned();
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "sleeper {pid} never ran sleep with its stack set up"
        );
        std::thread::sleep(Duration::from_millis(2));
    };
    let end = line.split(['-', ' ']).nth(1).unwrap();
    let end = u64::from_str_radix(end, 16).unwrap();
    (end - 4096, 4096)
}

// ---------------------------------------------------------------------------------------------
// The cases as the test drives them.

struct Spec {
    name: &'static str,
    args: fn(&Fixture) -> Vec<String>,
    /// Whether the host saw the action's effect (None: nothing outside the probe to look at;
    /// the generic checks still run).
    effect: fn(&mut Fixture, &str) -> Option<bool>,
}

fn s(p: impl AsRef<Path>) -> String {
    p.as_ref().to_string_lossy().into_owned()
}

fn no_args(_: &Fixture) -> Vec<String> {
    Vec::new()
}

fn no_evidence(_: &mut Fixture, _: &str) -> Option<bool> {
    None
}

fn pid_arg(f: &Fixture) -> Vec<String> {
    vec![f.pid()]
}

fn stack_args(f: &Fixture) -> Vec<String> {
    vec![
        f.pid(),
        format!("{:#x}", f.stack_top.0),
        f.stack_top.1.to_string(),
    ]
}

fn leaked_sleeper_secret(f: &mut Fixture, out: &str) -> Option<bool> {
    Some(out.contains(&f.sleeper_secret))
}

fn sleeper_died(f: &mut Fixture, out: &str) -> Option<bool> {
    // A delivered signal takes a moment to end the process: wait for it, long when the probe
    // says it delivered one, briefly otherwise (in case it lied).
    let grace = if out.contains("\"blocked\":false") {
        Duration::from_secs(3)
    } else {
        Duration::from_millis(300)
    };
    let started = Instant::now();
    while f.sleeper_alive() {
        if started.elapsed() > grace {
            return Some(false);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Some(true)
}

fn exists(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

fn non_empty(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.len() > 0)
}

const SPECS: &[Spec] = &[
    Spec {
        name: "read-file",
        args: |f| vec![s(&f.secret_path)],
        effect: |f, out| Some(out.contains(&f.secret)),
    },
    Spec {
        name: "write-file",
        args: |f| vec![s(&f.canary_path)],
        effect: |f, _| Some(std::fs::read_to_string(&f.canary_path).unwrap() != f.canary),
    },
    Spec {
        name: "create-file",
        args: |f| vec![s(f.path("created"))],
        effect: |f, _| Some(exists(&f.path("created"))),
    },
    Spec {
        name: "list-dir",
        args: |f| vec![s(f.dir.path())],
        effect: |f, out| Some(out.contains(&format!("secret-{}", f.tag))),
    },
    Spec {
        name: "stat",
        args: |f| vec![s(&f.secret_path)],
        effect: |f, out| {
            let ino = std::fs::metadata(&f.secret_path).unwrap().ino();
            Some(out.contains(&format!("ino {ino} ")))
        },
    },
    Spec {
        name: "proc-environ",
        args: pid_arg,
        effect: leaked_sleeper_secret,
    },
    Spec {
        name: "proc-mem",
        args: stack_args,
        effect: leaked_sleeper_secret,
    },
    Spec {
        name: "process-vm-readv",
        args: stack_args,
        effect: leaked_sleeper_secret,
    },
    Spec {
        name: "kill",
        args: pid_arg,
        effect: sleeper_died,
    },
    Spec {
        name: "tgkill",
        args: pid_arg,
        effect: sleeper_died,
    },
    Spec {
        name: "ptrace",
        args: pid_arg,
        // The seize ends with the probe; the generic checks look at the sleeper's state.
        effect: no_evidence,
    },
    Spec {
        name: "tcp-connect",
        args: |f| vec![f.tcp.local_addr().unwrap().port().to_string()],
        effect: |f, _| Some(f.tcp.accept().is_ok()),
    },
    Spec {
        name: "udp-send",
        args: |f| vec![f.udp.local_addr().unwrap().port().to_string()],
        effect: |f, _| Some(f.udp.recv(&mut [0u8; 64]).is_ok()),
    },
    Spec {
        name: "unix-connect",
        args: |f| vec![s(&f.unix_path)],
        effect: |f, _| Some(f.unix.accept().is_ok()),
    },
    Spec {
        name: "abstract-connect",
        args: |f| vec![f.abstract_name.clone()],
        effect: |f, _| Some(f.abstract_listener.accept().is_ok()),
    },
    Spec {
        name: "raw-socket",
        args: no_args,
        effect: no_evidence,
    },
    Spec {
        name: "fork",
        args: no_args,
        effect: no_evidence,
    },
    Spec {
        name: "thread",
        args: no_args,
        effect: no_evidence,
    },
    Spec {
        name: "exec",
        args: |f| vec![s(f.path("exec-marker"))],
        effect: |f, _| Some(exists(&f.path("exec-marker"))),
    },
    Spec {
        name: "unshare-user",
        args: no_args,
        effect: no_evidence,
    },
    Spec {
        name: "setuid0",
        args: no_args,
        effect: no_evidence,
    },
    Spec {
        name: "chroot",
        args: no_args,
        effect: no_evidence,
    },
    Spec {
        name: "mount-tmpfs",
        args: |f| vec![s(f.path("mnt"))],
        // Undone at once when it works; the generic checks look at the mount table.
        effect: no_evidence,
    },
    Spec {
        name: "tiocsti",
        args: no_args,
        effect: no_evidence,
    },
    Spec {
        name: "memfd-create",
        args: no_args,
        effect: no_evidence,
    },
    Spec {
        name: "io-uring-setup",
        args: no_args,
        effect: no_evidence,
    },
    Spec {
        name: "userfaultfd",
        args: no_args,
        effect: no_evidence,
    },
    Spec {
        name: "bpf",
        args: no_args,
        effect: no_evidence,
    },
    Spec {
        name: "keyctl",
        args: no_args,
        effect: no_evidence,
    },
    Spec {
        name: "perf-event-open",
        args: no_args,
        effect: no_evidence,
    },
    Spec {
        name: "fd-exhaustion",
        args: no_args,
        effect: no_evidence,
    },
    Spec {
        name: "memory-bomb",
        args: no_args,
        effect: no_evidence,
    },
    Spec {
        name: "symlink",
        args: |f| vec![s(&f.secret_path), s(f.path("symlink"))],
        effect: |f, _| Some(exists(&f.path("symlink"))),
    },
    Spec {
        name: "hardlink",
        args: |f| vec![s(&f.secret_path), s(f.path("hardlink"))],
        effect: |f, _| Some(exists(&f.path("hardlink"))),
    },
    Spec {
        name: "rename",
        args: |f| vec![s(&f.canary_path), s(f.path("renamed"))],
        effect: |f, _| Some(exists(&f.path("renamed")) || !exists(&f.canary_path)),
    },
    Spec {
        name: "disk-fill",
        args: |f| vec![s(f.path("fill.bin"))],
        effect: |f, _| Some(non_empty(&f.path("fill.bin"))),
    },
    Spec {
        name: "disk-fill-fd",
        args: |f| vec![s(f.path("fill-fd.bin"))],
        effect: |f, _| Some(non_empty(&f.path("fill-fd.bin"))),
    },
];

// ---------------------------------------------------------------------------------------------
// One run, and what it shows.

/// The measured result of one probe run.
struct Measured {
    case: &'static str,
    config: &'static str,
    blocked: bool,
    detail: String,
}

/// Processes still carrying the run's tag (the probe and anything it started inherit it).
fn leftover_processes(tag: &str) -> Vec<String> {
    let needle = format!("PADDOCK_PROBE_TAG={tag}");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if environ
            .split(|&b| b == 0)
            .any(|var| var == needle.as_bytes())
        {
            let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
            found.push(format!("{name} ({})", comm.trim()));
        }
    }
    found
}

fn mounted(path: &Path) -> bool {
    let needle = format!(" {} ", path.display());
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.contains(&needle))
}

/// Runs `paddock-sandbox-probe` with a hard time limit; answers (status, stdout, stderr).
fn run_probe(runner: Runner, args: &[String], tag: &str) -> (i32, String, String) {
    let mut child = runner
        .command(&sandbox_probe_bin())
        .args(args)
        .env("PADDOCK_PROBE_TAG", tag)
        .env_remove("PADDOCK_SANDBOX_SIMULATE_MISSING")
        .env_remove("PADDOCK_SANDBOX_ALLOW_DEGRADED")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let killer = std::thread::spawn(move || {
        if done_rx.recv_timeout(PROBE_LIMIT).is_err() {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            return true;
        }
        false
    });
    let mut stdout = String::new();
    let mut stderr = String::new();
    use std::io::Read;
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();
    let _ = done_tx.send(());
    assert!(
        !killer.join().unwrap(),
        "probe {args:?} hung: killed after {PROBE_LIMIT:?}"
    );
    (status.code().unwrap_or(-1), stdout, stderr)
}

/// Runs one case under `config` with fresh bait, checks everything the host can see, and
/// answers what was measured, or every inconsistency found.
fn measure(runner: Runner, spec: &Spec, config: &'static str) -> Result<Measured, String> {
    let mut fixture = Fixture::new(runner);
    let mut args = vec![
        "--layers".to_owned(),
        config.to_owned(),
        spec.name.to_owned(),
    ];
    args.extend((spec.args)(&fixture));
    let (code, stdout, stderr) = run_probe(runner, &args, &fixture.tag);
    let what = format!("{} --layers {config} ({runner:?})", spec.name);
    if code != 0 {
        return Err(format!("{what}: exit {code}: {stdout} {stderr}"));
    }
    let line: serde_json::Value = serde_json::from_str(stdout.trim())
        .map_err(|e| format!("{what}: not one JSON line ({e}): {stdout}"))?;
    let blocked = line["blocked"]
        .as_bool()
        .ok_or_else(|| format!("{what}: no 'blocked': {line}"))?;
    let detail = line["detail"].as_str().unwrap_or_default().to_owned();
    if line["case"] != spec.name {
        return Err(format!("{what}: wrong case in {line}"));
    }

    let mut problems = Vec::new();
    if blocked && (stdout.contains(&fixture.secret) || stdout.contains(&fixture.sleeper_secret)) {
        problems.push("blocked, yet a secret was printed".to_owned());
    }
    let effect = (spec.effect)(&mut fixture, &stdout);
    if effect == Some(blocked) {
        problems.push(format!(
            "reported blocked={blocked} but the host {} the effect",
            if blocked { "saw" } else { "did not see" }
        ));
    }
    if !matches!(spec.name, "kill" | "tgkill") && !fixture.sleeper_alive() {
        problems.push("the sleeper (engine stand-in) died".into());
    }
    let status = std::fs::read_to_string(format!("/proc/{}/status", fixture.sleeper.id()))
        .unwrap_or_default();
    if fixture.sleeper_alive()
        && !status
            .lines()
            .any(|l| l.starts_with("TracerPid:") && l.ends_with("\t0"))
    {
        problems.push(format!("the sleeper is still traced: {status}"));
    }
    if fixture.sleeper_alive()
        && status
            .lines()
            .any(|l| l.starts_with("State:\tt") || l.starts_with("State:\tT"))
    {
        problems.push("the sleeper is stopped".into());
    }
    let mnt = fixture.path("mnt");
    if mounted(&mnt) {
        let _ = Command::new("umount").arg("-l").arg(&mnt).status();
        problems.push("a mount was left on the bait directory".into());
    }
    let left = leftover_processes(&fixture.tag);
    if !left.is_empty() {
        problems.push(format!("processes left behind: {left:?}"));
    }
    if problems.is_empty() {
        Ok(Measured {
            case: spec.name,
            config,
            blocked,
            detail,
        })
    } else {
        Err(format!("{what}: {} — {stdout}", problems.join("; ")))
    }
}

/// Runs every (case, config) job on a few threads; answers the measurements or panics with
/// every failure at once.
fn measure_all(runner: Runner, configs: &[&'static str]) -> Vec<Measured> {
    let jobs: Vec<(&Spec, &'static str)> = SPECS
        .iter()
        .flat_map(|spec| configs.iter().map(move |config| (spec, *config)))
        .collect();
    let next = AtomicUsize::new(0);
    let results = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..WORKERS {
            scope.spawn(|| {
                while let Some(&(spec, config)) = jobs.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let result = measure(runner, spec, config);
                    results.lock().unwrap().push(result);
                }
            });
        }
    });
    let (ok, failed): (Vec<_>, Vec<_>) = results
        .into_inner()
        .unwrap()
        .into_iter()
        .partition(Result::is_ok);
    let failed: Vec<String> = failed.into_iter().filter_map(Result::err).collect();
    assert!(
        failed.is_empty(),
        "{} failure(s):\n{}",
        failed.len(),
        failed.join("\n")
    );
    ok.into_iter().filter_map(Result::ok).collect()
}

/// The cases the binary knows, from `--list`.
fn listed_cases() -> Vec<String> {
    let (code, stdout, stderr) = run_probe(Runner::Same, &["--list".to_owned()], "list");
    assert_eq!(code, 0, "{stderr}");
    stdout
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The tests.

#[test]
fn the_suite_covers_every_case_the_binary_has() {
    let listed = listed_cases();
    let specs: Vec<String> = SPECS.iter().map(|s| s.name.to_owned()).collect();
    pretty_assertions::assert_eq!(listed, specs);
    assert!(listed.len() >= 25, "{listed:?}");
}

#[test]
fn usage_errors_exit_2_and_name_the_valid_cases() {
    for args in [
        vec!["--layers", "all", "no-such-case"],
        vec!["--layers", "all"],
        vec!["--layers", "selinux", "fork"],
        vec!["--layers", "all", "kill"],
        vec!["--layers", "all", "kill", "not-a-pid"],
        vec!["fork"],
    ] {
        let args: Vec<String> = args.into_iter().map(str::to_owned).collect();
        let (code, stdout, stderr) = run_probe(Runner::Same, &args, "usage");
        assert_eq!(code, 2, "{args:?}: {stdout} {stderr}");
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
        assert!(
            stderr.contains("valid cases:") && stderr.contains("memory-bomb"),
            "{args:?}: {stderr}"
        );
    }
}

fn assert_all_blocked(runner: Runner) {
    let measured = measure_all(runner, &["all"]);
    let open: Vec<String> = measured
        .iter()
        .filter(|m| !m.blocked)
        .map(|m| format!("{}: {}", m.case, m.detail))
        .collect();
    assert!(
        open.is_empty(),
        "NOT blocked by every layer ({runner:?}):\n{}",
        open.join("\n")
    );
    assert_eq!(measured.len(), SPECS.len());
}

#[test]
fn every_case_is_blocked_by_all_layers() {
    assert_all_blocked(Runner::Same);
}

#[test]
fn every_case_is_blocked_for_an_unprivileged_caller() {
    if !running_as_root() {
        eprintln!(
            "skipped: the tests already run unprivileged (every_case_is_blocked_by_all_layers)"
        );
        return;
    }
    assert_all_blocked(Runner::Nobody);
}

/// Measures the matrix, prints it, and compares it with `expected`.
fn check_matrix(runner: Runner, expected: &[(&str, &str)]) {
    let measured = measure_all(runner, &CONFIGS);
    let mut table: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut details: BTreeMap<(&str, &str), &str> = BTreeMap::new();
    for m in &measured {
        if m.blocked {
            table.entry(m.case).or_default().push(m.config);
        }
        details.insert((m.case, m.config), &m.detail);
    }
    let mut grid = format!(
        "\nlayer matrix ({runner:?}): B = blocked by that layer alone\n{:<18}",
        "case"
    );
    for config in CONFIGS {
        grid.push_str(&format!("{config:>11}"));
    }
    let mut actual = Vec::new();
    for spec in SPECS {
        let mut blockers: Vec<&str> = table.get(spec.name).cloned().unwrap_or_default();
        blockers.sort_by_key(|b| CONFIGS.iter().position(|c| c == b));
        grid.push_str(&format!("\n{:<18}", spec.name));
        for config in CONFIGS {
            grid.push_str(&format!(
                "{:>11}",
                if blockers.contains(&config) { "B" } else { "." }
            ));
        }
        actual.push((spec.name.to_owned(), blockers.join(" ")));
    }
    println!("{grid}");
    for ((case, config), detail) in &details {
        println!("  {case:<18} {config:<11} {detail:.160}");
    }
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(c, b)| ((*c).to_owned(), (*b).to_owned()))
        .collect();
    pretty_assertions::assert_eq!(actual, expected, "{grid}");
}

#[test]
fn layer_matrix() {
    if !running_as_root() {
        eprintln!(
            "skipped: the root matrix needs root (layer_matrix_unprivileged covers the rest)"
        );
        return;
    }
    // Every probe must be able to do its damage with no confinement at all, or a "blocked"
    // elsewhere proves nothing.
    for (case, blockers) in MATRIX_ROOT {
        assert!(
            !blockers.split(' ').any(|b| b == "none"),
            "{case}: {blockers}"
        );
    }
    check_matrix(Runner::Same, MATRIX_ROOT);
}

#[test]
fn layer_matrix_unprivileged() {
    let runner = if running_as_root() {
        Runner::Nobody
    } else {
        Runner::Same
    };
    check_matrix(runner, MATRIX_UNPRIVILEGED);
}

// ---------------------------------------------------------------------------------------------
// Script level: the interpreter's own layer, with the OS layers behind it.

/// Runs a script (lines, ending with an expression: a dict of attempt → outcome) through
/// `paddock run` with a secret in the engine's environment; answers the result and the stdout.
fn script(lines: &[String], secret: &str) -> (serde_json::Value, String) {
    let mut code: Vec<String> = [
        "out = {}",
        "def attempt(key, f):",
        "    try:",
        "        out[key] = 'NOT BLOCKED: ' + repr(f())[:300]",
        "    except BaseException as e:",
        "        out[key] = type(e).__name__ + ': ' + str(e)",
        "subs = ().__class__.__base__.__subclasses__()",
        "def find(name):",
        "    for c in subs:",
        "        for k in [c] + type.__subclasses__(c):",
        "            if k.__name__ == name:",
        "                return k",
        "bi = find('BuiltinImporter')",
    ]
    .map(str::to_owned)
    .to_vec();
    code.extend_from_slice(lines);
    code.push("out".into());
    let run = paddock_env(
        &["run", "--timeout", "20", "-"],
        &[("PADDOCK_HOSTILE_SECRET", secret)],
        Some(code.join("\n").as_bytes()),
        Duration::from_secs(60),
    );
    let value = run.json();
    assert_eq!(value["ok"], true, "{value}");
    (value["result"].clone(), run.stdout)
}

/// Every attempt ended in an error named in `errors`; answers how many attempts there were.
fn assert_refused(result: &serde_json::Value, errors: &[&str]) -> usize {
    let attempts = result.as_object().unwrap_or_else(|| panic!("{result}"));
    for (key, outcome) in attempts {
        let outcome = outcome.as_str().unwrap();
        if key.starts_with("leak:") {
            continue;
        }
        assert!(
            errors.iter().any(|e| outcome.starts_with(e)),
            "{key}: {outcome}"
        );
    }
    attempts.len()
}

fn canary_file() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let canary = dir.path().join("canary.txt");
    std::fs::write(&canary, "CANARY\n").unwrap();
    let canary = canary.to_string_lossy().into_owned();
    (dir, canary)
}

#[test]
fn script_imports_of_socket_fail_every_way() {
    let lines = [
        "attempt('import', lambda: __import__('socket'))",
        "attempt('import _socket', lambda: __import__('_socket'))",
        "attempt('importlib', lambda: __import__('importlib').import_module('socket'))",
        "attempt('BuiltinImporter _socket', lambda: bi.load_module('_socket'))",
        "attempt('BuiltinImporter select', lambda: bi.load_module('select'))",
        "attempt('BuiltinImporter _posixsubprocess', lambda: bi.load_module('_posixsubprocess'))",
        "attempt('BuiltinImporter _ctypes', lambda: bi.load_module('_ctypes'))",
    ]
    .map(str::to_owned);
    let (result, _) = script(&lines, "unused");
    let n = assert_refused(&result, &["ModuleNotFoundError", "ImportError"]);
    assert_eq!(n, lines.len(), "{result}");
}

#[test]
fn script_builtins_tricks_cannot_open_files() {
    let (_dir, canary) = canary_file();
    let lines = [
        "b = __builtins__ if isinstance(__builtins__, dict) else vars(__builtins__)".to_owned(),
        format!("attempt('dict open', lambda: b['open']({canary:?}, 'a').write('pwned'))"),
        format!(
            "attempt('getattr open', lambda: getattr(__builtins__, 'open', b.get('open'))({canary:?}, 'a'))"
        ),
        format!("attempt('__import__ os', lambda: b['__import__']('os').open({canary:?}, 1))"),
        format!("attempt('io.open', lambda: b['__import__']('io').open({canary:?}, 'a'))"),
        format!("attempt('exec open', lambda: exec('open({canary:?}, \"a\").write(\"x\")', {{}}))"),
        format!("attempt('eval open', lambda: eval('open')({canary:?}, 'a'))"),
    ];
    let (result, _) = script(&lines, "unused");
    let n = assert_refused(&result, &["PermissionError"]);
    assert_eq!(n, lines.len() - 1, "{result}");
    assert_eq!(std::fs::read_to_string(&canary).unwrap(), "CANARY\n");
}

#[test]
fn script_subclass_hunting_finds_no_way_out() {
    let (dir, canary) = canary_file();
    let marker = dir.path().join("marker").to_string_lossy().into_owned();
    let secret = format!("HOSTILE-SECRET-{}", std::process::id());
    let lines = [
        "posix = bi.load_module('posix')".to_owned(),
        "io = bi.load_module('_io')".to_owned(),
        format!("attempt('posix.system', lambda: posix.system('touch {marker}'))"),
        format!("attempt('posix.open', lambda: posix.open({canary:?}, 1))"),
        "attempt('posix.listdir', lambda: posix.listdir('/'))".to_owned(),
        "attempt('posix.kill', lambda: posix.kill(1, 0))".to_owned(),
        format!("attempt('_io.open', lambda: io.open({canary:?}, 'a'))"),
        format!("attempt('_io.FileIO', lambda: io.FileIO({canary:?}, 'a'))"),
        // Imported by name: whether the zygote happened to load it depends on what it preloads.
        format!(
            "attempt('FileLoader.get_data', lambda: __import__('_frozen_importlib_external').FileLoader('x', {canary:?}).get_data({canary:?}))"
        ),
        "attempt('posix.getenv', lambda: posix.getenv('PADDOCK_HOSTILE_SECRET'))".to_owned(),
        "out['leak: posix.environ'] = repr(posix.environ)".to_owned(),
    ];
    let (result, stdout) = script(&lines, &secret);
    // Every way found ends in an error (the runtime's refusal, or a missing attribute or
    // operation where the runtime removed the function); none of them reached the host.
    let n = assert_refused(
        &result,
        &["PermissionError", "AttributeError", "UnsupportedOperation"],
    );
    assert_eq!(n, 9, "{result}");
    assert_eq!(result["leak: posix.environ"], "{}", "{result}");
    assert!(!stdout.contains(&secret), "{stdout}");
    assert_eq!(std::fs::read_to_string(&canary).unwrap(), "CANARY\n");
    assert!(!Path::new(&marker).exists());
}

#[test]
fn a_script_leaves_nothing_behind_for_the_next_independent_script() {
    // One script poisons everything it can reach in its interpreter: builtins, standard
    // modules, the import system, the runtime's own module, the event loop (a task meant to
    // print after the script ends). Twelve independent scripts of the same `paddock run` check
    // that none of it is there: at most 8 run at once, so the later ones run in children
    // forked after the poisoner finished.
    let dir = tempfile::tempdir().unwrap();
    let poison = paddock_tests::write_file(
        &dir,
        "poison.py",
        "import builtins, sys, json, asyncio, random\n\
         builtins.len = lambda x: 42\n\
         builtins.LEAK = 'leaked'\n\
         json.dumps = lambda *a, **k: '\"hijacked\"'\n\
         sys.modules['re'] = None\n\
         sys.meta_path.insert(0, type('Evil', (), {'find_spec': classmethod(lambda c, *a, **k: None)}))\n\
         runtime = sys.modules['_paddock_runtime']\n\
         runtime._jsonable = lambda value, depth=0: 'hijacked'\n\
         runtime._TOOLS['evil'] = 'terminal'\n\
         asyncio.gather = None\n\
         sys.setrecursionlimit(60)\n\
         random.seed(1234)\n\
         async def later():\n    await asyncio.sleep(0.3)\n    print('LEAKED TASK')\n\
         asyncio.get_event_loop().create_task(later())\n\
         'poisoned'",
    );
    let check = paddock_tests::write_file(
        &dir,
        "check.py",
        "import builtins, sys, json, asyncio, random\n\
         await tools.wait(milliseconds=400)\n\
         {'len': len([1, 2]) == 2, 'builtins': not hasattr(builtins, 'LEAK'),\n \
          'json': json.dumps(1) == '1', 're': sys.modules.get('re') is not None,\n \
          'meta_path': not any(type(f).__name__ == 'Evil' or getattr(f, '__name__', '') == 'Evil' for f in sys.meta_path),\n \
          'tools': 'evil' not in dir(tools), 'gather': asyncio.gather is not None,\n \
          'recursion': sys.getrecursionlimit() > 60,\n \
          'random': random.random() != random.Random(1234).random()}",
    );
    let mut args = vec!["run", "--timeout", "30", poison.as_str()];
    args.extend(std::iter::repeat_n(check.as_str(), 12));
    let run = paddock_tests::paddock(&args);
    let results = run.json_lines();
    assert_eq!(results.len(), 13, "{}", run.stderr);
    // Its own result went through the hijacked runtime: that much it could do to itself.
    assert_eq!(
        results[0]["result"],
        serde_json::json!("hijacked"),
        "{}",
        results[0]
    );
    for result in &results[1..] {
        let checks = result["result"]
            .as_object()
            .unwrap_or_else(|| panic!("{result}"));
        for (name, clean) in checks {
            assert_eq!(clean, &serde_json::json!(true), "{name} leaked: {result}");
        }
        assert_eq!(checks.len(), 9, "{result}");
        assert!(!run.stdout.contains("LEAKED TASK"), "{}", run.stdout);
    }
}
