//! Property tests of the agent protocol (`paddock_agent::protocol`): the frames the engine and
//! `paddock-agent` exchange are untrusted bytes on both sides of the socket.
//!
//! - every message that can be encoded decodes back to itself, whatever its field values, and
//!   so do output and stdin frames of arbitrary bytes;
//! - a valid stream handed over in arbitrary pieces (with `Interrupted` reads in between) is
//!   reassembled into the same frames, and so is one written through a writer that takes a few
//!   bytes at a time;
//! - arbitrary bytes, truncated streams, corrupted kinds and lengths never panic: each answer is
//!   the one a reference decoder written here gives, and every refusal says what was wrong.
//!
//! Cases per property: 256, or `PROPTEST_CASES`.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers: a failed unwrap is a failed test"
)]

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};

use paddock_agent::protocol::{
    FrameKind, MAX_FRAME_BYTES, ProtocolError, Reply, Request, RunRequest, parse_header,
    read_frame, read_message, write_frame, write_message,
};
use proptest::prelude::*;

#[path = "common/proptest_config.rs"]
mod proptest_config;
use proptest_config::config;

/// Any string: control characters, NUL, quotes, backslashes, astral characters.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::collection::vec(any::<char>(), 0..24).prop_map(String::from_iter),
        "[a-z/_.= -]{0,12}",
        Just(String::new()),
    ]
}

fn run_request() -> impl Strategy<Value = RunRequest> {
    (
        proptest::collection::vec(text(), 0..6),
        proptest::collection::btree_map(text(), text(), 0..5),
        any::<bool>(),
        proptest::option::of(text()),
        proptest::option::of(any::<u64>()),
        proptest::collection::vec((text(), text()), 0..4),
        any::<bool>(),
        any::<bool>(),
        proptest::option::of(text()),
    )
        .prop_map(
            |(argv, env, clear_env, cwd, timeout_ms, renames, pty, stdin, run_id)| RunRequest {
                argv,
                env,
                clear_env,
                cwd,
                timeout_ms,
                renames,
                pty,
                stdin,
                run_id,
                split_stderr: false,
                keep_detached: false,
                keep_connection: false,
            },
        )
}

fn request() -> impl Strategy<Value = Request> {
    prop_oneof![
        any::<u32>().prop_map(|version| Request::Hello { version }),
        run_request().prop_map(Request::Run),
        Just(Request::Shutdown),
    ]
}

fn reply() -> impl Strategy<Value = Reply> {
    prop_oneof![
        (any::<u32>(), text(), any::<u32>()).prop_map(|(version, agent, pid)| Reply::Hello {
            version,
            agent,
            pid
        }),
        (any::<i32>(), any::<bool>(), any::<bool>()).prop_map(|(code, timed_out, kept)| {
            Reply::Exit {
                code,
                timed_out,
                kept,
            }
        }),
        text().prop_map(|message| Reply::Error { message }),
        Just(Reply::Bye),
    ]
}

/// Raw payloads: mostly small, sometimes a few tens of kilobytes.
fn payload() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => proptest::collection::vec(any::<u8>(), 0..64),
        1 => proptest::collection::vec(any::<u8>(), 0..40_000),
    ]
}

/// One frame of a conversation, as the program sends it.
#[derive(Debug, Clone, PartialEq)]
enum Item {
    Request(Request),
    Reply(Reply),
    Output(Vec<u8>),
    Stdin(Vec<u8>),
}

fn item() -> impl Strategy<Value = Item> {
    prop_oneof![
        request().prop_map(Item::Request),
        reply().prop_map(Item::Reply),
        payload().prop_map(Item::Output),
        payload().prop_map(Item::Stdin),
    ]
}

fn write_item(out: &mut impl Write, item: &Item) -> Result<(), ProtocolError> {
    match item {
        Item::Request(r) => write_message(out, r),
        Item::Reply(r) => write_message(out, r),
        Item::Output(bytes) => write_frame(out, FrameKind::Output, bytes),
        Item::Stdin(bytes) => write_frame(out, FrameKind::Stdin, bytes),
    }
}

/// The encoded stream of `items`, and where each frame ends in it.
fn encode(items: &[Item]) -> (Vec<u8>, Vec<usize>) {
    let mut out = Vec::new();
    let mut ends = Vec::new();
    for item in items {
        write_item(&mut out, item).unwrap();
        ends.push(out.len());
    }
    (out, ends)
}

