//! Code-mode throughput: trivial-script latency, nested call round trip, gathers, scripts per
//! second, idle child memory and the CPython loop ratio. Needs `target/release/paddock` built.

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
    match runtime.block_on(paddock_engine::bench::run(exe, 300, 2.0)) {
        Ok(figures) => {
            println!(
                "{}",
                serde_json::to_string_pretty(&figures).unwrap_or_default()
            );
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("bench failed: {err}");
            ExitCode::from(1)
        }
    }
}
