//! The egress proxy as a process: one per state directory (`paddock __egress-proxy --home H`),
//! started by the first engine that needs it, shared by every session of that directory and
//! found again by later `paddock call` processes through its control socket
//! ([`crate::control`]).
//!
//! Each registered environment gets a Unix listener at its agent's `egress.sock`, served by a
//! [`Proxy`] under that session's policy. A registration ends when its session closes (the
//! engine says so, or the agent's directory is gone) or after [`REGISTRATION_IDLE`] unused;
//! the process exits once it has served nothing for [`EXIT_AFTER`].
//!
//! Every refusal is one JSON line in `$PADDOCK_HOME/logs/network.jsonl`.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};

use crate::authority::Authority;
use crate::control::{
    CONTROL_SOCKET, ControlReply, ControlRequest, HostAnswer, HostQuestion, Registration,
    SessionTotals, WirePolicy, network_dir,
};
use crate::egress::{EgressPolicy, Unknown};
use crate::proxy::{Attempt, HostApprover, Observer, Proxy, RunLookup};

/// How often registrations are checked against their directories.
const SWEEP_EVERY: Duration = Duration::from_secs(5);
/// A registration no engine refreshed and no connection used for this long is dropped.
const REGISTRATION_IDLE: Duration = Duration::from_secs(2 * 3600);
/// The proxy exits after serving nothing (no registration, no approver) for this long.
const EXIT_AFTER: Duration = Duration::from_secs(30);

/// Why the proxy could not run.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

fn io_at(path: &Path) -> impl FnOnce(std::io::Error) -> DaemonError + '_ {
    move |source| DaemonError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// The policy a registration carries, as the proxy decides with it.
fn egress_of(policy: &WirePolicy) -> Result<EgressPolicy, String> {
    let unknown = match policy.unknown.as_str() {
        "ask" => Unknown::Ask,
        _ => Unknown::Deny,
    };
    EgressPolicy::new(
        &policy.allow,
        &policy.deny,
        unknown,
        policy.allow_private,
        &policy.resolve,
    )
    .map_err(|e| e.to_string())
}

/// `network.jsonl`: one line per refusal.
struct Journal {
    path: PathBuf,
    file: Mutex<Option<std::fs::File>>,
}

impl Journal {
    fn write(&self, line: &serde_json::Value) {
        let Ok(mut file) = self.file.lock() else {
            return;
        };
        if file.is_none() {
            if let Some(dir) = self.path.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            *file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)
                .ok();
        }
        if let Some(file) = file.as_mut() {
            // One write per line: lines of concurrent refusals never interleave.
            let _ = file.write_all(format!("{line}\n").as_bytes());
        }
    }
}

/// Reports one registration's decisions: refusals to the journal, every decision to tracing.
struct SessionObserver {
    session: String,
    backend: String,
    journal: Arc<Journal>,
    last_used: Arc<AtomicU64>,
    started: Instant,
}

impl Observer for SessionObserver {
    fn attempt(&self, attempt: &Attempt) {
        self.last_used
            .store(self.started.elapsed().as_secs(), Ordering::Relaxed);
        tracing::debug!(session = %self.session, host = %attempt.host, port = attempt.port, decision = attempt.decision, rule = %attempt.rule, "egress");
        if attempt.decision != "deny" {
            return;
        }
        let timestamp_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        self.journal.write(&serde_json::json!({
            "timestamp_ms": timestamp_ms,
            "session": self.session,
            "backend": self.backend,
            "host": attempt.host,
            "port": attempt.port,
            "method": attempt.method,
            "rule": attempt.rule,
            "decision": attempt.decision,
            "run_id": attempt.run_id,
        }));
    }
}

type Question = (HostQuestion, oneshot::Sender<HostAnswer>);

/// The engines that answer for each session, newest last.
#[derive(Default)]
struct Approvers {
    by_session: Mutex<HashMap<String, Vec<mpsc::Sender<Question>>>>,
    next_id: AtomicU64,
}

/// Asks one session's engines about a host in neither list; remembers a "session" answer.
struct SessionApprover {
    session: String,
    backend: String,
    approvers: Arc<Approvers>,
    remembered: Mutex<HashSet<(String, u16)>>,
}

