//! Per-session ceilings (`max_processes`, `cpus`, `memory_mb`, `tmp_size_mb`,
//! `workspace_write_mb`) against
//! hostile commands, through the real binary's `terminal` tool. Evidence is taken on the host:
//! the session's cgroup files (`pids.peak`, `cpu.stat`), the host's process table, the
//! session's /tmp mount and the workspace on disk, and that nothing is left after the session
//! closes.
//!
//! Local sessions run in the workspace-write sandbox (the engine is root here: cgroup v1
//! controllers, a tmpfs mounted over the session's /tmp); docker and apptainer run against the
//! services of scripts/test-services.sh and print SKIPPED when `PADDOCK_SKIP_BACKENDS` names
//! them.
//!
//! These tests load the machine on purpose (a thousand forking processes, CPU spinners, disk
//! fills): run beside the rest of the suite they starve its timing-sensitive tests on a small
//! machine. So they are ignored in the main run, and `scripts/test-all.sh` runs them alone
//! afterwards: `cargo test -p paddock-tests --test all -- --ignored ceilings --test-threads=1`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use paddock_tests::{Run, paddock_at, paddock_env, paddock_home, terminal_argv};
use serde_json::{Value, json};

/// A local backend with ceilings, its workspace and state in a directory of their own (not
/// under /tmp: inside the sandbox /tmp is the session's own).
struct Local {
    dir: tempfile::TempDir,
    policy: String,
    /// Sessions used: closed at the end even when an assertion failed, so that no cgroup,
    /// mount or agent outlives the test.
    sessions: std::cell::RefCell<Vec<String>>,
}

impl Drop for Local {
    fn drop(&mut self) {
        for session in self.sessions.take() {
            let _ = paddock_env(
                &["sessions", "close", &session, "--policy", &self.policy],
                &[("PADDOCK_HOME", self.state().to_str().unwrap_or_default())],
                None,
                Duration::from_secs(60),
            );
        }
    }
}

