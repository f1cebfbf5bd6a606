//! Paddock's script sandbox: a RustPython interpreter built without host access, a zygote that
//! initialises it once and forks one confined child per script, and the wire protocol between
//! the engine and those processes.
//!
//! The modules form layers: each imports only from the layers below it, never the other way
//! (HOUSE_STYLE rule 21, checked by `scripts/check-layers.sh`). Top to bottom:
//!
//! - [`zygote`] — the fork server and the engine's handle on it; builds the interpreter, forks,
//!   and enters a child only through [`child::child_main`];
//! - [`child`] — what one forked child does: confine, take scripts, run them, report, exit;
//! - [`interpreter`] — builds the interpreter (with the `_host` module) and runs one script;
//! - `host` — the `_host` native module: the script's only way out, over the child's channel;
//! - [`channel`] — the child's end of its socketpair (frame I/O);
//! - leaves, importing nothing of the crate: [`wire`] (the one message enum and its size-capped
//!   frames), [`exit`] (a child's exit statuses), `runtime` (the runtime's Python sources),
//!   [`prepare`] (rewrites a script's top-level `return` and final expression on the ruff AST),
//!   [`confine`] (uid drop, Landlock, rlimits, seccomp: the only `unsafe`).

#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod channel;
pub mod child;
pub mod confine;
pub mod exit;
mod host;
pub mod interpreter;
pub mod prepare;
mod runtime;
pub mod wire;
pub mod zygote;

/// The crate's own tests count allocations like the `paddock` binary (which declares the
/// counting allocator itself: a library that declared it would impose it on every binary
/// linking it, `paddock-sandbox-exec` and the probes among them).
#[cfg(test)]
#[global_allocator]
static ALLOCATOR: confine::CountingAllocator = confine::CountingAllocator;

/// Errors of the sandbox machinery (not of scripts: those are [`wire::ScriptOutcome`]s).
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("the sandbox runtime failed to initialise: {0}")]
    RuntimeInit(String),
    #[error("sandbox control channel: {0}")]
    Control(std::io::Error),
    #[error("could not start the sandbox zygote {exe}: {source}")]
    Spawn { exe: String, source: std::io::Error },
    #[error("sandbox protocol violation: {0}")]
    Protocol(String),
    #[error("{0}")]
    ZygoteDied(String),
    #[error(transparent)]
    Wire(#[from] wire::WireError),
}

pub type Result<T> = std::result::Result<T, SandboxError>;
