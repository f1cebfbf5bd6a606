//! envd's directory watching (`WatchDir`, a server stream; `CreateWatcher`,
//! `GetWatcherEvents`, `RemoveWatcher`, polled) on every backend the same way: a background
//! process in the sandbox's session lists the directory (`find` and `stat`, GNU or BusyBox)
//! every 200 ms and prints the listing when it changed; the front end reads it with
//! `process output` and turns the difference between two listings into envd's events
//! (create, write, remove, rename, chmod). So an event comes 0.2 to about 1.2 s after the
//! change, several writes between two listings are one `write`, a file made and removed
//! between two listings is not seen, and a name with a newline in it is not watched.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::response::Response;
use paddock_engine::engine::CallExtras;
use serde::Deserialize;
use serde_json::{Value, json};

use super::connect::{Code, RpcError, end_envelope, envelope};
use super::state::{Sandbox, Watcher, lock};
use super::wire::{absolute, response, rpc_of_tool};

/// The line that ends each listing the watching process prints.
const END_OF_LISTING: &str = "//paddock-listing-end";
/// How long one `output` read waits for a new listing.
const READ_WAIT_S: f64 = 1.0;
/// A keepalive event after this long without events, so proxies keep the stream open.
const KEEPALIVE_AFTER: Duration = Duration::from_secs(20);
/// How often a watch looks again whether its paused sandbox was resumed.
const PAUSED_RECHECK: Duration = Duration::from_millis(200);
/// How long the first listing may take before the watch is given up.
const FIRST_LISTING_WITHIN: Duration = Duration::from_secs(30);

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct WatchRequest {
    path: String,
    recursive: bool,
    watcher_id: String,
}

async fn call(sandbox: &Sandbox, tool: &str, args: Value) -> Result<Value, RpcError> {
    let extras = CallExtras {
        session: Some(sandbox.id.clone()),
        ..CallExtras::default()
    };
    sandbox
        .engine
        .call_tool_with(tool, args, extras)
        .await
        .map_err(|e| rpc_of_tool(&e))
}

fn parse(body: &[u8]) -> Result<WatchRequest, RpcError> {
    serde_json::from_slice(body)
        .map_err(|e| RpcError::new(Code::InvalidArgument, format!("bad request: {e}")))
}

/// One entry of a listing: what tells a change.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    directory: bool,
    /// Permission bits.
    mode: u32,
    size: u64,
    inode: u64,
    /// The modification time as `stat` prints it (nanoseconds where the filesystem has them).
    modified: String,
}

/// A listing: entries by their path relative to the watched directory.
type Listing = BTreeMap<String, Entry>;

/// The shell loop that prints `dir`'s listing (`stat -c '%f %s %i %y %n'` of every entry,
/// one level or all) whenever it changed, each followed by [`END_OF_LISTING`]; the first at
/// once.
fn watch_script(dir: &str, recursive: bool) -> String {
    let depth = if recursive { "" } else { " -maxdepth 1" };
    let dir = super::rest::shell_quote(dir);
    format!(
        "prev=/; while :; do \
         cur=$(find {dir} -mindepth 1{depth} -exec stat -c '%f %s %i %y %n' {{}} + 2>/dev/null); \
         if [ \"$cur\" != \"$prev\" ]; then printf '%s\\n{END_OF_LISTING}\\n' \"$cur\"; prev=$cur; fi; \
         sleep 0.2; done"
    )
}

/// The entries of one printed listing of `dir`; lines that do not parse (a name with a
/// newline) are left out.
fn parse_listing(dir: &str, text: &str) -> Listing {
    let prefix = format!("{}/", dir.trim_end_matches('/'));
    let mut out = Listing::new();
    for line in text.lines() {
        // `RAWMODE SIZE INODE DATE TIME ZONE PATH`, the path last (it may hold spaces).
        let fields: Vec<&str> = line.splitn(7, ' ').collect();
        let [raw, size, inode, date, time, _zone, path] = fields.as_slice() else {
            continue;
        };
        let (Ok(raw), Ok(size), Ok(inode)) = (
            u32::from_str_radix(raw, 16),
            size.parse::<u64>(),
            inode.parse::<u64>(),
        ) else {
            continue;
        };
        let Some(name) = path.strip_prefix(&prefix).filter(|n| !n.is_empty()) else {
            continue;
        };
        out.insert(
            name.to_owned(),
            Entry {
                directory: raw & 0o170_000 == 0o040_000,
                mode: raw & 0o7777,
                size,
                inode,
                modified: format!("{date} {time}"),
            },
        );
    }
    out
}

/// envd's event types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Create,
    Write,
    Remove,
    Rename,
    Chmod,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Create => "EVENT_TYPE_CREATE",
            Kind::Write => "EVENT_TYPE_WRITE",
            Kind::Remove => "EVENT_TYPE_REMOVE",
            Kind::Rename => "EVENT_TYPE_RENAME",
            Kind::Chmod => "EVENT_TYPE_CHMOD",
        }
    }
}

