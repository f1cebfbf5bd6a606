//! The peers Paddock is measured against (Monty, a fresh CPython per script, Hermes' local
//! terminal), run by `benches/peers/peer_driver.py` under the Python of the venv that
//! `scripts/bench-peers.sh` makes. The bench never installs anything: a peer that is missing is
//! reported as "not installed", with the command that installs it.
//!
//! The driver is compiled into the binary and written to a scratch directory at run time, so
//! that the binary and the driver it runs always match, whatever the working directory.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use crate::report::{Outcome, PeersInfo};

/// The driver, byte for byte.
pub const DRIVER: &str = include_str!("../peers/peer_driver.py");

/// Where scripts/bench-peers.sh installs by default.
pub const DEFAULT_DIR: &str = "/opt/paddock-peers";

/// What to tell people whose peers are missing.
pub const SETUP_HINT: &str = "run scripts/bench-peers.sh";

/// One call of the driver.
#[derive(Debug, Clone)]
pub struct PeerRequest<'a> {
    pub peer: &'a str,
    pub scenario: &'a str,
    pub params: Vec<(&'a str, String)>,
    pub samples: usize,
    pub warmup: usize,
}

/// What one driver call produced.
#[derive(Debug, Clone, PartialEq)]
pub enum PeerRun {
    Measured {
        method: String,
        version: Option<String>,
        samples: Vec<f64>,
    },
    NotInstalled(String),
    Failed(String),
}

/// The peers directory and the means to run its driver.
pub struct Peers {
    dir: PathBuf,
    python: PathBuf,
    /// The scratch directory the driver was written to (removed on drop), or why it could not be.
    driver: Result<PathBuf, String>,
    timeout: Duration,
}