/// Reads one frame and decodes it as the item it was written as (messages by their direction).
fn read_item(reader: &mut impl Read, like: &Item) -> Result<Option<Item>, ProtocolError> {
    let Some((kind, payload)) = read_frame(reader)? else {
        return Ok(None);
    };
    Ok(Some(match (kind, like) {
        (FrameKind::Message, Item::Request(_)) => Item::Request(serde_json::from_slice(&payload)?),
        (FrameKind::Message, Item::Reply(_)) => Item::Reply(serde_json::from_slice(&payload)?),
        (FrameKind::Output, _) => Item::Output(payload),
        (FrameKind::Stdin, _) => Item::Stdin(payload),
        (FrameKind::Stderr, _) => panic!("no stderr frame is written here"),
        (FrameKind::Message, _) => panic!("a message frame where {like:?} was written"),
    }))
}

/// A reader that hands out `data` in pieces of the given sizes (cycled; 0 counts as 1), and
/// answers `Interrupted` before the reads whose flag is set.
struct Pieces<'a> {
    data: &'a [u8],
    sizes: Vec<usize>,
    interrupts: Vec<bool>,
    reads: usize,
}

impl Read for Pieces<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let call = self.reads;
        self.reads += 1;
        let slot = call % self.interrupts.len();
        if self.interrupts[slot] {
            // The next call reads: an `Interrupted` answer is retried, never final.
            self.interrupts[slot] = false;
            return Err(std::io::Error::new(ErrorKind::Interrupted, "signal"));
        }
        let size = self.sizes[call % self.sizes.len()].max(1);
        let n = size.min(buf.len()).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

/// A writer that takes at most `take` bytes per call and is sometimes interrupted.
struct Trickle {
    out: Vec<u8>,
    take: usize,
    calls: usize,
}

impl Write for Trickle {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.calls += 1;
        if self.calls % 7 == 3 {
            return Err(std::io::Error::new(ErrorKind::Interrupted, "signal"));
        }
        let n = buf.len().min(self.take.max(1));
        self.out.extend_from_slice(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What a frame decoder must answer for a stream: a reference written from the wire format of
/// the module documentation (1 byte kind, big-endian u32 length, payload; at most
/// `MAX_FRAME_BYTES`).
#[derive(Debug, PartialEq)]
enum Expected {
    Frame(FrameKind, Vec<u8>),
    End,
    UnknownKind(u8),
    TooLarge(usize),
    /// The stream ended inside a header or a payload.
    Truncated,
}

fn reference(stream: &[u8]) -> Vec<Expected> {
    let mut out = Vec::new();
    let mut rest = stream;
    loop {
        if rest.is_empty() {
            out.push(Expected::End);
            return out;
        }
        if rest.len() < 5 {
            out.push(Expected::Truncated);
            return out;
        }
        let kind = match rest[0] {
            0 => FrameKind::Message,
            1 => FrameKind::Output,
            2 => FrameKind::Stdin,
            3 => FrameKind::Stderr,
            other => {
                out.push(Expected::UnknownKind(other));
                return out;
            }
        };
        let len = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
        if len > MAX_FRAME_BYTES {
            out.push(Expected::TooLarge(len));
            return out;
        }
        if rest.len() - 5 < len {
            out.push(Expected::Truncated);
            return out;
        }
        out.push(Expected::Frame(kind, rest[5..5 + len].to_vec()));
        rest = &rest[5 + len..];
    }
}

/// Decodes `stream` frame by frame until the end or an error, checking that each refusal says
/// what was wrong.
fn decode_all(reader: &mut impl Read) -> Vec<Expected> {
    let mut out = Vec::new();
    loop {
        match read_frame(reader) {
            Ok(Some((kind, payload))) => out.push(Expected::Frame(kind, payload)),
            Ok(None) => {
                out.push(Expected::End);
                return out;
            }
            Err(err) => {
                let shown = err.to_string();
                let got = match err {
                    ProtocolError::UnknownKind(byte) => {
                        assert!(shown.contains(&format!("unknown kind {byte}")), "{shown}");
                        Expected::UnknownKind(byte)
                    }
                    ProtocolError::TooLarge(len) => {
                        assert!(
                            shown.contains(&len.to_string())
                                && shown.contains(&MAX_FRAME_BYTES.to_string()),
                            "{shown}"
                        );
                        Expected::TooLarge(len)
                    }
                    ProtocolError::Io(io) if io.kind() == ErrorKind::UnexpectedEof => {
                        assert!(shown.starts_with("agent connection: "), "{shown}");
                        Expected::Truncated
                    }
                    other => panic!("unexpected error decoding frames: {other:?}"),
                };
                out.push(got);
                return out;
            }
        }
    }
}

/// A stream of frame-like pieces: valid headers and payloads, bad kinds, huge lengths, junk.
fn hostile_stream() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        // A well-formed frame.
        (0u8..4, proptest::collection::vec(any::<u8>(), 0..32)).prop_map(|(k, p)| {
            let mut v = vec![k];
            v.extend_from_slice(&(p.len() as u32).to_be_bytes());
            v.extend(p);
            v
        }),
        // A header of any kind and length (the length rarely fits what follows).
        (any::<u8>(), any::<u32>()).prop_map(|(k, len)| {
            let mut v = vec![k];
            v.extend_from_slice(&len.to_be_bytes());
            v
        }),
        // A header just over, at or under the cap.
        (0u8..4, -2i64..=2).prop_map(|(k, d)| {
            let len = (MAX_FRAME_BYTES as i64 + d) as u32;
            let mut v = vec![k];
            v.extend_from_slice(&len.to_be_bytes());
            v
        }),
        proptest::collection::vec(any::<u8>(), 0..12),
    ];
    proptest::collection::vec(piece, 0..6).prop_map(|pieces| pieces.concat())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn every_request_decodes_to_itself(request in request()) {
        let mut buf = Vec::new();
        write_message(&mut buf, &request).unwrap();
        let mut r = buf.as_slice();
        let back: Request = read_message(&mut r, "a request").unwrap();
        prop_assert_eq!(&back, &request);
        prop_assert!(read_frame(&mut r).unwrap().is_none(), "bytes left after the message");
    }

