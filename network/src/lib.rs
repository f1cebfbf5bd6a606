//! Paddock's egress policy and its proxy's core: which hosts an environment with
//! `network = "proxy"` may reach (DESIGN.md section 5, "Network").
//!
//! - [`hosts`] — the `allow` / `deny` host globs (`"*.x"` matches subdomains only);
//! - [`address`] — what an IP address is (loopback, private, link-local, CGNAT, cloud
//!   metadata, ...), and the literal spellings of an IPv4 address that resolvers accept
//!   (`2130706433`, `0x7f.1`, `0177.0.0.1`), so that a disguised literal is seen for what it is;
//! - [`egress`] — the decision for one destination: the name's rules first, then the addresses
//!   it resolved to (a public name pointing at a private address is refused unless pinned);
//! - [`proxy`] — the proxy's core over those decisions: HTTP/1 and `CONNECT` (hyper, tokio),
//!   403 naming host and rule, every decision to an observer;
//! - [`authority`] — the per-home CA with which the proxy terminates TLS for the hosts it
//!   adds a credential to, and what an environment needs to trust it;
//! - [`daemon`] — the proxy as a process, one per state directory, serving each proxied
//!   environment's socket under its session's policy; [`control`] — how engines talk to it;
//! - [`client`] and [`render`] — `http_request`: one request through the same proxy, and HTML
//!   as compact text.

#![forbid(unsafe_code)]
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod address;
pub mod authority;
pub mod client;
pub mod control;
pub mod daemon;
pub mod egress;
pub mod hosts;
pub mod proxy;
pub mod render;

pub use address::{AddressClass, classify, parse_ip_literal};
pub use egress::{EgressPolicy, PolicyEntryError, Refusal, Unknown, Verdict};
pub use hosts::{HostGlob, HostGlobError};
