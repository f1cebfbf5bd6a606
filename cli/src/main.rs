//! The `paddock` binary. The command line is the engine's (`paddock_engine::cli`); `paddock
//! bench` is run by the benchmark harness, `paddock_benches`, which depends on the engine and
//! so is handed to it here.

fn main() -> std::process::ExitCode {
    paddock_engine::cli::run_main(paddock_benches::bench_runner())
}
