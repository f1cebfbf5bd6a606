//! `pause`: `paddock sessions pause` and the resume its next call makes, on the sandboxed local
//! backend and each docker backend of `--backends`, for a session with a background process.
//! Measured through the engine (`Engine::pause_session`, `Engine::resume_session`), so a
//! `paddock` process's own start is not in the figures.

use std::time::Instant;

use paddock_engine::engine::Engine;
use paddock_engine::policy::Policy;
use serde_json::json;
use toml::Value;

use super::terminal::Scratch;
use super::{docker_images, session_engine};
use crate::error::{BenchError, Result};
use crate::harness::{Bench, ms};
use crate::report::{Better, Outcome, Role, ScenarioReport};

const SESSION: &str = "bench-pause";

struct Place {
    name: String,
    engine: Engine,
}

/// The sandboxed local backend, and each docker backend of `--backends`.
fn places(b: &Bench, scratch: &Scratch) -> Result<Vec<Place>> {
    let sandboxed = Policy::parse(
        &format!(
            "[backends.sandboxed]\nkind = \"local\"\nsandbox = \"workspace-write\"\nworkspace = {}\n",
            Value::String(scratch.0.display().to_string())
        ),
        "<bench pause: sandboxed>",
    )?;
    let mut out = vec![Place {
        name: "sandboxed".into(),
        engine: session_engine(b, sandboxed, SESSION, Some("sandboxed"))?,
    }];
    for (name, image) in docker_images(b)? {
        let policy = Policy::parse(
            &format!(
                "[backends.{name}]\nkind = \"docker\"\nimage = {}\n",
                Value::String(image)
            ),
            "<bench pause: docker>",
        )?;
        out.push(Place {
            engine: session_engine(b, policy, SESSION, Some(&name))?,
            name,
        });
    }
    Ok(out)
}

pub async fn pause(b: &Bench) -> Result<Vec<ScenarioReport>> {
    let scratch = Scratch::new("pause")?;
    let places = places(b, &scratch)?;
    for place in &places {
        // The session holds its environment and a background process to freeze.
        place
            .engine
            .call_tool(
                "terminal",
                json!({"command": "sleep 600", "background": true}),
            )
            .await
            .map_err(BenchError::tool(format!("pause: {}: start", place.name)))?;
    }
    let rounds = b.pick(5, 20);
    let mut paused: Vec<Vec<f64>> = vec![Vec::new(); places.len()];
    let mut resumed: Vec<Vec<f64>> = vec![Vec::new(); places.len()];
    for _ in 0..rounds {
        for (i, place) in places.iter().enumerate() {
            let t = Instant::now();
            let report = place.engine.pause_session(SESSION).await?;
            paused[i].push(ms(t.elapsed()));
            if report.paused.is_empty() {
                return Err(BenchError::Unexpected {
                    what: format!("pause: {}: nothing was paused", place.name),
                    result: format!("{report:?}"),
                });
            }
            let t = Instant::now();
            place.engine.resume_session(SESSION).await?;
            resumed[i].push(ms(t.elapsed()));
        }
    }
    for place in &places {
        if let Err(err) = place.engine.close_session(SESSION).await {
            tracing::warn!(place = %place.name, %err, "bench: closing the pause session");
        }
    }
    let report = |id: &str, title: &str, samples: &[Vec<f64>], what: &str| {
        let mut r = ScenarioReport::new(id, title, "ms", Better::Lower);
        for (place, list) in places.iter().zip(samples) {
            r.push(
                &place.name,
                Role::Paddock,
                None,
                Outcome::measured(
                    format!(
                        "{what} of a session with a background `sleep` on backend `{}`",
                        place.name
                    ),
                    None,
                    list.clone(),
                ),
            );
        }
        r.note(
            "Targets (docker): pause and resume each <= 50 ms. The places alternate in one loop.",
        );
        r
    };
    Ok(vec![
        report(
            "pause_session",
            "pausing a session (every process frozen)",
            &paused,
            "Engine::pause_session (docker pause; SIGSTOP of the sandbox's processes)",
        ),
        report(
            "resume_session",
            "resuming a paused session",
            &resumed,
            "Engine::resume_session (docker unpause; SIGCONT)",
        ),
    ])
}
