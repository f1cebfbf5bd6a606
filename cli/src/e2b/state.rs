//! The front end's state: the sandboxes it made (each one Paddock session on the engine of its
//! template's backend), their tokens, metadata, end times and the processes started through
//! envd. Kept in memory: a sandbox lives as long as this server and its session.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use paddock_engine::engine::{Engine, EngineOptions};
use paddock_engine::events::EventSink;
use paddock_engine::policy::Policy;
use paddock_engine::registry::Registry;

/// The templates every policy offers: both mean the backend `[routes] terminal` names.
pub(crate) const DEFAULT_TEMPLATES: [&str; 2] = ["base", "code-interpreter-v1"];

/// A failure of the front end's own bookkeeping.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StateError {
    #[error("unknown template '{name}'; this policy offers: {offered}")]
    UnknownTemplate { name: String, offered: String },
    #[error("the engine for template '{template}' could not start: {reason}")]
    Engine { template: String, reason: String },
    #[error("cannot make the sandbox's home {path}: {source}")]
    Home {
        path: String,
        source: std::io::Error,
    },
    #[error("no randomness for a token: {0}")]
    Random(std::io::Error),
}

/// A process started through envd's `Start`, as `List` and `Connect` need it.
#[derive(Debug, Clone)]
pub(crate) struct Proc {
    /// The `process` tool's id of it.
    pub(crate) process_id: String,
    pub(crate) cmd: String,
    pub(crate) args: Vec<String>,
    pub(crate) envs: BTreeMap<String, String>,
    pub(crate) cwd: Option<String>,
    pub(crate) tag: Option<String>,
    /// Set when it runs as a foreground call (`foreground`), not a background process.
    pub(crate) foreground: Option<Arc<super::run::ForegroundRun>>,
}

/// One context of the sandbox's code interpreter (`/contexts`): one of the session's Paddock
/// CPython contexts, under the same id.
pub(crate) struct CodeContext {
    pub(crate) id: String,
    /// Where its interpreter starts (absolute, inside the environment).
    pub(crate) cwd: String,
    /// The context `/execute` uses without `context_id` (made on first use).
    pub(crate) default: bool,
    /// Held for a whole execution: a context runs one at a time, as a Jupyter kernel does,
    /// so a second request waits instead of failing on a busy interpreter.
    pub(crate) run: tokio::sync::Mutex<ContextRun>,
}

/// What the front end knows of a context's interpreter.
#[derive(Debug, Default)]
pub(crate) struct ContextRun {
    /// Whether the Paddock context exists yet.
    pub(crate) made: bool,
    /// Executions the front end ran itself (setting and restoring per-execution env vars),
    /// left out of the execution count the SDK is told.
    pub(crate) hidden: u64,
    /// Per-execution env vars are set and not yet restored (the client left mid-execution):
    /// the next execution restores them first.
    pub(crate) env_set: bool,
}

impl CodeContext {
    pub(crate) fn new(id: String, cwd: String, default: bool) -> Self {
        Self {
            id,
            cwd,
            default,
            run: tokio::sync::Mutex::default(),
        }
    }
}

/// A directory watcher of `CreateWatcher` (the watch module polls for it): the events
/// `GetWatcherEvents` has not taken yet.
pub(crate) struct Watcher {
    /// The `process` tool's id of the process that lists the directory.
    pub(crate) process_id: String,
    /// envd `FilesystemEvent`s (ProtoJSON), oldest first.
    pub(crate) events: Mutex<Vec<serde_json::Value>>,
    /// Why the watch ended, when it ended by itself.
    pub(crate) ended: Mutex<Option<String>>,
}

