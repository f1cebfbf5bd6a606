//! How a background command is launched: the hidden subcommand of `paddock` that runs its
//! supervisor and, on a remote target, the host programs the supervisor runs.

use serde::{Deserialize, Serialize};

/// The hidden subcommand.
pub const SUBCOMMAND: &str = "__supervise";

/// How a background supervisor reaches the target: the host program that runs the command
/// there with stdio attached, and the one that ends its process tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RemoteLaunch {
    pub argv: Vec<String>,
    pub kill_argv: Vec<String>,
    /// The client needs a terminal on this side (apptainer runs on this kernel); ssh and docker
    /// ask their far side for one instead.
    pub local_pty: bool,
}
