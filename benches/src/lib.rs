//! `paddock bench`: what a call costs and how the cost grows, measured the way a sceptical
//! engineer would: named scenarios, each with its method, its samples, median and spread, and
//! the peers (Monty, a fresh CPython per script, Hermes' terminal, the bare tools) measured in
//! the same run on the same machine, interleaved with Paddock's samples so that both see the
//! same load.
//!
//! The `paddock` binary (the `paddock-cli` crate) takes `paddock bench`'s flags ([`BenchArgs`])
//! into its grammar and calls [`run_from_cli`]. `cargo bench -p paddock-benches`
//! (`benches/codemode.rs`) runs the code-mode scenarios through [`run_cli`].
//!
//! Layout, in layers: each module imports only from the ones listed before it
//! (`scripts/check-layers.sh` fails CI on a cycle).
//! - [`error`] — [`BenchError`]; [`stats`] — summaries; [`machine`] — the machine; [`chart`] —
//!   the SVGs (std only); none imports anything of the crate;
//! - [`report`] — the results; [`peers`] — runs the peer driver; [`markdown`] and [`output`]
//!   render a report;
//! - [`harness`] — what a scenario measures with ([`Bench`], the `noop` tool);
//! - [`scenarios`] — the measurements, one file per family;
//! - [`runner`] — [`run`], [`run_cli`], [`BenchArgs`], [`run_from_cli`].
//!
//! Paddock is measured inside this process, through the same engine a library user holds (no
//! CLI start-up, except in the `startup` and `mcp` scenarios, which are about exactly that).

#![forbid(unsafe_code)]
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod chart;
pub mod error;
pub mod harness;
pub mod machine;
pub mod markdown;
pub mod output;
pub mod peers;
pub mod report;
pub mod runner;
pub mod scenarios;
pub mod stats;

pub use error::{BenchError, Result};
pub use harness::{Bench, PREFORK, bench_engine, ms};
pub use runner::{BenchArgs, Options, run, run_cli, run_from_cli};
