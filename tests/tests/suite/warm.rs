//! Warm pools (`[backends.NAME] warm = N`) on the real docker service: a new session claims a
//! container that was made before it asked, and the pool is refilled.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use paddock_tests::{
    Run, backend_skipped, call_argv, environment_name, paddock_home, services_section,
};
use serde_json::json;

fn run(home: &Path, args: &[&str]) -> Run {
    paddock_home(home, args, Duration::from_secs(120))
}

/// A state directory and a policy whose one backend is the services' docker with a warm pool.
struct WarmDocker {
    home: tempfile::TempDir,
    /// `PREFIX` and a tag of the state directory's: the pool's containers are named after the
    /// backend, so no two tests share one.
    backend: String,
    policy: PathBuf,
}

impl WarmDocker {
    /// A pool of `warm` containers; `None` (SKIPPED) when the test command leaves docker out.
    fn new(prefix: &str, warm: u32) -> Option<Self> {
        if backend_skipped("docker") {
            eprintln!("SKIPPED: the docker backend (PADDOCK_SKIP_BACKENDS)");
            return None;
        }
        let section = services_section("docker", "docker");
        let home = tempfile::tempdir().unwrap();
        let tag: String = home
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .collect::<String>()
            .to_lowercase();
        let backend = format!("{prefix}{tag}");
        let policy = home.path().join("policy.toml");
        std::fs::write(
            &policy,
            format!("[backends.{backend}]{section}\nwarm = {warm}\n"),
        )
        .unwrap();
        Some(Self {
            home,
            backend,
            policy,
        })
    }
}

/// `docker ps` (running only): (id, name) of containers whose name starts with `prefix`.
fn containers(prefix: &str) -> Vec<(String, String)> {
    let out = std::process::Command::new("docker")
        .args(["ps", "--no-trunc", "--format", "{{.ID}} {{.Names}}"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(_, name)| name.starts_with(prefix))
        .map(|(id, name)| (id.to_owned(), name.to_owned()))
        .collect()
}

fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let until = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < until, "timed out waiting: {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_new_session_claims_a_warm_container_and_the_pool_is_refilled() {
    let Some(WarmDocker {
        home,
        backend,
        policy,
    }) = WarmDocker::new("warm", 2)
    else {
        return;
    };
    let policy = policy.to_str().unwrap();
    let warm_prefix = environment_name(&backend, home.path(), ".warm-");
    let terminal = |session: &str| {
        let args = json!({"command": "echo ready-$PADDOCK_SESSION"}).to_string();
        let mut argv = call_argv("terminal", &args, session, &backend);
        argv.extend(["--policy", policy]);
        let out = run(home.path(), &argv);
        assert_eq!(out.code, 0, "stdout={} stderr={}", out.stdout, out.stderr);
        assert_eq!(out.json()["output"], json!(format!("ready-{session}\n")));
    };

    // The first session finds the pool empty: it makes its own container and starts the filler.
    terminal("first");
    wait_for(
        "the pool to hold 2 containers",
        Duration::from_secs(90),
        || containers(&warm_prefix).len() == 2,
    );
    let pool = containers(&warm_prefix);

    // The second claims one of them: its container is one that existed before it asked.
    terminal("second");
    let mine = containers(&environment_name(&backend, home.path(), "second"));
    assert_eq!(mine.len(), 1, "{mine:?}");
    assert!(
        pool.iter().any(|(id, _)| *id == mine[0].0),
        "the session's container {mine:?} is not one of the warm ones {pool:?}"
    );
    wait_for(
        "the pool to be refilled to 2",
        Duration::from_secs(90),
        || {
            let now = containers(&warm_prefix);
            now.len() == 2 && now.iter().all(|(id, _)| *id != mine[0].0)
        },
    );

    // Closing the sessions removes their containers; the pool itself is the operator's.
    for session in ["first", "second"] {
        let out = run(
            home.path(),
            &["sessions", "close", session, "--policy", policy],
        );
        assert_eq!(out.code, 0, "{} {}", out.stdout, out.stderr);
    }
    assert!(containers(&environment_name(&backend, home.path(), "first")).is_empty());
    assert!(containers(&environment_name(&backend, home.path(), "second")).is_empty());
    for (id, _) in containers(&warm_prefix) {
        let _ = std::process::Command::new("docker")
            .args(["rm", "-f", &id])
            .output();
    }
}

/// A long-lived `paddock serve` fills its backends' warm pools when it starts, before any
/// session asks.
#[test]
fn paddock_serve_fills_the_pool_when_it_starts() {
    let Some(WarmDocker {
        home,
        backend,
        policy,
    }) = WarmDocker::new("serve", 1)
    else {
        return;
    };
    let mut serve = std::process::Command::new(paddock_tests::paddock_bin())
        .args(["serve", "--policy", policy.to_str().unwrap()])
        .env("PADDOCK_HOME", home.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let warm_prefix = environment_name(&backend, home.path(), ".warm-");
    let filled = Instant::now() + Duration::from_secs(90);
    let mut ready = false;
    while Instant::now() < filled {
        if containers(&warm_prefix).len() == 1 {
            ready = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(serve.stdin.take());
    let _ = serve.kill();
    let _ = serve.wait();
    for (id, _) in containers(&warm_prefix) {
        let _ = std::process::Command::new("docker")
            .args(["rm", "-f", &id])
            .output();
    }
    assert!(ready, "paddock serve did not fill its pool of 1");
}
