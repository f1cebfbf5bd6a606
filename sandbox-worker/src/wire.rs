//! The wire protocol between the engine, the zygote and each forked child.
//!
//! Every message is one variant of [`Message`], serialised as JSON and sent as a frame: a 4-byte
//! little-endian length followed by that many bytes. A frame longer than [`MAX_FRAME_BYTES`] is
//! refused before any allocation, so a hostile child cannot make the engine allocate unbounded
//! memory by announcing a huge frame.

use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};

/// Hard cap on one frame's payload. Script sources are capped at 1 MiB by the engine and outputs
/// are streamed in small pieces, so 16 MiB leaves room for large tool results only.
pub const MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

/// Size of the length prefix.
pub const HEADER_BYTES: usize = 4;

/// Every message that crosses a process boundary in the sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Message {
    // ---- engine <-> zygote (control socket) ----
    /// The zygote finished initialising the interpreter and is ready to fork.
    ZygoteReady {
        #[serde(deserialize_with = "float_field::f64")]
        init_ms: f64,
    },
    /// Engine asks the zygote for one more confined child.
    Fork,
    /// The zygote forked a child; the child's end of its socketpair travels with this frame.
    Forked { pid: i32 },
    /// The zygote could not fork.
    ForkFailed { reason: String },
    /// A child exited; `signal` is set when it was killed by one.
    Exited {
        pid: i32,
        code: Option<i32>,
        signal: Option<i32>,
    },

    // ---- engine <-> child (one socketpair per child) ----
    /// The child confined itself and waits for its script.
    ChildReady { confinement: String },
    /// The child could not confine itself; it exits after sending this (fail closed).
    ConfinementFailed { reason: String },
    /// The one script this child runs.
    Run(RunRequest),
    /// Text the script printed, in order.
    Output { text: String },
    /// The script called a tool; `args_json` is a JSON object of the keyword arguments.
    ToolCall {
        id: u64,
        tool: String,
        args_json: String,
    },
    /// The engine's answer to one [`Message::ToolCall`].
    ToolReply { id: u64, reply: ToolReply },
    /// The script ended; the child exits right after (a notebook child waits for the next
    /// `Run` instead).
    Finished(ScriptOutcome),
    /// Engine asks a notebook child, between scripts, for its names (a snapshot).
    DumpState,
    /// The child's answer to [`Message::DumpState`].
    StateDumped(Result<NotebookState, String>),
    /// Engine gives a fresh child a notebook's names before its first script (a session
    /// started from a snapshot); the child is a notebook child from then on.
    LoadState(NotebookState),
    /// The child's answer to [`Message::LoadState`]: the names restored and those that could
    /// not be, with why; an error when nothing could be.
    StateLoaded(Result<LoadedState, String>),
}

/// A notebook's names in a form another child (of another engine process) can load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NotebookState {
    /// How `data_base64` was made: `marshal` (plain data only) or `pickle` (protocol 4).
    pub encoding: String,
    /// A dict of the kept names, so encoded, base64.
    pub data_base64: String,
    /// (name, module) of each name bound to a module: imported again by name.
    pub modules: Vec<(String, String)>,
    /// Every name kept, sorted.
    pub names: Vec<String>,
    /// (name, why) of each name that could not be kept.
    pub not_kept: Vec<(String, String)>,
}

/// What loading a [`NotebookState`] restored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadedState {
    pub names: Vec<String>,
    /// (name, why) of each name that could not be restored (a module this sandbox refuses).
    pub not_restored: Vec<(String, String)>,
}

/// What the child needs to run one script.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRequest {
    /// The prepared script (see `prepare`).
    pub source: String,
    /// The script as the agent wrote it: tracebacks quote its lines.
    pub original_source: String,
    /// Python identifier -> registry tool name, for every tool the script may call.
    pub tools: Vec<(String, String)>,
    /// Python identifier -> the tool's parameter names in the order of its JSON schema's
    /// `properties`: what a positional call (`lookup("paris")`) binds to. Tools without
    /// properties are left out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_parameters: Vec<(String, Vec<String>)>,
    /// The script's own heap budget in bytes (`MemoryError` above it). In a notebook child
    /// the first script's budget is the session's, counted from before that script.
    pub max_memory_bytes: u64,
    /// Notebook session: run in the child's kept namespace and wait for the next script
    /// afterwards instead of exiting.
    #[serde(default)]
    pub keep_state: bool,
}

/// The engine's answer to a nested tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum ToolReply {
    /// The tool's JSON result.
    Ok { value_json: String },
    /// The tool failed; the script sees `exception` (`ValueError`, `PermissionError` or
    /// `RuntimeError`) carrying `message`.
    Err {
        exception: String,
        message: String,
        error_code: String,
    },
}

