//! Every limit and error code of DESIGN.md section 2, through the real binary.

use paddock_tests::{children_of, paddock, private_kb, run_script, temp_file, write_file};
use serde_json::json;

#[test]
fn gather_of_ten_300ms_waits_runs_concurrently() {
    let run = run_script(
        "import asyncio, time\nt = time.perf_counter()\n\
         r = await asyncio.gather(*[tools.wait(milliseconds=300) for _ in range(10)])\n\
         {'n': len(r), 'elapsed': time.perf_counter() - t}",
        &[],
    );
    let v = run.json();
    assert_eq!(v["ok"], json!(true), "{v}");
    assert_eq!(v["result"]["n"], json!(10));
    let elapsed = v["result"]["elapsed"].as_f64().unwrap();
    assert!(
        elapsed < 1.0,
        "10 x 300 ms took {elapsed} s: the calls did not overlap"
    );
    assert!(elapsed >= 0.29, "{elapsed}");
    assert_eq!(run.code, 0);
}

#[test]
fn memory_bomb_is_a_memory_limit_with_output_kept() {
    let run = run_script(
        "print('before the bomb')\nx = []\nwhile True:\n    x.append([1, 2, 3] * 4)\n",
        &["--max-memory-mb", "32", "--timeout", "30"],
    );
    let v = run.json();
    assert_eq!(v["ok"], json!(false), "{v}");
    assert_eq!(v["error_code"], json!("codemode:memory_limit"), "{v}");
    assert_eq!(v["output"], json!("before the bomb\n"));
    assert_eq!(run.code, 1);
}

#[test]
fn one_huge_allocation_is_a_memory_limit() {
    let v = run_script("b = bytearray(10**10)", &[]).json();
    assert_eq!(v["error_code"], json!("codemode:memory_limit"), "{v}");
}

#[test]
fn memory_error_can_be_caught_and_the_script_goes_on() {
    let v = run_script(
        "try:\n    x = []\n    while True:\n        x.append('y' * 10000)\nexcept MemoryError:\n    x = None\n'recovered'",
        &["--max-memory-mb", "16"],
    )
    .json();
    assert_eq!(v["ok"], json!(true), "{v}");
    assert_eq!(v["result"], json!("recovered"));
}

#[test]
fn busy_loop_times_out_and_keeps_what_it_printed() {
    let run = run_script(
        "print('started')\nwhile True:\n    pass\n",
        &["--timeout", "1.5"],
    );
    let v = run.json();
    assert_eq!(v["error_code"], json!("codemode:timeout"), "{v}");
    assert_eq!(v["output"], json!("started\n"));
    assert!(run.elapsed.as_secs_f64() < 10.0, "{:?}", run.elapsed);
}

#[test]
fn uninterruptible_native_work_is_still_stopped_at_the_deadline() {
    // One big-int power never returns to the interpreter loop; only the engine's kill stops it.
    let run = run_script("x = 10**10**8", &["--timeout", "1"]);
    assert_eq!(run.json()["error_code"], json!("codemode:timeout"));
    assert!(run.elapsed.as_secs_f64() < 10.0);
}

#[test]
fn timeout_cancels_nested_calls_in_flight() {
    let v = run_script(
        "print('waiting')\nawait tools.wait(milliseconds=30000)\n",
        &["--timeout", "1"],
    )
    .json();
    assert_eq!(v["error_code"], json!("codemode:timeout"), "{v}");
    assert_eq!(v["stats"]["tool_calls"], json!(1));
}

#[test]
fn tool_call_limit_raises_a_catchable_value_error() {
    let v = run_script(
        "n = 0\nfor i in range(10):\n    try:\n        await tools.wait()\n        n += 1\n    \
         except ValueError as e:\n        return {'n': n, 'error': str(e)}\n",
        &["--max-tool-calls", "3"],
    )
    .json();
    assert_eq!(v["ok"], json!(true), "{v}");
    assert_eq!(v["result"]["n"], json!(3));
    assert!(
        v["result"]["error"]
            .as_str()
            .unwrap()
            .starts_with("codemode:tool_call_limit"),
        "{v}"
    );
    assert_eq!(
        v["tool_errors"],
        json!([{"tool": "wait", "error_code": "codemode:tool_call_limit"}])
    );
}