    #[test]
    fn every_reply_decodes_to_itself(reply in reply()) {
        let mut buf = Vec::new();
        write_message(&mut buf, &reply).unwrap();
        let mut r = buf.as_slice();
        let back: Reply = read_message(&mut r, "a reply").unwrap();
        prop_assert_eq!(&back, &reply);
        prop_assert!(read_frame(&mut r).unwrap().is_none(), "bytes left after the message");
    }

    #[test]
    fn raw_frames_carry_any_bytes(bytes in payload(), stdin in any::<bool>()) {
        let kind = if stdin { FrameKind::Stdin } else { FrameKind::Output };
        let mut buf = Vec::new();
        write_frame(&mut buf, kind, &bytes).unwrap();
        prop_assert_eq!(buf.len(), 5 + bytes.len(), "a raw frame costs its bytes plus 5");
        let mut r = buf.as_slice();
        prop_assert_eq!(read_frame(&mut r).unwrap(), Some((kind, bytes)));
        prop_assert_eq!(read_frame(&mut r).unwrap(), None);
    }

    #[test]
    fn a_stream_read_in_any_pieces_gives_the_same_frames(
        items in proptest::collection::vec(item(), 0..8),
        sizes in proptest::collection::vec(0usize..40, 1..12),
        interrupts in proptest::collection::vec(proptest::bool::weighted(0.2), 1..9),
    ) {
        let (stream, _) = encode(&items);
        let mut reader = Pieces { data: &stream, sizes, interrupts, reads: 0 };
        for item in &items {
            prop_assert_eq!(read_item(&mut reader, item).unwrap(), Some(item.clone()));
        }
        prop_assert_eq!(read_frame(&mut reader).unwrap(), None);
    }

    #[test]
    fn a_stream_written_a_few_bytes_at_a_time_is_the_same_stream(
        items in proptest::collection::vec(item(), 0..6),
        take in 1usize..16,
    ) {
        let (expected, _) = encode(&items);
        let mut writer = Trickle { out: Vec::new(), take, calls: 0 };
        for item in &items {
            write_item(&mut writer, item).unwrap();
        }
        prop_assert_eq!(writer.out, expected);
    }

