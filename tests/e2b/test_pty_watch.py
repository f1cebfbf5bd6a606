"""The unmodified `e2b` SDK's PTY, directory watching and pause/resume against
`paddock serve --e2b` (DESIGN section 10; docs/e2b.md), on template "base" and, with
PADDOCK_TEST_POLICY naming a docker backend, "docker" (conftest.py).
"""

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request

import pytest

from conftest import KEY


@pytest.fixture
def sandbox(server, template, request):
    from e2b import Sandbox

    sbx = Sandbox.create(template=template, metadata={"test": request.node.name[:40]})
    yield sbx
    try:
        sbx.kill()
    except Exception:
        pass


def _until(predicate, timeout=15.0, what="the condition"):
    deadline = time.time() + timeout
    while not predicate():
        if time.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _read_pty(handle):
    """The PTY's output as it comes (a thread drains the handle until the PTY ends)."""
    out = bytearray()

    def drain():
        try:
            handle.wait(on_pty=out.extend)
        except Exception:
            pass  # a killed PTY ends with a non-zero exit

    thread = threading.Thread(target=drain, daemon=True)
    thread.start()
    return out, thread


def test_pty_echoes_input_resizes_and_is_killed(sandbox):
    from e2b import PtySize

    handle = sandbox.pty.create(PtySize(rows=24, cols=80), envs={"PTY_VAR": "from-envs"})
    out, reader = _read_pty(handle)

    sandbox.pty.send_stdin(handle.pid, b"echo typed-$((6*7)) $PTY_VAR\n")
    _until(lambda: b"typed-42 from-envs" in out, what=f"the command's output in {bytes(out)!r}")
    # The terminal echoes what was typed, as typed.
    assert b"echo typed-$((6*7)) $PTY_VAR" in out
    # Output comes as PTY data: a terminal's line ends.
    assert b"typed-42 from-envs\r\n" in out

    sandbox.pty.send_stdin(handle.pid, b"stty size\n")
    _until(lambda: b"24 80" in out, what=f"the start size in {bytes(out)!r}")
    sandbox.pty.resize(handle.pid, PtySize(rows=30, cols=100))
    sandbox.pty.send_stdin(handle.pid, b"stty size\n")
    _until(lambda: b"30 100" in out, what=f"the new size in {bytes(out)!r}")

    # StreamInput: the chunks arrive in order.
    sandbox.pty.stream_input(handle.pid, [b"echo stream", "ed-$((1+1))\n"])
    _until(lambda: b"streamed-2" in out, what=f"streamed input's output in {bytes(out)!r}")

    assert sandbox.pty.kill(handle.pid)
    reader.join(timeout=15)
    assert not reader.is_alive()
    assert not sandbox.pty.kill(handle.pid)


def test_pty_in_a_directory(sandbox):
    from e2b import PtySize

    sandbox.files.make_dir("ptydir")
    handle = sandbox.pty.create(PtySize(rows=10, cols=60), cwd="ptydir")
    out, reader = _read_pty(handle)
    sandbox.pty.send_stdin(handle.pid, b"echo in:$(basename $PWD)\n")
    _until(lambda: b"in:ptydir" in out, what=f"the directory in {bytes(out)!r}")
    # Exiting the shell ends the PTY.
    sandbox.pty.send_stdin(handle.pid, b"exit 0\n")
    reader.join(timeout=15)
    assert not reader.is_alive()


def _collect(handle, want, timeout=15.0):
    """Events from a polling watcher until every (name, type) of `want` was seen."""
    seen = []

    def have():
        seen.extend((e.name, e.type.value) for e in handle.get_new_events())
        return set(want) <= set(seen)

    _until(have, timeout=timeout, what=f"{want} among {seen}")
    return seen


def test_watch_dir_sees_create_write_chmod_rename_remove(sandbox):
    sandbox.files.make_dir("w/sub")
    handle = sandbox.files.watch_dir("w", recursive=True)

    sandbox.files.write("w/a.txt", "one")
    _collect(handle, {("a.txt", "create"), ("a.txt", "write")})

    sandbox.files.write("w/a.txt", "two, longer")
    _collect(handle, {("a.txt", "write")})

    sandbox.commands.run("chmod 600 w/a.txt")
    _collect(handle, {("a.txt", "chmod")})

    sandbox.files.rename("w/a.txt", "w/b.txt")
    _collect(handle, {("a.txt", "rename"), ("b.txt", "create")})

    sandbox.files.write("w/sub/deep.txt", "deep")
    _collect(handle, {("sub/deep.txt", "create")})

    sandbox.files.remove("w/b.txt")
    seen = _collect(handle, {("b.txt", "remove")})
    assert ("b.txt", "write") not in seen

    handle.stop()
    from e2b.exceptions import SandboxException

    with pytest.raises(SandboxException):
        handle.get_new_events()


