//! The script runtime's own Python modules (this directory), compiled into the binary.
//!
//! A leaf: `interpreter`'s bootstrap loads them by name through `_host.source`, which `host`
//! answers from here; this module imports nothing of the crate.

const ASYNCIO_SOURCE: &str = include_str!("asyncio.py");
const OS_SOURCE: &str = include_str!("os_stub.py");
const RUNTIME_SOURCE: &str = include_str!("runtime.py");

/// The runtime's own Python modules, by name.
pub fn source(name: &str) -> Option<&'static str> {
    match name {
        "asyncio" => Some(ASYNCIO_SOURCE),
        "os" => Some(OS_SOURCE),
        "_paddock_runtime" => Some(RUNTIME_SOURCE),
        _ => None,
    }
}
