"""The `paddock` package against the real engine: host tools, errors, timeouts, approvals,
events, limits, concurrency, the built-in tools, the sync API, and nothing left behind."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Literal, Optional

import pydantic  # installed in the test environment by scripts/test-python.sh
import pytest

import paddock
from conftest import alive, descendants

pytestmark = pytest.mark.timeout(120)


def add(a: int, b: int = 2) -> int:
    """Adds two numbers.

    Args:
        a: the first number
        b: the second number
    """
    return a + b


async def shout(text: str, pause: float = 0.0) -> str:
    """Upper-cases text, after a pause."""
    await asyncio.sleep(pause)
    return text.upper()


def processes_with_env(marker: str) -> List[int]:
    """Live processes whose environment holds `marker` (this test's PADDOCK_HOME)."""
    found = []
    needle = marker.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle in f.read() and alive(int(entry)):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def assert_nothing_left(engine_pid: int, below: set) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        left = [p for p in below | {engine_pid} if alive(p)]
        left += processes_with_env("PADDOCK_HOME=" + os.environ["PADDOCK_HOME"])
        if not left:
            return
        time.sleep(0.1)
    raise AssertionError(f"processes left after close: {sorted(set(left))}")


# ------------------------------------------------------------------ install


def test_the_wheel_installed_the_binary_the_engine_uses(venv_bin: Path) -> None:
    assert "PADDOCK_BIN" not in os.environ
    assert paddock.find_paddock_bin() == str(venv_bin / "paddock")
    out = subprocess.run([str(venv_bin / "paddock"), "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("paddock "), out
    assert (Path(paddock.__file__).parent / "py.typed").is_file()
    # No Rust toolchain is needed: the package is pure Python beside the binary.
    assert not list(Path(paddock.__file__).parent.glob("*.so"))


def is_static_elf(path: Path) -> bool:
    """A 64-bit ELF without a PT_INTERP program header: it runs in any x86-64 environment."""
    data = path.read_bytes()[: 64 * 1024]
    if data[:4] != b"\x7fELF" or data[4] != 2:
        return False
    phoff = int.from_bytes(data[32:40], "little")
    phentsize = int.from_bytes(data[54:56], "little")
    phnum = int.from_bytes(data[56:58], "little")
    kinds = [int.from_bytes(data[phoff + i * phentsize : phoff + i * phentsize + 4], "little") for i in range(phnum)]
    return bool(kinds) and 3 not in kinds


def services_backend_policy(backend: str, tmp_path: Path) -> Path:
    """A policy routing the environment tools to `backend` of scripts/test-services.sh."""
    skipped = [b.strip() for b in os.environ.get("PADDOCK_SKIP_BACKENDS", "").split(",")]
    if backend in skipped:
        pytest.skip(f"the {backend} backend is left out (PADDOCK_SKIP_BACKENDS)")
    services = Path(os.environ.get("PADDOCK_TEST_POLICY", "/tmp/paddock-services/policy.toml"))
    text = services.read_text() if services.is_file() else ""
    header = f"[backends.{backend}]"
    if header not in text:
        raise AssertionError(
            f"the {backend} test service is not up ({services} has no {header}): run "
            f"scripts/test-services.sh as root, or set PADDOCK_SKIP_BACKENDS={backend}"
        )
    section = text[text.index(header) :]
    end = section.find("\n[", 1)
    section = section if end < 0 else section[:end]
    policy = tmp_path / f"{backend}.toml"
    policy.write_text(
        f"{section}\n\n[routes]\nterminal = \"{backend}\"\nprocess = \"{backend}\"\n"
    )
    return policy


def test_the_wheel_carries_the_static_agent_remote_backends_need(venv_bin: Path, tmp_path: Path) -> None:
    # The agent is inside the `paddock` binary (the backends crate's build script compiles it):
    # the wheel installs nothing beside it, and no variable points anywhere.
    assert not (venv_bin / "paddock-agent").exists(), "a separate agent would be used instead"
    assert "PADDOCK_AGENT_BIN" not in os.environ
    # The docker backend goes through the agent by default and fails, naming it, when none is
    # found: a command that runs proves the engine used the one it carries, written out into
    # its state directory.
    policy = services_backend_policy("docker", tmp_path)
    with paddock.Engine(policy=policy) as engine:
        result = engine.call_sync("terminal", command="test -f /.dockerenv && echo in-container")
        assert result["exit_code"] == 0 and result["output"].strip() == "in-container", result
        pid = engine._proc.pid
        below = descendants(pid)
    assert_nothing_left(pid, below)
    written = list((Path(os.environ["PADDOCK_HOME"]) / "agent-bin").iterdir())
    assert len(written) == 1 and is_static_elf(written[0]), written
    containers = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"name={engine.session_id}"], capture_output=True, text=True
    )
    assert containers.returncode == 0 and containers.stdout.strip() == "", containers


# ------------------------------------------------------------------ schemas


def test_schemas_come_from_hints_defaults_and_docstrings() -> None:
    def search(query: str, limit: int = 10, tags: Optional[List[str]] = None,
               mode: Literal["fast", "deep"] = "fast", weights: Dict[str, float] = {},
               exact: bool = False) -> list:
        """Searches the index.

        Args:
            query: what to look for
            limit: how many results
        """
        return []

    spec = paddock.HostTool(search).spec()
    schema = spec["input_schema"]
    assert spec["name"] == "search"
    assert spec["description"] == "Searches the index."
    assert schema["required"] == ["query"]
    assert schema["additionalProperties"] is False
    props = schema["properties"]
    assert props["query"] == {"type": "string", "description": "what to look for"}
    assert props["limit"] == {"type": "integer", "description": "how many results", "default": 10}
    assert props["tags"] == {"type": ["array", "null"], "items": {"type": "string"}, "default": None}
    assert props["mode"] == {"enum": ["fast", "deep"], "default": "fast"}
    assert props["weights"]["type"] == "object"
    assert props["weights"]["additionalProperties"] == {"type": "number"}
    assert props["exact"] == {"type": "boolean", "default": False}


# ------------------------------------------------------------------ host tools


def test_sync_and_async_host_tools_are_called_from_a_script() -> None:
    calls: List[Any] = []

    def record(value: int) -> Dict[str, int]:
        calls.append((value, threading.current_thread().name))
        return {"seen": value}

    async def main() -> None:
        async with paddock.Engine(tools=[add, shout, record]) as engine:
            assert {"add", "shout", "record"} <= set(engine.tool_names)
            result = await engine.run_tools_script(
                "a = await tools.add(a=40)\n"
                "b = await tools.shout(text='hi')\n"
                "c = await tools.record(value=a)\n"
                "[a, b, c]"
            )
            assert result["ok"], result
            assert result["result"] == [42, "HI", {"seen": 42}]
            assert calls == [(42, calls[0][1])]
            # The schema is checked by the engine before the host sees the call.
            bad = await engine.run_tools_script(
                "try:\n    await tools.add(a='x')\nexcept ValueError as e:\n    print(e)\n"
            )
            assert "field `a`" in bad["output"], bad
            # A direct call of a host tool goes through the same registry.
            assert await engine.call("add", a=1, b=1) == 2

    asyncio.run(main())


def test_integers_of_any_size_cross_both_ways_as_ints() -> None:
    """2**100 reaches a host tool as an int, comes back as one, and is the script's result."""
    seen: List[Any] = []

    def record(value: int) -> Dict[str, int]:
        seen.append(value)
        return {"seen": value, "next": value + 1}

    async def main() -> None:
        async with paddock.Engine(tools=[add, record]) as engine:
            result = await engine.run_tools_script(
                "r = await tools.record(value=2**100)\n"
                "[r['seen'] == 2**100, r['next'] - 2**100, -(2**80), await tools.add(a=2**70, b=1)]"
            )
            assert result["ok"], result
            assert result["result"] == [True, 1, -(2**80), 2**70 + 1]
            assert seen == [2**100] and type(seen[0]) is int
            assert await engine.call("add", a=2**65, b=2**65) == 2**66

    asyncio.run(main())


def test_the_first_script_does_not_wait_for_the_preload_later_ones_get_it() -> None:
    """A cold engine's zygote forks the first child before it imports the standard modules
    scripts commonly use (typing, enum, textwrap, ...: ~35 ms of a cold start); it imports
    them once idle, so children forked afterwards have them."""
    probe = "import sys\n'typing' in sys.modules"
    with paddock.Engine() as engine:
        first = engine.run_tools_script_sync(probe)
        assert first["ok"], first
        assert first["result"] is False, "the first script waited for the preload"
        seen = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            result = engine.run_tools_script_sync(probe)
            assert result["ok"], result
            seen.append(result["result"])
            if result["result"]:
                break
            time.sleep(0.2)
        assert seen and seen[-1] is True, f"no later child had the preloaded modules: {seen}"
        # A child forked before the preload imports what its script asks for.
        assert engine.run_tools_script_sync("import typing\ntyping.get_origin(list[int]).__name__")[
            "result"
        ] == "list"


def test_a_host_tool_exception_is_catchable_and_names_the_tool() -> None:
    def fails(path: str) -> str:
        raise FileNotFoundError(f"no such file: {path}")

    async def main() -> None:
        async with paddock.Engine(tools=[fails]) as engine:
            result = await engine.run_tools_script(
                "try:\n"
                "    await tools.fails(path='/x')\n"
                "except RuntimeError as e:\n"
                "    caught = str(e)\n"
                "caught"
            )
            assert result["ok"], result
            assert "host tool 'fails' raised FileNotFoundError: no such file: /x" in result["result"]
            assert result["tool_errors"] == [{"tool": "fails", "error_code": "tool:failed"}]
            uncaught = await engine.run_tools_script("await tools.fails(path='/y')")
            assert uncaught["ok"] is False
            assert uncaught["error_code"] == "codemode:script_error"
            assert "fails" in uncaught["error"]

    asyncio.run(main())


def test_a_hanging_host_tool_is_bounded_by_the_script_timeout() -> None:
    cancelled = threading.Event()
    release = threading.Event()

    async def hangs() -> str:
        try:
            await asyncio.sleep(3600)
        finally:
            cancelled.set()
        return "never"

    def blocks() -> str:
        release.wait(60)
        return "late"

    async def main() -> None:
        async with paddock.Engine(tools=[hangs, blocks]) as engine:
            for name in ("hangs", "blocks"):
                started = time.monotonic()
                result = await engine.run_tools_script(f"await tools.{name}()", timeout=1.0)
                took = time.monotonic() - started
                assert result["ok"] is False and result["error_code"] == "codemode:timeout", result
                assert took < 5, took
            # The engine abandoned the async call: its task was cancelled on this loop.
            assert cancelled.wait(5)
            release.set()
            # The late answer of the blocked sync tool is dropped; the engine still works.
            assert (await engine.run_tools_script("7"))["result"] == 7

    asyncio.run(main())


def test_approvals_ask_the_python_approver() -> None:
    asked: List[Dict[str, Any]] = []
    ran: List[str] = []
    answers = iter([True, False])

    @paddock.tool(requires_approval=True)
    def delete_user(name: str) -> str:
        """Deletes a user."""
        ran.append(name)
        return f"deleted {name}"

    def approver(request: Dict[str, Any]) -> bool:
        asked.append(request)
        return next(answers)

    async def main() -> None:
        async with paddock.Engine(tools=[delete_user], approver=approver) as engine:
            ok = await engine.run_tools_script("await tools.delete_user(name='ann')")
            assert ok["ok"] and ok["result"] == "deleted ann", ok
            denied = await engine.run_tools_script(
                "try:\n    await tools.delete_user(name='bob')\nexcept PermissionError as e:\n    print('denied:', e)\n"
            )
            assert denied["ok"] and "denied:" in denied["output"], denied

    asyncio.run(main())
    assert ran == ["ann"]
    assert [r["tool"] for r in asked] == ["delete_user", "delete_user"]
    assert "ann" in asked[0]["subject"] and "bob" in asked[1]["subject"]


def test_without_an_approver_a_tool_needing_approval_is_denied() -> None:
    @paddock.tool(requires_approval=True)
    def risky() -> str:
        raise AssertionError("must not run")

    with paddock.Engine(tools=[risky]) as engine:
        with pytest.raises(paddock.ToolError) as err:
            engine.call_sync("risky")
        assert err.value.code == "tool_approval:denied"


def test_events_reach_the_callback_with_the_script_as_parent() -> None:
    events: List[Dict[str, Any]] = []
    with paddock.Engine(tools=[add], on_event=events.append) as engine:
        result = engine.run_tools_script_sync("await tools.add(a=1)\nawait tools.add(a=2)")
        assert result["ok"], result
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and len(events) < 6:
            time.sleep(0.01)
    scripts = [e for e in events if e["tool"] == "run_tools_script"]
    nested = [e for e in events if e["tool"] == "add"]
    assert [e["phase"] for e in scripts] == ["started", "finished"]
    assert [e["phase"] for e in nested] == ["started", "finished", "started", "finished"]
    assert {e["parent_call_id"] for e in nested} == {scripts[0]["call_id"]}
    assert all(e["duration_ms"] is not None for e in nested if e["phase"] == "finished")


def test_events_as_an_async_iterator() -> None:
    async def main() -> List[str]:
        async with paddock.Engine(tools=[add], events=True) as engine:
            seen: List[str] = []

            async def collect() -> None:
                async for event in engine.events():
                    seen.append(f"{event['tool']}:{event['phase']}")
                    if event["tool"] == "run_tools_script" and event["phase"] == "finished":
                        return

            collector = asyncio.ensure_future(collect())
            await asyncio.sleep(0)
            await engine.run_tools_script("await tools.add(a=1)")
            await asyncio.wait_for(collector, 5)
            return seen

    assert asyncio.run(main()) == [
        "run_tools_script:started",
        "add:started",
        "add:finished",
        "run_tools_script:finished",
    ]


def test_the_tool_call_limit_holds_for_host_tools() -> None:
    calls: List[int] = []

    def count(n: int) -> int:
        calls.append(n)
        return n

    with paddock.Engine(tools=[count]) as engine:
        result = engine.run_tools_script_sync(
            "done = []\n"
            "for i in range(5):\n"
            "    try:\n"
            "        done.append(await tools.count(n=i))\n"
            "    except ValueError as e:\n"
            "        print(str(e).split(':')[0] + ':' + str(e).split(':')[1])\n"
            "        break\n"
            "done",
            max_tool_calls=3,
        )
    assert result["ok"], result
    assert result["result"] == [0, 1, 2]
    assert "codemode:tool_call_limit" in result["output"]
    assert calls == [0, 1, 2]


def test_several_asyncio_tasks_share_one_engine() -> None:
    active = 0
    peak = 0

    async def slow_double(n: int) -> int:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.4)
        active -= 1
        return n * 2

    async def main() -> None:
        async with paddock.Engine(tools=[slow_double]) as engine:
            started = time.monotonic()
            results = await asyncio.gather(
                *[engine.run_tools_script(f"await tools.slow_double(n={i})") for i in range(6)],
                *[engine.call("slow_double", n=100 + i) for i in range(2)],
            )
            took = time.monotonic() - started
            assert [r["result"] for r in results[:6]] == [0, 2, 4, 6, 8, 10]
            assert results[6:] == [200, 202]
            # Eight 0.4 s calls, one after another, would take 3.2 s.
            assert took < 2.5, took
            assert peak >= 4, peak

    asyncio.run(main())


