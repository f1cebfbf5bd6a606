//! `cargo bench -p paddock-benches`: the code-mode scenarios of `paddock bench --quick` (see
//! this crate's library and docs/benchmarks.md), run against the built `paddock` binary,
//! peers included when scripts/bench-peers.sh has installed them. Results go to
//! `bench-results/` like `paddock bench`'s. Needs `target/release/paddock` built.

use std::path::PathBuf;
use std::process::ExitCode;

fn paddock_exe() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("PADDOCK_BIN") {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    let bin = exe.parent()?.parent()?.join("paddock");
    bin.exists().then_some(bin)
}

fn main() -> ExitCode {
    // `cargo bench -- --list` and friends pass flags; only run when asked to bench.
    if std::env::args().any(|a| a == "--list") {
        return ExitCode::SUCCESS;
    }
    let Some(exe) = paddock_exe() else {
        eprintln!(
            "build the binary first: cargo build --release --bin paddock (or set PADDOCK_BIN)"
        );
        return ExitCode::from(2);
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("tokio: {err}");
            return ExitCode::from(2);
        }
    };
    let options = paddock_benches::Options {
        exe,
        quick: true,
        scenarios: [
            "trivial",
            "nested_call",
            "gather",
            "cpu",
            "throughput",
            "idle_memory",
        ]
        .map(String::from)
        .to_vec(),
        backends: None,
        peers: None,
        command: "cargo bench -p paddock-benches".into(),
        progress: true,
    };
    runtime.block_on(paddock_benches::run_cli(
        options,
        PathBuf::from("bench-results"),
        false,
    ))
}
