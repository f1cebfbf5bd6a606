//! The zygote's idle work, done after its first fork instead of before (a cold `paddock run`
//! waits for none of it), must still happen: its heap collapsed into huge pages, so that every
//! later fork copies one page-table entry per 2 MiB. It once silently collapsed nothing: the
//! isolated zygote has no /proc to read its memory map from.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use paddock_tests::paddock_bin;

/// The `paddock __sandbox-zygote` child of `parent` (spawned by one of its threads).
fn zygote_of(parent: u32) -> Option<u32> {
    let tasks = std::fs::read_dir(format!("/proc/{parent}/task")).ok()?;
    tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("children")).ok())
        .flat_map(|children| {
            children
                .split_whitespace()
                .filter_map(|pid| pid.parse::<u32>().ok())
                .collect::<Vec<_>>()
        })
        .find(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmd| String::from_utf8_lossy(&cmd).contains("__sandbox-zygote"))
        })
}

/// kB of the zygote's writable memory held in transparent huge pages (its moved code is
/// read-and-execute, and does not count).
fn writable_huge_kb(zygote: u32) -> Option<u64> {
    let smaps = std::fs::read_to_string(format!("/proc/{zygote}/smaps")).ok()?;
    let mut writable = false;
    let mut kb = 0;
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let first = fields.next().unwrap_or("");
        if first.contains('-') && !first.ends_with(':') {
            writable = fields.next().is_some_and(|perms| perms.starts_with("rw"));
        } else if writable && first == "AnonHugePages:" {
            kb += fields
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    Some(kb)
}

#[test]
fn the_idle_zygote_collapses_its_heap_into_huge_pages() {
    let thp =
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    if thp.is_empty() || thp.contains("[never]") {
        eprintln!("SKIPPED: transparent huge pages are off on this machine ({thp:?})");
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let mut run = Command::new(paddock_bin())
        .args(["run", "-"])
        .env("PADDOCK_HOME", home.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = run.stdin.take().unwrap();
        stdin
            .write_all(b"await tools.wait(milliseconds=8000)\n")
            .unwrap();
    }
    let until = Instant::now() + Duration::from_secs(7);
    let mut seen = None;
    while Instant::now() < until {
        if let Some(kb) = zygote_of(run.id()).and_then(writable_huge_kb) {
            seen = Some(kb);
            if kb > 0 {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = run.kill();
    let _ = run.wait();
    let kb = seen.expect("no zygote found in /proc while the script ran");
    assert!(
        kb >= 2048,
        "the zygote's writable memory has {kb} kB in huge pages after its idle work: not collapsed"
    );
}