    #[test]
    fn a_truncated_stream_gives_its_whole_frames_then_an_error(
        items in proptest::collection::vec(item(), 1..6),
        cut in any::<proptest::sample::Index>(),
    ) {
        let (stream, ends) = encode(&items);
        let cut = cut.index(stream.len() + 1);
        let whole = ends.iter().filter(|&&end| end <= cut).count();
        let mut r = &stream[..cut];
        for item in &items[..whole] {
            prop_assert_eq!(read_item(&mut r, item).unwrap(), Some(item.clone()));
        }
        let at_boundary = cut == 0 || ends.contains(&cut);
        match read_frame(&mut r) {
            Ok(None) => prop_assert!(at_boundary, "a clean end reported inside a frame"),
            Err(ProtocolError::Io(e)) => {
                prop_assert!(!at_boundary, "an error at a frame boundary: {}", e);
                prop_assert_eq!(e.kind(), ErrorKind::UnexpectedEof);
            }
            other => prop_assert!(false, "cut at {}: {:?}", cut, other),
        }
    }

    #[test]
    fn arbitrary_bytes_decode_as_the_reference_says(
        stream in prop_oneof![proptest::collection::vec(any::<u8>(), 0..64), hostile_stream()],
        sizes in proptest::collection::vec(1usize..9, 1..5),
    ) {
        let expected = reference(&stream);
        prop_assert_eq!(&decode_all(&mut stream.as_slice()), &expected);
        let mut pieces = Pieces { data: &stream, sizes, interrupts: vec![false], reads: 0 };
        prop_assert_eq!(&decode_all(&mut pieces), &expected);
    }

    #[test]
    fn a_corrupted_kind_or_length_is_refused_or_read_as_written(
        item in item(),
        kind in any::<u8>(),
        len in prop_oneof![
            any::<u32>(),
            (MAX_FRAME_BYTES as u32 - 2)..=(MAX_FRAME_BYTES as u32 + 2),
            0u32..64,
        ],
        corrupt_kind in any::<bool>(),
    ) {
        let (mut stream, _) = encode(std::slice::from_ref(&item));
        if corrupt_kind {
            stream[0] = kind;
        } else {
            stream[1..5].copy_from_slice(&len.to_be_bytes());
        }
        let expected = reference(&stream);
        let mut r = stream.as_slice();
        let got = decode_all(&mut r);
        prop_assert_eq!(&got, &expected);
        if let Some(Expected::TooLarge(_) | Expected::UnknownKind(_)) = got.first() {
            // Refused on the header alone: nothing of the payload was read (or allocated).
            prop_assert_eq!(r.len(), stream.len() - 5);
        }
        let header: [u8; 5] = stream[..5].try_into().unwrap();
        match (parse_header(header), expected.first()) {
            (Ok(_), Some(Expected::Frame(..) | Expected::Truncated)) => {}
            (Err(ProtocolError::UnknownKind(b)), Some(Expected::UnknownKind(e))) => {
                prop_assert_eq!(b, *e);
            }
            (Err(ProtocolError::TooLarge(n)), Some(Expected::TooLarge(e))) => {
                prop_assert_eq!(n, *e);
            }
            (got, want) => prop_assert!(false, "parse_header {:?}, reference {:?}", got, want),
        }
    }

