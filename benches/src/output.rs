//! Writes a report into its directory: `results.json` for machines, `results.md` for people,
//! and one SVG chart per scenario that has figures.

use std::path::{Path, PathBuf};

use crate::chart::{self, Bar, Series};
use crate::error::{BenchError, Result};
use crate::markdown;
use crate::report::{Outcome, Report, ScenarioReport};

/// The chart file name of a scenario that has something to draw.
pub fn chart_file(s: &ScenarioReport) -> Option<String> {
    (s.skipped.is_none() && s.error.is_none() && !s.entries.is_empty())
        .then(|| format!("{}.svg", s.name))
}

/// A scenario's chart: bars (median, whisker p10–p90) or, for a curve, one line per contender
/// through its medians.
pub fn chart_svg(s: &ScenarioReport) -> String {
    let title = s.title.replace('`', "");
    match &s.curve {
        Some(curve) => {
            let mut series: Vec<Series> = Vec::new();
            for e in &s.entries {
                let Some(summary) = e.outcome.summary() else {
                    continue;
                };
                let Some(x) = e.x else { continue };
                match series.iter_mut().find(|(name, _)| *name == e.contender) {
                    Some((_, points)) => points.push((x, summary.median)),
                    None => series.push((e.contender.clone(), vec![(x, summary.median)])),
                }
            }
            chart::line_chart(
                &title,
                &curve.x_label,
                &format!("{}, median", s.unit),
                &series,
                curve.log_x,
            )
        }
        None => {
            let bars: Vec<Bar> = s
                .entries
                .iter()
                .map(|e| match &e.outcome {
                    Outcome::Measured { summary, .. } => (
                        e.contender.clone(),
                        summary.median,
                        Some((summary.p10, summary.p90)),
                    ),
                    Outcome::NotInstalled { .. } => {
                        (format!("{} (not installed)", e.contender), f64::NAN, None)
                    }
                    Outcome::Failed { .. } => (format!("{} (failed)", e.contender), f64::NAN, None),
                })
                .collect();
            chart::bar_chart(&format!("{title} (median, p10–p90)"), &s.unit, &bars)
        }
    }
}

fn write(path: PathBuf, text: &str) -> Result<PathBuf> {
    std::fs::write(&path, text).map_err(BenchError::io(format!("writing {}", path.display())))?;
    Ok(path)
}

/// Writes everything into `dir` (created if needed) and returns the files written.
pub fn write_all(report: &Report, dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(BenchError::io(format!("creating {}", dir.display())))?;
    let mut written = Vec::new();
    let json = serde_json::to_string_pretty(report).map_err(|e| BenchError::Unexpected {
        what: "serialising the report".into(),
        result: e.to_string(),
    })?;
    written.push(write(dir.join("results.json"), &json)?);
    written.push(write(
        dir.join("results.md"),
        &markdown::render(report, Some(&chart_file)),
    )?);
    for s in &report.scenarios {
        if let Some(file) = chart_file(s) {
            written.push(write(dir.join(file), &chart_svg(s))?);
        }
    }
    Ok(written)
}
