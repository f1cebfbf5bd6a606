//! The agent protocol: what the engine and `paddock-agent` say to each other over one Unix
//! socket connection.
//!
//! A connection carries one conversation: the engine sends [`Request::Hello`], the agent answers
//! [`Reply::Hello`] with its protocol version; if the versions differ the engine must not send
//! anything but [`Request::Shutdown`] (both are frozen: every version decodes them alike, so an
//! old agent in a long-lived container can always be told to go). Then one request: a
//! [`Request::Run`] streams [`FrameKind::Output`] frames and ends with [`Reply::Exit`]; closing
//! the connection before that ends the run's whole process tree. A [`Request::Files`] (since
//! protocol 4) is one file operation done by the agent itself, answered by [`Reply::Files`] or
//! [`Reply::FileFailed`]: no shell, no process. Since protocol 6 a run may ask for its stderr
//! apart ([`RunRequest::split_stderr`]: [`FrameKind::Stderr`] frames beside the output ones),
//! and a [`Request::Context`] drives one of the session's long-lived CPython contexts
//! (`crate::contexts`): its output streams as for a run, [`Reply::Context`] answers.
//!
//! Frames: one byte of kind, a big-endian `u32` length, the payload. Control messages are JSON
//! ([`FrameKind::Message`]); output and stdin are raw bytes, so a megabyte of output costs a
//! megabyte. A frame longer than [`MAX_FRAME_BYTES`] is a protocol error, never an allocation.

use std::collections::BTreeMap;
use std::io::{Read, Write};

use serde::{Deserialize, Serialize};

/// Bumped whenever a message changes shape. The engine replaces an agent that answers another.
pub const PROTOCOL_VERSION: u32 = 7;

/// Frames larger than this are refused (a corrupt or hostile peer cannot make us allocate more).
pub const MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

/// The socket's file name inside the directory the engine and the agent share.
pub const SOCKET_NAME: &str = "agent.sock";

/// What a frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameKind {
    /// A JSON [`Request`] or [`Reply`].
    Message = 0,
    /// Bytes the command printed on stdout (with stderr merged unless the run split it, or
    /// the terminal's output).
    Output = 1,
    /// Bytes for the command's stdin; an empty frame ends stdin.
    Stdin = 2,
    /// Bytes the command printed on stderr, when the run asked for them apart (since 6).
    Stderr = 3,
}

impl FrameKind {
    fn from_byte(byte: u8) -> Option<Self> {
        match byte {
            0 => Some(Self::Message),
            1 => Some(Self::Output),
            2 => Some(Self::Stdin),
            3 => Some(Self::Stderr),
            _ => None,
        }
    }
}

/// Errors of the protocol layer.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("agent connection: {0}")]
    Io(#[from] std::io::Error),
    #[error("agent frame of {0} bytes is over the {MAX_FRAME_BYTES}-byte limit")]
    TooLarge(usize),
    #[error("agent frame of unknown kind {0}")]
    UnknownKind(u8),
    #[error("agent message is not valid JSON of the expected shape: {0}")]
    Json(#[from] serde_json::Error),
    #[error("agent protocol: expected {expected}, got {got}")]
    Unexpected { expected: &'static str, got: String },
}

/// The engine's side of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Request {
    /// Frozen: the first message of every connection.
    Hello { version: u32 },
    /// Run one program; stdin frames follow when `stdin` is set.
    Run(RunRequest),
    /// One file operation (read, write, edit, patch, search...), done by the agent in the
    /// environment (since protocol 4).
    Files(FilesRequest),
    /// Which run opened the connection from `127.0.0.1:port` to the agent's egress port
    /// (asked by the egress proxy for a refusal's log line; since protocol 5).
    ConnectionOwner { port: u16 },
    /// One action on the session's CPython contexts (since protocol 6): an execution streams
    /// its stdout and stderr as [`FrameKind::Output`] and [`FrameKind::Stderr`] frames, then
    /// [`Reply::Context`] answers; closing the connection first interrupts the execution.
    Context(ContextRequest),
    /// Frozen: the agent ends its runs and exits.
    Shutdown,
}

/// One program to run inside the environment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRequest {
    pub argv: Vec<String>,
    /// Added to the agent's own environment (or, with `clear_env`, the whole environment).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub clear_env: bool,
    /// The directory the program starts in (default: the agent's).
    #[serde(default)]
    pub cwd: Option<String>,
    /// The agent ends the run's tree after this long and answers `timed_out`.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Files committed (`from`, `to`) once the run's tree is gone, before `Exit` is answered:
    /// the session state a wrapper wrote under a run-tagged name (`TO.TAG`) is put into place
    /// without two `mv` processes per command, merged with what overlapping runs saved
    /// meanwhile when the wrapper also wrote the state it started from (`TO.start.TAG`;
    /// [`crate::shell_state::commit_file`], since protocol 3). A missing `from` is skipped.
    #[serde(default)]
    pub renames: Vec<(String, String)>,
    /// A terminal (40 rows, 120 columns) instead of pipes.
    #[serde(default)]
    pub pty: bool,
    /// Stdin frames follow; without them stdin is empty.
    #[serde(default)]
    pub stdin: bool,
    /// Every process started under this id (`PADDOCK_RUN=<id>` in its environment) is ended
    /// with the run when the connection drops early.
    #[serde(default)]
    pub run_id: Option<String>,
    /// Stderr apart from stdout, in [`FrameKind::Stderr`] frames (pipes only: a terminal has
    /// one stream). Without it both share one pipe and keep their order (since protocol 6).
    #[serde(default)]
    pub split_stderr: bool,
    /// Processes that left the run's group (`setsid`, a daemon's double fork) outlive the run
    /// and end with the agent, that is with the session, instead of with the run. The group
    /// itself still ends with the run. Off by default: a finished command leaves nothing
    /// behind (since protocol 7).
    #[serde(default)]
    pub keep_detached: bool,
    /// After its `Exit`, the connection stays open for the caller's next request (no new
    /// connection and hello per command). The agent says in `Exit::kept` whether it did: only
    /// a run served by the session's live shell leaves the connection clean for reuse. An
    /// optional field: agents that do not know it close as before.
    #[serde(default)]
    pub keep_connection: bool,
}

