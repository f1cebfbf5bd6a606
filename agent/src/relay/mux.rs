//! Many Unix-socket connections carried over one byte stream, each with its own flow control.
//!
//! Each connection is a *channel*: two threads move its bytes, one from the socket to the stream
//! ([`Frame::Data`], then [`Frame::Eof`] when the socket's reading side ends), one from the
//! channel's queue to the socket. A sender never has more than [`WINDOW`] bytes of a channel
//! unconsumed at the far end: the far end returns [`Frame::Credit`] as it writes them out. So
//! the thread reading the stream never waits on a socket (it only queues), a slow connection
//! never stalls the others, and memory per channel is bounded.
//!
//! A broken stream resets every channel: their sockets are shut down, so whoever holds the
//! other end sees the connection end at once instead of waiting forever.

use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use super::wire::{Frame, MAX_DATA};

/// How many bytes of one channel may be in flight, unconsumed, in each direction.
pub const WINDOW: usize = 256 * 1024;

/// Credit is returned once this much of a channel was written out (not per chunk: every frame
/// on the stream costs a message on srun's connection, see [`Frame::Ack`]).
const CREDIT_STEP: usize = WINDOW / 4;

/// One end of a multiplexed stream.
pub struct Mux {
    out: Arc<Outgoing>,
    channels: Mutex<HashMap<u32, Arc<Channel>>>,
    next: AtomicU32,
}

/// Frames waiting for the stream. One writer thread writes whatever has gathered in one write,
/// so frames sent together (a message's header and body, data and its credit) travel together.
struct Outgoing {
    pending: Mutex<Vec<u8>>,
    ready: Condvar,
    broken: AtomicBool,
}

impl Outgoing {
    fn write_loop(&self, mut out: Box<dyn Write + Send>) {
        loop {
            let batch = {
                let mut pending = locked(&self.pending);
                while pending.is_empty() && !self.broken.load(Ordering::SeqCst) {
                    pending = self
                        .ready
                        .wait(pending)
                        .unwrap_or_else(PoisonError::into_inner);
                }
                if self.broken.load(Ordering::SeqCst) {
                    return;
                }
                std::mem::take(&mut *pending)
            };
            if out.write_all(&batch).and_then(|()| out.flush()).is_err() {
                self.broken.store(true, Ordering::SeqCst);
                return;
            }
        }
    }
}

struct Channel {
    id: u32,
    socket: UnixStream,
    state: Mutex<ChannelState>,
    changed: Condvar,
}

struct ChannelState {
    /// Bytes this end may still send.
    credit: usize,
    /// Bytes received, not yet written to the socket.
    inbound: VecDeque<Vec<u8>>,
    /// The far end's side ended: once `inbound` is written, the socket's writing side is shut.
    inbound_eof: bool,
    /// The connection is gone (a [`Frame::Close`], a failed socket, a broken stream).
    reset: bool,
    /// The channel's threads still running; the last one removes the channel.
    threads: u8,
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Channel {
    fn state(&self) -> MutexGuard<'_, ChannelState> {
        locked(&self.state)
    }

    /// The state once `ready` holds for it, waiting for changes; `None` once the channel is
    /// reset (then there is nothing more to do).
    fn state_when(
        &self,
        ready: impl Fn(&ChannelState) -> bool,
    ) -> Option<MutexGuard<'_, ChannelState>> {
        let mut state = self.state();
        while !ready(&state) && !state.reset {
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        (!state.reset).then_some(state)
    }

    /// Ends the connection here: both threads stop, the socket's holder sees it close.
    fn reset(&self) {
        self.state().reset = true;
        self.changed.notify_all();
        let _ = self.socket.shutdown(Shutdown::Both);
    }
}

impl Mux {
    pub fn new(out: Box<dyn Write + Send>) -> io::Result<Arc<Self>> {
        let outgoing = Arc::new(Outgoing {
            pending: Mutex::new(Vec::new()),
            ready: Condvar::new(),
            broken: AtomicBool::new(false),
        });
        let writer = outgoing.clone();
        std::thread::Builder::new()
            .name("relay-writer".into())
            .spawn(move || writer.write_loop(out))?;
        Ok(Arc::new(Self {
            out: outgoing,
            channels: Mutex::new(HashMap::new()),
            next: AtomicU32::new(1),
        }))
    }

