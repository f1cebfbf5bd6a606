//! The `paddock` binary: the command line over the engine (`paddock_engine`), the MCP server
//! (`paddock serve`), the embedding protocol (`paddock embed`) and the benchmark harness
//! (`paddock bench`, `paddock_benches`). Modules, in layers (each imports only from those
//! after it; `scripts/check-layers.sh`): [`dispatch`] (the entry point) → the command groups
//! ([`scripts`]: run, call, files; [`serve`], with the E2B front end [`e2b`] below it;
//! [`sessions`]: sessions and snapshots; [`policy`]: tools and policy) → [`args`] (the
//! grammar) and [`common`] (policy loading, output, errors).

mod args;
mod ca;
mod common;
mod dispatch;
mod e2b;
mod embed;
mod policy;
mod scripts;
mod serve;
mod sessions;

/// Counts every allocation of the process: a sandbox child (this binary, forked by its zygote)
/// checks its script's heap budget against it; the zygote refuses to start without it.
#[global_allocator]
static ALLOCATOR: paddock_sandbox_worker::confine::CountingAllocator =
    paddock_sandbox_worker::confine::CountingAllocator;

fn main() -> std::process::ExitCode {
    dispatch::run_main()
}
