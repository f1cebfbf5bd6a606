//! Ending a command that overran: its whole process group, TERM, a grace, then KILL; and the
//! exit code a timeout answers.

use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// Grace between SIGTERM and SIGKILL when a command times out.
pub const KILL_GRACE: Duration = Duration::from_millis(500);
/// Exit code reported for a timeout.
pub const TIMEOUT_EXIT_CODE: i32 = 124;

/// SIGTERM to the group, a grace, then SIGKILL; also to descendants that left the group.
pub async fn terminate_group(pgid: Option<i32>) {
    let Some(pgid) = pgid else { return };
    let escaped: Vec<i32> = crate::procfs::descendants(pgid).into_iter().collect();
    let _ = killpg(Pid::from_raw(pgid), Signal::SIGTERM);
    for pid in &escaped {
        let _ = nix::sys::signal::kill(Pid::from_raw(*pid), Signal::SIGTERM);
    }
    let until = Instant::now() + KILL_GRACE;
    while Instant::now() < until && !crate::procfs::group_members(pgid).is_empty() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    for pid in escaped {
        let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
}
