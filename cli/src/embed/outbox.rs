//! Where the engine's messages to the client go: each line is written and flushed by the task
//! that sends it, under a lock, so concurrent senders never interleave. A writer thread of its
//! own (as first built) cost every message one more thread wake-up between the script's call
//! and the line the client reads.
//!
//! A client that stops reading fills the pipe and blocks the sender. The Python package always
//! reads (a reader thread, and another when one is busy in a slow sync tool); a client that does
//! not has stopped the conversation anyway.

use std::io::Write;
use std::sync::{Arc, Mutex};

/// The client's end of the conversation; cheap to clone.
#[derive(Clone)]
pub struct Outbox {
    writer: Arc<Mutex<Option<Box<dyn Write + Send>>>>,
}

impl Outbox {
    pub fn new(writer: impl Write + Send + 'static) -> Self {
        Self {
            writer: Arc::new(Mutex::new(Some(Box::new(writer)))),
        }
    }

    /// The process's standard output, where `paddock embed` speaks.
    pub fn stdout() -> Self {
        Self::new(std::io::stdout())
    }

    /// Writes `line` and a newline in one write, then flushes. A write that fails means the
    /// client left: later lines are dropped.
    pub fn send_line(&self, line: &str) {
        let Ok(mut guard) = self.writer.lock() else {
            return;
        };
        let Some(writer) = guard.as_mut() else {
            return;
        };
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        if writer
            .write_all(&bytes)
            .and_then(|()| writer.flush())
            .is_err()
        {
            tracing::debug!("the client stopped reading; later messages are dropped");
            *guard = None;
        }
    }

    /// Flushes and lets go of the writer; later lines are dropped.
    pub fn close(&self) {
        if let Ok(mut guard) = self.writer.lock()
            && let Some(mut writer) = guard.take()
        {
            let _ = writer.flush();
        }
    }
}

/// An outbox whose lines arrive on a channel, for tests.
#[cfg(test)]
pub fn channel() -> (Outbox, tokio::sync::mpsc::UnboundedReceiver<String>) {
    struct Lines {
        tx: tokio::sync::mpsc::UnboundedSender<String>,
        pending: Vec<u8>,
    }
    impl Write for Lines {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.pending.extend_from_slice(bytes);
            while let Some(end) = self.pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=end).collect();
                let _ = self
                    .tx
                    .send(String::from_utf8_lossy(&line[..end]).into_owned());
            }
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    (
        Outbox::new(Lines {
            tx,
            pending: Vec::new(),
        }),
        rx,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_from_concurrent_senders_stay_whole_and_a_gone_client_is_quiet() {
        let (out, mut lines) = channel();
        std::thread::scope(|scope| {
            for n in 0..4 {
                let out = out.clone();
                scope.spawn(move || {
                    for i in 0..100 {
                        out.send_line(&format!("{{\"sender\":{n},\"i\":{i}}}"));
                    }
                });
            }
        });
        let mut got = 0;
        while let Ok(line) = lines.try_recv() {
            assert!(
                serde_json::from_str::<serde_json::Value>(&line).is_ok(),
                "{line}"
            );
            got += 1;
        }
        assert_eq!(got, 400);

        struct Broken;
        impl Write for Broken {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let gone = Outbox::new(Broken);
        gone.send_line("{}");
        assert!(gone.writer.lock().unwrap().is_none());
        gone.send_line("{}");
        gone.close();
    }
}
