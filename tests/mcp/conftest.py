"""Fixtures for the tests of `paddock serve` (the MCP server), driven by the official Python SDK.

Run (see README.md):
    env=$(scripts/mcp-test-env.sh)
    PADDOCK_BIN=target/release/paddock $env/venv/bin/python -m pytest tests/mcp -q

Every test gets its own policy file and PADDOCK_HOME under its tmp dir. The policy bridges two
real MCP servers (tests/mcp/servers/): "notes" in bridge mode, "weather" in lazy mode.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
SERVERS = HERE / "servers"
NOTES_SERVER = SERVERS / "notes_server.py"
WEATHER_SERVER = SERVERS / "weather_server.py"
# The fixture servers run with the interpreter running the tests: the venv that has `mcp`.
PYTHON = sys.executable
PADDOCK_BIN = Path(os.environ.get("PADDOCK_BIN") or REPO / "target" / "release" / "paddock")

MODES = ("legacy", "2026-07-28")
TRANSPORTS = ("stdio", "http")
SERVING_LINE = re.compile(r"paddock: serving MCP on (http://\S+)")
DEFAULT_TIMEOUT_S = 120  # per test (pytest-timeout); every wait inside is bounded more tightly

# An "ask" rule for the approval tests: `rm -rf <anything>/victim` needs a human. (The built-in
# catalogue lets `rm -rf <tmpdir>` run, and its hardline rules could never be approved.)
VICTIM_RULE = r"""
[[approval.rules]]
id = "test-victim"
pattern = '\brm\s+-rf\s+\S*/victim\b'
severity = "dangerous"
description = "deleting a test's victim directory"
"""


def _toml_str(s: str | os.PathLike[str]) -> str:
    return json.dumps(str(s))  # a JSON string is a valid TOML basic string for paths and such


def policy_text(
    *, codemode_timeout: float | None = None, extra: str = "", terminal: str = "local", sandbox: str = "none"
) -> str:
    codemode = f"[codemode]\ntimeout_seconds = {codemode_timeout}\n\n" if codemode_timeout else ""
    return f"""# written by tests/mcp/conftest.py
{codemode}[approval]
mode = "ask"
{VICTIM_RULE}
[backends.local]
kind = "local"
sandbox = "{sandbox}"

[routes]
terminal = "{terminal}"
process = "local"
python_execute = "local"

[mcp.servers.notes]
command = {_toml_str(PYTHON)}
args = [{_toml_str(NOTES_SERVER)}]
mode = "bridge"