/// One action on the session's CPython contexts ([`crate::contexts`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum ContextRequest {
    /// Runs `code` in context `id` (made on first use, in `cwd` with `env`).
    Execute {
        id: String,
        code: String,
        #[serde(default)]
        timeout_ms: Option<u64>,
        /// Where a context made by this execution starts (default: the agent's directory).
        #[serde(default)]
        cwd: Option<String>,
        #[serde(default)]
        env: BTreeMap<String, String>,
    },
    /// Makes context `id`; an id that exists is an error.
    Create {
        id: String,
        #[serde(default)]
        cwd: Option<String>,
        #[serde(default)]
        env: BTreeMap<String, String>,
    },
    List,
    /// A new interpreter for `id`: its names are gone.
    Restart {
        id: String,
    },
    Remove {
        id: String,
    },
}

/// One file operation and where its relative paths resolve.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FilesRequest {
    pub operation: paddock_files::FileRequest,
    /// The session's current-directory file (the state wrapper's `cwd`): relative paths
    /// resolve against the directory it names, as the session's next command would start.
    #[serde(default)]
    pub cwd_file: Option<String>,
    /// Where relative paths resolve while the session has no current directory yet (its
    /// first command has not run): the directory its commands start in. Default: the agent's.
    #[serde(default)]
    pub start_dir: Option<String>,
}

/// The agent's side of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Reply {
    /// Frozen: the answer to `Hello`.
    Hello {
        version: u32,
        /// The agent's build (crate version), for error messages.
        agent: String,
        pid: u32,
    },
    /// The run ended; its exit status (128 + signal when killed by one).
    Exit {
        code: i32,
        /// Ended by the agent at `timeout_ms`.
        #[serde(default)]
        timed_out: bool,
        /// The connection stays open for the next request (the run asked for it with
        /// `keep_connection` and could keep it).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        kept: bool,
    },
    /// The request could not be carried out (the program could not start, a bad request).
    Error { message: String },
    /// The answer of a [`Request::Files`], as JSON text (kept as text: numbers of any size
    /// cross unchanged, and the reply's tag needs no buffering of a nested value).
    Files { answer: String },
    /// A [`Request::Files`] that failed: what a file tool reports (`file:not_found`, ...).
    FileFailed { error: paddock_files::FileError },
    /// The answer of a [`Request::ConnectionOwner`]: the run, when found.
    Owner { run_id: Option<String> },
    /// The answer of a [`Request::Context`], as JSON text; `failed` carries a context error
    /// (`context:not_found`, ...) as `{"code", "message"}` instead.
    Context {
        answer: String,
        #[serde(default)]
        failed: bool,
    },
    /// `Shutdown` accepted.
    Bye,
}

