//! The child's end of its socketpair: blocking frame I/O with a buffered, poll-based reader.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use crate::wire::{HEADER_BYTES, Message, WireError, payload_len};

/// How long a child waiting for a message polls before it sleeps.
const SPIN: Duration = Duration::from_micros(100);

/// Frames to and from the engine, as seen by one forked child.
pub struct ChildChannel {
    stream: UnixStream,
    buffer: Vec<u8>,
    decoded: VecDeque<Message>,
}

impl ChildChannel {
    pub fn new(stream: UnixStream) -> Self {
        Self {
            stream,
            buffer: Vec::with_capacity(64 * 1024),
            decoded: VecDeque::new(),
        }
    }

    pub fn send(&mut self, message: &Message) -> Result<(), WireError> {
        self.stream.write_all(&message.to_frame()?)?;
        Ok(())
    }

    /// Returns the next message, waiting up to `timeout` (`None`: forever). `Ok(None)` when the
    /// timeout passed first.
    pub fn recv(&mut self, timeout: Option<Duration>) -> Result<Option<Message>, WireError> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            if let Some(message) = self.decoded.pop_front() {
                return Ok(Some(message));
            }
            let wait = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if !self.fill(wait)? {
                return Ok(None);
            }
        }
    }

    /// True when a complete message can be returned without blocking.
    pub fn has_pending(&mut self) -> Result<bool, WireError> {
        if self.decoded.is_empty() {
            self.fill(Some(Duration::ZERO))?;
        }
        Ok(!self.decoded.is_empty())
    }

    /// Waits for readable data (up to `wait`), reads what is there and decodes every complete
    /// frame. Returns false when nothing was readable in time.
    fn fill(&mut self, wait: Option<Duration>) -> Result<bool, WireError> {
        if wait != Some(Duration::ZERO) {
            self.spin_for_data();
        }
        let timeout = match wait {
            None => PollTimeout::NONE,
            Some(d) => PollTimeout::try_from(d.as_millis().min(i32::MAX as u128) as i32)
                .unwrap_or(PollTimeout::MAX),
        };
        // Round sub-millisecond waits up so a 0.3 ms timer does not spin.
        let timeout = match wait {
            Some(d) if !d.is_zero() && d < Duration::from_millis(1) => PollTimeout::from(1u8),
            _ => timeout,
        };
        let mut fds = [PollFd::new(self.stream.as_fd(), PollFlags::POLLIN)];
        loop {
            match poll(&mut fds, timeout) {
                Ok(0) => return Ok(false),
                Ok(_) => break,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(WireError::Io(io::Error::from(e))),
            }
        }
        let mut chunk = [0u8; 64 * 1024];
        let n = loop {
            match self.stream.read(&mut chunk) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        };
        if n == 0 {
            return Err(WireError::Closed);
        }
        self.buffer.extend_from_slice(&chunk[..n]);
        self.decode()?;
        Ok(true)
    }

    /// Polls without sleeping for up to [`SPIN`]: a tool reply usually comes back within tens
    /// of microseconds, and a process that went to sleep waiting for it pays a wake-up (on a
    /// virtual machine, an interrupt to a halted CPU) on every call. Yields between polls, so
    /// an engine thread sharing this CPU still runs.
    fn spin_for_data(&self) {
        let until = Instant::now() + SPIN;
        let mut fds = [PollFd::new(self.stream.as_fd(), PollFlags::POLLIN)];
        while Instant::now() < until {
            if matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0) {
                return;
            }
            std::thread::yield_now();
        }
    }

    fn decode(&mut self) -> Result<(), WireError> {
        let mut start = 0;
        while self.buffer.len() - start >= HEADER_BYTES {
            let mut header = [0u8; HEADER_BYTES];
            header.copy_from_slice(&self.buffer[start..start + HEADER_BYTES]);
            let len = payload_len(header)?;
            let end = start + HEADER_BYTES + len;
            if self.buffer.len() < end {
                break;
            }
            self.decoded.push_back(Message::from_payload(
                &self.buffer[start + HEADER_BYTES..end],
            )?);
            start = end;
        }
        self.buffer.drain(..start);
        Ok(())
    }
}
