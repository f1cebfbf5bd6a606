//! The Connect protocol's framing, as envd speaks it with JSON bodies: a server stream is a
//! series of envelopes (one flag byte, a big-endian u32 length, the JSON), the last one flagged
//! end-of-stream and carrying `{}` or `{"error": {...}}`. Unary calls are plain JSON bodies;
//! their errors are a non-2xx status with `{"code", "message"}`.

use serde_json::{Value, json};

/// The flag of an envelope that ends a stream.
pub(crate) const END_STREAM: u8 = 0x02;
/// The flag of a compressed envelope; compression is never negotiated here.
const COMPRESSED: u8 = 0x01;
/// The largest request envelope read (a Start request is a command line and its env).
pub(crate) const MAX_ENVELOPE_BYTES: usize = 16 << 20;

/// A Connect error code (the subset envd and the SDK use) and its HTTP status for unary calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Code {
    InvalidArgument,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    DeadlineExceeded,
    FailedPrecondition,
    Unavailable,
    Unimplemented,
    Internal,
}

impl Code {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Code::InvalidArgument => "invalid_argument",
            Code::NotFound => "not_found",
            Code::AlreadyExists => "already_exists",
            Code::PermissionDenied => "permission_denied",
            Code::DeadlineExceeded => "deadline_exceeded",
            Code::FailedPrecondition => "failed_precondition",
            Code::Unavailable => "unavailable",
            Code::Unimplemented => "unimplemented",
            Code::Internal => "internal",
        }
    }

    /// The HTTP status a unary error carries (Connect's table).
    pub(crate) fn http_status(self) -> u16 {
        match self {
            Code::InvalidArgument => 400,
            Code::NotFound => 404,
            Code::AlreadyExists => 409,
            Code::PermissionDenied => 403,
            Code::DeadlineExceeded => 504,
            Code::FailedPrecondition => 400,
            Code::Unavailable => 503,
            Code::Unimplemented => 501,
            Code::Internal => 500,
        }
    }
}

/// An RPC's failure, as the client sees it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}: {message}", code.as_str())]
pub(crate) struct RpcError {
    pub(crate) code: Code,
    pub(crate) message: String,
}

impl RpcError {
    pub(crate) fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    pub(crate) fn to_json(&self) -> Value {
        json!({"code": self.code.as_str(), "message": self.message})
    }
}

/// Why a request's envelope could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum EnvelopeError {
    #[error("the request is shorter than an envelope header")]
    Truncated,
    #[error("the envelope says {said} bytes but {got} follow")]
    Length { said: usize, got: usize },
    #[error("the envelope is over {MAX_ENVELOPE_BYTES} bytes")]
    TooLarge,
    #[error("compressed envelopes are not accepted (no compression was negotiated)")]
    Compressed,
}

/// One message envelope around `json`.
pub(crate) fn envelope(flags: u8, json: &Value) -> Vec<u8> {
    let body = json.to_string().into_bytes();
    let mut out = Vec::with_capacity(body.len() + 5);
    out.push(flags);
    // A message over 4 GiB is never built here (events are output pages of 1 MiB at most).
    out.extend_from_slice(&u32::try_from(body.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// The envelope that ends a stream: `{}`, or the error.
pub(crate) fn end_envelope(error: Option<&RpcError>) -> Vec<u8> {
    let body = match error {
        Some(err) => json!({"error": err.to_json()}),
        None => json!({}),
    };
    envelope(END_STREAM, &body)
}

/// The envelopes of a request body, in order (a server-stream request has one; a client
/// stream has many, the last flagged end-of-stream).
pub(crate) fn read_envelopes(mut bytes: &[u8]) -> Result<Vec<(u8, &[u8])>, EnvelopeError> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let Some((head, rest)) = bytes.split_first_chunk::<5>() else {
            return Err(EnvelopeError::Truncated);
        };
        let flags = head[0];
        let said = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        if said > MAX_ENVELOPE_BYTES {
            return Err(EnvelopeError::TooLarge);
        }
        if flags & COMPRESSED != 0 {
            return Err(EnvelopeError::Compressed);
        }
        if rest.len() < said {
            return Err(EnvelopeError::Length {
                said,
                got: rest.len(),
            });
        }
        out.push((flags, &rest[..said]));
        bytes = &rest[said..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn an_envelope_round_trips() {
        let message = json!({"event": {"start": {"pid": 7}}});
        let bytes = envelope(0, &message);
        assert_eq!(bytes[0], 0);
        assert_eq!(
            u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]) as usize,
            bytes.len() - 5
        );
        let read = read_envelopes(&bytes).unwrap();
        assert_eq!(read.len(), 1);
        let back: Value = serde_json::from_slice(read[0].1).unwrap();
        assert_eq!(back, message);
    }

    #[test]
    fn several_envelopes_are_read_in_order_with_their_flags() {
        let mut bytes = envelope(0, &json!({"a": 1}));
        bytes.extend(end_envelope(None));
        let read = read_envelopes(&bytes).unwrap();
        assert_eq!(
            read.iter().map(|(f, _)| *f).collect::<Vec<_>>(),
            vec![0, END_STREAM]
        );
        assert_eq!(read[1].1, b"{}");
    }

    #[test]
    fn the_end_envelope_carries_the_error() {
        let err = RpcError::new(Code::DeadlineExceeded, "too slow");
        let bytes = end_envelope(Some(&err));
        let read = read_envelopes(&bytes).unwrap();
        let back: Value = serde_json::from_slice(read[0].1).unwrap();
        assert_eq!(
            back,
            json!({"error": {"code": "deadline_exceeded", "message": "too slow"}})
        );
    }

    #[test]
    fn malformed_envelopes_are_refused() {
        assert_eq!(read_envelopes(&[0, 0, 0]), Err(EnvelopeError::Truncated));
        assert_eq!(
            read_envelopes(&[0, 0, 0, 0, 9, b'{']),
            Err(EnvelopeError::Length { said: 9, got: 1 })
        );
        assert_eq!(
            read_envelopes(&[1, 0, 0, 0, 0]),
            Err(EnvelopeError::Compressed)
        );
        assert_eq!(
            read_envelopes(&[0, 0xff, 0xff, 0xff, 0xff]),
            Err(EnvelopeError::TooLarge)
        );
        assert!(read_envelopes(&[]).unwrap().is_empty());
    }
}
