//! Running a bench: [`run`] measures the chosen scenarios into a [`Report`], [`run_cli`] is
//! `paddock bench` (files, stdout, exit status), [`BenchArgs`] its flags and [`run_from_cli`]
//! what the `paddock` binary's command line calls.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use paddock_engine::codemode::Limits;
use paddock_engine::policy::Policy;

use crate::error::Result;
use crate::harness::{Bench, PREFORK, bench_engine};
use crate::peers::Peers;
use crate::report::Report;
use crate::{machine, markdown, output, scenarios};

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

/// Each peer driver call is killed after this long.
const PEER_TIMEOUT: Duration = Duration::from_secs(120);

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
        // Every crate of the workspace has its version (`version.workspace = true`).
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

/// The flags of `paddock bench` (the `paddock` binary's grammar includes them as they are).
#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    /// The quick set (fewer samples; what CI runs): under 2 minutes.
    #[arg(long)]
    pub quick: bool,
    /// Directory for results.json, results.md and one SVG chart per scenario.
    #[arg(long, value_name = "DIR", default_value = "bench-results")]
    pub out: PathBuf,
    /// Run only this scenario (repeatable); an unknown name lists them all.
    #[arg(long = "scenario", value_name = "NAME")]
    pub scenarios: Vec<String>,
    /// Print the results as JSON on stdout instead of markdown.
    #[arg(long)]
    pub json: bool,
    /// Also measure `terminal` on each docker/ssh/apptainer backend of this policy beside the
    /// bare tool (e.g. the file scripts/test-services.sh prints).
    #[arg(long, value_name = "POLICY")]
    pub backends: Option<PathBuf>,
    /// Peers installed by scripts/bench-peers.sh (default: $PADDOCK_PEERS_DIR, else
    /// /opt/paddock-peers).
    #[arg(long, value_name = "DIR")]
    pub peers: Option<PathBuf>,
}

/// `paddock bench`: the binary is this process (the sandbox zygote, `paddock run` and
/// `paddock serve` of the scenarios), the report's command line is this process's. Answers the
/// exit status (0 done, 1 a Paddock measurement failed, 2 the bench could not run).
pub async fn run_from_cli(args: BenchArgs) -> ExitCode {
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(err) => {
            let _ = writeln!(
                std::io::stderr(),
                "paddock: bench: cannot find this binary: {err}"
            );
            return ExitCode::from(2);
        }
    };
    let options = Options {
        exe,
        quick: args.quick,
        scenarios: args.scenarios,
        backends: args.backends,
        peers: args.peers,
        command: std::env::args().collect::<Vec<_>>().join(" "),
        progress: true,
    };
    run_cli(options, args.out, args.json).await
}