impl SessionApprover {
    async fn ask(&self, host: &str, port: u16, run_id: Option<&str>) -> bool {
        if self
            .remembered
            .lock()
            .is_ok_and(|r| r.contains(&(host.to_owned(), port)))
        {
            return true;
        }
        loop {
            let newest = self.approvers.by_session.lock().ok().and_then(|mut all| {
                let list = all.get_mut(&self.session)?;
                list.retain(|sender| !sender.is_closed());
                list.last().cloned()
            });
            // Nobody to ask: no.
            let Some(sender) = newest else {
                return false;
            };
            let (reply, answer) = oneshot::channel();
            let question = HostQuestion {
                id: self.approvers.next_id.fetch_add(1, Ordering::Relaxed),
                session: self.session.clone(),
                backend: self.backend.clone(),
                host: host.to_owned(),
                port,
                run_id: run_id.map(str::to_owned),
            };
            if sender.send((question, reply)).await.is_err() {
                continue;
            }
            // A connection that went away mid-question: the next engine, if any.
            let Ok(answer) = answer.await else {
                continue;
            };
            if answer.allow
                && answer.remember
                && let Ok(mut remembered) = self.remembered.lock()
            {
                remembered.insert((host.to_owned(), port));
            }
            return answer.allow;
        }
    }
}

impl HostApprover for SessionApprover {
    fn approve<'a>(
        &'a self,
        host: &'a str,
        port: u16,
        run_id: Option<&'a str>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send + 'a>> {
        Box::pin(self.ask(host, port, run_id))
    }
}

/// One environment served.
struct Served {
    registration: Registration,
    proxy: Arc<Proxy>,
    task: tokio::task::JoinHandle<()>,
    /// Seconds since the daemon started at the last registration or decision.
    last_used: Arc<AtomicU64>,
}

struct Daemon {
    journal: Arc<Journal>,
    approvers: Arc<Approvers>,
    served: Mutex<HashMap<PathBuf, Served>>,
    started: Instant,
    /// Seconds since start of the last moment anything was served.
    busy_at: AtomicU64,
    /// This program's build ([`crate::control::build_identity`]).
    build: String,
    /// An engine of another build registered: this proxy gives way to a new one.
    retire: tokio::sync::Notify,
    /// `$PADDOCK_HOME/network`, where the home's CA lives.
    dir: PathBuf,
    /// The home's CA, loaded (or made) by the first registration with a credential.
    authority: tokio::sync::OnceCell<Arc<Authority>>,
}

impl Daemon {
    /// The home's CA, made on first use.
    fn authority(&self) -> Result<Arc<Authority>, String> {
        if let Some(authority) = self.authority.get() {
            return Ok(authority.clone());
        }
        let authority = Arc::new(Authority::load_or_create(&self.dir).map_err(|e| e.to_string())?);
        // Registrations are handled one at a time under `served`'s lock: no other is made.
        let _ = self.authority.set(authority.clone());
        Ok(authority)
    }

    fn now(&self) -> u64 {
        self.started.elapsed().as_secs()
    }

