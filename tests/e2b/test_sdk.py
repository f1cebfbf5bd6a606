"""The unmodified `e2b` SDK against `paddock serve --e2b` (DESIGN section 10).

Run: scripts/test-e2b.sh (after `cargo build --release -p paddock-cli`). The server is started
by conftest.py on a free loopback port with a PADDOCK_HOME of its own; only loopback is
contacted. With PADDOCK_TEST_POLICY naming a policy with a `docker` backend, sandboxes are also
made from template "docker".
"""

import sys
import time
import urllib.error
import urllib.request

import pytest


@pytest.fixture
def sandbox(server, template, request):
    from e2b import Sandbox

    sbx = Sandbox.create(template=template, metadata={"test": request.node.name[:40]})
    yield sbx
    try:
        sbx.kill()
    except Exception:
        pass


def _ended_by_kill(handle):
    """Reads a killed command's stream to its end (an httpx-based SDK left with an unread
    stream can deadlock its connection pool when the stream is collected) and checks that it
    did not end as a success."""
    from e2b.sandbox.commands.command_handle import CommandExitException

    with pytest.raises(CommandExitException) as ended:
        handle.wait()
    assert ended.value.exit_code != 0


def test_create_and_info(sandbox):
    info = sandbox.get_info()
    assert info.sandbox_id == sandbox.sandbox_id
    assert sandbox.is_running()


def test_unknown_template_lists_templates(server):
    from e2b import Sandbox
    from e2b.exceptions import SandboxException

    with pytest.raises(SandboxException) as err:
        Sandbox.create(template="no-such-template")
    assert "base" in str(err.value)


def test_two_sandboxes_are_isolated(server):
    from e2b import Sandbox

    a, b = Sandbox.create(), Sandbox.create()
    try:
        a.files.write("only-in-a.txt", "a")
        a.commands.run("echo secret > /tmp/a-tmp.txt")
        assert a.files.exists("only-in-a.txt")
        assert not b.files.exists("only-in-a.txt")
        assert b.commands.run("test -e /tmp/a-tmp.txt || echo absent").stdout.strip() == "absent"
        # Nor through a's home by its absolute path: every sandbox sees only its own home.
        a_home = a.commands.run("pwd").stdout.strip()
        assert a_home and a.commands.run(f"cat {a_home}/only-in-a.txt").stdout == "a"
        seen = b.commands.run(f"test -e {a_home}/only-in-a.txt && echo visible || echo hidden")
        assert seen.stdout.strip() == "hidden"
        listing = b.commands.run(f"ls -A {a_home}/.. 2>/dev/null; true").stdout.split()
        assert a_home.rstrip("/").rsplit("/", 1)[-1] not in listing, listing
    finally:
        a.kill()
        b.kill()


def test_run_streams_stdout_and_stderr(sandbox):
    out, err = [], []
    r = sandbox.commands.run(
        "echo one; echo two >&2; sleep 0.3; echo three",
        on_stdout=out.append,
        on_stderr=err.append,
    )
    assert r.exit_code == 0
    assert r.stdout == "one\nthree\n"
    assert r.stderr == "two\n"
    assert "".join(out) == "one\nthree\n"
    assert "".join(err) == "two\n"


def test_nonzero_exit_raises(sandbox):
    from e2b.sandbox.commands.command_handle import CommandExitException

    with pytest.raises(CommandExitException) as err:
        sandbox.commands.run("echo out; echo bad >&2; exit 3")
    assert err.value.exit_code == 3
    assert err.value.stderr == "bad\n"


def test_env_and_cwd(sandbox):
    sandbox.files.make_dir("sub")
    r = sandbox.commands.run("echo $GREETING; pwd", envs={"GREETING": "hello"}, cwd="sub")
    lines = r.stdout.splitlines()
    assert lines[0] == "hello"
    assert lines[1].endswith("/sub")


def test_create_envs_reach_commands(server):
    from e2b import Sandbox

    sbx = Sandbox.create(envs={"FROM_CREATE": "it's here"})
    try:
        assert sbx.commands.run("echo $FROM_CREATE").stdout == "it's here\n"
        h = sbx.commands.run("echo $FROM_CREATE", background=True)
        assert h.wait().stdout == "it's here\n"
    finally:
        sbx.kill()


