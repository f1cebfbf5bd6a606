//! The asyncio API scripts write, against the sandbox's own event loop.

use paddock_tests::run_script;
use serde_json::json;

fn result_of(code: &str) -> serde_json::Value {
    let v = run_script(code, &["--max-tool-calls", "200"]).json();
    assert_eq!(v["ok"], json!(true), "{v}");
    v["result"].clone()
}

#[test]
fn create_task_wait_for_and_timeout() {
    let r = result_of(
        "import asyncio\n\
         t = asyncio.create_task(tools.wait(milliseconds=10))\n\
         a = (await t)['requested_ms']\n\
         try:\n    await asyncio.wait_for(tools.wait(milliseconds=2000), timeout=0.05)\n    b = 'no'\n\
         except TimeoutError:\n    b = 'timed out'\n\
         try:\n    async with asyncio.timeout(0.05):\n        await asyncio.sleep(5)\n    c = 'no'\n\
         except TimeoutError:\n    c = 'timeout block'\n\
         [a, b, c]",
    );
    assert_eq!(r, json!([10.0, "timed out", "timeout block"]));
}

#[test]
fn semaphore_limits_concurrency() {
    let r = result_of(
        "import asyncio\nsem = asyncio.Semaphore(2)\nactive = 0\npeak = 0\n\
         async def one():\n    global active, peak\n    async with sem:\n        active += 1\n        \
         peak = max(peak, active)\n        await tools.wait(milliseconds=20)\n        active -= 1\n\
         await asyncio.gather(*[one() for _ in range(8)])\npeak",
    );
    assert_eq!(r, json!(2));
}

#[test]
fn lock_event_and_queue() {
    let r = result_of(
        "import asyncio\nlock = asyncio.Lock()\nev = asyncio.Event()\nq = asyncio.Queue()\nout = []\n\
         async def producer():\n    for i in range(3):\n        await q.put(i)\n    ev.set()\n\
         async def consumer():\n    await ev.wait()\n    while not q.empty():\n        async with lock:\n            \
         out.append(await q.get())\n\
         await asyncio.gather(consumer(), producer())\nout",
    );
    assert_eq!(r, json!([0, 1, 2]));
}

#[test]
fn as_completed_yields_in_completion_order() {
    let r = result_of(
        "import asyncio\nasync def w(ms):\n    await tools.wait(milliseconds=ms)\n    return ms\n\
         [await f for f in asyncio.as_completed([w(120), w(10), w(60)])]",
    );
    assert_eq!(r, json!([10, 60, 120]));
}

#[test]
fn task_group_collects_and_cancels_on_failure() {
    let r = result_of(
        "import asyncio\nasync def ok():\n    return (await tools.wait(milliseconds=5))['requested_ms']\n\
         async with asyncio.TaskGroup() as tg:\n    a = tg.create_task(ok())\n    b = tg.create_task(ok())\n\
         first = [a.result(), b.result()]\n\
         async def bad():\n    raise ValueError('nope')\n\
         slow_cancelled = None\n\
         try:\n    async with asyncio.TaskGroup() as tg:\n        s = tg.create_task(tools.wait(milliseconds=5000))\n        \
         tg.create_task(bad())\nexcept* ValueError as eg:\n    msg = str(eg.exceptions[0])\n\
         [first, msg, s.cancelled()]",
    );
    assert_eq!(r, json!([[5.0, 5.0], "nope", true]));
}

#[test]
fn gather_return_exceptions_and_failures() {
    let r = result_of(
        "import asyncio\nres = await asyncio.gather(tools.wait(), tools.wait(milliseconds='x'), \
         return_exceptions=True)\n[type(x).__name__ for x in res]",
    );
    assert_eq!(r, json!(["dict", "ValueError"]));
}

#[test]
fn waiting_on_nothing_is_an_error_not_a_hang() {
    let v = run_script(
        "import asyncio\nawait asyncio.Event().wait()",
        &["--timeout", "20"],
    )
    .json();
    assert_eq!(v["error_code"], json!("codemode:script_error"), "{v}");
    assert!(v["error"].as_str().unwrap().contains("deadlock"), "{v}");
}