#[test]
fn uncaught_tool_call_limit_is_a_script_error() {
    let v = run_script(
        "for i in range(5):\n    await tools.wait()\n",
        &["--max-tool-calls", "2"],
    )
    .json();
    assert_eq!(v["error_code"], json!("codemode:script_error"), "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("codemode:tool_call_limit"),
        "{v}"
    );
}

#[test]
fn syntax_errors_name_the_line() {
    let v = run_script("x = 1\ny = = 2\n", &[]).json();
    assert_eq!(v["error_code"], json!("codemode:syntax_error"), "{v}");
    assert!(v["error"].as_str().unwrap().contains("line 2"), "{v}");
}

#[test]
fn uncaught_exceptions_are_script_errors_with_line_and_partial_output() {
    let v = run_script(
        "print('one')\ndef f():\n    raise KeyError('boom')\nf()\n",
        &[],
    )
    .json();
    assert_eq!(v["error_code"], json!("codemode:script_error"), "{v}");
    assert_eq!(v["error"], json!("KeyError: 'boom' (line 3)"));
    assert_eq!(v["output"], json!("one\n"));
    let trace = v["traceback"].as_str().unwrap();
    assert!(trace.contains("line 4, in <module>\n    f()"), "{trace}");
}

#[test]
fn tool_errors_reach_the_script_as_value_error_and_are_listed() {
    let v = run_script(
        "try:\n    await tools.current_datetime(format=5)\nexcept ValueError as e:\n    msg = str(e)\nmsg",
        &[],
    )
    .json();
    assert_eq!(v["ok"], json!(true), "{v}");
    assert!(v["result"].as_str().unwrap().contains("format"), "{v}");
    assert_eq!(
        v["tool_errors"],
        json!([{"tool": "current_datetime", "error_code": "tool:invalid_arguments"}])
    );
}

#[test]
fn unknown_tool_is_an_attribute_error_with_a_hint() {
    let v = run_script("await tools.current_datetim()", &[]).json();
    assert_eq!(v["error_code"], json!("codemode:script_error"), "{v}");
    assert!(
        v["error"].as_str().unwrap().starts_with("AttributeError"),
        "{v}"
    );
    assert!(
        v["hint"]
            .as_str()
            .unwrap()
            .contains("did you mean tools.current_datetime"),
        "{v}"
    );
}

#[test]
fn positional_arguments_bind_in_schema_order_and_too_many_are_refused() {
    // `wait` has one parameter, `milliseconds`: a positional argument takes it.
    let v = run_script("await tools.wait(1)", &[]).json();
    assert_eq!(v["ok"], true, "{v}");
    let v = run_script("await tools.wait(1, 2)", &[]).json();
    let error = v["error"].as_str().unwrap();
    assert!(
        error.contains("takes at most 1 positional argument")
            && error.contains("in order: milliseconds"),
        "{v}"
    );
}

#[test]
fn denied_approval_is_a_permission_error_and_its_own_code() {
    let (_dir, policy) = temp_file("p.toml", "[tools]\nrequire_approval = [\"wait\"]\n");
    let v = run_script("await tools.wait(milliseconds=1)", &["--policy", &policy]).json();
    assert_eq!(v["error_code"], json!("tool_approval:denied"), "{v}");
    assert!(
        v["error"].as_str().unwrap().starts_with("PermissionError"),
        "{v}"
    );
    // Caught, it is an ordinary PermissionError.
    let v = run_script(
        "try:\n    await tools.wait()\nexcept PermissionError:\n    r = 'denied'\nr",
        &["--policy", &policy],
    )
    .json();
    assert_eq!(v["result"], json!("denied"), "{v}");
    assert_eq!(
        v["tool_errors"],
        json!([{"tool": "wait", "error_code": "tool_approval:denied"}])
    );
}

#[test]
fn excluded_and_denied_tools_do_not_exist_for_scripts() {
    let (_dir, policy) = temp_file(
        "p.toml",
        "[tools]\ndeny = [\"current_*\"]\n[codemode]\nexclude = [\"wait\"]\n",
    );
    let v = run_script("sorted(dir(tools))", &["--policy", &policy]).json();
    let names: Vec<&str> = v["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert!(
        !names.contains(&"wait") && !names.contains(&"current_datetime"),
        "{v}"
    );
    assert!(names.contains(&"terminal"), "{v}");
}

