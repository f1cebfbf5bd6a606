//! What a bench run produced: each scenario's contenders, their samples and summaries, the
//! machine and the peers. Serialised as is into `results.json`; `markdown` and `output`
//! render it for people.

use serde::Serialize;
use serde_json::Value;

use crate::machine::Machine;
use crate::stats::Summary;

/// What a contender is to the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Paddock as configured by default: the reference every peer's ratio is computed against
    /// (the first such entry at each x).
    Paddock,
    /// Another Paddock configuration or path (e.g. the workspace-write sandbox, an in-process
    /// call): shown beside the reference, without a ratio.
    Variant,
    /// An alternative to Paddock: gets a ratio.
    Peer,
}

/// Which way is better for a scenario's unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Better {
    Lower,
    Higher,
}

/// One contender's result at one point.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Outcome {
    Measured {
        method: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        version: Option<String>,
        samples: Vec<f64>,
        summary: Summary,
    },
    /// A peer that scripts/bench-peers.sh did not (or could not) install.
    NotInstalled {
        reason: String,
    },
    Failed {
        error: String,
    },
}

impl Outcome {
    /// Measured samples, or a failure when there is no finite sample.
    pub fn measured(method: impl Into<String>, version: Option<String>, samples: Vec<f64>) -> Self {
        match Summary::of(&samples) {
            Some(summary) => Self::Measured {
                method: method.into(),
                version,
                samples,
                summary,
            },
            None => Self::Failed {
                error: "no samples".into(),
            },
        }
    }

    pub fn summary(&self) -> Option<&Summary> {
        match self {
            Self::Measured { summary, .. } => Some(summary),
            Self::NotInstalled { .. } | Self::Failed { .. } => None,
        }
    }

    /// One word or phrase for a table cell when there is no figure.
    pub fn status_text(&self) -> String {
        match self {
            Self::Measured { .. } => "measured".into(),
            Self::NotInstalled { .. } => "not installed: run scripts/bench-peers.sh".into(),
            Self::Failed { error } => format!("failed: {error}"),
        }
    }
}

/// One contender at one point of a scenario.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Entry {
    pub contender: String,
    pub role: Role,
    /// The point on a growth curve (lines, calls, chars, concurrency); none for a bar scenario.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub x: Option<f64>,
    #[serde(flatten)]
    pub outcome: Outcome,
    /// How many times better Paddock's median is than this peer's (> 1: Paddock is better),
    /// for peers with a measured Paddock reference at the same point. Set by
    /// [`ScenarioReport::finish`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paddock_advantage: Option<f64>,
}

impl Entry {
    pub fn new(contender: impl Into<String>, role: Role, x: Option<f64>, outcome: Outcome) -> Self {
        Self {
            contender: contender.into(),
            role,
            x,
            outcome,
            paddock_advantage: None,
        }
    }
}

/// A growth curve's x axis.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Curve {
    pub x_label: String,
    pub log_x: bool,
}

/// One scenario's results.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScenarioReport {
    pub name: String,
    pub title: String,
    pub unit: String,
    pub better: Better,
    /// Some for a growth curve (entries carry x); none for a bar scenario.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub curve: Option<Curve>,
    pub entries: Vec<Entry>,
    /// How the comparison was made fair (interleaving, what is timed), caveats.
    pub notes: Vec<String>,
    /// The whole scenario was not run, and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// The whole scenario failed, and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub wall_s: f64,
}

impl ScenarioReport {
    pub fn new(name: &str, title: &str, unit: &str, better: Better) -> Self {
        Self {
            name: name.into(),
            title: title.into(),
            unit: unit.into(),
            better,
            curve: None,
            entries: Vec::new(),
            notes: Vec::new(),
            skipped: None,
            error: None,
            wall_s: 0.0,
        }
    }

    pub fn curve(mut self, x_label: &str, log_x: bool) -> Self {
        self.curve = Some(Curve {
            x_label: x_label.into(),
            log_x,
        });
        self
    }

    pub fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    pub fn push(&mut self, contender: &str, role: Role, x: Option<f64>, outcome: Outcome) {
        self.entries.push(Entry::new(contender, role, x, outcome));
    }

    /// Adds `contender`'s samples, taken as `method` says (no version: Paddock's own rows).
    pub fn push_measured(
        &mut self,
        contender: &str,
        role: Role,
        x: Option<f64>,
        method: impl Into<String>,
        samples: Vec<f64>,
    ) {
        self.push(contender, role, x, Outcome::measured(method, None, samples));
    }

    /// The reference entry at `x`: the first measured [`Role::Paddock`] entry there.
    pub fn reference(&self, x: Option<f64>) -> Option<&Summary> {
        self.entries
            .iter()
            .filter(|e| e.role == Role::Paddock && e.x == x)
            .find_map(|e| e.outcome.summary())
    }

    /// Computes every peer's `paddock_advantage`.
    pub fn finish(&mut self) {
        let advantages: Vec<Option<f64>> = self
            .entries
            .iter()
            .map(
                |e| match (e.role, self.reference(e.x), e.outcome.summary()) {
                    (Role::Peer, Some(paddock), Some(peer)) => {
                        advantage(self.better, paddock.median, peer.median)
                    }
                    (Role::Peer | Role::Paddock | Role::Variant, _, _) => None,
                },
            )
            .collect();
        for (entry, adv) in self.entries.iter_mut().zip(advantages) {
            entry.paddock_advantage = adv;
        }
    }

