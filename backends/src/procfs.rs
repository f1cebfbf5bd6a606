//! Process identity and trees from /proc. A PID alone is not an identity (PIDs are recycled);
//! PID plus the kernel start time is.

use std::collections::{BTreeSet, HashMap};

/// Fields 3.. of /proc/PID/stat (state, ppid, pgrp, ...): index 0 is field 3.
fn stat_fields(pid: i32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces and parentheses: fields after the last ')'.
    let after = stat.rsplit_once(')')?.1;
    Some(after.split_whitespace().map(str::to_owned).collect())
}

/// Start time of `pid` in clock ticks since boot (field 22 of /proc/PID/stat), if it exists.
pub fn start_time(pid: i32) -> Option<u64> {
    stat_fields(pid)?.get(19)?.parse().ok()
}

/// Parent pid and state of `pid`.
fn ppid_and_state(pid: i32) -> Option<(i32, char)> {
    let fields = stat_fields(pid)?;
    let state = fields.first()?.chars().next()?;
    let ppid = fields.get(1)?.parse().ok()?;
    Some((ppid, state))
}

/// Every pid in /proc.
fn all_pids() -> impl Iterator<Item = i32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()))
}

/// True when `pid` runs and is the same process as recorded (same start time). Zombies count as
/// gone.
pub fn is_same_process(pid: i32, recorded_start: u64) -> bool {
    start_time(pid) == Some(recorded_start)
        && ppid_and_state(pid).is_some_and(|(_, state)| state != 'Z' && state != 'X')
}

/// Every descendant of `root` (children, grandchildren, ...) alive now.
pub fn descendants(root: i32) -> BTreeSet<i32> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for pid in all_pids() {
        if let Some((ppid, _)) = ppid_and_state(pid) {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let mut found = BTreeSet::new();
    let mut stack = vec![root];
    while let Some(p) = stack.pop() {
        for &c in children.get(&p).map(Vec::as_slice).unwrap_or(&[]) {
            if found.insert(c) {
                stack.push(c);
            }
        }
    }
    found
}

/// Pids whose process group is `pgid`.
pub fn group_members(pgid: i32) -> BTreeSet<i32> {
    all_pids()
        .filter(|&pid| {
            stat_fields(pid).is_some_and(|f| {
                f.get(2).and_then(|g| g.parse::<i32>().ok()) == Some(pgid)
                    && f.first().map(String::as_str) != Some("Z")
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_identity_is_stable_and_a_wrong_start_time_is_not_us() {
        let me = std::process::id() as i32;
        let t = start_time(me).unwrap();
        assert!(is_same_process(me, t));
        assert!(!is_same_process(me, t + 1));
        assert!(start_time(i32::MAX).is_none());
    }

    #[test]
    fn descendants_include_grandchildren() {
        let mut child = std::process::Command::new("bash")
            .args(["-c", "sleep 5 & wait"])
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        let d = descendants(std::process::id() as i32);
        assert!(d.contains(&(child.id() as i32)));
        assert!(d.len() >= 2, "{d:?}");
        child.kill().unwrap();
        let _ = child.wait();
    }
}
