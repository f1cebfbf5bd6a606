//! How a script's cost grows with its size and with its output: host wall time of the whole
//! script, the same source in every contender.

use serde_json::Value;

use super::measure::{PeerPlan, repeat, script_sample, versus_peers};
use crate::error::Result;
use crate::harness::Bench;
use crate::report::{Better, ScenarioReport};

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

/// One growth curve: a scenario whose script grows along `param`, measured at each of
/// `points` against the peers running the same source.
struct Growth {
    scenario: &'static str,
    title: &'static str,
    x_label: &'static str,
    /// The peer driver's name for the point.
    param: &'static str,
    points: &'static [usize],
    code: fn(usize) -> String,
    /// Paddock's method text at a point.
    method: fn(usize) -> String,
    /// Whether a script's result is right for its point.
    accept: fn(usize, &Value) -> bool,
}

pub async fn script_size(b: &Bench) -> Result<ScenarioReport> {
    let size = Growth {
        scenario: "script_size",
        title: "Scripts of growing size (`v = v + 1` per line)",
        x_label: "lines",
        param: "lines",
        points: &[10, 100, 1000, 10_000],
        code: size_script,
        method: |lines| {
            format!(
                "a script of {lines} lines through Engine::run_script on the warm pool: host \
                 wall time from call to result (parse and rewrite in the engine, compile and \
                 run in the child)."
            )
        },
        accept: |lines, result| result["result"].as_u64() == Some(lines as u64 - 2),
    };
    growth(b, &size).await
}

pub async fn output(b: &Bench) -> Result<ScenarioReport> {
    let output = Growth {
        scenario: "output",
        title: "Scripts printing growing output (`print('x' * N)`)",
        x_label: "characters printed",
        param: "chars",
        points: &[100, 10_000, 1_000_000],
        code: output_script,
        method: |chars| {
            format!(
                "`print('x' * {chars})` through Engine::run_script (max_output_chars raised to \
                 2M): host wall time from call to the result holding the output."
            )
        },
        accept: |chars, result| result["output"].as_str().map_or(0, str::len) >= chars,
    };
    growth(b, &output).await
}

async fn growth(b: &Bench, g: &Growth) -> Result<ScenarioReport> {
    let mut r =
        ScenarioReport::new(g.scenario, g.title, "ms", Better::Lower).curve(g.x_label, true);
    let rounds = b.pick(1, 3);
    let per_round = b.pick(3, 5);
    for &point in g.points {
        let code = (g.code)(point);
        let plans = [
            PeerPlan::new("monty", "monty", g.scenario, per_round, 1).param(g.param, point),
            PeerPlan::new("cpython (new process)", "cpython", g.scenario, per_round, 1)
                .param(g.param, point),
        ];
        let accept = |result: &Value| (g.accept)(point, result);
        let sample = async || script_sample(b, g.scenario, &code, accept).await;
        let x = Some(point as f64);
        versus_peers(
            b,
            &mut r,
            x,
            rounds,
            &plans,
            (g.method)(point),
            async || repeat(per_round, &sample).await,
        )
        .await?;
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