def test_watch_dir_one_level_unless_recursive(sandbox):
    sandbox.files.make_dir("flat/sub")
    handle = sandbox.files.watch_dir("flat")
    sandbox.files.write("flat/sub/hidden-deep.txt", "x")
    sandbox.files.write("flat/top.txt", "x")
    seen = _collect(handle, {("top.txt", "create")})
    time.sleep(0.6)
    seen += [(e.name, e.type.value) for e in handle.get_new_events()]
    assert not any(name.startswith("sub/") for name, _ in seen), seen
    handle.stop()


def test_watch_dir_of_a_missing_directory_is_not_found(sandbox):
    from e2b.exceptions import NotFoundException

    with pytest.raises(NotFoundException):
        sandbox.files.watch_dir("no-such-dir")


def test_async_watch_dir_streams_events(server, template):
    from e2b import AsyncSandbox

    async def main():
        sbx = await AsyncSandbox.create(template=template)
        try:
            await sbx.files.make_dir("aw")
            seen = []
            handle = await sbx.files.watch_dir(
                "aw", on_event=lambda e: seen.append((e.name, e.type.value)), recursive=True
            )

            async def until(pair):
                for _ in range(150):
                    if pair in seen:
                        return
                    await asyncio.sleep(0.1)
                raise AssertionError(f"{pair} not among {seen}")

            await sbx.files.write("aw/f.txt", "hi")
            await until(("f.txt", "create"))
            await sbx.files.make_dir("aw/d")
            await sbx.files.write("aw/d/g.txt", "deep")
            await until(("d/g.txt", "create"))
            await sbx.files.remove("aw/f.txt")
            await until(("f.txt", "remove"))
            await handle.stop()
        finally:
            await sbx.kill()

    asyncio.run(main())


def _rest(server, method, path):
    req = urllib.request.Request(server + path, method=method, data=b"{}")
    req.add_header("Content-Type", "application/json")
    req.add_header("X-API-KEY", KEY)
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def test_pause_then_connect_keeps_files_and_processes(server, template):
    from e2b import Sandbox, SandboxQuery, SandboxState

    sbx = Sandbox.create(template=template)
    try:
        sbx.files.write("kept.txt", "still here")
        bg = sbx.commands.run(
            "i=0; while :; do i=$((i+1)); echo $i > counter.txt; sleep 0.1; done",
            background=True,
        )
        _until(lambda: sbx.files.exists("counter.txt"), what="the counter")
        # Past the second a pause waits for a command just started to launch.
        time.sleep(1.2)

        before = int(sbx.files.read("counter.txt"))
        assert sbx.pause() is True
        assert Sandbox.pause(sbx.sandbox_id) is False  # already paused
        assert not sbx.is_running()
        paused = Sandbox.list(query=SandboxQuery(state=[SandboxState.PAUSED])).next_items()
        assert sbx.sandbox_id in {s.sandbox_id for s in paused}
        running = Sandbox.list(query=SandboxQuery(state=[SandboxState.RUNNING])).next_items()
        assert sbx.sandbox_id not in {s.sandbox_id for s in running}
        assert sbx.get_info().state == SandboxState.PAUSED
        time.sleep(1.5)  # fifteen counts, were it running

        again = Sandbox.connect(sbx.sandbox_id)
        assert again.is_running()
        assert again.get_info().state == SandboxState.RUNNING
        # Frozen while paused: the counter went on from where it was.
        assert int(again.files.read("counter.txt")) <= before + 3
        assert again.files.read("kept.txt") == "still here"
        assert bg.pid in {p.pid for p in again.commands.list()}
        first = int(again.files.read("counter.txt"))
        _until(lambda: int(again.files.read("counter.txt")) > first + 2, what="the counter again")
        assert again.commands.kill(bg.pid)
    finally:
        sbx.kill()


def test_pause_and_resume_over_rest(server, template):
    from e2b import Sandbox

    sbx = Sandbox.create(template=template)
    try:
        h = sbx.commands.run("touch started; sleep 0.8; echo woke", background=True)
        # Launched before the pause (a docker exec cannot start in a paused container).
        _until(lambda: sbx.files.exists("started"), what="the command's start")
        assert _rest(server, "POST", f"/sandboxes/{sbx.sandbox_id}/pause")[0] == 204
        assert _rest(server, "POST", f"/sandboxes/{sbx.sandbox_id}/pause")[0] == 409
        time.sleep(1.2)
        status, body = _rest(server, "POST", f"/sandboxes/{sbx.sandbox_id}/resume")
        assert status == 201, body
        assert json.loads(body)["sandboxID"] == sbx.sandbox_id
        assert _rest(server, "POST", f"/sandboxes/{sbx.sandbox_id}/resume")[0] == 409
        # The stream opened before the pause goes on to the command's end.
        assert h.wait().stdout == "woke\n"
        assert _rest(server, "POST", "/sandboxes/nope/pause")[0] == 404
    finally:
        sbx.kill()