[mcp.servers.weather]
command = {_toml_str(PYTHON)}
args = [{_toml_str(WEATHER_SERVER)}]
mode = "lazy"
{extra}"""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(DEFAULT_TIMEOUT_S))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def paddock_bin() -> Path:
    if not os.access(PADDOCK_BIN, os.X_OK):
        pytest.fail(f"no paddock binary at {PADDOCK_BIN}: build it (cargo build --release) or set PADDOCK_BIN")
    return PADDOCK_BIN


class Paddock:
    """One `paddock serve` configuration: stdio (a new server process per client) or HTTP (one
    server process, started by `start()`, stopped by `stop()`)."""

    def __init__(
        self,
        binary: Path,
        transport: str,
        mode: str,
        workdir: Path,
        *,
        codemode_timeout: float | None = None,
        policy_extra: str = "",
        terminal_backend: str = "local",
        sandbox: str = "none",  # the local backend's: none | workspace-write | read-only
        home: Path | None = None,
        token: str | None = None,
        allow_origins: tuple[str, ...] = (),
    ) -> None:
        assert transport in TRANSPORTS and mode in MODES, (transport, mode)
        self.binary = binary
        self.transport = transport
        self.mode = mode
        self.workdir = workdir
        # A short home where agent sockets must fit in 107 bytes (pytest's tmp paths do not).
        self.home = home or workdir / "paddock-home"
        self.home.mkdir(parents=True, exist_ok=True)
        self.policy = workdir / "policy.toml"
        self.policy.write_text(
            policy_text(
                codemode_timeout=codemode_timeout, extra=policy_extra, terminal=terminal_backend, sandbox=sandbox
            )
        )
        self.token = token
        self.allow_origins = allow_origins
        self.log_path = workdir / "paddock-serve.log"
        self._log = open(self.log_path, "a", buffering=1)  # noqa: SIM115 - closed in stop()
        self.proc: subprocess.Popen[bytes] | None = None
        self.url: str | None = None

    # -- environment -----------------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        env = {"PADDOCK_HOME": str(self.home), "RUST_BACKTRACE": "1"}
        for key in ("PATH", "HOME", "USER", "LOGNAME", "LANG", "RUST_LOG", "PADDOCK_MCP_HEARTBEAT_MS"):
            if key in os.environ:
                env[key] = os.environ[key]
        if self.token is not None:
            env["PADDOCK_MCP_TOKEN"] = self.token
        return env

    def serve_args(self) -> list[str]:
        args = ["serve", "--policy", str(self.policy)]
        if self.transport == "http":
            args += ["--http", "127.0.0.1:0"]
            for origin in self.allow_origins:
                args += ["--allow-origin", origin]
        return args

    # -- HTTP server lifecycle -------------------------------------------------------------------
    def start(self, timeout: float = 30.0) -> None:
        assert self.transport == "http"
        self.proc = subprocess.Popen(
            [str(self.binary), *self.serve_args()],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.PIPE,
            env=self.env(),
            cwd=self.workdir,
            start_new_session=True,  # its own process group: stop() can end what it started
        )
        found = threading.Event()
        proc = self.proc

        def pump() -> None:
            assert proc.stderr is not None
            for raw in proc.stderr:
                line = raw.decode(errors="replace")
                self._log.write(line)
                m = SERVING_LINE.search(line)
                if m and not found.is_set():
                    self.url = m.group(1)
                    found.set()

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + timeout
        while not found.wait(0.05):
            if proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(
                    f"paddock serve --http did not print its URL within {timeout} s "
                    f"(exit status {proc.returncode}); log:\n{self.log_tail()}"
                )
        # The line should come after the listener is bound; make sure it accepts connections.
        hostport = urllib.parse.urlsplit(self.url)
        while True:
            try:
                socket.create_connection((hostport.hostname, hostport.port), timeout=1).close()
                break
            except OSError as e:
                if proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise AssertionError(
                        f"{self.url} does not accept connections ({e}); log:\n{self.log_tail()}"
                    ) from e
                time.sleep(0.05)

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        if proc is not None:
            # Whatever it started and left behind in its own process group (bridged servers).
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if not self._log.closed:
            self._log.close()

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    @property
    def base_url(self) -> str:
        assert self.url, "the HTTP server is not started"
        return self.url

    # -- clients ---------------------------------------------------------------------------------
    def client(
        self,
        *,
        elicitation_callback: Any = None,
        logging_callback: Any = None,
        message_handler: Any = None,
        list_roots_callback: Any = None,
        headers: dict[str, str] | None = None,
        read_timeout_seconds: float = 90.0,
    ) -> Any:
        """An un-entered `mcp.Client` (use `async with`). For HTTP with a token, the right
        `Authorization` header is sent unless `headers` says otherwise."""
        from mcp import Client

        kwargs: dict[str, Any] = {
            "mode": self.mode,
            "read_timeout_seconds": read_timeout_seconds,
        }
        if elicitation_callback is not None:
            kwargs["elicitation_callback"] = elicitation_callback
        if logging_callback is not None:
            kwargs["logging_callback"] = logging_callback
        if message_handler is not None:
            kwargs["message_handler"] = message_handler
        if list_roots_callback is not None:
            kwargs["list_roots_callback"] = list_roots_callback
        return Client(self.transport_cm(headers), **kwargs)

    def transport_cm(self, headers: dict[str, str] | None = None) -> Any:
        if self.transport == "stdio":
            from mcp.client.stdio import StdioServerParameters, stdio_client

            params = StdioServerParameters(
                command=str(self.binary), args=self.serve_args(), env=self.env(), cwd=str(self.workdir)
            )
            return stdio_client(params, errlog=self._log)
        if headers is None:
            headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        return _http_transport(self.base_url, headers)


@asynccontextmanager
async def _http_transport(url: str, headers: dict[str, str]) -> AsyncIterator[Any]:
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async with create_mcp_http_client(headers=headers) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            yield streams


@pytest.fixture
def paddock_factory(paddock_bin: Path, tmp_path: Path):
    """make(transport, mode, **options) -> Paddock, started when HTTP; stopped at teardown."""
    made: list[Paddock] = []

    def make(transport: str, mode: str, **options: Any) -> Paddock:
        workdir = tmp_path / f"paddock-{len(made)}"
        workdir.mkdir()
        p = Paddock(paddock_bin, transport, mode, workdir, **options)
        made.append(p)
        if transport == "http":
            p.start()
        return p

    yield make
    for p in made:
        p.stop()
        # Shown by pytest only when the test failed.
        print(f"--- {p.log_path} (last lines) ---\n{p.log_tail()}")


COMBOS = [pytest.param(t, m, id=f"{t}-{m}") for t in TRANSPORTS for m in MODES]
"""For tests that build their own configuration: @pytest.mark.parametrize("transport,mode", COMBOS)."""


@pytest.fixture(params=[(t, m) for t in TRANSPORTS for m in MODES], ids=[f"{t}-{m}" for t in TRANSPORTS for m in MODES])
def paddock(request: pytest.FixtureRequest, paddock_factory) -> Paddock:
    """The default configuration, once per transport x protocol mode."""
    transport, mode = request.param
    return paddock_factory(transport, mode)
