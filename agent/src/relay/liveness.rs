//! Heartbeats on a stream that carries every byte (`relay = "srun"`).
//!
//! A node that crashes or is cut off the network sends nothing: no end of stream, no reset. srun
//! itself notices only when slurmctld declares the node down (`SlurmdTimeout`, minutes), so
//! without a beat of its own a command in flight would wait for its own timeout. Each end sends
//! [`Frame::Ack`] every [`BEAT`] (an acknowledgement frame asks for no answer, so beats never
//! echo), and gives the stream up once it heard no frame for [`SILENCE_LIMIT`]: the same limit
//! as the direct connections' keepalives ([`super::direct::SILENCE_LIMIT`]).
//!
//! Not used with `relay = "tcp"`: there the stream carries only the step's life, and the data
//! connections watch themselves.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::mux::Mux;
use super::wire::Frame;

/// How often each end says it is there.
pub const BEAT: Duration = Duration::from_secs(5);
/// How long a stream may go without a frame before it is given up.
pub const SILENCE_LIMIT: Duration = super::direct::SILENCE_LIMIT;

/// When the far end was last heard.
pub struct Liveness {
    last_heard: Mutex<Instant>,
    beat: Duration,
    limit: Duration,
    stopped: AtomicBool,
}

impl Liveness {
    /// A stream heard from just now, beating every [`BEAT`], given up after [`SILENCE_LIMIT`].
    pub fn new() -> Arc<Self> {
        Self::with_times(BEAT, SILENCE_LIMIT)
    }

    fn with_times(beat: Duration, limit: Duration) -> Arc<Self> {
        Arc::new(Self {
            last_heard: Mutex::new(Instant::now()),
            beat,
            limit,
            stopped: AtomicBool::new(false),
        })
    }

    /// A frame came from the far end.
    pub fn heard(&self) {
        *self
            .last_heard
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Instant::now();
    }

    /// The stream ended by itself: the watch stops without calling its `lost`.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
    }

    fn silent_for(&self) -> Duration {
        self.last_heard
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .elapsed()
    }

    /// Beats on `mux` until stopped, or until the far end was silent past the limit: then
    /// `lost` runs once, with how long it was silent, and the watch ends.
    pub fn watch(
        self: &Arc<Self>,
        mux: Arc<Mux>,
        lost: impl FnOnce(Duration) + Send + 'static,
    ) -> std::io::Result<()> {
        let me = self.clone();
        std::thread::Builder::new()
            .name("relay-liveness".into())
            .spawn(move || {
                let tick = me.beat.min(Duration::from_secs(1));
                let mut since_beat = Duration::ZERO;
                loop {
                    std::thread::sleep(tick);
                    if me.stopped.load(Ordering::SeqCst) {
                        return;
                    }
                    let silent = me.silent_for();
                    if silent >= me.limit {
                        lost(silent);
                        return;
                    }
                    since_beat += tick;
                    if since_beat >= me.beat {
                        since_beat = Duration::ZERO;
                        if mux.send(&Frame::Ack).is_err() {
                            return;
                        }
                    }
                }
            })
            .map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::os::unix::net::UnixStream;

    /// A mux over one end of a socket pair, watched with these times: the mux, the far end,
    /// the liveness and where the silence it gave up after arrives.
    fn watching(
        beat: Duration,
        limit: Duration,
    ) -> (
        Arc<Mux>,
        UnixStream,
        Arc<Liveness>,
        std::sync::mpsc::Receiver<Duration>,
    ) {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let mux = Mux::new(Box::new(ours)).unwrap();
        let liveness = Liveness::with_times(beat, limit);
        let (lost_tx, lost_rx) = std::sync::mpsc::channel();
        liveness
            .watch(mux.clone(), move |silent| {
                let _ = lost_tx.send(silent);
            })
            .unwrap();
        (mux, theirs, liveness, lost_rx)
    }

    #[test]
    fn a_far_end_that_beats_is_kept_and_one_that_falls_silent_is_given_up() {
        let (_mux, theirs, liveness, lost_rx) =
            watching(Duration::from_millis(40), Duration::from_millis(400));

        // The far end is heard every 50 ms for a second: kept, and this end beat meanwhile.
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(1) {
            liveness.heard();
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(lost_rx.try_recv().is_err(), "given up while heard");
        let mut beats = BufReader::new(theirs);
        let mut line = String::new();
        beats.read_line(&mut line).unwrap();
        assert_eq!(Frame::decode(line.trim_end()), Some(Frame::Ack));

        // Then nothing: given up once, after the limit.
        let silent = lost_rx.recv_timeout(Duration::from_secs(3)).unwrap();
        assert!(silent >= Duration::from_millis(400), "{silent:?}");
    }

    #[test]
    fn a_stopped_watch_gives_nothing_up() {
        // Only the watch holds the mux (`_` drops this handle at once).
        let (_, _theirs, liveness, lost_rx) =
            watching(Duration::from_millis(20), Duration::from_millis(100));
        liveness.stop();
        assert!(lost_rx.recv_timeout(Duration::from_millis(500)).is_err());
    }
}
