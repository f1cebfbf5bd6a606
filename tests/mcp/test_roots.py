"""The client's workspace: the first `file://` root an MCP client announces becomes its session's
workspace. `terminal` starts there, and the workspace-write sandbox lets commands write there and
nowhere else; a `workspace` the policy names wins. Legacy clients are asked with `roots/list` and
may announce a change (`notifications/roots/list_changed`); 2026-07-28 clients are asked once per
session through an `input_required` round (MRTR), which the official client answers from the same
callback. Evidence is checked on disk: the file a command wrote, where it was written."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from conftest import COMBOS

pytestmark = pytest.mark.anyio


def roots_of(*dirs: Path) -> Any:
    """A list_roots callback answering with `dirs` (mutable: the test changes it)."""
    from mcp import types

    current = list(dirs)

    async def callback(_context: Any) -> Any:
        return types.ListRootsResult(roots=[types.Root(uri=d.as_uri(), name=d.name) for d in current])

    callback.current = current  # type: ignore[attr-defined]
    return callback


def structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result
    data = result.structured_content
    if data is None:
        data = json.loads(result.content[0].text)
    return data


@pytest.fixture
def sandboxed(paddock_factory):
    """make(transport, mode, **options): `paddock serve` with the workspace-write sandbox and a
    short PADDOCK_HOME (the session agent's socket path must fit in 107 bytes)."""
    homes: list[Path] = []

    def make(transport: str, mode: str, **options: Any) -> Any:
        home = Path(tempfile.mkdtemp(prefix="pdr-"))
        homes.append(home)
        return paddock_factory(transport, mode, sandbox="workspace-write", home=home, **options)

    yield make
    for home in homes:
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def projects():
    """make(name) -> a new project directory under /var/tmp: outside the server's own directory
    (its cwd, the default workspace), its PADDOCK_HOME, and /tmp (the sandbox has a private
    /tmp, so a directory there would not even exist for a command and prove nothing)."""
    base = Path(tempfile.mkdtemp(prefix="paddock-roots-", dir="/var/tmp"))

    def make(name: str) -> Path:
        d = base / name
        d.mkdir()
        return d

    yield make
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("transport,mode", COMBOS)
async def test_the_first_root_is_where_terminal_starts_and_may_write(
    sandboxed, projects, transport: str, mode: str
) -> None:
    p = sandboxed(transport, mode)
    proj = projects("alpha")
    elsewhere = projects("beta")
    async with p.client(list_roots_callback=roots_of(proj)) as c:
        out = structured(await c.call_tool("terminal", {"command": "pwd; echo hi > made.txt"}))
        assert out["output"].splitlines()[0] == str(proj), out
        assert (proj / "made.txt").read_text() == "hi\n"
        # The sandbox's writable place is the root, not the server's own directory any more.
        out = structured(await c.call_tool("terminal", {"command": f"ls -d {elsewhere}; touch {elsewhere}/x; echo rc=$?"}))
        # The directory is there (the system is visible, read-only), the write is refused.
        assert out["output"].splitlines()[0] == str(elsewhere), out
        assert "rc=0" not in out["output"], out
        assert not (elsewhere / "x").exists()
        assert not (p.workdir / "made.txt").exists()


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_legacy_client_changing_its_roots_moves_the_workspace(
    sandboxed, projects, transport: str
) -> None:
    p = sandboxed(transport, "legacy")
    first = projects("first")
    second = projects("second")
    callback = roots_of(first)
    async with p.client(list_roots_callback=callback) as c:
        out = structured(await c.call_tool("terminal", {"command": "pwd"}))
        assert out["output"].strip() == str(first), out
        callback.current[:] = [second]
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # roots are deprecated by 2026-07-28, not in legacy
            await c.send_roots_list_changed()
        # The notification is handled before the next request on the same connection; the next
        # call asks again.
        out = structured(await c.call_tool("terminal", {"command": "pwd; echo 2 > two.txt"}))
        assert out["output"].splitlines()[0] == str(second), out
        assert (second / "two.txt").exists()
        out = structured(await c.call_tool("terminal", {"command": f"echo no > {first}/late.txt; echo rc=$?"}))
        assert "rc=0" not in out["output"], out
        assert not (first / "late.txt").exists(), "the old workspace is still writable"


@pytest.mark.parametrize("transport,mode", COMBOS)
async def test_a_workspace_the_policy_names_wins(
    sandboxed, projects, transport: str, mode: str
) -> None:
    pinned = projects("pinned")
    proj = projects("client")
    p = sandboxed(transport, mode)
    # The policy names the workspace: the client's root changes nothing.
    text = p.policy.read_text().replace(
        'sandbox = "workspace-write"', f'sandbox = "workspace-write"\nworkspace = {json.dumps(str(pinned))}'
    )
    p.policy.write_text(text)
    if transport == "http":
        p.stop()
        p._log = open(p.log_path, "a", buffering=1)  # noqa: SIM115 - closed by stop()
        p.start()
    async with p.client(list_roots_callback=roots_of(proj)) as c:
        out = structured(await c.call_tool("terminal", {"command": "pwd; touch here"}))
        assert out["output"].splitlines()[0] == str(pinned), out
        assert (pinned / "here").exists() and not (proj / "here").exists()


@pytest.mark.parametrize("transport,mode", COMBOS)
async def test_a_client_without_roots_keeps_the_default_workspace(
    sandboxed, transport: str, mode: str
) -> None:
    p = sandboxed(transport, mode)
    async with p.client() as c:
        out = structured(await c.call_tool("terminal", {"command": "pwd"}))
        assert out["output"].strip() == str(p.workdir.resolve()), out


@pytest.mark.parametrize("transport,mode", COMBOS)
async def test_a_system_directory_is_never_taken_as_workspace(
    sandboxed, transport: str, mode: str
) -> None:
    p = sandboxed(transport, mode)
    async with p.client(list_roots_callback=roots_of(Path("/etc"))) as c:
        out = structured(await c.call_tool("terminal", {"command": "pwd"}))
        assert out["output"].strip() == str(p.workdir.resolve()), out
    assert "was not taken" in p.log_path.read_text(), p.log_tail()