/// The events that take `before` to `after`, as inotify would have told them: a name gone
/// whose inode appears under a new name is a `rename` of the old name and a `create` of the
/// new; a new file with content is `create` then `write`; a file whose size, time or inode
/// changed is `write` (a directory's time changes with its entries: not told); new
/// permissions are `chmod`.
fn diff(before: &Listing, after: &Listing) -> Vec<(String, Kind)> {
    let mut events = Vec::new();
    let created: Vec<(&String, &Entry)> = after
        .iter()
        .filter(|(name, _)| !before.contains_key(*name))
        .collect();
    let mut renamed_to: Vec<&String> = Vec::new();
    for (name, old) in before.iter().filter(|(n, _)| !after.contains_key(*n)) {
        let moved = created
            .iter()
            .find(|(new, e)| e.inode == old.inode && !renamed_to.contains(new));
        match moved {
            Some((new, _)) => {
                events.push((name.clone(), Kind::Rename));
                events.push(((*new).clone(), Kind::Create));
                renamed_to.push(new);
            }
            None => events.push((name.clone(), Kind::Remove)),
        }
    }
    for (name, entry) in created.iter().filter(|(n, _)| !renamed_to.contains(n)) {
        events.push(((*name).clone(), Kind::Create));
        if !entry.directory && entry.size > 0 {
            events.push(((*name).clone(), Kind::Write));
        }
    }
    for (name, new) in after {
        let Some(old) = before.get(name) else {
            continue;
        };
        if !new.directory
            && (old.size != new.size || old.modified != new.modified || old.inode != new.inode)
        {
            events.push((name.clone(), Kind::Write));
        }
        if old.mode != new.mode {
            events.push((name.clone(), Kind::Chmod));
        }
    }
    events
}

fn event_json(name: &str, kind: Kind) -> Value {
    json!({"name": name, "type": kind.as_str()})
}

/// The watching process of one directory and what was read of it.
struct Poller {
    sandbox: Arc<Sandbox>,
    process_id: String,
    dir: String,
    offset: u64,
    /// Output read but not yet a whole listing.
    pending: String,
    listing: Listing,
}

/// Why a watch stopped by itself.
enum Ended {
    /// The watching process exited (the session was closed, or it was killed).
    Exited,
    Failed(RpcError),
}

impl Poller {
    /// Checks `path` is a directory, starts its watching process and reads its first listing,
    /// so that a change made once this answers is seen.
    async fn start(sandbox: Arc<Sandbox>, path: &str, recursive: bool) -> Result<Self, RpcError> {
        let dir = absolute(&sandbox.cwd, path);
        let info = call(&sandbox, "file_info", json!({"path": dir})).await?;
        if info["kind"] != "directory" {
            return Err(RpcError::new(
                Code::InvalidArgument,
                format!("path {dir} is not a directory"),
            ));
        }
        let answer = call(
            &sandbox,
            "terminal",
            json!({"command": watch_script(&dir, recursive), "background": true}),
        )
        .await?;
        let Some(process_id) = answer["session_id"].as_str().map(str::to_owned) else {
            return Err(RpcError::new(Code::Internal, "terminal gave no process id"));
        };
        let mut poller = Self {
            sandbox,
            process_id,
            dir,
            offset: 0,
            pending: String::new(),
            listing: Listing::new(),
        };
        let until = Instant::now() + FIRST_LISTING_WITHIN;
        loop {
            match poller.read().await {
                Ok(Some(first)) => {
                    poller.listing = first;
                    return Ok(poller);
                }
                Ok(None) if Instant::now() < until => {}
                Ok(None) => {
                    poller.stop().await;
                    return Err(RpcError::new(
                        Code::Internal,
                        format!("the directory {} could not be listed in time", poller.dir),
                    ));
                }
                Err(ended) => {
                    poller.stop().await;
                    return Err(match ended {
                        Ended::Failed(err) => err,
                        Ended::Exited => RpcError::new(
                            Code::Internal,
                            "the watching process ended before its first listing",
                        ),
                    });
                }
            }
        }
    }

    /// One read of the process's output (waiting up to a second): the newest whole listing
    /// in it, if any.
    async fn read(&mut self) -> Result<Option<Listing>, Ended> {
        let read = call(
            &self.sandbox,
            "process",
            json!({"action": "output", "session_id": self.process_id,
                   "stdout_offset": self.offset, "timeout": READ_WAIT_S}),
        )
        .await
        .map_err(Ended::Failed)?;
        self.offset = read["stdout_offset"].as_u64().unwrap_or(self.offset);
        self.pending
            .push_str(read["stdout"].as_str().unwrap_or_default());
        let marker = format!("{END_OF_LISTING}\n");
        let mut newest = None;
        while let Some(at) = self.pending.find(&marker) {
            newest = Some(parse_listing(&self.dir, &self.pending[..at]));
            self.pending.drain(..at + marker.len());
        }
        if newest.is_none() && read["state"] != "running" && read["more"] != Value::Bool(true) {
            return Err(Ended::Exited);
        }
        Ok(newest)
    }