/// How a script ended, as the child saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum ScriptOutcome {
    /// The final value, already JSON. `final_answer`: the script ended by calling
    /// `final_answer(value)` (the CodeAct style's way to finish).
    Ok {
        result_json: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        final_answer: bool,
    },
    /// An uncaught exception (or a syntax error found while compiling).
    Err(ScriptFailure),
}

/// An uncaught exception, described for the engine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScriptFailure {
    /// Python exception type name, e.g. `ValueError`.
    pub exception: String,
    /// `str()` of the exception.
    pub message: String,
    /// Line in the script where it was raised, when known.
    pub line: Option<u32>,
    /// Formatted traceback limited to the script's own frames.
    pub traceback: String,
    /// Set by the runtime for failures with a fixed code (`tool_approval:denied`,
    /// `codemode:syntax_error`, `codemode:memory_limit`).
    pub error_code: Option<String>,
    /// Set when the exception is an `AttributeError` for a tool that does not exist.
    pub unknown_tool: Option<String>,
}

/// Errors of the wire layer.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("frame of {len} bytes exceeds the {max} byte cap")]
    FrameTooLarge { len: usize, max: usize },
    #[error("malformed frame: {0}")]
    Malformed(#[from] serde_json::Error),
    #[error("peer closed the connection")]
    Closed,
    #[error("i/o error on the sandbox socket: {0}")]
    Io(#[from] io::Error),
}

impl Message {
    /// Encodes the message as one complete frame (header included).
    pub fn to_frame(&self) -> Result<Vec<u8>, WireError> {
        let mut buf = vec![0u8; HEADER_BYTES];
        serde_json::to_writer(&mut buf, self)?;
        let len = buf.len() - HEADER_BYTES;
        if len > MAX_FRAME_BYTES {
            return Err(WireError::FrameTooLarge {
                len,
                max: MAX_FRAME_BYTES,
            });
        }
        let header = u32::try_from(len)
            .map_err(|_| WireError::FrameTooLarge {
                len,
                max: MAX_FRAME_BYTES,
            })?
            .to_le_bytes();
        buf[..HEADER_BYTES].copy_from_slice(&header);
        Ok(buf)
    }

    /// Decodes a frame payload (without header).
    pub fn from_payload(payload: &[u8]) -> Result<Self, WireError> {
        Ok(serde_json::from_slice(payload)?)
    }
}

/// Parses a frame header, refusing lengths over the cap.
pub fn payload_len(header: [u8; HEADER_BYTES]) -> Result<usize, WireError> {
    let len = u32::from_le_bytes(header) as usize;
    if len > MAX_FRAME_BYTES {
        return Err(WireError::FrameTooLarge {
            len,
            max: MAX_FRAME_BYTES,
        });
    }
    Ok(len)
}

/// Writes one message to a blocking stream.
pub fn write_message<W: Write>(out: &mut W, message: &Message) -> Result<(), WireError> {
    out.write_all(&message.to_frame()?)?;
    Ok(())
}

/// Reads one message from a blocking stream. A clean end of stream before a header is
/// [`WireError::Closed`]; an end of stream inside a frame is an I/O error.
pub fn read_message<R: Read>(input: &mut R) -> Result<Message, WireError> {
    let mut header = [0u8; HEADER_BYTES];
    let mut filled = 0;
    while filled < HEADER_BYTES {
        match input.read(&mut header[filled..]) {
            Ok(0) if filled == 0 => return Err(WireError::Closed),
            Ok(0) => return Err(WireError::Io(io::ErrorKind::UnexpectedEof.into())),
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let len = payload_len(header)?;
    let mut payload = vec![0u8; len];
    input.read_exact(&mut payload)?;
    Message::from_payload(&payload)
}

/// Floats in messages that serde buffers before it reads them (internally tagged enums such as
/// [`Message`]). With serde_json's `arbitrary_precision` (the workspace's: integers of any size
/// stay numbers) a buffered number is a map that a plain `f64` field refuses; these read it.
pub mod float_field {
    use serde::{Deserialize, Deserializer, de::Error};
    use serde_json::Number;

    fn to_f64<E: Error>(number: &Number) -> Result<f64, E> {
        number
            .as_f64()
            .ok_or_else(|| E::custom(format_args!("number out of range: {number}")))
    }

    /// A required float.
    pub fn f64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
        to_f64(&Number::deserialize(deserializer)?)
    }

    /// An optional float (`null` or absent: `None`; pair it with `#[serde(default)]`).
    pub fn option_f64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<f64>, D::Error> {
        Option::<Number>::deserialize(deserializer)?
            .as_ref()
            .map(to_f64)
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn roundtrip(message: Message) {
        let frame = message.to_frame().unwrap();
        let back = read_message(&mut frame.as_slice()).unwrap();
        assert_eq!(back, message);
    }

    #[test]
    fn every_kind_of_message_round_trips() {
        roundtrip(Message::Fork);
        roundtrip(Message::Output {
            text: "héllo\n\u{0}".into(),
        });
        roundtrip(Message::ToolCall {
            id: 7,
            tool: "wait".into(),
            args_json: "{}".into(),
        });
        roundtrip(Message::ToolReply {
            id: 7,
            reply: ToolReply::Err {
                exception: "ValueError".into(),
                message: "bad".into(),
                error_code: "tool:invalid_arguments".into(),
            },
        });
        roundtrip(Message::Run(RunRequest {
            source: "1".into(),
            original_source: "1".into(),
            tools: vec![("my_tool".into(), "my-tool".into())],
            tool_parameters: vec![("my_tool".into(), vec!["city".into(), "days".into()])],
            max_memory_bytes: 1 << 20,
            keep_state: true,
        }));
        roundtrip(Message::Finished(ScriptOutcome::Ok {
            result_json: "42".into(),
            final_answer: true,
        }));
        roundtrip(Message::Finished(ScriptOutcome::Err(ScriptFailure {
            exception: "ValueError".into(),
            message: "x".into(),
            line: Some(3),
            traceback: String::new(),
            error_code: None,
            unknown_tool: None,
        })));
    }

    /// A float inside the tagged enum survives serde's buffering under `arbitrary_precision`
    /// (without `float_field` the zygote's first frame was refused: "invalid type: map").
    #[test]
    fn floats_in_tagged_messages_are_read() {
        roundtrip(Message::ZygoteReady { init_ms: 12.5 });
        roundtrip(Message::ZygoteReady { init_ms: 3.0 });
        let frame = br#"{"type": "zygote_ready", "init_ms": 1e-05}"#;
        let mut framed = (frame.len() as u32).to_le_bytes().to_vec();
        framed.extend_from_slice(frame);
        let back = read_message(&mut framed.as_slice()).unwrap();
        assert_eq!(back, Message::ZygoteReady { init_ms: 1e-05 });
    }

    #[test]
    fn oversized_header_is_refused_before_allocating() {
        let mut frame = ((MAX_FRAME_BYTES + 1) as u32).to_le_bytes().to_vec();
        frame.extend_from_slice(b"{}");
        let err = read_message(&mut frame.as_slice()).unwrap_err();
        assert!(matches!(err, WireError::FrameTooLarge { len, .. } if len == MAX_FRAME_BYTES + 1));
    }

    #[test]
    fn oversized_message_is_refused_when_encoding() {
        let big = Message::Output {
            text: "x".repeat(MAX_FRAME_BYTES + 10),
        };
        assert!(matches!(
            big.to_frame(),
            Err(WireError::FrameTooLarge { .. })
        ));
    }

    #[test]
    fn malformed_payloads_are_errors_not_panics() {
        for payload in [
            &b"not json"[..],
            b"{\"type\":\"nope\"}",
            b"{}",
            b"\xff\xfe",
            b"",
        ] {
            let mut frame = (payload.len() as u32).to_le_bytes().to_vec();
            frame.extend_from_slice(payload);
            let err = read_message(&mut frame.as_slice()).unwrap_err();
            assert!(matches!(err, WireError::Malformed(_)), "{payload:?}: {err}");
        }
    }

    #[test]
    fn truncated_frames_are_io_errors_and_empty_input_is_closed() {
        assert!(matches!(
            read_message(&mut &b""[..]),
            Err(WireError::Closed)
        ));
        assert!(matches!(
            read_message(&mut &b"\x05\x00"[..]),
            Err(WireError::Io(_))
        ));
        let mut frame = 10u32.to_le_bytes().to_vec();
        frame.extend_from_slice(b"{\"ty");
        assert!(matches!(
            read_message(&mut frame.as_slice()),
            Err(WireError::Io(_))
        ));
    }

    #[test]
    fn fuzzed_byte_strings_never_panic() {
        // A cheap deterministic fuzz over the decoder: every prefix of a valid stream and a
        // stream of pseudo-random bytes must decode or fail, never panic.
        let valid = Message::ToolCall {
            id: 1,
            tool: "t".into(),
            args_json: "{}".into(),
        }
        .to_frame()
        .unwrap();
        for cut in 0..valid.len() {
            let _ = read_message(&mut &valid[..cut]);
        }
        let mut state = 0x2545_f491_u32;
        for _ in 0..2000 {
            let bytes: Vec<u8> = (0..64)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 17;
                    state ^= state << 5;
                    (state & 0xff) as u8
                })
                .collect();
            let _ = read_message(&mut bytes.as_slice());
        }
    }
}