impl Local {
    fn new(ceilings: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("ceilings-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .unwrap();
        let workspace = dir.path().join("ws");
        std::fs::create_dir_all(&workspace).unwrap();
        let policy = dir.path().join("p.toml");
        std::fs::write(
            &policy,
            format!(
                "[approval]\nmode = \"allow\"\n[backends.local]\nkind = \"local\"\nsandbox = \
                 \"workspace-write\"\nworkspace = \"{}\"\n{ceilings}\n",
                workspace.display()
            ),
        )
        .unwrap();
        Self {
            policy: policy.display().to_string(),
            dir,
            sessions: Default::default(),
        }
    }

    fn workspace(&self) -> PathBuf {
        self.dir.path().join("ws")
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    fn call(&self, session: &str, args: Value) -> Run {
        if !self.sessions.borrow().iter().any(|s| s == session) {
            self.sessions.borrow_mut().push(session.to_owned());
        }
        let args = args.to_string();
        paddock_home(
            &self.state(),
            &terminal_argv(&self.policy, session, &args),
            Duration::from_secs(90),
        )
    }

    fn run(&self, session: &str, command: &str) -> Value {
        let run = self.call(session, json!({"command": command, "timeout": 30}));
        run.answer()
    }

    fn close(&self, session: &str) {
        let run = paddock_env(
            &["sessions", "close", session, "--policy", &self.policy],
            &[("PADDOCK_HOME", self.state().to_str().unwrap())],
            None,
            Duration::from_secs(60),
        );
        assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    }
}

/// A session's group in one cgroup v1 hierarchy of this machine.
/// The live group of `session` under `controller`: `paddock/<backend>.<home digest>/<session>`
/// (the digest keeps engines with different state directories apart) that holds processes
/// (the session's agent, alive after a command). Exactly one must: looked up while the session
/// lives, so that a later `!exists()` proves it was removed.
fn group(controller: &str, backend: &str, session: &str) -> PathBuf {
    let base = Path::new("/sys/fs/cgroup").join(controller).join("paddock");
    let found: Vec<PathBuf> = std::fs::read_dir(&base)
        .map(|dirs| {
            dirs.flatten()
                .filter(|d| {
                    d.file_name()
                        .to_string_lossy()
                        .starts_with(&format!("{backend}."))
                })
                .map(|d| d.path().join(session))
                .filter(|p| !read(&p.join("cgroup.procs")).trim().is_empty())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        found.len(),
        1,
        "groups of session {session} under {}: {found:?}",
        base.display()
    );
    found.into_iter().next().unwrap()
}

/// How a process in `group` shows it in /proc/PID/cgroup (`pids:/paddock/...\n`).
fn cgroup_line(controller: &str, group: &Path) -> String {
    let mount = Path::new("/sys/fs/cgroup").join(controller);
    format!(
        "{controller}:/{}\n",
        group.strip_prefix(&mount).unwrap().display()
    )
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Tasks (processes and threads) on the host: the kernel's own count (`/proc/loadavg`), one
/// instant. A walk of /proc is not: while a bomb forks and its processes exit, the walk meets
/// some twice, and processes on their way out show the root cgroup, not their own.
fn host_tasks() -> usize {
    read(Path::new("/proc/loadavg"))
        .split_whitespace()
        .nth(3)
        .and_then(|running_total| running_total.split_once('/'))
        .and_then(|(_, total)| total.parse().ok())
        .unwrap()
}

/// Processes on the host whose cgroup membership names `needle`.
fn processes_in(needle: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter(|e| read(&e.path().join("cgroup")).contains(needle))
        .count()
}

/// Samples the host's task count (and the processes whose cgroup names `needle`) every 20 ms
/// until stopped; answers the highest of each.
struct Sampler {
    stop: Arc<AtomicBool>,
    host: Arc<AtomicUsize>,
    inside: Arc<AtomicUsize>,
    thread: std::thread::JoinHandle<()>,
}

impl Sampler {
    fn start(needle: String) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let host = Arc::new(AtomicUsize::new(0));
        let inside = Arc::new(AtomicUsize::new(0));
        let (s, h, i) = (stop.clone(), host.clone(), inside.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                h.fetch_max(host_tasks(), Ordering::Relaxed);
                i.fetch_max(processes_in(&needle), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Self {
            stop,
            host,
            inside,
            thread,
        }
    }

    /// The peaks: (host tasks, processes in the group).
    fn finish(self) -> (usize, usize) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap();
        (
            self.host.load(Ordering::Relaxed),
            self.inside.load(Ordering::Relaxed),
        )
    }
}

/// The fork-bomb tests count the host's processes: one at a time, so that one bomb is not
/// counted against another.
static ONE_BOMB_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn bomb_lock() -> std::sync::MutexGuard<'static, ()> {
    ONE_BOMB_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A bash fork bomb in a file (the approval gate refuses the one-liner itself, as hardline).
const BASH_BOMB: &str = "b(){ b|b& }; b\n";
/// The same in Python: every process forks forever, ignoring EAGAIN.
const PYTHON_BOMB: &str =
    "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n";

/// Runs a fork bomb in a session capped at `max` processes; checks the cap held on the host
/// and that nothing is left.
fn fork_bomb_is_bounded(file: &str, text: &str, run_it: &str) {
    let _one = bomb_lock();
    let max = 64;
    let h = Local::new(&format!("max_processes = {max}\ncpus = 0.5\n"));
    std::fs::write(h.workspace().join(file), text).unwrap();
    let session = format!("bomb{}", file.replace('.', ""));
    assert_eq!(h.run(&session, "echo warm")["output"], "warm\n");
    let pids = group("pids", "local", &session);
    let cpu = group("cpu", "local", &session);
    let in_group = cgroup_line("pids", &pids);
    assert_eq!(read(&pids.join("pids.max")).trim(), max.to_string());
    let before = host_tasks();
    let sampler = Sampler::start(in_group.clone());
    let result = h.run(
        &session,
        &format!("timeout 4 {run_it}; sleep 1; echo finished"),
    );
    let (host_peak, inside_peak) = sampler.finish();
    let output = result["output"].as_str().unwrap_or_default();
    // The session's own shell shares the ceiling: at it, even its `echo finished` may find no
    // slot. What counts is that the command ended, before its timeout.
    assert_eq!(
        result["exit_code"].as_i64().map(|c| c != 124),
        Some(true),
        "{result}"
    );
    assert!(
        output.contains("reached its process ceiling")
            && output.contains(&format!("max_processes = {max}")),
        "the command's failure names the ceiling and its key: {result}"
    );
    // The kernel's own count of the group, and ours of the host's table.
    let peak: usize = read(&pids.join("pids.peak")).trim().parse().unwrap();
    assert!(peak <= max, "pids.peak {peak} > {max}");
    // A walk of /proc is not one instant: processes that exit and fork while it reads are
    // counted twice, so the table's count gets a quarter of slack (an unbounded bomb would be
    // thousands); pids.peak is exact.
    assert!(
        inside_peak <= max + max / 4,
        "{inside_peak} processes in the group"
    );
    assert!(
        inside_peak >= max / 2,
        "the bomb never reached the ceiling ({inside_peak} processes): the test proves nothing"
    );
    // The host's tasks grow by the ceiling at most (the group counts tasks; other work on
    // this machine moves the count a little; an unbounded bomb would add thousands).
    assert!(
        host_peak < before + max + 300,
        "host tasks: {before} before, {host_peak} at the peak"
    );
    // The session's next command forks normally: the bomb is gone.
    assert_eq!(h.run(&session, "echo again")["output"], "again\n");
    h.close(&session);
    assert!(!pids.exists(), "{} left", pids.display());
    assert!(!cpu.exists(), "{} left", cpu.display());
    assert_eq!(processes_in(&in_group), 0);
}

#[test]
#[ignore = "loads the machine on purpose: scripts/test-all.sh runs it alone"]
fn a_bash_fork_bomb_stops_at_the_session_process_ceiling() {
    fork_bomb_is_bounded("b.sh", BASH_BOMB, "bash b.sh");
}

#[test]
#[ignore = "loads the machine on purpose: scripts/test-all.sh runs it alone"]
fn a_python_fork_bomb_stops_at_the_session_process_ceiling() {
    fork_bomb_is_bounded("b.py", PYTHON_BOMB, "python3 b.py");
}

/// The built-in default (no policy file) bounds a session at 1024 processes, root or not.
#[test]
#[ignore = "loads the machine on purpose: scripts/test-all.sh runs it alone"]
fn the_default_policy_bounds_a_fork_bomb() {
    let _one = bomb_lock();
    let dir = tempfile::Builder::new()
        .prefix("ceilings-default-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let state = dir.path().join("state");
    std::fs::write(dir.path().join("b.sh"), BASH_BOMB).unwrap();
    let call = |session: &str, command: &str| {
        let args = json!({"command": command, "timeout": 30}).to_string();
        let run = paddock_at(
            Some(dir.path()),
            &["call", "terminal", "--session", session, "--args", &args],
            &[("PADDOCK_HOME", state.to_str().unwrap())],
            None,
            Duration::from_secs(90),
        );
        run.answer()
    };
    // A failed assertion below still closes the session (its agent and cgroups go with it).
    let _closer = DefaultSessionCloser {
        dir: dir.path(),
        state: &state,
    };
    assert_eq!(call("dflt", "echo warm")["output"], "warm\n");
    let pids = group("pids", "local", "dflt");
    let in_group = cgroup_line("pids", &pids);
    let before = host_tasks();
    let sampler = Sampler::start(in_group.clone());
    let result = call("dflt", "timeout 3 bash b.sh; sleep 1; echo finished");
    let (host_peak, inside_peak) = sampler.finish();
    assert_eq!(read(&pids.join("pids.max")).trim(), "1024");
    let peak: usize = read(&pids.join("pids.peak")).trim().parse().unwrap();
    // pids.peak is exact; a walk of /proc counts some processes twice (see above).
    assert!(
        peak <= 1024 && inside_peak <= 1024 + 256,
        "{peak} {inside_peak}"
    );
    assert!(
        peak > 512,
        "the bomb never neared the ceiling: pids.peak {peak}"
    );
    assert!(
        host_peak < before + 1024 + 300,
        "host tasks: {before} -> {host_peak}"
    );
    let output = result["output"].as_str().unwrap_or_default();
    assert!(output.contains("max_processes = 1024"), "{result}");
    // The bomb left its run's process group (`timeout` makes one of its own); it went with
    // the run all the same, or the session would still be at its ceiling.
    assert_eq!(call("dflt", "echo after")["output"], "after\n");
    let run = paddock_at(
        Some(dir.path()),
        &["sessions", "close", "dflt"],
        &[("PADDOCK_HOME", state.to_str().unwrap())],
        None,
        Duration::from_secs(60),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(!pids.exists());
    assert_eq!(processes_in(&in_group), 0);
}

/// Closes the built-in policy's session `dflt` of a test's state directory when dropped.
struct DefaultSessionCloser<'a> {
    dir: &'a Path,
    state: &'a Path,
}

impl Drop for DefaultSessionCloser<'_> {
    fn drop(&mut self) {
        let _ = paddock_at(
            Some(self.dir),
            &["sessions", "close", "dflt"],
            &[("PADDOCK_HOME", self.state.to_str().unwrap_or_default())],
            None,
            Duration::from_secs(60),
        );
    }
}

/// Used bytes of the filesystem holding `path` (df's view).
fn used_bytes(path: &Path) -> u64 {
    let out = std::process::Command::new("df")
        .args(["-B1", "--output=used"])
        .arg(path)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)
        .and_then(|l| l.trim().parse().ok())
        .unwrap()
}

fn mounted(path: &Path) -> bool {
    read(Path::new("/proc/self/mountinfo"))
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(path.to_str().unwrap()))
}

#[test]
#[ignore = "loads the machine on purpose: scripts/test-all.sh runs it alone"]
fn filling_tmp_stops_at_its_quota_and_spares_the_host_disk() {
    let h = Local::new("tmp_size_mb = 16\n");
    assert_eq!(h.run("tmpfill", "echo warm")["output"], "warm\n");
    let tmp = h.state().join("sandbox-tmp/tmpfill");
    assert!(mounted(&tmp), "the session's /tmp is a mount of its own");
    let disk_before = used_bytes(&h.state());
    let result = h.run(
        "tmpfill",
        "dd if=/dev/zero of=/tmp/fill bs=1M count=64 status=none; echo dd=$?; ls -l /tmp/fill",
    );
    let output = result["output"].as_str().unwrap_or_default();
    assert!(output.contains("No space left on device"), "{result}");
    assert!(output.contains("dd=1"), "{result}");
    assert!(output.contains("tmp_size_mb = 16"), "{result}");
    let size = std::fs::metadata(tmp.join("fill")).unwrap().len();
    assert!(size <= 16 << 20 && size > 8 << 20, "{size}");
    let grown = used_bytes(&h.state()).saturating_sub(disk_before);
    assert!(grown < 8 << 20, "the host disk grew by {grown} bytes");
    // The file is the session's, kept between commands.
    assert!(
        h.run("tmpfill", "ls /tmp")["output"]
            .as_str()
            .unwrap()
            .contains("fill")
    );
    h.close("tmpfill");
    assert!(!mounted(&tmp), "the session's /tmp was unmounted");
    assert!(!tmp.exists());
}

#[test]
#[ignore = "loads the machine on purpose: scripts/test-all.sh runs it alone"]
fn filling_the_workspace_stops_at_its_limit() {
    let h = Local::new("workspace_write_mb = 8\n");
    // Many small files: the watcher ends the command.
    let started = Instant::now();
    let result = h.run(
        "wsfill",
        "for i in $(seq 1 60); do dd if=/dev/zero of=f$i bs=1M count=1 status=none; sleep 0.05; done; echo finished",
    );
    let output = result["output"].as_str().unwrap_or_default();
    assert!(!output.contains("finished"), "{result}");
    assert!(
        output.contains("over its limit of 8 MB (workspace_write_mb"),
        "{result}"
    );
    assert_eq!(result["exit_code"], 1, "{result}");
    assert!(started.elapsed() < Duration::from_secs(20));
    let files = std::fs::read_dir(h.workspace()).unwrap().count();
    // 8 MB and what the 250 ms between two walks let through at ~15 MB/s.
    assert!((8..=20).contains(&files), "{files} files written");
    // Nothing keeps writing after the command ended.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(std::fs::read_dir(h.workspace()).unwrap().count(), files);
    // One big file: RLIMIT_FSIZE stops it at the limit.
    let result = h.run(
        "wsfill",
        "dd if=/dev/zero of=big bs=1M count=64 status=none",
    );
    let output = result["output"].as_str().unwrap_or_default();
    assert!(output.contains("File size limit exceeded"), "{result}");
    assert!(output.contains("workspace_write_mb"), "{result}");
    assert_eq!(
        std::fs::metadata(h.workspace().join("big")).unwrap().len(),
        8 << 20
    );
    h.close("wsfill");
}

/// 400 MB written 8 MB at a time (bytes of b'x', so every page is touched), then its exit
/// status. Bash's "Killed" line repeats the command, so the word it would print is not in it.
const MEMORY_HOG: &str = "python3 -c 'b = []\nfor i in range(50): b.append(b\"x\" * (8 << 20))\nprint(\"sur\" + \"vived\")'; echo rc=$?";

#[test]
#[ignore = "loads the machine on purpose: scripts/test-all.sh runs it alone"]
fn a_memory_hog_is_killed_at_the_session_memory_ceiling() {
    let h = Local::new("memory_mb = 96\n");
    assert_eq!(h.run("memhog", "echo warm")["output"], "warm\n");
    let group = group("memory", "local", "memhog");
    assert_eq!(
        read(&group.join("memory.limit_in_bytes")).trim(),
        (96u64 << 20).to_string()
    );
    // Swap is no way around it where the kernel accounts it.
    let memsw = group.join("memory.memsw.limit_in_bytes");
    if memsw.exists() {
        assert_eq!(read(&memsw).trim(), (96u64 << 20).to_string());
    }
    let result = h.run("memhog", MEMORY_HOG);
    let output = result["output"].as_str().unwrap_or_default();
    assert!(!output.contains("survived"), "{result}");
    assert!(output.contains("rc=137"), "killed by SIGKILL: {result}");
    assert!(
        output.contains("reached its memory ceiling") && output.contains("memory_mb = 96"),
        "{result}"
    );
    let peak: u64 = read(&group.join("memory.max_usage_in_bytes"))
        .trim()
        .parse()
        .unwrap();
    assert!(peak <= 96 << 20, "the session used {peak} bytes");
    assert!(
        read(&group.join("memory.oom_control")).contains("oom_kill 1"),
        "the kill was the session group's: {}",
        read(&group.join("memory.oom_control"))
    );
    // The session goes on: its agent was not the one killed.
    assert_eq!(h.run("memhog", "echo after")["output"], "after\n");
    h.close("memhog");
    assert!(!group.exists(), "{} was removed", group.display());
}

/// The median wall time of a trivial command in `session` (the whole `paddock call`).
fn latency(h: &Local, session: &str) -> Duration {
    let mut times: Vec<Duration> = (0..5)
        .map(|_| {
            let started = Instant::now();
            assert_eq!(h.run(session, "echo hi")["output"], "hi\n");
            started.elapsed()
        })
        .collect();
    times.sort();
    times[2]
}

#[test]
#[ignore = "loads the machine on purpose: scripts/test-all.sh runs it alone"]
fn a_cpu_spinner_leaves_other_sessions_their_latency() {
    let h = Local::new("cpus = 0.5\n");
    let baseline = latency(&h, "quiet");
    let spin = h.call(
        "spinner",
        json!({
            "command": "for i in 1 2 3 4; do timeout 20 sh -c 'while :; do :; done' & done; wait",
            "background": true,
        }),
    );
    assert_eq!(spin.code, 0, "{}", spin.stderr);
    std::thread::sleep(Duration::from_secs(1));
    let cpu = group("cpu", "local", "spinner");
    assert_eq!(read(&cpu.join("cpu.cfs_quota_us")).trim(), "50000");
    let in_group = cgroup_line("cpu", &cpu);
    let spinning = processes_in(&in_group);
    assert!(
        spinning >= 4,
        "{spinning} processes in the spinner's cpu group"
    );
    let loaded = latency(&h, "quiet");
    let stat = read(&cpu.join("cpu.stat"));
    let throttled: u64 = stat
        .lines()
        .find_map(|l| l.strip_prefix("nr_throttled "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    assert!(throttled > 0, "the spinners were never throttled: {stat}");
    assert!(
        loaded < baseline * 3 || loaded < Duration::from_secs(1),
        "a trivial command took {loaded:?} next to the spinners, {baseline:?} before"
    );
    h.close("spinner");
    h.close("quiet");
    assert!(!cpu.exists());
    assert_eq!(processes_in(&in_group), 0);
}

/// The services' policy section for `backend` with `extra` keys appended, or `None` (SKIPPED)
/// when the test command leaves it out.
fn service_policy(dir: &Path, backend: &str, extra: &str) -> Option<String> {
    if paddock_tests::backend_skipped(backend) {
        eprintln!("SKIPPED: the {backend} backend (PADDOCK_SKIP_BACKENDS)");
        return None;
    }
    let header = format!("[backends.{backend}]");
    let section = paddock_tests::services_section(backend, backend);
    // The keys `extra` sets replace the service's own (and `pids_limit`, `max_processes`' alias).
    let replaced = |line: &str| {
        let key = line.split('=').next().unwrap_or_default().trim();
        key == "pids_limit"
            || extra
                .lines()
                .any(|e| e.split('=').next().unwrap_or_default().trim() == key)
    };
    let section: String = section
        .lines()
        .filter(|l| !replaced(l))
        .map(|l| format!("{l}\n"))
        .collect();
    let policy = dir.join("p.toml");
    std::fs::write(
        &policy,
        format!("[approval]\nmode = \"allow\"\n{header}{section}\n{extra}\n[routes]\nterminal = \"{backend}\"\n"),
    )
    .unwrap();
    Some(policy.display().to_string())
}

fn remote_call(dir: &Path, policy: &str, session: &str, command: &str) -> Value {
    let args = json!({"command": command, "timeout": 60}).to_string();
    let run = paddock_home(
        &dir.join("state"),
        &terminal_argv(policy, session, &args),
        Duration::from_secs(180),
    );
    run.answer()
}

fn remote_close(dir: &Path, policy: &str, session: &str) {
    let run = paddock_env(
        &["sessions", "close", session, "--policy", policy],
        &[("PADDOCK_HOME", dir.join("state").to_str().unwrap())],
        None,
        Duration::from_secs(120),
    );
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
}

/// Closes a remote session at the end, an assertion failure included.
struct RemoteCloser<'a> {
    dir: &'a Path,
    policy: &'a str,
    session: &'a str,
}

impl Drop for RemoteCloser<'_> {
    fn drop(&mut self) {
        let _ = paddock_env(
            &["sessions", "close", self.session, "--policy", self.policy],
            &[(
                "PADDOCK_HOME",
                self.dir.join("state").to_str().unwrap_or_default(),
            )],
            None,
            Duration::from_secs(120),
        );
    }
}

/// Fork bomb and /tmp fill (when the runtime can bound /tmp: `tmp_mb`) in a container or
/// instance: the runtime's own flags hold them.
fn remote_ceilings(backend: &str, extra: &str, tmp_mb: Option<u64>) {
    let dir = tempfile::tempdir().unwrap();
    let Some(policy) = service_policy(dir.path(), backend, extra) else {
        return;
    };
    let session = format!("ceil{backend}{}", std::process::id());
    let _closer = RemoteCloser {
        dir: dir.path(),
        policy: &policy,
        session: &session,
    };
    // BASH_BOMB in base64: the approval gate reads a printf of it as the hardline one-liner.
    let bomb = "echo YigpeyBifGImIH07IGIK | base64 -d > /tmp/b.sh; timeout 4 bash /tmp/b.sh; sleep 1; echo finished";
    let _one = bomb_lock();
    let before = host_tasks();
    let sampler = Sampler::start("\u{0}".to_owned());
    let result = remote_call(dir.path(), &policy, &session, bomb);
    let (host_peak, _) = sampler.finish();
    // Apptainer's systemd cgroup manager (its default) refuses every limit where systemd is
    // not PID 1 (this machine): the instance is then never started, so the bomb never runs
    // unbounded. With `systemd cgroups = no` in apptainer.conf the limit holds (checked below).
    let error = result["error"].as_str().unwrap_or_default();
    if backend == "apptainer" && error.contains("cannot use systemd cgroups manager") {
        assert!(
            host_peak < before + 300,
            "host tasks: {before} -> {host_peak}"
        );
        eprintln!(
            "apptainer refuses --pids-limit here (systemd cgroups = yes without systemd as \
             PID 1); the command failed with its words: {error}"
        );
        remote_close(dir.path(), &policy, &session);
        return;
    }
    let output = result["output"].as_str().unwrap_or_default();
    // The session's own shell shares the ceiling: at it, even its `echo finished` may find no
    // slot. What counts is that the command ended, before its timeout.
    assert_eq!(
        result["exit_code"].as_i64().map(|c| c != 124),
        Some(true),
        "{result}"
    );
    assert!(
        output.contains("Resource temporarily unavailable"),
        "forks failed at the ceiling: {result}"
    );
    assert!(
        host_peak < before + 64 + 300,
        "host tasks: {before} -> {host_peak}"
    );
    let Some(tmp_mb) = tmp_mb else {
        remote_close(dir.path(), &policy, &session);
        return;
    };
    let fill = remote_call(
        dir.path(),
        &policy,
        &session,
        "dd if=/dev/zero of=/tmp/fill bs=1M count=200 status=none; echo dd=$?; du -m /tmp/fill",
    );
    let output = fill["output"].as_str().unwrap_or_default();
    assert!(output.contains("No space left on device"), "{fill}");
    let written: u64 = output
        .lines()
        .find_map(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or(u64::MAX);
    assert!(
        written <= tmp_mb,
        "{written} MB written into a {tmp_mb} MB /tmp"
    );
    remote_close(dir.path(), &policy, &session);
}

/// `drop_capabilities = ["DAC_OVERRIDE"]`: the container's root respects permission bits (a
/// file it made unreadable stays unreadable to it), where by default it reads it anyway.
#[test]
fn docker_drop_capabilities_makes_root_respect_permission_bits() {
    let probe =
        "echo secret > /tmp/locked; chmod 000 /tmp/locked; cat /tmp/locked 2>&1; echo rc=$?";
    for (extra, readable) in [
        ("", true),
        ("drop_capabilities = [\"DAC_OVERRIDE\"]", false),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let Some(policy) = service_policy(dir.path(), "docker", extra) else {
            return;
        };
        let session = format!("capdocker{}", std::process::id());
        let _closer = RemoteCloser {
            dir: dir.path(),
            policy: &policy,
            session: &session,
        };
        let result = remote_call(dir.path(), &policy, &session, probe);
        let output = result["output"].as_str().unwrap_or_default();
        assert_eq!(output.contains("secret"), readable, "{extra:?}: {result}");
        assert_eq!(output.contains("rc=0"), readable, "{extra:?}: {result}");
        remote_close(dir.path(), &policy, &session);
    }
}

/// The runtime of the container of `session` (in state directory `dir`) on docker backend
/// `backend`, as dockerd reports it; empty when there is no such container.
fn container_runtime(dir: &Path, backend: &str, session: &str) -> String {
    let name = paddock_tests::environment_name(backend, &dir.join("state"), session);
    let out = std::process::Command::new("docker")
        .args(["inspect", "-f", "{{.HostConfig.Runtime}}", &name])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// `runtime = "NAME"` that dockerd does not know: an error naming the key and how to register
/// it, and nothing made or run with the default runtime instead.
#[test]
fn docker_refuses_a_runtime_the_daemon_does_not_know() {
    let dir = tempfile::tempdir().unwrap();
    let Some(policy) = service_policy(
        dir.path(),
        "docker",
        "runtime = \"paddock-no-such-runtime\"",
    ) else {
        return;
    };
    let session = format!("rtdocker{}", std::process::id());
    let _closer = RemoteCloser {
        dir: dir.path(),
        policy: &policy,
        session: &session,
    };
    let args = json!({"command": "echo ran-with-runc"}).to_string();
    let run = paddock_home(
        &dir.path().join("state"),
        &terminal_argv(&policy, &session, &args),
        Duration::from_secs(120),
    );
    let v = run.json();
    assert_eq!(run.code, 1, "{v}");
    let error = v["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("`runtime = \"paddock-no-such-runtime\"`")
            && error.contains("daemon.json")
            && error.contains("runc"),
        "{v}"
    );
    assert!(!v.to_string().contains("ran-with-runc"), "{v}");
    assert_eq!(container_runtime(dir.path(), "docker", &session), "");
}

/// `runtime = "runsc"` (the services' `docker_runsc`): the session's commands run under gVisor's
/// kernel; a policy that changes the runtime replaces the session's container.
#[test]
fn docker_runtime_runsc_runs_the_session_in_gvisor_and_a_change_replaces_it() {
    if paddock_tests::backend_skipped("docker") {
        eprintln!("SKIPPED: docker (PADDOCK_SKIP_BACKENDS)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let session = format!("rtrunsc{}", std::process::id());
    let probe = "dmesg | head -1; uname -r";
    let Some(first) = service_policy(dir.path(), "docker_runsc", "") else {
        return;
    };
    // The same file, rewritten below: closing needs only the backend's name and kind.
    let _closer = RemoteCloser {
        dir: dir.path(),
        policy: &first,
        session: &session,
    };
    for (runtime, gvisor) in [("runsc", true), ("runc", false)] {
        let policy = service_policy(
            dir.path(),
            "docker_runsc",
            &format!("runtime = \"{runtime}\""),
        )
        .unwrap();
        let v = remote_call(dir.path(), &policy, &session, probe);
        let output = v["output"].as_str().unwrap_or_default();
        assert_eq!(output.contains("Starting gVisor"), gvisor, "{runtime}: {v}");
        assert_eq!(
            container_runtime(dir.path(), "docker_runsc", &session),
            runtime,
            "{v}"
        );
    }
}

#[test]
#[ignore = "loads the machine on purpose: scripts/test-all.sh runs it alone"]
fn docker_bounds_a_fork_bomb_and_its_tmp() {
    remote_ceilings("docker", "max_processes = 64\ntmp_size_mb = 16", Some(16));
}

#[test]
#[ignore = "loads the machine on purpose: scripts/test-all.sh runs it alone"]
fn docker_kills_a_memory_hog_at_memory_mb_and_the_session_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let Some(policy) = service_policy(dir.path(), "docker", "memory_mb = 96") else {
        return;
    };
    let session = format!("memdocker{}", std::process::id());
    let _closer = RemoteCloser {
        dir: dir.path(),
        policy: &policy,
        session: &session,
    };
    let result = remote_call(dir.path(), &policy, &session, MEMORY_HOG);
    let output = result["output"].as_str().unwrap_or_default();
    assert!(!output.contains("survived"), "{result}");
    assert!(output.contains("rc=137"), "killed by SIGKILL: {result}");
    let after = remote_call(dir.path(), &policy, &session, "echo after");
    assert_eq!(after["output"], "after\n", "{after}");
    remote_close(dir.path(), &policy, &session);
}

#[test]
#[ignore = "loads the machine on purpose: scripts/test-all.sh runs it alone"]
fn apptainer_never_runs_a_fork_bomb_unbounded_and_refuses_tmp_size() {
    remote_ceilings("apptainer", "max_processes = 64", None);
    // An instance's /tmp has no size flag: `tmp_size_mb` is refused at load, saying why.
    let dir = tempfile::tempdir().unwrap();
    if let Some(policy) = service_policy(dir.path(), "apptainer", "tmp_size_mb = 16") {
        let run = paddock_env(
            &["policy", "check", &policy],
            &[],
            None,
            Duration::from_secs(30),
        );
        assert_ne!(run.code, 0, "{}", run.stdout);
        assert!(
            run.stderr
                .contains("backends.apptainer.tmp_size_mb: Apptainer has no flag for it"),
            "{}",
            run.stderr
        );
    }
}
