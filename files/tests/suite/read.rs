//! read_file through `execute`: errors and a windowed read of a huge sparse file.

use super::run;
use pretty_assertions::assert_eq;
use serde_json::json;
use std::io::Write;

#[test]
fn answers_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "one\r\ntwo\nthree").unwrap();
    let read = |req| run(dir.path(), req).unwrap();
    assert_eq!(
        read(json!({"op": "read", "path": "a.txt", "offset": 2})),
        json!({"path": "a.txt", "content": "two\nthree", "start_line": 2, "end_line": 3, "total_lines": 3, "truncated": false})
    );
    assert_eq!(
        read(json!({"op": "read", "path": "a.txt", "limit": 1}))["content"],
        "one\r\n"
    );
    let code = |req| run(dir.path(), req).unwrap_err().kind.code();
    assert_eq!(
        code(json!({"op": "read", "path": "a.txt", "offset": 0})),
        "file:invalid_argument"
    );
    assert_eq!(
        code(json!({"op": "read", "path": "nope"})),
        "file:not_found"
    );
    assert_eq!(
        code(json!({"op": "read", "path": "."})),
        "file:is_directory"
    );
    assert_eq!(
        code(json!({"op": "read", "path": ""})),
        "file:invalid_argument"
    );
    std::fs::write(dir.path().join("b.bin"), b"ab\0cd").unwrap();
    assert_eq!(code(json!({"op": "read", "path": "b.bin"})), "file:binary");
    std::fs::write(dir.path().join("l.txt"), b"caf\xe9\n").unwrap();
    assert_eq!(
        read(json!({"op": "read", "path": "l.txt"}))["content"],
        "caf\u{fffd}\n"
    );
    std::fs::write(dir.path().join("e.txt"), b"").unwrap();
    assert_eq!(
        read(json!({"op": "read", "path": "e.txt"})),
        json!({"path": "e.txt", "content": "", "start_line": 1, "end_line": 0, "total_lines": 0, "truncated": false})
    );
    assert_eq!(
        read(json!({"op": "read", "path": "a.txt", "offset": 10})),
        json!({"path": "a.txt", "content": "", "start_line": 10, "end_line": 9, "total_lines": 3, "truncated": false})
    );
}

/// Peak resident memory of this process, from /proc (kB).
fn peak_rss_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn huge_sparse_file_windowed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.log");
    let mut f = std::fs::File::create(&path).unwrap();
    for i in 1..=3000 {
        writeln!(f, "line {i}").unwrap();
    }
    // 2 GB: the rest is a hole of NULs without a newline (one more, very long, line).
    f.set_len(2 * 1024 * 1024 * 1024).unwrap();
    drop(f);
    let got = run(
        dir.path(),
        json!({"op": "read", "path": "big.log", "offset": 1000, "limit": 3}),
    )
    .unwrap();
    assert_eq!(got["content"], "line 1000\nline 1001\nline 1002\n");
    assert_eq!(got["end_line"], 1002);
    assert_eq!(got["total_lines"], 3001);
    assert_eq!(got["truncated"], true);
    assert!(peak_rss_kb() < 1024 * 1024, "peak RSS {} kB", peak_rss_kb());
    // The last line (the hole) is cut at 64 KiB.
    let got = run(
        dir.path(),
        json!({"op": "read", "path": "big.log", "offset": 3001}),
    )
    .unwrap();
    assert_eq!(got["content"].as_str().unwrap().len(), 64 * 1024);
    assert_eq!(got["truncated"], true);
}
