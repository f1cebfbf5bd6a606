//! `paddock bench`: what a call costs and how the cost grows, measured the way a sceptical
//! engineer would: named scenarios, each with its method, its samples, median and spread, and
//! the peers (Monty, a fresh CPython per script, Hermes' terminal, the bare tools) measured in
//! the same run on the same machine, interleaved with Paddock's samples so that both see the
//! same load.
//!
//! Layout: [`scenarios`] measure, [`peers`] runs the peer driver, [`stats`] summarises,
//! [`report`] holds the results, [`markdown`] and [`output`] render them (with [`chart`]
//! drawing the SVGs), [`machine`] describes the machine. Paddock is measured inside this
//! process, through the same engine a library user holds (no CLI start-up, except in the
//! `startup` and `mcp` scenarios, which are about exactly that).

pub mod chart;
pub mod machine;
pub mod markdown;
pub mod output;
pub mod peers;
pub mod report;
pub mod scenarios;
pub mod stats;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::codemode::Limits;
use crate::codemode::pool::PoolError;
use crate::engine::{Engine, EngineError, EngineOptions};
use crate::policy::{Policy, PolicyError};
use crate::registry::{
    CallContext, Registry, RegistryError, Tool, ToolError, ToolFuture, ToolSpec,
};

use self::peers::Peers;
use self::report::Report;

/// Why a bench could not run, or why one Paddock measurement failed (peers' failures are not
/// errors: they are reported beside the figures).
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error("registering the bench's noop tool: {0}")]
    Registry(#[from] RegistryError),
    #[error("sandbox pool: {0}")]
    Pool(#[from] PoolError),
    #[error("{what}: {source}")]
    Tool {
        what: String,
        #[source]
        source: ToolError,
    },
    /// A script or tool answered, but not what the measurement expects.
    #[error("{what}: unexpected result {result}")]
    Unexpected { what: String, result: String },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{what}: no answer within {seconds} s")]
    Timeout { what: String, seconds: u64 },
    #[error("unknown scenario {name:?}; the scenarios are: {known}")]
    UnknownScenario { name: String, known: String },
    #[error("mcp: {0}")]
    Mcp(String),
}

pub type Result<T> = std::result::Result<T, BenchError>;

impl BenchError {
    pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let what = what.into();
        move |source| Self::Io { what, source }
    }

    pub fn tool(what: impl Into<String>) -> impl FnOnce(ToolError) -> Self {
        let what = what.into();
        move |source| Self::Tool { what, source }
    }

    pub fn unexpected(what: impl Into<String>, result: &Value) -> Self {
        let mut result = result.to_string();
        if result.len() > 500 {
            let cut = (0..=500)
                .rev()
                .find(|i| result.is_char_boundary(*i))
                .unwrap_or(0);
            result.truncate(cut);
            result.push('…');
        }
        Self::Unexpected {
            what: what.into(),
            result,
        }
    }
}

/// A tool that does nothing: measures the call path itself.
pub struct Noop;

impl Tool for Noop {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "noop",
            "bench",
            "Does nothing; returns an empty object.",
            json!({"type": "object", "properties": {}}),
        )
    }

    fn call(&self, _args: Value, _ctx: CallContext) -> ToolFuture {
        Box::pin(async { Ok(json!({})) })
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// The `paddock` binary: the sandbox zygote, `paddock run` and `paddock serve`.
    pub exe: PathBuf,
    /// Fewer samples: the CI set.
    pub quick: bool,
    /// Scenario names; empty for all.
    pub scenarios: Vec<String>,
    /// A policy whose docker/ssh/apptainer backends get the `backend_*` scenarios.
    pub backends: Option<PathBuf>,
    /// The directory scripts/bench-peers.sh installed the peers into.
    pub peers: Option<PathBuf>,
    /// The command line, for the report.
    pub command: String,
    /// One line per scenario on stderr as it runs.
    pub progress: bool,
}

/// Everything a scenario measures with.
pub struct Bench {
    pub exe: PathBuf,
    /// The default engine (built-in policy, 4 pre-forked children, the `noop` tool), warm.
    pub engine: Arc<Engine>,
    /// Generous limits, so that no scenario measures a limit instead of the work.
    pub limits: Limits,
    pub peers: Peers,
    pub quick: bool,
    pub backends: Option<PathBuf>,
}

/// Pre-forked children of the bench's engine (the built-in policy has 2; 4 keeps a burst of
/// concurrent scripts off the fork path for longer, as a deployment under load would be set).
pub const PREFORK: usize = 4;

/// Each peer driver call is killed after this long.
const PEER_TIMEOUT: Duration = Duration::from_secs(120);

