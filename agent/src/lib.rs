//! `paddock-agent`: the small program that runs inside an environment (a container, an
//! Apptainer instance, a remote host) and serves one Paddock session there over a Unix socket,
//! so that a command costs a connection and a fork instead of a `docker exec`, an `apptainer
//! exec` or an ssh round trip.
//!
//! - [`protocol`] — frames and messages, shared with the engine (versioned; two frozen messages);
//! - [`server`] — the socket, a thread per connection, the lock that keeps one agent per session;
//! - [`run`] — one program: pipes or a terminal, output frames, stdin frames, tree kills;
//! - [`live_shell`] — a session's shell kept alive with its state restored, forking a subshell
//!   per command (no exec, no restore, nothing written when the command changed nothing);
//! - [`files`] — file operations (`paddock-files`) served in the environment, no process;
//! - [`contexts`] — the session's long-lived CPython contexts (persistent globals, rich results);
//! - [`daemon`] — `serve --daemon`: start detached, answer once listening;
//! - [`egress`] — `serve --egress-port PORT`: the environment's way to the egress proxy (and
//!   `egress-forward ... -- PROGRAM`, the same for one program in a namespace of its own);
//! - [`shell_state`] — a finished command's shell state put into place, merged with what
//!   overlapping commands of the session saved meanwhile (also the engine's, for local runs);
//! - [`relay`] — an agent on another machine reached over a byte stream the engine has to it
//!   (`relay-listen` on the engine's side, `serve --relay-stdio` on the node's);
//! - [`terminal`] — `terminal -- PROGRAM...`: one program on a terminal allocated here (for
//!   clients whose own terminal has no name inside the environment: Apptainer instances).
//!
//! What a command sees (the session's cwd, exports, functions, aliases) is kept by the same
//! bash wrapper as before the agent: the engine sends the wrapper's argv, the agent runs it.

#![forbid(unsafe_code)]
#![deny(clippy::print_stdout)]

pub mod changes;
pub mod contexts;
pub mod daemon;
pub mod egress;
pub mod files;
pub mod live_shell;
pub mod protocol;
pub mod relay;
pub mod run;
pub mod server;
pub mod shell_state;
pub mod spare;
pub mod terminal;

use std::path::PathBuf;
use std::time::Duration;

/// `serve` exits with this when another agent already serves the socket.
pub const EXIT_ALREADY_RUNNING: i32 = 3;

/// Errors of the agent.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Protocol(#[from] protocol::ProtocolError),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("socket {path}: {source}")]
    Socket {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("another agent already serves this socket")]
    AlreadyRunning,
    #[error("the agent did not start: {0}")]
    StartFailed(String),
    #[error("a lock was poisoned by a panicking thread")]
    Poisoned,
    #[error("usage: {0}")]
    Usage(String),
}

const USAGE: &str = "paddock-agent serve --socket PATH [--daemon] [--idle-exit SECONDS] \
                     [--egress-port PORT] [--relay-stdio [--relay-direct]] | \
                     paddock-agent relay-listen --socket PATH [--send FILE] [--direct-host HOST] \
                     -- PROGRAM [ARGS...] | \
                     paddock-agent relay-node --socket PATH [--direct] -- PROGRAM [ARGS...] | \
                     paddock-agent terminal -- PROGRAM [ARGS...] | \
                     paddock-agent egress-forward --socket EGRESS_SOCKET --port PORT [--run ID] \
                     -- PROGRAM [ARGS...] | \
                     paddock-agent changes-save [--max-bytes N] [--exclude PATH]... | \
                     paddock-agent changes-restore | \
                     paddock-agent commit-state STATE_DIR TAG | paddock-agent version";

/// The program: `serve`, `terminal`, `commit-state` or `version`. Returns the exit status (for `terminal`, the
/// program's).
pub fn run_main(args: Vec<String>) -> i32 {
    let outcome = match args.split_first() {
        Some((first, rest)) if first == "terminal" => match rest.split_first() {
            Some((dashes, argv)) if dashes == "--" => terminal::run_on_terminal(argv),
            _ => Err(AgentError::Usage(USAGE.into())),
        },
        Some((first, rest)) if first == "egress-forward" => egress_forward(rest),
        Some((first, rest)) if first == "relay-listen" => relay_listen(rest),
        Some((first, rest)) if first == "relay-node" => relay_node(rest),
        Some((first, rest)) if first == "changes-save" => changes::save_main(rest),
        Some((first, rest)) if first == "changes-restore" => changes::restore_main(rest),
        _ => dispatch(&args).map(|()| 0),
    };
    match outcome {
        Ok(code) => code,
        Err(AgentError::AlreadyRunning) => {
            eprintln!("paddock-agent: another agent already serves this socket");
            EXIT_ALREADY_RUNNING
        }
        Err(err) => {
            eprintln!("paddock-agent: {err}");
            // Also on stdout: some clients (apptainer exec) keep stderr from the engine.
            #[expect(clippy::print_stdout, reason = "the start command's only channel")]
            {
                println!("paddock-agent: {err}");
            }
            if matches!(err, AgentError::Usage(_)) {
                2
            } else {
                1
            }
        }
    }
}

/// The arguments of a command that runs a program, `--socket PATH [OPTION...] -- PROGRAM
/// [ARGS...]`: the socket, and the program with its arguments. The other options are read with
/// `option(name, value)`, where `value()` takes the option's argument. No `--`, no `--socket` or
/// an option without its argument is a usage error.
fn socket_and_program<'a>(
    args: &'a [String],
    mut option: impl FnMut(
        &str,
        &mut dyn FnMut() -> Result<&'a String, AgentError>,
    ) -> Result<(), AgentError>,
) -> Result<(PathBuf, Vec<String>), AgentError> {
    let mut socket = None;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        if arg == "--" {
            let socket = socket.ok_or_else(|| AgentError::Usage(USAGE.into()))?;
            return Ok((socket, rest.cloned().collect()));
        }
        let mut value = || rest.next().ok_or_else(|| AgentError::Usage(USAGE.into()));
        if arg == "--socket" {
            socket = Some(PathBuf::from(value()?));
        } else {
            option(arg, &mut value)?;
        }
    }
    Err(AgentError::Usage(USAGE.into()))
}