def test_gathered_host_calls_run_concurrently() -> None:
    async def main() -> None:
        async with paddock.Engine(tools=[shout]) as engine:
            started = time.monotonic()
            result = await engine.run_tools_script(
                "import asyncio\n"
                "r = await asyncio.gather(*[tools.shout(text=str(i), pause=0.3) for i in range(10)])\n"
                "r",
            )
            took = time.monotonic() - started
            assert result["result"] == [str(i) for i in range(10)], result
            assert took < 2.0, took

    asyncio.run(main())


def test_built_in_tools_next_to_host_tools(private_state: Path) -> None:
    async def main() -> None:
        async with paddock.Engine(tools=[add]) as engine:
            assert {"terminal", "python_execute"} <= set(engine.tool_names)
            result = await engine.run_tools_script(
                "n = await tools.add(a=20, b=22)\n"
                "t = await tools.terminal(command=f'echo {n} > answer.txt && cat answer.txt')\n"
                "p = await tools.python_execute(code='print(6 * 7)')\n"
                "[n, t['output'].strip(), p['output'].strip()]"
            )
            assert result["ok"], result
            assert result["result"] == [42, "42", "42"]
            direct = await engine.call("terminal", command="pwd")
            assert direct["output"].strip() == str(private_state)

    asyncio.run(main())
    # The command really ran in the workspace.
    assert (private_state / "answer.txt").read_text() == "42\n"


