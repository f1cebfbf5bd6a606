//! `relay`: a command on an agent reached through the relay (each slurm backend of
//! `--backends` with `relay`, its jobs on other nodes), against the same command on a
//! same-node agent (each slurm backend without one), interleaved sample by sample; and 100
//! commands at once over the relayed backends. Measured through the engine, so a `paddock`
//! process's own start is not in the figures.

use std::sync::Arc;
use std::time::Instant;

use paddock_engine::engine::Engine;
use paddock_engine::policy::{BackendConfig, Policy};
use serde_json::json;

use super::session_engine;
use crate::error::{BenchError, Result};
use crate::harness::{Bench, ms};
use crate::report::{Better, Outcome, Role, ScenarioReport};

const SESSION: &str = "bench-relay";

struct Place {
    name: String,
    relayed: bool,
    engine: Arc<Engine>,
}

async fn command(place: &Place, session: &str, command: &str) -> Result<String> {
    let extras = paddock_engine::engine::CallExtras {
        session: Some(session.to_owned()),
        ..Default::default()
    };
    let out = place
        .engine
        .call_tool_with("terminal", json!({ "command": command }), extras)
        .await
        .map_err(BenchError::tool(format!("relay: {}", place.name)))?;
    if out["exit_code"] != json!(0) {
        return Err(BenchError::unexpected(
            format!("relay: {}", place.name),
            &out,
        ));
    }
    Ok(out["output"].as_str().unwrap_or_default().to_owned())
}

pub async fn relay(b: &Bench) -> Result<Vec<ScenarioReport>> {
    let Some(path) = &b.backends else {
        return Ok(Vec::new());
    };
    let policy = Policy::load(path)?;
    let mut places = Vec::new();
    for (name, config) in &policy.backends {
        let BackendConfig::Slurm(config) = config else {
            continue;
        };
        if config.image.is_some() {
            continue;
        }
        let relayed = config.relay.as_ref().is_some_and(|r| r.get_ref() != "none");
        places.push(Place {
            engine: Arc::new(session_engine(b, policy.clone(), SESSION, Some(name))?),
            name: name.clone(),
            relayed,
        });
    }
    if !places.iter().any(|p| p.relayed) {
        return Ok(Vec::new());
    }
    // The first command of each starts its job and agent.
    for place in &places {
        command(place, SESSION, "true").await?;
    }
    let rounds = b.pick(20, 200);
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); places.len()];
    for _ in 0..rounds {
        for (i, place) in places.iter().enumerate() {
            let t = Instant::now();
            command(place, SESSION, "true").await?;
            samples[i].push(ms(t.elapsed()));
        }
    }
    let mut latency = ScenarioReport::new(
        "relay_command",
        "a `terminal` command on an agent on another node (relay) and on a same-node agent",
        "ms",
        Better::Lower,
    );
    for (place, list) in places.iter().zip(&samples) {
        latency.push(
            &place.name,
            Role::Paddock,
            None,
            Outcome::measured(
                format!(
                    "`terminal` `true` through the engine on slurm backend `{}` ({})",
                    place.name,
                    if place.relayed {
                        "agent on a compute node, reached through the relay"
                    } else {
                        "agent on this node, reached through its socket"
                    }
                ),
                None,
                list.clone(),
            ),
        );
    }
    latency.note(
        "Targets: through the relay <= 1.5x a same-node agent, and <= 5 ms on an idle machine. \
         The backends alternate in one loop.",
    );

    // 100 commands at once across the relayed backends' sessions (one per compute node when
    // the backends pin nodes), each checking its own output.
    let relayed: Vec<&Place> = places.iter().filter(|p| p.relayed).collect();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..100usize {
        let place = relayed[i % relayed.len()];
        let engine = place.engine.clone();
        let name = place.name.clone();
        let session = format!("{SESSION}-burst-{}", i % 2);
        tasks.push(tokio::spawn(async move {
            let t = Instant::now();
            let one = Place {
                name,
                relayed: true,
                engine,
            };
            let out = command(&one, &session, &format!("seq 1 200 | sed 's/^/{i}:/'")).await?;
            let expected: String = (1..=200).map(|n| format!("{i}:{n}\n")).collect();
            if out != expected {
                return Err(BenchError::Unexpected {
                    what: format!("relay: command {i}'s output"),
                    result: out,
                });
            }
            Ok(ms(t.elapsed()))
        }));
    }
    let mut burst = Vec::new();
    for task in tasks {
        match task.await {
            Ok(Ok(ms)) => burst.push(ms),
            Ok(Err(err)) => return Err(err),
            Err(err) => {
                return Err(BenchError::Unexpected {
                    what: "relay: a burst task".into(),
                    result: err.to_string(),
                });
            }
        }
    }
    let wall = started.elapsed();
    // One state directory holds every backend's sessions: closing a session through one
    // engine closes it on every backend it used.
    for session in [
        SESSION.to_owned(),
        format!("{SESSION}-burst-0"),
        format!("{SESSION}-burst-1"),
    ] {
        if let Err(err) = places[0].engine.close_session(&session).await {
            tracing::warn!(%session, %err, "bench: closing a relay session");
        }
    }
    let mut concurrent = ScenarioReport::new(
        "relay_burst",
        "100 commands at once through the relay, each output checked",
        "ms",
        Better::Lower,
    );
    concurrent.push(
        "paddock",
        Role::Paddock,
        None,
        Outcome::measured(
            format!(
                "one command's latency among 100 started at once over {} relayed backend(s), \
                 two sessions each; every output came back whole and in order; wall {:.0} ms",
                relayed.len(),
                ms(wall)
            ),
            None,
            burst,
        ),
    );
    Ok(vec![latency, concurrent])
}
