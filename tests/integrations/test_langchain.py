"""`paddock.integrations.langchain.PaddockSandbox` against LangChain's own standard suite
(`langchain_tests.integration_tests.SandboxIntegrationTests`, langchain-tests 1.1.9 with
deepagents 0.6.12), with the real `paddock` binary and the built-in default policy (the
sandboxed local backend), plus the adapter's own rules (DESIGN.md section 9) and a Deep Agents
agent (a scripted model) whose tools run in the sandbox.

The suite's async tests are plain `async def` methods: this module marks every test for
pytest-asyncio, so they run without `-o asyncio_mode=auto` too (the mark on a sync test is a
warning, filtered here).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Iterator, List

import pytest

# The suite is imported, never skipped: a framework that is not installed fails the run.
# Without tests/integrations/conftest.py (which does the same): a state directory of the run's
# own, set before any engine starts.
if not os.environ.get("PADDOCK_HOME"):
    os.environ["PADDOCK_HOME"] = tempfile.mkdtemp(prefix="paddock-langchain-")
    os.environ.pop("PADDOCK_POLICY", None)

import paddock  # noqa: E402
import paddock.integrations.langchain as adapter  # noqa: E402
from deepagents.backends.protocol import (  # noqa: E402
    FileDownloadResponse,
    FileUploadResponse,
    SandboxBackendProtocol,
    execute_accepts_timeout,
)
from deepagents.backends.sandbox import BaseSandbox  # noqa: E402
from langchain_tests.integration_tests import SandboxIntegrationTests  # noqa: E402
from paddock.integrations.langchain import PaddockSandbox  # noqa: E402

pytestmark = [
    pytest.mark.asyncio,
    pytest.mark.filterwarnings("ignore:The test .* is marked with '@pytest.mark.asyncio' but it is not an async"),
]


# ---------------------------------------------------------------------- the suite


class TestPaddockSandboxStandard(SandboxIntegrationTests):
    """The standard suite, unchanged, on an adapter that starts its own engine (the built-in
    default policy: the sandboxed local backend)."""

    @pytest.fixture(scope="class")
    def sandbox(self) -> Iterator[SandboxBackendProtocol]:
        backend = PaddockSandbox()
        try:
            yield backend
        finally:
            backend.close()


# ---------------------------------------------------------------------- the adapter's rules


@pytest.fixture(scope="module")
def shared_engine() -> Iterator[paddock.Engine]:
    """One engine for the tests that give `engine=`; the adapter never closes it."""
    engine = paddock.Engine()
    try:
        yield engine
    finally:
        engine.close()


@pytest.fixture
def fresh(shared_engine: paddock.Engine) -> Iterator[PaddockSandbox]:
    sandbox = PaddockSandbox(shared_engine)
    try:
        yield sandbox
    finally:
        sandbox.close()


def _ended(engine: paddock.Engine, session_id: str) -> bool:
    try:
        engine.connect(session_id)
    except paddock.SessionNotFound:
        return True
    return False


def test_constructor_does_no_io(shared_engine: paddock.Engine) -> None:
    sandbox = PaddockSandbox(policy="no/such/policy.toml", backend="nowhere")
    assert isinstance(sandbox, BaseSandbox) and isinstance(sandbox, SandboxBackendProtocol)
    assert execute_accepts_timeout(PaddockSandbox)
    assert sandbox.engine is None and sandbox.session is None
    assert sandbox.id.startswith("deepagents-")
    assert PaddockSandbox().id != sandbox.id
    assert "not started" in repr(sandbox)
    # The engine starts on first use: that is where a missing policy shows.
    with pytest.raises(paddock.EngineStartError, match="policy"):
        sandbox.execute("true")
    sandbox.close()

    attached = PaddockSandbox(shared_engine, session="deepagents-given")
    assert attached.id == "deepagents-given" and attached.session is None

    with pytest.raises(ValueError, match="not both"):
        PaddockSandbox(shared_engine, policy="policy.toml")
    with pytest.raises(TypeError):
        PaddockSandbox("policy.toml")  # type: ignore[arg-type]


def test_working_directory_is_the_sessions_own(shared_engine: paddock.Engine) -> None:
    with PaddockSandbox(shared_engine) as one, PaddockSandbox(shared_engine) as two:
        wd = one.working_dir
        assert wd == f"/tmp/paddock-workspace-{one.id}"
        assert two.working_dir == f"/tmp/paddock-workspace-{two.id}"
        assert wd != os.path.realpath(os.getcwd())
        assert one.execute("pwd -P").output.strip() == wd

        # Relative paths resolve there, for commands and the file tools built on them.
        assert one.execute("echo one > rel.txt && mkdir -p sub").exit_code == 0
        assert one.download_files([f"{wd}/rel.txt"]) == [
            FileDownloadResponse(path=f"{wd}/rel.txt", content=b"one\n", error=None)
        ]
        found = one.grep("one")
        assert found.error is None and [m["path"] for m in found.matches or []] == ["./rel.txt"]
        assert sorted(e["path"] for e in one.ls(wd).entries or []) == [f"{wd}/rel.txt", f"{wd}/sub"]

        # A command's `cd` does not carry over; the directory is made again if removed.
        assert one.execute("cd / && pwd").output.strip() == "/"
        assert one.execute("pwd -P").output.strip() == wd
        assert one.execute(f"cd / && rm -rf {wd}").exit_code == 0
        assert one.execute("pwd -P && ls -A | wc -l").output.split() == [wd, "0"]
        assert one.execute("echo one > rel.txt").exit_code == 0

        # Private: the other session sees neither the file nor the directory (its /tmp is its own) ...
        assert two.execute(f"test -e {wd}").exit_code != 0
        # ... the caller's current directory stays as it was, and on the host it lies in the
        # state directory, under the session's private /tmp.
        assert not os.path.exists("rel.txt")
        host = Path(os.environ["PADDOCK_HOME"]) / "sandbox-tmp" / one.id / f"paddock-workspace-{one.id}" / "rel.txt"
        assert host.read_bytes() == b"one\n"


def test_output_exit_code_and_refusals(fresh: PaddockSandbox) -> None:
    result = fresh.execute("echo out; echo err >&2; exit 3")
    assert result.exit_code == 3 and result.truncated is False
    assert "out\n" in result.output and "err\n" in result.output

    assert fresh.execute("cat; echo eof").output == "eof\n"  # stdin is at end of file
    assert fresh.execute("export KEPT=yes").exit_code == 0
    assert fresh.execute("echo $KEPT").output == "yes\n"  # the session's shell state

    for bad in ("", "   "):
        empty = fresh.execute(bad)
        assert empty.exit_code == 1 and "non-empty" in empty.output

    # The built-in policy refuses a hardline command: a response, never run.
    refused = fresh.execute("rm -rf /")
    assert refused.exit_code == adapter.REFUSED_EXIT_CODE
    assert "refused" in refused.output


def test_long_output_keeps_head_and_tail(fresh: PaddockSandbox) -> None:
    size = adapter.MAX_OUTPUT_CHARS + 1024 * 1024
    result = fresh.execute(f"printf a; head -c {size - 2} /dev/zero | tr '\\0' x; printf z")
    assert result.exit_code == 0 and result.truncated is True
    assert result.output.startswith("ax") and result.output.endswith("xz")
    assert "1048576 characters of output left out" in result.output
    assert len(result.output) < adapter.MAX_OUTPUT_CHARS + 1000


def test_output_buffer() -> None:
    out = adapter._Output(limit=10)
    for chunk in ("abc", "defg", "hij"):
        out.add(chunk)
    assert not out.truncated and out.text() == "abcdefghij"
    out.add("klm")
    assert out.truncated and out.dropped == 3
    assert out.text().startswith("abcde\n\n[... 3 characters") and out.text().endswith("]\n\nijklm")


def test_timeouts(fresh: PaddockSandbox) -> None:
    started = time.monotonic()
    result = fresh.execute("echo started; sleep 30", timeout=1)
    assert time.monotonic() - started < 15
    assert result.exit_code == adapter.TIMEOUT_EXIT_CODE
    assert result.output.startswith("started\n") and "timed out after 1 seconds" in result.output
    # 0 is "no timeout", which Paddock has not: its longest, 3600 s.
    assert fresh.execute("echo ok", timeout=0).output == "ok\n"
    assert adapter._terminal_timeout(0) == adapter._terminal_timeout(10**6) == adapter.MAX_TIMEOUT
    with pytest.raises(ValueError):
        fresh.execute("true", timeout=-1)


async def test_async_timeout_and_cancellation(fresh: PaddockSandbox) -> None:
    result = await fresh.aexecute("echo started; sleep 30", timeout=1)
    assert result.exit_code == adapter.TIMEOUT_EXIT_CODE and result.output.startswith("started\n")

    # Cancelling aexecute cancels the request: Paddock kills the command.
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(fresh.aexecute("sleep 2 && touch finished.txt"), 0.5)
    await asyncio.sleep(3)
    assert (await fresh.aexecute("test -e finished.txt")).exit_code == 1


def _file_cases(sandbox: PaddockSandbox) -> str:
    wd = sandbox.working_dir
    setup = sandbox.execute("mkdir -p dir && echo secret > locked && chmod 000 locked && echo x > file")
    assert setup.exit_code == 0
    return wd


def test_file_errors(fresh: PaddockSandbox) -> None:
    wd = _file_cases(fresh)
    uploads = fresh.upload_files(
        [
            (f"{wd}/good.bin", bytes(range(256))),
            ("relative.txt", b"x"),
            (f"{wd}/dir", b"x"),
            (f"{wd}/file/child", b"x"),
            (f"{wd}/trailing/", b"x"),
            ("/usr/paddock-test", b"x"),
            (f"{wd}/new/deep/empty", b""),
        ]
    )
    assert [(r.path, r.error) for r in uploads] == [
        (f"{wd}/good.bin", None),
        ("relative.txt", "invalid_path"),
        (f"{wd}/dir", "is_directory"),
        (f"{wd}/file/child", "invalid_path"),
        (f"{wd}/trailing/", "invalid_path"),
        ("/usr/paddock-test", "permission_denied"),
        (f"{wd}/new/deep/empty", None),
    ]
    downloads = fresh.download_files(
        [
            f"{wd}/good.bin",
            "rel/path.txt",
            f"{wd}/missing",
            f"{wd}/dir",
            f"{wd}/locked",
            f"{wd}/file/child",
            f"{wd}/new/deep/empty",
        ]
    )
    assert downloads == [
        FileDownloadResponse(path=f"{wd}/good.bin", content=bytes(range(256)), error=None),
        FileDownloadResponse(path="rel/path.txt", content=None, error="invalid_path"),
        FileDownloadResponse(path=f"{wd}/missing", content=None, error="file_not_found"),
        FileDownloadResponse(path=f"{wd}/dir", content=None, error="is_directory"),
        FileDownloadResponse(path=f"{wd}/locked", content=None, error="permission_denied"),
        FileDownloadResponse(path=f"{wd}/file/child", content=None, error="file_not_found"),
        FileDownloadResponse(path=f"{wd}/new/deep/empty", content=b"", error=None),
    ]


async def test_async_file_errors(fresh: PaddockSandbox) -> None:
    wd = await asyncio.get_running_loop().run_in_executor(None, _file_cases, fresh)
    uploads = await fresh.aupload_files([(f"{wd}/a.bin", b"\x00\xff"), ("a.bin", b"x"), (f"{wd}/dir", b"x")])
    assert uploads == [
        FileUploadResponse(path=f"{wd}/a.bin", error=None),
        FileUploadResponse(path="a.bin", error="invalid_path"),
        FileUploadResponse(path=f"{wd}/dir", error="is_directory"),
    ]
    downloads = await fresh.adownload_files([f"{wd}/a.bin", f"{wd}/locked", f"{wd}/missing"])
    assert [(r.content, r.error) for r in downloads] == [
        (b"\x00\xff", None),
        (None, "permission_denied"),
        (None, "file_not_found"),
    ]


class _CountingEngine(paddock.Engine):
    started: List["_CountingEngine"] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        type(self).started.append(self)
        super().__init__(*args, **kwargs)


def test_first_use_starts_once_under_concurrent_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(adapter, "Engine", _CountingEngine)
    _CountingEngine.started = []
    sandbox = PaddockSandbox()
    barrier = threading.Barrier(8)
    outputs: List[str] = []

    def first_call() -> None:
        barrier.wait()
        outputs.append(sandbox.execute("pwd -P").output)

    threads = [threading.Thread(target=first_call) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert len(_CountingEngine.started) == 1 and sandbox.engine is _CountingEngine.started[0]
        assert outputs == [f"/tmp/paddock-workspace-{sandbox.id}\n"] * 8
    finally:
        sandbox.close()


async def test_async_first_use_starts_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(adapter, "Engine", _CountingEngine)
    _CountingEngine.started = []
    sandbox = PaddockSandbox()
    try:
        results = await asyncio.gather(*(sandbox.aexecute("pwd -P") for _ in range(8)))
        assert len(_CountingEngine.started) == 1
        assert {r.output for r in results} == {f"/tmp/paddock-workspace-{sandbox.id}\n"}
    finally:
        await sandbox.aclose()


def test_attach_by_session_id_and_close(shared_engine: paddock.Engine) -> None:
    first = PaddockSandbox(shared_engine)
    path = f"{first.working_dir}/data.bin"
    assert first.upload_files([(path, bytes(range(256)))])[0].error is None

    second = PaddockSandbox(shared_engine, session=first.id)
    assert second.id == first.id and second.working_dir == first.working_dir
    assert second.download_files([path])[0].content == bytes(range(256))

    second.close()  # ends the session, not the shared engine
    assert _ended(shared_engine, first.id)
    with pytest.raises(paddock.SessionNotFound):
        second.execute("true")
    with pytest.raises(paddock.SessionNotFound):
        second.download_files([path])
    second.close()  # twice: nothing
    first.close()  # the session is gone already: nothing to end
    with shared_engine.session() as other:
        assert other.run("echo alive").stdout == "alive\n"

    # Attaching never creates: a session that is not live fails on first use.
    missing = PaddockSandbox(shared_engine, session="deepagents-not-live")
    with pytest.raises(paddock.SessionNotFound):
        missing.execute("true")
    missing.close()
    assert _ended(shared_engine, "deepagents-not-live")


def test_close_attached_before_first_use(shared_engine: paddock.Engine) -> None:
    owner = PaddockSandbox(shared_engine)
    owner.execute("true")
    PaddockSandbox(shared_engine, session=owner.id).close()
    assert _ended(shared_engine, owner.id)
    owner.close()


def test_close_ends_session_and_own_engine(shared_engine: paddock.Engine) -> None:
    unused = PaddockSandbox()
    unused.close()
    assert unused.engine is None  # closing before first use starts nothing

    sandbox = PaddockSandbox()
    assert sandbox.execute("echo hi").output == "hi\n"
    engine, session_id = sandbox.engine, sandbox.id
    assert engine is not None and "live" in repr(sandbox)
    sandbox.close()
    assert sandbox.engine is None and "closed" in repr(sandbox)
    with pytest.raises(paddock.EngineClosed):
        engine.call_sync("terminal", command="true")
    assert _ended(shared_engine, session_id)  # sessions live in the state directory
    with pytest.raises(paddock.SessionNotFound):
        sandbox.execute("true")
    with pytest.raises(paddock.SessionNotFound):
        sandbox.upload_files([("/tmp/x", b"x")])

    with PaddockSandbox(shared_engine) as block:
        block.execute("true")
    assert _ended(shared_engine, block.id)


async def test_async_with_closes(shared_engine: paddock.Engine) -> None:
    async with PaddockSandbox(shared_engine) as sandbox:
        assert (await sandbox.aexecute("echo hi")).output == "hi\n"
    assert _ended(shared_engine, sandbox.id)
    with pytest.raises(paddock.SessionNotFound):
        await sandbox.aexecute("true")


def test_policy_and_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    policy = tmp_path / "two.toml"
    policy.write_text(
        "[backends.first]\nkind = 'local'\nsandbox = 'workspace-write'\nworkspace = '.'\n\n"
        "[backends.second]\nkind = 'local'\nsandbox = 'workspace-write'\nworkspace = '.'\n\n"
        "[routes]\nterminal = 'first'\n"
    )
    monkeypatch.chdir(tmp_path)
    routed = PaddockSandbox(policy="two.toml", backend="second")  # relative to the directory now
    monkeypatch.chdir(tmp_path.parent)
    default = PaddockSandbox(policy=str(policy))
    try:
        assert routed.execute("echo $PADDOCK_LOCAL_SESSION").output.startswith("second.")
        assert default.execute("echo $PADDOCK_LOCAL_SESSION").output.startswith("first.")
        assert routed.working_dir == f"/tmp/paddock-workspace-{routed.id}"
    finally:
        routed.close()
        default.close()

    engine = paddock.Engine(policy=str(policy))
    try:
        with PaddockSandbox(engine, backend="second") as on_shared:
            assert on_shared.execute("echo $PADDOCK_LOCAL_SESSION").output.startswith("second.")
        with pytest.raises(paddock.EngineStartError, match="no such backend"):
            PaddockSandbox(engine, backend="nope").execute("true")
    finally:
        engine.close()


def test_close_removes_a_working_dir_outside_a_private_tmp(tmp_path: Path) -> None:
    """On a local backend without the sandbox, /tmp is the machine's: the directory is still the
    session's own by name, and close() removes it."""
    policy = tmp_path / "unconfined.toml"
    policy.write_text("[backends.local]\nkind = 'local'\nsandbox = 'none'\nworkspace = '.'\n")
    sandbox = PaddockSandbox(policy=str(policy))
    wd = sandbox.working_dir
    assert wd == f"/tmp/paddock-workspace-{sandbox.id}" and os.path.isdir(wd)
    assert sandbox.execute("echo x > f && pwd -P").output == f"{wd}\n"
    sandbox.close()
    assert not os.path.exists(wd)


