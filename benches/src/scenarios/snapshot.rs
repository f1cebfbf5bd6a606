//! `snapshot`: `sessions snapshot`, a fork of 16 sessions from it, and the first command of a
//! forked session, on the sandboxed local backend and each docker and apptainer backend of
//! `--backends`,
//! against building the same state from scratch (a fresh session that runs the commands that
//! made it). Measured through the engine (`Engine::snapshot_session`,
//! `Engine::start_from_snapshot`), so a `paddock` process's own start is not in the figures.

use std::time::Instant;

use paddock_engine::engine::{CallExtras, Engine};
use serde_json::json;

use super::terminal::Scratch;
use paddock_engine::policy::{BackendConfig, Policy};

use super::{Place, backends_where, sandbox_and_docker, session_engine};
use crate::error::{BenchError, Result};
use crate::harness::{Bench, ms};
use crate::report::{Better, Outcome, Role, ScenarioReport};

const SESSION: &str = "bench-snapshot";

/// Forks made from each snapshot (the quick set: 4).
const FORKS: usize = 16;

/// A place, and the commands that build the session's state there: files (where the backend
/// keeps them in a snapshot) and shell state.
struct Built {
    place: Place,
    build: String,
    /// How many MB of files `build` writes.
    mb: u64,
}

fn build_commands(dir: &str, mb: u64) -> String {
    format!(
        "mkdir -p {dir}/state && cd {dir}/state && \
         head -c {} /dev/urandom > data.bin && \
         for i in $(seq 1 50); do echo line $i > small-$i.txt; done && \
         export BENCH_STATE=built && bench_fn() {{ echo fn; }}",
        mb << 20
    )
}

impl Built {
    /// The session whose state is built and snapshotted: one per place (a session's record
    /// names every backend it used, and each place's engine knows its own only).
    fn session(&self) -> String {
        format!("{SESSION}-{}", self.place.name)
    }
}

/// The sandboxed local backend (100 MB of files, the target), and each docker backend
/// of `--backends` (50 MB; not under /tmp, a tmpfs never in a committed image); the quick set
/// writes 10 MB each.
fn places(b: &Bench, scratch: &Scratch) -> Result<Vec<Built>> {
    let (local_mb, docker_mb) = (b.pick(10, 100), b.pick(10, 50));
    let mut places: Vec<Built> = sandbox_and_docker(b, &scratch.0, SESSION, "snapshot")?
        .into_iter()
        .map(|place| {
            let (dir, mb) = if place.docker {
                ("/var/tmp/bench".to_owned(), docker_mb)
            } else {
                (scratch.0.display().to_string(), local_mb)
            };
            Built {
                build: build_commands(&dir, mb),
                mb,
                place,
            }
        })
        .collect();
    // Each apptainer backend of --backends, in the image's own tree (its writable overlay).
    if let Some(path) = &b.backends {
        let given = Policy::load(path)?;
        let names = backends_where(&given, |c| matches!(c, BackendConfig::Apptainer(_)));
        for name in names {
            places.push(Built {
                build: build_commands("/opt/bench", docker_mb),
                mb: docker_mb,
                place: Place {
                    engine: session_engine(b, Policy::load(path)?, SESSION, Some(&name))?,
                    name,
                    docker: false,
                },
            });
        }
    }
    Ok(places)
}

async fn terminal(engine: &Engine, session: &str, command: &str, what: &str) -> Result<()> {
    let v = engine
        .call_tool_with(
            "terminal",
            json!({"command": command, "timeout": 300}),
            CallExtras {
                session: Some(session.to_owned()),
                ..CallExtras::default()
            },
        )
        .await
        .map_err(BenchError::tool(format!("snapshot: {what}")))?;
    if v["exit_code"] != json!(0) {
        return Err(BenchError::Unexpected {
            what: format!("snapshot: {what}"),
            result: v.to_string(),
        });
    }
    Ok(())
}

#[derive(Default)]
struct Samples {
    snapshot: Vec<f64>,
    /// How the snapshot kept the files (`files` of its summary).
    kept_by: String,
    fork: Vec<f64>,
    first: Vec<f64>,
    scratch: Vec<f64>,
}

