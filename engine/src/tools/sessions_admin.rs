//! The `sessions_admin` toolset, off by default (an operator enables it in `[toolsets]`):
//! `session_snapshot`, `session_fork`, `snapshot_list` and `snapshot_remove`, the
//! `paddock sessions snapshot|fork` and `paddock snapshots list|rm` commands as tools for an
//! orchestrator that reaches Paddock over MCP.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Value, json};

use super::environment::Environments;
use crate::registry::{CallContext, Tool, ToolFuture, ToolSpec};
use crate::snapshots::{Limits, Snapshots};
use crate::vocabulary::ToolError;

const TOOLSET: &str = "sessions_admin";

/// The four tools over `envs`' sessions, under the policy's `[snapshots]` limits.
pub fn sessions_admin_tools(envs: Arc<Environments>, limits: Limits) -> Vec<Arc<dyn Tool>> {
    [Admin::Snapshot, Admin::Fork, Admin::List, Admin::Remove]
        .into_iter()
        .map(|which| {
            Arc::new(AdminTool {
                which,
                envs: envs.clone(),
                limits,
            }) as Arc<dyn Tool>
        })
        .collect()
}

#[derive(Clone, Copy)]
enum Admin {
    Snapshot,
    Fork,
    List,
    Remove,
}

struct AdminTool {
    which: Admin,
    envs: Arc<Environments>,
    limits: Limits,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SnapshotArgs {
    /// Default: the caller's session.
    #[serde(default)]
    session: Option<String>,
    #[serde(default)]
    name: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ForkArgs {
    snapshot: String,
    #[serde(default = "one")]
    count: usize,
}

fn one() -> usize {
    1
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RemoveArgs {
    name: String,
}

/// Most forks one call makes.
const MAX_FORKS: usize = 64;

fn failed(err: crate::snapshots::SnapshotError) -> ToolError {
    ToolError::denied("sessions:snapshot_failed", err.to_string())
}

impl Tool for AdminTool {
    fn spec(&self) -> ToolSpec {
        match self.which {
            Admin::Snapshot => ToolSpec::new(
                "session_snapshot",
                TOOLSET,
                "Save a session (default: this one) as a snapshot: its files and shell state \
                 (directory, exports, functions, aliases), not its running processes. The \
                 session goes on unchanged. Returns the snapshot's name and size.",
                json!({
                    "type": "object",
                    "properties": {
                        "session": {"type": "string", "description": "Default: the caller's session"},
                        "name": {"type": "string", "description": "[a-z0-9_.-], 1-64 characters; default made from the session"}
                    },
                    "additionalProperties": false
                }),
            )
            .with_label("📸", "Saving a snapshot"),
            Admin::Fork => ToolSpec::new(
                "session_fork",
                TOOLSET,
                "Start `count` new sessions from a snapshot, each independent of the others and \
                 of the original. Returns their session ids.",
                json!({
                    "type": "object",
                    "properties": {
                        "snapshot": {"type": "string"},
                        "count": {"type": "integer", "minimum": 1, "maximum": MAX_FORKS, "default": 1}
                    },
                    "required": ["snapshot"],
                    "additionalProperties": false
                }),
            )
            .with_label("🌿", "Forking sessions"),
            Admin::List => ToolSpec::new(
                "snapshot_list",
                TOOLSET,
                "The snapshots kept: name, session, size, age, how each backend's files were \
                 kept, and what was not carried.",
                json!({"type": "object", "properties": {}, "additionalProperties": false}),
            )
            .read_only()
            .with_label("📚", "Listing snapshots"),
            Admin::Remove => ToolSpec::new(
                "snapshot_remove",
                TOOLSET,
                "Remove a snapshot: its files and its images.",
                json!({
                    "type": "object",
                    "properties": {"name": {"type": "string"}},
                    "required": ["name"],
                    "additionalProperties": false
                }),
            )
            .with_label("🗑️", "Removing a snapshot"),
        }
    }

    fn call(&self, args: Value, ctx: CallContext) -> ToolFuture {
        let which = self.which;
        let envs = self.envs.clone();
        let limits = self.limits;
        Box::pin(async move {
            let snapshots = Snapshots::new(envs.sessions(), limits);
            match which {
                Admin::Snapshot => {
                    let args: SnapshotArgs = super::parse_args("session_snapshot", args)?;
                    let session = args.session.unwrap_or_else(|| ctx.session.clone());
                    let summary = snapshots
                        .snapshot(&session, args.name.as_deref())
                        .await
                        .map_err(failed)?;
                    Ok(serde_json::to_value(summary).unwrap_or_default())
                }
                Admin::Fork => {
                    let args: ForkArgs = super::parse_args("session_fork", args)?;
                    if !(1..=MAX_FORKS).contains(&args.count) {
                        return Err(ToolError::invalid_arguments(format!(
                            "session_fork: count must be between 1 and {MAX_FORKS}, got {}",
                            args.count
                        )));
                    }
                    let ids = crate::snapshots::fork_ids(&args.snapshot, args.count);
                    snapshots
                        .start_from(&args.snapshot, &ids)
                        .await
                        .map_err(failed)?;
                    Ok(json!({"snapshot": args.snapshot, "sessions": ids}))
                }
                Admin::List => {
                    let _: Value = args;
                    let list: Vec<Value> = snapshots
                        .list()
                        .into_iter()
                        .map(|entry| match entry {
                            Ok(summary) => serde_json::to_value(summary).unwrap_or_default(),
                            Err((name, error)) => json!({"name": name, "error": error}),
                        })
                        .collect();
                    Ok(json!({"snapshots": list}))
                }
                Admin::Remove => {
                    let args: RemoveArgs = super::parse_args("snapshot_remove", args)?;
                    snapshots.remove(&args.name).await.map_err(failed)?;
                    Ok(json!({"name": args.name, "removed": true}))
                }
            }
        })
    }
}
