//! Tool calls from inside a script: one at a time (the round trip), and many at once with
//! `asyncio.gather`. Both are timed inside the script, as the peers' are, so that script
//! start-up is not part of the figure.

use super::measure::{PeerPlan, repeat, versus_peers};
use crate::error::Result;
use crate::harness::{Bench, PREFORK};
use crate::report::{Better, ScenarioReport};

/// Calls timed per nested-call sample.
const CALLS: usize = 200;

pub async fn nested_call(b: &Bench) -> Result<ScenarioReport> {
    let mut r = ScenarioReport::new(
        "nested_call",
        "One tool call from a script: round trip",
        "µs",
        Better::Lower,
    );
    let code = format!(
        "import time\nfor _ in range(20):\n    await tools.noop()\nt = time.perf_counter()\n\
         for _ in range({CALLS}):\n    await tools.noop()\n\
         (time.perf_counter() - t) / {CALLS} * 1e6"
    );
    let rounds = b.pick(1, 4);
    let per_round = b.pick(8, 8);
    let plans = [
        PeerPlan::new("monty", "monty", "nested_call", per_round, 1)
            .param("calls", CALLS)
            .param("mode", "async")
            .scale(1000.0),
        PeerPlan::new(
            "monty (sync host function)",
            "monty",
            "nested_call",
            per_round,
            1,
        )
        .param("calls", CALLS)
        .param("mode", "sync")
        .scale(1000.0),
        PeerPlan::new(
            "cpython (stdio JSON)",
            "cpython",
            "nested_call",
            per_round,
            1,
        )
        .param("calls", CALLS)
        .scale(1000.0),
    ];
    let method = format!(
        "a script awaits `tools.noop()` (a registered tool that returns {{}}) 20 times, then \
         {CALLS} times timed with time.perf_counter inside the script; sample = time per call. \
         Each call crosses from the sandbox child to the engine and back ({PREFORK} pre-forked \
         children, built-in policy)."
    );
    versus_peers(b, &mut r, None, rounds, &plans, method, async || {
        repeat(per_round, async || {
            b.timed_script("nested_call", &code).await
        })
        .await
    })
    .await?;
    r.note(
        "Monty's like-for-like figure is its async pool awaiting an async host function (Paddock's \
         tools are awaited too); its sync host function is shown beside it.",
    );
    r.note(format!(
        "{rounds} round(s) of {per_round} scripts per contender."
    ));
    Ok(r)
}

pub async fn gather(b: &Bench) -> Result<ScenarioReport> {
    let mut r = ScenarioReport::new(
        "gather",
        "asyncio.gather of N tool calls",
        "ms",
        Better::Lower,
    )
    .curve("tool calls gathered", true);
    let rounds = b.pick(1, 3);
    let per_round = b.pick(4, 8);
    for calls in [10usize, 50, 100, 500] {
        let x = Some(calls as f64);
        let code = format!(
            "import time, asyncio\nawait asyncio.gather(*[tools.noop() for _ in range(10)])\n\
             t = time.perf_counter()\nawait asyncio.gather(*[tools.noop() for _ in range({calls})])\n\
             (time.perf_counter() - t) * 1000"
        );
        let plans = [
            PeerPlan::new("monty", "monty", "gather", per_round, 1).param("calls", calls),
            PeerPlan::new("cpython (stdio JSON)", "cpython", "gather", per_round, 1)
                .param("calls", calls),
        ];
        let method = format!(
            "a script gathers 10 `tools.noop()` calls (warm-up), then {calls} timed with \
             time.perf_counter inside the script; the engine runs the calls concurrently."
        );
        versus_peers(b, &mut r, x, rounds, &plans, method, async || {
            repeat(per_round, async || b.timed_script("gather", &code).await).await
        })
        .await?;
    }
    r.note(format!(
        "{rounds} round(s) of {per_round} scripts per contender and point. CPython has no \
         sandbox here: its child announces the calls as JSON lines on stdout and reads the \
         answers on stdin, the cheapest honest host-call protocol for a subprocess."
    ));
    Ok(r)
}