impl Bench {
    /// `quick` in a quick run, else `full`.
    pub fn pick<T>(&self, quick: T, full: T) -> T {
        if self.quick { quick } else { full }
    }

    /// Runs a script on the warm engine; its whole result when it succeeded.
    pub async fn script(&self, what: &str, code: &str) -> Result<Value> {
        let result = self.engine.run_script(code, &self.limits).await?;
        if result["ok"] != json!(true) {
            return Err(BenchError::unexpected(what, &result));
        }
        Ok(result)
    }

    /// Runs a script and takes its result as a number (the scripts that time themselves).
    pub async fn timed_script(&self, what: &str, code: &str) -> Result<f64> {
        let result = self.script(what, code).await?;
        result["result"]
            .as_f64()
            .ok_or_else(|| BenchError::unexpected(what, &result))
    }
}

/// Builds the bench's engine: the built-in policy with [`PREFORK`] children and `noop`.
pub fn bench_engine(exe: PathBuf, policy: Policy) -> Result<Engine> {
    let mut registry = Registry::with_builtins();
    registry.register(Arc::new(Noop))?;
    let options = EngineOptions {
        session: Some("bench".into()),
        backend: None,
        exe: Some(exe),
    };
    Ok(Engine::with_options(
        policy,
        registry,
        Arc::default(),
        options,
    )?)
}

/// Milliseconds of a duration.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Runs the chosen scenarios and returns the report.
pub async fn run(options: Options) -> Result<Report> {
    let names = scenarios::select(&options.scenarios, options.backends.is_some())?;
    let started = Instant::now();
    let started_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let mut machine = machine::Machine::probe();
    let mut policy = Policy::builtin();
    policy.codemode.prefork = toml::Spanned::new(0..0, PREFORK);
    let engine = Arc::new(bench_engine(options.exe.clone(), policy)?);
    engine.pool().warm_up().await?;
    let bench = Bench {
        exe: options.exe,
        engine,
        limits: Limits {
            max_tool_calls: 1000,
            timeout: Duration::from_secs(120),
            max_memory_mb: 256,
            max_output_chars: 2_000_000,
        },
        peers: Peers::locate(options.peers, PEER_TIMEOUT),
        quick: options.quick,
        backends: options.backends,
    };
    let mut reports = Vec::new();
    for name in names {
        let t = Instant::now();
        let mut done = scenarios::run(name, &bench).await;
        for report in &mut done {
            report.finish();
        }
        if options.progress {
            let _ = writeln!(
                std::io::stderr(),
                "paddock bench: {name} ({:.1} s){}",
                t.elapsed().as_secs_f64(),
                done.iter()
                    .filter_map(|r| r.error.as_deref().or(r.skipped.as_deref()))
                    .map(|why| format!(": {why}"))
                    .collect::<String>()
            );
        }
        reports.extend(done);
    }
    machine.finish();
    Ok(Report {
        paddock_version: env!("CARGO_PKG_VERSION").into(),
        started_at,
        command: options.command,
        profile: if options.quick { "quick" } else { "full" }.into(),
        machine,
        peers: bench.peers.info(),
        wall_s: started.elapsed().as_secs_f64(),
        scenarios: reports,
    })
}

/// `paddock bench`: runs, writes the results into `out`, prints the markdown report (or, with
/// `json`, the JSON one) on stdout. Exit status 0; 1 when a Paddock measurement failed; 2 when
/// the bench could not run at all (bad arguments, no engine).
pub async fn run_cli(options: Options, out: PathBuf, json_only: bool) -> ExitCode {
    let report = match run(options).await {
        Ok(report) => report,
        Err(err) => {
            let _ = writeln!(std::io::stderr(), "paddock bench: {err}");
            return ExitCode::from(2);
        }
    };
    let written = output::write_all(&report, &out);
    let mut stdout = std::io::stdout().lock();
    if json_only {
        let _ = writeln!(
            stdout,
            "{}",
            serde_json::to_string(&report).unwrap_or_default()
        );
    } else {
        let _ = write!(stdout, "{}", markdown::render(&report, None));
    }
    match written {
        Ok(files) => {
            let _ = writeln!(
                std::io::stderr(),
                "paddock bench: {} files written into {} (results.md, results.json, charts) in \
                 {:.0} s",
                files.len(),
                out.display(),
                report.wall_s
            );
        }
        Err(err) => {
            let _ = writeln!(std::io::stderr(), "paddock bench: {err}");
            return ExitCode::from(1);
        }
    }
    if report.paddock_failed() {
        let _ = writeln!(
            std::io::stderr(),
            "paddock bench: some Paddock measurements failed (see the report)"
        );
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}