def test_files_go_in_and_out_and_the_file_tools_see_them(private_state: Path, tmp_path: Path) -> None:
    src = tmp_path / "task"
    (src / "data").mkdir(parents=True)
    (src / "data" / "input.txt").write_text("one\ntwo\n")
    blob = bytes(range(256)) * 300
    (src / "data" / "blob.bin").write_bytes(blob)

    async def main() -> None:
        async with paddock.Engine() as engine:
            moved = await engine.upload(src, "task")
            assert moved["kind"] == "directory", moved
            read = await engine.call("read_file", path="task/data/input.txt", offset=2)
            assert read["content"] == "two\n", read
            await engine.call("edit_file", path="task/data/input.txt", old_string="two", new_string="2")
            back = await engine.download("task", tmp_path / "back")
            assert back["kind"] == "directory", back
            with pytest.raises(paddock.ToolError) as err:
                await engine.download("no/such/thing", tmp_path / "x")
            assert err.value.code == "files:transfer_failed"

    asyncio.run(main())
    assert (tmp_path / "back" / "data" / "input.txt").read_text() == "one\n2\n"
    assert (tmp_path / "back" / "data" / "blob.bin").read_bytes() == blob
    # The workspace is where the default sandbox's commands and file tools are.
    assert (private_state / "task" / "data" / "blob.bin").read_bytes() == blob
    with paddock.Engine() as engine:
        engine.upload_sync(src / "data" / "input.txt", "single/copy.txt")
        assert engine.call_sync("read_file", path="single/copy.txt")["content"] == "one\ntwo\n"
        engine.download_sync("single/copy.txt", tmp_path / "copy.txt")
    assert (tmp_path / "copy.txt").read_text() == "one\ntwo\n"


