//! `http_request`'s client: one request made through the egress proxy (a Unix socket the
//! proxy serves for the session, as it serves an environment's), so that the same policy,
//! pins, credentials, questions and log apply. Plain HTTP goes in absolute-form; HTTPS through
//! a `CONNECT` tunnel and TLS verified against the system's roots (`SSL_CERT_FILE` and
//! `SSL_CERT_DIR` honoured) and, where the proxy terminates TLS to add a credential, its CA;
//! the body read up to a limit.

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;

/// One request.
#[derive(Debug, Clone)]
pub struct Fetch {
    pub url: String,
    pub method: String,
    pub headers: Vec<(String, String)>,
    pub body: Option<Vec<u8>>,
    /// Bytes of the body kept; more is cut and said so.
    pub max_bytes: usize,
    pub timeout: Duration,
}

/// Its answer.
#[derive(Debug, Clone)]
pub struct Fetched {
    pub status: u16,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
    /// The body was longer than `max_bytes`.
    pub truncated: bool,
    /// The length the origin declared, when it did.
    pub declared_bytes: Option<u64>,
}

/// Why a request got no answer from the origin.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("{0}")]
    BadRequest(String),
    /// The proxy refused it (its 403 body names the host and the rule).
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    Failed(String),
    #[error("no answer within {0} s")]
    Timeout(u64),
}

fn failed(what: &str) -> impl Fn(String) -> FetchError + '_ {
    move |e| FetchError::Failed(format!("{what}: {e}"))
}

/// The system's roots (`SSL_CERT_FILE` and `SSL_CERT_DIR` honoured), loaded once.
fn system_roots() -> Result<&'static [rustls::pki_types::CertificateDer<'static>], String> {
    static ROOTS: OnceLock<Result<Vec<rustls::pki_types::CertificateDer<'static>>, String>> =
        OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let found = rustls_native_certs::load_native_certs();
            if found.certs.is_empty() {
                return Err(format!(
                    "no trusted root certificates found ({:?}); set SSL_CERT_FILE",
                    found.errors
                ));
            }
            Ok(found.certs)
        })
        .as_deref()
        .map_err(Clone::clone)
}

