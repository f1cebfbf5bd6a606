//! How an environment bounds its own life (a docker container, an apptainer instance, a Slurm
//! job), whether or not any `paddock` process ever runs again.
//!
//! The engine's idle sweep closes a session idle past `[sessions] idle_timeout_seconds`, but it
//! runs only in a `paddock` process of the same state directory; an engine that crashed or a
//! one-off `paddock call` would leave the environment up for ever. So the engine also writes,
//! each time it marks the session active (a call starting, every few seconds while it runs, and
//! when it ends: the same moments as the session's record), the time until which the session
//! is kept — now plus the idle timeout — into [`EXPIRES_FILE`] of the environment's agent
//! directory, which the environment sees at [`crate::agent::AGENT_DIR_INSIDE`]. A watchdog
//! inside ([`watchdog_script`]: PID 1 of a container, a detached loop in an instance, a loop
//! beside the agent of a Slurm holder step) ends the environment once that time has passed.
//!
//! Why a file written by the engine rather than the agent's own idle clock: the engine's notion
//! of activity is what the sweep judges (a `process` call polling a background command keeps a
//! session alive without reaching the agent), and the watchdog keeps working when the agent was
//! killed or never started. No file, no end: an environment is never ended before the engine
//! first spoke for it (a warm container waiting in its pool).

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The file, in an environment's agent directory, holding when it may end by itself (unix
/// seconds, one line).
pub const EXPIRES_FILE: &str = "expires";

/// How often a watchdog reads [`EXPIRES_FILE`]: an environment ends at most this long after
/// its time (idle timeouts are minutes; a read and a `date` every few seconds cost nothing).
pub const CHECK_EVERY_SECS: u64 = 5;

/// Makes temporary file names unique among this process's concurrent writes.
static WRITES: AtomicU64 = AtomicU64::new(0);

/// Writes `until` into `dir`'s [`EXPIRES_FILE`], atomically (a temporary file, then a rename:
/// the watchdog reads the old time or the new one, never half of one). `dir` must exist.
pub fn write_expiry(dir: &Path, until: SystemTime) -> std::io::Result<()> {
    let secs = until.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    // Dot file: nothing else in the directory is named so.
    let tmp = dir.join(format!(
        ".{EXPIRES_FILE}.{}.{}",
        std::process::id(),
        WRITES.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&tmp, format!("{secs}\n"))?;
    std::fs::rename(&tmp, dir.join(EXPIRES_FILE)).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// A POSIX shell loop that runs `on_expiry` once the time in `file` has passed, looking every
/// [`CHECK_EVERY_SECS`]; a missing, unreadable or garbled file ends nothing. It needs `sleep`
/// and `date` (coreutils or busybox) and no other program.
///
/// `file` is placed between single quotes: it must not contain one (the callers pass fixed
/// paths).
pub fn watchdog_script(file: &str, on_expiry: &str) -> String {
    format!(
        "f='{file}'; while :; do sleep {CHECK_EVERY_SECS} & wait $!; e=; \
         {{ read -r e < \"$f\"; }} 2>/dev/null; \
         case $e in ''|*[!0-9]*) continue ;; esac; \
         [ \"$(date +%s)\" -gt \"$e\" ] && {on_expiry}; done"
    )
}

#[cfg(test)]
mod tests {
    use std::process::Command;
    use std::time::{Duration, Instant};

    use pretty_assertions::assert_eq;

    use super::*;

    #[test]
    fn the_expiry_is_one_line_of_unix_seconds_and_replaces_the_last() {
        let dir = tempfile::tempdir().unwrap();
        let at = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        write_expiry(dir.path(), at).unwrap();
        write_expiry(dir.path(), at + Duration::from_secs(60)).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join(EXPIRES_FILE)).unwrap(),
            "1700000060\n"
        );
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, vec![EXPIRES_FILE.to_owned()]);
    }

    #[test]
    fn the_watchdog_ends_past_the_time_and_not_before_nor_without_one() {
        let dir = tempfile::tempdir().unwrap();
        // (case, what its file holds, whether the watchdog must end), all watched at once.
        let now = SystemTime::now();
        let cases = [
            ("missing", None, false),
            ("garbled", Some("soon\n".to_owned()), false),
            ("ahead", Some(format!("{}\n", secs(now) + 600)), false),
            ("passed", Some(format!("{}\n", secs(now) - 1)), true),
        ];
        let mut running = Vec::new();
        for (case, content, _) in &cases {
            let file = dir.path().join(case);
            if let Some(content) = content {
                std::fs::write(&file, content).unwrap();
            }
            let script = watchdog_script(file.to_str().unwrap(), "exit 7");
            running.push(Command::new("sh").arg("-c").arg(script).spawn().unwrap());
        }
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(CHECK_EVERY_SECS + 3) {
            std::thread::sleep(Duration::from_millis(200));
        }
        let ended: Vec<(&str, bool)> = running
            .iter_mut()
            .zip(&cases)
            .map(|(child, (case, _, _))| {
                let status = child.try_wait().unwrap();
                let _ = child.kill();
                let _ = child.wait();
                (*case, status.is_some_and(|s| s.code() == Some(7)))
            })
            .collect();
        let wanted: Vec<(&str, bool)> = cases.iter().map(|(c, _, end)| (*c, *end)).collect();
        assert_eq!(ended, wanted);
    }

    fn secs(at: SystemTime) -> u64 {
        at.duration_since(UNIX_EPOCH).unwrap().as_secs()
    }
}
