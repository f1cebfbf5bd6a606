//! Integration tests of the engine library against the real `paddock` binary (the sandbox
//! zygote is that binary re-executed). They live in the crate that builds the binary, where
//! `env!("CARGO_BIN_EXE_paddock")` names it.

mod suite;