def test_a_deep_agent_uses_the_sandbox(fresh: PaddockSandbox) -> None:
    """`create_deep_agent(backend=PaddockSandbox(...))` with a scripted model: its execute,
    write_file and read_file tools run in the Paddock session."""
    from deepagents import create_deep_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, ToolMessage

    class Scripted(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> "Scripted":
            return self

    wd = fresh.working_dir

    def call(name: str, **args: Any) -> AIMessage:
        tool_call = {"name": name, "args": args, "id": f"call-{name}", "type": "tool_call"}
        return AIMessage(content="", tool_calls=[tool_call])

    script = iter(
        [
            call("execute", command="echo hello > greeting.txt && pwd -P"),
            call("write_file", file_path=f"{wd}/notes.md", content="# notes\n"),
            call("read_file", file_path=f"{wd}/greeting.txt"),
            AIMessage(content="done"),
        ]
    )
    agent = create_deep_agent(model=Scripted(messages=script), backend=fresh)
    state = agent.invoke({"messages": [{"role": "user", "content": "go"}]})
    tools = {m.name: str(m.content) for m in state["messages"] if isinstance(m, ToolMessage)}
    assert tools["execute"].startswith(f"{wd}\n") and "exit code 0" in tools["execute"]
    assert "hello" in tools["read_file"]
    assert fresh.execute("cat notes.md").output == "# notes\n"
    assert state["messages"][-1].content == "done"
