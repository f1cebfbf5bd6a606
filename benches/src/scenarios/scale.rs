//! Load at scale: N sessions at once (8, 32, 128), each running a short mix of commands, a
//! background process and a `python_execute`, on the local backend (the built-in policy's
//! workspace-write sandbox) and on each docker backend of `--backends`; 64 sessions on each
//! slurm backend of `--backends` whose jobs go to other nodes (`relay`). Reports operations per
//! second by N, with the per-operation p50/p99, the engine's memory and what was left behind
//! once every session was closed (processes, descriptors, state entries, containers).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use paddock_engine::engine::{CallExtras, Engine};
use paddock_engine::policy::{BackendConfig, Policy};
use serde_json::{Value, json};

use super::{backends_where, session_engine};
use crate::error::{BenchError, Result};
use crate::harness::{Bench, ms};
use crate::report::{Better, Outcome, Role, ScenarioReport};
use crate::stats;

/// Concurrent sessions per step; the quick set stops at the first.
const SESSIONS: [usize; 3] = [8, 32, 128];
/// On a Slurm cluster: a session is a job, the cluster's size bounds them.
const SLURM_SESSIONS: [usize; 2] = [8, 64];

/// One session's work: what an agent's turn typically asks of its environment.
async fn session_mix(engine: &Engine, session: &str) -> Result<Vec<f64>> {
    let mut latencies = Vec::with_capacity(6);
    let call = async |tool: &str, args: Value| -> Result<Value> {
        let extras = CallExtras {
            session: Some(session.to_owned()),
            ..CallExtras::default()
        };
        engine
            .call_tool_with(tool, args, extras)
            .await
            .map_err(|source| BenchError::Tool {
                what: format!("scale: {tool} in {session}"),
                source,
            })
    };
    let expect = |what: &str, ok: bool, out: &Value| -> Result<()> {
        if ok {
            Ok(())
        } else {
            Err(BenchError::unexpected(format!("scale: {what}"), out))
        }
    };
    for command in ["echo hello", "cd /tmp && pwd", "ls / | head -3"] {
        let t = Instant::now();
        let out = call("terminal", json!({"command": command})).await?;
        latencies.push(ms(t.elapsed()));
        expect(command, out["exit_code"] == json!(0), &out)?;
    }
    let t = Instant::now();
    let started = call(
        "terminal",
        json!({"command": "sleep 0.2; echo done", "background": true}),
    )
    .await?;
    let id = started["session_id"].as_str().map(str::to_owned);
    let Some(id) = id else {
        return Err(BenchError::unexpected("scale: background start", &started));
    };
    let waited = call(
        "process",
        json!({"action": "wait", "session_id": id, "timeout": 30}),
    )
    .await?;
    latencies.push(ms(t.elapsed()));
    expect(
        "background process",
        waited.to_string().contains("done"),
        &waited,
    )?;
    let t = Instant::now();
    let out = call("python_execute", json!({"code": "print(6 * 7)"})).await?;
    latencies.push(ms(t.elapsed()));
    expect("python_execute", out.to_string().contains("42"), &out)?;
    Ok(latencies)
}

/// What this process and the state directory hold, to compare before and after.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Footprint {
    descendants: usize,
    descriptors: usize,
    sessions_dir: usize,
    records: usize,
    containers: usize,
    jobs: usize,
}

fn count_dir(path: &Path) -> usize {
    std::fs::read_dir(path).map_or(0, |d| d.count())
}

async fn docker_containers(tag: &str) -> usize {
    let out = tokio::process::Command::new("docker")
        .args(["ps", "-aq", "--filter", &format!("name={tag}")])
        .output()
        .await;
    out.map_or(0, |o| String::from_utf8_lossy(&o.stdout).lines().count())
}

/// Slurm jobs (running or queued) whose names carry `tag`.
async fn slurm_jobs(tag: &str) -> usize {
    let out = tokio::process::Command::new("squeue")
        .args(["-h", "-o", "%j"])
        .output()
        .await;
    out.map_or(0, |o| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|name| name.contains(tag))
            .count()
    })
}