    fn register(self: &Arc<Self>, registration: Registration) -> ControlReply {
        if !registration.build.is_empty() && registration.build != self.build {
            self.retire.notify_one();
            return ControlReply::failed(format!(
                "{}: this proxy is {}, the engine {}",
                crate::control::STALE,
                self.build,
                registration.build
            ));
        }
        let policy = match egress_of(&registration.policy) {
            Ok(policy) => policy,
            Err(err) => return ControlReply::failed(format!("bad [network] policy: {err}")),
        };
        let Ok(mut served) = self.served.lock() else {
            return ControlReply::failed("the proxy's table is poisoned".into());
        };
        if let Some(current) = served.get(&registration.listen)
            && current.registration == registration
            && !current.task.is_finished()
            && registration.listen.exists()
        {
            current.last_used.store(self.now(), Ordering::Relaxed);
            return ControlReply::ok();
        }
        if let Some(old) = served.remove(&registration.listen) {
            old.task.abort();
        }
        let _ = std::fs::remove_file(&registration.listen);
        let listener = match UnixListener::bind(&registration.listen) {
            Ok(listener) => listener,
            Err(err) => {
                return ControlReply::failed(format!(
                    "cannot listen on {}: {err}",
                    registration.listen.display()
                ));
            }
        };
        // The agent inside may run as the image's user, not ours.
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(
                &registration.listen,
                std::fs::Permissions::from_mode(0o666),
            );
        }
        let last_used = Arc::new(AtomicU64::new(self.now()));
        let observer = Arc::new(SessionObserver {
            session: registration.session.clone(),
            backend: registration.backend.clone(),
            journal: self.journal.clone(),
            last_used: last_used.clone(),
            started: self.started,
        });
        let approver = Arc::new(SessionApprover {
            session: registration.session.clone(),
            backend: registration.backend.clone(),
            approvers: self.approvers.clone(),
            remembered: Mutex::default(),
        });
        let credentials = match crate::proxy::Credential::all(&registration.policy.credentials) {
            Ok(credentials) => credentials,
            Err(err) => return ControlReply::failed(format!("bad [[network.credentials]]: {err}")),
        };
        let mut proxy = Proxy::new(policy)
            .with_observer(observer)
            .with_approver(approver);
        if !credentials.is_empty() {
            // An https:// host with a credential is terminated with the home's CA, which the
            // environment trusts through the files placed beside its socket.
            let placed = self.authority().and_then(|authority| {
                let dir = registration.listen.parent().unwrap_or(Path::new("/"));
                authority
                    .place_in(dir)
                    .map(|()| authority)
                    .map_err(|e| e.to_string())
            });
            match placed {
                Ok(authority) => proxy = proxy.with_authority(authority),
                Err(err) => {
                    return ControlReply::failed(format!(
                        "[[network.credentials]] needs the egress proxy's CA: {err}"
                    ));
                }
            }
        }
        let proxy = Arc::new(proxy.with_credentials(credentials));
        let serving = proxy.clone();
        let agent_socket = registration
            .listen
            .with_file_name(paddock_agent::protocol::SOCKET_NAME);
        let task = tokio::spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((stream, _)) => {
                        let serving = serving.clone();
                        let agent_socket = agent_socket.clone();
                        tokio::spawn(async move {
                            let (stream, preamble) = read_preamble(stream).await;
                            let owner = match preamble {
                                Some(Preamble { run: Some(run), .. }) => {
                                    Some(Arc::new(KnownRun(run)) as Arc<dyn RunLookup>)
                                }
                                Some(Preamble { port, run: None }) => Some(Arc::new(AgentOwner {
                                    agent_socket,
                                    port,
                                    found: tokio::sync::OnceCell::new(),
                                })
                                    as Arc<dyn RunLookup>),
                                None => None,
                            };
                            serving.serve_connection(stream, owner).await;
                        });
                    }
                    Err(err) => {
                        tracing::warn!(%err, "egress listener failed");
                        return;
                    }
                }
            }
        });
        tracing::info!(session = %registration.session, backend = %registration.backend, listen = %registration.listen.display(), "serving an environment");
        served.insert(
            registration.listen.clone(),
            Served {
                registration,
                proxy,
                task,
                last_used,
            },
        );
        ControlReply::ok()
    }

    fn unregister(&self, listen: &Path) -> ControlReply {
        if let Ok(mut served) = self.served.lock()
            && let Some(old) = served.remove(listen)
        {
            old.task.abort();
            let _ = std::fs::remove_file(listen);
        }
        ControlReply::ok()
    }

    fn stats(&self) -> ControlReply {
        let mut reply = ControlReply::ok();
        if let Ok(served) = self.served.lock() {
            let mut totals: HashMap<(String, String), crate::proxy::Totals> = HashMap::new();
            for one in served.values() {
                let key = (
                    one.registration.session.clone(),
                    one.registration.backend.clone(),
                );
                let add = one.proxy.counters().totals();
                let sum = totals.entry(key).or_default();
                sum.requests += add.requests;
                sum.refused += add.refused;
                sum.bytes_up += add.bytes_up;
                sum.bytes_down += add.bytes_down;
            }
            reply.stats = totals
                .into_iter()
                .map(|((session, backend), totals)| SessionTotals {
                    session,
                    backend,
                    totals,
                })
                .collect();
            reply
                .stats
                .sort_by(|a, b| (&a.session, &a.backend).cmp(&(&b.session, &b.backend)));
        }
        reply
    }

    /// Drops registrations whose environment is gone or unused; whether anything is served.
    fn sweep(&self) -> bool {
        let now = self.now();
        let Ok(mut served) = self.served.lock() else {
            return true;
        };
        served.retain(|listen, one| {
            let dir_gone = listen.parent().is_none_or(|dir| !dir.exists());
            let idle = now.saturating_sub(one.last_used.load(Ordering::Relaxed))
                > REGISTRATION_IDLE.as_secs();
            if dir_gone || idle || one.task.is_finished() {
                tracing::info!(session = %one.registration.session, dir_gone, idle, "no longer serving an environment");
                one.task.abort();
                if !dir_gone {
                    let _ = std::fs::remove_file(listen);
                }
                return false;
            }
            true
        });
        let approvers = self
            .approvers
            .by_session
            .lock()
            .map(|mut all| {
                all.retain(|_, list| {
                    list.retain(|s| !s.is_closed());
                    !list.is_empty()
                });
                !all.is_empty()
            })
            .unwrap_or(false);
        !served.is_empty() || approvers
    }

    async fn control(self: Arc<Self>, stream: UnixStream) {
        let (reader, mut writer) = stream.into_split();
        let mut lines = BufReader::new(reader).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            self.busy_at.store(self.now(), Ordering::Relaxed);
            let request: ControlRequest = match serde_json::from_str(&line) {
                Ok(request) => request,
                Err(err) => {
                    let reply = ControlReply::failed(format!("unreadable request: {err}"));
                    let _ = send(&mut writer, &reply).await;
                    return;
                }
            };
            let reply = match request {
                ControlRequest::Ping => ControlReply::ok(),
                ControlRequest::Register(registration) => self.register(registration),
                ControlRequest::Unregister { listen } => self.unregister(&listen),
                ControlRequest::Stats => self.stats(),
                ControlRequest::Approver { session } => {
                    if send(&mut writer, &ControlReply::ok()).await.is_err() {
                        return;
                    }
                    self.answer_questions(session, lines, writer).await;
                    return;
                }
            };
            if send(&mut writer, &reply).await.is_err() {
                return;
            }
        }
    }

    /// Carries questions to one approver connection and its answers back, until it closes.
    async fn answer_questions(
        &self,
        session: String,
        mut lines: tokio::io::Lines<BufReader<tokio::net::unix::OwnedReadHalf>>,
        mut writer: tokio::net::unix::OwnedWriteHalf,
    ) {
        let (sender, mut questions) = mpsc::channel::<Question>(16);
        if let Ok(mut all) = self.approvers.by_session.lock() {
            all.entry(session).or_default().push(sender);
        }
        let mut waiting: HashMap<u64, oneshot::Sender<HostAnswer>> = HashMap::new();
        loop {
            tokio::select! {
                question = questions.recv() => {
                    let Some((question, reply)) = question else { return };
                    let id = question.id;
                    if send(&mut writer, &question).await.is_err() {
                        return;
                    }
                    waiting.insert(id, reply);
                }
                line = lines.next_line() => {
                    let Ok(Some(line)) = line else { return };
                    if let Ok(answer) = serde_json::from_str::<HostAnswer>(&line)
                        && let Some(reply) = waiting.remove(&answer.id)
                    {
                        let _ = reply.send(answer);
                    }
                }
            }
        }
    }
}

