"""Notebook sessions over MCP (`[codemode] keep_state = true`): each MCP session keeps its own
names between `run_tools_script` calls, never sees another session's, and its sandbox child ends
with the MCP session. Over HTTP in the legacy protocol each MCP session is its own Paddock
session; the sandbox children are counted from outside, under the server's zygote."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import Paddock

pytestmark = pytest.mark.anyio

KEEP_STATE = "\n[codemode]\nkeep_state = true\nprefork = 2\n"


async def run(client: Any, code: str) -> dict[str, Any]:
    result = await client.call_tool("run_tools_script", {"code": code})
    out = result.structured_content
    assert isinstance(out, dict) and "ok" in out, result
    return out


def children_of(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            pass
    return found


def sandbox_children(p: Paddock) -> list[int]:
    """Children of the server's zygote: idle pre-forked ones plus one per notebook session."""
    assert p.proc is not None
    for child in children_of(p.proc.pid):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"__sandbox-zygote" in cmdline:
            return children_of(child)
    return []


async def wait_for(predicate: Any, seconds: float, what: str) -> None:
    """Polls without blocking the event loop (the client must go on sending, e.g. a cancel)."""
    until = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < until, f"timed out waiting for {what}"
        await anyio.sleep(0.1)


async def test_each_mcp_session_keeps_its_own_names(paddock_factory) -> None:
    p = paddock_factory("http", "legacy", policy_extra=KEEP_STATE)
    async with p.client() as a, p.client() as b:
        first_a = await run(a, "x = 'from a'\ndef who():\n    return x")
        first_b = await run(b, "x = 'from b'")
        assert first_a["notebook"]["fresh"] is True, first_a
        assert first_a["notebook"]["session"] != first_b["notebook"]["session"], (first_a, first_b)
        seen_a = await run(a, "who()")
        seen_b = await run(b, "[x, 'who' in globals()]")
        assert seen_a["result"] == "from a", seen_a
        assert seen_a["notebook"]["cell"] == 2, seen_a
        assert seen_b["result"] == ["from b", False], seen_b
        # Two notebook children beside the pre-forked ones.
        await wait_for(lambda: len(sandbox_children(p)) == 4, 10, "2 idle + 2 notebook children")
        tools = await a.list_tools()
        description = next(t.description for t in tools.tools if t.name == "run_tools_script")
        assert "notebook" in (description or ""), description
    # Both MCP sessions ended: their children are gone, the idle ones stay.
    await wait_for(lambda: len(sandbox_children(p)) == 2, 15, "the notebook children to end with their sessions")


async def test_one_session_too_many_evicts_the_least_recently_used(paddock_factory) -> None:
    p = paddock_factory("http", "legacy", policy_extra=KEEP_STATE + "max_kept_sessions = 1\n")
    async with p.client() as a, p.client() as b:
        await run(a, "x = 1")
        await run(b, "y = 2")
        again = await run(a, "'x' in globals()")
        assert again["result"] is False, again
        assert again["notebook"]["fresh"] is True, again
        assert "max_kept_sessions" in again["notebook"]["reset_reason"], again


async def test_a_cancelled_script_ends_the_state_and_its_child(paddock_factory) -> None:
    from test_serve import cancel_while_running

    p = paddock_factory("http", "legacy", policy_extra=KEEP_STATE)
    async with p.client() as a:
        await run(a, "kept = 1")
        await wait_for(lambda: len(sandbox_children(p)) == 3, 10, "2 idle + 1 notebook child")
        # A busy loop that only the cancellation can end.
        result = await cancel_while_running(
            a, "run_tools_script", {"code": "while True:\n    pass"}, lambda: True, after=1.0
        )
        assert result is None, result
        # Its child is killed at once, not left spinning until the session closes.
        await wait_for(lambda: len(sandbox_children(p)) == 2, 10, "the cancelled script's child to end")
        after = await run(a, "'kept' in globals()")
        assert after["result"] is False, after
        assert after["notebook"]["fresh"] is True, after
        assert "cancelled" in after["notebook"]["reset_reason"], after
