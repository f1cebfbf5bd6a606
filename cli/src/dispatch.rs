//! Entry point and dispatch: the process-level subcommands (zygote, supervisor, agent,
//! sandbox, proxies) run before any runtime starts; the rest run on a tokio runtime.
//!
//! Exit status: 0 success; 1 the script or tool failed (its JSON is still printed on stdout);
//! 2 usage or configuration error (message on stderr, nothing on stdout).

use std::process::ExitCode;

use clap::Parser;

use crate::args::{CaCommand, Cli, Command, PolicyCommand, SessionsCommand, SnapshotsCommand};
use crate::common::{init_logging, usage_error};
use crate::policy::{policy_check, policy_corpus, policy_explain, policy_packs, tools};
use crate::scripts::{call, files_transfer, run_scripts};
use crate::serve::serve;
use crate::sessions::{
    sessions_close, sessions_fork, sessions_list, sessions_pause, sessions_snapshot,
    sessions_start, snapshots_list, snapshots_rm,
};

/// Entry point of the `paddock` binary.
pub(crate) fn run_main() -> ExitCode {
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
    runtime.block_on(dispatch(cli.command))
}

async fn dispatch(command: Command) -> ExitCode {
    match command {
        Command::Run {
            scripts,
            common,
            limits,
            events,
            keep_state,
        } => run_scripts(scripts, common, limits, events, keep_state).await,
        Command::Call {
            tool,
            args,
            common,
            backend,
            stream,
        } => call(tool, args, common, backend, stream).await,
        Command::Tools { policy, format } => tools(policy, format).await,
        Command::Serve {
            common,
            http,
            allow_origin,
            allow_host,
            e2b,
            e2b_tls,
        } => serve(common, http, allow_origin, allow_host, e2b, e2b_tls).await,
        Command::Ca {
            command: CaCommand::Bundle { out },
        } => crate::ca::ca_bundle(out.as_deref()),
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
        Command::Bench(args) => paddock_benches::run_from_cli(args).await,
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
