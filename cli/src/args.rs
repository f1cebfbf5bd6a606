//! The command line's grammar: every subcommand and flag of `paddock` (DESIGN.md section 6),
//! as clap parses it. `paddock bench`'s flags are the benchmark harness's own
//! ([`paddock_benches::BenchArgs`]).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
#[derive(Parser)]
#[command(
    name = "paddock",
    version,
    about = "Sandboxed code execution for AI agents"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Run scripts through run_tools_script and print one result object per line.
    Run {
        /// Script files; `-` reads one script from stdin.
        #[arg(required = true, value_name = "SCRIPT|-")]
        scripts: Vec<String>,
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        limits: Overrides,
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
        /// Print the command's output as it is written, one JSON line per chunk
        /// (`{"stream": "stdout"|"stderr", "text": ...}`), then the result as the last line.
        #[arg(long)]
        stream: bool,
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
        /// Serve an E2B-compatible API (REST and the sandbox daemon, plain HTTP) at ADDR, for
        /// the `e2b` SDK with E2B_API_URL=E2B_SANDBOX_URL=http://ADDR; keys from `[e2b]
        /// api_keys`. Alone, or beside `--http`.
        #[arg(long, value_name = "ADDR")]
        e2b: Option<String>,
        /// Serve the E2B API over TLS as *.DOMAIN (a certificate signed by the Paddock CA),
        /// for SDKs without the URL overrides: E2B_DOMAIN=DOMAIN:PORT and
        /// SSL_CERT_FILE=<the file `paddock ca bundle` writes>. A DOMAIN under .localhost needs
        /// no DNS (the SDK resolves it to loopback).
        #[arg(long, value_name = "DOMAIN", requires = "e2b")]
        e2b_tls: Option<String>,
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
    /// Paddock's certificate authority (one per state directory, $PADDOCK_HOME): what
    /// clients trust it by.
    Ca {
        #[command(subcommand)]
        command: CaCommand,
    },
    /// Check policy files.
    Policy {
        #[command(subcommand)]
        command: PolicyCommand,
    },
    /// Benchmarks: named scenarios, side by side with the peers (see docs/benchmarks.md).
    Bench(paddock_benches::BenchArgs),
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
pub(crate) struct Common {
    /// Policy file (default: $PADDOCK_POLICY, else the built-in policy: commands run in the
    /// workspace-write sandbox over the current directory, with no network).
    #[arg(long, value_name = "F")]
    pub(crate) policy: Option<PathBuf>,
    /// Session id: shell state, environments and background processes belong to it (default:
    /// `default`). `serve --session ID` closes it when the stdio connection ends.
    #[arg(long, value_name = "ID")]
    pub(crate) session: Option<String>,
}

#[derive(Subcommand)]
pub(crate) enum PolicyCommand {
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
pub(crate) enum FilesCommand {
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
pub(crate) enum SessionsCommand {
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
pub(crate) enum CaCommand {
    /// The bundle for SSL_CERT_FILE: this machine's root certificates, then the Paddock CA
    /// (made on first use). Printed, or written to --out.
    Bundle {
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
pub(crate) enum SnapshotsCommand {
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

/// `paddock run`'s limits, over the policy's `[codemode]` ones.
#[derive(Args)]
pub(crate) struct Overrides {
    /// Wall-clock limit per script, in seconds.
    #[arg(long, value_name = "S")]
    pub(crate) timeout: Option<f64>,
    #[arg(long, value_name = "N")]
    pub(crate) max_tool_calls: Option<u32>,
    #[arg(long, value_name = "N")]
    pub(crate) max_memory_mb: Option<u64>,
    #[arg(long, value_name = "N")]
    pub(crate) max_output_chars: Option<usize>,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum Format {
    Openai,
    Mcp,
    Signatures,
}