    /// True when a Paddock measurement of this scenario failed (peers' failures do not count:
    /// they are reported, but they are not Paddock's).
    pub fn paddock_failed(&self) -> bool {
        self.error.is_some()
            || self.entries.iter().any(|e| {
                matches!(e.role, Role::Paddock | Role::Variant)
                    && matches!(e.outcome, Outcome::Failed { .. })
            })
    }

    /// The words for "better" and "worse" in this scenario's unit.
    pub fn words(&self) -> (&'static str, &'static str) {
        if self.unit.ends_with('B') {
            ("smaller", "larger")
        } else {
            ("faster", "slower")
        }
    }
}

/// How many times better `paddock` is than `peer`: > 1 when Paddock is better. None when either
/// is zero or not finite.
pub fn advantage(better: Better, paddock: f64, peer: f64) -> Option<f64> {
    let ratio = match better {
        Better::Lower => peer / paddock,
        Better::Higher => paddock / peer,
    };
    (ratio.is_finite() && ratio > 0.0).then_some(ratio)
}

/// "Paddock 12× faster" / "Paddock 1.9× slower" / "same".
pub fn advantage_text(advantage: f64, (better, worse): (&str, &str)) -> String {
    let (factor, word) = if advantage >= 1.0 {
        (advantage, better)
    } else {
        (1.0 / advantage, worse)
    };
    if factor < 1.005 {
        return "same".into();
    }
    let factor = if factor >= 10.0 {
        format!("{factor:.0}")
    } else {
        format!("{factor:.2}")
    };
    format!("Paddock {factor}× {word}")
}

/// A whole run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub paddock_version: String,
    /// UTC, RFC 3339.
    pub started_at: String,
    /// The command line, as run.
    pub command: String,
    /// "quick" or "full".
    pub profile: String,
    pub machine: Machine,
    pub peers: PeersInfo,
    pub wall_s: f64,
    pub scenarios: Vec<ScenarioReport>,
}

/// Where the peers came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PeersInfo {
    pub dir: String,
    /// scripts/bench-peers.sh's `peers.json`, if it was there.
    pub status: Option<Value>,
    /// Why no peer could be run at all, if so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
}

impl Report {
    /// True when a Paddock measurement failed anywhere.
    pub fn paddock_failed(&self) -> bool {
        self.scenarios.iter().any(ScenarioReport::paddock_failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn measured(samples: &[f64]) -> Outcome {
        Outcome::measured("m", None, samples.to_vec())
    }

    #[test]
    fn advantage_is_oriented_so_above_one_means_paddock_is_better() {
        assert_eq!(advantage(Better::Lower, 2.0, 20.0), Some(10.0));
        assert_eq!(advantage(Better::Higher, 400.0, 100.0), Some(4.0));
        assert_eq!(advantage(Better::Lower, 0.0, 1.0), None);
        assert_eq!(
            advantage_text(10.0, ("faster", "slower")),
            "Paddock 10× faster"
        );
        assert_eq!(
            advantage_text(0.5, ("faster", "slower")),
            "Paddock 2.00× slower"
        );
        assert_eq!(advantage_text(1.001, ("faster", "slower")), "same");
    }

    #[test]
    fn finish_rates_each_peer_against_paddock_at_the_same_point() {
        let mut s =
            ScenarioReport::new("gather", "Gather", "ms", Better::Lower).curve("calls", true);
        s.push("paddock", Role::Paddock, Some(50.0), measured(&[4.0]));
        s.push("paddock", Role::Paddock, Some(500.0), measured(&[40.0]));
        s.push("monty", Role::Peer, Some(50.0), measured(&[2.0]));
        s.push("monty", Role::Peer, Some(500.0), measured(&[100.0]));
        s.push(
            "cpython",
            Role::Peer,
            Some(50.0),
            Outcome::NotInstalled { reason: "x".into() },
        );
        s.push("variant", Role::Variant, Some(50.0), measured(&[5.0]));
        s.finish();
        let adv: Vec<Option<f64>> = s.entries.iter().map(|e| e.paddock_advantage).collect();
        assert_eq!(adv, vec![None, None, Some(0.5), Some(2.5), None, None]);
        assert!(!s.paddock_failed());
    }

    #[test]
    fn json_shape_of_an_entry() {
        let mut e = Entry::new("monty", Role::Peer, None, measured(&[0.0, 10.0]));
        e.paddock_advantage = Some(2.0);
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "contender": "monty", "role": "peer", "status": "measured", "method": "m",
                "samples": [0.0, 10.0],
                "summary": {"n": 2, "median": 5.0, "p10": 1.0, "p90": 9.0, "p99": null,
                            "min": 0.0, "max": 10.0, "mean": 5.0},
                "paddock_advantage": 2.0
            })
        );
        let missing = Entry::new(
            "hermes",
            Role::Peer,
            Some(1.0),
            Outcome::NotInstalled { reason: "r".into() },
        );
        assert_eq!(
            serde_json::to_value(&missing).unwrap(),
            serde_json::json!({"contender": "hermes", "role": "peer", "x": 1.0,
                               "status": "not_installed", "reason": "r"})
        );
    }
}
