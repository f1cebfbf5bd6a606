//! Helpers for the end-to-end suites in `tests/`: locating the real `paddock` binary (and the
//! hostile-probe binary beside it) and running it with a hard time limit, so no test can hang.

#![expect(
    clippy::expect_used,
    reason = "test helpers: a failed expectation is a failed test"
)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The docker container, Apptainer instance or Slurm job of `session` on `backend` for an engine
/// whose `PADDOCK_HOME` is `home`, as operators see it (`docker ps`, `apptainer instance list`,
/// `squeue`): `paddock-<backend>-<owner>-<session>`, the owner being the first 8 hex digits of
/// the SHA-256 of the state directory's path.
pub fn environment_name(backend: &str, home: &Path, session: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(home.as_os_str().as_encoded_bytes());
    let owner = hex::encode(&digest[..4]);
    let session = session.strip_suffix(".python").unwrap_or(session);
    format!("paddock-{backend}-{owner}-{session}")
}

/// The policy naming the shared test services, written by scripts/test-services.sh
/// (`PADDOCK_TEST_POLICY`, else where that script writes it by default).
pub fn services_policy() -> String {
    std::env::var("PADDOCK_TEST_POLICY")
        .unwrap_or_else(|_| "/tmp/paddock-services/policy.toml".to_owned())
}

/// Whether the test command was told to leave `backend` out (`PADDOCK_SKIP_BACKENDS`).
pub fn backend_skipped(backend: &str) -> bool {
    std::env::var("PADDOCK_SKIP_BACKENDS")
        .unwrap_or_default()
        .split(',')
        .any(|b| b.trim() == backend)
}

/// The body of the services policy's `[backends.NAME]` section: the text after its header up to
/// the next section. A policy without it means the services are not up, which fails the test
/// with how to start them, or how to leave them out (`skip_as`, the name in
/// `PADDOCK_SKIP_BACKENDS`).
pub fn services_section(name: &str, skip_as: &str) -> String {
    let path = services_policy();
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let header = format!("[backends.{name}]");
    let start = text.find(&header).unwrap_or_else(|| {
        panic!(
            "the {name} test service is not up ({path} has no {header}): run \
             scripts/test-services.sh as root first, or set PADDOCK_SKIP_BACKENDS={skip_as} to \
             leave it out"
        )
    });
    let rest = &text[start + header.len()..];
    rest[..rest.find("\n[").unwrap_or(rest.len())].to_owned()
}

/// The string value of the first `KEY = "VALUE"` line of the services policy, whichever section
/// it is in (the services name one apptainer program and one ssh user).
pub fn services_policy_string(key: &str) -> Option<String> {
    let prefix = format!("{key} = \"");
    std::fs::read_to_string(services_policy())
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix(&prefix)
                .map(|v| v.trim_end_matches('"').to_owned())
        })
}

/// The apptainer program the services policy names.
pub fn apptainer_binary() -> String {
    services_policy_string("binary").unwrap_or_else(|| "apptainer".to_owned())
}

/// A session id unique to the test whose state directory is `home`: docker, apptainer and
/// slurm keep one container, instance or job per session, shared by every test using the id.
pub fn unique_session(home: &Path, name: &str) -> String {
    let tag = home
        .file_name()
        .expect("a state directory with a name")
        .to_string_lossy()
        .replace(['.', '_'], "");
    format!("{name}-{tag}")
}

/// The `paddock` binary built in the same target directory as this test executable.
pub fn paddock_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("PADDOCK_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/all-<hash> -> target/<profile>/paddock
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target profile directory");
    let bin = dir.join("paddock");
    assert!(
        bin.exists(),
        "{} does not exist: build it first (cargo build --release --bin paddock), \
         or set PADDOCK_BIN",
        bin.display()
    );
    bin
}

/// Whether every directory above `path` lets any user through (their `x` bit for others).
pub fn traversable_by_anyone(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.ancestors().skip(1).all(|dir| {
        dir.as_os_str().is_empty()
            || std::fs::metadata(dir).is_ok_and(|m| m.permissions().mode() & 0o001 != 0)
    })
}

