//! The Paddock engine: the tool registry, policy files, code mode (`run_tools_script`) on the
//! sandbox pool, the built-in tools, sessions. The `paddock` command line is the `paddock-cli`
//! crate, above this one.
//!
//! Layout, in layers: each module imports only from the ones listed before it
//! (`scripts/check-layers.sh` fails CI on a cycle).
//! - [`vocabulary`] — what every layer shares: the call context, tool errors, the script's
//!   pausable deadline, the approver trait; imports nothing of the crate;
//! - [`toolsets`] — named bundles of tools and presets, retired names;
//! - [`events`] — ToolCallEvents;
//! - [`policy`] — operator policy files;
//! - [`registry`] — what tools exist, dispatch, argument checks, events (approvals through
//!   [`vocabulary::ToolApprovals`]);
//! - [`approval`] — dangerous-command rules, approvers, the audit log;
//! - [`network`] — the engine's side of the egress proxy (`network = "proxy"`): starting it,
//!   registering environments, answering its questions about unknown hosts;
//! - [`codemode`] — `run_tools_script`: script preparation, the sandbox pool, limits, results;
//! - [`tools`] — the built-in tools, and the registry holding them;
//! - [`sessions`] — session records, closing a session, sweeping idle ones;
//! - [`engine`] — the facade a library user or a front end holds.
//!
//! The front ends are crates above this one: `paddock-mcp` (`paddock serve` and the bridge to
//! other MCP servers) and `paddock-cli` (the command line and `paddock embed`).

#![forbid(unsafe_code)]
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod approval;
pub mod codemode;
pub mod engine;
pub mod events;
pub mod network;
pub mod policy;
pub mod registry;
pub mod sessions;
pub mod snapshots;
pub mod tools;
pub mod toolsets;
pub mod vocabulary;

pub use engine::{Engine, EngineError, EngineOptions};
pub use registry::{CallContext, Registry, Tool, ToolError, ToolErrorKind, ToolSpec};
