//! How a script's cost grows with its size and with its output: host wall time of the whole
//! script, the same source in every contender.

use std::time::Instant;

use super::{PeerPlan, interleaved, push_peers};
use crate::error::{BenchError, Result};
use crate::harness::{Bench, ms};
use crate::report::{Better, Outcome, Role, ScenarioReport};

/// `lines` simple statements ending on an expression; byte for byte the driver's
/// `size_script` (a test checks it). Its result is `lines - 2`.
pub fn size_script(lines: usize) -> String {
    format!(
        "v = 0\n{}v\n",
        "v = v + 1\n".repeat(lines.saturating_sub(2))
    )
}

/// The driver's `output_script`.
pub fn output_script(chars: usize) -> String {
    format!("print('x' * {chars})")
}

pub async fn script_size(b: &Bench) -> Result<ScenarioReport> {
    let mut r = ScenarioReport::new(
        "script_size",
        "Scripts of growing size (`v = v + 1` per line)",
        "ms",
        Better::Lower,
    )
    .curve("lines", true);
    let rounds = b.pick(1, 3);
    let per_round = b.pick(3, 5);
    for lines in [10usize, 100, 1000, 10_000] {
        let x = Some(lines as f64);
        let code = size_script(lines);
        let plans = [
            PeerPlan::new("monty", "monty", "script_size", per_round, 1).param("lines", lines),
            PeerPlan::new(
                "cpython (new process)",
                "cpython",
                "script_size",
                per_round,
                1,
            )
            .param("lines", lines),
        ];
        let (samples, peers) = interleaved(
            b,
            rounds,
            async || {
                let mut out = Vec::with_capacity(per_round);
                for _ in 0..per_round {
                    let t = Instant::now();
                    let result = b.script("script_size", &code).await?;
                    out.push(ms(t.elapsed()));
                    if result["result"].as_u64() != Some(lines as u64 - 2) {
                        return Err(BenchError::unexpected("script_size", &result));
                    }
                }
                Ok(out)
            },
            &plans,
        )
        .await?;
        r.push(
            "paddock",
            Role::Paddock,
            x,
            Outcome::measured(
                format!(
                    "a script of {lines} lines through Engine::run_script on the warm pool: \
                     host wall time from call to result (parse and rewrite in the engine, \
                     compile and run in the child)."
                ),
                None,
                samples,
            ),
        );
        push_peers(&mut r, &plans, peers, x);
    }
    r.note(format!(
        "{rounds} round(s) of {per_round} scripts per contender and size."
    ));
    Ok(r)
}

pub async fn output(b: &Bench) -> Result<ScenarioReport> {
    let mut r = ScenarioReport::new(
        "output",
        "Scripts printing growing output (`print('x' * N)`)",
        "ms",
        Better::Lower,
    )
    .curve("characters printed", true);
    let rounds = b.pick(1, 3);
    let per_round = b.pick(3, 5);
    for chars in [100usize, 10_000, 1_000_000] {
        let x = Some(chars as f64);
        let code = output_script(chars);
        let plans = [
            PeerPlan::new("monty", "monty", "output", per_round, 1).param("chars", chars),
            PeerPlan::new("cpython (new process)", "cpython", "output", per_round, 1)
                .param("chars", chars),
        ];
        let (samples, peers) = interleaved(
            b,
            rounds,
            async || {
                let mut out = Vec::with_capacity(per_round);
                for _ in 0..per_round {
                    let t = Instant::now();
                    let result = b.script("output", &code).await?;
                    out.push(ms(t.elapsed()));
                    let printed = result["output"].as_str().map_or(0, str::len);
                    if printed < chars {
                        return Err(BenchError::unexpected("output", &result));
                    }
                }
                Ok(out)
            },
            &plans,
        )
        .await?;
        r.push(
            "paddock",
            Role::Paddock,
            x,
            Outcome::measured(
                format!(
                    "`print('x' * {chars})` through Engine::run_script (max_output_chars raised \
                     to 2M): host wall time from call to the result holding the output."
                ),
                None,
                samples,
            ),
        );
        push_peers(&mut r, &plans, peers, x);
    }
    r.note(format!(
        "{rounds} round(s) of {per_round} scripts per contender and size."
    ));
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peers::DRIVER;

    #[test]
    fn scripts_are_the_drivers() {
        assert!(DRIVER.contains(r#"return "v = 0\n" + "v = v + 1\n" * max(lines - 2, 0) + "v\n""#));
        assert!(DRIVER.contains(r#"return f"print('x' * {chars})""#));
        assert_eq!(size_script(4), "v = 0\nv = v + 1\nv = v + 1\nv\n");
        assert_eq!(size_script(1), "v = 0\nv\n");
    }
}
