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
