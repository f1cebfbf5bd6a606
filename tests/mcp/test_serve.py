"""`paddock serve` as an MCP server, driven by the official Python SDK (mcp 2.3.0) over stdio and
Streamable HTTP, in both protocol eras ("legacy" = initialize handshake at 2025-11-25;
"2026-07-28" = stateless, input_required/retry instead of server->client requests).

The policy (conftest.policy_text) bridges two real MCP servers from tests/mcp/servers/:
"notes" (bridge mode: mcp_notes__<tool>) and "weather" (lazy mode: mcp_weather__list_tools /
mcp_weather__call_tool).

Contract these tests hold the server to:
  * run_tools_script's structuredContent is the script result object:
      {"ok": true, "result": <value>, "output": <printed text>, ...}
      {"ok": false, "error": ..., "error_code": ..., ...}
  * a bridged call, seen from a script, returns
      {"ok", "server", "tool", "is_error", "result"}; result = the remote structuredContent if
      there is one, else the remote text blocks joined.
  * a denied approval carries error_code "tool_approval:denied".
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import subprocess
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from conftest import COMBOS, NOTES_SERVER, PYTHON, TRANSPORTS, WEATHER_SERVER, Paddock

pytestmark = pytest.mark.anyio

BUILTIN_TOOLS = {"run_tools_script", "terminal", "process", "python_execute", "python_environment_info"}
BRIDGED_TOOLS = {
    "mcp_notes__search",
    "mcp_notes__get",
    "mcp_notes__fail",
    "mcp_notes__crash",
    "mcp_notes__pid",
    "mcp_weather__list_tools",
    "mcp_weather__call_tool",
}
DENIED = "tool_approval:denied"


def _load(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


notes_data = _load(NOTES_SERVER, "notes_server")
weather_data = _load(WEATHER_SERVER, "weather_server")


# --- helpers ------------------------------------------------------------------------------------


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


def payload(result: types.CallToolResult) -> Any:
    """The structured result; the JSON text block when there is none."""
    if result.structured_content is not None:
        return result.structured_content
    text = text_of(result)
    try:
        return json.loads(text)
    except ValueError:
        return text


async def run_script(client: Any, code: str, **kwargs: Any) -> dict[str, Any]:
    result = await client.call_tool("run_tools_script", {"code": code}, **kwargs)
    out = result.structured_content
    assert isinstance(out, dict), f"run_tools_script gave no structured result object: {result}"
    assert "ok" in out, out
    return out


def script_ok(out: dict[str, Any]) -> Any:
    assert out["ok"] is True, f"the script failed: {json.dumps(out, indent=2)}"
    return out["result"]


def assert_denied(result: types.CallToolResult) -> None:
    body = payload(result)
    everything = json.dumps(body) + text_of(result)
    assert result.is_error or (isinstance(body, dict) and body.get("ok") is False), result
    assert DENIED in everything, f"not denied by approval: {result}"


def processes_matching(marker: str) -> list[int]:
    """Live (non-zombie) processes whose command line contains `marker`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if marker not in cmdline:
                continue
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if stat.rsplit(")", 1)[-1].split()[0] != "Z":
            found.append(int(entry))
    return found


