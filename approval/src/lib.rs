//! Which commands need a human, decided from the command line alone: pure analysis (no I/O,
//! no async, no engine), as codex's `execpolicy` is. The engine's approval gate
//! (`paddock_engine::approval`) holds the policy's catalogue from here, asks approvers,
//! remembers answers and writes the audit log.
//!
//! Layout, in layers: each module imports only from the ones listed before it
//! (`scripts/check-layers.sh`).
//! - [`decision`] — `Decision` (allow / ask / deny, strictest wins) and `ApprovalMode`;
//! - [`normalize`] — disguises removed, the word-splitting fallback; [`invocation`] — what a
//!   command line is read into (`Invocation`, `Arg`, `Write`);
//! - [`interpreters`], [`shell`] and [`paths`] — a command line read into pipelines of
//!   `Invocation`s (wrappers, substitutions, here-documents and code given to interpreters
//!   opened up), and where a path lands and what it is;
//! - [`packs`] — the rules as data, one file per pack, with examples;
//! - [`rules`] — the catalogue: packs picked by the policy, rules indexed by program;
//! - [`corpus`] — caught / flagged over labelled command files.

#![forbid(unsafe_code)]
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod corpus;
pub mod decision;
pub mod interpreters;
pub mod invocation;
pub mod normalize;
pub mod packs;
pub mod paths;
pub mod rules;
pub mod shell;

pub use decision::{ApprovalMode, Decision};
