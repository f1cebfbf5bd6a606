//! `network = "proxy"` as a backend sees it: the environment has no route out, its agent
//! listens on [`EGRESS_PORT`] inside and carries each connection to `egress.sock` in the
//! agent's directory, and an [`EgressHost`] (the engine's, over its egress proxy) makes sure
//! something serves that socket before a command runs.

use std::collections::BTreeMap;
use std::path::Path;

use crate::BackendFuture;

pub use paddock_agent::egress::{CA_BUNDLE, CA_CERT, EGRESS_SOCKET};

/// The port of the proxy inside every proxied environment (each has its own network
/// namespace, so one number serves all).
pub const EGRESS_PORT: u16 = 3128;

/// Who serves a proxied environment's `egress.sock`.
pub trait EgressHost: Send + Sync {
    /// Makes sure `listen` (the agent directory's `egress.sock`, as this machine sees it) is
    /// served for `session` under the backend's policy. Called on every connection to the
    /// agent; cheap when nothing changed.
    fn serve<'a>(&'a self, session: &'a str, listen: &'a Path) -> BackendFuture<'a, ()>;
    /// The session closed: nothing needs `listen` any more.
    fn release<'a>(&'a self, listen: &'a Path) -> BackendFuture<'a, ()>;
    /// Whether the proxy terminates TLS for some hosts (an `https://` host with a credential):
    /// then [`EgressHost::serve`] places the proxy's CA beside `listen` ([`CA_BUNDLE`],
    /// [`CA_CERT`]) and commands must be told to trust it ([`ca_env`]).
    fn terminates_tls(&self) -> bool {
        false
    }
}

/// What commands of a proxied environment get: the proxy for every tool that reads these
/// variables (curl, pip, git, npm, cargo, Python's urllib and requests), loopback excepted.
pub fn proxy_env() -> BTreeMap<String, String> {
    let url = format!("http://127.0.0.1:{EGRESS_PORT}");
    let mut env = all_set_to(
        &[
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "http_proxy",
            "https_proxy",
            "ALL_PROXY",
            "all_proxy",
        ],
        &url,
    );
    env.extend(all_set_to(&["NO_PROXY", "no_proxy"], "localhost,127.0.0.1"));
    env
}

/// Each of `names` set to `value`.
fn all_set_to(names: &[&str], value: &str) -> BTreeMap<String, String> {
    names
        .iter()
        .map(|name| ((*name).to_owned(), value.to_owned()))
        .collect()
}

/// What commands of an environment whose proxy terminates TLS get: the bundle (the system's
/// roots and the proxy's CA) for every tool that replaces its roots with a file, the CA alone
/// for Node, which adds it to its own. `dir`: the agent's directory as the environment sees it.
pub fn ca_env(dir: &str) -> BTreeMap<String, String> {
    let mut env = all_set_to(
        &[
            "SSL_CERT_FILE",
            "REQUESTS_CA_BUNDLE",
            "CURL_CA_BUNDLE",
            "PIP_CERT",
            "GIT_SSL_CAINFO",
            "CARGO_HTTP_CAINFO",
        ],
        &format!("{dir}/{CA_BUNDLE}"),
    );
    env.insert("NODE_EXTRA_CA_CERTS".to_owned(), format!("{dir}/{CA_CERT}"));
    env
}

/// The agent's arguments that open the way out.
pub fn agent_args() -> [String; 2] {
    ["--egress-port".to_owned(), EGRESS_PORT.to_string()]
}
