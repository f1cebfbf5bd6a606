//! What an idle, ready-to-run sandbox child costs in memory, beside an idle Monty worker and an
//! idle CPython.

use std::time::{Duration, Instant};

use super::measure::{PeerPlan, interleaved, push_peers};
use crate::error::Result;
use crate::harness::{Bench, PREFORK};
use crate::report::{Better, Role, ScenarioReport};

/// Private (not shared) memory of a process in kB, from smaps_rollup: what the process costs
/// beyond the pages it shares with its zygote or its siblings.
pub fn private_kb(pid: i32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let field = |name: &str| -> u64 {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Some(field("Private_Clean:") + field("Private_Dirty:"))
}

pub async fn idle_memory(b: &Bench) -> Result<ScenarioReport> {
    let mut r = ScenarioReport::new(
        "idle_memory",
        "Private memory of an idle worker (ready for a script)",
        "kB",
        Better::Lower,
    );
    let plans = [
        PeerPlan::new("monty", "monty", "idle_memory", 1, 0).param("workers", PREFORK),
        PeerPlan::new("cpython (idle interpreter)", "cpython", "idle_memory", 1, 0)
            .param("workers", PREFORK),
    ];
    let mut zygote = Vec::new();
    let (samples, peers) = interleaved(
        b,
        1,
        async || {
            // Wait for the pool to be full again after the scenarios before this one.
            let until = Instant::now() + Duration::from_secs(5);
            while b.engine.pool().idle_children() < PREFORK && Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
            if let Some(kb) = b
                .engine
                .pool()
                .zygote_pid()
                .await
                .and_then(|pid| i32::try_from(pid).ok())
                .and_then(private_kb)
            {
                zygote.push(kb as f64);
            }
            Ok(b.engine
                .pool()
                .idle_pids()
                .into_iter()
                .filter_map(private_kb)
                .map(|kb| kb as f64)
                .collect())
        },
        &plans,
    )
    .await?;
    let child_method = format!(
        "the {PREFORK} idle pre-forked sandbox children of the warm engine (each has run its \
         warm-up script and waits for a script): Private_Clean + Private_Dirty from \
         /proc/PID/smaps_rollup; sample = one child."
    );
    let zygote_method = "the sandbox zygote the children are forked from, measured the same \
                         way: paid once per engine, not per child.";
    r.push_measured("paddock", Role::Paddock, None, child_method, samples);
    r.push_measured(
        "paddock zygote (one per engine)",
        Role::Variant,
        None,
        zygote_method,
        zygote,
    );
    push_peers(&mut r, &plans, peers, None);
    r.note(
        "Private memory counts pages only this process maps; pages shared with the zygote (or \
         with the peers' shared libraries) are not counted, because another child does not \
         pay for them again.",
    );
    Ok(r)
}
