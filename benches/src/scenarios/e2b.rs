//! `e2b`: the E2B front end (`paddock serve --e2b`) driven by the unmodified e2b Python SDK
//! (issue 46's targets):
//! - `commands.run("true")` in a sandbox of the built-in default, alternated in one loop with
//!   `session.run("true")` of Paddock's own Python package (target: <= 1.3x);
//! - `Sandbox.create` to the first command's answer on each docker backend of `--backends`,
//!   given a warm pool of 2 (target: <= 200 ms).
//!
//! The SDK is the one `scripts/test-e2b.sh` installs (its newest set, in
//! `$PADDOCK_PY_ENV`, default /opt/paddock-py-test), or the Python `$PADDOCK_BENCH_E2B_PYTHON`
//! names.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::docker_keys;
use super::terminal::Scratch;
use crate::error::{BenchError, Result};
use crate::harness::Bench;
use crate::report::{Better, Outcome, Role, ScenarioReport};

/// The Python half.
const E2B_SDK_PY: &str = include_str!("../../python/e2b_sdk.py");
/// The API key the bench's server takes (loopback only, a scratch state directory).
const KEY: &str = "e2b_0123456789abcdef0123456789abcdef";
/// A docker template's warm pool.
const WARM: u32 = 2;

fn unexpected(what: &str, result: impl Into<String>) -> BenchError {
    BenchError::Unexpected {
        what: format!("e2b: {what}"),
        result: result.into(),
    }
}

/// The Python with the e2b SDK: `$PADDOCK_BENCH_E2B_PYTHON`, else the venv of
/// `scripts/test-e2b.sh` with the newest e2b.
async fn sdk_python() -> Result<PathBuf> {
    if let Some(named) = std::env::var_os("PADDOCK_BENCH_E2B_PYTHON") {
        return Ok(PathBuf::from(named));
    }
    let root = std::env::var_os("PADDOCK_PY_ENV")
        .map_or_else(|| PathBuf::from("/opt/paddock-py-test"), PathBuf::from);
    let venvs = std::fs::read_dir(&root)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("e2b-venv-"))
        .map(|e| e.path().join("bin").join("python"))
        .filter(|p| p.is_file());
    let mut best: Option<(Vec<u64>, PathBuf)> = None;
    for python in venvs {
        let out = tokio::process::Command::new(&python)
            .args([
                "-c",
                "import importlib.metadata as m; print(m.version('e2b'))",
            ])
            .output()
            .await;
        let Ok(out) = out else { continue };
        let version: Vec<u64> = String::from_utf8_lossy(&out.stdout)
            .trim()
            .split('.')
            .map_while(|part| part.parse().ok())
            .collect();
        if out.status.success() && best.as_ref().is_none_or(|(v, _)| version > *v) {
            best = Some((version, python));
        }
    }
    best.map(|(_, python)| python).ok_or_else(|| {
        unexpected(
            "the e2b SDK",
            format!(
                "no e2b-venv-* with the SDK under {}: run scripts/test-e2b.sh once, or set \
                 PADDOCK_BENCH_E2B_PYTHON to a Python that has `e2b`",
                root.display()
            ),
        )
    })
}

/// The repository's Python package (as `session_api` finds it).
fn package_dir(b: &Bench) -> Result<PathBuf> {
    std::env::var_os("PADDOCK_BENCH_PYTHONPATH")
        .map(PathBuf::from)
        .or_else(|| b.exe.ancestors().nth(3).map(|root| root.join("python")))
        .filter(|dir| dir.join("paddock").join("__init__.py").is_file())
        .ok_or_else(|| {
            unexpected(
                "the Python package",
                "not found beside the binary's repository; set PADDOCK_BENCH_PYTHONPATH to the \
                 directory that holds `paddock/`",
            )
        })
}

/// A started `paddock serve --e2b`, killed on drop.
struct Server {
    child: tokio::process::Child,
    url: String,
}

