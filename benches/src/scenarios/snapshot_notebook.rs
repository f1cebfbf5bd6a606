//! `snapshot`, notebook part: a snapshot of a notebook session holding a few hundred names of
//! plain data (its dump, made inside the confined child), and the first script of a session
//! started from it (the names loaded into a fresh child, then the script), against the first
//! script of a fresh notebook session. Measured through the engine, in one interleaved loop.

use std::time::Instant;

use paddock_engine::codemode::RUN_TOOLS_SCRIPT;
use paddock_engine::engine::{CallExtras, Engine};
use paddock_engine::policy::Policy;
use serde_json::{Value, json};

use crate::error::{BenchError, Result};
use crate::harness::{Bench, PREFORK, bench_engine, ms};
use crate::report::{Better, Outcome, Role, ScenarioReport};

/// Names the measured session defines: plain data (ints, strings, floats, lists, dicts).
const NAMES: usize = 300;

fn defining_script() -> String {
    format!(
        "import math\nfor i in range({NAMES}):\n    \
         globals()[f'n{{i}}'] = {{'id': i, 'name': f'item {{i}}', 'tags': ['a', i], \
         'score': i * 1.5}}\nlen(globals())"
    )
}

async fn script(engine: &Engine, session: &str, code: &str) -> Result<Value> {
    let result = engine
        .call_tool_with(
            RUN_TOOLS_SCRIPT,
            json!({"code": code}),
            CallExtras {
                session: Some(session.to_owned()),
                ..CallExtras::default()
            },
        )
        .await
        .map_err(|source| BenchError::Tool {
            what: "snapshot: notebook script".into(),
            source,
        })?;
    if result["ok"] != json!(true) {
        return Err(BenchError::unexpected("snapshot: notebook script", &result));
    }
    Ok(result)
}

pub async fn notebook(b: &Bench) -> Result<ScenarioReport> {
    let mut policy = Policy::builtin();
    policy.codemode.keep_state = true;
    policy.codemode.prefork = toml::Spanned::new(0..0, PREFORK);
    let engine = bench_engine(b.exe.clone(), policy)?;
    let session = format!("bench-notebook-snap-{}", std::process::id());
    script(&engine, &session, &defining_script()).await?;
    let (mut dump, mut load, mut first, mut fresh) = (vec![], vec![], vec![], vec![]);
    for round in 0..b.pick(5, 20) {
        let name = format!("bench-nb-{}-{round}", std::process::id());
        let t = Instant::now();
        let made = engine.snapshot_session(&session, Some(&name)).await?;
        dump.push(ms(t.elapsed()));
        if made.notebook.as_ref().is_none_or(|n| n.names < NAMES) {
            return Err(BenchError::Unexpected {
                what: "snapshot: notebook names".into(),
                result: format!("{:?}", made.notebook),
            });
        }
        let fork = format!("{session}-fork-{round}");
        engine
            .start_from_snapshot(&name, std::slice::from_ref(&fork))
            .await?;
        let t = Instant::now();
        let result = script(&engine, &fork, "n299['score']").await?;
        first.push(ms(t.elapsed()));
        if result["result"] != json!(448.5) {
            return Err(BenchError::unexpected("snapshot: a fork's names", &result));
        }
        load.push(
            result["notebook"]["restored"]["load_ms"]
                .as_f64()
                .unwrap_or(f64::NAN),
        );
        let other = format!("{session}-fresh-{round}");
        let t = Instant::now();
        script(&engine, &other, "448.5").await?;
        fresh.push(ms(t.elapsed()));
        for id in [&fork, &other] {
            if let Err(err) = engine.close_session(id).await {
                tracing::warn!(session = %id, %err, "bench: closing a notebook fork");
            }
        }
        if let Err(err) = engine.remove_snapshot(&name).await {
            tracing::warn!(snapshot = %name, %err, "bench: removing a notebook snapshot");
        }
    }
    if let Err(err) = engine.close_session(&session).await {
        tracing::warn!(%err, "bench: closing the notebook session");
    }
    let mut r = ScenarioReport::new(
        "snapshot_notebook",
        &format!("a notebook session's {NAMES} names saved in a snapshot and loaded in a fork"),
        "ms",
        Better::Lower,
    );
    let rows = [
        (
            "dump",
            Role::Paddock,
            "Engine::snapshot_session of a notebook-only session: the names pickled in its \
             confined child, written to notebook.json",
            dump,
        ),
        (
            "load",
            Role::Paddock,
            "loading them into a fork's fresh child before its first script (the result's \
             notebook.restored.load_ms)",
            load,
        ),
        (
            "fork first script",
            Role::Paddock,
            "the first script of a session started from the snapshot: load and script",
            first,
        ),
        (
            "fresh first script",
            Role::Peer,
            "the first script of a fresh notebook session, for comparison",
            fresh,
        ),
    ];
    for (label, role, what, samples) in rows {
        r.push(label, role, None, Outcome::measured(what, None, samples));
    }
    r.note(
        "Target: dump and load each <= 10 ms for a few hundred names of plain data. Functions \
         and classes a script defined are not kept (listed in the snapshot with why).",
    );
    Ok(r)
}
