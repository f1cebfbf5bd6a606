"""The Paddock session behind an MCP session ends with it (legacy protocol, where an MCP session
exists): over HTTP each MCP session has its own Paddock session, closed when the client ends the
MCP session; over stdio, `serve --session ID` closes ID when the client closes the connection.
Checked from outside with `paddock sessions list` on the server's state directory."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import Paddock

pytestmark = pytest.mark.anyio


def sessions(p: Paddock) -> list[dict[str, Any]]:
    out = subprocess.run(
        [str(p.binary), "sessions", "list", "--policy", str(p.policy)],
        env=p.env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def wait_until(done: Any, seconds: float, what: str) -> None:
    until = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < until, f"timed out waiting for {what}"
        time.sleep(0.1)


async def test_http_mcp_session_end_closes_its_paddock_session(paddock_factory) -> None:
    p = paddock_factory("http", "legacy")
    async with p.client() as c:
        r = await c.call_tool("terminal", {"command": "export KEPT=1; echo made"})
        assert not r.is_error, r
        live = sessions(p)
        assert len(live) == 1 and live[0]["id"].startswith("mcp-"), live
        state = p.home / "sessions" / live[0]["id"]
        assert state.is_dir(), f"no shell state at {state}"
    # The client ended its MCP session (DELETE): the Paddock session and its state go.
    wait_until(lambda: sessions(p) == [], 15, "the Paddock session to be closed")
    assert not state.exists(), f"{state} outlived its session"


async def test_stdio_session_named_on_the_command_line_closes_with_the_connection(paddock_factory, tmp_path: Path) -> None:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    p = paddock_factory("stdio", "legacy")
    params = StdioServerParameters(
        command=str(p.binary),
        args=[*p.serve_args(), "--session", "named-stdio"],
        env=p.env(),
        cwd=str(p.workdir),
    )
    async with Client(stdio_client(params, errlog=p._log), mode="legacy", read_timeout_seconds=90.0) as c:
        r = await c.call_tool("terminal", {"command": "echo made"})
        assert not r.is_error, r
        assert [s["id"] for s in sessions(p)] == ["named-stdio"]
    wait_until(lambda: sessions(p) == [], 15, "the named session to be closed")
    assert not (p.home / "sessions" / "named-stdio").exists()


async def test_an_operator_snapshots_and_forks_sessions_over_mcp(paddock_factory, tmp_path: Path) -> None:
    """The `sessions_admin` toolset, off by default, enabled by the policy: a session is saved,
    forked twice, listed and removed through MCP tools; the forks carry its files, its exports
    and its notebook's names (a `keep_state` server's, loaded by another program)."""
    enabled = '[toolsets]\nenabled = ["core", "mcp", "sessions_admin"]\n\n[codemode]\nkeep_state = true\n'
    default = paddock_factory("http", "legacy")
    async with default.client() as c:
        names = {t.name for t in (await c.list_tools()).tools}
        assert "session_snapshot" not in names, "sessions_admin is off by default"
    p = paddock_factory(
        "http", "legacy", sandbox="workspace-write", home=tmp_path / "admin-home", policy_extra=enabled
    )
    async with p.client() as c:
        names = {t.name for t in (await c.list_tools()).tools}
        assert {"session_snapshot", "session_fork", "snapshot_list", "snapshot_remove"} <= names, names
        r = await c.call_tool("terminal", {"command": "echo kept > k.txt && export FROM_MCP=yes"})
        assert not r.is_error, r
        r = await c.call_tool("run_tools_script", {"code": "total = 41\ndef later(): pass"})
        assert not r.is_error, r
        made = await c.call_tool("session_snapshot", {"name": "over-mcp"})
        assert not made.is_error, made
        assert made.structured_content["name"] == "over-mcp", made
        notebook = made.structured_content["notebook"]
        assert notebook["names"] == 1 and [n["name"] for n in notebook["not_kept"]] == ["later"], made
        forked = await c.call_tool("session_fork", {"snapshot": "over-mcp", "count": 2})
        assert not forked.is_error, forked
        ids = forked.structured_content["sessions"]
        assert len(ids) == 2, forked
        listed = await c.call_tool("snapshot_list", {})
        assert [s["name"] for s in listed.structured_content["snapshots"]] == ["over-mcp"], listed
        bad = await c.call_tool("session_fork", {"snapshot": "nothing-here"})
        assert bad.is_error, bad
    for sid in ids:
        out = subprocess.run(
            [str(p.binary), "call", "terminal", "--args", json.dumps({"command": "cat k.txt; echo $FROM_MCP"}),
             "--session", sid, "--policy", str(p.policy)],
            env=p.env(), cwd=str(p.workdir), capture_output=True, text=True, timeout=60, check=True,
        )
        assert json.loads(out.stdout)["output"] == "kept\nyes\n", out.stdout
        out = subprocess.run(
            [str(p.binary), "run", "--keep-state", "--session", sid, "--policy", str(p.policy), "-"],
            input="total + 1", env=p.env(), cwd=str(p.workdir), capture_output=True, text=True,
            timeout=60, check=True,
        )
        assert json.loads(out.stdout)["result"] == 42, out.stdout
        subprocess.run(
            [str(p.binary), "sessions", "close", sid, "--policy", str(p.policy)],
            env=p.env(), capture_output=True, timeout=60, check=True,
        )
    async with p.client() as c:
        removed = await c.call_tool("snapshot_remove", {"name": "over-mcp"})
        assert not removed.is_error, removed
    assert not (tmp_path / "admin-home" / "snapshots" / "over-mcp").exists()
