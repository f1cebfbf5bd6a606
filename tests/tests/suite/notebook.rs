//! Notebook sessions (`[codemode] keep_state`, `paddock run --keep-state`): the scripts of one
//! session see the names earlier ones defined; a timeout, a memory blow-up or a dead child ends
//! the state and the next script says so; every script keeps its own limits.

use paddock_tests::{children_of, paddock, private_kb, temp_file, write_file};
use serde_json::{Value, json};

/// Runs `cells` in one `paddock run --keep-state` with `flags`; one result per cell.
fn cells(cells: &[&str], flags: &[&str]) -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    let files: Vec<String> = cells
        .iter()
        .enumerate()
        .map(|(i, code)| write_file(&dir, &format!("cell{i}.py"), code))
        .collect();
    let mut args = vec!["run", "--keep-state"];
    args.extend_from_slice(flags);
    args.extend(files.iter().map(String::as_str));
    let run = paddock(&args);
    let results = run.json_lines();
    assert_eq!(results.len(), cells.len(), "{}", run.stderr);
    results
}

#[test]
fn names_of_earlier_cells_persist() {
    let r = cells(
        &[
            "import statistics as st\nfrom collections import Counter\nx = 41\n\
             def bump(v):\n    return v + 1\n\
             class Box:\n    def __init__(self, v):\n        self.v = v\n\
             seen = []",
            "seen.append(bump(x))\nBox(st.mean([1, 3])).v",
            "seen.append(dict(Counter('aab')))\n{'seen': seen, 'x': x}",
        ],
        &[],
    );
    assert_eq!(r[0]["ok"], json!(true), "{}", r[0]);
    assert_eq!(r[1]["result"], json!(2), "{}", r[1]);
    assert_eq!(
        r[2]["result"],
        json!({"seen": [42, {"a": 2, "b": 1}], "x": 41}),
        "{}",
        r[2]
    );
    for (i, result) in r.iter().enumerate() {
        let notebook = &result["notebook"];
        assert_eq!(notebook["session"], json!("default"), "{result}");
        assert_eq!(notebook["cell"], json!(i + 1), "{result}");
        assert_eq!(notebook["fresh"], json!(i == 0), "{result}");
        assert_eq!(notebook["state_kept"], json!(true), "{result}");
    }
}

#[test]
fn an_exception_keeps_the_state() {
    let r = cells(&["x = 1", "x = 2\nraise ValueError('no')", "x"], &[]);
    assert_eq!(
        r[1]["error_code"],
        json!("codemode:script_error"),
        "{}",
        r[1]
    );
    assert_eq!(r[1]["notebook"]["state_kept"], json!(true), "{}", r[1]);
    // What ran before the exception stays, as in a notebook.
    assert_eq!(r[2]["result"], json!(2), "{}", r[2]);
}

#[test]
fn a_syntax_error_runs_nothing_and_keeps_the_state() {
    let r = cells(&["x = 1", "x = = 2", "x"], &[]);
    assert_eq!(
        r[1]["error_code"],
        json!("codemode:syntax_error"),
        "{}",
        r[1]
    );
    assert_eq!(r[2]["result"], json!(1), "{}", r[2]);
    assert_eq!(r[2]["notebook"]["fresh"], json!(false), "{}", r[2]);
}

#[test]
fn a_timeout_ends_the_state_and_the_next_cell_says_so() {
    let r = cells(
        &[
            "kept = 'v'",
            "print('looping')\nwhile True:\n    pass",
            "kept",
        ],
        &["--timeout", "1"],
    );
    assert_eq!(r[1]["error_code"], json!("codemode:timeout"), "{}", r[1]);
    assert_eq!(r[1]["output"], json!("looping\n"), "{}", r[1]);
    assert_eq!(r[1]["notebook"]["state_kept"], json!(false), "{}", r[1]);
    assert!(
        r[1]["notebook"]["state_ended"]
            .as_str()
            .unwrap()
            .contains("timed out"),
        "{}",
        r[1]
    );
    assert_eq!(
        r[2]["error_code"],
        json!("codemode:script_error"),
        "{}",
        r[2]
    );
    assert!(
        r[2]["error"].as_str().unwrap().contains("NameError"),
        "{}",
        r[2]
    );
    assert_eq!(r[2]["notebook"]["fresh"], json!(true), "{}", r[2]);
    assert_eq!(r[2]["notebook"]["cell"], json!(1), "{}", r[2]);
    assert!(
        r[2]["notebook"]["reset_reason"]
            .as_str()
            .unwrap()
            .contains("previous script timed out"),
        "{}",
        r[2]
    );
}

#[test]
fn a_memory_blow_up_ends_the_state() {
    let r = cells(
        &[
            "kept = 1",
            "x = []\nwhile True:\n    x.append([1, 2, 3] * 4)",
            "kept",
        ],
        &["--max-memory-mb", "32", "--timeout", "30"],
    );
    assert_eq!(
        r[1]["error_code"],
        json!("codemode:memory_limit"),
        "{}",
        r[1]
    );
    assert_eq!(r[1]["notebook"]["state_kept"], json!(false), "{}", r[1]);
    assert!(
        r[2]["error"].as_str().unwrap().contains("NameError"),
        "{}",
        r[2]
    );
    assert!(
        r[2]["notebook"]["reset_reason"]
            .as_str()
            .unwrap()
            .contains("memory"),
        "{}",
        r[2]
    );
}