/// `bin` at a path another user (uid 65534 through `setpriv`) can execute: itself when every
/// directory above it lets anyone through, else a hard link (a copy across file systems) in a
/// world-readable directory under /tmp. A checkout under a directory only root may traverse
/// (root's home is mode 700 on Debian, as is a `mktemp -d`) would otherwise answer "Permission
/// denied" to the tests that run Paddock as an ordinary user.
pub fn reachable_by_anyone(bin: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    if traversable_by_anyone(bin) {
        return bin.to_path_buf();
    }
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    std::hash::Hash::hash(&bin, &mut hasher);
    if let Ok(meta) = std::fs::metadata(bin) {
        std::hash::Hash::hash(&meta.len(), &mut hasher);
        std::hash::Hash::hash(&meta.modified().ok(), &mut hasher);
    }
    let dir = PathBuf::from(format!(
        "/tmp/paddock-test-bins/{:016x}",
        std::hash::Hasher::finish(&hasher)
    ));
    let name = bin.file_name().expect("a binary's file name");
    let target = dir.join(name);
    if target.exists() {
        return target;
    }
    std::fs::create_dir_all(&dir).expect("a directory for the test binaries");
    for open in [dir.parent().expect("/tmp/paddock-test-bins"), dir.as_path()] {
        std::fs::set_permissions(open, std::fs::Permissions::from_mode(0o755))
            .expect("chmod 755 the test binaries' directory");
    }
    // Under a temporary name of this call's own, then renamed: concurrent tests never see half
    // a copy. The name is unique per call, not per process: two threads of one test process
    // sharing it once made the second's `copy` (its hard link refused: the name existed)
    // truncate the first's hard link, which is the original binary itself.
    static COPIES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let partial = dir.join(format!(
        "{}.{}.{}",
        name.to_string_lossy(),
        std::process::id(),
        COPIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let _ = std::fs::remove_file(&partial);
    if std::fs::hard_link(bin, &partial).is_err() {
        std::fs::copy(bin, &partial).expect("copy the binary for another user");
    }
    std::fs::set_permissions(&partial, std::fs::Permissions::from_mode(0o755))
        .expect("chmod 755 the binary's copy");
    std::fs::rename(&partial, &target).expect("rename the binary's copy into place");
    target
}

/// The hostile-probe binary `paddock-sandbox-probe` (test tooling from sandbox-worker, never
/// shipped): beside `paddock`, so in the directory of `PADDOCK_BIN` when that is set.
pub fn sandbox_probe_bin() -> PathBuf {
    let bin = paddock_bin().with_file_name("paddock-sandbox-probe");
    assert!(
        bin.exists(),
        "{} does not exist: build it first (cargo build --release -p paddock-sandbox-worker \
         --bin paddock-sandbox-probe; `--workspace --all-targets` builds it too)",
        bin.display()
    );
    bin
}

/// What one run of the binary produced.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Run {
    /// stdout as JSON lines.
    pub fn json_lines(&self) -> Vec<serde_json::Value> {
        self.stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect()
    }

    /// The single result object of a call that answered: exit 0, or 1 for a failure it reports
    /// in that object (the command's own, a refusal). Any other exit fails the test.
    #[track_caller]
    pub fn answer(&self) -> serde_json::Value {
        assert!(
            self.code == 0 || self.code == 1,
            "exit {}: stdout={} stderr={}",
            self.code,
            self.stdout,
            self.stderr
        );
        self.json()
    }

    /// The single result object on stdout.
    pub fn json(&self) -> serde_json::Value {
        let lines = self.json_lines();
        assert_eq!(
            lines.len(),
            1,
            "expected one line; stdout={} stderr={}",
            self.stdout,
            self.stderr
        );
        lines.into_iter().next().expect("one line")
    }
}

/// The state directory of every `paddock` this test process runs without one of its own
/// (`PADDOCK_HOME`, `XDG_STATE_HOME` or `HOME` given by the test): `$TMPDIR/paddock-tests/
/// home-PID`, never the state directory of the person running the tests, whose sessions a test
/// must neither see nor leave agents in. The homes of test processes that are gone are reaped
/// the first time this is asked for: their sessions closed (a sandboxed agent would otherwise
/// wait out its 30 minutes idle), then the directory removed.
pub fn test_home() -> &'static Path {
    static HOME: OnceLock<PathBuf> = OnceLock::new();
    HOME.get_or_init(|| {
        let all = std::env::temp_dir().join("paddock-tests");
        reap_dead_homes(&all);
        let home = all.join(format!("home-{}", std::process::id()));
        std::fs::create_dir_all(&home).expect("create the tests' state directory");
        home
    })
}

