//! ToolCallEvents: one `started` and one `finished` event per tool call, nested calls carrying
//! the script's call id as `parent_call_id`; and the failure log an operator greps
//! ([`FailureLog`]).

use std::fs::File;
use std::io::{LineWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::Serialize;

/// Where a call is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Started,
    Finished,
}

/// One event, written as one JSON line.
#[derive(Debug, Clone, Serialize)]
pub struct ToolCallEvent {
    pub call_id: String,
    pub parent_call_id: Option<String>,
    pub tool: String,
    pub phase: Phase,
    /// Set on `finished`.
    pub duration_ms: Option<f64>,
    /// Set on a failed `finished`.
    pub error_code: Option<String>,
    /// Milliseconds since the Unix epoch.
    pub timestamp_ms: u128,
}

/// Receives one event as it is emitted (the embedding protocol forwards them to its client).
pub type EventListener = std::sync::Arc<dyn Fn(&ToolCallEvent) + Send + Sync>;

/// Receives events. Writing is best-effort: a full disk must not fail a tool call.
#[derive(Default)]
pub struct EventSink {
    file: Option<Mutex<LineWriter<File>>>,
    listener: Option<EventListener>,
}

impl EventSink {
    /// Appends events to `path` as JSON lines.
    pub fn to_file(path: &Path) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(Self {
            file: Some(Mutex::new(LineWriter::new(file))),
            listener: None,
        })
    }

    /// Hands every event to `listener` (called on the emitting task: it must not block).
    pub fn with_listener(listener: EventListener) -> Self {
        Self {
            file: None,
            listener: Some(listener),
        }
    }

    pub fn emit(&self, event: &ToolCallEvent) {
        tracing::debug!(call_id = %event.call_id, tool = %event.tool, phase = ?event.phase, "tool call event");
        if let Some(listener) = &self.listener {
            listener(event);
        }
        let Some(file) = &self.file else { return };
        let Ok(mut line) = serde_json::to_vec(event) else {
            return;
        };
        line.push(b'\n');
        if let Ok(mut writer) = file.lock()
            && let Err(err) = writer.write_all(&line)
        {
            tracing::warn!(%err, "could not write a tool call event");
        }
    }
}

pub fn now_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

/// One failed tool call in the failure log: what an operator needs to find it, never its
/// arguments or output (they may hold secrets).
#[derive(Debug, Clone, Serialize)]
pub struct FailedCall {
    /// Milliseconds since the Unix epoch.
    pub timestamp_ms: u128,
    pub session: String,
    pub tool: String,
    pub error_code: String,
    pub duration_ms: f64,
    pub call_id: String,
    /// The script's call id, for a nested call.
    pub parent_call_id: Option<String>,
}

/// `$PADDOCK_HOME/logs/tool-failures.jsonl`: every failed tool call, direct or nested, one JSON
/// line each, appended by every engine of that state directory. Past [`FailureLog::MAX_BYTES`]
/// the file becomes `tool-failures.jsonl.1` (the one before is dropped) and a new one starts.
/// Best-effort like events: a full disk never fails a call.
pub struct FailureLog {
    path: PathBuf,
    max_bytes: u64,
    write: Mutex<()>,
}

impl FailureLog {
    pub const MAX_BYTES: u64 = 10 * 1024 * 1024;

    /// The log of the state directory `state_root`.
    pub fn in_state_dir(state_root: &Path) -> Self {
        Self::at(
            state_root.join("logs").join("tool-failures.jsonl"),
            Self::MAX_BYTES,
        )
    }

    /// A log at `path` rotated past `max_bytes`.
    pub fn at(path: PathBuf, max_bytes: u64) -> Self {
        Self {
            path,
            max_bytes,
            write: Mutex::new(()),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn record(&self, call: &FailedCall) {
        if let Err(err) = self.append(call) {
            tracing::warn!(%err, path = %self.path.display(), "could not write the tool failure log");
        }
    }

    fn append(&self, call: &FailedCall) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(call).map_err(std::io::Error::other)?;
        line.push(b'\n');
        let _one_writer = self.write.lock();
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        if std::fs::metadata(&self.path).is_ok_and(|m| m.len() + line.len() as u64 > self.max_bytes)
        {
            let mut old = self.path.clone().into_os_string();
            old.push(".1");
            std::fs::rename(&self.path, old)?;
        }
        // One write of a whole line in append mode: lines of concurrent engines do not mix.
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)?
            .write_all(&line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(tool: &str) -> FailedCall {
        FailedCall {
            timestamp_ms: 1,
            session: "s".into(),
            tool: tool.into(),
            error_code: "tool:failed".into(),
            duration_ms: 2.5,
            call_id: "c1".into(),
            parent_call_id: None,
        }
    }

    #[test]
    fn failures_are_json_lines_and_the_log_rotates_keeping_one_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("logs").join("tool-failures.jsonl");
        let log = FailureLog::at(path.clone(), 400);
        for i in 0..8 {
            log.record(&failed(&format!("tool{i}")));
        }
        let current = std::fs::read_to_string(&path).unwrap();
        let old = std::fs::read_to_string(path.with_extension("jsonl.1")).unwrap();
        assert!(current.len() <= 400 && old.len() <= 400, "{current}\n{old}");
        let last: serde_json::Value =
            serde_json::from_str(current.lines().last().unwrap()).unwrap();
        assert_eq!(last["tool"], "tool7");
        assert_eq!(last["error_code"], "tool:failed");
        assert_eq!(last["session"], "s");
        // Every line is whole JSON, in one file or the other.
        let lines = current.lines().chain(old.lines());
        assert!(
            lines
                .clone()
                .all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok())
        );
        assert!(
            lines.count() < 6,
            "the oldest lines were dropped with the second rotation"
        );
    }
}