/// A client configuration trusting the system's roots and the certificates in `extra` (the
/// proxy's CA, for the hosts whose TLS it terminates), speaking HTTP/1.1.
pub(crate) fn tls_config(extra: Option<&Path>) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in system_roots()? {
        let _ = roots.add(cert.clone());
    }
    if let Some(path) = extra {
        use rustls::pki_types::pem::PemObject;
        let certs = rustls::pki_types::CertificateDer::pem_file_iter(path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        for cert in certs {
            let cert = cert.map_err(|e| format!("{}: {e}", path.display()))?;
            roots
                .add(cert)
                .map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Sends `request` through the proxy socket `proxy`.
pub async fn fetch(proxy: &Path, request: Fetch) -> Result<Fetched, FetchError> {
    let seconds = request.timeout.as_secs();
    tokio::time::timeout(request.timeout, fetch_inner(proxy, request))
        .await
        .map_err(|_| FetchError::Timeout(seconds))?
}

async fn fetch_inner(proxy: &Path, request: Fetch) -> Result<Fetched, FetchError> {
    let uri: hyper::Uri = request
        .url
        .parse()
        .map_err(|e| FetchError::BadRequest(format!("url {:?}: {e}", request.url)))?;
    let https = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        other => {
            return Err(FetchError::BadRequest(format!(
                "url {:?}: the scheme must be http or https, not {}",
                request.url,
                other.unwrap_or("none")
            )));
        }
    };
    let host = uri
        .host()
        .ok_or_else(|| FetchError::BadRequest(format!("url {:?} names no host", request.url)))?
        .to_owned();
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let method: Method = request
        .method
        .to_ascii_uppercase()
        .parse()
        .map_err(|_| FetchError::BadRequest(format!("method {:?}", request.method)))?;
    let stream = UnixStream::connect(proxy)
        .await
        .map_err(|e| failed("the egress proxy")(e.to_string()))?;
    let authority = if port == if https { 443 } else { 80 } {
        host.clone()
    } else {
        format!("{host}:{port}")
    };
    let target = if https {
        uri.path_and_query().map_or("/", |p| p.as_str()).to_owned()
    } else {
        request.url.clone()
    };
    let mut builder = Request::builder()
        .method(method)
        .uri(target)
        .header(hyper::header::HOST, &authority)
        .header(hyper::header::USER_AGENT, "paddock-http-request");
    for (name, value) in &request.headers {
        builder = builder.header(name.as_str(), value.as_str());
    }
    let outgoing = builder
        .body(Full::new(Bytes::from(
            request.body.clone().unwrap_or_default(),
        )))
        .map_err(|e| FetchError::BadRequest(format!("headers: {e}")))?;
    let response = if https {
        let tunnel = open_tunnel(stream, &host, port).await?;
        let name = rustls::pki_types::ServerName::try_from(host.clone())
            .map_err(|e| FetchError::BadRequest(format!("host {host:?}: {e}")))?;
        // The proxy terminates TLS for hosts it adds a credential to, with the CA it placed
        // beside the socket.
        let ca = proxy.with_file_name(paddock_agent::egress::CA_CERT);
        let config = tls_config(ca.exists().then_some(ca.as_path())).map_err(FetchError::Failed)?;
        let tls = tokio_rustls::TlsConnector::from(config)
            .connect(name, TokioIo::new(tunnel))
            .await
            .map_err(|e| failed(&format!("TLS with {host}"))(e.to_string()))?;
        send(TokioIo::new(tls), outgoing).await?
    } else {
        send(TokioIo::new(stream), outgoing).await?
    };
    read_answer(response, request.max_bytes).await
}

/// `CONNECT host:port` through the proxy; the tunnel once it answered 200.
async fn open_tunnel(
    stream: UnixStream,
    host: &str,
    port: u16,
) -> Result<hyper::upgrade::Upgraded, FetchError> {
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| failed("the egress proxy")(e.to_string()))?;
    tokio::spawn(async move {
        let _ = connection.with_upgrades().await;
    });
    let connect = Request::builder()
        .method(Method::CONNECT)
        .uri(format!("{host}:{port}"))
        .header(hyper::header::HOST, format!("{host}:{port}"))
        .body(Full::new(Bytes::new()))
        .map_err(|e| FetchError::BadRequest(e.to_string()))?;
    let response = sender
        .send_request(connect)
        .await
        .map_err(|e| failed("the egress proxy")(e.to_string()))?;
    if response.status() != StatusCode::OK {
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned())
            .unwrap_or_default();
        return Err(refused_or_failed(status, body));
    }
    hyper::upgrade::on(response)
        .await
        .map_err(|e| failed("the tunnel")(e.to_string()))
}

fn refused_or_failed(status: StatusCode, body: String) -> FetchError {
    if status == StatusCode::FORBIDDEN && body.starts_with("paddock proxy:") {
        FetchError::Refused(body.trim_end().to_owned())
    } else {
        FetchError::Failed(format!("the proxy answered {status}: {}", body.trim_end()))
    }
}

async fn send<T>(io: T, request: Request<Full<Bytes>>) -> Result<Response<Incoming>, FetchError>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| failed("HTTP")(e.to_string()))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    sender
        .send_request(request)
        .await
        .map_err(|e| failed("HTTP")(e.to_string()))
}

async fn read_answer(
    response: Response<Incoming>,
    max_bytes: usize,
) -> Result<Fetched, FetchError> {
    let status = response.status();
    let content_type = response
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let declared_bytes = response
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    let mut body = response.into_body();
    let mut kept = Vec::new();
    let mut truncated = false;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| failed("the body")(e.to_string()))?;
        if let Some(data) = frame.data_ref() {
            let room = max_bytes.saturating_sub(kept.len());
            if data.len() > room {
                kept.extend_from_slice(&data[..room]);
                truncated = true;
                break;
            }
            kept.extend_from_slice(data);
        }
    }
    // The proxy's own refusal of a plain request.
    if status == StatusCode::FORBIDDEN && kept.starts_with(b"paddock proxy:") {
        return Err(refused_or_failed(
            status,
            String::from_utf8_lossy(&kept).into_owned(),
        ));
    }
    Ok(Fetched {
        status: status.as_u16(),
        content_type,
        body: kept,
        truncated,
        declared_bytes,
    })
}
