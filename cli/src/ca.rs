//! `paddock ca bundle`: what a client trusts Paddock's certificate authority by. The CA is the
//! state directory's own (`$PADDOCK_HOME/network/ca.pem`, made on first use, its key never
//! leaving this machine); the egress proxy signs the hosts it terminates with it, and
//! `paddock serve --e2b-tls` its `*.DOMAIN` certificate.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use crate::common::usage_error;

/// Prints the bundle (this machine's roots, then the CA), or writes it to `out`.
pub(crate) fn ca_bundle(out: Option<&Path>) -> ExitCode {
    let home = paddock_engine::tools::environment::state_root();
    let dir = paddock_network::control::network_dir(&home);
    let authority = match paddock_network::authority::Authority::load_or_create(&dir) {
        Ok(a) => a,
        Err(err) => return usage_error(&format!("paddock ca: {err}")),
    };
    let bundle = authority.bundle_pem();
    let written = match out {
        Some(path) => std::fs::write(path, &bundle).map_err(|e| format!("{}: {e}", path.display())),
        None => std::io::stdout()
            .write_all(bundle.as_bytes())
            .map_err(|e| format!("stdout: {e}")),
    };
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => usage_error(&format!("paddock ca bundle: {err}")),
    }
}