pub async fn snapshot(b: &Bench) -> Result<Vec<ScenarioReport>> {
    let scratch = Scratch::new("snapshot")?;
    let places = places(b, &scratch)?;
    for built in &places {
        terminal(
            &built.place.engine,
            &built.session(),
            &built.build,
            &format!("{}: build", built.place.name),
        )
        .await?;
    }
    let rounds = b.pick(2, 5);
    let forks = b.pick(4, FORKS);
    let mut samples: Vec<Samples> = places.iter().map(|_| Samples::default()).collect();
    for round in 0..rounds {
        for (built, s) in places.iter().zip(samples.iter_mut()) {
            let place = &built.place;
            let name = format!(
                "bench-{}-{round}-{}",
                place.name.to_ascii_lowercase(),
                std::process::id()
            );
            let t = Instant::now();
            let made = place
                .engine
                .snapshot_session(&built.session(), Some(&name))
                .await?;
            s.snapshot.push(ms(t.elapsed()));
            s.kept_by = made.files.values().cloned().collect::<Vec<_>>().join(", ");
            let ids: Vec<String> = (0..forks)
                .map(|i| format!("bench-fork-{}-{round}-{i}", place.name))
                .collect();
            let t = Instant::now();
            place.engine.start_from_snapshot(&name, &ids).await?;
            s.fork.push(ms(t.elapsed()));
            let t = Instant::now();
            terminal(
                &place.engine,
                &ids[0],
                "true",
                &format!("{}: first command", place.name),
            )
            .await?;
            s.first.push(ms(t.elapsed()));
            // The same state from nothing: a fresh session runs the commands that built it.
            let fresh = format!("bench-fresh-{}-{round}", place.name);
            let t = Instant::now();
            terminal(
                &place.engine,
                &fresh,
                &built.build,
                &format!("{}: from scratch", place.name),
            )
            .await?;
            s.scratch.push(ms(t.elapsed()));
            for id in ids.iter().chain([&fresh]) {
                if let Err(err) = place.engine.close_session(id).await {
                    tracing::warn!(place = %place.name, session = %id, %err, "bench: closing a fork");
                }
            }
            if let Err(err) = place.engine.remove_snapshot(&name).await {
                tracing::warn!(place = %place.name, snapshot = %name, %err, "bench: removing a snapshot");
            }
        }
    }
    for built in &places {
        let place = &built.place;
        if let Err(err) = place.engine.close_session(&built.session()).await {
            tracing::warn!(place = %place.name, %err, "bench: closing the snapshot session");
        }
    }
    let report =
        |id: &str, title: &str, pick: &dyn Fn(&Samples) -> &Vec<f64>, what: &str, note: &str| {
            let mut r = ScenarioReport::new(id, title, "ms", Better::Lower);
            for (built, s) in places.iter().zip(&samples) {
                r.push(
                    &built.place.name,
                    Role::Paddock,
                    None,
                    Outcome::measured(
                        format!(
                            "{what} (backend `{}`, {} MB of files, kept by {})",
                            built.place.name, built.mb, s.kept_by
                        ),
                        None,
                        pick(s).clone(),
                    ),
                );
            }
            r.note(note);
            r
        };
    let mut from_scratch = report(
        "snapshot_first_command",
        "the first command of a session forked from a snapshot, against building the same state \
         from scratch",
        &|s| &s.first,
        "`terminal` `true` in a forked session, right after the fork",
        "Target (docker): <= 200 ms after the fork. The from-scratch rows run the commands that \
         built the snapshotted state in a fresh session.",
    );
    for (built, s) in places.iter().zip(&samples) {
        from_scratch.push(
            &format!("{} from scratch", built.place.name),
            Role::Peer,
            None,
            Outcome::measured(
                format!(
                    "a fresh session running the commands that built the state ({} MB of files)",
                    built.mb
                ),
                None,
                s.scratch.clone(),
            ),
        );
    }
    let notebook = super::snapshot_notebook::notebook(b).await?;
    Ok(vec![
        report(
            "snapshot_session",
            "snapshot of a session (its files and shell state)",
            &|s| &s.snapshot,
            "Engine::snapshot_session (docker commit; apptainer, the changed files saved by the agent; the workspace copied, by reflink where it can)",
            "Targets: docker, 50 MB of changed files <= 1 s; sandboxed local, a 100 MB workspace \
             on a reflink-capable file system <= 0.2 s (a plain copy where it cannot: the \
             snapshot says which).",
        ),
        report(
            "snapshot_fork",
            &format!("{forks} sessions started from a snapshot"),
            &|s| &s.fork,
            &format!(
                "Engine::start_from_snapshot of {forks} new sessions (docker: {forks} containers \
                 from the image)"
            ),
            "One call makes them all, one after another (the full set: 16, the quick set: 4).",
        ),
        from_scratch,
        notebook,
    ])
}