def test_the_sync_api_with_sync_and_async_tools() -> None:
    with paddock.Engine(tools=[add, shout]) as engine:
        result = engine.run_tools_script_sync("[await tools.add(a=1), await tools.shout(text='x')]")
        assert result["result"] == [3, "X"], result
        assert engine.call_sync("shout", text="sync") == "SYNC"
        with pytest.raises(paddock.ToolError) as err:
            engine.call_sync("no_such_tool")
        assert err.value.code == "tool:not_found"


def test_a_cancelled_request_stops_its_script() -> None:
    entered = threading.Event()

    async def waits() -> str:
        entered.set()
        await asyncio.sleep(3600)
        return "never"

    async def main() -> None:
        async with paddock.Engine(tools=[waits]) as engine:
            task = asyncio.ensure_future(engine.run_tools_script("await tools.waits()", timeout=600))
            while not entered.is_set():
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert (await engine.run_tools_script("1 + 1"))["result"] == 2

    asyncio.run(main())


def test_nothing_outlives_close() -> None:
    engine = paddock.Engine(tools=[add])
    result = engine.run_tools_script_sync(
        "await tools.terminal(command='sleep 30 &')\nawait tools.add(a=1)"
    )
    assert result["ok"], result
    pid = engine._proc.pid
    below = descendants(pid)
    assert below, "the engine has no zygote?"
    record = Path(os.environ["PADDOCK_HOME"]) / "session-records" / f"{engine.session_id}.json"
    assert record.is_file(), "the terminal call made no session record"
    engine.close()
    assert_nothing_left(pid, below)
    # The engine's own session was closed with it, not left to the idle sweep.
    assert not record.exists()
    with pytest.raises(paddock.EngineClosed):
        engine.run_tools_script_sync("1")