    /// Queues one frame for the stream, whole (frames of concurrent channels never
    /// interleave). An error once the stream is known to be broken.
    pub fn send(&self, frame: &Frame) -> io::Result<()> {
        if self.out.broken.load(Ordering::SeqCst) {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        locked(&self.out.pending).extend_from_slice(frame.encode().as_bytes());
        self.out.ready.notify_one();
        Ok(())
    }

    /// The channels open now.
    pub fn open_channels(&self) -> usize {
        locked(&self.channels).len()
    }

    /// A connection accepted on this end: the far end is asked to open its side.
    pub fn open(self: &Arc<Self>, socket: UnixStream) -> io::Result<()> {
        let id = self.next.fetch_add(1, Ordering::SeqCst);
        let channel = self.register(id, socket)?;
        if let Err(err) = self.send(&Frame::Open { channel: id }) {
            locked(&self.channels).remove(&id);
            return Err(err);
        }
        self.start(channel)
    }

    /// Routes one frame read from the stream. `connect` opens this end's side of a channel the
    /// far end opened (the node's agent socket); an end that opens nothing refuses.
    pub fn route(self: &Arc<Self>, frame: Frame, connect: &dyn Fn(u32) -> io::Result<UnixStream>) {
        let channel = |id: u32| locked(&self.channels).get(&id).cloned();
        match frame {
            Frame::Hello { .. } | Frame::Token { .. } | Frame::Ack => {}
            Frame::Open { channel: id } => {
                let opened = connect(id)
                    .and_then(|socket| self.register(id, socket))
                    .and_then(|channel| self.start(channel));
                if let Err(err) = opened {
                    tracing_line(&format!("channel {id}: cannot open: {err}"));
                    let _ = self.send(&Frame::Close { channel: id });
                }
            }
            Frame::Data { channel: id, bytes } => match channel(id) {
                Some(ch) => {
                    ch.state().inbound.push_back(bytes);
                    ch.changed.notify_all();
                }
                // Data for a channel this end never had or already dropped: tell the sender.
                None => {
                    let _ = self.send(&Frame::Close { channel: id });
                }
            },
            Frame::Eof { channel: id } => {
                if let Some(ch) = channel(id) {
                    ch.state().inbound_eof = true;
                    ch.changed.notify_all();
                }
            }
            Frame::Close { channel: id } => {
                if let Some(ch) = channel(id) {
                    ch.reset();
                }
            }
            Frame::Credit { channel: id, bytes } => {
                if let Some(ch) = channel(id) {
                    ch.state().credit += bytes as usize;
                    ch.changed.notify_all();
                }
            }
        }
    }

    /// The stream ended: every channel is reset, and no frame is sent any more.
    pub fn shut_all(&self) {
        self.out.broken.store(true, Ordering::SeqCst);
        self.out.ready.notify_all();
        let all: Vec<Arc<Channel>> = locked(&self.channels).values().cloned().collect();
        for channel in all {
            channel.reset();
        }
    }

    fn register(&self, id: u32, socket: UnixStream) -> io::Result<Arc<Channel>> {
        let channel = Arc::new(Channel {
            id,
            socket,
            state: Mutex::new(ChannelState {
                credit: WINDOW,
                inbound: VecDeque::new(),
                inbound_eof: false,
                reset: false,
                threads: 2,
            }),
            changed: Condvar::new(),
        });
        let mut channels = locked(&self.channels);
        if channels.contains_key(&id) {
            return Err(io::Error::other(format!("channel {id} is already open")));
        }
        channels.insert(id, channel.clone());
        Ok(channel)
    }

    fn start(self: &Arc<Self>, channel: Arc<Channel>) -> io::Result<()> {
        let reader = channel.socket.try_clone()?;
        let writer = channel.socket.try_clone()?;
        let up = self.spawn_half(&channel, "up", move |mux, ch| mux.uplink(ch, reader));
        if let Err(err) = up {
            locked(&self.channels).remove(&channel.id);
            return Err(err);
        }
        let down = self.spawn_half(&channel, "down", move |mux, ch| mux.downlink(ch, writer));
        if let Err(err) = down {
            // The uplink ends once the socket is shut down, and removes the channel.
            channel.reset();
            self.thread_done(&channel);
            return Err(err);
        }
        Ok(())
    }

    /// Starts the thread `relay-<direction>-<id>` that runs one direction of a channel and
    /// then tells the mux it is done.
    fn spawn_half(
        self: &Arc<Self>,
        channel: &Arc<Channel>,
        direction: &str,
        half: impl FnOnce(&Self, &Channel) + Send + 'static,
    ) -> io::Result<()> {
        let (mux, ch) = (self.clone(), channel.clone());
        std::thread::Builder::new()
            .name(format!("relay-{direction}-{}", channel.id))
            .spawn(move || {
                half(&mux, &ch);
                mux.thread_done(&ch);
            })
            .map(drop)
    }

    /// The socket's bytes to the stream, within the far end's credit.
    fn uplink(&self, channel: &Channel, mut socket: UnixStream) {
        let mut buf = vec![0u8; MAX_DATA];
        loop {
            let allowed = match channel.state_when(|s| s.credit > 0) {
                Some(state) => state.credit.min(MAX_DATA),
                None => return,
            };
            match socket.read(&mut buf[..allowed]) {
                Ok(0) => {
                    if !channel.state().reset {
                        let _ = self.send(&Frame::Eof {
                            channel: channel.id,
                        });
                    }
                    return;
                }
                Ok(n) => {
                    channel.state().credit -= n;
                    let data = Frame::Data {
                        channel: channel.id,
                        bytes: buf[..n].to_vec(),
                    };
                    if self.send(&data).is_err() {
                        channel.reset();
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    if !channel.state().reset {
                        let _ = self.send(&Frame::Close {
                            channel: channel.id,
                        });
                    }
                    channel.reset();
                    return;
                }
            }
        }
    }

    /// The channel's queue to the socket, returning credit for what was written.
    fn downlink(&self, channel: &Channel, mut socket: UnixStream) {
        let mut unreturned = 0usize;
        loop {
            let chunk = {
                let Some(mut state) =
                    channel.state_when(|s| !s.inbound.is_empty() || s.inbound_eof)
                else {
                    return;
                };
                match state.inbound.pop_front() {
                    Some(chunk) => chunk,
                    None => {
                        // Everything the far end sent is written: its side ended.
                        let _ = socket.shutdown(Shutdown::Write);
                        return;
                    }
                }
            };
            if socket.write_all(&chunk).is_err() {
                let _ = self.send(&Frame::Close {
                    channel: channel.id,
                });
                channel.reset();
                return;
            }
            unreturned += chunk.len();
            if unreturned >= CREDIT_STEP {
                let credit = Frame::Credit {
                    channel: channel.id,
                    bytes: u32::try_from(unreturned).unwrap_or(u32::MAX),
                };
                let _ = self.send(&credit);
                unreturned = 0;
            }
        }
    }

    fn thread_done(&self, channel: &Channel) {
        let last = {
            let mut state = channel.state();
            state.threads = state.threads.saturating_sub(1);
            state.threads == 0
        };
        if last {
            locked(&self.channels).remove(&channel.id);
        }
    }
}

/// A diagnostic line on standard error (the agent has no tracing subscriber; its stderr is the
/// holder step's log).
pub(crate) fn tracing_line(message: &str) {
    eprintln!("paddock-agent relay: {message}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::os::unix::net::UnixListener;
    use std::time::Duration;

    /// Two muxes joined by a pair of socketpairs standing in for srun's stdin and stdout; the
    /// far end connects channels to `agent`.
    struct Pair {
        near: Arc<Mux>,
        far: Arc<Mux>,
        near_stream: UnixStream,
        far_stream: UnixStream,
    }

    fn pump(mux: Arc<Mux>, stream: UnixStream, connect: Option<std::path::PathBuf>) {
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stream);
            let mut line = Vec::new();
            loop {
                line.clear();
                match reader.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                let text = String::from_utf8_lossy(&line);
                let Some(frame) = Frame::decode(text.trim_end_matches('\n')) else {
                    continue;
                };
                let connect = connect.clone();
                mux.route(frame, &move |_| match &connect {
                    Some(path) => UnixStream::connect(path),
                    None => Err(io::Error::other("this end opens nothing")),
                });
            }
            mux.shut_all();
        });
    }