#[test]
fn the_memory_budget_is_the_sessions() {
    // Each cell alone fits in 48 MB; what the first keeps counts against the second.
    let r = cells(
        &[
            "a = bytearray(30_000_000)\nlen(a)",
            "b = bytearray(30_000_000)\nlen(b)",
        ],
        &["--max-memory-mb", "48", "--timeout", "30"],
    );
    assert_eq!(r[0]["result"], json!(30_000_000), "{}", r[0]);
    assert_eq!(
        r[1]["error_code"],
        json!("codemode:memory_limit"),
        "{}",
        r[1]
    );
}

#[test]
fn each_cell_keeps_its_own_tool_call_and_output_limits() {
    let r = cells(
        &[
            "for _ in range(2):\n    await tools.wait(milliseconds=1)\nprint('a' * 80)",
            "for _ in range(2):\n    await tools.wait(milliseconds=1)\nprint('b' * 80)",
            "for _ in range(3):\n    await tools.wait(milliseconds=1)",
        ],
        &["--max-tool-calls", "2", "--max-output-chars", "100"],
    );
    for result in &r[..2] {
        assert_eq!(result["ok"], json!(true), "{result}");
        assert_eq!(result["stats"]["tool_calls"], json!(2), "{result}");
        assert_eq!(
            result["output"].as_str().unwrap().len(),
            81,
            "the output of one cell was capped by another's: {result}"
        );
    }
    assert!(
        r[2]["error"]
            .as_str()
            .unwrap()
            .contains("codemode:tool_call_limit"),
        "{}",
        r[2]
    );
}

#[test]
fn each_cell_keeps_its_own_clock() {
    // Three cells of 0.6 s each under a 1 s limit: the clock is per script.
    let wait = "await tools.wait(milliseconds=600)\n'done'";
    let r = cells(&[wait, wait, wait], &["--timeout", "1"]);
    for result in &r {
        assert_eq!(result["result"], json!("done"), "{result}");
    }
    assert_eq!(r[2]["notebook"]["cell"], json!(3));
}

#[test]
fn the_policy_turns_it_on_too() {
    let (dir, policy) = temp_file("p.toml", "[codemode]\nkeep_state = true\n");
    let first = write_file(&dir, "a.py", "n = 7");
    let second = write_file(&dir, "b.py", "n * 6");
    let run = paddock(&["run", "--policy", &policy, &first, &second]);
    let r = run.json_lines();
    assert_eq!(r[1]["result"], json!(42), "{}", run.stdout);
}

#[test]
fn without_it_scripts_share_nothing() {
    let (dir, first) = temp_file("a.py", "n = 7");
    let second = write_file(&dir, "b.py", "n");
    let r = paddock(&["run", &first, &second]).json_lines();
    assert!(
        r[1]["error"].as_str().unwrap().contains("NameError"),
        "{}",
        r[1]
    );
    assert!(r[1].get("notebook").is_none(), "{}", r[1]);
}

#[test]
fn a_killed_child_ends_the_state_and_the_next_cell_starts_fresh() {
    // 24 MB of touched memory marks the notebook's child among the idle ones.
    let (dir, first) = temp_file(
        "a.py",
        "kept = 'x' * 24_000_000\nprint('waiting')\nawait tools.wait(milliseconds=20000)",
    );
    let second = write_file(&dir, "b.py", "'kept' in globals()");
    let child = std::process::Command::new(paddock_tests::paddock_bin())
        .args(["run", "--keep-state", "--timeout", "30", &first, &second])
        .env("PADDOCK_HOME", paddock_tests::test_home())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let notebook_child = wait_for_child_holding(child.id(), 20_000);
    std::process::Command::new("kill")
        .args(["-9", &notebook_child.to_string()])
        .status()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let r: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        r[0]["error_code"],
        json!("codemode:sandbox_failed"),
        "{stdout}"
    );
    assert_eq!(r[0]["notebook"]["state_kept"], json!(false), "{stdout}");
    assert_eq!(r[1]["result"], json!(false), "{stdout}");
    assert_eq!(r[1]["notebook"]["fresh"], json!(true), "{stdout}");
    assert!(
        r[1]["notebook"]["reset_reason"]
            .as_str()
            .unwrap()
            .contains("signal 9"),
        "{stdout}"
    );
}

/// The sandbox child under `engine` whose resident memory exceeds `kb`, once there is one.
fn wait_for_child_holding(engine: u32, kb: u64) -> u32 {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let holding = children_of(engine)
            .into_iter()
            .flat_map(children_of)
            .find(|pid| private_kb(*pid) > kb);
        if let Some(pid) = holding {
            return pid;
        }
        assert!(
            std::time::Instant::now() < until,
            "no sandbox child took the script's memory"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