def test_background_wait_and_kill(sandbox):
    h = sandbox.commands.run("sleep 0.5; echo done", background=True)
    assert h.pid > 0
    r = h.wait()
    assert r.stdout == "done\n"
    long = sandbox.commands.run("sleep 60", background=True)
    assert any(p.pid == long.pid for p in sandbox.commands.list())
    assert long.kill()
    assert not any(p.pid == long.pid for p in sandbox.commands.list())
    _ended_by_kill(long)


def test_a_command_past_its_timeout_is_killed(sandbox):
    started = time.time()
    # The SDK's TimeoutException, or (e2b 2.26 on httpx) its transport's read timeout, which
    # fires with the server's deadline.
    with pytest.raises(Exception) as err:
        sandbox.commands.run("echo begun > killed-marker; sleep 30; echo late >> killed-marker", timeout=1)
    assert "timeout" in type(err.value).__name__.lower(), repr(err.value)
    assert time.time() - started < 15
    time.sleep(0.5)
    assert sandbox.files.read("killed-marker") == "begun\n"
    assert sandbox.commands.list() == []


def test_input_to_a_command_started_without_stdin_is_refused(sandbox):
    h = sandbox.commands.run("sleep 30", background=True)
    with pytest.raises(Exception) as err:
        sandbox.commands.send_stdin(h.pid, "x\n")
    assert "stdin" in str(err.value)
    assert h.kill()
    _ended_by_kill(h)


def test_a_command_without_a_timeout_runs_on_and_is_listed_and_killed(sandbox):
    h = sandbox.commands.run("sleep 60", background=True, timeout=0)
    assert any(p.pid == h.pid for p in sandbox.commands.list())
    assert sandbox.commands.kill(h.pid)
    assert not any(p.pid == h.pid for p in sandbox.commands.list())
    _ended_by_kill(h)


def test_two_clients_follow_one_command_to_its_end(sandbox):
    h = sandbox.commands.run("sleep 0.5; echo one; sleep 0.5; echo two; exit 4", background=True)
    again = sandbox.commands.connect(h.pid)
    from e2b.sandbox.commands.command_handle import CommandExitException

    for handle in (h, again):
        with pytest.raises(CommandExitException) as err:
            handle.wait()
        assert err.value.exit_code == 4
        assert err.value.stdout.endswith("two\n")


def test_stdin(sandbox):
    h = sandbox.commands.run("read line; echo got:$line", background=True, stdin=True)
    sandbox.commands.send_stdin(h.pid, "hi there\n")
    r = h.wait()
    assert r.stdout == "got:hi there\n"


def test_close_stdin(sandbox):
    from importlib.metadata import version

    if not hasattr(sandbox.commands, "close_stdin"):
        pytest.skip(f"e2b {version('e2b')} has no commands.close_stdin (the SDK added it later)")
    h = sandbox.commands.run("cat", background=True, stdin=True)
    sandbox.commands.send_stdin(h.pid, "abc")
    sandbox.commands.close_stdin(h.pid)
    assert h.wait().stdout == "abc"


def test_connect_to_running_command(sandbox):
    h = sandbox.commands.run("sleep 0.5; echo later", background=True)
    again = sandbox.commands.connect(h.pid)
    assert again.wait().stdout == "later\n"


def test_files_bytes_exact(sandbox):
    data = bytes(range(256)) * 40 + b"\r\n--boundary\r\n\x00"
    sandbox.files.write("dir/blob.bin", data)
    assert sandbox.files.read("dir/blob.bin", format="bytes") == data
    sandbox.files.write("/tmp/t.txt", "text ✓")
    assert sandbox.files.read("/tmp/t.txt") == "text ✓"