async fn start_server(b: &Bench, home: &Path, templates: &[(String, String)]) -> Result<Server> {
    let mut policy = format!("[e2b]\napi_keys = [\"{KEY}\"]\n");
    for (name, keys) in templates {
        policy.push_str(&format!(
            "\n[backends.{name}]\nkind = \"docker\"\n{keys}warm = {WARM}\n"
        ));
    }
    let policy_path = home.join("policy.toml");
    std::fs::write(&policy_path, policy)
        .map_err(BenchError::io(format!("writing {}", policy_path.display())))?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(BenchError::io("e2b: a free loopback port"))?
        .port();
    let addr = format!("127.0.0.1:{port}");
    let child = tokio::process::Command::new(&b.exe)
        .args(["serve", "--e2b", &addr, "--policy"])
        .arg(&policy_path)
        .env("PADDOCK_HOME", home.join("state"))
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(BenchError::io("e2b: starting paddock serve --e2b"))?;
    let until = Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(&addr).await.is_err() {
        if Instant::now() > until {
            return Err(unexpected(
                "the server",
                format!("nothing listens on {addr} after 30 s"),
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(Server {
        child,
        url: format!("http://{addr}"),
    })
}

pub async fn e2b(b: &Bench) -> Result<Vec<ScenarioReport>> {
    let python = sdk_python().await?;
    let package = package_dir(b)?;
    let scratch = Scratch::new("e2b")?;
    let templates = docker_keys(b)?;
    let mut server = start_server(b, &scratch.0, &templates).await?;
    let rounds = b.pick(40, 200);
    let creates = b.pick(3, 10);
    let out = tokio::process::Command::new(&python)
        .args(["-c", E2B_SDK_PY, &rounds.to_string(), &creates.to_string()])
        .args(templates.iter().map(|(name, _)| name))
        .env("PYTHONPATH", &package)
        .env("PADDOCK_BIN", &b.exe)
        .env("E2B_API_URL", &server.url)
        .env("E2B_SANDBOX_URL", &server.url)
        .env("E2B_API_KEY", KEY)
        .output()
        .await
        .map_err(BenchError::io("e2b: running the SDK's Python"))?;
    let _ = server.child.kill().await;
    let answer: Value = serde_json::from_slice(&out.stdout).map_err(|_| {
        unexpected(
            "the Python half",
            format!(
                "exit {:?}: {}",
                out.status.code(),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    })?;
    let samples = |v: &Value| -> Vec<f64> {
        v.as_array()
            .map(|a| a.iter().filter_map(Value::as_f64).collect())
            .unwrap_or_default()
    };
    let mut run = ScenarioReport::new(
        "e2b_commands_run",
        "`commands.run(\"true\")` through the e2b SDK against `session.run(\"true\")` of \
         Paddock's Python package",
        "ms",
        Better::Lower,
    );
    run.push(
        "paddock session.run",
        Role::Paddock,
        None,
        Outcome::measured(
            "`Session.run(\"true\")` of the package (a `paddock embed` engine, the built-in \
             default sandbox), alternated with the SDK's call in one loop: Python wall time",
            None,
            samples(&answer["session_run"]),
        ),
    );
    run.push(
        "e2b SDK commands.run",
        Role::Peer,
        None,
        Outcome::measured(
            "`Sandbox.commands.run(\"true\")` of the unmodified e2b SDK against `paddock serve \
             --e2b` on loopback (template `base`: the built-in default sandbox), in the same \
             loop",
            None,
            samples(&answer["e2b_run"]),
        ),
    );
    run.note("Target: the SDK's call <= 1.3x Paddock's own session.run, side by side in one run.");
    let mut reports = vec![run];
    if !templates.is_empty() {
        let mut create = ScenarioReport::new(
            "e2b_create",
            "`Sandbox.create()` to the first command's answer, docker with a warm pool",
            "ms",
            Better::Lower,
        );
        for (name, _) in &templates {
            create.push(
                name,
                Role::Paddock,
                None,
                Outcome::measured(
                    format!(
                        "`Sandbox.create(template=\"{name}\")` then `commands.run(\"true\")`, \
                         `warm = {WARM}`, the sandbox killed and the pool given 1 s to refill \
                         after each: Python wall time"
                    ),
                    None,
                    samples(&answer["create"][name]),
                ),
            );
        }
        create.note("Target: <= 200 ms to the first command's answer.");
        reports.push(create);
    }
    Ok(reports)
}
