//! The relay's frames, one per line of ASCII text.
//!
//! Why text: the stream is a Slurm step's standard input and output, and `slurmstepd` forwards a
//! task's output line by line unless `srun --unbuffered` (which gives the task a terminal, whose
//! line discipline would rewrite binary bytes). A frame that ends in a newline is forwarded at
//! once; base64 keeps payloads free of newlines and of anything a terminal would touch.
//!
//! Every frame starts with [`MARK`], so a stray line on the stream (a message a program printed to
//! its standard output) is told apart and reported, never taken for data.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

/// The first bytes of every frame line.
pub const MARK: &str = "%pr ";
/// The relay's own version, said in [`Frame::Hello`].
pub const RELAY_VERSION: u32 = 1;
/// The largest payload of one [`Frame::Data`].
pub const MAX_DATA: usize = 48 * 1024;

/// One relay frame. Channel numbers are chosen by the side that accepted the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// The far end's agent listens: connections may be opened (over the stream, or, with
    /// `port`, directly to that TCP port of the far end's node, presenting the token).
    Hello { version: u32, port: Option<u16> },
    /// The engine's end gives the far end the token a direct connection must present.
    Token { token: String },
    /// A new connection: the far end connects to its agent's socket.
    Open { channel: u32 },
    /// Bytes of a connection, in order.
    Data { channel: u32, bytes: Vec<u8> },
    /// The sender's side of the connection ended (a half close).
    Eof { channel: u32 },
    /// The connection is gone: both sides drop it.
    Close { channel: u32 },
    /// The receiver consumed this many bytes: the sender may send as many more.
    Credit { channel: u32, bytes: u32 },
    /// Frames arrived. Sent back after every batch read, so that the stream's own transport
    /// answers at once: srun's I/O is TCP without `TCP_NODELAY`, where a second small message
    /// waits for the first one's acknowledgement, which the receiver delays by up to 40 ms
    /// unless it has data of its own to send (measured: 44 ms per message without this).
    /// Also each end's heartbeat on a stream that carries every byte (`liveness`): it asks for
    /// no answer, so beats never echo.
    Ack,
}

impl Frame {
    /// The frame as one line, its newline included.
    pub fn encode(&self) -> String {
        match self {
            Frame::Hello {
                version,
                port: None,
            } => format!("{MARK}H {version}\n"),
            Frame::Hello {
                version,
                port: Some(port),
            } => format!("{MARK}H {version} {port}\n"),
            Frame::Token { token } => format!("{MARK}T {token}\n"),
            Frame::Open { channel } => format!("{MARK}O {channel}\n"),
            Frame::Data { channel, bytes } => {
                format!("{MARK}D {channel} {}\n", STANDARD.encode(bytes))
            }
            Frame::Eof { channel } => format!("{MARK}E {channel}\n"),
            Frame::Close { channel } => format!("{MARK}C {channel}\n"),
            Frame::Credit { channel, bytes } => format!("{MARK}K {channel} {bytes}\n"),
            Frame::Ack => format!("{MARK}A\n"),
        }
    }

    /// The frame a line holds (without its newline); `None` for a line that is not a frame.
    pub fn decode(line: &str) -> Option<Frame> {
        let body = line.strip_prefix(MARK)?;
        let mut words = body.split(' ');
        let kind = words.next()?;
        let number = |word: Option<&str>| word.and_then(|w| w.parse::<u32>().ok());
        let frame = match kind {
            "H" => Frame::Hello {
                version: number(words.next())?,
                port: match words.next() {
                    None => None,
                    Some(port) => Some(port.parse::<u16>().ok()?),
                },
            },
            "T" => {
                let token = words.next()?;
                if token.is_empty() || !token.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return None;
                }
                Frame::Token {
                    token: token.to_owned(),
                }
            }
            "O" => Frame::Open {
                channel: number(words.next())?,
            },
            "D" => {
                let channel = number(words.next())?;
                let bytes = STANDARD.decode(words.next()?).ok()?;
                Frame::Data { channel, bytes }
            }
            "E" => Frame::Eof {
                channel: number(words.next())?,
            },
            "C" => Frame::Close {
                channel: number(words.next())?,
            },
            "A" => Frame::Ack,
            "K" => Frame::Credit {
                channel: number(words.next())?,
                bytes: number(words.next())?,
            },
            _ => return None,
        };
        words.next().is_none().then_some(frame)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn every_frame_is_one_line_that_decodes_to_itself() {
        let frames = [
            Frame::Hello {
                version: 1,
                port: None,
            },
            Frame::Hello {
                version: 1,
                port: Some(40123),
            },
            Frame::Token {
                token: "0123abcdef".into(),
            },
            Frame::Open { channel: 7 },
            Frame::Data {
                channel: 7,
                bytes: b"a\nb\r\x00\xff".to_vec(),
            },
            Frame::Data {
                channel: 3,
                bytes: Vec::new(),
            },
            Frame::Eof { channel: 7 },
            Frame::Close { channel: u32::MAX },
            Frame::Credit {
                channel: 7,
                bytes: 65536,
            },
            Frame::Ack,
        ];
        for frame in frames {
            let line = frame.encode();
            assert!(line.ends_with('\n'));
            assert_eq!(line.matches('\n').count(), 1, "{line:?}");
            assert_eq!(Frame::decode(line.trim_end_matches('\n')), Some(frame));
        }
    }

    #[test]
    fn stray_lines_are_not_frames() {
        for line in [
            "",
            "paddock-agent: cannot bind",
            "%pr",
            "%pr X 1",
            "%pr O",
            "%pr O seven",
            "%pr D 1 !!notbase64",
            "%pr O 1 extra",
            "%pr K 1",
            "%pr A 1",
            "%pr H 1 70000",
            "%pr T not-hex",
        ] {
            assert_eq!(Frame::decode(line), None, "{line:?}");
        }
    }

    proptest! {
        #[test]
        fn data_survives_the_line_encoding(channel: u32, bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let frame = Frame::Data { channel, bytes };
            let line = frame.encode();
            prop_assert!(!line[..line.len() - 1].contains('\n'));
            prop_assert_eq!(Frame::decode(&line[..line.len() - 1]), Some(frame));
        }
    }
}
