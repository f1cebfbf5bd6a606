//! The `paddock` binary: everything lives in the library (`paddock_engine::cli`).

fn main() -> std::process::ExitCode {
    paddock_engine::cli::run_main()
}
