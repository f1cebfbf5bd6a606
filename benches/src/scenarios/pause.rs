//! `pause`: `paddock sessions pause` and the resume its next call makes, on the sandboxed local
//! backend and each docker backend of `--backends`, for a session with a background process.
//! Measured through the engine (`Engine::pause_session`, `Engine::resume_session`), so a
//! `paddock` process's own start is not in the figures.

use std::time::Instant;

use serde_json::json;

use super::sandbox_and_docker;
use super::terminal::Scratch;
use crate::error::{BenchError, Result};
use crate::harness::{Bench, ms};
use crate::report::{Better, Outcome, Role, ScenarioReport};

const SESSION: &str = "bench-pause";

pub async fn pause(b: &Bench) -> Result<Vec<ScenarioReport>> {
    let scratch = Scratch::new("pause")?;
    let places = sandbox_and_docker(b, &scratch.0, SESSION, "pause")?;
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