def test_files_list_exists_remove_rename_make_dir(sandbox):
    assert sandbox.files.make_dir("d1/d2")
    assert not sandbox.files.make_dir("d1/d2")  # already there
    sandbox.files.write("d1/a.txt", "a")
    names = sorted(e.name for e in sandbox.files.list("d1"))
    assert names == ["a.txt", "d2"]
    deep = sorted(e.path.rsplit("/d1/", 1)[1] for e in sandbox.files.list("d1", depth=2))
    assert deep == ["a.txt", "d2"]
    entry = sandbox.files.get_info("d1/a.txt")
    assert entry.size == 1 and entry.type.value == "file" and entry.path.startswith("/")
    moved = sandbox.files.rename("d1/a.txt", "d1/b.txt")
    assert moved.name == "b.txt"
    assert not sandbox.files.exists("d1/a.txt")
    assert sandbox.files.exists("d1/b.txt")
    sandbox.files.remove("d1")
    assert not sandbox.files.exists("d1")


def test_download_url_signed(sandbox):
    sandbox.files.write("/tmp/signed.txt", "signed")
    with urllib.request.urlopen(sandbox.download_url("/tmp/signed.txt")) as r:
        assert r.read() == b"signed"


def test_an_expired_signed_url_is_refused_as_expired(sandbox):
    import inspect

    if "use_signature_expiration" not in inspect.signature(sandbox.download_url).parameters:
        pytest.skip("this e2b has no use_signature_expiration")
    sandbox.files.write("/tmp/expired.txt", "x")
    url = sandbox.download_url("/tmp/expired.txt", use_signature_expiration=-120)
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(url)
    assert err.value.code == 401
    assert b"signature is already expired" in err.value.read()


def test_a_gzip_upload_is_stored_as_its_content(sandbox):
    import inspect

    if "gzip" not in inspect.signature(sandbox.files.write).parameters:
        from importlib.metadata import version

        pytest.skip(f"e2b {version('e2b')} has no files.write(gzip=...)")
    data = bytes(range(256)) * 64
    sandbox.files.write("zipped.bin", data, gzip=True)
    assert bytes(sandbox.files.read("zipped.bin", format="bytes")) == data


def test_removing_a_missing_path_succeeds_as_in_envd(sandbox):
    sandbox.files.remove("never-there.txt")
    sandbox.files.remove("never-there-dir/sub")


def test_a_command_of_a_killed_sandbox_ends_with_the_sandbox_gone(server):
    from e2b import Sandbox
    from e2b.exceptions import TimeoutException

    sbx = Sandbox.create()
    h = sbx.commands.run("sleep 60", background=True)
    sbx.kill()
    started = time.time()
    # SandboxNotRunningException (a TimeoutException) in the SDKs that probe /health; the
    # others say the stream ended because the sandbox is unavailable.
    with pytest.raises(Exception) as err:
        h.wait()
    assert time.time() - started < 30
    assert isinstance(err.value, TimeoutException) or "unavailable" in str(err.value), repr(err.value)
    import e2b.exceptions

    if hasattr(e2b.exceptions, "SandboxNotRunningException"):
        # This SDK probes /health and tells a sandbox that is gone from one unreachable.
        assert isinstance(err.value, e2b.exceptions.SandboxNotRunningException), repr(err.value)


def test_list_with_metadata_filter(server):
    from e2b import Sandbox, SandboxQuery

    a = Sandbox.create(metadata={"suite": "list", "which": "a"})
    b = Sandbox.create(metadata={"suite": "list", "which": "b"})
    try:
        ids = {s.sandbox_id for s in Sandbox.list(query=SandboxQuery(metadata={"suite": "list"})).next_items()}
        assert {a.sandbox_id, b.sandbox_id} <= ids
        only = Sandbox.list(query=SandboxQuery(metadata={"which": "b"})).next_items()
        assert [s.sandbox_id for s in only] == [b.sandbox_id]
    finally:
        a.kill()
        b.kill()


