//! A command's output as it is written: which stream a chunk came from, where chunks go while
//! the command runs ([`ChunkSender`]), and the sink every way of running a command pushes its
//! bytes into ([`OutputSink`]: the capped merged text the tool answers, plus the live chunks
//! when the caller asked for them).

use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::output::Utf8Capped;

/// Which of a command's streams a chunk was written to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputStream {
    Stdout,
    Stderr,
}

impl OutputStream {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stdout => "stdout",
            Self::Stderr => "stderr",
        }
    }
}

/// Bytes a command wrote to one of its streams, as they came (never re-chunked: a chunk is
/// what one read of the pipe, terminal or agent frame gave).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputChunk {
    pub stream: OutputStream,
    pub bytes: Vec<u8>,
}

/// Where a running command's chunks go. Unbounded: the command never waits for the listener
/// (what a slow listener holds is bounded by what the command prints, as the answer is).
pub type ChunkSender = tokio::sync::mpsc::UnboundedSender<OutputChunk>;

/// The output of one command: the merged, capped text its answer carries (shared, so a
/// timed-out command keeps what it printed) and, when the caller listens, each chunk as it
/// comes. With a listener the command's stderr is kept apart where the transport can (pipes
/// through the agent or on this machine); without one both share one pipe, in order.
#[derive(Clone)]
pub struct OutputSink {
    merged: Arc<Mutex<Utf8Capped>>,
    live: Option<ChunkSender>,
}

impl OutputSink {
    /// Merged text capped at `max_chars`, nobody listening.
    pub fn new(max_chars: usize) -> Self {
        Self::streaming(max_chars, None)
    }

    /// The same, with each chunk also sent to `live`.
    pub fn streaming(max_chars: usize, live: Option<ChunkSender>) -> Self {
        Self {
            merged: Arc::new(Mutex::new(Utf8Capped::new(max_chars))),
            live,
        }
    }

    /// Whether someone listens (and so stderr is worth keeping apart).
    pub fn splits(&self) -> bool {
        self.live.is_some()
    }

    /// Bytes the command wrote to stdout (or its one merged stream).
    pub fn push(&self, bytes: &[u8]) {
        self.push_from(OutputStream::Stdout, bytes);
    }

    pub fn push_from(&self, stream: OutputStream, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        if let Ok(mut merged) = self.merged.lock() {
            merged.push(bytes);
        }
        if let Some(live) = &self.live {
            // A listener that went away only stops listening; the command goes on.
            let _ = live.send(OutputChunk {
                stream,
                bytes: bytes.to_vec(),
            });
        }
    }

    /// Forgets what was pushed so far (a transport retrying a command).
    pub fn clear(&self) {
        if let Ok(mut merged) = self.merged.lock() {
            merged.clear();
        }
    }

    /// The merged text so far, without finishing.
    pub fn peek(&self) -> String {
        self.merged.lock().map(|m| m.peek()).unwrap_or_default()
    }

    /// The merged text (capped) and how many characters were written in all.
    pub fn finish(&self) -> (String, usize) {
        match self.merged.lock() {
            Ok(mut merged) => {
                let text = merged.finish();
                (text, merged.total_chars())
            }
            Err(_) => (String::new(), 0),
        }
    }
}

/// Bytes in, text out, chunk by chunk: a UTF-8 character split between two chunks comes out
/// whole with the second; invalid bytes become U+FFFD.
#[derive(Debug, Default)]
pub struct Utf8Decoder {
    pending: Vec<u8>,
}

impl Utf8Decoder {
    /// The text `bytes` complete (possibly empty: a character's first bytes wait).
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut text = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    text.push_str(s);
                    self.pending.clear();
                    return text;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    text.push_str(&String::from_utf8_lossy(&self.pending[..valid]));
                    match e.error_len() {
                        Some(bad) => {
                            text.push('\u{FFFD}');
                            self.pending.drain(..valid + bad);
                        }
                        None => {
                            // An incomplete sequence at the end: wait for more bytes.
                            self.pending.drain(..valid);
                            return text;
                        }
                    }
                }
            }
        }
    }

    /// What is left at the end (an incomplete character, replaced).
    pub fn finish(&mut self) -> String {
        let rest = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        rest
    }
}

/// Decodes each stream of a command apart (their characters are never mixed).
#[derive(Debug, Default)]
pub struct StreamDecoders {
    stdout: Utf8Decoder,
    stderr: Utf8Decoder,
}

impl StreamDecoders {
    pub fn push(&mut self, chunk: &OutputChunk) -> String {
        self.of(chunk.stream).push(&chunk.bytes)
    }

    /// What each stream has left at the end, non-empty ones only.
    pub fn finish(&mut self) -> Vec<(OutputStream, String)> {
        [OutputStream::Stdout, OutputStream::Stderr]
            .into_iter()
            .map(|s| (s, self.of(s).finish()))
            .filter(|(_, text)| !text.is_empty())
            .collect()
    }

    fn of(&mut self, stream: OutputStream) -> &mut Utf8Decoder {
        match stream {
            OutputStream::Stdout => &mut self.stdout,
            OutputStream::Stderr => &mut self.stderr,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_character_split_between_chunks_comes_out_whole() {
        let bytes = "aé世🎉".as_bytes();
        let mut decoder = Utf8Decoder::default();
        let mut text = String::new();
        for byte in bytes {
            text.push_str(&decoder.push(&[*byte]));
        }
        text.push_str(&decoder.finish());
        assert_eq!(text, "aé世🎉");
        assert_eq!(decoder.push(b"x\xffy"), "x\u{FFFD}y");
        assert_eq!(decoder.push(&"世".as_bytes()[..2]), "");
        assert_eq!(decoder.finish(), "\u{FFFD}");
    }

    #[tokio::test]
    async fn the_sink_answers_merged_and_streams_apart() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let sink = OutputSink::streaming(100, Some(tx));
        assert!(sink.splits());
        sink.push(b"out\n");
        sink.push_from(OutputStream::Stderr, b"err\n");
        assert_eq!(sink.finish(), ("out\nerr\n".to_owned(), 8));
        let first = rx.recv().await.unwrap();
        assert_eq!(first.stream, OutputStream::Stdout);
        assert_eq!(first.bytes, b"out\n");
        let second = rx.recv().await.unwrap();
        assert_eq!(second.stream, OutputStream::Stderr);
        drop(sink);
        assert!(rx.recv().await.is_none());
        assert!(!OutputSink::new(10).splits());
    }
}
