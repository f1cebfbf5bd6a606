//! Snapshots and forks through the real binary (`paddock sessions snapshot`, `sessions start
//! --from`, `sessions fork`, `snapshots list|rm`) on the sandboxed local backend (the built-in
//! policy), on docker (the test services' image), and on apptainer and slurm with an image (the
//! test services' backends): files and shell state carried, forks independent of each other
//! and of the original, errors that leave nothing half made.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use paddock_tests::{Run, backend_skipped, paddock_at, services_policy};
use serde_json::{Value, json};

fn docker_skipped() -> bool {
    backend_skipped("docker")
}

/// A home, a workspace the engine runs in, and a policy (none: the built-in sandboxed local
/// backend over the workspace).
struct Target {
    home: tempfile::TempDir,
    workspace: tempfile::TempDir,
    policy: Option<PathBuf>,
    backend: &'static str,
    /// `call terminal --backend NAME` (a policy that does not route the terminal there).
    pick_backend: bool,
}

impl Target {
    fn local() -> Self {
        Self {
            home: tempfile::tempdir().unwrap(),
            workspace: tempfile::tempdir().unwrap(),
            policy: None,
            backend: "local",
            pick_backend: false,
        }
    }

    /// Backend `backend` of the test services' policy; `None` when the test command skips
    /// it (`skip_as`: its name in PADDOCK_SKIP_BACKENDS).
    fn services(backend: &'static str, skip_as: &str) -> Option<Self> {
        if backend_skipped(skip_as) {
            eprintln!("SKIPPED: {skip_as} (PADDOCK_SKIP_BACKENDS)");
            return None;
        }
        let policy = services_policy();
        Some(Self {
            home: tempfile::tempdir().unwrap(),
            workspace: tempfile::tempdir().unwrap(),
            policy: Some(PathBuf::from(policy)),
            backend,
            pick_backend: true,
        })
    }

    fn docker() -> Option<Self> {
        if docker_skipped() {
            eprintln!("SKIPPED: docker (PADDOCK_SKIP_BACKENDS)");
            return None;
        }
        let t = Self {
            home: tempfile::tempdir().unwrap(),
            workspace: tempfile::tempdir().unwrap(),
            policy: None,
            backend: "docker",
            pick_backend: false,
        };
        let policy = t.home.path().join("policy.toml");
        std::fs::write(
            &policy,
            "[backends.docker]\nkind = \"docker\"\nimage = \"paddock-test:latest\"\n\n\
             [routes]\nterminal = \"docker\"\n",
        )
        .unwrap();
        Some(Self {
            policy: Some(policy),
            ..t
        })
    }

    /// With `extra` policy text (a local target gets a policy file of its own).
    fn with_policy_text(mut self, extra: &str) -> Self {
        let path = self.home.path().join("policy.toml");
        let base = self
            .policy
            .as_ref()
            .map(|p| std::fs::read_to_string(p).unwrap())
            .unwrap_or_default();
        std::fs::write(&path, format!("{base}\n{extra}\n")).unwrap();
        self.policy = Some(path);
        self
    }

    fn paddock(&self, args: &[&str]) -> Run {
        let mut argv = args.to_vec();
        let policy = self.policy.as_ref().map(|p| p.display().to_string());
        if let Some(policy) = &policy {
            argv.extend(["--policy", policy]);
        }
        paddock_at(
            Some(self.workspace.path()),
            &argv,
            &[("PADDOCK_HOME", self.home.path().to_str().unwrap())],
            None,
            Duration::from_secs(120),
        )
    }

    fn terminal(&self, session: &str, command: &str) -> Value {
        let args = json!({ "command": command }).to_string();
        let mut argv = vec!["call", "terminal", "--args", &args, "--session", session];
        if self.pick_backend {
            argv.extend(["--backend", self.backend]);
        }
        let run = self.paddock(&argv);
        assert_eq!(run.code, 0, "{} {}", run.stdout, run.stderr);
        run.json()
    }

    /// Output of a command that must succeed.
    fn ok(&self, session: &str, command: &str) -> String {
        let v = self.terminal(session, command);
        assert_eq!(v["exit_code"], json!(0), "{command}: {v}");
        v["output"].as_str().unwrap().to_owned()
    }