    fn pair(agent: &std::path::Path) -> Pair {
        let (near_out, far_in) = UnixStream::pair().unwrap();
        let (far_out, near_in) = UnixStream::pair().unwrap();
        let near = Mux::new(Box::new(near_out.try_clone().unwrap())).unwrap();
        let far = Mux::new(Box::new(far_out.try_clone().unwrap())).unwrap();
        pump(near.clone(), near_in, None);
        pump(far.clone(), far_in, Some(agent.to_path_buf()));
        Pair {
            near,
            far,
            near_stream: near_out,
            far_stream: far_out,
        }
    }

    /// A fake agent listening at `dir/agent.sock` that serves each connection on a thread of
    /// its own with `serve`; returns the socket's path.
    fn agent_at(dir: &std::path::Path, serve: fn(UnixStream)) -> std::path::PathBuf {
        let path = dir.join("agent.sock");
        let listener = UnixListener::bind(&path).unwrap();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let conn = conn.unwrap();
                std::thread::spawn(move || serve(conn));
            }
        });
        path
    }

    /// An "agent" that answers each connection with everything it read, reversed, then closes.
    fn echo_agent(dir: &std::path::Path) -> std::path::PathBuf {
        agent_at(dir, |mut conn| {
            let mut all = Vec::new();
            conn.read_to_end(&mut all).unwrap();
            all.reverse();
            conn.write_all(&all).unwrap();
        })
    }

    fn through(near: &Arc<Mux>, payload: &[u8]) -> Vec<u8> {
        let (mut ours, theirs) = UnixStream::pair().unwrap();
        near.open(theirs).unwrap();
        ours.write_all(payload).unwrap();
        ours.shutdown(Shutdown::Write).unwrap();
        let mut back = Vec::new();
        ours.read_to_end(&mut back).unwrap();
        back
    }

    #[test]
    fn a_connection_larger_than_the_window_arrives_whole_and_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let agent = echo_agent(dir.path());
        let p = pair(&agent);
        let payload: Vec<u8> = (0..(3 * WINDOW + 12345)).map(|i| (i % 251) as u8).collect();
        let mut expected = payload.clone();
        expected.reverse();
        assert_eq!(through(&p.near, &payload), expected);
        // Both ends drop the finished channel.
        for _ in 0..200 {
            if p.near.open_channels() == 0 && p.far.open_channels() == 0 {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        panic!(
            "channels left: near {}, far {}",
            p.near.open_channels(),
            p.far.open_channels()
        );
    }

    #[test]
    fn a_hundred_concurrent_connections_keep_their_bytes_apart() {
        let dir = tempfile::tempdir().unwrap();
        let agent = echo_agent(dir.path());
        let p = pair(&agent);
        let threads: Vec<_> = (0..100u32)
            .map(|i| {
                let near = p.near.clone();
                std::thread::spawn(move || {
                    let payload: Vec<u8> = format!("connection {i};")
                        .repeat(1000 + i as usize * 37)
                        .into_bytes();
                    let mut expected = payload.clone();
                    expected.reverse();
                    assert_eq!(through(&near, &payload), expected, "connection {i}");
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }

    #[test]
    fn a_reader_that_stops_reading_holds_back_only_its_own_channel() {
        let dir = tempfile::tempdir().unwrap();
        // An agent that sends 4 windows' worth at once, whatever it is asked.
        let path = agent_at(dir.path(), |mut conn| {
            let _ = conn.write_all(&vec![b'x'; 4 * WINDOW]);
        });
        let p = pair(&path);
        // The slow connection: opened, never read.
        let (_slow, theirs) = UnixStream::pair().unwrap();
        p.near.open(theirs).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        // Another connection still gets all its bytes.
        let (mut ours, theirs) = UnixStream::pair().unwrap();
        p.near.open(theirs).unwrap();
        ours.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut got = vec![0u8; 4 * WINDOW];
        ours.read_exact(&mut got).unwrap();
        assert!(got.iter().all(|&b| b == b'x'));
    }

    #[test]
    fn a_broken_stream_ends_every_open_connection_at_once() {
        let dir = tempfile::tempdir().unwrap();
        // An agent that never answers.
        let path = dir.path().join("agent.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let held = Arc::new(Mutex::new(Vec::new()));
        let keep = held.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                keep.lock().unwrap().push(conn.unwrap());
            }
        });
        let p = pair(&path);
        let (mut ours, theirs) = UnixStream::pair().unwrap();
        p.near.open(theirs).unwrap();
        ours.write_all(b"hello").unwrap();
        std::thread::sleep(Duration::from_millis(100));
        // The stream goes away (srun killed): both directions.
        p.near_stream.shutdown(Shutdown::Both).unwrap();
        p.far_stream.shutdown(Shutdown::Both).unwrap();
        ours.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut rest = Vec::new();
        let read = ours.read_to_end(&mut rest);
        assert!(
            read.is_ok(),
            "the connection must end, not time out: {read:?}"
        );
        // And a new connection over the broken stream is refused at once.
        let (_x, theirs) = UnixStream::pair().unwrap();
        assert!(p.near.open(theirs).is_err());
    }
}
