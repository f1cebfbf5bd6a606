//! The report as markdown: how it was run, a summary with one line per peer and point (the
//! ratios), then per scenario its chart, its table and its methods.

use std::fmt::Write as _;

use crate::chart::{format_tick, format_value};
use crate::report::{Entry, Outcome, Report, Role, ScenarioReport, advantage_text};

/// A table cell: no pipes or newlines may break the row.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace(['\n', '\r'], " ")
}

fn value(v: f64, unit: &str) -> String {
    if unit.is_empty() {
        format_value(v)
    } else {
        format!("{} {unit}", format_value(v))
    }
}

fn duration(seconds: f64) -> String {
    if seconds >= 60.0 {
        format!("{} min {:.0} s", (seconds / 60.0).floor(), seconds % 60.0)
    } else {
        format!("{seconds:.1} s")
    }
}

/// "gather, 500 tool calls gathered" for a curve point; the name alone otherwise.
fn point_label(s: &ScenarioReport, x: Option<f64>) -> String {
    match (&s.curve, x) {
        (Some(curve), Some(x)) => format!("`{}`, {} {}", s.name, format_tick(x), curve.x_label),
        _ => format!("`{}`", s.name),
    }
}

/// The points of a scenario, in order of first appearance.
fn points(s: &ScenarioReport) -> Vec<Option<f64>> {
    let mut xs: Vec<Option<f64>> = Vec::new();
    for e in &s.entries {
        if !xs.contains(&e.x) {
            xs.push(e.x);
        }
    }
    xs
}

fn versus(s: &ScenarioReport, e: &Entry) -> String {
    match (e.role, e.paddock_advantage, &e.outcome) {
        (Role::Peer, Some(adv), _) => advantage_text(adv, s.words()),
        (Role::Peer, None, Outcome::Measured { .. }) => "no Paddock figure".into(),
        (Role::Peer | Role::Paddock | Role::Variant, _, _) => "—".into(),
    }
}

fn figure(s: &ScenarioReport, outcome: &Outcome) -> String {
    match outcome.summary() {
        Some(summary) => value(summary.median, &s.unit),
        None => cell(&outcome.status_text()),
    }
}

fn summary_table(out: &mut String, report: &Report) {
    let _ = writeln!(
        out,
        "| scenario | Paddock | peer | peer's median | Paddock vs peer |\n|---|---|---|---|---|"
    );
    for s in &report.scenarios {
        if let Some(why) = s.skipped.as_ref().or(s.error.as_ref()) {
            let status = if s.error.is_some() {
                "failed"
            } else {
                "skipped"
            };
            let _ = writeln!(out, "| `{}` | {status}: {} | | | |", s.name, cell(why));
            continue;
        }
        for x in points(s) {
            let paddock = s
                .entries
                .iter()
                .find(|e| e.role == Role::Paddock && e.x == x)
                .map_or_else(|| "—".to_owned(), |e| figure(s, &e.outcome));
            let peers: Vec<&Entry> = s
                .entries
                .iter()
                .filter(|e| e.role == Role::Peer && e.x == x)
                .collect();
            if peers.is_empty() {
                let _ = writeln!(out, "| {} | {paddock} | — | | |", point_label(s, x));
            }
            for (i, peer) in peers.iter().enumerate() {
                let (label, mine) = if i == 0 {
                    (point_label(s, x), paddock.as_str())
                } else {
                    (String::new(), "")
                };
                let _ = writeln!(
                    out,
                    "| {label} | {mine} | {} | {} | {} |",
                    cell(&peer.contender),
                    figure(s, &peer.outcome),
                    versus(s, peer)
                );
            }
        }
    }
}