    /// The events since the last call (none while the sandbox is paused: reading would thaw
    /// it).
    async fn events(&mut self) -> Result<Vec<Value>, Ended> {
        if self.sandbox.paused.load(Ordering::Relaxed) {
            tokio::time::sleep(PAUSED_RECHECK).await;
            return Ok(Vec::new());
        }
        let Some(listing) = self.read().await? else {
            return Ok(Vec::new());
        };
        let events = diff(&self.listing, &listing)
            .into_iter()
            .map(|(name, kind)| event_json(&name, kind))
            .collect();
        self.listing = listing;
        Ok(events)
    }

    /// Ends the watching process.
    async fn stop(&self) {
        stop_process(&self.sandbox, &self.process_id).await;
    }
}

async fn stop_process(sandbox: &Sandbox, process_id: &str) {
    if let Err(err) = call(
        sandbox,
        "process",
        json!({"action": "kill", "session_id": process_id}),
    )
    .await
    {
        tracing::debug!(%err, "a watching process was not killed");
    }
}

/// `WatchDir`: `start`, then each event as it is seen, until the client leaves or the
/// request's `Connect-Timeout-Ms` passes (then `deadline_exceeded`).
pub(crate) async fn stream(
    sandbox: Arc<Sandbox>,
    body: &[u8],
    deadline: Option<Duration>,
) -> Response {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    let request = super::connect::read_envelopes(body)
        .map_err(|e| RpcError::new(Code::InvalidArgument, e.to_string()))
        .and_then(|envelopes| match envelopes.first() {
            Some((_, message)) => parse(message),
            None => Err(RpcError::new(Code::InvalidArgument, "no request message")),
        });
    let started = match request {
        Ok(request) => Poller::start(sandbox, &request.path, request.recursive).await,
        Err(err) => Err(err),
    };
    match started {
        Ok(poller) => {
            let deadline = deadline.map(|d| Instant::now() + d);
            tokio::spawn(pump(poller, deadline, tx));
        }
        Err(err) => {
            let _ = tx.send(end_envelope(Some(&err)));
        }
    }
    response(
        200,
        "application/connect+json",
        Body::from_stream(super::process::chunks(rx)),
    )
}

async fn pump(
    mut poller: Poller,
    deadline: Option<Instant>,
    tx: tokio::sync::mpsc::UnboundedSender<Vec<u8>>,
) {
    let send = |message: Value| tx.send(envelope(0, &message)).is_ok();
    send(json!({"start": {}}));
    let mut quiet_since = Instant::now();
    let error = loop {
        if tx.is_closed() {
            break None;
        }
        if deadline.is_some_and(|at| Instant::now() >= at) {
            break Some(RpcError::new(
                Code::DeadlineExceeded,
                "the watch ran to the request's timeout",
            ));
        }
        match poller.events().await {
            Ok(events) => {
                for event in &events {
                    send(json!({"filesystem": event}));
                }
                if !events.is_empty() {
                    quiet_since = Instant::now();
                }
            }
            Err(Ended::Exited) => {
                break Some(RpcError::new(Code::Internal, "the watch ended"));
            }
            Err(Ended::Failed(err)) => break Some(err),
        }
        if quiet_since.elapsed() >= KEEPALIVE_AFTER {
            send(json!({"keepalive": {}}));
            quiet_since = Instant::now();
        }
    };
    if !poller.sandbox.paused.load(Ordering::Relaxed) {
        poller.stop().await;
    }
    let _ = tx.send(end_envelope(error.as_ref()));
}

/// `CreateWatcher`, `GetWatcherEvents`, `RemoveWatcher`.
pub(crate) async fn unary(
    sandbox: &Arc<Sandbox>,
    method: &str,
    body: &[u8],
) -> Result<Value, RpcError> {
    let request = parse(body)?;
    match method {
        "CreateWatcher" => create(sandbox, &request).await,
        "GetWatcherEvents" => {
            let watcher = watcher(sandbox, &request.watcher_id)?;
            let events = std::mem::take(&mut *lock(&watcher.events));
            if events.is_empty()
                && let Some(why) = lock(&watcher.ended).clone()
            {
                return Err(RpcError::new(Code::Internal, why));
            }
            Ok(json!({"events": events}))
        }
        "RemoveWatcher" => {
            let watcher = watcher(sandbox, &request.watcher_id)?;
            lock(&sandbox.watchers).remove(&request.watcher_id);
            stop_process(sandbox, &watcher.process_id).await;
            Ok(json!({}))
        }
        other => Err(RpcError::new(
            Code::Unimplemented,
            format!("filesystem.Filesystem/{other} is not served by Paddock yet"),
        )),
    }
}

