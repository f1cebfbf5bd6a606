//! envd's `/files`: download (the file's bytes, exact) and upload (multipart, one part per
//! file named by its path, or the raw body with `?path=`), through the engine's transfers into
//! the sandbox's session. `?path=` is resolved like the RPCs' paths.

use std::sync::Arc;

use axum::response::Response;
use serde_json::{Value, json};

use super::state::{Sandbox, random_hex};
use super::wire::{absolute, json_response, query_pairs, query_value, response, rest_error};

/// Why an upload body could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum MultipartError {
    #[error("multipart: no boundary in the content type")]
    NoBoundary,
    #[error("multipart: the body does not start with its boundary")]
    NoFirstBoundary,
    #[error("multipart: a part's headers do not end")]
    UnendedHeaders,
    #[error("multipart: a part does not end with the boundary")]
    UnendedPart,
}

/// One uploaded file: the part's file name (its path) and its bytes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Part {
    pub(crate) filename: Option<String>,
    pub(crate) data: Vec<u8>,
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The boundary of a `multipart/form-data; boundary=...` content type.
pub(crate) fn boundary(content_type: &str) -> Option<String> {
    content_type.split(';').find_map(|p| {
        let (k, v) = p.trim().split_once('=')?;
        (k.eq_ignore_ascii_case("boundary")).then(|| v.trim_matches('"').to_owned())
    })
}

/// The parts of a multipart body.
pub(crate) fn parse_multipart(body: &[u8], boundary: &str) -> Result<Vec<Part>, MultipartError> {
    let delim = format!("--{boundary}").into_bytes();
    let mut pos = find(body, &delim).ok_or(MultipartError::NoFirstBoundary)? + delim.len();
    let mut next_delim = b"\r\n".to_vec();
    next_delim.extend_from_slice(&delim);
    let mut parts = Vec::new();
    loop {
        let rest = &body[pos..];
        if rest.starts_with(b"--") || rest.is_empty() {
            return Ok(parts);
        }
        let rest = rest.strip_prefix(b"\r\n").unwrap_or(rest);
        let start = body.len() - rest.len();
        let head_end = find(rest, b"\r\n\r\n").ok_or(MultipartError::UnendedHeaders)?;
        let headers = String::from_utf8_lossy(&rest[..head_end]);
        let data_start = start + head_end + 4;
        let len = find(&body[data_start..], &next_delim).ok_or(MultipartError::UnendedPart)?;
        parts.push(Part {
            filename: filename_of(&headers),
            data: body[data_start..data_start + len].to_vec(),
        });
        pos = data_start + len + next_delim.len();
    }
}

/// `filename="..."` of a part's Content-Disposition.
fn filename_of(headers: &str) -> Option<String> {
    let at = headers.find("filename=")? + "filename=".len();
    let value = &headers[at..];
    let name = match value.strip_prefix('"') {
        Some(quoted) => quoted.split('"').next().unwrap_or(""),
        None => value.split([';', '\r', '\n']).next().unwrap_or(""),
    };
    Some(super::wire::percent_decode(&name.replace("%22", "\"")))
}

/// A scratch file on the host for one transfer, removed when dropped.
struct Scratch(std::path::PathBuf);

impl Scratch {
    /// In the state directory, which no sandbox sees.
    fn new() -> Result<Self, String> {
        let dir = paddock_engine::tools::environment::state_root().join("e2b-transfers");
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let name = random_hex(8).map_err(|e| e.to_string())?;
        Ok(Self(dir.join(name)))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0).or_else(|_| std::fs::remove_dir_all(&self.0));
    }
}

/// `GET /files?path=`: the file's bytes.
pub(crate) async fn download(sandbox: &Arc<Sandbox>, query: Option<&str>) -> Response {
    let pairs = query_pairs(query);
    let Some(path) = query_value(&pairs, "path").filter(|p| !p.is_empty()) else {
        return rest_error(400, "the path query parameter is required");
    };
    let path = absolute(&sandbox.cwd, &path);
    let scratch = match Scratch::new() {
        Ok(s) => s,
        Err(e) => return rest_error(500, e),
    };
    if let Err(err) = sandbox
        .engine
        .download_from(&sandbox.id, &path, &scratch.0)
        .await
    {
        let message = err.to_string();
        let status = if message.contains("no such file") {
            404
        } else {
            500
        };
        return rest_error(status, format!("{path}: {message}"));
    }
    if scratch.0.is_dir() {
        return rest_error(400, format!("{path} is a directory"));
    }
    match std::fs::read(&scratch.0) {
        Ok(bytes) => response(200, "application/octet-stream", bytes),
        Err(e) => rest_error(500, format!("{path}: {e}")),
    }
}

