//! `terminal` on each docker/ssh/apptainer backend of a policy (`--backends POLICY`, e.g. the
//! file scripts/test-services.sh prints), against the bare tool doing the same (`docker exec`,
//! `ssh` over a ControlMaster, `apptainer exec instance://`), interleaved sample by sample.

use std::sync::Arc;
use std::time::Instant;

use serde_json::json;

use crate::bench::report::{Better, Outcome, Role, ScenarioReport};
use crate::bench::{Bench, BenchError, Result, ms};
use crate::engine::{Engine, EngineOptions};
use crate::policy::{BackendConfig, Policy};
use crate::registry::Registry;

const SESSION: &str = "bench";

/// The bare tool's argv for backend `name`, or `None` for a kind without one (local).
fn bare_argv(name: &str, config: &BackendConfig) -> Option<Vec<String>> {
    let kind = config.kind.get_ref().as_str();
    match kind {
        "docker" => Some(vec![
            "docker".into(),
            "exec".into(),
            format!("paddock-{name}-{SESSION}"),
            "true".into(),
        ]),
        "ssh" => {
            let mut argv: Vec<String> = [
                "ssh",
                "-o",
                "BatchMode=yes",
                "-o",
                "ControlMaster=auto",
                "-o",
            ]
            .map(str::to_owned)
            .to_vec();
            argv.push(format!("ControlPath=/tmp/paddock-bench-{name}-%C"));
            argv.extend(["-o", "ControlPersist=60", "-o", "LogLevel=ERROR"].map(str::to_owned));
            if let Some(port) = &config.port {
                argv.extend(["-p".into(), port.get_ref().to_string()]);
            }
            if let Some(key) = &config.identity_file {
                argv.extend(["-i".into(), key.get_ref().clone()]);
            }
            if let Some(file) = &config.known_hosts_file {
                argv.extend([
                    "-o".into(),
                    format!("UserKnownHostsFile={}", file.get_ref()),
                ]);
            }
            let host = config
                .host
                .as_ref()
                .map(|h| h.get_ref().clone())
                .unwrap_or_default();
            argv.push(match &config.user {
                Some(user) => format!("{}@{host}", user.get_ref()),
                None => host,
            });
            argv.push("true".into());
            Some(argv)
        }
        "apptainer" | "singularity" => Some(vec![
            config
                .binary
                .as_ref()
                .map_or_else(|| "apptainer".to_owned(), |b| b.get_ref().clone()),
            "exec".into(),
            format!("instance://paddock-{name}-{SESSION}"),
            "true".into(),
        ]),
        _ => None,
    }
}

async fn bare_once(argv: &[String], name: &str) -> Result<f64> {
    let t = Instant::now();
    let out = tokio::process::Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(BenchError::io(format!("{name}: {}", argv[0])))?;
    let elapsed = ms(t.elapsed());
    if !out.status.success() {
        return Err(BenchError::unexpected(
            format!("{name}: the bare tool"),
            &json!({"status": out.status.code(), "stderr": String::from_utf8_lossy(&out.stderr)}),
        ));
    }
    Ok(elapsed)
}

async fn terminal_once(engine: &Engine, name: &str) -> Result<f64> {
    let t = Instant::now();
    let out = engine
        .call_tool("terminal", json!({"command": "true"}))
        .await
        .map_err(BenchError::tool(format!("{name}: terminal")))?;
    let elapsed = ms(t.elapsed());
    if out["exit_code"] != json!(0) {
        return Err(BenchError::unexpected(format!("{name}: terminal"), &out));
    }
    Ok(elapsed)
}

async fn one_backend(
    b: &Bench,
    policy: &Policy,
    name: &str,
    argv: &[String],
) -> Result<ScenarioReport> {
    let kind = policy
        .backends
        .get(name)
        .map_or("?", |c| c.kind.get_ref().as_str())
        .to_owned();
    let mut r = ScenarioReport::new(
        &format!("backend_{name}"),
        &format!("`terminal` (`true`) on {kind} backend `{name}` vs the bare tool"),
        "ms",
        Better::Lower,
    );
    let engine = Engine::with_options(
        policy.clone(),
        Registry::with_builtins(),
        Arc::default(),
        EngineOptions {
            session: Some(SESSION.into()),
            backend: Some(name.into()),
            exe: Some(b.exe.clone()),
        },
    )?;
    // Warm-up: brings up the container, the instance or the master connection.
    for _ in 0..2 {
        terminal_once(&engine, name).await?;
        let _ = bare_once(argv, name).await;
    }
    let samples = b.pick(15, 40);
    let (mut bare, mut paddock) = (Vec::new(), Vec::new());
    for _ in 0..samples {
        bare.push(bare_once(argv, name).await?);
        paddock.push(terminal_once(&engine, name).await?);
    }
    r.push(
        "paddock",
        Role::Paddock,
        None,
        Outcome::measured(
            format!(
                "Engine::call_tool(\"terminal\", {{\"command\": \"true\"}}) forced onto backend \
                 `{name}` ({kind}): host wall time from call to result."
            ),
            None,
            paddock,
        ),
    );
    let label = match kind.as_str() {
        "ssh" => "ssh (ControlMaster)",
        "docker" => "docker exec",
        "apptainer" | "singularity" => "apptainer exec",
        _ => "bare tool",
    };
    r.push(
        label,
        Role::Peer,
        None,
        Outcome::measured(
            format!("`{}`: host wall time from spawn to exit.", argv.join(" ")),
            None,
            bare,
        ),
    );
    r.note("The bare tool and Paddock alternate sample by sample.");
    Ok(r)
}

pub async fn backends(b: &Bench) -> Vec<ScenarioReport> {
    let started = Instant::now();
    let mut skipped = ScenarioReport::new(
        "backends",
        "`terminal` on docker/ssh/apptainer backends against the bare tool",
        "ms",
        Better::Lower,
    );
    let Some(path) = &b.backends else {
        skipped.skipped = Some(
            "no --backends POLICY given (scripts/test-services.sh prints one for local test \
             services)"
                .into(),
        );
        return vec![skipped];
    };
    let policy = match Policy::load(path) {
        Ok(policy) => policy,
        Err(err) => {
            skipped.error = Some(err.to_string());
            skipped.wall_s = started.elapsed().as_secs_f64();
            return vec![skipped];
        }
    };
    let mut out = Vec::new();
    for (name, config) in &policy.backends {
        let Some(argv) = bare_argv(name, config) else {
            continue;
        };
        let t = Instant::now();
        let mut report = match one_backend(b, &policy, name, &argv).await {
            Ok(report) => report,
            Err(err) => {
                let mut failed = ScenarioReport::new(
                    &format!("backend_{name}"),
                    &format!("`terminal` on backend `{name}`"),
                    "ms",
                    Better::Lower,
                );
                failed.error = Some(err.to_string());
                failed
            }
        };
        report.wall_s = t.elapsed().as_secs_f64();
        out.push(report);
    }
    if out.is_empty() {
        skipped.skipped = Some(format!(
            "{} has no docker, ssh or apptainer backend",
            path.display()
        ));
        return vec![skipped];
    }
    out
}