    fn snapshots_dir(&self) -> PathBuf {
        self.home.path().join("snapshots")
    }

    /// The ids `sessions start --from` or `sessions fork` printed.
    fn ids(run: &Run) -> Vec<String> {
        assert_eq!(run.code, 0, "{} {}", run.stdout, run.stderr);
        run.stdout.lines().map(str::to_owned).collect()
    }

    fn close(&self, session: &str) {
        let run = self.paddock(&["sessions", "close", session]);
        assert_eq!(run.code, 0, "{} {}", run.stdout, run.stderr);
    }

    fn sessions(&self) -> Vec<String> {
        let run = self.paddock(&["sessions", "list"]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        run.json_lines()
            .iter()
            .filter_map(|s| s["id"].as_str().map(str::to_owned))
            .collect()
    }
}

/// Docker containers of session `session` (their names end with it).
fn containers(session: &str) -> Vec<String> {
    let out = Command::new("docker")
        .args(["ps", "-a", "--format", "{{.Names}}"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|n| n.ends_with(&format!("-{session}")))
        .map(str::to_owned)
        .collect()
}

/// Apptainer instances of session `session` (their names end with it).
fn instances(session: &str) -> Vec<String> {
    let out = Command::new("/opt/apptainer/bin/apptainer")
        .args(["instance", "list"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.ends_with(&format!("-{session}")))
        .map(str::to_owned)
        .collect()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// Files, the directory, exports and functions survive snapshot → fork; forks are independent
/// of each other and of the original, which goes on unchanged; the snapshot is owner-only,
/// listed with its size and age, and removed with everything it holds.
fn snapshot_and_fork(t: &Target) {
    // Docker's /tmp is a tmpfs, which `docker commit` does not see: the snapshot carries it
    // apart, so a fork finds the files there and starts in the directory the session was in
    // (agents work in /tmp all the time). The local sandbox writes its workspace only.
    let base = match t.backend {
        "docker" => "/tmp/snap",
        // The image's own tree (the instance's writable overlay), not only its /tmp.
        "apptainer" | "slurm_apptainer" => "/opt/snap",
        _ => ".",
    };
    t.ok(
        "orig",
        &format!(
            "mkdir -p {base}/work/sub && cd {base}/work && echo base > f.txt && export KEPT=yes \
             && greet() {{ echo \"hi-$1\"; }}"
        ),
    );
    let run = t.paddock(&["sessions", "snapshot", "orig", "--name", "snap1"]);
    assert_eq!(run.code, 0, "{} {}", run.stdout, run.stderr);
    let made = run.json();
    assert_eq!(made["name"], "snap1", "{made}");
    assert!(made["bytes"].as_u64().unwrap() > 0, "{made}");
    let how = made["files"][t.backend].as_str().unwrap().to_owned();
    assert!(
        ["docker commit", "changed files", "reflink copy", "copy"].contains(&how.as_str()),
        "{made}"
    );
    // Owner-only.
    let dir = t.snapshots_dir().join("snap1");
    assert_eq!(mode(&t.snapshots_dir()), 0o700);
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&dir.join("manifest.json")), 0o600);
    // The original goes on, and what it does after the snapshot is not in it.
    t.ok("orig", "echo later >> f.txt");
    if t.backend == "docker" {
        // Nothing of how /tmp travelled is left in the original.
        t.ok(
            "orig",
            "test ! -e /.paddock-tmp.tar && test ! -e /tmp/.paddock-restore",
        );
    }

    let forks = Target::ids(&t.paddock(&["sessions", "start", "--from", "snap1", "--count", "2"]));
    assert_eq!(forks.len(), 2, "{forks:?}");
    for fork in &forks {
        let out = t.ok(fork, "pwd; cat f.txt; echo $KEPT; greet x");
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[0].ends_with("/work"), "{fork}: {out}");
        assert_eq!(&lines[1..], ["base", "yes", "hi-x"], "{fork}: {out}");
    }
    t.ok(&forks[0], "echo one > only-in-fork1.txt");
    for other in [forks[1].as_str(), "orig"] {
        let v = t.terminal(other, "test -e only-in-fork1.txt");
        assert_ne!(v["exit_code"], json!(0), "{other} sees fork 1's file: {v}");
    }
    assert_eq!(t.ok("orig", "cat f.txt"), "base\nlater\n");
    let listed = t.sessions();
    for fork in &forks {
        assert!(listed.contains(fork), "{fork} not in {listed:?}");
    }

    // Listed with size and age.
    let run = t.paddock(&["snapshots", "list"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let list = run.json_lines();
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(list[0]["name"], "snap1");
    assert_eq!(list[0]["session"], "orig");
    assert!(list[0]["age_seconds"].as_u64().is_some(), "{list:?}");

    // Closing the forks removes what they were made of; removing the snapshot its image.
    for fork in &forks {
        t.close(fork);
    }
    if t.backend == "docker" {
        for fork in &forks {
            assert!(
                containers(fork).is_empty(),
                "{fork}: {:?}",
                containers(fork)
            );
        }
    } else if t.pick_backend {
        for fork in &forks {
            assert!(instances(fork).is_empty(), "{fork}: {:?}", instances(fork));
        }
    } else {
        let left: Vec<_> = std::fs::read_dir(t.home.path().join("forks/local"))
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "fork workspaces left: {left:?}");
    }
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    let run = t.paddock(&["snapshots", "rm", "snap1"]);
    assert_eq!(run.code, 0, "{} {}", run.stdout, run.stderr);
    assert!(!dir.exists());
    if let Some(image) = manifest["backends"][t.backend]["image"].as_str() {
        let inspect = Command::new("docker")
            .args(["image", "inspect", image])
            .output()
            .unwrap();
        assert!(!inspect.status.success(), "{image} is left");
    }
    t.close("orig");
}

#[test]
fn a_sandboxed_local_session_is_snapshotted_and_forked() {
    snapshot_and_fork(&Target::local());
}

#[test]
fn a_docker_session_is_snapshotted_and_forked() {
    let Some(t) = Target::docker() else { return };
    snapshot_and_fork(&t);
}

#[test]
fn an_apptainer_session_is_snapshotted_and_forked() {
    let Some(t) = Target::services("apptainer", "apptainer") else {
        return;
    };
    snapshot_and_fork(&t);
}

#[test]
fn a_slurm_session_with_an_image_is_snapshotted_and_forked() {
    let Some(t) = Target::services("slurm_apptainer", "slurm") else {
        return;
    };
    snapshot_and_fork(&t);
}

/// The XFS (reflink) directory scripts/test-services.sh mounts, from services.env; `None`
/// when the test command runs no services (every backend left out, as test-all.sh does then).
fn reflink_dir() -> Option<PathBuf> {
    if ["docker", "ssh", "apptainer", "slurm"]
        .iter()
        .all(|b| backend_skipped(b))
    {
        eprintln!("SKIPPED: the reflink file system (no test services: PADDOCK_SKIP_BACKENDS)");
        return None;
    }
    let policy = services_policy();
    let env = Path::new(&policy).with_file_name("services.env");
    let text = std::fs::read_to_string(&env).unwrap_or_default();
    let dir = text
        .lines()
        .find_map(|l| l.strip_prefix("PADDOCK_TEST_REFLINK_DIR="))
        .unwrap_or_else(|| {
            panic!(
                "{} names no PADDOCK_TEST_REFLINK_DIR: run scripts/test-services.sh",
                env.display()
            )
        });
    Some(PathBuf::from(dir))
}

#[test]
fn on_a_reflink_file_system_the_workspace_is_kept_by_reflink() {
    let Some(fs) = reflink_dir() else { return };
    let t = Target {
        home: tempfile::tempdir_in(&fs).unwrap(),
        workspace: tempfile::tempdir_in(&fs).unwrap(),
        policy: None,
        backend: "local",
        pick_backend: false,
    };
    t.ok(
        "rl",
        "head -c 20000000 /dev/urandom > data.bin && echo small > s.txt",
    );
    let run = t.paddock(&["sessions", "snapshot", "rl", "--name", "rl"]);
    assert_eq!(run.code, 0, "{} {}", run.stdout, run.stderr);
    assert_eq!(
        run.json()["files"]["local"],
        "reflink copy",
        "{}",
        run.stdout
    );
    let forks = Target::ids(&t.paddock(&["sessions", "start", "--from", "rl"]));
    // The fork's workspace is a reflink of the snapshot's: the same bytes, its own file.
    assert_eq!(
        t.ok(&forks[0], "cat s.txt; wc -c < data.bin"),
        "small\n20000000\n"
    );
    t.ok(&forks[0], "echo fork > s.txt");
    assert_eq!(t.ok("rl", "cat s.txt"), "small\n");
    t.close(&forks[0]);
    t.close("rl");
    let run = t.paddock(&["snapshots", "rm", "rl"]);
    assert_eq!(run.code, 0, "{} {}", run.stdout, run.stderr);
}

#[test]
fn fork_snapshots_and_starts_sessions_in_one_step() {
    let t = Target::local();
    t.ok("f", "echo kept > k.txt && export FROM=f");
    let run = t.paddock(&["sessions", "fork", "f", "--count", "3"]);
    let ids = Target::ids(&run);
    assert_eq!(ids.len(), 3, "{ids:?}");
    assert!(run.stderr.contains("snapshot"), "{}", run.stderr);
    for id in &ids {
        assert_eq!(t.ok(id, "cat k.txt; echo $FROM"), "kept\nf\n");
        t.close(id);
    }
    t.close("f");
}

/// Each of these fails with its reason and leaves no snapshot, session or fork behind.
#[test]
fn bad_snapshots_and_forks_are_refused_leaving_nothing_half_made() {
    let t = Target::local().with_policy_text("[snapshots]\nmax_count = 1\n");
    // An unknown session.
    let run = t.paddock(&["sessions", "snapshot", "nobody"]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(run.stderr.contains("no session 'nobody'"), "{}", run.stderr);
    t.ok("s", "echo x > x.txt");
    // A name that could not name a snapshot.
    let run = t.paddock(&["sessions", "snapshot", "s", "--name", "../up"]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("is invalid"), "{}", run.stderr);
    // Over the retention limit: refused, and nothing of the second one made.
    let first = t.paddock(&["sessions", "snapshot", "s", "--name", "one"]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    let run = t.paddock(&["sessions", "snapshot", "s", "--name", "two"]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("max_count = 1"), "{}", run.stderr);
    assert!(!t.snapshots_dir().join("two").exists());
    // A session that exists already cannot be started from a snapshot.
    let run = t.paddock(&["sessions", "start", "--from", "one", "--session", "s"]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("session 's' exists"), "{}", run.stderr);
    // An unknown snapshot.
    let run = t.paddock(&["sessions", "start", "--from", "zero", "--session", "n0"]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("no snapshot 'zero'"), "{}", run.stderr);
    // Another home's snapshot (its manifest names that home).
    let manifest = t.snapshots_dir().join("one/manifest.json");
    let good = std::fs::read_to_string(&manifest).unwrap();
    let mut other: Value = serde_json::from_str(&good).unwrap();
    other["home"] = json!("0123456789abcdef");
    std::fs::write(&manifest, other.to_string()).unwrap();
    let run = t.paddock(&["sessions", "start", "--from", "one", "--session", "n1"]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("another Paddock home"),
        "{}",
        run.stderr
    );
    // A truncated manifest.
    std::fs::write(&manifest, &good[..good.len() / 2]).unwrap();
    let run = t.paddock(&["sessions", "start", "--from", "one", "--session", "n2"]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("cannot be read"), "{}", run.stderr);
    let run = t.paddock(&["snapshots", "list"]);
    assert!(run.json_lines()[0]["error"].is_string(), "{}", run.stdout);
    // None of the refused starts made a session.
    assert_eq!(t.sessions(), vec!["s".to_owned()]);
    let run = t.paddock(&["snapshots", "rm", "one"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(!t.snapshots_dir().join("one").exists());
    t.close("s");
}

/// A fork from a snapshot whose image was removed outside Paddock names the image, and leaves
/// no container or session behind.
#[test]
fn a_fork_whose_docker_image_was_removed_is_refused_leaving_nothing() {
    let Some(t) = Target::docker() else { return };
    t.ok("g", "echo x > /tmp/x");
    let run = t.paddock(&["sessions", "snapshot", "g", "--name", "gone"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(t.snapshots_dir().join("gone/manifest.json")).unwrap(),
    )
    .unwrap();
    let image = manifest["backends"]["docker"]["image"]
        .as_str()
        .unwrap()
        .to_owned();
    let rmi = Command::new("docker")
        .args(["rmi", "-f", &image])
        .output()
        .unwrap();
    assert!(rmi.status.success(), "{rmi:?}");
    let run = t.paddock(&["sessions", "start", "--from", "gone", "--session", "g2"]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(
        run.stderr.contains(&image) && run.stderr.contains("gone"),
        "{}",
        run.stderr
    );
    assert!(containers("g2").is_empty(), "{:?}", containers("g2"));
    assert_eq!(t.sessions(), vec!["g".to_owned()]);
    let run = t.paddock(&["snapshots", "rm", "gone"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    t.close("g");
}

/// Every file under `dir` that contains `needle`.
fn files_containing(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(files_containing(&path, needle));
        } else if std::fs::read(&path).is_ok_and(|b| String::from_utf8_lossy(&b).contains(needle)) {
            found.push(path);
        }
    }
    found
}

/// A credential in the engine's environment is filtered out of commands, so no snapshot of
/// their shell state holds it (the exports it keeps are the commands' own).
#[test]
fn a_snapshot_holds_no_credential_the_engine_kept_from_commands() {
    let t = Target::local();
    let secret = "ghp-snapshot-test-secret-value";
    let with_secret = |args: &[&str]| {
        paddock_at(
            Some(t.workspace.path()),
            args,
            &[
                ("PADDOCK_HOME", t.home.path().to_str().unwrap()),
                ("GITHUB_TOKEN", secret),
                ("SNAPSHOT_TEST_PLAIN", "plain-value"),
            ],
            None,
            Duration::from_secs(120),
        )
    };
    let args = json!({"command": "export MINE=1; env | grep -c SNAPSHOT_TEST_PLAIN"}).to_string();
    let run = with_secret(&["call", "terminal", "--args", &args, "--session", "cred"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let run = with_secret(&["sessions", "snapshot", "cred", "--name", "cred"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let dir = t.snapshots_dir().join("cred");
    assert!(
        !files_containing(&dir, "plain-value").is_empty(),
        "the test's plain variable is in the shell state"
    );
    assert_eq!(files_containing(&dir, secret), Vec::<PathBuf>::new());
    t.close("cred");
}

/// A workspace larger than what `[snapshots] max_total_mb` leaves is refused before it is
/// copied, naming the key.
#[test]
fn a_workspace_over_the_size_limit_is_refused_before_it_is_copied() {
    let t = Target::local().with_policy_text("[snapshots]\nmax_total_mb = 1\n");
    over_the_limit(&t, "max_total_mb");
}

/// A session with 3 MB of files, under a 1 MB limit: refused naming `says`, nothing kept.
fn over_the_limit(t: &Target, says: &str) {
    // The local sandbox's /tmp is its own and not carried: the workspace, the directory a
    // session starts in.
    t.ok("big", "head -c 3000000 /dev/zero > big.bin");
    let run = t.paddock(&["sessions", "snapshot", "big", "--name", "big"]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(run.stderr.contains(says), "{}", run.stderr);
    assert!(!t.snapshots_dir().join("big").exists());
    t.close("big");
}

#[test]
fn apptainer_files_over_the_size_limit_are_refused_before_they_are_saved() {
    let Some(t) = Target::services("apptainer", "apptainer") else {
        return;
    };
    // The agent counts the changed files first and says so.
    over_the_limit(
        &t.with_policy_text("[snapshots]\nmax_total_mb = 1\n"),
        "over the 1 MB the snapshot may still take",
    );
}

#[test]
fn a_multi_node_slurm_session_with_an_image_is_snapshotted_and_forked() {
    let Some(t) = Target::services("slurm_nodes_apptainer", "slurm") else {
        return;
    };
    snapshot_and_fork(&t);
}