/// Writes one frame.
pub fn write_frame(
    writer: &mut impl Write,
    kind: FrameKind,
    payload: &[u8],
) -> Result<(), ProtocolError> {
    let len = u32::try_from(payload.len())
        .ok()
        .filter(|&n| n as usize <= MAX_FRAME_BYTES)
        .ok_or(ProtocolError::TooLarge(payload.len()))?;
    let mut header = [0u8; 5];
    header[0] = kind as u8;
    header[1..].copy_from_slice(&len.to_be_bytes());
    writer.write_all(&header)?;
    writer.write_all(payload)?;
    writer.flush()?;
    Ok(())
}

/// Writes one JSON message frame.
pub fn write_message(
    writer: &mut impl Write,
    message: &impl Serialize,
) -> Result<(), ProtocolError> {
    let json = serde_json::to_vec(message)?;
    write_frame(writer, FrameKind::Message, &json)
}

/// Reads one frame; `None` at a clean end of stream (between frames).
pub fn read_frame(reader: &mut impl Read) -> Result<Option<(FrameKind, Vec<u8>)>, ProtocolError> {
    let mut header = [0u8; 5];
    let mut filled = 0;
    while filled < header.len() {
        match reader.read(&mut header[filled..]) {
            Ok(0) if filled == 0 => return Ok(None),
            Ok(0) => {
                return Err(ProtocolError::Io(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "connection closed inside a frame header",
                )));
            }
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let (kind, len) = parse_header(header)?;
    let mut payload = vec![0u8; len];
    reader.read_exact(&mut payload)?;
    Ok(Some((kind, payload)))
}

/// Kind and length of a frame header, checked against the limits.
pub fn parse_header(header: [u8; 5]) -> Result<(FrameKind, usize), ProtocolError> {
    let kind = FrameKind::from_byte(header[0]).ok_or(ProtocolError::UnknownKind(header[0]))?;
    let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
    if len > MAX_FRAME_BYTES {
        return Err(ProtocolError::TooLarge(len));
    }
    Ok((kind, len))
}

/// Reads a frame that must be a JSON message of type `T`.
pub fn read_message<T: for<'de> Deserialize<'de>>(
    reader: &mut impl Read,
    expected: &'static str,
) -> Result<T, ProtocolError> {
    match read_frame(reader)? {
        Some((FrameKind::Message, payload)) => Ok(serde_json::from_slice(&payload)?),
        Some((kind, _)) => Err(ProtocolError::Unexpected {
            expected,
            got: format!("a {kind:?} frame"),
        }),
        None => Err(ProtocolError::Unexpected {
            expected,
            got: "the end of the connection".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        let mut buf = Vec::new();
        write_message(&mut buf, &Request::Hello { version: 7 }).unwrap();
        write_frame(&mut buf, FrameKind::Output, b"hi\n").unwrap();
        write_frame(&mut buf, FrameKind::Stdin, b"").unwrap();
        let mut r = buf.as_slice();
        let hello: Request = read_message(&mut r, "hello").unwrap();
        assert_eq!(hello, Request::Hello { version: 7 });
        assert_eq!(
            read_frame(&mut r).unwrap(),
            Some((FrameKind::Output, b"hi\n".to_vec()))
        );
        assert_eq!(
            read_frame(&mut r).unwrap(),
            Some((FrameKind::Stdin, vec![]))
        );
        assert_eq!(read_frame(&mut r).unwrap(), None);
    }

    #[test]
    fn oversized_and_unknown_frames_are_refused_before_allocating() {
        let mut header = [1u8, 0, 0, 0, 0];
        header[1..].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(
            read_frame(&mut header.as_slice()),
            Err(ProtocolError::TooLarge(_))
        ));
        assert!(matches!(
            read_frame(&mut [9u8, 0, 0, 0, 0].as_slice()),
            Err(ProtocolError::UnknownKind(9))
        ));
        assert!(read_frame(&mut [1u8, 0, 0].as_slice()).is_err());
    }

    #[test]
    fn the_frozen_messages_keep_their_wire_shape() {
        // An old agent and a new engine must always agree on these two.
        assert_eq!(
            serde_json::to_string(&Request::Hello { version: 1 }).unwrap(),
            r#"{"type":"hello","version":1}"#
        );
        assert_eq!(
            serde_json::to_string(&Request::Shutdown).unwrap(),
            r#"{"type":"shutdown"}"#
        );
    }
}