fn watcher(sandbox: &Sandbox, id: &str) -> Result<Arc<Watcher>, RpcError> {
    lock(&sandbox.watchers)
        .get(id)
        .cloned()
        .ok_or_else(|| RpcError::new(Code::NotFound, format!("watcher {id} not found")))
}

async fn create(sandbox: &Arc<Sandbox>, request: &WatchRequest) -> Result<Value, RpcError> {
    let poller = Poller::start(sandbox.clone(), &request.path, request.recursive).await?;
    let id =
        super::state::random_hex(8).map_err(|e| RpcError::new(Code::Internal, e.to_string()))?;
    let watcher = Arc::new(Watcher {
        process_id: poller.process_id.clone(),
        events: Default::default(),
        ended: Default::default(),
    });
    lock(&sandbox.watchers).insert(id.clone(), watcher.clone());
    tokio::spawn(collect(poller, id.clone(), watcher));
    Ok(json!({"watcherId": id}))
}

/// Keeps a `CreateWatcher` watcher's events until it is removed or its process ends.
async fn collect(mut poller: Poller, id: String, watcher: Arc<Watcher>) {
    loop {
        let removed = !lock(&poller.sandbox.watchers).contains_key(&id);
        if removed {
            return;
        }
        match poller.events().await {
            Ok(events) => lock(&watcher.events).extend(events),
            Err(ended) => {
                let why = match ended {
                    Ended::Exited => "the watch ended".to_owned(),
                    Ended::Failed(err) => err.message,
                };
                *lock(&watcher.ended) = Some(why);
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn line(raw: &str, size: u64, inode: u64, time: &str, path: &str) -> String {
        format!("{raw} {size} {inode} 2026-12-07 {time} +0000 {path}\n")
    }

    #[test]
    fn a_listing_parses_gnu_and_busybox_stat() {
        let text = line("81a4", 3, 7, "16:47:17.296915035", "/w/a b")
            + &line("41ed", 4096, 8, "16:47:17.2", "/w/s")
            + &line("81ed", 0, 9, "16:47:17.3", "/w/s/x")
            + "not a line\n"
            + &line("81a4", 1, 10, "16:47:17.3", "/elsewhere/y");
        let listing = parse_listing("/w/", &text);
        assert_eq!(listing.keys().collect::<Vec<_>>(), vec!["a b", "s", "s/x"]);
        assert_eq!(
            listing["a b"],
            Entry {
                directory: false,
                mode: 0o644,
                size: 3,
                inode: 7,
                modified: "2026-12-07 16:47:17.296915035".into(),
            }
        );
        assert!(listing["s"].directory);
        assert_eq!(listing["s/x"].mode, 0o755);
    }

    #[test]
    fn differences_are_envd_events() {
        let before = parse_listing(
            "/w",
            &(line("81a4", 3, 1, "1", "/w/kept")
                + &line("81a4", 3, 2, "1", "/w/gone")
                + &line("81a4", 3, 3, "1", "/w/old-name")
                + &line("41ed", 4096, 4, "1", "/w/dir")
                + &line("81a4", 3, 5, "1", "/w/mode")),
        );
        let after = parse_listing(
            "/w",
            &(line("81a4", 4, 1, "2", "/w/kept")
                + &line("81a4", 3, 3, "1", "/w/new-name")
                + &line("41ed", 4096, 4, "2", "/w/dir")
                + &line("81a4", 0, 6, "2", "/w/dir/empty")
                + &line("81a4", 5, 7, "2", "/w/full")
                + &line("8124", 3, 5, "1", "/w/mode")),
        );
        assert_eq!(
            diff(&before, &after),
            vec![
                ("gone".to_owned(), Kind::Remove),
                ("old-name".to_owned(), Kind::Rename),
                ("new-name".to_owned(), Kind::Create),
                ("dir/empty".to_owned(), Kind::Create),
                ("full".to_owned(), Kind::Create),
                ("full".to_owned(), Kind::Write),
                ("kept".to_owned(), Kind::Write),
                ("mode".to_owned(), Kind::Chmod),
            ]
        );
        assert!(diff(&after, &after).is_empty());
    }

    #[test]
    fn the_script_lists_one_level_unless_recursive() {
        let one = watch_script("/w/it's", false);
        assert!(one.contains("find '/w/it'\\''s' -mindepth 1 -maxdepth 1 -exec stat"));
        assert!(one.contains(END_OF_LISTING));
        assert!(!watch_script("/w", true).contains("maxdepth"));
    }
}