impl Peers {
    /// Peers from `explicit`, else `$PADDOCK_PEERS_DIR`, else [`DEFAULT_DIR`]. Never fails:
    /// what is missing is reported per peer. `timeout` bounds each driver call (a hung peer is
    /// killed with its whole process group).
    pub fn locate(explicit: Option<PathBuf>, timeout: Duration) -> Self {
        let dir = explicit
            .or_else(|| std::env::var_os("PADDOCK_PEERS_DIR").map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from(DEFAULT_DIR));
        let python = dir.join("venv").join("bin").join("python");
        let scratch =
            std::env::temp_dir().join(format!("paddock-bench-peers-{}", std::process::id()));
        let driver = std::fs::create_dir_all(&scratch)
            .and_then(|()| std::fs::write(scratch.join("peer_driver.py"), DRIVER))
            .map(|()| scratch.clone())
            .map_err(|e| {
                format!(
                    "cannot write the peer driver into {}: {e}",
                    scratch.display()
                )
            });
        Self {
            dir,
            python,
            driver,
            timeout,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Why no peer can be run at all, if so.
    pub fn unavailable(&self) -> Option<String> {
        if let Err(err) = &self.driver {
            return Some(err.clone());
        }
        (!self.python.exists()).then(|| {
            format!(
                "no peers venv at {}: {SETUP_HINT} (or pass --peers DIR)",
                self.dir.join("venv").display()
            )
        })
    }

    /// What the report says about the peers.
    pub fn info(&self) -> PeersInfo {
        let status = std::fs::read_to_string(self.dir.join("peers.json"))
            .ok()
            .and_then(|text| serde_json::from_str::<Value>(&text).ok());
        PeersInfo {
            dir: self.dir.display().to_string(),
            status,
            unavailable: self.unavailable(),
        }
    }

    /// Runs the driver once.
    pub async fn run(&self, request: &PeerRequest<'_>) -> PeerRun {
        if let Some(why) = self.unavailable() {
            return PeerRun::NotInstalled(why);
        }
        let Ok(scratch) = &self.driver else {
            return PeerRun::NotInstalled("no peer driver".into());
        };
        let mut command = tokio::process::Command::new(&self.python);
        command
            .arg(scratch.join("peer_driver.py"))
            .args([request.peer, request.scenario])
            .args(["--samples", &request.samples.max(1).to_string()])
            .args(["--warmup", &request.warmup.to_string()]);
        for (key, value) in &request.params {
            command.args(["--param", &format!("{key}={value}")]);
        }
        command
            .env("PADDOCK_PEERS_DIR", &self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group, so that a hung peer is killed with its workers.
            .process_group(0)
            .kill_on_drop(true);
        let child = match command.spawn() {
            Ok(child) => child,
            Err(err) => {
                return PeerRun::NotInstalled(format!(
                    "cannot run {}: {err}; {SETUP_HINT}",
                    self.python.display()
                ));
            }
        };
        let pid = child.id();
        let output = match tokio::time::timeout(self.timeout, child.wait_with_output()).await {
            Ok(Ok(output)) => output,
            Ok(Err(err)) => return PeerRun::Failed(format!("waiting for the peer driver: {err}")),
            Err(_) => {
                if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
                    let _ = nix::sys::signal::killpg(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                return PeerRun::Failed(format!(
                    "{} {}: no answer within {} s, killed",
                    request.peer,
                    request.scenario,
                    self.timeout.as_secs()
                ));
            }
        };
        parse_output(&output.stdout, &output.stderr)
    }
}

impl Drop for Peers {
    fn drop(&mut self) {
        if let Ok(scratch) = &self.driver {
            let _ = std::fs::remove_dir_all(scratch);
        }
    }
}

/// The driver's one JSON line, into a [`PeerRun`]. `stderr`'s tail explains a failure that
/// left no JSON.
pub fn parse_output(stdout: &[u8], stderr: &[u8]) -> PeerRun {
    let stdout = String::from_utf8_lossy(stdout);
    let tail = || {
        let text = String::from_utf8_lossy(stderr);
        let text = text.trim();
        let start = text.char_indices().rev().nth(400).map_or(0, |(i, _)| i);
        text[start..].to_owned()
    };
    let Some(value) = stdout
        .lines()
        .rev()
        .find_map(|line| serde_json::from_str::<Value>(line).ok())
    else {
        return PeerRun::Failed(format!("the peer driver printed no result: {}", tail()));
    };
    if let Some(error) = value.get("error").and_then(Value::as_str) {
        return if value.get("not_installed") == Some(&Value::Bool(true)) {
            PeerRun::NotInstalled(error.to_owned())
        } else {
            PeerRun::Failed(error.to_owned())
        };
    }
    let samples: Option<Vec<f64>> = value
        .get("samples_ms")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_f64).collect());
    match (value.get("method").and_then(Value::as_str), samples) {
        (Some(method), Some(samples)) if !samples.is_empty() => PeerRun::Measured {
            method: method.to_owned(),
            version: value
                .get("version")
                .and_then(Value::as_str)
                .filter(|v| !v.is_empty())
                .map(str::to_owned),
            samples,
        },
        _ => PeerRun::Failed(format!("the peer driver's result has no samples: {value}")),
    }
}

/// One peer's samples gathered over several rounds (interleaved with Paddock's).
#[derive(Debug, Default)]
pub struct PeerSamples {
    method: Option<String>,
    version: Option<String>,
    samples: Vec<f64>,
    problem: Option<PeerRun>,
}

impl PeerSamples {
    pub fn add(&mut self, run: PeerRun) {
        match run {
            PeerRun::Measured {
                method,
                version,
                samples,
            } => {
                self.method.get_or_insert(method);
                if self.version.is_none() {
                    self.version = version;
                }
                self.samples.extend(samples);
            }
            // The first problem is the one worth reading.
            problem @ (PeerRun::NotInstalled(_) | PeerRun::Failed(_)) => {
                self.problem.get_or_insert(problem);
            }
        }
    }

    /// True once a round failed or found the peer missing: later rounds would too.
    pub fn gave_up(&self) -> bool {
        self.problem.is_some()
    }

    /// The outcome, every sample multiplied by `scale` (e.g. 1000 for ms → µs). A round that
    /// failed fails the whole peer: a partial set of samples would be a biased one.
    pub fn outcome(self, scale: f64) -> Outcome {
        match (self.problem, self.method) {
            (Some(PeerRun::NotInstalled(reason)), _) => Outcome::NotInstalled { reason },
            (Some(PeerRun::Failed(error)), _) => Outcome::Failed { error },
            (Some(PeerRun::Measured { .. }) | None, Some(method)) => Outcome::measured(
                method,
                self.version,
                self.samples.iter().map(|v| v * scale).collect(),
            ),
            (Some(PeerRun::Measured { .. }) | None, None) => Outcome::Failed {
                error: "not measured".into(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn driver_output_is_parsed() {
        let ok = br#"{"peer":"monty","scenario":"trivial","method":"m","samples_ms":[1.5,2.5],"unit":"ms","params":{},"setup_ms":3,"version":"v1","wall_s":0.1}"#;
        assert_eq!(
            parse_output(ok, b""),
            PeerRun::Measured {
                method: "m".into(),
                version: Some("v1".into()),
                samples: vec![1.5, 2.5]
            }
        );
        let missing =
            br#"{"peer":"hermes","scenario":"terminal","error":"hermes not installed","not_installed":true}"#;
        assert_eq!(
            parse_output(missing, b""),
            PeerRun::NotInstalled("hermes not installed".into())
        );
        match parse_output(b"", b"Traceback\nKeyError: 'x'\n") {
            PeerRun::Failed(e) => assert!(e.contains("KeyError"), "{e}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_failed_round_fails_the_peer() {
        let mut s = PeerSamples::default();
        s.add(PeerRun::Measured {
            method: "m".into(),
            version: None,
            samples: vec![1.0],
        });
        assert!(!s.gave_up());
        s.add(PeerRun::Failed("boom".into()));
        assert!(s.gave_up());
        assert_eq!(
            s.outcome(1.0),
            Outcome::Failed {
                error: "boom".into()
            }
        );
        let mut s = PeerSamples::default();
        for v in [1.0, 2.0] {
            s.add(PeerRun::Measured {
                method: "m".into(),
                version: Some("v".into()),
                samples: vec![v],
            });
        }
        match s.outcome(1000.0) {
            Outcome::Measured { samples, .. } => assert_eq!(samples, vec![1000.0, 2000.0]),
            other => panic!("{other:?}"),
        }
    }
}
