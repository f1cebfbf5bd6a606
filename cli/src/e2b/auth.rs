//! Who a request is for and whether it may be served (DESIGN section 10): the REST API by an
//! API key of `[e2b] api_keys`, a sandbox's own endpoints (envd) by the access token issued at
//! create. Pure functions over the request's parts, so the rules are tested without a server.

use base64::Engine as _;
use sha2::{Digest, Sha256};

/// The code interpreter's port.
pub(crate) const INTERPRETER_PORT: &str = "49999";

/// The headers and query values routing and authorisation look at.
#[derive(Debug, Default, Clone)]
pub(crate) struct Credentials<'a> {
    pub(crate) api_key: Option<&'a str>,
    pub(crate) sandbox_id: Option<&'a str>,
    pub(crate) sandbox_port: Option<&'a str>,
    pub(crate) access_token: Option<&'a str>,
    pub(crate) traffic_token: Option<&'a str>,
    /// `/files`' `signature`, `path`, `username`, `signature_expiration` query values.
    pub(crate) signature: Option<&'a str>,
}

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// The REST API (`/sandboxes...`, `/v2/sandboxes...`).
    Rest,
    /// A sandbox's environment daemon.
    Envd(String),
    /// A sandbox's code interpreter (`E2b-Sandbox-Port: 49999`, `/execute`, `/contexts`).
    Interpreter(String),
}

/// Why a request is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum AuthError {
    #[error("missing or unknown API key (X-API-KEY)")]
    ApiKey,
    #[error("missing or wrong access token for sandbox {0}")]
    AccessToken(String),
    #[error("the request names no sandbox (E2b-Sandbox-Id, an access token or a signed URL)")]
    NoSandbox,
    /// Worded as E2B's proxy words it: the SDK reads "was not found" in a 502 as the sandbox
    /// gone (`SandboxNotRunningException`).
    #[error("sandbox {0} was not found: it was killed or reached its end")]
    UnknownSandbox(String),
}

/// The port and sandbox id a sandbox's host name carries (`49983-i0123abcd.DOMAIN[:PORT]`,
/// as the SDK builds them when it reaches E2B by domain); `None` for any other name.
pub(crate) fn host_route(host: &str) -> Option<(&str, &str)> {
    let (first, _rest) = host.split_once('.')?;
    let (port, id) = first.split_once('-')?;
    let port_ok = !port.is_empty() && port.len() <= 5 && port.chars().all(|c| c.is_ascii_digit());
    let id_ok = !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric());
    (port_ok && id_ok).then_some((port, id))
}

/// The REST API's paths (create, connect, list, get, kill, timeout, pause, ...).
pub(crate) fn is_rest_path(path: &str) -> bool {
    path == "/sandboxes"
        || path.starts_with("/sandboxes/")
        || path == "/v2/sandboxes"
        || path.starts_with("/v2/sandboxes/")
        || path == "/snapshots"
        || path.starts_with("/templates")
}

/// Whether a path belongs to the code interpreter (it does not overlap envd's).
pub(crate) fn is_interpreter_path(path: &str) -> bool {
    path == "/execute" || path == "/contexts" || path.starts_with("/contexts/")
}

/// Checks `given` against the configured keys, in constant time per key.
pub(crate) fn api_key_ok(keys: &[String], given: Option<&str>) -> bool {
    let Some(given) = given else {
        return false;
    };
    keys.iter().fold(false, |found, key| {
        found | same(key.as_bytes(), given.as_bytes())
    })
}

/// Byte equality whose time does not depend on where the first difference is.
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The `v1_` signature of a `/files` URL, as the SDK computes it (`e2b/sandbox/signature.py`).
pub(crate) fn file_signature(
    path: &str,
    operation: &str,
    user: &str,
    token: &str,
    expiration: Option<&str>,
) -> String {
    let raw = match expiration {
        Some(exp) => format!("{path}:{operation}:{user}:{token}:{exp}"),
        None => format!("{path}:{operation}:{user}:{token}"),
    };
    let digest = Sha256::digest(raw.as_bytes());
    format!(
        "v1_{}",
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(digest)
    )
}

