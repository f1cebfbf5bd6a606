//! The `paddock` command line (DESIGN.md section 6).
//!
//! Exit status: 0 success; 1 the script or tool failed (its JSON is still printed on stdout);
//! 2 usage or configuration error (message on stderr, nothing on stdout).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde_json::{Value, json};

use crate::codemode::{Limits, MAX_SCRIPT_BYTES};
use crate::engine::Engine;
use crate::events::EventSink;
use crate::policy::Policy;
use crate::registry::definitions;

#[derive(Parser)]
#[command(
    name = "paddock",
    version,
    about = "Sandboxed code execution for AI agents"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run scripts through run_tools_script and print one result object per line.
    Run {
        /// Script files; `-` reads one script from stdin.
        #[arg(required = true, value_name = "SCRIPT|-")]
        scripts: Vec<String>,
        #[command(flatten)]
        common: Common,
        /// Wall-clock limit per script, in seconds.
        #[arg(long, value_name = "S")]
        timeout: Option<f64>,
        #[arg(long, value_name = "N")]
        max_tool_calls: Option<u32>,
        #[arg(long, value_name = "N")]
        max_memory_mb: Option<u64>,
        #[arg(long, value_name = "N")]
        max_output_chars: Option<usize>,
        /// Append one JSON line per tool call event to FILE.
        #[arg(long, value_name = "FILE")]
        events: Option<PathBuf>,
        /// Notebook session: the scripts run one after another, in the order given, and each
        /// sees the names the earlier ones defined (as `[codemode] keep_state = true`). The
        /// state lives as long as this process.
        #[arg(long)]
        keep_state: bool,
    },
    /// Call any registered tool and print its JSON result.
    Call {
        tool: String,
        /// Arguments as a JSON object.
        #[arg(long, default_value = "{}")]
        args: String,
        #[command(flatten)]
        common: Common,
        /// Backend for an environment tool (terminal, process, python_execute).
        #[arg(long, value_name = "NAME")]
        backend: Option<String>,
    },
    /// List the tools a caller sees.
    Tools {
        #[arg(long)]
        policy: Option<PathBuf>,
        #[arg(long, value_enum, default_value_t = Format::Openai)]
        format: Format,
    },
    /// Serve Paddock's tools over MCP: stdio, or Streamable HTTP at http://ADDR/mcp.
    Serve {
        #[command(flatten)]
        common: Common,
        /// Listen on ADDR (e.g. 127.0.0.1:8931) instead of stdio. Beyond loopback only with
        /// PADDOCK_MCP_TOKEN set (clients then send `Authorization: Bearer <token>`).
        #[arg(long, value_name = "ADDR")]
        http: Option<String>,
        /// Also accept requests from this browser origin (e.g. https://app.example:443).
        #[arg(long, value_name = "ORIGIN")]
        allow_origin: Vec<String>,
        /// Also accept this Host header (a name this server is reached by).
        #[arg(long, value_name = "HOST")]
        allow_host: Vec<String>,
    },
    /// The engine for an embedding program (the Python package): JSON lines on stdin/stdout,
    /// see docs/embedding-protocol.md.
    Embed,
    /// Files into and out of a session's environment (a directory goes as a tar stream), on
    /// the backend the `files` route names (or `--backend`).
    Files {
        #[command(subcommand)]
        command: FilesCommand,
    },
    /// Paddock sessions: list them, close, pause, snapshot or fork one, start one from a
    /// snapshot.
    Sessions {
        #[command(subcommand)]
        command: SessionsCommand,
    },
    /// Snapshots of sessions (`paddock sessions snapshot`): list or remove them.
    Snapshots {
        #[command(subcommand)]
        command: SnapshotsCommand,
    },
    /// Check policy files.
    Policy {
        #[command(subcommand)]
        command: PolicyCommand,
    },
    /// Benchmarks: named scenarios, side by side with the peers (see docs/benchmarks.md).
    Bench(BenchArgs),
    /// Internal: become the sandbox zygote.
    #[command(name = "__sandbox-zygote", hide = true)]
    Zygote,
    /// Internal: supervise one background command.
    #[command(name = "__supervise", hide = true)]
    Supervise { dir: PathBuf },
    /// Fills a docker backend's warm pool (started detached by the backend).
    #[command(name = "__docker-warm", hide = true)]
    DockerWarm { spec: String },
    /// A background command's link to a docker exec (run by its supervisor).
    #[command(name = "__docker-attach", hide = true)]
    DockerAttach { spec: String },
    /// The in-environment agent (the local backend's sandboxed sessions run it).
    #[command(name = "__agent", hide = true)]
    Agent {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// The egress proxy of a state directory (started detached by the engine).
    #[command(name = "__egress-proxy", hide = true)]
    EgressProxy {
        #[arg(long)]
        home: PathBuf,
    },
    /// The local backend's sandbox: confine, then exec the command.
    #[command(name = "__sandbox-exec", hide = true)]
    SandboxExec {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

#[derive(clap::Args)]
struct Common {
    /// Policy file (default: $PADDOCK_POLICY, else the built-in policy: commands run in the
    /// workspace-write sandbox over the current directory, with no network).
    #[arg(long, value_name = "F")]
    policy: Option<PathBuf>,
    /// Session id: shell state, environments and background processes belong to it (default:
    /// `default`). `serve --session ID` closes it when the stdio connection ends.
    #[arg(long, value_name = "ID")]
    session: Option<String>,
}

#[derive(Subcommand)]
enum PolicyCommand {
    /// Exit 0 when every file is valid; else 2 with file:line: key: message per error.
    Check {
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// What the policy decides for a command: {"decision", "reason", "rule", "pack"}.
    Explain {
        #[arg(long)]
        command: String,
        #[arg(long)]
        policy: Option<PathBuf>,
        #[arg(long, default_value = "default")]
        session: String,
        /// The directory the command would run in (default: the current one); relative
        /// paths and `..` are judged where they land.
        #[arg(long)]
        cwd: Option<PathBuf>,
    },
    /// The rule packs and their rules, one JSON object per rule.
    Packs {
        #[arg(long)]
        policy: Option<PathBuf>,
    },
    /// Measures the approval rules on command corpora: files of `LABEL<TAB>COMMAND` lines
    /// (H: must be denied, D: must not be allowed, S: harmless, must be allowed; `\n` is a
    /// newline). Prints one report line per file and a total; `--misses` lists each miss.
    Corpus {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        #[arg(long)]
        policy: Option<PathBuf>,
        #[arg(long)]
        misses: bool,
    },
}

#[derive(Subcommand)]
enum FilesCommand {
    /// Copy LOCAL (a file, or a directory's contents) to REMOTE in the environment.
    Put {
        local: PathBuf,
        remote: String,
        #[command(flatten)]
        common: Common,
        #[arg(long, value_name = "NAME")]
        backend: Option<String>,
    },
    /// Copy REMOTE (a file, or a directory's contents) from the environment to LOCAL.
    Get {
        remote: String,
        local: PathBuf,
        #[command(flatten)]
        common: Common,
        #[arg(long, value_name = "NAME")]
        backend: Option<String>,
    },
}

#[derive(Subcommand)]
enum SessionsCommand {
    /// One JSON object per line: id, backends, idle_seconds, background_processes.
    List {
        #[arg(long, value_name = "F")]
        policy: Option<PathBuf>,
    },
    /// End a session now: its environments, background processes (receipts are kept), state.
    Close {
        id: String,
        #[arg(long, value_name = "F")]
        policy: Option<PathBuf>,
    },
    /// Freeze a session's processes (docker pause; SIGSTOP of the local sandbox's tree): no CPU
    /// until its next command, which resumes it.
    Pause {
        id: String,
        #[arg(long, value_name = "F")]
        policy: Option<PathBuf>,
    },
    /// Resume a paused session now.
    Resume {
        id: String,
        #[arg(long, value_name = "F")]
        policy: Option<PathBuf>,
    },
    /// Save what a new session needs to continue where this one is (its files, its shell
    /// state; not its running processes), as $PADDOCK_HOME/snapshots/NAME. One JSON line.
    Snapshot {
        id: String,
        /// Default: made from the session id.
        #[arg(long)]
        name: Option<String>,
        #[arg(long, value_name = "F")]
        policy: Option<PathBuf>,
    },
    /// Start new sessions from a snapshot, each independent; their ids one per line.
    Start {
        /// The snapshot (see `paddock snapshots list`).
        #[arg(long, value_name = "SNAPSHOT")]
        from: String,
        /// The new session's id (with --count N: ID-1 ... ID-N). Default: made from the
        /// snapshot's name.
        #[arg(long, value_name = "ID")]
        session: Option<String>,
        #[arg(long, default_value_t = 1)]
        count: usize,
        #[arg(long, value_name = "F")]
        policy: Option<PathBuf>,
    },
    /// Snapshot a session and start N new sessions from it in one step; their ids one per
    /// line (the snapshot is kept: `paddock snapshots rm` removes it).
    Fork {
        id: String,
        #[arg(long, default_value_t = 1)]
        count: usize,
        #[arg(long, value_name = "F")]
        policy: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum SnapshotsCommand {
    /// One JSON object per line: name, session, created, age_seconds, bytes, files (how each
    /// backend's files were kept), not_carried.
    List {
        #[arg(long, value_name = "F")]
        policy: Option<PathBuf>,
    },
    /// Remove snapshots: their directories and images.
    Rm {
        #[arg(required = true)]
        names: Vec<String>,
        #[arg(long, value_name = "F")]
        policy: Option<PathBuf>,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Openai,
    Mcp,
    Signatures,
}

/// The flags of `paddock bench`, parsed here and run by the [`BenchRunner`] the binary hands to
/// [`run_main`]: the harness (the `paddock-benches` crate) depends on this crate.
#[derive(Args, Debug, Clone)]
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

/// Runs `paddock bench` with its flags and answers the exit status (0 done, 1 a Paddock
/// measurement failed, 2 the bench could not run). The `paddock` binary passes
/// `paddock_benches::bench_runner()`.
pub type BenchRunner = Box<dyn FnOnce(BenchArgs) -> Pin<Box<dyn Future<Output = ExitCode>>>>;

/// Entry point of the `paddock` binary; `bench` runs `paddock bench`.
pub fn run_main(bench: BenchRunner) -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            let _ = err.print();
            return if err.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    if let Command::Supervise { dir } = &cli.command {
        return paddock_backends::supervisor::run_main(dir);
    }
    if let Command::Agent { args } = &cli.command {
        return ExitCode::from(u8::try_from(paddock_agent::run_main(args.clone())).unwrap_or(1));
    }
    if let Command::SandboxExec { args } = &cli.command {
        return ExitCode::from(
            u8::try_from(paddock_sandbox_worker::confine::shell::main(args)).unwrap_or(125),
        );
    }
    if let Command::EgressProxy { home } = &cli.command {
        init_logging();
        return egress_proxy(home);
    }
    if let Command::DockerWarm { spec } = &cli.command {
        init_logging();
        return paddock_backends::docker::warm_main(spec);
    }
    if let Command::DockerAttach { spec } = &cli.command {
        init_logging();
        return paddock_backends::docker::attach_main(spec);
    }
    if let Command::Zygote = cli.command {
        init_logging();
        return match paddock_sandbox_worker::zygote::run_main() {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                tracing::error!(%err, "sandbox zygote failed");
                ExitCode::from(2)
            }
        };
    }
    init_logging();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => return usage_error(&format!("cannot start the async runtime: {err}")),
    };
    runtime.block_on(dispatch(cli.command, bench))
}

/// Slow environment work outside an MCP call (a Slurm job waiting in the queue) says so in a
/// line on stderr.
fn progress_to_stderr() {
    paddock_backends::progress::set_default(Arc::new(|message: String| {
        let _ = writeln!(std::io::stderr(), "paddock: {message}");
    }));
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

fn usage_error(message: &str) -> ExitCode {
    let _ = writeln!(std::io::stderr(), "paddock: {message}");
    ExitCode::from(2)
}

fn print_line(value: &Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{value}");
    let _ = out.flush();
}

fn load_policy(path: Option<&Path>) -> Result<Policy, String> {
    let from_env = std::env::var_os("PADDOCK_POLICY").map(PathBuf::from);
    match path.map(Path::to_path_buf).or(from_env) {
        Some(path) => Policy::load(&path).map_err(|e| e.to_string()),
        None => Ok(Policy::builtin()),
    }
}

async fn dispatch(command: Command, bench: BenchRunner) -> ExitCode {
    match command {
        Command::Run {
            scripts,
            common,
            timeout,
            max_tool_calls,
            max_memory_mb,
            max_output_chars,
            events,
            keep_state,
        } => {
            run_scripts(
                scripts,
                common,
                Overrides {
                    timeout,
                    max_tool_calls,
                    max_memory_mb,
                    max_output_chars,
                },
                events,
                keep_state,
            )
            .await
        }
        Command::Call {
            tool,
            args,
            common,
            backend,
        } => call(tool, args, common, backend).await,
        Command::Tools { policy, format } => tools(policy, format).await,
        Command::Serve {
            common,
            http,
            allow_origin,
            allow_host,
        } => serve(common, http, allow_origin, allow_host).await,
        Command::Embed => match crate::embed::serve_stdio().await {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => usage_error(&err.to_string()),
        },
        Command::Files { command } => files_transfer(command).await,
        Command::Sessions {
            command: SessionsCommand::List { policy },
        } => sessions_list(policy.as_deref()).await,
        Command::Sessions {
            command: SessionsCommand::Close { id, policy },
        } => sessions_close(&id, policy.as_deref()).await,
        Command::Sessions {
            command: SessionsCommand::Pause { id, policy },
        } => sessions_pause(&id, policy.as_deref(), true).await,
        Command::Sessions {
            command: SessionsCommand::Resume { id, policy },
        } => sessions_pause(&id, policy.as_deref(), false).await,
        Command::Sessions {
            command: SessionsCommand::Snapshot { id, name, policy },
        } => sessions_snapshot(&id, name.as_deref(), policy.as_deref()).await,
        Command::Sessions {
            command:
                SessionsCommand::Start {
                    from,
                    session,
                    count,
                    policy,
                },
        } => sessions_start(&from, session.as_deref(), count, policy.as_deref()).await,
        Command::Sessions {
            command: SessionsCommand::Fork { id, count, policy },
        } => sessions_fork(&id, count, policy.as_deref()).await,
        Command::Snapshots {
            command: SnapshotsCommand::List { policy },
        } => snapshots_list(policy.as_deref()),
        Command::Snapshots {
            command: SnapshotsCommand::Rm { names, policy },
        } => snapshots_rm(&names, policy.as_deref()).await,
        Command::Policy {
            command: PolicyCommand::Check { files },
        } => policy_check(&files),
        Command::Policy {
            command:
                PolicyCommand::Explain {
                    command,
                    policy,
                    session,
                    cwd,
                },
        } => policy_explain(&command, policy.as_deref(), &session, cwd),
        Command::Policy {
            command: PolicyCommand::Packs { policy },
        } => policy_packs(policy.as_deref()),
        Command::Policy {
            command:
                PolicyCommand::Corpus {
                    files,
                    policy,
                    misses,
                },
        } => policy_corpus(&files, policy.as_deref(), misses),
        Command::Bench(args) => bench(args).await,
        Command::Zygote
        | Command::Supervise { .. }
        | Command::DockerAttach { .. }
        | Command::DockerWarm { .. }
        | Command::EgressProxy { .. }
        | Command::SandboxExec { .. }
        | Command::Agent { .. } => ExitCode::from(2),
    }
}

/// `paddock __egress-proxy --home H`: the state directory's egress proxy, until it has nothing
/// left to serve.
fn egress_proxy(home: &std::path::Path) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            tracing::error!(%err, "egress proxy: no runtime");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(paddock_network::daemon::run(home)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!(%err, "egress proxy failed");
            ExitCode::from(1)
        }
    }
}

struct Overrides {
    timeout: Option<f64>,
    max_tool_calls: Option<u32>,
    max_memory_mb: Option<u64>,
    max_output_chars: Option<usize>,
}

impl Overrides {
    fn apply(&self, mut limits: Limits) -> Result<Limits, String> {
        if let Some(t) = self.timeout {
            if !(t.is_finite() && t > 0.0 && t <= 3600.0) {
                return Err(format!(
                    "--timeout must be between 0 and 3600 seconds, got {t}"
                ));
            }
            limits.timeout = Duration::from_secs_f64(t);
        }
        if let Some(n) = self.max_tool_calls {
            limits.max_tool_calls = n;
        }
        if let Some(n) = self.max_memory_mb {
            if n == 0 || n > 16 * 1024 {
                return Err(format!(
                    "--max-memory-mb must be between 1 and 16384, got {n}"
                ));
            }
            limits.max_memory_mb = n;
        }
        if let Some(n) = self.max_output_chars {
            if n < 100 {
                return Err(format!("--max-output-chars must be at least 100, got {n}"));
            }
            limits.max_output_chars = n;
        }
        Ok(limits)
    }
}

/// Reads every script up front so bad input is reported before anything runs.
fn read_scripts(args: &[String]) -> Result<Vec<String>, String> {
    if args.iter().filter(|a| *a == "-").count() > 1 {
        return Err("`-` (stdin) can be given only once".into());
    }
    let mut scripts = Vec::with_capacity(args.len());
    for arg in args {
        let (name, bytes) = if arg == "-" {
            let mut buf = Vec::new();
            std::io::stdin()
                .take(MAX_SCRIPT_BYTES as u64 + 1)
                .read_to_end(&mut buf)
                .map_err(|e| format!("cannot read the script from stdin: {e}"))?;
            ("<stdin>".to_owned(), buf)
        } else {
            let path = Path::new(arg);
            let meta =
                std::fs::metadata(path).map_err(|e| format!("{arg}: cannot read script: {e}"))?;
            if meta.is_dir() {
                return Err(format!("{arg}: is a directory, not a script"));
            }
            if meta.len() > MAX_SCRIPT_BYTES as u64 {
                return Err(format!(
                    "{arg}: script is {} bytes; the limit is {MAX_SCRIPT_BYTES} bytes",
                    meta.len()
                ));
            }
            let bytes =
                std::fs::read(path).map_err(|e| format!("{arg}: cannot read script: {e}"))?;
            (arg.clone(), bytes)
        };
        if bytes.len() > MAX_SCRIPT_BYTES {
            return Err(format!(
                "{name}: script is over the {MAX_SCRIPT_BYTES} byte limit"
            ));
        }
        let text = String::from_utf8(bytes).map_err(|e| {
            format!(
                "{name}: script is not UTF-8 (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            )
        })?;
        if text.trim().is_empty() {
            return Err(format!("{name}: script is empty"));
        }
        scripts.push(text);
    }
    Ok(scripts)
}

async fn run_scripts(
    args: Vec<String>,
    common: Common,
    overrides: Overrides,
    events: Option<PathBuf>,
    keep_state: bool,
) -> ExitCode {
    progress_to_stderr();
    let mut policy = match load_policy(common.policy.as_deref()) {
        Ok(p) => p,
        Err(e) => return usage_error(&e),
    };
    policy.codemode.keep_state |= keep_state;
    if !policy.codemode.enabled {
        return usage_error("code mode is disabled by the policy ([codemode] enabled = false)");
    }
    let scripts = match read_scripts(&args) {
        Ok(s) => s,
        Err(e) => return usage_error(&e),
    };
    // A `paddock run` knows all the scripts it will run: children forked ahead for more would
    // only take the CPU from those (on 2 cores, a cold run of one script paid for two unused
    // confined children). Notebook cells run one after another in one kept child.
    let ahead = if policy.codemode.keep_state {
        0
    } else {
        scripts.len().saturating_sub(1)
    };
    let prefork = (*policy.codemode.prefork.get_ref()).min(ahead);
    *policy.codemode.prefork.get_mut() = prefork;
    let events = match events {
        Some(path) => match EventSink::to_file(&path) {
            Ok(sink) => Arc::new(sink),
            Err(e) => {
                return usage_error(&format!("{}: cannot open events file: {e}", path.display()));
            }
        },
        None => Arc::new(EventSink::default()),
    };
    let options = crate::engine::EngineOptions {
        session: common.session.clone(),
        backend: None,
        exe: None,
    };
    let registry = match crate::mcp::registry_with_bridge(&policy).await {
        Ok((registry, _bridge)) => registry,
        Err(e) => return usage_error(&e),
    };
    let engine = match Engine::with_options(policy, registry, events, options) {
        Ok(e) => Arc::new(e),
        Err(e) => return usage_error(&e.to_string()),
    };
    engine.start_sweep();
    let limits = match overrides.apply(engine.limits()) {
        Ok(l) => l,
        Err(e) => return usage_error(&e),
    };
    let mut all_ok = true;
    let mut report = |result: &Value| {
        all_ok &= result.get("ok").and_then(Value::as_bool).unwrap_or(false);
        print_line(result);
    };
    if engine.policy().codemode.keep_state {
        // Cells run in the order given, each after the one before it, printed as they end.
        for code in scripts {
            match engine.run_script(&code, &limits).await {
                Ok(result) => report(&result),
                Err(e) => return usage_error(&e.to_string()),
            }
        }
    } else {
        let handles: Vec<_> = scripts
            .into_iter()
            .map(|code| {
                let engine = engine.clone();
                let limits = limits.clone();
                tokio::spawn(async move { engine.run_script(&code, &limits).await })
            })
            .collect();
        for handle in handles {
            let result = match handle.await {
                Ok(Ok(result)) => result,
                Ok(Err(e)) => return usage_error(&e.to_string()),
                Err(e) => {
                    json!({"ok": false, "error_code": "codemode:sandbox_failed", "error": format!("engine task failed: {e}"), "output": ""})
                }
            };
            report(&result);
        }
    }
    engine.settle().await;
    if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

async fn call(tool: String, args: String, common: Common, backend: Option<String>) -> ExitCode {
    progress_to_stderr();
    let policy = match load_policy(common.policy.as_deref()) {
        Ok(p) => p,
        Err(e) => return usage_error(&e),
    };
    let args: Value = match serde_json::from_str(&args) {
        Ok(v) => v,
        Err(e) => return usage_error(&format!("--args is not valid JSON: {e}")),
    };
    let options = crate::engine::EngineOptions {
        session: common.session.clone(),
        backend,
        exe: None,
    };
    let registry = match crate::mcp::registry_with_bridge(&policy).await {
        Ok((registry, _bridge)) => registry,
        Err(e) => return usage_error(&e),
    };
    let engine = match Engine::with_options(policy, registry, Arc::default(), options) {
        Ok(e) => e,
        Err(e) => return usage_error(&e.to_string()),
    };
    engine.start_sweep();
    let code = match engine.call_tool(&tool, args).await {
        Ok(value) => {
            let failed = value.get("ok").and_then(Value::as_bool) == Some(false);
            print_line(&value);
            if failed {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(err) => {
            print_line(&err.to_json());
            ExitCode::from(1)
        }
    };
    // The answer is out already; only the exit waits for a sweep that had work to do.
    engine.settle().await;
    code
}

/// `paddock files put|get`: one JSON line saying what moved.
async fn files_transfer(command: FilesCommand) -> ExitCode {
    progress_to_stderr();
    let (common, backend) = match &command {
        FilesCommand::Put {
            common, backend, ..
        }
        | FilesCommand::Get {
            common, backend, ..
        } => (common, backend.clone()),
    };
    let policy = match load_policy(common.policy.as_deref()) {
        Ok(p) => p,
        Err(e) => return usage_error(&e),
    };
    let options = crate::engine::EngineOptions {
        session: common.session.clone(),
        backend,
        exe: None,
    };
    let registry = crate::registry::Registry::with_builtins();
    let engine = match Engine::with_options(policy, registry, Arc::default(), options) {
        Ok(e) => e,
        Err(e) => return usage_error(&e.to_string()),
    };
    let moved = match &command {
        FilesCommand::Put { local, remote, .. } => engine.upload(local, remote).await,
        FilesCommand::Get { remote, local, .. } => engine.download(remote, local).await,
    };
    match moved {
        Ok(value) => {
            print_line(&value);
            ExitCode::SUCCESS
        }
        Err(err) => {
            let _ = writeln!(std::io::stderr(), "paddock files: {err}");
            ExitCode::from(1)
        }
    }
}

async fn serve(
    common: Common,
    http: Option<String>,
    allow_origins: Vec<String>,
    allow_hosts: Vec<String>,
) -> ExitCode {
    let policy = match load_policy(common.policy.as_deref()) {
        Ok(p) => p,
        Err(e) => return usage_error(&e),
    };
    let options = crate::engine::EngineOptions {
        session: common.session.clone(),
        backend: None,
        exe: None,
    };
    let (shared, bridge) = match crate::mcp::build(policy, options).await {
        Ok(built) => built,
        Err(e) => return usage_error(&e),
    };
    shared.engine.start_sweep();
    shared.engine.prewarm();
    let sweeper = tokio::spawn(sweep_every_minute(shared.clone()));
    let stdio = http.is_none();
    let served = match http {
        Some(addr) => {
            let token = std::env::var("PADDOCK_MCP_TOKEN")
                .ok()
                .filter(|t| !t.is_empty());
            let options = crate::mcp::http::HttpOptions {
                addr,
                token,
                allow_origins,
                allow_hosts,
                session_per_client: common.session.is_none(),
            };
            crate::mcp::http::serve_http(shared.clone(), options).await
        }
        None => crate::mcp::serve_stdio(shared.clone()).await,
    };
    sweeper.abort();
    // A stdio server given `--session ID` was that session's one connection: it ends with it.
    // Without `--session` the id is the shared `default`, left to the idle sweep.
    if stdio && let Some(id) = common.session.as_deref() {
        match shared.engine.close_session(id).await {
            Ok(report) => {
                tracing::info!(session = %id, ok = report.all_ok(), "session closed with its connection")
            }
            Err(crate::engine::EngineError::Session(crate::sessions::SessionError::Unknown(_))) => {
            }
            Err(err) => tracing::warn!(session = %id, %err, "session not closed"),
        }
    }
    shared.engine.settle().await;
    bridge.stop().await;
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(crate::mcp::ServeError::Setup(e)) => usage_error(&e),
        Err(e) => {
            tracing::error!(%e, "paddock serve stopped");
            ExitCode::from(1)
        }
    }
}

/// `paddock serve` closes idle sessions every minute: a server runs for days.
async fn sweep_every_minute(shared: Arc<crate::mcp::server::Shared>) {
    let period = Duration::from_secs(60);
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    loop {
        tick.tick().await;
        let closed = shared.engine.close_idle_notebooks();
        if !closed.is_empty() {
            tracing::info!(sessions = ?closed, "idle notebook state closed");
        }
        if let Err(err) = shared.engine.sweep_now().await {
            tracing::warn!(%err, "session sweep failed");
        }
    }
}

/// An engine for the `sessions` commands: the policy's backends, no bridged MCP servers (they
/// play no part in a session's life).
fn sessions_engine(policy: Option<&Path>) -> Result<Engine, String> {
    let policy = load_policy(policy)?;
    Engine::with_options(
        policy,
        crate::registry::Registry::with_builtins(),
        Arc::default(),
        crate::engine::EngineOptions::default(),
    )
    .map_err(|e| e.to_string())
}

async fn sessions_list(policy: Option<&Path>) -> ExitCode {
    let engine = match sessions_engine(policy) {
        Ok(e) => e,
        Err(e) => return usage_error(&e),
    };
    match engine.list_sessions().await {
        Ok(list) => {
            for summary in list {
                print_line(&serde_json::to_value(&summary).unwrap_or_default());
            }
            ExitCode::SUCCESS
        }
        Err(e) => usage_error(&e.to_string()),
    }
}

async fn sessions_close(id: &str, policy: Option<&Path>) -> ExitCode {
    use crate::sessions::SessionError;
    let engine = match sessions_engine(policy) {
        Ok(e) => e,
        Err(e) => return usage_error(&e),
    };
    match engine.close_session(id).await {
        Ok(report) => {
            print_line(&serde_json::to_value(&report).unwrap_or_default());
            if report.all_ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(crate::engine::EngineError::Session(err @ SessionError::Unknown(_))) => {
            let _ = writeln!(std::io::stderr(), "paddock: {err}");
            print_line(&json!({"id": id, "closed": false, "error": err.to_string()}));
            ExitCode::from(1)
        }
        Err(e) => usage_error(&e.to_string()),
    }
}

/// `sessions pause` (`pause`) or `sessions resume`: one JSON line, exit 1 on failure.
async fn sessions_pause(id: &str, policy: Option<&Path>, pause: bool) -> ExitCode {
    let engine = match sessions_engine(policy) {
        Ok(e) => e,
        Err(e) => return usage_error(&e),
    };
    let done = if pause {
        engine
            .pause_session(id)
            .await
            .map(|report| serde_json::to_value(&report).unwrap_or_default())
    } else {
        engine
            .resume_session(id)
            .await
            .map(|()| json!({"id": id, "resumed": true}))
    };
    match done {
        Ok(line) => {
            print_line(&line);
            ExitCode::SUCCESS
        }
        Err(err) => {
            let _ = writeln!(std::io::stderr(), "paddock: {err}");
            print_line(&json!({"id": id, "error": err.to_string()}));
            ExitCode::from(1)
        }
    }
}

/// A failed snapshot command: the error on stderr and as a JSON line, exit 1.
fn snapshot_failed(err: &crate::engine::EngineError) -> ExitCode {
    let _ = writeln!(std::io::stderr(), "paddock: {err}");
    print_line(&json!({"error": err.to_string()}));
    ExitCode::from(1)
}

async fn sessions_snapshot(id: &str, name: Option<&str>, policy: Option<&Path>) -> ExitCode {
    let engine = match sessions_engine(policy) {
        Ok(e) => e,
        Err(e) => return usage_error(&e),
    };
    match engine.snapshot_session(id, name).await {
        Ok(summary) => {
            print_line(&serde_json::to_value(&summary).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Err(err) => snapshot_failed(&err),
    }
}

/// The ids of `count` sessions started from `snapshot`: `--session` (suffixed `-1`... when
/// more than one), or made from the snapshot's name.
fn new_session_ids(snapshot: &str, session: Option<&str>, count: usize) -> Vec<String> {
    match session {
        Some(id) if count == 1 => vec![id.to_owned()],
        Some(id) => (1..=count).map(|i| format!("{id}-{i}")).collect(),
        None => crate::snapshots::fork_ids(snapshot, count),
    }
}

async fn sessions_start(
    snapshot: &str,
    session: Option<&str>,
    count: usize,
    policy: Option<&Path>,
) -> ExitCode {
    if count == 0 {
        return usage_error("--count must be at least 1");
    }
    let engine = match sessions_engine(policy) {
        Ok(e) => e,
        Err(e) => return usage_error(&e),
    };
    let ids = new_session_ids(snapshot, session, count);
    match engine.start_from_snapshot(snapshot, &ids).await {
        Ok(()) => {
            let mut out = std::io::stdout().lock();
            for id in &ids {
                let _ = writeln!(out, "{id}");
            }
            ExitCode::SUCCESS
        }
        Err(err) => {
            let _ = writeln!(std::io::stderr(), "paddock: {err}");
            ExitCode::from(1)
        }
    }
}

async fn sessions_fork(id: &str, count: usize, policy: Option<&Path>) -> ExitCode {
    if count == 0 {
        return usage_error("--count must be at least 1");
    }
    let engine = match sessions_engine(policy) {
        Ok(e) => e,
        Err(e) => return usage_error(&e),
    };
    match engine.fork_session(id, count).await {
        Ok((summary, ids)) => {
            let _ = writeln!(
                std::io::stderr(),
                "paddock: snapshot {} of session {id} ({} bytes) kept; `paddock snapshots rm {}` removes it",
                summary.name,
                summary.bytes,
                summary.name
            );
            let mut out = std::io::stdout().lock();
            for id in &ids {
                let _ = writeln!(out, "{id}");
            }
            ExitCode::SUCCESS
        }
        Err(err) => {
            let _ = writeln!(std::io::stderr(), "paddock: {err}");
            ExitCode::from(1)
        }
    }
}

fn snapshots_list(policy: Option<&Path>) -> ExitCode {
    let engine = match sessions_engine(policy) {
        Ok(e) => e,
        Err(e) => return usage_error(&e),
    };
    match engine.list_snapshots() {
        Ok(list) => {
            for entry in list {
                match entry {
                    Ok(summary) => print_line(&serde_json::to_value(&summary).unwrap_or_default()),
                    Err((name, error)) => print_line(&json!({"name": name, "error": error})),
                }
            }
            ExitCode::SUCCESS
        }
        Err(err) => snapshot_failed(&err),
    }
}

async fn snapshots_rm(names: &[String], policy: Option<&Path>) -> ExitCode {
    let engine = match sessions_engine(policy) {
        Ok(e) => e,
        Err(e) => return usage_error(&e),
    };
    let mut code = ExitCode::SUCCESS;
    for name in names {
        match engine.remove_snapshot(name).await {
            Ok(()) => print_line(&json!({"name": name, "removed": true})),
            Err(err) => {
                let _ = writeln!(std::io::stderr(), "paddock: {err}");
                print_line(&json!({"name": name, "removed": false, "error": err.to_string()}));
                code = ExitCode::from(1);
            }
        }
    }
    code
}

async fn tools(policy: Option<PathBuf>, format: Format) -> ExitCode {
    let policy = match load_policy(policy.as_deref()) {
        Ok(p) => p,
        Err(e) => return usage_error(&e),
    };
    let registry = match crate::mcp::registry_with_bridge(&policy).await {
        Ok((registry, _bridge)) => registry,
        Err(e) => return usage_error(&e),
    };
    let engine = match Engine::new(policy, registry, Arc::default()) {
        Ok(e) => e,
        Err(e) => return usage_error(&e.to_string()),
    };
    engine.start_sweep();
    let specs = engine.tool_specs();
    match format {
        Format::Openai => print_line(&definitions::openai(&specs)),
        Format::Mcp => print_line(&definitions::mcp(&specs)),
        Format::Signatures => {
            let mut out = std::io::stdout().lock();
            for s in &specs {
                let _ = writeln!(out, "{}", definitions::signature(s));
            }
        }
    }
    engine.settle().await;
    ExitCode::SUCCESS
}

fn policy_check(files: &[PathBuf]) -> ExitCode {
    let mut failed = false;
    for file in files {
        if let Err(err) = Policy::load(file) {
            failed = true;
            let _ = writeln!(std::io::stderr(), "{err}");
        }
    }
    if failed {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    }
}

fn approval_gate(policy: Option<&Path>) -> Result<crate::approval::ApprovalGate, ExitCode> {
    let policy = load_policy(policy).map_err(|e| usage_error(&e))?;
    crate::approval::ApprovalGate::from_policy(&policy, crate::tools::environment::state_root())
        .map_err(|e| usage_error(&e))
}

fn policy_explain(
    command: &str,
    policy: Option<&Path>,
    session: &str,
    cwd: Option<PathBuf>,
) -> ExitCode {
    let gate = match approval_gate(policy) {
        Ok(g) => g,
        Err(code) => return code,
    };
    let cwd = cwd
        .or_else(|| std::env::current_dir().ok())
        .and_then(|c| std::path::absolute(c).ok());
    let explanation = gate.explain_in(command, session, cwd.as_deref().and_then(Path::to_str));
    print_line(&serde_json::to_value(&explanation).unwrap_or_default());
    ExitCode::SUCCESS
}

fn policy_packs(policy: Option<&Path>) -> ExitCode {
    let gate = match approval_gate(policy) {
        Ok(g) => g,
        Err(code) => return code,
    };
    match gate.catalogue() {
        Ok(catalogue) => {
            for rule in catalogue.rules() {
                let (examples, counter_examples) = rule.examples();
                print_line(&serde_json::json!({
                    "pack": rule.pack,
                    "rule": rule.id,
                    "severity": rule.severity,
                    "description": rule.description,
                    "examples": examples,
                    "counter_examples": counter_examples,
                }));
            }
            ExitCode::SUCCESS
        }
        Err(e) => usage_error(&e),
    }
}

fn policy_corpus(files: &[PathBuf], policy: Option<&Path>, misses: bool) -> ExitCode {
    let gate = match approval_gate(policy) {
        Ok(g) => g,
        Err(code) => return code,
    };
    let mut total = crate::approval::corpus::Tally::default();
    let mut out = std::io::stdout().lock();
    for file in files {
        let text = match std::fs::read_to_string(file) {
            Ok(t) => t,
            Err(e) => return usage_error(&format!("{}: {e}", file.display())),
        };
        let tally = crate::approval::corpus::measure(&gate, &text);
        let _ = writeln!(out, "{}: {}", file.display(), tally.report());
        if misses {
            for miss in &tally.misses {
                let _ = writeln!(out, "  {miss}");
            }
        }
        total.add(&tally);
    }
    if files.len() > 1 {
        let _ = writeln!(out, "total: {}", total.report());
    }
    ExitCode::SUCCESS
}
