//! How a background command is launched: the hidden subcommand of `paddock` that runs its
//! supervisor and, on a remote target, the host programs the supervisor runs.

use serde::{Deserialize, Serialize};

/// The hidden subcommand.
pub const SUBCOMMAND: &str = "__supervise";

/// Stands for the signal's name in [`RemoteLaunch::signal_argv`] (letters only, so that it
/// survives any quoting a client's argv puts around it).
pub const SIGNAL_PLACEHOLDER: &str = "PADDOCKSIGNALNAME";

/// How a background supervisor reaches the target: the host program that runs the command
/// there with stdio attached, and the one that ends its process tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RemoteLaunch {
    pub argv: Vec<String>,
    pub kill_argv: Vec<String>,
    /// The host program that sends a signal to the command's processes on the target, with
    /// [`SIGNAL_PLACEHOLDER`] where the signal's name goes (empty in records made before
    /// `process signal` existed).
    #[serde(default)]
    pub signal_argv: Vec<String>,
    /// The client needs a terminal on this side (apptainer runs on this kernel); ssh and docker
    /// ask their far side for one instead.
    pub local_pty: bool,
    /// A new size of that terminal reaches the command (`srun --pty` forwards it; a terminal
    /// allocated again inside an instance does not): `process resize` is offered.
    #[serde(default)]
    pub resizable: bool,
}
