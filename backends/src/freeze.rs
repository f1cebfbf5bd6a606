//! Pausing a local session (`paddock sessions pause`): every process of it stopped with
//! SIGSTOP, scan after scan until a scan finds no new one (a process forking as it is found
//! leaves children the next scan catches), and continued with SIGCONT on resume.
//!
//! A session's processes are those in its cgroups (the ceilings' groups, when it has them) and
//! those whose environment carries its mark ([`SESSION_MARK`]: the backend, a digest of the
//! state directory and the session id, which the sandboxed agent, its commands and every
//! background command start with), so that a session of the same id in another home, or the
//! docker clients of another backend, are never touched. A process that cleared its own
//! environment and lives outside the cgroups is not found; pausing saves CPU, it is not a
//! confinement.

use std::collections::HashSet;
use std::path::PathBuf;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// The variable that marks a local session's processes: `BACKEND.DIGEST/SESSION`.
pub const SESSION_MARK: &str = "PADDOCK_LOCAL_SESSION";

/// The processes marked `mark` or in `cgroups`, this process and its parent excepted.
fn session_processes(mark: &str, cgroups: &[PathBuf]) -> HashSet<i32> {
    let mut found = paddock_agent::run::processes_with_env(&format!("{SESSION_MARK}={mark}"));
    found.extend(
        cgroups
            .iter()
            .flat_map(|group| crate::cgroup::processes(group)),
    );
    found.remove(&(std::process::id() as i32));
    found.remove(&nix::unistd::getppid().as_raw());
    found
}

/// Stops every process of the session marked `mark`, scan after scan until none is new (the
/// agent's own way with a run's leftovers); answers how many were stopped.
pub fn stop_session(mark: &str, cgroups: &[PathBuf]) -> usize {
    paddock_agent::run::stop_until_settled(|| session_processes(mark, cgroups)).len()
}

/// Ends every process of the session marked `mark` as the session closes: stopped first, scan
/// after scan (so that none forks a successor meanwhile), then killed. Where the session has
/// no sandbox of its own to take them along (the unconfined local backend), this is what ends
/// a daemon a command detached (`setsid`) and a process a command kept on purpose.
pub fn end_session(mark: &str, cgroups: &[PathBuf]) {
    for pid in paddock_agent::run::stop_until_settled(|| session_processes(mark, cgroups)) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
}

/// Continues every process of the session marked `mark`.
pub fn continue_session(mark: &str, cgroups: &[PathBuf]) {
    for pid in session_processes(mark, cgroups) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGCONT);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn state_of(pid: u32) -> char {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        stat.rsplit(')')
            .next()
            .unwrap()
            .trim()
            .chars()
            .next()
            .unwrap()
    }

    #[test]
    fn a_session_s_processes_stop_and_continue_and_others_are_left_alone() {
        let session = format!("freeze-test-{}", std::process::id());
        let mut ours = std::process::Command::new("sleep")
            .arg("30")
            .env(SESSION_MARK, &session)
            .spawn()
            .unwrap();
        let mut other = std::process::Command::new("sleep")
            .arg("30")
            .env(SESSION_MARK, format!("{session}-other"))
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(stop_session(&session, &[]), 1);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(state_of(ours.id()), 'T');
        assert_eq!(state_of(other.id()), 'S');
        continue_session(&session, &[]);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(state_of(ours.id()), 'S');
        let _ = ours.kill();
        let _ = other.kill();
        let _ = ours.wait();
        let _ = other.wait();
    }
}