    #[test]
    fn a_message_payload_of_any_bytes_is_a_message_or_a_json_error(
        body in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..48),
            // JSON that is nearly a message: a known or unknown type, fields of any JSON type.
            (
                prop_oneof![
                    Just("hello"), Just("run"), Just("shutdown"), Just("exit"),
                    Just("error"), Just("bye"), Just("Run"), Just(""),
                ],
                proptest::collection::btree_map(
                    prop_oneof![
                        Just("version".to_owned()), Just("argv".to_owned()),
                        Just("code".to_owned()), Just("message".to_owned()),
                        Just("env".to_owned()), Just("renames".to_owned()),
                        Just("timeout_ms".to_owned()), Just("agent".to_owned()),
                        Just("pid".to_owned()), "[a-z]{1,6}",
                    ],
                    prop_oneof![
                        Just(serde_json::json!(null)),
                        any::<i64>().prop_map(|n| serde_json::json!(n)),
                        any::<f64>().prop_map(|n| serde_json::json!(n)),
                        text().prop_map(|s| serde_json::json!(s)),
                        proptest::collection::vec(text(), 0..3).prop_map(|v| serde_json::json!(v)),
                        Just(serde_json::json!({"a": "b"})),
                        Just(serde_json::json!([["a", "b"]])),
                    ],
                    0..5,
                ),
            )
                .prop_map(|(ty, fields)| {
                    let mut object: serde_json::Map<String, serde_json::Value> =
                        fields.into_iter().collect();
                    object.insert("type".into(), serde_json::json!(ty));
                    serde_json::to_vec(&object).unwrap()
                }),
        ],
    ) {
        let mut frame = Vec::new();
        write_frame(&mut frame, FrameKind::Message, &body).unwrap();
        for (what, decoded) in [
            ("request", read_message::<Request>(&mut frame.as_slice(), "a request").map(|r| {
                serde_json::to_vec(&r).unwrap()
            })),
            ("reply", read_message::<Reply>(&mut frame.as_slice(), "a reply").map(|r| {
                serde_json::to_vec(&r).unwrap()
            })),
        ] {
            match decoded {
                // What was accepted is a message: it survives its own round trip unchanged.
                Ok(reencoded) => {
                    let mut again = Vec::new();
                    write_frame(&mut again, FrameKind::Message, &reencoded).unwrap();
                    let twice = if what == "request" {
                        serde_json::to_vec(&read_message::<Request>(&mut again.as_slice(), what).unwrap())
                    } else {
                        serde_json::to_vec(&read_message::<Reply>(&mut again.as_slice(), what).unwrap())
                    };
                    prop_assert_eq!(twice.unwrap(), reencoded);
                }
                Err(ProtocolError::Json(e)) => {
                    let shown = ProtocolError::Json(e).to_string();
                    prop_assert!(
                        shown.starts_with("agent message is not valid JSON of the expected shape: "),
                        "{}", shown
                    );
                }
                Err(other) => prop_assert!(false, "{} from {:?}: {:?}", what, body, other),
            }
        }
    }

    #[test]
    fn a_raw_frame_where_a_message_is_expected_is_refused_by_kind(
        bytes in payload(),
        stdin in any::<bool>(),
    ) {
        let kind = if stdin { FrameKind::Stdin } else { FrameKind::Output };
        let mut frame = Vec::new();
        write_frame(&mut frame, kind, &bytes).unwrap();
        let err = read_message::<Request>(&mut frame.as_slice(), "hello").unwrap_err();
        let shown = err.to_string();
        prop_assert!(
            shown == format!("agent protocol: expected hello, got a {kind:?} frame"),
            "{}", shown
        );
    }
}

#[test]
fn the_end_of_the_connection_where_a_message_is_expected_is_named() {
    let err = read_message::<Reply>(&mut [].as_slice(), "exit").unwrap_err();
    assert_eq!(
        err.to_string(),
        "agent protocol: expected exit, got the end of the connection"
    );
}

#[test]
fn a_frame_at_the_cap_round_trips_and_one_byte_more_is_refused_before_writing() {
    let at_cap = vec![0xA5u8; MAX_FRAME_BYTES];
    let mut buf = Vec::new();
    write_frame(&mut buf, FrameKind::Output, &at_cap).unwrap();
    assert_eq!(
        read_frame(&mut buf.as_slice()).unwrap(),
        Some((FrameKind::Output, at_cap))
    );

    let over = vec![0u8; MAX_FRAME_BYTES + 1];
    let mut out = Vec::new();
    let err = write_frame(&mut out, FrameKind::Stdin, &over).unwrap_err();
    assert!(
        matches!(err, ProtocolError::TooLarge(n) if n == MAX_FRAME_BYTES + 1),
        "{err:?}"
    );
    assert!(
        out.is_empty(),
        "{} bytes written for a refused frame",
        out.len()
    );

    // A message whose JSON is over the cap is refused the same way.
    let huge = Request::Run(RunRequest {
        argv: vec!["x".repeat(MAX_FRAME_BYTES)],
        env: BTreeMap::new(),
        clear_env: false,
        cwd: None,
        timeout_ms: None,
        renames: Vec::new(),
        pty: false,
        stdin: false,
        run_id: None,
        split_stderr: false,
        keep_detached: false,
        keep_connection: false,
    });
    let mut out = Vec::new();
    let err = write_message(&mut out, &huge).unwrap_err();
    assert!(matches!(err, ProtocolError::TooLarge(_)), "{err:?}");
    assert!(out.is_empty());
}