# ------------------------------------------------------------------ notebook sessions


def test_a_notebook_session_keeps_names_between_scripts() -> None:
    with paddock.Engine(tools=[add], keep_state=True) as engine:
        first = engine.run_tools_script_sync(
            "import math\ntotal = await tools.add(a=40)\ndef twice(n):\n    return 2 * n\ntotal"
        )
        assert first["ok"] and first["result"] == 42, first
        assert first["notebook"]["fresh"] is True and first["notebook"]["state_kept"] is True, first
        # Names, functions and imports of the first script are there in the second, and host
        # tools are still callable from it.
        second = engine.run_tools_script_sync("twice(total) + math.floor(0.5) + await tools.add(a=0, b=0)")
        assert second["ok"] and second["result"] == 84, second
        assert second["notebook"]["fresh"] is False, second
        # A cell that raises keeps what was defined before it.
        failed = engine.run_tools_script_sync("total = 1\nraise ValueError('no')")
        assert not failed["ok"], failed
        assert engine.run_tools_script_sync("total")["result"] == 1
        pid = engine._proc.pid
        below = descendants(pid)
    # The kept child goes with the engine.
    assert_nothing_left(pid, below)


def test_notebook_state_belongs_to_its_engine_and_is_off_by_default() -> None:
    async def main() -> None:
        async with paddock.Engine(keep_state=True) as one, paddock.Engine(keep_state=True) as two:
            assert one.session_id != two.session_id
            await one.run_tools_script("x = 'one'")
            await two.run_tools_script("x = 'two'")
            assert (await one.run_tools_script("x"))["result"] == "one"
            assert (await two.run_tools_script("x"))["result"] == "two"
        async with paddock.Engine() as plain:
            await plain.run_tools_script("x = 1")
            result = await plain.run_tools_script("x")
            assert not result["ok"] and "NameError" in result["error"], result
            assert "notebook" not in result

    asyncio.run(main())