/// Closes the sessions of every `home-PID` in `all` whose process is gone, then removes it.
fn reap_dead_homes(all: &Path) {
    let Ok(entries) = std::fs::read_dir(all) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix("home-") else {
            continue;
        };
        if Path::new("/proc").join(pid).exists() {
            continue;
        }
        let home = entry.path();
        close_sessions(&home);
        let _ = std::fs::remove_dir_all(&home);
    }
}

/// Closes every session of the state directory `home` (under the built-in policy): their
/// agents, environments and background processes end.
pub fn close_sessions(home: &Path) {
    let listed = Command::new(paddock_bin())
        .args(["sessions", "list"])
        .env("PADDOCK_HOME", home)
        .env_remove("PADDOCK_POLICY")
        .stderr(Stdio::null())
        .output();
    let listed = listed.map(|o| o.stdout).unwrap_or_default();
    for line in String::from_utf8_lossy(&listed).lines() {
        let id = serde_json::from_str::<serde_json::Value>(line)
            .ok()
            .and_then(|v| v["id"].as_str().map(str::to_owned));
        if let Some(id) = id {
            let _ = Command::new(paddock_bin())
                .args(["sessions", "close", &id])
                .env("PADDOCK_HOME", home)
                .env_remove("PADDOCK_POLICY")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// A state directory of one test's own, whose sessions are closed when it is dropped.
pub struct ClosingHome(tempfile::TempDir);

impl ClosingHome {
    pub fn new() -> Self {
        Self(tempfile::tempdir().expect("a temporary state directory"))
    }

    pub fn path(&self) -> &str {
        self.0.path().to_str().expect("a UTF-8 temporary path")
    }
}

impl Default for ClosingHome {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for ClosingHome {
    fn drop(&mut self) {
        close_sessions(self.0.path());
    }
}

/// Runs `paddock ARGS` with `stdin`, killing it after `limit`.
pub fn paddock_with(args: &[&str], stdin: Option<&[u8]>, limit: Duration) -> Run {
    paddock_env(args, &[], stdin, limit)
}

/// Runs `paddock ARGS` with extra environment variables.
pub fn paddock_env(
    args: &[&str],
    env: &[(&str, &str)],
    stdin: Option<&[u8]>,
    limit: Duration,
) -> Run {
    paddock_at(None, args, env, stdin, limit)
}

/// An environment value for [`paddock_env`] and [`paddock_at`] that removes the variable from
/// what `paddock` inherits (a NUL can be no real value).
pub const UNSET: &str = "\0unset";

/// Runs `paddock ARGS` with extra environment variables in the directory `cwd` (the workspace
/// of a local backend that declares none), or in this process's own directory.
pub fn paddock_at(
    cwd: Option<&Path>,
    args: &[&str],
    env: &[(&str, &str)],
    stdin: Option<&[u8]>,
    limit: Duration,
) -> Run {
    let started = Instant::now();
    let mut command = paddock_command(cwd, args, env);
    let mut child = command
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn paddock");
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().expect("stdin pipe");
        pipe.write_all(input).expect("write stdin");
    }
    let pid = child.id();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let killer = std::thread::spawn(move || {
        if done_rx.recv_timeout(limit).is_err() {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            return true;
        }
        false
    });
    let output: Output = child.wait_with_output().expect("wait paddock");
    let _ = done_tx.send(());
    let killed = killer.join().unwrap_or(false);
    assert!(
        !killed,
        "paddock {args:?} hung and was killed after {limit:?}"
    );
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        elapsed: started.elapsed(),
    }
}

/// `paddock ARGS` as [`paddock_at`] starts it: the test home unless `env` names one, no
/// inherited `PADDOCK_POLICY`, `env` applied ([`UNSET`] removes a variable).
fn paddock_command(cwd: Option<&Path>, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(paddock_bin());
    if let Some(dir) = cwd {
        command.current_dir(dir);
    }
    let has_home = env
        .iter()
        .any(|(k, _)| matches!(*k, "PADDOCK_HOME" | "XDG_STATE_HOME" | "HOME"));
    if !has_home && std::env::var_os("PADDOCK_HOME").is_none() {
        command.env("PADDOCK_HOME", test_home());
    }
    command.env_remove("PADDOCK_POLICY");
    for (name, value) in env {
        if *value == UNSET {
            command.env_remove(name);
        } else {
            command.env(name, value);
        }
    }
    command.args(args);
    command
}

/// A run whose stdout lines were timed as they arrived.
pub struct TimedLines {
    /// Each line of stdout with when it arrived, from the start.
    pub lines: Vec<(Duration, serde_json::Value)>,
    pub code: i32,
    pub stderr: String,
}

/// Runs `paddock ARGS` (as [`paddock_env`]) reading its stdout line by line as it is written:
/// for output that must arrive before the command ends. Each line must be JSON.
pub fn paddock_timed_lines(args: &[&str], env: &[(&str, &str)], limit: Duration) -> TimedLines {
    use std::io::BufRead;
    let started = Instant::now();
    let mut child = paddock_command(None, args, env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn paddock");
    let mut stderr = child.stderr.take().expect("stderr pipe");
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
        text
    });
    let pid = child.id();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let killer = std::thread::spawn(move || {
        if done_rx.recv_timeout(limit).is_err() {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    });
    let mut lines = Vec::new();
    for line in std::io::BufReader::new(child.stdout.take().expect("stdout pipe")).lines() {
        let line = line.expect("read stdout");
        let value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        lines.push((started.elapsed(), value));
    }
    let status = child.wait().expect("wait paddock");
    let _ = done_tx.send(());
    let _ = killer.join();
    TimedLines {
        lines,
        code: status.code().unwrap_or(-1),
        stderr: errors.join().unwrap_or_default(),
    }
}

/// Runs `paddock ARGS` with its state in `home`, killing it after `limit`.
pub fn paddock_home(home: &Path, args: &[&str], limit: Duration) -> Run {
    let home = home.to_str().expect("a UTF-8 state directory");
    paddock_env(args, &[("PADDOCK_HOME", home)], None, limit)
}

/// Runs `paddock ARGS --policy POLICY` with its state in `home`, killing it after `limit`.
pub fn paddock_policy(home: &Path, policy: &str, args: &[&str], limit: Duration) -> Run {
    let mut argv = args.to_vec();
    argv.extend(["--policy", policy]);
    paddock_home(home, &argv, limit)
}

/// The arguments of `paddock call TOOL --args ARGS --session SESSION --backend BACKEND`.
pub fn call_argv<'a>(
    tool: &'a str,
    args: &'a str,
    session: &'a str,
    backend: &'a str,
) -> Vec<&'a str> {
    vec![
        "call",
        tool,
        "--args",
        args,
        "--session",
        session,
        "--backend",
        backend,
    ]
}