fn unknown_argument(arg: &str) -> AgentError {
    AgentError::Usage(format!("unknown argument {arg}; {USAGE}"))
}

/// `egress-forward --socket PATH --port PORT [--run ID] -- PROGRAM [ARGS...]`.
fn egress_forward(args: &[String]) -> Result<i32, AgentError> {
    let mut port = None;
    let mut run = None;
    let (socket, argv) = socket_and_program(args, |arg, value| {
        match arg {
            "--port" => {
                let given = value()?;
                port = Some(
                    given
                        .parse::<u16>()
                        .map_err(|_| AgentError::Usage(format!("--port {given}: not a port")))?,
                );
            }
            "--run" => run = Some(value()?.clone()),
            other => return Err(unknown_argument(other)),
        }
        Ok(())
    })?;
    let port = port.ok_or_else(|| AgentError::Usage(USAGE.into()))?;
    Ok(egress::forward_for(port, socket, run, &argv)?)
}

/// `relay-listen --socket PATH [--send FILE] -- PROGRAM [ARGS...]`.
fn relay_listen(args: &[String]) -> Result<i32, AgentError> {
    let mut send = None;
    let mut direct_host = None;
    let (socket, argv) = socket_and_program(args, |arg, value| {
        match arg {
            "--send" => send = Some(PathBuf::from(value()?)),
            "--direct-host" => direct_host = Some(value()?.clone()),
            other => return Err(unknown_argument(other)),
        }
        Ok(())
    })?;
    relay::listen(&relay::ListenOptions {
        socket,
        send,
        argv,
        direct_host,
    })
}

/// `relay-node --socket PATH [--direct] -- PROGRAM [ARGS...]`.
fn relay_node(args: &[String]) -> Result<i32, AgentError> {
    let mut direct = false;
    let (socket, argv) = socket_and_program(args, |arg, _| {
        match arg {
            "--direct" => direct = true,
            other => return Err(unknown_argument(other)),
        }
        Ok(())
    })?;
    relay::relay_node(&socket, direct, &argv)
}

fn dispatch(args: &[String]) -> Result<(), AgentError> {
    match args.first().map(String::as_str) {
        // A wrapper run outside a served connection (a background command) commits its
        // session state the way the agent commits a served run's.
        Some("commit-state") => match &args[1..] {
            [dir, tag] => {
                shell_state::commit_state(std::path::Path::new(dir), tag);
                Ok(())
            }
            _ => Err(AgentError::Usage(USAGE.into())),
        },
        Some("version") => {
            // stdout is not a protocol channel for this subcommand.
            #[expect(clippy::print_stdout, reason = "the answer of `version`")]
            {
                println!(
                    "paddock-agent {} protocol {}",
                    env!("CARGO_PKG_VERSION"),
                    protocol::PROTOCOL_VERSION
                );
            }
            Ok(())
        }
        Some("serve") => {
            let mut socket = None;
            let mut idle_exit = None;
            let mut egress_port = None;
            let mut daemon = false;
            let mut relay_stdio = false;
            let mut relay_direct = false;
            let mut passed = Vec::new();
            let mut rest = args[1..].iter();
            while let Some(arg) = rest.next() {
                match arg.as_str() {
                    "--daemon" => daemon = true,
                    "--relay-stdio" => relay_stdio = true,
                    "--relay-direct" => relay_direct = true,
                    "--socket" => {
                        let value = rest.next().ok_or_else(|| AgentError::Usage(USAGE.into()))?;
                        socket = Some(PathBuf::from(value));
                        passed.extend([arg.clone(), value.clone()]);
                    }
                    "--idle-exit" => {
                        let value = rest.next().ok_or_else(|| AgentError::Usage(USAGE.into()))?;
                        let secs: u64 = value.parse().map_err(|_| {
                            AgentError::Usage(format!(
                                "--idle-exit {value}: not a number of seconds"
                            ))
                        })?;
                        idle_exit = Some(Duration::from_secs(secs));
                        passed.extend([arg.clone(), value.clone()]);
                    }
                    "--egress-port" => {
                        let value = rest.next().ok_or_else(|| AgentError::Usage(USAGE.into()))?;
                        let port: u16 = value.parse().map_err(|_| {
                            AgentError::Usage(format!("--egress-port {value}: not a port"))
                        })?;
                        egress_port = Some(port);
                        passed.extend([arg.clone(), value.clone()]);
                    }
                    other => return Err(unknown_argument(other)),
                }
            }
            let socket = socket.ok_or_else(|| AgentError::Usage(USAGE.into()))?;
            let options = server::ServeOptions {
                socket,
                idle_exit,
                egress_port,
            };
            if relay_stdio && daemon {
                Err(AgentError::Usage(
                    "--relay-stdio serves its own standard input: not with --daemon".into(),
                ))
            } else if relay_direct && !relay_stdio {
                Err(AgentError::Usage(
                    "--relay-direct takes its token from --relay-stdio's stream".into(),
                ))
            } else if relay_stdio {
                relay::serve_stdio(options, relay_direct)
            } else if daemon {
                daemon::start_detached(&options.socket, &passed)
            } else {
                server::serve(&options)
            }
        }
        _ => Err(AgentError::Usage(USAGE.into())),
    }
}