def test_an_awaited_start_leaves_the_event_loop_free() -> None:
    async def main() -> None:
        ran: List[str] = []

        async def beside() -> None:
            ran.append("beside")

        task = asyncio.create_task(beside())
        engine = await paddock.Engine.start(tools=[add])
        # The loop ran the other task while the engine started (a blocking start would have
        # run it only after returning).
        assert ran == ["beside"]
        await task
        async with engine:
            assert (await engine.run_tools_script("await tools.add(a=1)"))["result"] == 3
        with pytest.raises(paddock.EngineStartError, match="bad.toml"):
            await paddock.Engine.start(policy=Path("bad.toml").absolute())

    Path("bad.toml").write_text("[codemode]\ntimeout_seconds = 'soon'\n")
    asyncio.run(main())


def test_a_bad_host_tool_or_policy_fails_the_start(tmp_path: Path) -> None:
    def terminal(command: str) -> str:
        return command

    with pytest.raises(paddock.EngineStartError, match="terminal"):
        paddock.Engine(tools=[terminal])
    bad = tmp_path / "bad.toml"
    bad.write_text("[codemode]\ntimeout_seconds = 'soon'\n")
    with pytest.raises(paddock.EngineStartError, match="bad.toml"):
        paddock.Engine(policy=bad)


class Order(pydantic.BaseModel):
    item: str
    quantity: int = 1


def test_pydantic_models_as_parameters() -> None:
    def place(order: Order) -> Dict[str, Any]:
        """Places an order."""
        assert isinstance(order, Order)
        return {"item": order.item, "total": order.quantity * 3}

    assert paddock.HostTool(place).spec()["input_schema"]["properties"]["order"]["required"] == ["item"]
    with paddock.Engine(tools=[place]) as engine:
        result = engine.run_tools_script_sync("await tools.place(order={'item': 'tea', 'quantity': 2})")
        assert result["result"] == {"item": "tea", "total": 6}, result
        refused = engine.run_tools_script_sync("await tools.place(order={'quantity': 2})")
        assert refused["ok"] is False and "order" in refused["error"], refused


def test_a_session_is_snapshotted_and_forked_from_python(private_state: Path) -> None:
    paddock_bin = paddock.find_paddock_bin()

    def close(*sessions: str) -> None:
        for sid in sessions:
            subprocess.run([paddock_bin, "sessions", "close", sid], check=True, capture_output=True)

    with paddock.Engine(session="py-snap") as engine:
        engine.call_sync("terminal", command="mkdir -p w && cd w && echo kept > k.txt && export FROM_PY=yes")
        made = engine.snapshot_sync(name="py-snap-1")
        assert made["name"] == "py-snap-1" and made["session"] == "py-snap", made
        assert made["files"]["local"] in ("reflink copy", "copy"), made
        ids = engine.fork_sync("py-snap-1", 2)
        assert len(ids) == 2 and len(set(ids)) == 2, ids
        with pytest.raises(paddock.ToolError) as err:
            engine.fork_sync("no-such-snapshot")
        assert err.value.code == "sessions:snapshot_failed"
        assert "no snapshot 'no-such-snapshot'" in str(err.value)

    async def in_fork(sid: str) -> List[str]:
        async with paddock.Engine(session=sid) as fork:
            answer = await fork.call("terminal", command="pwd; cat k.txt; echo $FROM_PY; echo mine > m.txt")
            return str(answer["output"]).split()

    for sid in ids:
        out = asyncio.run(in_fork(sid))
        assert out[0].endswith("/w") and out[1:] == ["kept", "yes"], out
    # Each fork wrote its own m.txt; the original's workspace has none.
    assert not (private_state / "w" / "m.txt").exists()
    close("py-snap", *ids)
    subprocess.run([paddock_bin, "snapshots", "rm", "py-snap-1"], check=True, capture_output=True)


