//! What a script returns and how results come back.

use paddock_tests::{ClosingHome, paddock, paddock_env, run_script, temp_file, write_file};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use std::time::Duration;

#[test]
fn final_expression_and_output() {
    let run = run_script("print('hi')\nx = 20\nx + 22", &[]);
    let v = run.json();
    assert_eq!(v["ok"], json!(true));
    assert_eq!(v["output"], json!("hi\n"));
    assert_eq!(v["result"], json!(42));
    assert_eq!(run.code, 0);
}

#[test]
fn top_level_return_and_await() {
    let v = run_script(
        "r = await tools.wait(milliseconds=1)\nif r['waited_ms'] >= 0:\n    return {'waited': True}\n'unreachable'",
        &[],
    )
    .json();
    assert_eq!(v["result"], json!({"waited": true}));
}

#[test]
fn no_final_expression_is_null() {
    assert_eq!(run_script("x = 5", &[]).json()["result"], json!(null));
}

#[test]
fn values_map_to_json_naturally_else_repr() {
    let v = run_script(
        "class P:\n    def __repr__(self):\n        return 'P()'\n\
         {'t': (1, 2), 's': {3}, 'f': 1.5, 'n': None, 'b': True, 1: 'int key', 'p': P(), \
         'big': 2**70, 'nan': float('nan')}",
        &[],
    )
    .json();
    let big: Value = serde_json::from_str("1180591620717411303424").unwrap();
    assert_eq!(
        v["result"],
        json!({"t": [1, 2], "s": [3], "f": 1.5, "n": null, "b": true, "1": "int key", "p": "P()",
               "big": big, "nan": "nan"})
    );
}

/// Integers of any size are JSON numbers, every digit kept (JSON has no size limit; Python's
/// `json` reads them back as ints): results, big keys, negative ones, inside lists.
#[test]
fn integers_of_any_size_are_json_numbers() {
    let run = run_script(
        "[2**100, -(2**80), 2**64, -(2**63) - 1, {2**70: 'k'}, 10**40 + 1]",
        &[],
    );
    assert!(
        run.stdout.contains(
            r#""result":[1267650600228229401496703205376,-1208925819614629174706176,18446744073709551616,-9223372036854775809,{"1180591620717411303424":"k"},10000000000000000000000000000000000000001]"#
        ),
        "{}",
        run.stdout
    );
    let v = run.json();
    assert!(v["result"][0].is_number(), "{v}");
    assert_eq!(
        v["result"][0].to_string(),
        "1267650600228229401496703205376"
    );
}

#[test]
fn asyncio_run_style_scripts_work() {
    let v = run_script(
        "import asyncio\nasync def main():\n    a, b = await asyncio.gather(tools.wait(), tools.current_datetime())\n    \
         return b['timezone']\nasyncio.run(main())",
        &[],
    )
    .json();
    assert_eq!(v["result"], json!("UTC"), "{v}");
}

#[test]
fn mutated_builtins_and_modules_do_not_leak_into_the_next_script() {
    let (dir, evil) = temp_file(
        "evil.py",
        "import builtins, json, sys\nbuiltins.len = lambda x: 42\njson.dumps = None\n\
         sys.modules['evil'] = 1\nsys.setrecursionlimit(50)\nlen([1, 2, 3])",
    );
    let check = write_file(
        &dir,
        "check.py",
        "import json, sys\n[len([1, 2, 3]), json.dumps([1]), 'evil' in sys.modules, sys.getrecursionlimit() > 50]",
    );
    // Both through one engine and one pool, the second after the first.
    let run = paddock(&["run", &evil, &check, &check]);
    let lines = run.json_lines();
    assert_eq!(lines[0]["result"], json!(42));
    assert_eq!(lines[1]["result"], json!([3, "[1]", false, true]));
    assert_eq!(lines[2]["result"], json!([3, "[1]", false, true]));
}

#[test]
fn several_scripts_run_concurrently_and_print_in_argument_order() {
    let (dir, slow) = temp_file("slow.py", "await tools.wait(milliseconds=800)\n'slow'");
    let fast = write_file(&dir, "fast.py", "'fast'");
    let bad = write_file(&dir, "bad.py", "1/0");
    let run = paddock(&["run", &slow, &fast, &bad, &slow]);
    let results: Vec<_> = run
        .json_lines()
        .iter()
        .map(|v| v["result"].clone())
        .collect();
    assert_eq!(
        results,
        vec![json!("slow"), json!("fast"), json!(null), json!("slow")]
    );
    assert_eq!(
        run.json_lines()[2]["error_code"],
        json!("codemode:script_error")
    );
    assert_eq!(run.code, 1, "one failed script makes the exit status 1");
}

