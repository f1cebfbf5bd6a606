//! `--e2b-tls DOMAIN`: the front end over TLS, for SDKs that reach E2B by domain
//! (`E2B_DOMAIN=DOMAIN:PORT`) rather than by the URL overrides, which e2b 2.63 marks for
//! removal. The SDK then calls `https://api.DOMAIN:PORT` for the REST API and
//! `https://PORT-ID.DOMAIN:PORT` for a sandbox (routed by its headers, or by that name:
//! [`super::auth::host_route`]); one certificate for `*.DOMAIN`, signed by the state
//! directory's Paddock CA, answers both. Clients trust the CA by `SSL_CERT_FILE` naming the
//! bundle `paddock ca bundle` writes.
//!
//! Handshakes run apart from the accept loop, so a client that stalls in one holds up no
//! other connection.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::server::TlsStream;

/// How long a client may take over its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections handshaken and not yet taken by the server.
const READY_QUEUE: usize = 64;

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TlsError {
    #[error("--e2b-tls {0:?}: not a domain name (e.g. sbx.localhost, or e2b.internal.example)")]
    Domain(String),
    #[error("--e2b-tls: the Paddock CA: {0}")]
    Authority(#[from] paddock_network::authority::AuthorityError),
}

/// The domain of `--e2b-tls` without a port (`sbx.localhost:49982` names `sbx.localhost`).
pub(crate) fn domain_of(given: &str) -> Result<String, TlsError> {
    let domain = given
        .rsplit_once(':')
        .filter(|(_, port)| port.chars().all(|c| c.is_ascii_digit()))
        .map_or(given, |(host, _)| host)
        .trim_end_matches('.')
        .to_ascii_lowercase();
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    // Two labels at least: a certificate for `*.localhost` is refused by clients (rustls).
    if domain.split('.').all(label_ok) && domain.contains('.') {
        Ok(domain)
    } else {
        Err(TlsError::Domain(given.to_owned()))
    }
}

/// The server configuration: a certificate for `*.DOMAIN` and `DOMAIN`, signed by the CA of
/// the state directory `home`.
pub(crate) fn server_config(
    home: &std::path::Path,
    domain: &str,
) -> Result<Arc<tokio_rustls::rustls::ServerConfig>, TlsError> {
    let dir = paddock_network::control::network_dir(home);
    let authority = paddock_network::authority::Authority::load_or_create(&dir)?;
    Ok(authority.leaf_config(&[format!("*.{domain}"), domain.to_owned()])?)
}

/// The accepted TLS connections, for `axum::serve`.
pub(crate) struct TlsListener {
    ready: tokio::sync::mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    /// Accepts on `listener` and handshakes each connection with `config` in a task of its own.
    pub(crate) fn new(
        listener: TcpListener,
        config: Arc<tokio_rustls::rustls::ServerConfig>,
    ) -> std::io::Result<Self> {
        let local = listener.local_addr()?;
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        let (tx, ready) = tokio::sync::mpsc::channel(READY_QUEUE);
        tokio::spawn(async move {
            loop {
                let (tcp, peer) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(err) => {
                        // Out of descriptors and the like: wait rather than spin.
                        tracing::warn!(%err, "e2b: accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                if tx.is_closed() {
                    return;
                }
                // A command's last small write would otherwise wait for a delayed ACK.
                let _ = tcp.set_nodelay(true);
                let acceptor = acceptor.clone();
                let tx = tx.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((tls, peer)).await;
                        }
                        Ok(Err(err)) => tracing::debug!(%peer, %err, "e2b: TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "e2b: TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(Self { ready, local })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(accepted) => accepted,
            // The accept loop ended (the runtime is going down): nothing more comes.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_domain_is_taken_without_its_port_and_checked() {
        assert_eq!(domain_of("sbx.localhost:49982").unwrap(), "sbx.localhost");
        assert_eq!(
            domain_of("E2B.Internal.Example").unwrap(),
            "e2b.internal.example"
        );
        assert!(
            domain_of("localhost").is_err(),
            "*.localhost is not a name clients accept"
        );
        assert!(domain_of("*.sbx.localhost").is_err());
        assert!(domain_of("sbx").is_err());
        assert!(domain_of("https://sbx.localhost").is_err());
        assert!(domain_of("").is_err());
    }
}