/// The sandbox a request names, and that it may act on it. `token_of` answers a live
/// sandbox's access and traffic tokens; `by_token` finds the sandbox a token was issued to
/// (SDKs before 2.25.1 send only `X-Access-Token` after connect); `by_signature` the one whose
/// token signs the URL.
pub(crate) fn authorise<'a>(
    path: &str,
    creds: &Credentials<'a>,
    keys: &[String],
    token_of: impl Fn(&str) -> Option<(String, String)>,
    by_token: impl Fn(&str) -> Option<String>,
    by_signature: impl Fn(&str) -> Option<String>,
) -> Result<Target, AuthError> {
    // A REST path is the API's whatever else the request carries: SDKs before 2.51 send
    // `connect` with the sandbox's routing headers (E2b-Sandbox-Id/-Port) and the API key,
    // and envd serves no such path.
    if is_rest_path(path) {
        return if api_key_ok(keys, creds.api_key) {
            Ok(Target::Rest)
        } else {
            Err(AuthError::ApiKey)
        };
    }
    let interpreter = match creds.sandbox_port {
        Some(port) => port == INTERPRETER_PORT,
        None => is_interpreter_path(path),
    };
    let id = match creds.sandbox_id {
        Some(id) => id.to_owned(),
        None => {
            let found = creds
                .access_token
                .and_then(&by_token)
                .or_else(|| creds.signature.and_then(&by_signature));
            found.ok_or(AuthError::NoSandbox)?
        }
    };
    let (access, traffic) = token_of(&id).ok_or_else(|| AuthError::UnknownSandbox(id.clone()))?;
    let token_ok = creds
        .access_token
        .is_some_and(|t| same(t.as_bytes(), access.as_bytes()))
        || creds
            .traffic_token
            .is_some_and(|t| same(t.as_bytes(), traffic.as_bytes()))
        || creds
            .signature
            .is_some_and(|s| by_signature(s).as_deref() == Some(&id));
    // `/health` is the SDK's liveness probe, sent after a transport failure without a token.
    if !token_ok && path != "/health" {
        return Err(AuthError::AccessToken(id));
    }
    Ok(if interpreter {
        Target::Interpreter(id)
    } else {
        Target::Envd(id)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    const KEY: &str = "e2b_00ff";

    fn tokens(id: &str) -> Option<(String, String)> {
        (id == "sbx1").then(|| ("acc".to_owned(), "traffic".to_owned()))
    }

    fn run(path: &str, creds: Credentials<'_>) -> Result<Target, AuthError> {
        authorise(
            path,
            &creds,
            &[KEY.to_owned()],
            tokens,
            |t| (t == "acc").then(|| "sbx1".to_owned()),
            |s| (s == "v1_good").then(|| "sbx1".to_owned()),
        )
    }

    #[test]
    fn rest_needs_a_listed_key() {
        let ok = Credentials {
            api_key: Some(KEY),
            ..Default::default()
        };
        assert_eq!(run("/v2/sandboxes", ok), Ok(Target::Rest));
        // e2b 2.7-2.50: connect carries the sandbox's routing headers beside the API key.
        let routed = Credentials {
            api_key: Some(KEY),
            sandbox_id: Some("sbx1"),
            sandbox_port: Some("49983"),
            ..Credentials::default()
        };
        assert_eq!(run("/sandboxes/sbx1/connect", routed), Ok(Target::Rest));
        let wrong = Credentials {
            api_key: Some("e2b_01"),
            ..Default::default()
        };
        assert_eq!(run("/sandboxes/x", wrong), Err(AuthError::ApiKey));
        assert_eq!(
            run("/sandboxes", Credentials::default()),
            Err(AuthError::ApiKey)
        );
    }

    #[test]
    fn envd_routes_by_header_and_needs_the_token() {
        let creds = Credentials {
            sandbox_id: Some("sbx1"),
            sandbox_port: Some("49983"),
            access_token: Some("acc"),
            ..Default::default()
        };
        assert_eq!(
            run("/process.Process/Start", creds.clone()),
            Ok(Target::Envd("sbx1".into()))
        );
        let wrong = Credentials {
            access_token: Some("other"),
            ..creds.clone()
        };
        assert_eq!(
            run("/process.Process/Start", wrong),
            Err(AuthError::AccessToken("sbx1".into()))
        );
        let unknown = Credentials {
            sandbox_id: Some("nope"),
            ..creds
        };
        assert_eq!(
            run("/files", unknown),
            Err(AuthError::UnknownSandbox("nope".into()))
        );
    }

    #[test]
    fn without_headers_the_token_or_signature_finds_the_sandbox() {
        let by_token = Credentials {
            access_token: Some("acc"),
            ..Default::default()
        };
        assert_eq!(run("/files", by_token), Ok(Target::Envd("sbx1".into())));
        let signed = Credentials {
            signature: Some("v1_good"),
            ..Default::default()
        };
        assert_eq!(run("/files", signed), Ok(Target::Envd("sbx1".into())));
        let interp = Credentials {
            access_token: Some("acc"),
            ..Default::default()
        };
        assert_eq!(
            run("/execute", interp),
            Ok(Target::Interpreter("sbx1".into()))
        );
        assert_eq!(
            run("/files", Credentials::default()),
            Err(AuthError::NoSandbox)
        );
    }

    #[test]
    fn health_needs_no_token_but_a_live_sandbox() {
        let creds = Credentials {
            sandbox_id: Some("sbx1"),
            ..Default::default()
        };
        assert_eq!(run("/health", creds), Ok(Target::Envd("sbx1".into())));
    }

    #[test]
    fn the_signature_matches_the_sdks() {
        // hashlib.sha256(b"/a.txt:read::tok").digest(), base64 without padding.
        let sig = file_signature("/a.txt", "read", "", "tok", None);
        assert_eq!(sig, "v1_EV/DvoS4mUiocl2RlxlZEymBC6EMYhkDL6kq8QBzt6g");
        assert_ne!(sig, file_signature("/a.txt", "write", "", "tok", None));
        assert_ne!(sig, file_signature("/a.txt", "read", "", "tok", Some("1")));
    }

    #[test]
    fn a_sandbox_s_host_name_routes_to_it() {
        assert_eq!(
            host_route("49983-i0123abcd.sbx.localhost:49982"),
            Some(("49983", "i0123abcd"))
        );
        assert_eq!(
            host_route("49999-iabc.e2b.example"),
            Some(("49999", "iabc"))
        );
        assert_eq!(host_route("api.sbx.localhost:49982"), None);
        assert_eq!(host_route("127.0.0.1:49982"), None);
        assert_eq!(host_route("x-iabc.sbx.localhost"), None);
        assert_eq!(host_route("49983-.sbx.localhost"), None);
    }
}