#[test]
fn standard_modules_import_and_work() {
    let v = run_script(
        "import asyncio, json, re, math, datetime, time, collections, itertools, functools, \
         dataclasses, typing, enum, string, textwrap, statistics, decimal, fractions, base64, \
         hashlib, random, copy, operator, heapq, bisect\n\
         @dataclasses.dataclass\nclass C:\n    x: int\n\
         class E(enum.Enum):\n    A = 1\n\
         [statistics.mean([1, 2, 3]), hashlib.sha256(b'x').hexdigest()[:8], C(1).x, E.A.value,\n \
         random.randint(1, 1), str(decimal.Decimal('1.5') + 1), str(fractions.Fraction(1, 3)),\n \
         re.sub('a', 'b', 'aa'), base64.b64encode(b'hi').decode(), math.factorial(5)]",
        &[],
    )
    .json();
    assert_eq!(
        v["result"],
        json!([2, "2d711642", 1, 1, 1, "2.5", "1/3", "bb", "aGk=", 120]),
        "{v}"
    );
}

#[test]
fn random_differs_between_scripts() {
    let (_dir, s) = temp_file("r.py", "import random\nrandom.random()");
    let run = paddock(&["run", &s, &s]);
    let lines = run.json_lines();
    assert_ne!(
        lines[0]["result"], lines[1]["result"],
        "forked children share a random state"
    );
}

#[test]
fn events_carry_the_scripts_call_id_as_parent() {
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.jsonl");
    let s = write_file(
        &dir,
        "s.py",
        "import asyncio\nawait asyncio.gather(tools.wait(), tools.current_datetime(format=7))\n",
    );
    let run = paddock(&["run", "--events", events.to_str().unwrap(), &s]);
    assert_eq!(run.code, 1);
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&events)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let script = lines
        .iter()
        .find(|e| e["tool"] == json!("run_tools_script"))
        .unwrap();
    let script_id = script["call_id"].clone();
    let nested: Vec<_> = lines
        .iter()
        .filter(|e| e["parent_call_id"] == script_id)
        .collect();
    assert_eq!(nested.len(), 4, "started+finished for 2 calls: {lines:?}");
    let failed = nested
        .iter()
        .find(|e| e["phase"] == json!("finished") && e["tool"] == json!("current_datetime"))
        .unwrap();
    assert_eq!(failed["error_code"], json!("tool:invalid_arguments"));
    assert!(failed["duration_ms"].as_f64().is_some());
}

#[test]
fn paddock_call_runs_a_tool_and_code_mode() {
    let run = paddock(&["call", "current_datetime", "--args", "{\"format\": \"%Y\"}"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.json()["formatted"].as_str().unwrap().len(), 4);
    let run = paddock(&[
        "call",
        "run_tools_script",
        "--args",
        "{\"code\": \"6 * 7\"}",
    ]);
    assert_eq!(run.json()["result"], json!(42));
    let run = paddock(&["call", "wait", "--args", "[1]"]);
    assert_eq!(run.code, 1);
    assert_eq!(run.json()["error_code"], json!("tool:invalid_arguments"));
}

/// Tool arguments leave the script as `json.dumps` would write them (the runtime calls the
/// native encoder directly), answers come back as `json.loads` reads them, and a refused
/// argument leaves nothing behind that refuses the next call.
#[test]
fn tool_arguments_and_answers_cross_as_json() {
    // Its `terminal` call opens a session (a sandboxed agent): closed with the home.
    let home = ClosingHome::new();
    let v = paddock_env(
        &["run", "-"],
        &[("PADDOCK_HOME", home.path())],
        Some(
            r#"out = {}
try:
    await tools.wait(milliseconds=object())
except TypeError as e:
    out['not_json'] = str(e)
box = []
box.append(box)
try:
    await tools.wait(milliseconds=box)
except TypeError as e:
    out['circular'] = str(e)
box.clear()
try:
    await tools.wait(milliseconds=box)
except Exception as e:
    out['after'] = (type(e).__name__, getattr(e, 'paddock_error_code', None))
text = 'é ☃ 𝄞 "q" \\ tab\t'
r = await tools.terminal(command="printf '%s' '" + text + "'")
out['echo'] = r['output'] == text or r['output']
out['waited'] = (await tools.wait(milliseconds=1))['waited_ms'] >= 1
out"#
                .as_bytes(),
        ),
        Duration::from_secs(60),
    )
    .json();
    assert_eq!(v["ok"], json!(true), "{v}");
    let out = &v["result"];
    assert_eq!(
        out["not_json"],
        json!(
            "arguments of tool 'wait' must be JSON values: Object of type object is not JSON \
             serializable"
        )
    );
    assert_eq!(
        out["circular"],
        json!("arguments of tool 'wait' must be JSON values: Circular reference detected")
    );
    // The same list, no longer circular, reaches the engine, whose schema check refuses it.
    assert_eq!(
        out["after"],
        json!(["ValueError", "tool:invalid_arguments"]),
        "{out}"
    );
    assert_eq!(out["echo"], json!(true), "{v}");
    assert_eq!(out["waited"], json!(true), "{out}");
}
