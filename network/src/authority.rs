//! The per-home certificate authority with which the egress proxy terminates TLS for the hosts
//! it adds a credential to (`[[network.credentials]]` on an `https://` host): the proxy cannot
//! add a header inside a tunnel it does not open, and must never send the request without it.
//!
//! The CA is made once per state directory (`$PADDOCK_HOME/network/ca.pem`, its key beside it
//! in `ca.key`, mode 0600, never leaving the engine's machine) by the proxy, which alone signs
//! with it: one leaf certificate per host, made when first needed and kept in memory.
//! Environments trust it through a bundle placed beside their agent's socket
//! ([`paddock_agent::egress::CA_BUNDLE`]: the system's roots and this CA, for `SSL_CERT_FILE`
//! and its twins) and the CA alone ([`paddock_agent::egress::CA_CERT`], for
//! `NODE_EXTRA_CA_CERTS`, which adds to Node's roots instead of replacing them).
//!
//! Hosts without a credential are never terminated: their tunnels stay end to end.

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// The CA's certificate in the state directory's `network/`.
pub const CA_FILE: &str = "ca.pem";
/// Its private key, beside it.
pub const CA_KEY_FILE: &str = "ca.key";
/// Held while the CA is read or made: the proxy, `paddock ca bundle` and `paddock serve
/// --e2b-tls` may start at once, and two of them making it would pair one's key with the
/// other's certificate.
const CA_LOCK_FILE: &str = "ca.lock";

/// Why the authority could not be made or used.
#[derive(Debug, thiserror::Error)]
pub enum AuthorityError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {reason}; remove it and {key} to make a new CA", key = CA_KEY_FILE)]
    Corrupt { path: PathBuf, reason: String },
    #[error("cannot make a certificate for {host}: {reason}")]
    Leaf { host: String, reason: String },
}

fn io_at(path: &Path) -> impl FnOnce(std::io::Error) -> AuthorityError + '_ {
    move |source| AuthorityError::Io {
        path: path.to_owned(),
        source,
    }
}

/// The CA's own parameters. Its name is fixed so that the issuer of a leaf can be rebuilt from
/// the key alone after a restart (no certificate parser needed): what tells two homes' CAs
/// apart is their keys.
fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    name.push(DnType::OrganizationName, "Paddock");
    name.push(DnType::CommonName, "Paddock egress proxy CA");
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

/// The authority of one state directory.
pub struct Authority {
    issuer: Issuer<'static, KeyPair>,
    ca_pem: String,
    ca_der: CertificateDer<'static>,
    /// Server configurations by host, each with its leaf certificate.
    leaves: Mutex<HashMap<String, Arc<rustls::ServerConfig>>>,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authority").finish_non_exhaustive()
    }
}

/// Writes `contents` to `path` through a temporary file and a rename: a reader never sees half.
fn write_atomically(path: &Path, contents: &[u8], mode: u32) -> Result<(), AuthorityError> {
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(format!(".{}.tmp", std::process::id()));
    let temporary = PathBuf::from(temporary);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&temporary)
        .map_err(io_at(&temporary))?;
    file.write_all(contents).map_err(io_at(&temporary))?;
    drop(file);
    std::fs::rename(&temporary, path).map_err(io_at(path))
}

/// The certificate in a PEM file (its first `CERTIFICATE` block).
fn first_certificate(path: &Path, pem: &str) -> Result<CertificateDer<'static>, AuthorityError> {
    use rustls::pki_types::pem::PemObject;
    CertificateDer::from_pem_slice(pem.as_bytes()).map_err(|e| AuthorityError::Corrupt {
        path: path.to_owned(),
        reason: format!("no certificate ({e})"),
    })
}