def test_notebook_names_survive_a_snapshot_and_load_in_another_process(private_state: Path) -> None:
    paddock_bin = paddock.find_paddock_bin()
    home = Path(os.environ["PADDOCK_HOME"])
    define = (
        "import math\nfrom collections import Counter\nimport datetime\n"
        "rows = [{'id': i, 'name': f'row {i}'} for i in range(200)]\n"
        "seen = Counter('abca')\nwhen = datetime.date(2026, 12, 6)\n"
        "shared = [1]\npair = [shared, shared]\n"
        "def helper(x):\n    return x\n"
        "class Box:\n    pass\n"
        "box = Box()\nsquares = (i * i for i in range(3))\n"
        "len(rows)"
    )
    with paddock.Engine(keep_state=True, session="nb-orig") as engine:
        assert engine.run_tools_script_sync(define)["result"] == 200
        made = engine.snapshot_sync(name="nb-snap")
        # The names kept, and those that could not be, each with why.
        not_kept = {n["name"]: n["why"] for n in made["notebook"]["not_kept"]}
        assert set(not_kept) == {"helper", "Box", "box", "squares"}, made
        assert "defined by a script" in not_kept["helper"], not_kept
        assert "instance of Box" in not_kept["box"], not_kept
        assert "generator" in not_kept["squares"], not_kept
        assert made["notebook"]["names"] >= 7, made
        snapshot_file = home / "snapshots" / "nb-snap" / "notebook.json"
        assert snapshot_file.stat().st_mode & 0o777 == 0o600
        ids = engine.fork_sync("nb-snap", 2)
        # The original goes on unchanged: its names, functions included, are all there.
        after = engine.run_tools_script_sync("rows.append('orig'); [len(rows), helper(3), type(box).__name__]")
        assert after["result"] == [201, 3, "Box"], after

    async def scripts_in(sid: str, *codes: str) -> List[Dict[str, Any]]:
        # Another engine process: the names are loaded into its fresh notebook child.
        async with paddock.Engine(keep_state=True, session=sid) as fork:
            return [await fork.run_tools_script(code) for code in codes]

    read = "[len(rows), rows[199]['name'], math.floor(2.5), dict(seen), when.isoformat(), pair[0] is pair[1]]"
    one, no_helper = asyncio.run(scripts_in(ids[0], "rows.append('fork one')\n" + read, "helper(1)"))
    assert one["ok"], one
    assert one["result"] == [201, "row 199", 2, {"a": 2, "b": 1, "c": 1}, "2026-12-06", True], one
    restored = one["notebook"]["restored"]
    assert restored["names"] == made["notebook"]["names"], restored
    assert {n["name"] for n in restored["not_restored"]} == set(not_kept), restored
    assert one["notebook"]["fresh"] is False, one
    # A function that was not kept is a NameError in the fork, as the snapshot said.
    assert not no_helper["ok"] and "NameError" in no_helper["error"], no_helper
    # The second fork, loaded by another program (the CLI), never saw the first fork's nor the
    # original's append.
    cli = subprocess.run(
        [paddock_bin, "run", "--keep-state", "--session", ids[1], "-"],
        input=read,
        capture_output=True,
        text=True,
        check=True,
    )
    two = json.loads(cli.stdout.splitlines()[0])
    assert two["ok"] and two["result"][0] == 200 and two["notebook"]["restored"]["names"] > 0, two
    # The names are used once: a later engine on that session starts empty.
    (again,) = asyncio.run(scripts_in(ids[1], "rows"))
    assert not again["ok"] and "NameError" in again["error"], again
    assert "restored" not in again["notebook"], again
    for sid in ["nb-orig", *ids]:
        subprocess.run([paddock_bin, "sessions", "close", sid], check=False, capture_output=True)
    assert not any((home / "sessions").glob("*/notebook.json"))
    subprocess.run([paddock_bin, "snapshots", "rm", "nb-snap"], check=True, capture_output=True)


