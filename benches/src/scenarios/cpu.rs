//! A CPU-bound loop: what the sandbox's interpreter (RustPython) costs against CPython and
//! Monty, on the very same source.

use super::measure::{PeerPlan, repeat, versus_peers};
use crate::error::Result;
use crate::harness::Bench;
use crate::report::{Better, ScenarioReport};

/// Loop iterations.
const N: u64 = 1_000_000;

/// The loop, with `range(N)` standing for the count. Byte for byte the driver's `cpu_script`
/// (a test checks it): module-level globals in every contender.
const LOOP: &str = "s = 0\nfor i in range(N):\n    s += i * i\n";

pub fn cpu_loop(n: u64) -> String {
    LOOP.replace("range(N)", &format!("range({n})"))
}

pub async fn cpu(b: &Bench) -> Result<ScenarioReport> {
    let mut r = ScenarioReport::new(
        "cpu",
        "CPU-bound loop: `s += i * i` for a million i",
        "ms",
        Better::Lower,
    );
    // The same timing wrapper as the driver's Monty script.
    let code = format!(
        "import time\nt = time.perf_counter()\n{}(time.perf_counter() - t) * 1000",
        cpu_loop(N)
    );
    let rounds = b.pick(1, 3);
    let per_round = b.pick(3, 5);
    let plans = [
        PeerPlan::new("cpython", "cpython", "cpu", per_round, 0).param("n", N),
        PeerPlan::new("monty", "monty", "cpu", per_round, 1).param("n", N),
    ];
    let method = format!(
        "module-level loop `s += i * i` for i in range({N}) in a sandbox child (RustPython), \
         timed inside the script with time.perf_counter (excludes start-up)."
    );
    versus_peers(b, &mut r, None, rounds, &plans, method, async || {
        repeat(per_round, async || b.timed_script("cpu", &code).await).await
    })
    .await?;
    r.note(format!(
        "Identical source in every contender; {rounds} round(s) of {per_round} runs each."
    ));
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loop_is_the_drivers_loop() {
        // The driver builds it as an f-string with `{n}`, newlines written as `\n` escapes.
        let as_python = LOOP.replace('\n', "\\n").replace("range(N)", "range({n})");
        let line = format!("return f\"{as_python}\"");
        assert!(
            crate::peers::DRIVER.contains(&line),
            "peer_driver.py's cpu_script must be `{line}`"
        );
        assert_eq!(cpu_loop(3), "s = 0\nfor i in range(3):\n    s += i * i\n");
    }
}