impl Authority {
    /// The CA of the state directory whose `network/` is `dir` (made, owner-only, when
    /// missing), made on first use; one process makes it, under `ca.lock`.
    pub fn load_or_create(dir: &Path) -> Result<Self, AuthorityError> {
        if !dir.exists() {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(io_at(dir))?;
        }
        let lock_path = dir.join(CA_LOCK_FILE);
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&lock_path)
            .map_err(io_at(&lock_path))?;
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| io_at(&lock_path)(e.into()))?;
        // Released when `lock` is closed, at the end of this call.
        Self::load_or_create_locked(dir)
    }

    fn load_or_create_locked(dir: &Path) -> Result<Self, AuthorityError> {
        let cert_path = dir.join(CA_FILE);
        let key_path = dir.join(CA_KEY_FILE);
        let (key, ca_pem) = match std::fs::read_to_string(&key_path) {
            Ok(key_pem) => {
                let key = KeyPair::from_pem(&key_pem).map_err(|e| AuthorityError::Corrupt {
                    path: key_path.clone(),
                    reason: e.to_string(),
                })?;
                let ca_pem = std::fs::read_to_string(&cert_path).map_err(io_at(&cert_path))?;
                (key, ca_pem)
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                let key = KeyPair::generate().map_err(|e| AuthorityError::Corrupt {
                    path: key_path.clone(),
                    reason: format!("cannot make a key: {e}"),
                })?;
                let ca_pem = ca_params()
                    .self_signed(&key)
                    .map_err(|e| AuthorityError::Corrupt {
                        path: cert_path.clone(),
                        reason: format!("cannot sign the CA: {e}"),
                    })?
                    .pem();
                // The certificate first: a key without its certificate would be taken for a
                // damaged CA by the next start.
                write_atomically(&cert_path, ca_pem.as_bytes(), 0o644)?;
                write_atomically(&key_path, key.serialize_pem().as_bytes(), 0o600)?;
                tracing::info!(path = %cert_path.display(), "made the egress proxy's CA");
                (key, ca_pem)
            }
            Err(err) => return Err(io_at(&key_path)(err)),
        };
        let ca_der = first_certificate(&cert_path, &ca_pem)?;
        Ok(Self {
            issuer: Issuer::new(ca_params(), key),
            ca_pem,
            ca_der,
            leaves: Mutex::default(),
        })
    }

    /// The CA certificate, PEM.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The server side of a terminated tunnel for `host`: a leaf certificate for that name
    /// (or address) signed by this CA, HTTP/1.1 only.
    pub fn server_config(&self, host: &str) -> Result<Arc<rustls::ServerConfig>, AuthorityError> {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(leaves) = self.leaves.lock()
            && let Some(config) = leaves.get(host)
        {
            return Ok(config.clone());
        }
        let config = self.leaf_config(&[host.to_owned()])?;
        if let Ok(mut leaves) = self.leaves.lock() {
            leaves.insert(host.to_owned(), config.clone());
        }
        Ok(config)
    }

    /// A server configuration (HTTP/1.1 only) with a new leaf certificate for `names` (DNS
    /// names, `*.` wildcards, or addresses), signed by this CA; the first name is its
    /// common name.
    pub fn leaf_config(
        &self,
        names: &[String],
    ) -> Result<Arc<rustls::ServerConfig>, AuthorityError> {
        let host = names.first().map_or("", String::as_str);
        let failed = |reason: String| AuthorityError::Leaf {
            host: names.join(", "),
            reason,
        };
        let key = KeyPair::generate().map_err(|e| failed(e.to_string()))?;
        let mut params =
            CertificateParams::new(names.to_vec()).map_err(|e| failed(e.to_string()))?;
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, host);
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let leaf = params
            .signed_by(&key, &self.issuer)
            .map_err(|e| failed(e.to_string()))?;
        let chain = vec![leaf.der().clone(), self.ca_der.clone()];
        let private = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| failed(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(chain, private)
            .map_err(|e| failed(e.to_string()))?;
        // The proxy and the E2B front end speak HTTP/1.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }

    /// What a client trusts this CA by, for `SSL_CERT_FILE` (which replaces a client's roots):
    /// the system's root certificates, then this CA.
    pub fn bundle_pem(&self) -> String {
        let mut bundle = system_roots_pem();
        if !bundle.is_empty() && !bundle.ends_with('\n') {
            bundle.push('\n');
        }
        // A bundle made from a bundle (SSL_CERT_FILE naming one already) holds the CA once.
        if !bundle.contains(self.ca_pem.trim()) {
            bundle.push_str(&self.ca_pem);
        }
        bundle
    }

    /// Places what an environment needs to trust this CA in `dir` (its agent's directory):
    /// the bundle (the system's roots, then this CA) and the CA alone.
    pub fn place_in(&self, dir: &Path) -> Result<(), AuthorityError> {
        let bundle = self.bundle_pem();
        write_atomically(
            &dir.join(paddock_agent::egress::CA_BUNDLE),
            bundle.as_bytes(),
            0o644,
        )?;
        write_atomically(
            &dir.join(paddock_agent::egress::CA_CERT),
            self.ca_pem.as_bytes(),
            0o644,
        )
    }
}

/// The system's root certificates as PEM text: the bundle this machine's tools read
/// (`SSL_CERT_FILE` when set, else the distributions' usual places); empty when there is none.
fn system_roots_pem() -> String {
    let named = std::env::var_os("SSL_CERT_FILE").map(PathBuf::from);
    let usual = [
        "/etc/ssl/certs/ca-certificates.crt",
        "/etc/pki/tls/certs/ca-bundle.crt",
        "/etc/ssl/ca-bundle.pem",
        "/etc/ssl/cert.pem",
    ];
    named
        .into_iter()
        .chain(usual.iter().map(PathBuf::from))
        .find_map(|path| std::fs::read_to_string(path).ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_home_s_ca_is_made_once_and_signs_leaves_a_client_trusts() {
        let dir = tempfile::tempdir().unwrap();
        let made = Authority::load_or_create(dir.path()).unwrap();
        let again = Authority::load_or_create(dir.path()).unwrap();
        assert_eq!(made.ca_pem(), again.ca_pem(), "the CA is kept, not remade");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join(CA_KEY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "the key is the owner's alone");

        // A leaf made by the reloaded CA verifies against the stored certificate.
        let config = again.server_config("api.example.test").unwrap();
        handshake_trusting(&made, config.clone()).unwrap();

        // Another home's CA is not this one: its clients refuse this home's leaves.
        let other = tempfile::tempdir().unwrap();
        let other = Authority::load_or_create(other.path()).unwrap();
        assert!(handshake_trusting(&other, config).is_err());
    }

    fn handshake_trusting(
        trusted: &Authority,
        config: Arc<rustls::ServerConfig>,
    ) -> Result<(), rustls::Error> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(trusted.ca_der.clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name = rustls::pki_types::ServerName::try_from("api.example.test").unwrap();
        let mut client = rustls::ClientConnection::new(Arc::new(client), name).unwrap();
        let mut server = rustls::ServerConnection::new(config).unwrap();
        handshake(&mut client, &mut server)
    }

    fn handshake(
        client: &mut rustls::ClientConnection,
        server: &mut rustls::ServerConnection,
    ) -> Result<(), rustls::Error> {
        for _ in 0..10 {
            let mut wire = Vec::new();
            client.write_tls(&mut wire).unwrap();
            server.read_tls(&mut wire.as_slice()).unwrap();
            server.process_new_packets()?;
            let mut wire = Vec::new();
            server.write_tls(&mut wire).unwrap();
            client.read_tls(&mut wire.as_slice()).unwrap();
            client.process_new_packets()?;
            if !client.is_handshaking() && !server.is_handshaking() {
                return Ok(());
            }
        }
        panic!("the handshake did not finish");
    }
}
