//! The `paddock` binary. The command line is the engine's (`paddock_engine::cli`); `paddock
//! bench` is run by the benchmark harness, `paddock_benches`, which depends on the engine and
//! so is handed to it here.

/// Counts every allocation of the process: a sandbox child (this binary, forked by its zygote)
/// checks its script's heap budget against it; the zygote refuses to start without it.
#[global_allocator]
static ALLOCATOR: paddock_sandbox_worker::confine::CountingAllocator =
    paddock_sandbox_worker::confine::CountingAllocator;

fn main() -> std::process::ExitCode {
    paddock_engine::cli::run_main(paddock_benches::bench_runner())
}