async def wait_until(predicate: Any, timeout: float, what: str, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await anyio.sleep(interval)


def sleep_command() -> tuple[str, str]:
    """A command that sleeps ~5 min, and a token unique to it found in the command lines of both
    the shell that runs it and the `sleep` process itself."""
    token = f"300.{secrets.randbelow(10**9):09d}"
    return f"sleep {token} # MARKER-{uuid.uuid4().hex}", token


async def cancel_while_running(client: Any, name: str, args: dict[str, Any], started: Any, after: float) -> Any:
    """Calls a tool in a task, waits until `started()` holds (then `after` s more), cancels the
    call the way the SDK does it (cancelling the awaiting task: notifications/cancelled on stdio
    and legacy HTTP, closing the request's stream on 2026-07-28 HTTP). Returns the result if the
    call ended on its own before the cancellation (a failure for the caller to report)."""
    outcome: dict[str, Any] = {}
    scope = anyio.CancelScope()

    async def call() -> None:
        with scope:
            outcome["result"] = await client.call_tool(name, args)

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        deadline = time.monotonic() + 20
        while not started():
            if "result" in outcome:
                raise AssertionError(f"{name} ended before it could be cancelled: {outcome['result']}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{name} never reached its running state")
            await anyio.sleep(0.1)
        await anyio.sleep(after)
        assert "result" not in outcome, f"{name} ended before it was cancelled: {outcome['result']}"
        scope.cancel()
    return outcome.get("result")


def explain(paddock: Paddock, command: str) -> dict[str, Any]:
    out = subprocess.run(
        [str(paddock.binary), "policy", "explain", "--policy", str(paddock.policy), "--command", command],
        capture_output=True,
        text=True,
        env=paddock.env(),
        timeout=30,
        check=True,
    )
    return json.loads(out.stdout)


class Elicitor:
    """An elicitation callback that records what it was asked and answers as told."""

    def __init__(self, action: str = "accept", decision: str | None = "once", delay: float = 0.0) -> None:
        self.action = action
        self.decision = decision
        self.delay = delay
        self.asked: list[types.ElicitRequestParams] = []

    async def __call__(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.asked.append(params)
        if self.delay:
            await anyio.sleep(self.delay)
        if self.action == "accept":
            return types.ElicitResult(action="accept", content={"decision": self.decision})
        return types.ElicitResult(action=self.action)


def make_victim(root: Path, name: str) -> Path:
    victim = root / name / "victim"
    victim.mkdir(parents=True)
    (victim / "precious.txt").write_text("keep me unless a human says otherwise\n")
    return victim


# --- the fixture servers themselves (no paddock needed) -----------------------------------------


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_fixture_servers_work_and_start_fast(mode: str) -> None:
    """The bridged servers answer over stdio in both eras; structured tools have outputSchemas."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    started = time.monotonic()
    async with Client(StdioServerParameters(command=PYTHON, args=[str(NOTES_SERVER)]), mode=mode) as c:
        names = {t.name: t for t in (await c.list_tools()).tools}
        startup = time.monotonic() - started
        assert set(names) == {"search", "get", "fail", "crash", "pid"}
        assert names["search"].output_schema is not None
        assert names["get"].output_schema is None  # text only: bridged result is the joined text
        r = await c.call_tool("search", {"query": "plan"})
        assert r.structured_content == notes_data.search_notes("plan")
        assert [m["id"] for m in r.structured_content["matches"]] == [1, 3]
        r = await c.call_tool("get", {"note_id": 2})
        assert text_of(r) == "Milk, eggs, coffee."
        r = await c.call_tool("fail", {"message": "boom-1"})
        assert r.is_error and "boom-1" in text_of(r)
        r = await c.call_tool("pid", {})
        assert int(text_of(r)) > 1
    async with Client(StdioServerParameters(command=PYTHON, args=[str(WEATHER_SERVER)]), mode=mode) as c:
        r = await c.call_tool("forecast", {"city": "Oslo", "days": 2})
        assert r.structured_content == weather_data.forecast_data("Oslo", 2)
        r = await c.call_tool("slow", {"seconds": 0.2})
        assert text_of(r) == "slept 0.2"
    # Generous: the import of `mcp` alone takes ~0.7 s on an idle 2-core machine.
    assert startup < 5, f"the notes server took {startup:.2f} s to answer tools/list"


def test_policy_is_valid_and_asks_for_the_victim(paddock_factory) -> None:
    p = paddock_factory("stdio", "legacy")
    subprocess.run(
        [str(p.binary), "policy", "check", str(p.policy)], env=p.env(), check=True, capture_output=True, timeout=30
    )
    assert explain(p, f"rm -rf {p.workdir}/victim")["decision"] == "ask"
    cmd, _ = sleep_command()
    assert explain(p, cmd)["decision"] == "allow"


# --- 1. tools/list ------------------------------------------------------------------------------


async def test_list_tools(paddock: Paddock) -> None:
    async with paddock.client() as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
    missing = (BUILTIN_TOOLS | BRIDGED_TOOLS) - set(tools)
    assert not missing, f"missing tools: {sorted(missing)}; got {sorted(tools)}"
    # Lazy mode: the weather server's own tools are not listed one by one.
    assert not any(n.startswith("mcp_weather__") and n not in BRIDGED_TOOLS for n in tools), sorted(tools)
    for name, tool in tools.items():
        assert tool.output_schema is not None, f"{name} has no outputSchema"
        assert tool.input_schema.get("type") == "object", f"{name}: {tool.input_schema}"
    description = tools["run_tools_script"].description or ""
    assert "mcp_notes__search(" in description, description
    assert "mcp_weather__call_tool(" in description, description


# --- 2. scripts over bridged tools ------------------------------------------------------------


GATHER_SCRIPT = """
import asyncio
a, b = await asyncio.gather(
    tools.mcp_notes__search(query="plan"),
    tools.mcp_weather__call_tool(tool_name="forecast", arguments={"city": "Oslo", "days": 2}),
)
print("gathered", a["server"], b["server"])
failed = await tools.mcp_notes__fail(message="boom-42")
listing = await tools.mcp_weather__list_tools()
body = await tools.mcp_notes__get(note_id=2)
{
    "titles": [m["title"] for m in a["result"]["matches"]],
    "a": [a["ok"], a["server"], a["tool"], a["is_error"]],
    "b": [b["ok"], b["server"], b["tool"], b["is_error"]],
    "forecast": b["result"],
    "failed": [failed["ok"], failed["is_error"], failed["server"], failed["tool"]],
    "failed_text": str(failed["result"]),
    "weather_tools": sorted(t["name"] for t in listing),
    "weather_schema_keys": sorted(listing[0].keys()),
    "body": body["result"],
}
"""


async def test_script_gathers_bridged_tools(paddock: Paddock) -> None:
    async with paddock.client() as c:
        out = await run_script(c, GATHER_SCRIPT)
    value = script_ok(out)
    assert "gathered notes weather" in out["output"]
    assert value["titles"] == ["Project plan", "Plan for the trip to Oslo"]
    assert value["a"] == [True, "notes", "search", False]
    assert value["b"] == [True, "weather", "forecast", False]
    assert value["forecast"] == weather_data.forecast_data("Oslo", 2)
    # A remote tool error is a value in the script (no exception), flagged twice.
    assert value["failed"] == [False, True, "notes", "fail"]
    assert "boom-42" in value["failed_text"]
    assert value["weather_tools"] == ["forecast", "slow"]
    assert {"name", "description", "input_schema"} <= set(value["weather_schema_keys"])
    assert value["body"] == "Milk, eggs, coffee."


async def test_script_failure_is_a_result_object(paddock: Paddock) -> None:
    async with paddock.client() as c:
        out = await run_script(c, "print('before')\n1 / 0\n")
        assert out["ok"] is False, out
        assert out["error_code"] == "codemode:script_error", out
        assert "ZeroDivisionError" in json.dumps(out), out
        assert "before" in out["output"], out
        # The server goes on serving.
        assert script_ok(await run_script(c, "6 * 7")) == 42


async def test_big_integers_are_numbers_in_structured_content(paddock: Paddock) -> None:
    """JSON numbers have no size limit: 2**100 reaches the client as an int, not its digits."""
    async with paddock.client() as c:
        value = script_ok(await run_script(c, "[2**100, -(2**70), {'n': 10**30}]"))
        assert value == [2**100, -(2**70), {"n": 10**30}], value
        assert type(value[0]) is int


# --- 3. progress --------------------------------------------------------------------------------


async def test_progress_names_nested_calls(paddock: Paddock) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    code = """
a = await tools.mcp_notes__get(note_id=1)
b = await tools.mcp_notes__search(query="list")
c = await tools.mcp_weather__call_tool(tool_name="forecast", arguments={"city": "Bergen"})
[a["result"], b["result"]["count"], c["result"]["city"]]
"""
    async with paddock.client() as c:
        out = await run_script(c, code, progress_callback=on_progress)
    assert script_ok(out) == ["Ship the MCP server by Friday.", 2, "Bergen"]
    assert seen, "no progress notifications arrived"
    values = [p for p, _, _ in seen]
    assert all(b > a for a, b in zip(values, values[1:])), f"progress must increase: {seen}"
    messages = " | ".join(m or "" for _, _, m in seen)
    for tool in ("mcp_notes__get", "mcp_notes__search", "mcp_weather__call_tool"):
        assert tool in messages, f"{tool} not named in progress messages: {seen}"


@pytest.mark.parametrize("transport,mode", COMBOS)
async def test_a_commands_output_streams_as_progress(paddock_factory, transport: str, mode: str) -> None:
    """A client that sends a progress token gets a command's output as it is written: each
    notification's message the new text, the first before the command ends."""
    p = paddock_factory(transport, mode)
    seen: list[tuple[float, str]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((time.monotonic(), message or ""))

    async with p.client() as c:
        started = time.monotonic()
        r = await c.call_tool(
            "terminal",
            {"command": "echo first-line; sleep 1.5; echo oops >&2; echo last-line"},
            progress_callback=on_progress,
        )
        ended = time.monotonic()
    assert not r.is_error and payload(r)["exit_code"] == 0, r
    text = "".join(m for _, m in seen)
    for line in ("first-line\n", "oops\n", "last-line\n"):
        assert line in text, seen
    first = next(at for at, m in seen if "first-line" in m)
    assert ended - first >= 1.0, f"the first line came {first - started:.2f} s in, the call ended at {ended - started:.2f} s: {seen}"


# --- 4. cancellation ----------------------------------------------------------------------------


async def test_cancel_script_kills_its_command(paddock: Paddock) -> None:
    cmd, token = sleep_command()
    code = f"r = await tools.terminal(command={cmd!r})\nr"
    async with paddock.client() as c:
        result = await cancel_while_running(
            c, "run_tools_script", {"code": code}, lambda: bool(processes_matching(token)), after=1.5
        )
        assert result is None
        await wait_until(lambda: not processes_matching(token), 5, f"the processes of {cmd!r} to end")
        # Still serving.
        assert script_ok(await run_script(c, "1 + 1")) == 2


async def test_cancel_terminal_kills_its_command(paddock: Paddock) -> None:
    cmd, token = sleep_command()
    async with paddock.client() as c:
        await cancel_while_running(c, "terminal", {"command": cmd}, lambda: bool(processes_matching(token)), after=1.5)
        await wait_until(lambda: not processes_matching(token), 5, f"the processes of {cmd!r} to end")
        r = await c.call_tool("terminal", {"command": "echo still-here"})
        assert not r.is_error and "still-here" in json.dumps(payload(r)), r


async def test_cancel_busy_script_keeps_server_responsive(paddock: Paddock) -> None:
    started = time.monotonic()
    async with paddock.client() as c:
        await cancel_while_running(
            c, "run_tools_script", {"code": "while True:\n    pass\n"}, lambda: time.monotonic() - started > 0.5, 1.5
        )
        with anyio.fail_after(20):
            assert script_ok(await run_script(c, "sum(range(10))")) == 45
            r = await c.call_tool("terminal", {"command": "echo alive"})
        assert "alive" in json.dumps(payload(r))


# --- 5. approvals through elicitation -------------------------------------------------------------


async def test_approval_accepted_runs_the_command(paddock: Paddock, tmp_path: Path) -> None:
    victim = make_victim(tmp_path, "accepted")
    command = f"rm -rf {victim}"
    assert explain(paddock, command)["decision"] == "ask"
    elicit = Elicitor("accept", "once")
    async with paddock.client(elicitation_callback=elicit) as c:
        r = await c.call_tool("terminal", {"command": command})
    assert not r.is_error, r
    assert not victim.exists(), "approved, yet the directory is still there"
    assert len(elicit.asked) == 1, elicit.asked
    asked = elicit.asked[0]
    assert str(victim) in asked.message, asked.message
    assert "decision" in json.dumps(asked.model_dump(mode="json", by_alias=True)), asked


@pytest.mark.parametrize(
    "answer",
    [("accept", "deny"), ("decline", None), ("cancel", None)],
    ids=["accept-deny", "decline", "cancel"],
)
async def test_approval_refused_keeps_the_directory(paddock: Paddock, tmp_path: Path, answer: tuple) -> None:
    victim = make_victim(tmp_path, "refused")
    elicit = Elicitor(*answer)
    async with paddock.client(elicitation_callback=elicit) as c:
        r = await c.call_tool("terminal", {"command": f"rm -rf {victim}"})
        assert_denied(r)
        assert victim.exists()
        assert len(elicit.asked) == 1, elicit.asked
        # Refused in a script: PermissionError there, and the script's result says so.
        out = await run_script(c, f"await tools.terminal(command={f'rm -rf {victim}'!r})")
    assert victim.exists()
    assert out["ok"] is False and DENIED in json.dumps(out), out


async def test_approval_without_elicitation_is_denied(paddock: Paddock, tmp_path: Path) -> None:
    victim = make_victim(tmp_path, "nobody")
    async with paddock.client() as c:  # no elicitation callback: no elicitation capability
        with anyio.fail_after(30):  # must not wait for an answer that cannot come
            r = await c.call_tool("terminal", {"command": f"rm -rf {victim}"})
    assert_denied(r)
    assert victim.exists()


@pytest.mark.parametrize("transport,mode", COMBOS)
async def test_approval_pauses_the_script_clock(paddock_factory, tmp_path: Path, transport: str, mode: str) -> None:
    p = paddock_factory(transport, mode, codemode_timeout=2)
    victim = make_victim(tmp_path, "slow-human")
    elicit = Elicitor("accept", "once", delay=3.0)  # longer than the script's 2 s budget
    code = f"r = await tools.terminal(command={f'rm -rf {victim}'!r})\nprint('ran')\nr['exit_code']"
    async with p.client(elicitation_callback=elicit) as c:
        out = await run_script(c, code)
        assert script_ok(out) == 0
        assert "ran" in out["output"]
        assert not victim.exists()
        assert len(elicit.asked) == 1
        # The 2 s budget is real: time outside an approval still counts.
        busy = await run_script(c, "while True:\n    pass\n")
        assert busy["ok"] is False and busy["error_code"] == "codemode:timeout", busy


# --- 6. a crashed bridged server is restarted ---------------------------------------------------


async def test_bridged_server_restarts_after_crash(paddock: Paddock) -> None:
    async with paddock.client() as c:
        first = script_ok(await run_script(c, "await tools.mcp_notes__pid()"))
        assert first["ok"] is True and first["server"] == "notes", first
        pid1 = int(str(first["result"]).strip())
        with anyio.fail_after(30):
            r = await c.call_tool("mcp_notes__crash", {})
        body = payload(r)
        assert r.is_error or (isinstance(body, dict) and (body.get("ok") is False or body.get("is_error"))), r
        with anyio.fail_after(30):
            second = script_ok(await run_script(c, "await tools.mcp_notes__pid()"))
        assert second["ok"] is True, second
        pid2 = int(str(second["result"]).strip())
        assert pid2 != pid1
        # And the rest of it works again.
        again = script_ok(await run_script(c, "(await tools.mcp_notes__search(query='xylo'))['result']['count']"))
        assert again == 1


# --- 7. HTTP: bearer token and Origin -----------------------------------------------------------


def first_request(mode: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The first request a client of `mode` sends, and its HTTP headers."""
    client_info = {"name": "paddock-tests", "version": "0"}
    base = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    if mode == "legacy":
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": client_info},
        }
        return body, base
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "server/discover",
        "params": {
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": mode,
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": client_info,
            }
        },
    }
    return body, {**base, "MCP-Protocol-Version": mode, "Mcp-Method": "server/discover"}


async def post_first(url: str, mode: str, headers: dict[str, str]) -> int:
    import httpx2

    body, base = first_request(mode)
    async with httpx2.AsyncClient(timeout=30) as http:
        r = await http.post(url, json=body, headers={**base, **headers})
        return r.status_code


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_http_bearer_token(paddock_factory, mode: str) -> None:
    p = paddock_factory("http", mode, token="s3cret-token")
    assert await post_first(p.base_url, mode, {}) == 401
    assert await post_first(p.base_url, mode, {"Authorization": "Bearer wrong"}) == 401
    assert await post_first(p.base_url, mode, {"Authorization": "s3cret-token"}) == 401
    assert await post_first(p.base_url, mode, {"Authorization": "Bearer s3cret-token"}) == 200
    async with p.client() as c:  # sends the right token
        names = {t.name for t in (await c.list_tools()).tools}
        assert "run_tools_script" in names
        assert script_ok(await run_script(c, "2 ** 10")) == 1024
    with pytest.raises(Exception):  # noqa: B017 - any failure to connect will do
        with anyio.fail_after(30):
            async with p.client(headers={"Authorization": "Bearer wrong"}) as c:
                await c.list_tools()


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_http_without_token_needs_none(paddock_factory, mode: str) -> None:
    p = paddock_factory("http", mode)
    assert await post_first(p.base_url, mode, {}) == 200


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_http_origin(paddock_factory, mode: str) -> None:
    p = paddock_factory("http", mode, token="tok", allow_origins=("http://ok.example",))
    auth = {"Authorization": "Bearer tok"}
    port_origin = p.base_url.split("/mcp")[0]  # http://127.0.0.1:PORT
    assert await post_first(p.base_url, mode, {**auth, "Origin": "http://evil.example"}) == 403
    assert await post_first(p.base_url, mode, {**auth, "Origin": "http://ok.example"}) == 200
    assert await post_first(p.base_url, mode, {**auth, "Origin": port_origin}) == 200
    assert await post_first(p.base_url, mode, auth) == 200  # no Origin: not a browser


# --- 8. notify_on_complete ----------------------------------------------------------------------


@pytest.mark.parametrize("transport,mode", [pytest.param("stdio", "legacy", id="stdio-legacy")])
async def test_notify_on_complete(paddock_factory, transport: str, mode: str) -> None:
    """A background command with notify_on_complete: the client hears of its end without asking.
    (Legacy only: on 2026-07-28 there is no channel for a notification outside a request.)"""
    p = paddock_factory(transport, mode)
    notifications: list[dict[str, Any]] = []
    arrived = anyio.Event()
    session_id: dict[str, str] = {}

    async def on_message(message: Any) -> None:
        if isinstance(message, Exception):
            return
        dumped = message.model_dump(mode="json", by_alias=True, exclude_none=True)
        notifications.append(dumped)
        if session_id and session_id["id"] in json.dumps(dumped):
            arrived.set()

    async with p.client(message_handler=on_message) as c:
        try:  # opt in to log messages where the server offers logging (deprecated, but legacy)
            with anyio.fail_after(10), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                await c.session.set_logging_level("info")
        except Exception:
            pass
        r = await c.call_tool(
            "terminal", {"command": "sleep 1; echo done", "background": True, "notify_on_complete": True}
        )
        body = payload(r)
        assert not r.is_error and isinstance(body, dict) and body.get("session_id"), r
        session_id["id"] = str(body["session_id"])
        if any(session_id["id"] in json.dumps(n) for n in notifications):
            arrived.set()
        with anyio.move_on_after(10):
            await arrived.wait()
    assert arrived.is_set(), f"no notification named {session_id['id']} within 10 s; got {notifications}"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_notify_on_complete_reaches_a_2026_client_through_a_resource_subscription(
    paddock_factory, transport: str
) -> None:
    """2026-07-28 has no channel outside a request but `subscriptions/listen`: the process is a
    resource (`resource_uri` in the terminal result), the client listens to it, hears
    `notifications/resources/updated` when it ends, and reads its state."""
    from mcp.shared.subscriptions import ResourceUpdated

    p = paddock_factory(transport, "2026-07-28")
    async with p.client() as c:
        r = await c.call_tool(
            "terminal", {"command": "sleep 2; echo done; exit 3", "background": True, "notify_on_complete": True}
        )
        body = payload(r)
        assert not r.is_error and isinstance(body, dict), r
        uri = body.get("resource_uri")
        assert isinstance(uri, str) and uri.startswith("paddock://process/"), body
        assert uri.endswith("/" + str(body["session_id"])), body
        started = time.monotonic()
        events: list[Any] = []
        with anyio.fail_after(20):
            async with c.listen(resource_subscriptions=[uri]) as sub:
                assert list(sub.honored.resource_subscriptions or []) == [uri], sub.honored
                async for event in sub:
                    events.append(event)
                    break
        assert events == [ResourceUpdated(uri=uri)], events
        # It ended on its own after ~2 s: the notice was pushed, not found by polling at the end.
        assert 1.0 < time.monotonic() - started < 15, time.monotonic() - started
        read = await c.read_resource(uri)
        state = json.loads(read.contents[0].text)
        assert state.get("state") == "exited" and state.get("exit_code") == 3, state
        assert "done" in json.dumps(state), state
        # A URI that is not one of Paddock's is refused, not silently watched.
        with anyio.fail_after(10):
            async with c.listen(resource_subscriptions=["file:///etc/passwd"]) as sub:
                assert not (sub.honored.resource_subscriptions or []), sub.honored


# --- 9. bridged tools obey the policy like any other tool ---------------------------------------

POLICY_ON_BRIDGED = """
[codemode]
exclude = ["mcp_notes__pid"]

[tools]
deny = ["mcp_notes__fail"]
require_approval = ["mcp_notes__get"]
"""


@pytest.mark.parametrize("transport,mode", COMBOS)
async def test_bridged_tools_obey_deny_exclude_and_require_approval(
    paddock_factory, transport: str, mode: str
) -> None:
    p = paddock_factory(transport, mode, policy_extra=POLICY_ON_BRIDGED)
    refuse = Elicitor("decline")
    async with p.client(elicitation_callback=refuse) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        # deny: gone for the agent and for scripts.
        assert "mcp_notes__fail" not in tools
        assert "mcp_notes__fail(" not in (tools["run_tools_script"].description or "")
        denied = await run_script(c, "await tools.mcp_notes__fail(message='x')")
        assert denied["ok"] is False, denied
        # exclude: the agent may call it, a script may not.
        assert "mcp_notes__pid" in tools
        assert "mcp_notes__pid(" not in (tools["run_tools_script"].description or "")
        direct = await c.call_tool("mcp_notes__pid", {})
        assert not direct.is_error and payload(direct)["ok"] is True, direct
        excluded = await run_script(c, "await tools.mcp_notes__pid()")
        assert excluded["ok"] is False, excluded
        # require_approval: a human is asked; declined means not run.
        r = await c.call_tool("mcp_notes__get", {"note_id": 1})
        assert_denied(r)
        assert len(refuse.asked) == 1 and "mcp_notes__get" in refuse.asked[0].message
    approve = Elicitor("accept", "once")
    async with p.client(elicitation_callback=approve) as c:
        out = await run_script(c, "(await tools.mcp_notes__get(note_id=1))['ok']")
        assert script_ok(out) is True
        assert len(approve.asked) == 1


# --- 10. a long call keeps telling the client it is alive ---------------------------------------


@pytest.mark.parametrize("transport,mode", COMBOS)
async def test_long_call_sends_heartbeats(
    paddock_factory, transport: str, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Clients give up on a silent call (Claude Code after 300 s); the server's period is 30 s,
    # shortened here.
    monkeypatch.setenv("PADDOCK_MCP_HEARTBEAT_MS", "300")
    p = paddock_factory(transport, mode)
    seen: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(message or "")

    async with p.client() as c:
        r = await c.call_tool("terminal", {"command": "sleep 1.6; echo done"}, progress_callback=on_progress)
    assert not r.is_error and "done" in payload(r)["output"], r
    beats = [m for m in seen if "terminal still running" in m]
    assert len(beats) >= 3, seen