def test_a_snapshot_whose_notebook_file_is_corrupt_forks_nothing(private_state: Path) -> None:
    paddock_bin = paddock.find_paddock_bin()
    home = Path(os.environ["PADDOCK_HOME"])
    with paddock.Engine(keep_state=True, session="nb-bad") as engine:
        engine.run_tools_script_sync("x = 1")
        engine.snapshot_sync(name="nb-bad-snap")
        (home / "snapshots" / "nb-bad-snap" / "notebook.json").write_text('{"data_base64": ')
        with pytest.raises(paddock.ToolError) as err:
            engine.fork_sync("nb-bad-snap", 2)
        assert "nb-bad-snap" in str(err.value) and "notebook" in str(err.value), err.value
        listed = subprocess.run([paddock_bin, "sessions", "list"], capture_output=True, text=True, check=True)
        assert "nb-bad-snap-fork" not in listed.stdout, listed.stdout
        (home / "snapshots" / "nb-bad-snap" / "notebook.json").unlink()
        with pytest.raises(paddock.ToolError) as err:
            engine.fork_sync("nb-bad-snap", 1)
        assert "notebook.json, which its manifest names, is missing" in str(err.value), err.value
    subprocess.run([paddock_bin, "snapshots", "rm", "nb-bad-snap"], check=True, capture_output=True)


def test_hostile_names_cannot_break_or_hang_a_snapshot(private_state: Path) -> None:
    paddock_bin = paddock.find_paddock_bin()
    with paddock.Engine(keep_state=True, session="nb-hostile") as engine:
        defined = engine.run_tools_script_sync(
            "class Raises:\n    def __reduce__(self):\n        raise RuntimeError('no pickling me')\n"
            "class Hog:\n    def __reduce__(self):\n        grow = []\n        while True:\n"
            "            grow.append('x' * 1000000)\n"
            # Claiming a module's name gets past the check for classes a script defined.
            "Raises.__module__ = Hog.__module__ = 'json'\n"
            "bad, hog, plain = Raises(), Hog(), [1, 2]\n"
        )
        assert defined["ok"], defined
        made = engine.snapshot_sync(name="nb-hostile-1")
        why = {n["name"]: n["why"] for n in made["notebook"]["not_kept"]}
        assert "no pickling me" in why["bad"], why
        # Pickling runs under the session's heap limit, as its scripts do.
        assert "MemoryError" in why["hog"], why
        assert made["notebook"]["names"] == 1, made
        assert engine.run_tools_script_sync("plain")["result"] == [1, 2]
        # A name whose pickling never ends: the snapshot fails within its limit, the child is
        # ended, and the session's next script says why its names are gone.
        spin = "class Spin:\n    def __reduce__(self):\n        while True:\n            pass\n"
        engine.run_tools_script_sync(spin + "Spin.__module__ = 'json'\nspin = Spin()")
        started = time.monotonic()
        with pytest.raises(paddock.ToolError) as err:
            engine.snapshot_sync(name="nb-hostile-2")
        assert time.monotonic() - started < 20
        assert "did not answer within 10 s" in str(err.value), err.value
        after = engine.run_tools_script_sync("plain")
        assert not after["ok"] and "NameError" in after["error"], after
        assert "saving the names for a snapshot failed" in after["notebook"]["reset_reason"], after
        # Nothing of the failed snapshot is left.
        listed = subprocess.run([paddock_bin, "snapshots", "list"], capture_output=True, text=True, check=True)
        assert "nb-hostile-2" not in listed.stdout and "nb-hostile-1" in listed.stdout, listed.stdout
    subprocess.run([paddock_bin, "snapshots", "rm", "nb-hostile-1"], check=True, capture_output=True)


def test_plain_notebook_data_goes_by_marshal_and_keeps_shared_objects_shared(private_state: Path) -> None:
    paddock_bin = paddock.find_paddock_bin()
    home = Path(os.environ["PADDOCK_HOME"])
    with paddock.Engine(keep_state=True, session="nb-plain") as engine:
        engine.run_tools_script_sync("shared = [1, 'a', 2.5, None, (3, b'x'), {4}]\npair = {'l': shared, 'r': shared}")
        made = engine.snapshot_sync(name="nb-plain")
        assert made["notebook"] == {"names": 2, "not_kept": []}, made
        saved = json.loads((home / "snapshots" / "nb-plain" / "notebook.json").read_text())
        assert saved["encoding"] == "marshal", saved["encoding"]
        (sid,) = engine.fork_sync("nb-plain")

    async def check() -> Dict[str, Any]:
        async with paddock.Engine(keep_state=True, session=sid) as fork:
            return await fork.run_tools_script("[pair['l'] is pair['r'], pair['l'] is shared, shared[4][1] == b'x']")

    result = asyncio.run(check())
    assert result["result"] == [True, True, True], result
    for s in ("nb-plain", sid):
        subprocess.run([paddock_bin, "sessions", "close", s], check=False, capture_output=True)
    subprocess.run([paddock_bin, "snapshots", "rm", "nb-plain"], check=True, capture_output=True)