/// What the agent's first line on a carried connection says: the client's port in the
/// environment, and the run when the listener served one program only
/// (`paddock-egress port=PORT [run=ID]`).
#[derive(Debug, PartialEq)]
struct Preamble {
    port: u16,
    run: Option<String>,
}

impl Preamble {
    fn parse(line: &str) -> Option<Self> {
        let mut fields = line.trim_end().strip_prefix("paddock-egress ")?.split(' ');
        let port = fields.next()?.strip_prefix("port=")?.parse().ok()?;
        let run = match fields.next() {
            Some(field) => Some(field.strip_prefix("run=")?.to_owned()),
            None => None,
        };
        Some(Self { port, run })
    }
}

/// The preamble and the stream after it. A connection without one (a command that dialled
/// the socket itself) is served all the same, its run unknown.
async fn read_preamble(stream: UnixStream) -> (BufReader<UnixStream>, Option<Preamble>) {
    let mut reader = BufReader::new(stream);
    let starts = matches!(reader.fill_buf().await, Ok(buf) if buf.starts_with(b"paddock-egress "));
    if !starts {
        return (reader, None);
    }
    let mut line = Vec::new();
    let mut limited = (&mut reader).take(200);
    if limited.read_until(b'\n', &mut line).await.is_err() {
        return (reader, None);
    }
    let preamble = Preamble::parse(&String::from_utf8_lossy(&line));
    (reader, preamble)
}

/// A connection whose run the agent named in its preamble.
struct KnownRun(String);

impl RunLookup for KnownRun {
    fn run_id(
        &self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<String>> + Send + '_>> {
        Box::pin(std::future::ready(Some(self.0.clone())))
    }
}

/// Asks the agent beside an environment's egress socket which run owns a connection, once.
struct AgentOwner {
    agent_socket: PathBuf,
    port: u16,
    found: tokio::sync::OnceCell<Option<String>>,
}