/// `POST /files`: writes each file (parents made) and answers `[{name, type, path}]`.
/// An upload's body as sent, decoded by its `Content-Encoding` (`gzip`, as the SDK's
/// `files.write(..., gzip=True)` sends; none or `identity` as is), at most `limit` bytes once
/// decoded; why not when it cannot be.
pub(crate) fn decoded<'a>(
    body: &'a [u8],
    encoding: Option<&str>,
    limit: usize,
) -> Result<std::borrow::Cow<'a, [u8]>, String> {
    match encoding.map(|e| e.trim().to_ascii_lowercase()).as_deref() {
        None | Some("" | "identity") => Ok(std::borrow::Cow::Borrowed(body)),
        Some("gzip" | "x-gzip") => {
            use std::io::Read;
            let mut out = Vec::new();
            let read = flate2::read::GzDecoder::new(body)
                .take(limit as u64 + 1)
                .read_to_end(&mut out)
                .map_err(|e| format!("the gzip body cannot be decoded: {e}"))?;
            if read > limit {
                return Err(format!("the decoded body is larger than {limit} bytes"));
            }
            Ok(std::borrow::Cow::Owned(out))
        }
        Some(other) => Err(format!(
            "Content-Encoding {other:?} is not accepted: send gzip or none"
        )),
    }
}

pub(crate) async fn upload(
    sandbox: &Arc<Sandbox>,
    query: Option<&str>,
    content_type: &str,
    body: &[u8],
) -> Response {
    let pairs = query_pairs(query);
    let path_param = query_value(&pairs, "path").filter(|p| !p.is_empty());
    let files: Vec<(String, Vec<u8>)> = if content_type.starts_with("multipart/") {
        let Some(boundary) = boundary(content_type) else {
            return rest_error(400, MultipartError::NoBoundary.to_string());
        };
        let parts = match parse_multipart(body, &boundary) {
            Ok(p) => p,
            Err(e) => return rest_error(400, e.to_string()),
        };
        let single = parts.len() == 1;
        let mut files = Vec::new();
        for part in parts {
            let path = match (&path_param, part.filename) {
                (Some(p), _) if single => p.clone(),
                (_, Some(name)) if !name.is_empty() => name,
                (Some(p), _) => p.clone(),
                _ => return rest_error(400, "a file part names no path"),
            };
            files.push((path, part.data));
        }
        files
    } else {
        let Some(path) = path_param else {
            return rest_error(400, "the path query parameter is required");
        };
        vec![(path, body.to_vec())]
    };
    let mut written: Vec<Value> = Vec::new();
    for (path, data) in files {
        let path = absolute(&sandbox.cwd, &path);
        let scratch = match Scratch::new() {
            Ok(s) => s,
            Err(e) => return rest_error(500, e),
        };
        if let Err(e) = std::fs::write(&scratch.0, &data) {
            return rest_error(500, format!("{}: {e}", scratch.0.display()));
        }
        if let Err(err) = sandbox
            .engine
            .upload_to(&sandbox.id, &scratch.0, &path)
            .await
        {
            return rest_error(500, format!("{path}: {err}"));
        }
        let name = path.rsplit('/').next().unwrap_or(&path).to_owned();
        written.push(json!({"name": name, "type": "file", "path": path}));
    }
    json_response(200, &Value::Array(written))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn multipart_parts_keep_their_bytes() {
        let body =
            b"--XB\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/a/b.bin\"\r\n\
Content-Type: application/octet-stream\r\n\r\n\x00\x01\r\n--\xff\r\n--XB\r\n\
Content-Disposition: form-data; name=\"file\"; filename=\"c.txt\"\r\n\r\nhi\r\n--XB--\r\n";
        let parts = parse_multipart(body, "XB").unwrap();
        assert_eq!(
            parts,
            vec![
                Part {
                    filename: Some("/a/b.bin".into()),
                    data: b"\x00\x01\r\n--\xff".to_vec()
                },
                Part {
                    filename: Some("c.txt".into()),
                    data: b"hi".to_vec()
                },
            ]
        );
        assert_eq!(
            boundary("multipart/form-data; boundary=\"XB\"").as_deref(),
            Some("XB")
        );
        assert_eq!(
            parse_multipart(b"nothing", "XB"),
            Err(MultipartError::NoFirstBoundary)
        );
    }

    #[test]
    fn a_gzip_upload_is_stored_decoded_and_an_unknown_encoding_refused() {
        use std::io::Write;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(b"hello gzip").unwrap();
        let body = gz.finish().unwrap();
        assert_eq!(
            &*decoded(&body, Some("gzip"), 1 << 20).unwrap(),
            b"hello gzip"
        );
        assert_eq!(&*decoded(b"plain", None, 1 << 20).unwrap(), b"plain");
        assert!(
            decoded(&body, Some("gzip"), 4).is_err(),
            "the limit holds once decoded"
        );
        assert!(
            decoded(b"x", Some("br"), 1 << 20)
                .unwrap_err()
                .contains("br")
        );
        assert!(decoded(b"not gzip", Some("gzip"), 1 << 20).is_err());
    }
}
