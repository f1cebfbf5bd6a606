//! ToolCallEvents: one `started` and one `finished` event per tool call, nested calls carrying
//! the script's call id as `parent_call_id`.

use std::fs::File;
use std::io::{LineWriter, Write};
use std::path::Path;
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

/// Receives events. Writing is best-effort: a full disk must not fail a tool call.
#[derive(Default)]
pub struct EventSink {
    file: Option<Mutex<LineWriter<File>>>,
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
        })
    }

    pub fn emit(&self, event: &ToolCallEvent) {
        tracing::debug!(call_id = %event.call_id, tool = %event.tool, phase = ?event.phase, "tool call event");
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