/// The arguments of `paddock call terminal --policy POLICY --session SESSION --args ARGS`, on
/// the backend the policy routes the terminal to.
pub fn terminal_argv<'a>(policy: &'a str, session: &'a str, args: &'a str) -> Vec<&'a str> {
    vec![
        "call",
        "terminal",
        "--policy",
        policy,
        "--session",
        session,
        "--args",
        args,
    ]
}

/// Runs `paddock ARGS` with a 60 s limit.
pub fn paddock(args: &[&str]) -> Run {
    paddock_with(args, None, Duration::from_secs(60))
}

/// Writes `content` into a fresh file in `dir` and returns its path as a string.
pub fn write_file(dir: &tempfile::TempDir, name: &str, content: impl AsRef<[u8]>) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, content).expect("write test file");
    path.to_string_lossy().into_owned()
}

/// A fresh temporary directory holding the one file `name` with `content`, and that file's path.
/// The file lives as long as the directory: keep it until the file's last use.
pub fn temp_file(name: &str, content: impl AsRef<[u8]>) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = write_file(&dir, name, content);
    (dir, path)
}

/// Runs one script given as text through `paddock run` with extra flags.
pub fn run_script(code: &str, flags: &[&str]) -> Run {
    let mut args = vec!["run"];
    args.extend_from_slice(flags);
    args.push("-");
    paddock_with(&args, Some(code.as_bytes()), Duration::from_secs(60))
}

/// Children of every thread of `pid` (a child belongs to the thread that spawned it).
pub fn children_of(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .filter_map(Result::ok)
        .flat_map(|t| {
            std::fs::read_to_string(t.path().join("children"))
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// Private resident memory of `pid` in kB (0 when it is gone): what it wrote itself, not the
/// pages it still shares with the zygote it was forked from.
pub fn private_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            l.strip_prefix("Private_Dirty:")
                .or_else(|| l.strip_prefix("Private_Clean:"))
        })
        .filter_map(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}
