//! The approval check from a cold process: `paddock policy explain` of one command, as an
//! operator or a hook runs it. Issue 2/7's target: 5 ms p50, process start included.

use serde_json::json;

use super::measure::{json_answer, timed_process};
use crate::error::Result;
use crate::harness::Bench;
use crate::report::{Better, Outcome, Role, ScenarioReport};

/// The commands judged, and the decision each must get.
const COMMANDS: &[(&str, &str, &str)] = &[
    ("harmless", "git status", "allow"),
    ("hardline", "sudo rm -rf --no-preserve-root /", "deny"),
    (
        "interpreter code",
        "cd /usr && python3 -c \"import os; os.system('rm -rf ./*')\"",
        "deny",
    ),
];

async fn explain_once(b: &Bench, command: &str, expected: &str) -> Result<f64> {
    let mut explain = tokio::process::Command::new(&b.exe);
    explain
        .args(["policy", "explain", "--cwd", "/tmp", "--command", command])
        .env_remove("PADDOCK_POLICY");
    let (elapsed, out) = timed_process(&mut explain, None, 30, "paddock policy explain").await?;
    let what = format!("paddock policy explain --command {command:?}");
    json_answer(&out, what, |v| v["decision"] == json!(expected))?;
    Ok(elapsed)
}

pub async fn approval(b: &Bench) -> Result<ScenarioReport> {
    let mut r = ScenarioReport::new(
        "approval",
        "`paddock policy explain` of one command, a fresh process each time",
        "ms",
        Better::Lower,
    );
    let samples = b.pick(15, 60);
    explain_once(b, COMMANDS[0].1, COMMANDS[0].2).await?; // page cache
    // Interleaved sample by sample, so that the machine's noise falls on all three alike.
    let mut measured: Vec<Vec<f64>> = vec![Vec::with_capacity(samples); COMMANDS.len()];
    for _ in 0..samples {
        for (i, (_, command, expected)) in COMMANDS.iter().enumerate() {
            measured[i].push(explain_once(b, command, expected).await?);
        }
    }
    for (i, ((what, command, expected), samples)) in COMMANDS.iter().zip(measured).enumerate() {
        let role = if i == 0 { Role::Paddock } else { Role::Variant };
        r.push(
            &format!("explain: {what}"),
            role,
            None,
            Outcome::measured(
                format!(
                    "`paddock policy explain --cwd /tmp --command {command:?}` (built-in \
                     policy, every pack), host wall time from spawn to exit; the decision \
                     must be {expected}."
                ),
                None,
                samples,
            ),
        );
    }
    r.note("Target (issue 2/7): p50 at most 5 ms including process start.");
    Ok(r)
}
