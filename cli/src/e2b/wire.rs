//! Small pieces every handler needs: responses, query strings, paths inside a sandbox, times,
//! and the mapping of Paddock's tool errors onto Connect codes.

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};

use super::connect::{Code, RpcError};
use paddock_engine::registry::ToolError;

/// A response with `status`, `content_type` and `body`.
pub(crate) fn response(status: u16, content_type: &str, body: impl Into<Body>) -> Response {
    let mut out = Response::new(body.into());
    *out.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Ok(value) = HeaderValue::from_str(content_type) {
        out.headers_mut().insert(header::CONTENT_TYPE, value);
    }
    out
}

pub(crate) fn json_response(status: u16, value: &Value) -> Response {
    response(status, "application/json", value.to_string())
}

pub(crate) fn empty(status: u16) -> Response {
    let mut out = Response::new(Body::empty());
    *out.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::NO_CONTENT);
    out
}

/// The REST API's error body: `{code, message}` with the status as `code`.
pub(crate) fn rest_error(status: u16, message: impl Into<String>) -> Response {
    json_response(status, &json!({"code": status, "message": message.into()}))
}

/// A unary Connect call's error.
pub(crate) fn rpc_error(err: &RpcError) -> Response {
    json_response(err.code.http_status(), &err.to_json())
}

/// Decodes `%XX` and `+` of a query component.
pub(crate) fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The `k=v&...` pairs of a query string, decoded, in order.
pub(crate) fn query_pairs(query: Option<&str>) -> Vec<(String, String)> {
    query
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| match pair.split_once('=') {
            Some((k, v)) => (percent_decode(k), percent_decode(v)),
            None => (percent_decode(pair), String::new()),
        })
        .collect()
}

pub(crate) fn query_value(pairs: &[(String, String)], key: &str) -> Option<String> {
    pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
}

/// `path` made absolute against `cwd` and normalised (`.` and `..` resolved by name): the SDK
/// is answered with absolute paths, as envd does.
pub(crate) fn absolute(cwd: &str, path: &str) -> String {
    let joined = if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("{cwd}/{path}")
    };
    let mut parts: Vec<&str> = Vec::new();
    for part in joined.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    format!("/{}", parts.join("/"))
}

/// An RFC 3339 time (UTC, milliseconds) of ms since the epoch.
pub(crate) fn rfc3339(ms: u64) -> String {
    let ms = i64::try_from(ms).unwrap_or(i64::MAX);
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The Connect code of a tool's failure: what the SDK acts on is `not_found` (exists, kill)
/// and `already_exists` (make_dir).
pub(crate) fn rpc_of_tool(err: &ToolError) -> RpcError {
    use paddock_engine::registry::ToolErrorKind;
    let code = if err.code.ends_with("not_found") || err.message.contains("No such file") {
        Code::NotFound
    } else {
        match err.kind {
            ToolErrorKind::InvalidArguments => Code::InvalidArgument,
            ToolErrorKind::Denied => Code::PermissionDenied,
            ToolErrorKind::NotFound => Code::NotFound,
            ToolErrorKind::Failed => Code::Internal,
        }
    };
    RpcError::new(code, err.message.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn queries_are_decoded() {
        let pairs = query_pairs(Some("path=%2Fhome%2Fa+b.txt&username=&x"));
        assert_eq!(
            pairs,
            vec![
                ("path".into(), "/home/a b.txt".into()),
                ("username".into(), String::new()),
                ("x".into(), String::new()),
            ]
        );
        assert_eq!(percent_decode("a%3Db%26c%3Dd"), "a=b&c=d");
        assert_eq!(percent_decode("100%"), "100%");
    }

    #[test]
    fn paths_are_made_absolute() {
        assert_eq!(absolute("/w", "a/b"), "/w/a/b");
        assert_eq!(absolute("/w", "/tmp/../etc/./x"), "/etc/x");
        assert_eq!(absolute("/w", "../.."), "/");
    }
}