/// One E2B sandbox: one Paddock session.
pub(crate) struct Sandbox {
    /// The sandbox id, which is also its session's id.
    pub(crate) id: String,
    pub(crate) template: String,
    pub(crate) engine: Arc<Engine>,
    pub(crate) client_id: String,
    pub(crate) access_token: String,
    pub(crate) traffic_token: String,
    pub(crate) metadata: BTreeMap<String, String>,
    pub(crate) started_at_ms: u64,
    /// When the sandbox is killed (ms since the epoch); moved by `set_timeout`.
    pub(crate) end_at_ms: AtomicU64,
    /// Its own working directory and home on the host (local backend), removed with it.
    pub(crate) home: PathBuf,
    /// Where its commands start inside the environment: relative paths resolve against it.
    pub(crate) cwd: String,
    /// Started processes by the pid the SDK was given.
    pub(crate) procs: Mutex<BTreeMap<u32, Proc>>,
    /// The task that kills it at `end_at_ms`.
    pub(crate) timer: Mutex<Option<tokio::task::AbortHandle>>,
    /// How many pids [`Sandbox::new_pid`] handed out.
    pub(crate) next_pid: AtomicU64,
    /// The create's `envVars`: the interpreter's contexts start with them too.
    pub(crate) envs: BTreeMap<String, String>,
    /// The code interpreter's contexts, in the order made (the default one first).
    pub(crate) contexts: Mutex<Vec<Arc<CodeContext>>>,
    /// Paused (`POST /sandboxes/{id}/pause`): its session is frozen, its daemon answers
    /// nothing until a connect or resume.
    pub(crate) paused: AtomicBool,
    /// Killed (`DELETE`, its end time, the server stopping): its open streams end with
    /// `unavailable`, which the SDK checks against `/health` (gone: `SandboxNotRunningException`).
    pub(crate) killed: AtomicBool,
    /// Created with `autoPause` (`lifecycle={"on_timeout": "pause"}`): its end pauses it.
    pub(crate) auto_pause: bool,
    /// The watchers of `CreateWatcher`, by id.
    pub(crate) watchers: Mutex<HashMap<String, Arc<Watcher>>>,
}

impl Sandbox {
    /// A pid for a process whose backend reports none: above the largest pid Linux hands out
    /// (`pid_max` is at most 2^22), so it never names another process.
    pub(crate) fn new_pid(&self) -> u32 {
        let n = self
            .next_pid
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        u32::try_from(FIRST_PAPER_PID + n).unwrap_or(u32::MAX)
    }

    /// Why a stream of this sandbox ended early: `unavailable` once it was killed (the SDK then
    /// probes `/health` and reports the sandbox gone), else `err` as it is.
    pub(crate) fn stream_error(&self, err: super::connect::RpcError) -> super::connect::RpcError {
        if self.killed.load(Ordering::SeqCst) {
            super::connect::RpcError::new(
                super::connect::Code::Unavailable,
                format!(
                    "the connection to sandbox {} ended before the stream completed: the \
                     sandbox was killed",
                    self.id
                ),
            )
        } else {
            err
        }
    }

    pub(crate) fn procs(&self) -> MutexGuard<'_, BTreeMap<u32, Proc>> {
        lock(&self.procs)
    }

    pub(crate) fn contexts(&self) -> MutexGuard<'_, Vec<Arc<CodeContext>>> {
        lock(&self.contexts)
    }
}

/// The first pid [`Sandbox::new_pid`] hands out: Linux's `PID_MAX_LIMIT` (2^22).
const FIRST_PAPER_PID: u64 = 1 << 22;

/// Everything the server shares between requests.
pub(crate) struct State {
    pub(crate) policy: Policy,
    pub(crate) api_keys: Vec<String>,
    /// One engine per backend a template named (`None`: the policy's routes).
    engines: tokio::sync::Mutex<HashMap<Option<String>, Arc<Engine>>>,
    sandboxes: Mutex<HashMap<String, Arc<Sandbox>>>,
    /// Where sandbox homes go: outside the state directory (the local backend refuses a
    /// workspace that holds Paddock's state) and outside /tmp (each sandbox has its own).
    pub(crate) homes: PathBuf,
}

/// A poisoned lock still holds consistent maps here (no invariant spans an unwind).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub(crate) fn now_ms() -> u64 {
    u64::try_from(paddock_engine::events::now_ms()).unwrap_or(u64::MAX)
}

