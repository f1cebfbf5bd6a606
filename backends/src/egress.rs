//! `network = "proxy"` as a backend sees it: the environment has no route out, its agent
//! listens on [`EGRESS_PORT`] inside and carries each connection to `egress.sock` in the
//! agent's directory, and an [`EgressHost`] (the engine's, over its egress proxy) makes sure
//! something serves that socket before a command runs.

use std::collections::BTreeMap;
use std::path::Path;

use crate::BackendFuture;

pub use paddock_agent::egress::EGRESS_SOCKET;

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
}

/// What commands of a proxied environment get: the proxy for every tool that reads these
/// variables (curl, pip, git, npm, cargo, Python's urllib and requests), loopback excepted.
pub fn proxy_env() -> BTreeMap<String, String> {
    let url = format!("http://127.0.0.1:{EGRESS_PORT}");
    let mut env = BTreeMap::new();
    for name in [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "http_proxy",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
    ] {
        env.insert(name.to_owned(), url.clone());
    }
    for name in ["NO_PROXY", "no_proxy"] {
        env.insert(name.to_owned(), "localhost,127.0.0.1".to_owned());
    }
    env
}

/// The agent's arguments that open the way out.
pub fn agent_args() -> [String; 2] {
    ["--egress-port".to_owned(), EGRESS_PORT.to_string()]
}
