//! The Paddock engine: the tool registry, policy files, code mode (`run_tools_script`) on the
//! sandbox pool, the built-in tools and the `paddock` command line.
//!
//! Layout:
//! - [`approval`] — dangerous-command rules, approvers, the audit log;
//! - [`registry`] — what tools exist, dispatch, argument checks, approvals, events;
//! - [`policy`] — operator policy files;
//! - [`codemode`] — `run_tools_script`: script preparation, the sandbox pool, limits, results;
//! - [`tools`] — the built-in tools;
//! - [`events`] — ToolCallEvents;
//! - [`sessions`] — session records, closing a session, sweeping idle ones;
//! - [`mcp`] — `paddock serve` (MCP server, approvals by elicitation) and the bridge to other
//!   MCP servers;
//! - [`engine`] — the facade a library user or the CLI holds;
//! - [`cli`] — the command line; [`bench`]: `paddock bench` (scenarios, peers, report, charts).

#![forbid(unsafe_code)]
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod approval;
pub mod bench;
pub mod cli;
pub mod codemode;
pub mod engine;
pub mod events;
pub mod mcp;
pub mod policy;
pub mod registry;
pub mod sessions;
pub mod tools;

pub use engine::{Engine, EngineError, EngineOptions};
pub use registry::{CallContext, Registry, Tool, ToolError, ToolErrorKind, ToolSpec};
