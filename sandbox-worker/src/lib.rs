//! Paddock's script sandbox: a RustPython interpreter built without host access, a zygote that
//! initialises it once and forks one confined child per script, and the wire protocol between
//! the engine and those processes.
//!
//! - [`prepare`] — rewrites a script (top-level `return`, final expression) on the ruff AST;
//! - [`wire`] — the one message enum and its size-capped frames;
//! - [`zygote`] — the fork server and the engine's handle on it;
//! - [`child`] — what one forked child does;
//! - [`confine`] — namespaces of trust: uid drop, Landlock, rlimits, seccomp (the only `unsafe`);
//! - [`interpreter`] and `host` — the interpreter, its runtime and the `_host` module.

#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod channel;
pub mod child;
pub mod confine;
mod host;
pub mod interpreter;
pub mod prepare;
pub mod wire;
pub mod zygote;

/// Counts every allocation of the process: a sandbox child's heap budget is checked against it.
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