fn scenario_section(out: &mut String, s: &ScenarioReport, chart: Option<&str>) {
    let _ = writeln!(out, "\n## `{}`: {}\n", s.name, s.title);
    if let Some(why) = &s.skipped {
        let _ = writeln!(out, "Skipped: {why}.");
        return;
    }
    if let Some(err) = &s.error {
        let _ = writeln!(out, "**Failed**: {}", cell(err));
        return;
    }
    if let Some(file) = chart {
        let _ = writeln!(out, "![{}]({file})\n", cell(&s.title));
    }
    let curve = s.curve.as_ref();
    let x_head = curve.map_or(String::new(), |c| format!("{} | ", c.x_label));
    let x_rule = if curve.is_some() { "---|" } else { "" };
    let _ = writeln!(
        out,
        "| {x_head}contender | n | median | p10 | p90 | p99 | Paddock vs this |\n\
         |{x_rule}---|---|---|---|---|---|---|"
    );
    for e in &s.entries {
        let x = match (curve, e.x) {
            (Some(_), Some(x)) => format!("{} | ", format_tick(x)),
            (Some(_), None) => "| ".into(),
            (None, _) => String::new(),
        };
        let name = match e.role {
            Role::Paddock => format!("**{}**", cell(&e.contender)),
            Role::Variant | Role::Peer => cell(&e.contender),
        };
        match e.outcome.summary() {
            Some(m) => {
                let _ = writeln!(
                    out,
                    "| {x}{name} | {} | {} | {} | {} | {} | {} |",
                    m.n,
                    value(m.median, &s.unit),
                    format_value(m.p10),
                    format_value(m.p90),
                    m.p99.map_or_else(|| "—".to_owned(), format_value),
                    versus(s, e)
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "| {x}{name} | 0 | {} | | | | |",
                    cell(&e.outcome.status_text())
                );
            }
        }
    }
    let _ = writeln!(out, "\nMethod:\n");
    // One line per contender and method; on a curve, one per contender (the points' methods
    // differ only in the point), from the first point where it was measured.
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for e in &s.entries {
        let (method, version) = match &e.outcome {
            Outcome::Measured {
                method, version, ..
            } => (method.as_str(), version.as_deref()),
            Outcome::NotInstalled { reason } => (reason.as_str(), None),
            Outcome::Failed { error } => (error.as_str(), None),
        };
        let key = (
            e.contender.as_str(),
            if curve.is_some() { "" } else { method },
        );
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        let version = version.map_or_else(String::new, |v| format!(" ({v})"));
        let point = match (curve, e.x) {
            (Some(c), Some(x)) => format!(
                " at {} {} (the other points alike)",
                format_tick(x),
                c.x_label
            ),
            _ => String::new(),
        };
        let _ = writeln!(out, "- **{}**{version}{point}: {method}", e.contender);
    }
    for note in &s.notes {
        let _ = writeln!(out, "- {note}");
    }
    let _ = writeln!(out, "\nThis scenario took {}.", duration(s.wall_s));
}

fn peers_line(report: &Report) -> String {
    if let Some(why) = &report.peers.unavailable {
        return format!("none could be run: {why}");
    }
    let Some(status) = report.peers.status.as_ref().and_then(|s| s.as_object()) else {
        return format!("from {} (no peers.json)", report.peers.dir);
    };
    let list: Vec<String> = status
        .iter()
        .map(|(name, entry)| {
            let version = entry["version"].as_str().unwrap_or("");
            if entry["installed"] == serde_json::json!(true) {
                format!("{name} {version}")
            } else {
                format!(
                    "{name} NOT INSTALLED ({})",
                    entry["reason"].as_str().unwrap_or("")
                )
            }
        })
        .collect();
    format!("{} (from `{}`)", list.join(", "), report.peers.dir)
}

/// Names the chart file written for a scenario, if any.
pub type ChartOf<'a> = &'a dyn Fn(&ScenarioReport) -> Option<String>;