async fn footprint(tag: &str, docker: bool) -> Footprint {
    let root = paddock_engine::tools::environment::state_root();
    Footprint {
        descendants: i32::try_from(std::process::id())
            .map_or(0, |pid| paddock_backends::procfs::descendants(pid).len()),
        descriptors: count_dir(Path::new("/proc/self/fd")),
        sessions_dir: count_dir(&root.join("sessions")),
        records: count_dir(&root.join(paddock_engine::sessions::RECORDS_DIR)),
        containers: if docker {
            docker_containers(tag).await
        } else {
            0
        },
        jobs: slurm_jobs(tag).await,
    }
}

fn rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn p50_p99(samples: &[f64]) -> (f64, f64) {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    (
        stats::quantile(&sorted, 0.5),
        stats::quantile(&sorted, 0.99),
    )
}

/// One step: `n` sessions at once, then every one of them closed.
struct Step {
    ops_per_s: f64,
    latencies: Vec<f64>,
    /// Of the second round, once every environment was up.
    warm_latencies: Vec<f64>,
    rss_growth_kb: i64,
    leftovers: Vec<String>,
}

async fn step(engine: &Arc<Engine>, n: usize, tag: &str, docker: bool) -> Result<Step> {
    let before = footprint(tag, docker).await;
    let rss_before = rss_kb();
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let engine = engine.clone();
        let session = format!("{tag}-{n}-{i}");
        tasks.push(tokio::spawn(async move {
            // The first round starts the session's environment; the second finds it up.
            let cold = session_mix(&engine, &session).await?;
            let warm = session_mix(&engine, &session).await?;
            Ok::<_, BenchError>((cold, warm))
        }));
    }
    let mut latencies = Vec::new();
    let mut warm_latencies = Vec::new();
    let mut first_error = None;
    for task in tasks {
        match task.await {
            Ok(Ok((cold, warm))) => {
                latencies.extend(cold);
                latencies.extend(warm.iter().copied());
                warm_latencies.extend(warm);
            }
            Ok(Err(err)) => {
                first_error.get_or_insert(err.to_string());
            }
            Err(err) => {
                first_error.get_or_insert(err.to_string());
            }
        }
    }
    let wall = started.elapsed();
    let rss_peak = rss_kb();
    let mut leftovers = Vec::new();
    for i in 0..n {
        let session = format!("{tag}-{n}-{i}");
        match engine.close_session(&session).await {
            Ok(report) if report.all_ok() => {}
            Ok(report) => leftovers.push(format!("closing {session}: {report:?}")),
            Err(err) => leftovers.push(format!("closing {session}: {err}")),
        }
    }
    // Agents and containers end asynchronously after their sessions close.
    let until = Instant::now() + Duration::from_secs(60);
    let mut after = footprint(tag, docker).await;
    while after != before && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(250)).await;
        after = footprint(tag, docker).await;
    }
    if after != before {
        leftovers.push(format!("before {before:?}, after {after:?}"));
    }
    if let Some(err) = first_error {
        return Err(BenchError::Unexpected {
            what: format!("scale: {n} sessions"),
            result: err,
        });
    }
    Ok(Step {
        ops_per_s: latencies.len() as f64 / wall.as_secs_f64(),
        latencies,
        warm_latencies,
        rss_growth_kb: i64::try_from(rss_peak).unwrap_or(0)
            - i64::try_from(rss_before).unwrap_or(0),
        leftovers,
    })
}