/// `bytes` random bytes as hex, from the kernel.
pub(crate) fn random_hex(bytes: usize) -> Result<String, StateError> {
    use std::io::Read;
    let mut buf = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .map_err(StateError::Random)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

impl State {
    pub(crate) fn new(mut policy: Policy, api_keys: Vec<String>) -> Self {
        // The built-in sandbox works in the directory Paddock runs in; a sandbox gets its own
        // home as workspace instead, as an MCP client's root would (the policy's own `local`,
        // if it has one, keeps its settings).
        if !policy.backends.contains_key("local") {
            let mut local = paddock_backends::local::section::LocalSection::implicit();
            local.workspace = None;
            policy.backends.insert(
                "local".to_owned(),
                paddock_engine::policy::BackendConfig::Local(local),
            );
        }
        Self {
            policy,
            api_keys,
            engines: tokio::sync::Mutex::default(),
            sandboxes: Mutex::default(),
            homes: homes_dir(),
        }
    }

    /// The templates this policy offers: the defaults and every backend name.
    pub(crate) fn templates(&self) -> Vec<String> {
        let mut names: Vec<String> = DEFAULT_TEMPLATES.iter().map(|s| (*s).to_owned()).collect();
        names.extend(self.policy.backends.keys().cloned());
        // The workspace-write sandbox is there under this name when no backend takes it.
        if !self.policy.backends.contains_key("local") {
            names.push("local".to_owned());
        }
        names
    }

    /// The engine of `template`'s backend, made on first use.
    pub(crate) async fn engine_for(&self, template: &str) -> Result<Arc<Engine>, StateError> {
        let backend = if DEFAULT_TEMPLATES.contains(&template) {
            None
        } else if self.templates().iter().any(|t| t == template) {
            Some(template.to_owned())
        } else {
            return Err(StateError::UnknownTemplate {
                name: template.to_owned(),
                offered: self.templates().join(", "),
            });
        };
        let mut engines = self.engines.lock().await;
        if let Some(engine) = engines.get(&backend) {
            return Ok(engine.clone());
        }
        let options = EngineOptions {
            session: None,
            backend: backend.clone(),
            exe: None,
        };
        let engine = Engine::with_options(
            self.policy.clone(),
            Registry::with_builtins(),
            Arc::new(EventSink::default()),
            options,
        )
        .map_err(|e| StateError::Engine {
            template: template.to_owned(),
            reason: e.to_string(),
        })?;
        let engine = Arc::new(engine);
        engines.insert(backend, engine.clone());
        Ok(engine)
    }

    /// Every engine made so far (for the idle sweep and shutdown).
    pub(crate) async fn engines(&self) -> Vec<Arc<Engine>> {
        self.engines.lock().await.values().cloned().collect()
    }

    pub(crate) fn get(&self, id: &str) -> Option<Arc<Sandbox>> {
        lock(&self.sandboxes).get(id).cloned()
    }

    pub(crate) fn all(&self) -> Vec<Arc<Sandbox>> {
        let mut all: Vec<_> = lock(&self.sandboxes).values().cloned().collect();
        all.sort_by_key(|s| s.started_at_ms);
        all
    }

    pub(crate) fn insert(&self, sandbox: Arc<Sandbox>) {
        lock(&self.sandboxes).insert(sandbox.id.clone(), sandbox);
    }

    pub(crate) fn remove(&self, id: &str) -> Option<Arc<Sandbox>> {
        lock(&self.sandboxes).remove(id)
    }

    /// The sandbox an access token was issued to.
    pub(crate) fn by_token(&self, token: &str) -> Option<String> {
        lock(&self.sandboxes)
            .values()
            .find(|s| super::auth::same(s.access_token.as_bytes(), token.as_bytes()))
            .map(|s| s.id.clone())
    }

    /// A new sandbox home, empty.
    pub(crate) fn make_home(&self, id: &str) -> Result<PathBuf, StateError> {
        use std::os::unix::fs::DirBuilderExt;
        let home = self.homes.join(id);
        // Only this user's: /var/tmp is everybody's.
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&home)
            .map_err(|source| StateError::Home {
                path: home.display().to_string(),
                source,
            })?;
        // Each sandbox sees its own home, never the others' (the local sandbox masks a
        // directory so marked).
        let marker = self
            .homes
            .join(paddock_backends::local::SEPARATE_WORKSPACES_MARKER);
        if !marker.is_file() {
            std::fs::write(&marker, b"").map_err(|source| StateError::Home {
                path: marker.display().to_string(),
                source,
            })?;
        }
        Ok(home)
    }
}

/// `$PADDOCK_E2B_HOMES`, else `/var/tmp/paddock-e2b-<uid>`: not under the user's dot-files,
/// where the approval rules would stop a command writing into its own home by absolute path.
fn homes_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("PADDOCK_E2B_HOMES") {
        return PathBuf::from(dir);
    }
    let uid =
        std::fs::metadata("/proc/self").map_or(0, |m| std::os::unix::fs::MetadataExt::uid(&m));
    PathBuf::from(format!("/var/tmp/paddock-e2b-{uid}"))
}

/// A sandbox's end time moves: stored apart so the timer can read the latest.
pub(crate) fn end_at(sandbox: &Sandbox) -> u64 {
    sandbox.end_at_ms.load(Ordering::Relaxed)
}