/// The report: how it was run and the summary, then (with `chart_of`, which names the chart
/// file written for a scenario, if any) a section per scenario.
pub fn render(report: &Report, sections: Option<ChartOf<'_>>) -> String {
    let m = &report.machine;
    let load = |l: &[f64]| {
        l.iter()
            .map(|v| format!("{v:.2}"))
            .collect::<Vec<_>>()
            .join(" / ")
    };
    let mut out = String::new();
    let _ = writeln!(out, "# Paddock benchmarks\n");
    let _ = writeln!(
        out,
        "- **Run**: {}, `{}` ({} set), {} in all; Paddock {}.",
        report.started_at,
        report.command,
        report.profile,
        duration(report.wall_s),
        report.paddock_version
    );
    let _ = writeln!(
        out,
        "- **Machine**: {}, {} cores, Linux {}, {} MB RAM; load average (1/5/15 min) {} at the \
         start, {} at the end.",
        m.cpu,
        m.cores,
        m.kernel,
        m.memory_mb,
        load(&m.load_start),
        load(&m.load_end)
    );
    let _ = writeln!(out, "- **Peers**: {}.", peers_line(report));
    let _ = writeln!(
        out,
        "\nFigures are medians; the spread is p10–p90 (p99 from 100 samples up). \"Paddock vs \
         peer\" compares medians measured in this run, on this machine.\n\n## Summary\n"
    );
    summary_table(&mut out, report);
    if let Some(chart_of) = sections {
        for s in &report.scenarios {
            let chart = chart_of(s);
            scenario_section(&mut out, s, chart.as_deref());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::Machine;
    use crate::report::{Better, PeersInfo};

    fn report() -> Report {
        let mut s = ScenarioReport::new("trivial", "Trivial | script", "ms", Better::Lower);
        s.push(
            "paddock",
            Role::Paddock,
            None,
            Outcome::measured("p", None, vec![1.0, 1.0]),
        );
        s.push(
            "monty",
            Role::Peer,
            None,
            Outcome::measured("m", Some("1.4.0".into()), vec![0.5]),
        );
        s.push(
            "hermes",
            Role::Peer,
            None,
            Outcome::NotInstalled {
                reason: "hermes not installed: run scripts/bench-peers.sh".into(),
            },
        );
        s.finish();
        let mut skipped = ScenarioReport::new("mcp", "MCP", "ms", Better::Lower);
        skipped.skipped = Some("paddock serve not available".into());
        Report {
            paddock_version: "0.1.0".into(),
            started_at: "2026-11-30T00:00:00Z".into(),
            command: "paddock bench".into(),
            profile: "quick".into(),
            machine: Machine {
                cpu: "cpu".into(),
                cores: 2,
                kernel: "6".into(),
                memory_mb: 1,
                load_start: vec![1.0, 2.0, 3.0],
                load_end: vec![],
            },
            peers: PeersInfo {
                dir: "/opt/paddock-peers".into(),
                status: None,
                unavailable: None,
            },
            wall_s: 61.0,
            scenarios: vec![s, skipped],
        }
    }

    #[test]
    fn summary_lists_every_peer_with_its_ratio_and_missing_ones_say_so() {
        let md = render(&report(), Some(&|s| Some(format!("{}.svg", s.name))));
        assert!(
            md.contains("| `trivial` | 1.00 ms | monty | 0.500 ms | Paddock 2.00× slower |"),
            "{md}"
        );
        assert!(md.contains("|  |  | hermes | not installed: run scripts/bench-peers.sh | — |"));
        assert!(md.contains("| `mcp` | skipped: paddock serve not available | | | |"));
        assert!(md.contains("![Trivial \\| script](trivial.svg)"));
        assert!(md.contains("- **monty** (1.4.0): m"));
        assert!(md.contains("1 min 1 s in all"));
        // Every table row has as many cells as its header.
        for table in md.split("\n\n").filter(|b| b.starts_with('|')) {
            let widths: Vec<usize> = table
                .lines()
                .map(|l| l.replace("\\|", "").matches('|').count())
                .collect();
            assert!(widths.windows(2).all(|w| w[0] == w[1]), "{table}");
        }
    }
}
