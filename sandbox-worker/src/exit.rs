//! How a sandbox child ends when it cannot say so over its socket: its exit statuses.
//!
//! Shared vocabulary of the modules that end a child (`zygote` right after the fork, `child`,
//! and `host` when the engine goes away mid-script); a leaf, it imports nothing of the crate.
//! The zygote reports the status to the engine in [`crate::wire::Message::Exited`].

/// Exit status of a child whose engine went away.
pub const EXIT_CHANNEL_LOST: i32 = 70;
/// Exit status of a child that could not confine itself.
pub const EXIT_CONFINEMENT_FAILED: i32 = 71;
/// Exit status of a child whose runtime panicked.
pub const EXIT_PANIC: i32 = 72;