#[test]
fn output_is_capped_keeping_start_and_end() {
    let v = run_script(
        "for i in range(2000):\n    print(f'line {i}')\n'done'",
        &["--max-output-chars", "200"],
    )
    .json();
    let out = v["output"].as_str().unwrap();
    assert!(out.starts_with("line 0\nline 1\n"), "{out}");
    assert!(out.ends_with("line 1999\n"), "{out}");
    assert!(out.contains("characters omitted"), "{out}");
    assert!(out.chars().count() < 300, "{}", out.len());
}

#[test]
fn final_value_is_capped_keeping_start_and_end() {
    let v = run_script("list(range(5000))", &["--max-output-chars", "200"]).json();
    let result = v["result"].as_str().unwrap();
    assert!(result.starts_with("[0,"), "{result}");
    assert!(result.ends_with("4999]"), "{result}");
    assert!(result.contains("characters omitted"), "{result}");
}

#[test]
fn a_killed_sandbox_is_reported_and_the_engine_goes_on() {
    // The script prints its own pid... it cannot (no os.getpid to the host); instead the test
    // kills every sandbox child of the run while a script waits, through the process tree.
    let (dir, script) = temp_file(
        "s.py",
        // 24 MB of touched memory marks this script's child among its siblings.
        "big = 'x' * 24_000_000\nprint('about to wait')\nawait tools.wait(milliseconds=20000)\n",
    );
    let follow = write_file(
        &dir,
        "t.py",
        "await tools.wait(milliseconds=2500)\n'second script fine'",
    );
    let bin = paddock_tests::paddock_bin();
    let child = std::process::Command::new(bin)
        .args(["run", "--timeout", "30", &script, &follow])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let zygotes = children_of(child.id());
    assert!(!zygotes.is_empty(), "no zygote under the engine");
    // Kill only the child running the long wait: the one holding its 24 MB (which child a
    // script gets, and which pid it has, is not fixed).
    let sandboxes: Vec<u32> = zygotes.iter().flat_map(|z| children_of(*z)).collect();
    assert!(!sandboxes.is_empty(), "no sandbox children");
    let waiting = sandboxes
        .iter()
        .copied()
        .max_by_key(|pid| private_kb(*pid))
        .unwrap_or_else(|| panic!("no sandbox children"));
    assert!(
        private_kb(waiting) > 20_000,
        "no child holds the script's 24 MB: {:?}",
        sandboxes
            .iter()
            .map(|p| (p, private_kb(*p)))
            .collect::<Vec<_>>()
    );
    std::process::Command::new("kill")
        .args(["-9", &waiting.to_string()])
        .status()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert_eq!(
        lines[0]["error_code"],
        json!("codemode:sandbox_failed"),
        "{stdout}"
    );
    assert_eq!(lines[0]["output"], json!("about to wait\n"));
    assert!(
        lines[0]["error"].as_str().unwrap().contains("signal 9"),
        "{stdout}"
    );
    assert_eq!(lines[1]["result"], json!("second script fine"), "{stdout}");
}

#[test]
fn policy_limits_apply_without_flags() {
    let (dir, policy) = temp_file(
        "p.toml",
        "[codemode]\nmax_tool_calls = 1\ntimeout_seconds = 5\n",
    );
    let v = run_script(
        "await tools.wait()\nawait tools.wait()",
        &["--policy", &policy],
    )
    .json();
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("codemode:tool_call_limit"),
        "{v}"
    );
    let run = paddock(&[
        "run",
        "--policy",
        &policy,
        "--max-tool-calls",
        "5",
        &write_file(&dir, "s.py", "await tools.wait()\nawait tools.wait()\n'ok'"),
    ]);
    assert_eq!(run.json()["result"], json!("ok"));
}

#[test]
fn a_ten_megabyte_argument_is_refused_and_the_script_goes_on() {
    let v = run_script(
        "try:\n    await tools.wait(milliseconds=1, note='x' * 10_000_000)\nexcept ValueError as e:\n    \
         msg = str(e)\nr = await tools.wait(milliseconds=1)\n[msg, r['requested_ms']]",
        &["--timeout", "30"],
    )
    .json();
    assert_eq!(v["ok"], json!(true), "{v}");
    assert!(
        v["result"][0]
            .as_str()
            .unwrap()
            .contains("the limit is 4194304 bytes"),
        "{v}"
    );
    assert_eq!(v["result"][1], json!(1.0));
}