impl RunLookup for AgentOwner {
    fn run_id(
        &self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<String>> + Send + '_>> {
        Box::pin(async move {
            self.found
                .get_or_init(|| async {
                    let socket = self.agent_socket.clone();
                    let port = self.port;
                    tokio::task::spawn_blocking(move || ask_owner(&socket, port))
                        .await
                        .ok()
                        .flatten()
                })
                .await
                .clone()
        })
    }
}

/// `ConnectionOwner` over the agent's own protocol (a short blocking conversation).
fn ask_owner(socket: &Path, port: u16) -> Option<String> {
    use paddock_agent::protocol::{PROTOCOL_VERSION, Reply, Request, read_message, write_message};
    let mut stream = std::os::unix::net::UnixStream::connect(socket).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(3))).ok()?;
    write_message(
        &mut stream,
        &Request::Hello {
            version: PROTOCOL_VERSION,
        },
    )
    .ok()?;
    let _: Reply = read_message(&mut stream, "hello").ok()?;
    write_message(&mut stream, &Request::ConnectionOwner { port }).ok()?;
    match read_message(&mut stream, "the owner").ok()? {
        Reply::Owner { run_id } => run_id,
        _ => None,
    }
}

async fn send(
    writer: &mut tokio::net::unix::OwnedWriteHalf,
    value: &impl serde::Serialize,
) -> std::io::Result<()> {
    let mut line = serde_json::to_string(value).map_err(std::io::Error::other)?;
    line.push('\n');
    writer.write_all(line.as_bytes()).await
}

/// Runs the proxy of `home` until it has nothing to serve. Returns at once when another
/// proxy of the same directory holds its lock.
pub async fn run(home: &Path) -> Result<(), DaemonError> {
    let dir = network_dir(home);
    std::fs::create_dir_all(&dir).map_err(io_at(&dir))?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
            .map_err(io_at(&dir))?;
    }
    let lock_path = dir.join("proxy.lock");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(io_at(&lock_path))?;
    // A proxy giving way to this one (another build) lets go of the lock right after its
    // socket; a live one keeps it, and this one leaves it be.
    let until = Instant::now() + Duration::from_secs(2);
    while rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
        if Instant::now() >= until {
            tracing::info!(home = %home.display(), "another egress proxy serves this directory");
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let socket = dir.join(CONTROL_SOCKET);
    let _ = std::fs::remove_file(&socket);
    let listener = UnixListener::bind(&socket).map_err(io_at(&socket))?;
    tracing::info!(home = %home.display(), pid = std::process::id(), "egress proxy listening");
    let daemon = Arc::new(Daemon {
        journal: Arc::new(Journal {
            path: home.join("logs").join("network.jsonl"),
            file: Mutex::new(None),
        }),
        approvers: Arc::default(),
        served: Mutex::default(),
        started: Instant::now(),
        busy_at: AtomicU64::new(0),
        build: std::env::current_exe()
            .map(|exe| crate::control::build_identity(&exe))
            .unwrap_or_default(),
        retire: tokio::sync::Notify::new(),
        dir: dir.clone(),
        authority: tokio::sync::OnceCell::new(),
    });
    let mut sweep = tokio::time::interval(SWEEP_EVERY);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                if let Ok((stream, _)) = accepted {
                    tokio::spawn(daemon.clone().control(stream));
                }
            }
            () = daemon.retire.notified() => {
                tracing::info!("an engine of another build registered: giving way");
                break;
            }
            _ = sweep.tick() => {
                if daemon.sweep() {
                    daemon.busy_at.store(daemon.now(), Ordering::Relaxed);
                } else if daemon.now().saturating_sub(daemon.busy_at.load(Ordering::Relaxed))
                    >= EXIT_AFTER.as_secs()
                {
                    break;
                }
            }
        }
    }
    // The lock is still held: no newer proxy owns this socket yet.
    let _ = std::fs::remove_file(&socket);
    tracing::info!("egress proxy exits: nothing left to serve");
    drop(lock);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Preamble;

    #[test]
    fn a_preamble_names_the_port_and_perhaps_the_run() {
        assert_eq!(
            Preamble::parse("paddock-egress port=41234\n"),
            Some(Preamble {
                port: 41234,
                run: None
            })
        );
        assert_eq!(
            Preamble::parse("paddock-egress port=41234 run=p-1a2b\n"),
            Some(Preamble {
                port: 41234,
                run: Some("p-1a2b".into())
            })
        );
        for bad in [
            "paddock-egress\n",
            "paddock-egress port=x\n",
            "paddock-egress port=1 who=me\n",
            "GET / HTTP/1.1\r\n",
        ] {
            assert_eq!(Preamble::parse(bad), None, "{bad:?}");
        }
    }
}