def test_list_is_newest_first_and_pages_and_filters(server):
    import inspect
    import uuid
    from datetime import timedelta

    from e2b import Sandbox, SandboxQuery

    tag = uuid.uuid4().hex
    a = Sandbox.create(metadata={"tag": tag})
    time.sleep(1.1)
    b = Sandbox.create(metadata={"tag": tag})
    query = SandboxQuery(metadata={"tag": tag})
    try:
        ids = lambda page: [s.sandbox_id for s in page.next_items()]  # noqa: E731
        assert ids(Sandbox.list(query=query)) == [b.sandbox_id, a.sandbox_id]
        pages = Sandbox.list(query=query, limit=1)
        assert ids(pages) == [b.sandbox_id] and pages.has_next
        assert ids(pages) == [a.sandbox_id] and not pages.has_next
        if "order" in inspect.signature(Sandbox.list).parameters:
            assert ids(Sandbox.list(query=query, order="asc")) == [a.sandbox_id, b.sandbox_id]
        fields = SandboxQuery.__dataclass_fields__ if hasattr(SandboxQuery, "__dataclass_fields__") else {}
        if "started_after" in fields:
            after = SandboxQuery(metadata={"tag": tag},
                                 started_after=a.get_info().started_at + timedelta(seconds=1))
            assert ids(Sandbox.list(query=after)) == [b.sandbox_id]
        if "template" in fields:
            other = SandboxQuery(metadata={"tag": tag}, template="no-such-template")
            assert ids(Sandbox.list(query=other)) == []
    finally:
        a.kill()
        b.kill()


def test_set_timeout_ends_the_sandbox(server):
    from e2b import Sandbox

    sbx = Sandbox.create()
    sbx.set_timeout(2)
    time.sleep(3.5)
    assert not sbx.is_running()
    assert sbx.sandbox_id not in {s.sandbox_id for s in Sandbox.list().next_items()}


def test_a_sandbox_made_to_pause_at_its_end_is_paused_then_resumed_by_connect(server):
    import inspect

    from e2b import Sandbox

    if "lifecycle" not in inspect.signature(Sandbox.create).parameters:
        from importlib.metadata import version

        pytest.skip(f"e2b {version('e2b')} has no lifecycle= (on_timeout)")
    sbx = Sandbox.create(timeout=3, lifecycle={"on_timeout": "pause", "auto_resume": False})
    try:
        sbx.files.write("kept.txt", "still here")
        deadline = time.time() + 20
        while Sandbox.get_info(sbx.sandbox_id).state.value != "paused":
            assert time.time() < deadline, "not paused 20 s after its end"
            time.sleep(0.5)
        again = Sandbox.connect(sbx.sandbox_id, timeout=60)
        assert again.get_info().state.value == "running"
        assert again.files.read("kept.txt") == "still here"
        assert again.commands.run("echo alive").stdout == "alive\n"
    finally:
        Sandbox.kill(sbx.sandbox_id)


def test_kill(server):
    from e2b import Sandbox

    sbx = Sandbox.create()
    sbx.commands.run("sleep 100", background=True)
    assert sbx.kill()
    assert not sbx.is_running()
    assert not Sandbox.kill(sbx.sandbox_id)


def test_connect_by_id(server):
    from e2b import Sandbox

    sbx = Sandbox.create()
    try:
        sbx.files.write("/tmp/c.txt", "c")
        again = Sandbox.connect(sbx.sandbox_id)
        assert again.files.read("/tmp/c.txt") == "c"
    finally:
        sbx.kill()


def test_wrong_api_key_is_401(server):
    from e2b import Sandbox
    from e2b.exceptions import AuthenticationException

    with pytest.raises(AuthenticationException):
        Sandbox.create(api_key="e2b_" + "f" * 40)
    req = urllib.request.Request(server + "/process.Process/List", method="POST", data=b"{}")
    req.add_header("Content-Type", "application/json")
    req.add_header("E2b-Sandbox-Id", "nope")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req)
    assert err.value.code in (401, 502)


def test_wrong_access_token_is_401(sandbox, server):
    req = urllib.request.Request(server + "/process.Process/List", method="POST", data=b"{}")
    req.add_header("Content-Type", "application/json")
    req.add_header("E2b-Sandbox-Id", sandbox.sandbox_id)
    req.add_header("X-Access-Token", "wrong")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req)
    assert err.value.code == 401


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
