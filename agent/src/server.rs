//! The agent's listening side: one Unix socket, one thread per connection, one lock file so that
//! two agents never serve the same session, and an optional idle exit.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::AgentError;
use crate::contexts::{ContextHost, ContextOptions};
use crate::live_shell::LiveShells;
use crate::protocol::{PROTOCOL_VERSION, Reply, Request, read_message, write_message};
use crate::run::{discard_stdin, reply_error, serve_run};
use crate::spare::SparePool;

/// What `serve` was asked to do.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub socket: PathBuf,
    /// Exit after this long with no connection open.
    pub idle_exit: Option<Duration>,
    /// Carry `127.0.0.1:PORT` in the environment to the egress proxy ([`crate::egress`]).
    pub egress_port: Option<u16>,
}

/// Connections open now, and when the last one ended (unix seconds).
#[derive(Default)]
struct Activity {
    open: AtomicUsize,
    last: AtomicU64,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The lock file beside the socket: held for the agent's whole life.
pub fn lock_path(socket: &Path) -> PathBuf {
    let mut name = socket.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// Serves until `Shutdown` or the idle exit. Answers `AlreadyRunning` when another agent holds
/// the session's lock.
pub fn serve(options: &ServeOptions) -> Result<(), AgentError> {
    let lock_file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(lock_path(&options.socket))
        .map_err(|e| AgentError::Socket {
            path: options.socket.clone(),
            source: e,
        })?;
    match rustix::fs::flock(
        &lock_file,
        rustix::fs::FlockOperation::NonBlockingLockExclusive,
    ) {
        Ok(()) => {}
        Err(rustix::io::Errno::WOULDBLOCK) => return Err(AgentError::AlreadyRunning),
        Err(e) => {
            return Err(AgentError::Socket {
                path: options.socket.clone(),
                source: e.into(),
            });
        }
    }
    // Holding the lock, any socket file left here is a dead agent's.
    let _ = std::fs::remove_file(&options.socket);
    let listener = UnixListener::bind(&options.socket).map_err(|e| AgentError::Socket {
        path: options.socket.clone(),
        source: e,
    })?;
    let _ = std::fs::set_permissions(&options.socket, std::fs::Permissions::from_mode(0o600));
    // Before the first command: a command must never find the proxy's port closed.
    if let Some(port) = options.egress_port {
        crate::egress::start(port, &options.socket).map_err(|e| AgentError::Socket {
            path: PathBuf::from(format!("127.0.0.1:{port}")),
            source: e,
        })?;
    }
    // Boot files of spare shells live beside the socket (a directory the agent may write).
    // The agent's own environment is what its commands would get (a container's, a remote
    // login's; the local sandbox starts it with the commands' environment), so spares keep it.
    let spares = SparePool::new(
        options
            .socket
            .parent()
            .map_or_else(|| PathBuf::from("/tmp"), Path::to_path_buf),
        false,
    );
    // The session's live shell keeps its snapshots, boot files and FIFOs there too.
    let live = LiveShells::new(
        options
            .socket
            .parent()
            .map_or_else(|| PathBuf::from("/tmp"), Path::to_path_buf),
    );
    // The session's Python contexts live as long as the agent, and end with it.
    let contexts = Arc::new(ContextHost::new(ContextOptions::default()));
    let activity = Arc::new(Activity::default());
    activity.last.store(now_secs(), Ordering::SeqCst);
    // The watchdog: an agent whose socket was removed (its session closed, its state
    // directory deleted) can never be reached again and exits; so does an idle one.
    {
        let activity = activity.clone();
        let socket = options.socket.clone();
        let idle_exit = options.idle_exit;
        let contexts = contexts.clone();
        std::thread::Builder::new().spawn(move || {
            loop {
                std::thread::sleep(Duration::from_secs(1));
                if std::fs::symlink_metadata(&socket).is_err() {
                    contexts.close_all();
                    crate::run::end_kept_detached();
                    std::process::exit(0);
                }
                let idle_for = now_secs().saturating_sub(activity.last.load(Ordering::SeqCst));
                if let Some(idle) = idle_exit
                    && activity.open.load(Ordering::SeqCst) == 0
                    && idle_for >= idle.as_secs()
                {
                    contexts.close_all();
                    crate::run::end_kept_detached();
                    let _ = std::fs::remove_file(&socket);
                    std::process::exit(0);
                }
            }
        })?;
    }
    for stream in listener.incoming() {
        let stream = match stream {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                contexts.close_all();
                crate::run::end_kept_detached();
                return Err(AgentError::Io(e));
            }
        };
        activity.open.fetch_add(1, Ordering::SeqCst);
        let counted = activity.clone();
        let activity = activity.clone();
        let spares = spares.clone();
        let live = live.clone();
        let contexts = contexts.clone();
        let socket = options.socket.clone();
        let conversation_thread = std::thread::Builder::new().spawn(move || {
            let outcome = conversation(stream, &spares, &live, &contexts, &activity);
            activity.last.store(now_secs(), Ordering::SeqCst);
            activity.open.fetch_sub(1, Ordering::SeqCst);
            match outcome {
                Ok(Next::Continue) => {}
                Ok(Next::Exit) => {
                    spares.drain();
                    live.drain();
                    contexts.close_all();
                    crate::run::end_kept_detached();
                    let _ = std::fs::remove_file(&socket);
                    std::process::exit(0);
                }
                // The engine went away mid-conversation: nothing to tell anyone.
                Err(_) => {}
            }
        });
        // No thread (the session at its process ceiling, which counts threads): the connection
        // closes unanswered, which the engine reports; the agent goes on serving.
        if conversation_thread.is_err() {
            counted.open.fetch_sub(1, Ordering::SeqCst);
        }
    }
    contexts.close_all();
    crate::run::end_kept_detached();
    Ok(())
}

enum Next {
    Continue,
    Exit,
}

/// One connection: hello, then one request, or several when runs keep the connection
/// ([`RunRequest::keep_connection`](crate::protocol::RunRequest::keep_connection)).
fn conversation(
    mut stream: UnixStream,
    spares: &Arc<SparePool>,
    live: &Arc<LiveShells>,
    contexts: &ContextHost,
    activity: &Activity,
) -> Result<Next, AgentError> {
    let hello: Request = read_message(&mut stream, "hello")?;
    let Request::Hello { version } = hello else {
        reply_error(&mut stream, "the first message must be hello".into())?;
        return Ok(Next::Continue);
    };
    write_message(
        &mut stream,
        &Reply::Hello {
            version: PROTOCOL_VERSION,
            agent: env!("CARGO_PKG_VERSION").to_owned(),
            pid: std::process::id(),
        },
    )?;
    let request: Request = match read_message(&mut stream, "a request") {
        Ok(r) => r,
        // A health check: hello and hang up.
        Err(_) => return Ok(Next::Continue),
    };
    let mut next = answer(stream, request, version, spares, live, contexts)?;
    while let Answered::Kept(mut stream) = next {
        // A kept connection waiting for its next request is not activity: the agent still
        // exits when idle (the engine then finds the connection closed and opens a new one).
        activity.last.store(now_secs(), Ordering::SeqCst);
        activity.open.fetch_sub(1, Ordering::SeqCst);
        let request = read_message::<Request>(&mut stream, "a request");
        activity.open.fetch_add(1, Ordering::SeqCst);
        let Ok(request) = request else {
            // The engine let the connection go.
            return Ok(Next::Continue);
        };
        next = answer(stream, request, version, spares, live, contexts)?;
    }
    Ok(match next {
        Answered::Exit => Next::Exit,
        Answered::Kept(_) | Answered::Done => Next::Continue,
    })
}

/// How a request left its connection.
enum Answered {
    Done,
    /// Open for the next request.
    Kept(UnixStream),
    /// The agent exits (a shutdown).
    Exit,
}

/// Answers one request of a greeted connection.
fn answer(
    mut stream: UnixStream,
    request: Request,
    version: u32,
    spares: &Arc<SparePool>,
    live: &Arc<LiveShells>,
    contexts: &ContextHost,
) -> Result<Answered, AgentError> {
    match request {
        Request::Shutdown => {
            write_message(&mut stream, &Reply::Bye)?;
            Ok(Answered::Exit)
        }
        Request::Run(_)
        | Request::Files(_)
        | Request::ConnectionOwner { .. }
        | Request::Context(_)
        | Request::Hello { .. }
            if version != PROTOCOL_VERSION =>
        {
            reply_error(
                &mut stream,
                format!(
                    "protocol version {version} is not this agent's ({PROTOCOL_VERSION}); send shutdown and start a matching agent"
                ),
            )?;
            Ok(Answered::Done)
        }
        Request::Run(run) => {
            if run.argv.is_empty() {
                if run.stdin {
                    discard_stdin(&mut stream);
                }
                reply_error(&mut stream, "run: argv is empty".into())?;
                return Ok(Answered::Done);
            }
            Ok(serve_run(stream, run, spares, live)?.map_or(Answered::Done, Answered::Kept))
        }
        Request::Files(files) => {
            crate::files::serve_files(stream, files)?;
            Ok(Answered::Done)
        }
        Request::ConnectionOwner { port } => {
            let run_id = crate::egress::run_of_port(port);
            write_message(&mut stream, &Reply::Owner { run_id })?;
            Ok(Answered::Done)
        }
        Request::Context(request) => {
            crate::contexts::serve_context(stream, request, contexts)?;
            Ok(Answered::Done)
        }
        Request::Hello { .. } => {
            reply_error(&mut stream, "hello was already said".into())?;
            Ok(Answered::Done)
        }
    }
}