async fn one_target(
    b: &Bench,
    name: &str,
    title: &str,
    engine: Arc<Engine>,
    docker: bool,
    sizes: &[usize],
) -> ScenarioReport {
    let mut r = ScenarioReport::new(name, title, "ops/s", Better::Higher)
        .curve("concurrent sessions", true);
    let tag = format!("scale{}", std::process::id());
    let steps: &[usize] = if b.quick { &sizes[..1] } else { sizes };
    let mut rows = BTreeMap::new();
    for &n in steps {
        match step(&engine, n, &tag, docker).await {
            Ok(s) => {
                let (p50, p99) = p50_p99(&s.latencies);
                let (warm50, warm99) = p50_p99(&s.warm_latencies);
                rows.insert(
                    n,
                    format!(
                        "{n} sessions: {:.0} ops/s; per operation p50 {p50:.1} ms, p99 \
                         {p99:.1} ms (second round, environments up: p50 {warm50:.1} ms, p99 \
                         {warm99:.1} ms); engine RSS +{} MB; left behind after closing: {}",
                        s.ops_per_s,
                        s.rss_growth_kb / 1024,
                        if s.leftovers.is_empty() {
                            "nothing".to_owned()
                        } else {
                            s.leftovers.join("; ")
                        }
                    ),
                );
                r.push(
                    "paddock",
                    Role::Paddock,
                    Some(n as f64),
                    Outcome::measured(
                        format!(
                            "{n} sessions at once on one engine, each running twice: 3 \
                             `terminal` commands, a background `sleep 0.2` waited for with \
                             `process`, and a `python_execute`; sample = operations finished / \
                             wall time (sessions start cold: the first command of each starts \
                             its environment)."
                        ),
                        None,
                        vec![s.ops_per_s],
                    ),
                );
                if !s.leftovers.is_empty() {
                    r.error = Some(format!(
                        "{n} sessions left things behind: {}",
                        s.leftovers.join("; ")
                    ));
                }
            }
            Err(err) => {
                r.error = Some(err.to_string());
                break;
            }
        }
    }
    for row in rows.into_values() {
        r.note(row);
    }
    r
}

/// `scale_local` (the built-in policy's sandboxed local backend) and `scale_NAME` for each
/// docker backend of `--backends`.
pub async fn scale(b: &Bench) -> Vec<ScenarioReport> {
    let mut out = vec![
        target(
            b,
            "scale_local",
            "Concurrent sessions on the local backend (workspace-write sandbox)",
            "scale",
            || session_engine(b, Policy::builtin(), "scale", None),
            false,
            &SESSIONS,
        )
        .await,
    ];
    let Some(path) = &b.backends else {
        return out;
    };
    let policy = match Policy::load(path) {
        Ok(p) => p,
        Err(err) => {
            let mut r = ScenarioReport::new("scale_docker", "scale", "ops/s", Better::Higher);
            r.error = Some(err.to_string());
            out.push(r);
            return out;
        }
    };
    let docker = backends_where(&policy, |c| matches!(c, BackendConfig::Docker(_)));
    let relayed_slurm = backends_where(&policy, |c| match c {
        BackendConfig::Slurm(c) => c.relay.as_ref().is_some_and(|r| r.get_ref() != "none"),
        _ => false,
    });
    for name in relayed_slurm {
        let title = format!("Concurrent sessions on the slurm backend `{name}` (other nodes)");
        let make = || session_engine(b, policy.clone(), "scale", Some(&name));
        let id = format!("scale_{name}");
        out.push(target(b, &id, &title, &title, make, false, &SLURM_SESSIONS).await);
    }
    for name in docker {
        let title = format!("Concurrent sessions on the docker backend `{name}`");
        let make = || session_engine(b, policy.clone(), "scale", Some(&name));
        let id = format!("scale_{name}");
        out.push(target(b, &id, &title, &title, make, true, &SESSIONS).await);
    }
    out
}

/// The report `name` of [`one_target`] on the engine `make` builds, with its wall time from
/// before the build; when no engine is built, a report titled `failed_title` carrying why.
async fn target(
    b: &Bench,
    name: &str,
    title: &str,
    failed_title: &str,
    make: impl FnOnce() -> Result<Engine>,
    docker: bool,
    sizes: &[usize],
) -> ScenarioReport {
    let t = Instant::now();
    let mut report = match make() {
        Ok(engine) => one_target(b, name, title, Arc::new(engine), docker, sizes).await,
        Err(err) => {
            let mut r = ScenarioReport::new(name, failed_title, "ops/s", Better::Higher);
            r.error = Some(err.to_string());
            r
        }
    };
    report.wall_s = t.elapsed().as_secs_f64();
    report
}
