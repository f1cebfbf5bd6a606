"""Sessions from Python (DESIGN.md 8.1), in three layers:

1. the pure parts, no engine: the error table, the background-log follower (a UTF-8
   character the engine read half of is never given), stream bookkeeping, command lines,
   answers read into results;
2. the plumbing against `fake_embed.py`, a scripted stand-in for `paddock embed`: streamed
   output reaches callbacks in order, in the caller's thread or task, before the command ends;
   requests name their session; closing; typed errors; an engine too old for sessions;
3. every 8.1 item against the real engine this wheel installed.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import pickle
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, Iterator, List, Tuple

import pytest

import paddock
from paddock import _session as ps
from paddock._errors import ERROR_TABLE, error_class, error_from

pytestmark = pytest.mark.timeout(120)

FAKE = Path(__file__).with_name("fake_embed.py")
STREAM_PAUSE = 0.6  # fake_embed.STREAM_PAUSE


# ================================================================== 1. pure parts


@pytest.mark.parametrize(
    "code, message, cls, builtin",
    [
        ("sessions:not_found", "no session", paddock.SessionNotFound, LookupError),
        ("file:not_found", "x: No such file", paddock.FileNotFound, FileNotFoundError),
        ("file:not_directory", "x: Not a directory", paddock.NotADirectory, NotADirectoryError),
        ("file:permission_denied", "x: Permission denied", paddock.PermissionDenied, PermissionError),
        ("tool:not_allowed", "the policy hides it", paddock.PermissionDenied, PermissionError),
        ("tool_approval:denied", "denied", paddock.ApprovalDenied, PermissionError),
        ("backend:unavailable", "down", paddock.BackendUnavailable, paddock.ToolError),
        (
            "tool:failed",
            "the apptainer backend 'gone' is not available: could not start the command",
            paddock.BackendUnavailable,
            paddock.ToolError,
        ),
        ("command:timeout", "timed out", paddock.CommandTimeout, TimeoutError),
    ],
)
def test_the_error_table_gives_each_code_its_class(code: str, message: str, cls: type, builtin: type) -> None:
    err = error_from(code, message)
    assert type(err) is cls
    assert isinstance(err, builtin) and isinstance(err, paddock.ToolError) and isinstance(err, paddock.PaddockError)
    assert (err.code, err.message, str(err)) == (code, message, f"{code}: {message}")
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is cls and again.code == code and again.message == message


def test_codes_outside_the_table_stay_plain_tool_errors() -> None:
    for code, message in [("tool:failed", "boom"), ("file:exists", "x exists"), ("tool:invalid_arguments", "x")]:
        assert type(error_from(code, message)) is paddock.ToolError
    # One table: every class it names is a ToolError, and it names each 8.1 class.
    classes = {row[2] for row in ERROR_TABLE}
    assert all(issubclass(c, paddock.ToolError) for c in classes)
    assert {
        paddock.CommandTimeout,
        paddock.SessionNotFound,
        paddock.FileNotFound,
        paddock.NotADirectory,
        paddock.PermissionDenied,
        paddock.ApprovalDenied,
        paddock.BackendUnavailable,
    } <= classes
    assert error_class("tool_approval:denied") is paddock.ApprovalDenied
    assert issubclass(paddock.ApprovalDenied, paddock.PermissionDenied)


def test_the_error_names_are_importable_as_before() -> None:
    from paddock._engine import EngineClosed, EngineStartError, PaddockError, ToolError

    assert (ToolError, PaddockError, EngineClosed, EngineStartError) == (
        paddock.ToolError,
        paddock.PaddockError,
        paddock.EngineClosed,
        paddock.EngineStartError,
    )
    err = paddock.ToolError("tool:failed", "boom")
    assert (err.code, err.message, str(err)) == ("tool:failed", "boom", "tool:failed: boom")
    timeout = paddock.CommandTimeout("command:timeout", "late", "out", "err")
    assert (timeout.stdout, timeout.stderr) == ("out", "err")
    assert paddock.FileNotFound("file:not_found", "x").errno == 2


def test_a_background_stream_reader_moves_each_offset_and_ends_when_all_is_read() -> None:
    reader = ps.StreamReader()
    assert reader.args(5) == {"stdout_offset": 0, "stderr_offset": 0, "timeout": 5}
    first = {"state": "running", "stdout": "a\u20ac", "stderr": "", "stdout_offset": 4, "stderr_offset": 0}
    assert reader.take(first) == ("a\u20ac", "", False)
    assert reader.args(0)["stdout_offset"] == 4
    ended = {"state": "exited", "stdout": "b", "stderr": "e", "stdout_offset": 5, "stderr_offset": 1, "more": True}
    assert reader.take(ended) == ("b", "e", False)
    last = {"state": "exited", "stdout": "", "stderr": "", "stdout_offset": 5, "stderr_offset": 1, "more": False}
    assert reader.take(last) == ("", "", True)
    assert ("".join(reader.texts["stdout"]), "".join(reader.texts["stderr"])) == ("a\u20acb", "e")


def test_streams_keep_order_per_stream_and_pick_the_callback() -> None:
    got: List[Tuple[str, str]] = []
    streams = ps.OutputStreams(lambda t: got.append(("out", t)), lambda t: got.append(("err", t)))
    for stream, text in [("stdout", "a"), ("stderr", "b"), ("stdout", "c"), ("stdout", "")]:
        streams.handle_sync({"type": "output", "id": 1, "stream": stream, "text": text})
    assert got == [("out", "a"), ("err", "b"), ("out", "c")]
    assert streams.texts("merged, ignored") == ("ac", "b")
    assert streams.unstreamed("merged") is None
    # An engine that sent no `output` messages: the merged output is stdout.
    quiet = ps.OutputStreams(got.append)
    assert quiet.texts("merged") == ("merged", "")
    assert quiet.unstreamed("merged") == (got.append, "merged")
    assert quiet.unstreamed("") is None


def test_a_list_command_is_an_argv() -> None:
    words = ["printf", "%s|", "a b", "$HOME", "it's", ";", "*", Path("/x y")]
    line = ps.command_line(words)
    assert shlex.split(line) == [str(w) for w in words]
    out = subprocess.run(["bash", "-c", line], capture_output=True, text=True).stdout
    assert out == "a b|$HOME|it's|;|*|/x y|"
    assert ps.command_line("echo $HOME") == "echo $HOME"
    with pytest.raises(ValueError):
        ps.command_line([])


def test_terminal_arguments_carry_only_what_was_given() -> None:
    args = ps.terminal_args("ls", cwd=None, env=None, timeout=None, background=False, pty=False, stdin=None)
    assert args == {"command": "ls"}
    args = ps.terminal_args(
        ["ls", "-la"], cwd=Path("/w"), env={"N": 1}, timeout=5, background=False, pty=True, stdin=b"in"
    )
    assert args == {"command": "ls -la", "workdir": "/w", "env": {"N": "1"}, "timeout": 5, "pty": True, "stdin": "in"}
    with pytest.raises(ValueError):
        ps.terminal_args("x", cwd=None, env=None, timeout=3, background=True, pty=False, stdin=None)


def test_answers_read_as_results_and_timeouts() -> None:
    streams = ps.OutputStreams()
    streams.take({"stream": "stdout", "text": "o"})
    streams.take({"stream": "stderr", "text": "e"})
    answer = {"output": "oe", "exit_code": 3, "error": None, "duration_ms": 12.5}
    assert ps.command_result(answer, streams) == paddock.CommandResult("o", "e", 3, 12.5)
    # The engine's `timed_out`, and the older engines' exit 124 + "timed out ..." error.
    for late in (
        {"timed_out": True, "exit_code": 124, "error": "x"},
        {"exit_code": 124, "error": "timed out after 1 s"},
    ):
        with pytest.raises(paddock.CommandTimeout) as err:
            ps.command_result({"output": "oe", **late}, streams)
        assert (err.value.stdout, err.value.stderr) == ("o", "e")
    assert not ps.timed_out({"exit_code": 124, "error": None})


def test_an_execution_answer_reads_as_an_execution() -> None:
    answer = {
        "context": "default",
        "execution_count": 3,
        "results": [{"text/plain": "{'a': 1}"}, {"text/plain": "42", "is_main_result": True}],
        "stdout": "out\n",
        "stderr": "",
        "exception": None,
        "timed_out": False,
    }
    x = ps.execution(answer, ps.OutputStreams())
    assert (x.text, x.stdout, x.error, x.execution_count, x.context) == ("42", "out\n", None, 3, "default")
    failed = ps.execution(
        {
            **answer,
            "results": [],
            "exception": {
                "name": "ZeroDivisionError",
                "value": "division by zero",
                "traceback": ["Traceback", "ZeroDivisionError"],
            },
        },
        ps.OutputStreams(),
    )
    assert failed.text is None
    assert failed.error == paddock.ExecutionError(
        "ZeroDivisionError", "division by zero", "Traceback\nZeroDivisionError"
    )
    with pytest.raises(paddock.CommandTimeout) as err:
        ps.execution({**answer, "timed_out": True, "stdout": "so far"}, ps.OutputStreams())
    assert err.value.stdout == "so far"
    with pytest.raises(paddock.ToolError):
        ps.execution({**answer, "error": "the context's process died"}, ps.OutputStreams())


def test_failed_transfers_and_shell_helpers_read_as_typed_errors() -> None:
    def typed(message: str) -> type:
        return type(ps.transfer_error(paddock.ToolError("files:transfer_failed", message)))

    assert typed("in the environment: no such file or directory: nope") is paddock.FileNotFound
    assert typed("in the environment: paddock: line 25: /opt/x: Permission denied") is paddock.PermissionDenied
    assert typed("in the environment: x: Not a directory") is paddock.NotADirectory
    assert typed("cannot run tar on this machine") is paddock.ToolError
    assert ps.shell_failure({"exit_code": 0, "output": ""}) is None
    failure = ps.shell_failure({"exit_code": 1, "output": "mkdir: cannot create directory 'f': File exists\n"})
    assert isinstance(failure, paddock.NotADirectory)


def test_paths_for_the_shell(tmp_path: Path) -> None:
    weird = tmp_path / "a b" / "it's"
    weird.mkdir(parents=True)
    for command in (ps.make_dir_command("new dir/it's/x"), ps.absolute_command("a b/it's")):
        out = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True)
        assert out.returncode == 0, out
    assert (tmp_path / "new dir" / "it's" / "x").is_dir()
    printed = subprocess.run(
        ["bash", "-c", ps.absolute_command("a b/it's")], cwd=tmp_path, capture_output=True, text=True
    )
    assert printed.stdout.strip() == str(weird)
    assert ps.shell_word("~/x y") == "~/'x y'"
    assert ps.split_relative("a/b.txt") == ("a", "b.txt")
    assert ps.split_relative("b.txt") == (".", "b.txt")
    assert ps.split_relative("a/..") == ("a/..", "")
    assert ps.signal_name("sigint") == "INT" and ps.signal_name(9) == "9"
    assert ps.temporary_sibling("/w/a.bin").startswith("/w/.a.bin.paddock-")
    assert ps.file_entry("/w/x", {"kind": "file", "size": 3, "mode": "0644"}).mode == 0o644


def test_a_blocking_session_refuses_async_callbacks() -> None:
    async def cb(text: str) -> None:
        pass

    with pytest.raises(TypeError, match="AsyncSession"):
        paddock.Session(None, "x").run("ls", on_stdout=cb)  # type: ignore[arg-type]


# ================================================================== 2. plumbing (fake engine)


@pytest.fixture
def fake_bin(tmp_path: Path) -> str:
    wrapper = tmp_path / "fake-paddock"
    wrapper.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(FAKE))} "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


@pytest.fixture
def fake(fake_bin: str) -> Iterator[paddock.Engine]:
    with paddock.Engine(binary=fake_bin) as engine:
        yield engine


def test_streamed_output_reaches_callbacks_in_order_in_the_callers_thread_before_the_end(fake: paddock.Engine) -> None:
    seen: List[Tuple[float, str, str, threading.Thread]] = []

    def on(stream: str) -> Any:
        return lambda text: seen.append((time.monotonic(), stream, text, threading.current_thread()))

    s = fake.session("elsewhere")
    result = s.run("stream", on_stdout=on("stdout"), on_stderr=on("stderr"))
    ended = time.monotonic()
    assert [(stream, text) for _, stream, text, _ in seen] == [
        ("stdout", "one\n"),
        ("stderr", "two\n"),
        ("stdout", "thr"),
        ("stdout", "ee\n"),
    ]
    assert seen[0][0] < ended - STREAM_PAUSE / 2, "the first chunk waited for the end"
    assert all(thread is threading.current_thread() for *_, thread in seen)
    assert result == paddock.CommandResult("one\nthree\n", "two\n", 0, 612.5)


def test_async_callbacks_are_awaited_in_order(fake_bin: str) -> None:
    async def main() -> None:
        async with await paddock.Engine.start(binary=fake_bin) as engine:
            s = await engine.asession()
            assert isinstance(s, paddock.AsyncSession) and s.id.startswith("py-")
            seen: List[Tuple[str, str]] = []

            async def out(text: str) -> None:
                await asyncio.sleep(0.01)  # a slow callback does not reorder what follows
                seen.append(("stdout", text))

            result = await s.run("stream", on_stdout=out, on_stderr=lambda t: seen.append(("stderr", t)))
            assert seen == [("stdout", "one\n"), ("stderr", "two\n"), ("stdout", "thr"), ("stdout", "ee\n")]
            assert (result.stdout, result.stderr) == ("one\nthree\n", "two\n")
            with pytest.raises(paddock.CommandTimeout) as err:
                await s.run("timeout")
            assert (err.value.stdout, err.value.stderr) == ("partial\n", "err\n")

    asyncio.run(main())


def test_sync_methods_work_from_a_plain_thread_and_a_running_loops_pool(fake: paddock.Engine) -> None:
    s = fake.session()
    from_thread: List[paddock.CommandResult] = []
    t = threading.Thread(target=lambda: from_thread.append(s.run("stream")))
    t.start()
    t.join(30)
    assert from_thread and from_thread[0].stderr == "two\n"

    async def main() -> paddock.CommandResult:
        chunks: List[str] = []
        loop = asyncio.get_running_loop()
        result = await loop.run_in_executor(None, lambda: s.run("stream", on_stdout=chunks.append))
        assert chunks == ["one\n", "thr", "ee\n"]
        return result

    assert asyncio.run(main()).stdout == "one\nthree\n"


def test_a_timeout_keeps_what_was_written_apart(fake: paddock.Engine) -> None:
    with pytest.raises(paddock.CommandTimeout) as err:
        fake.session("x").run("timeout")
    assert isinstance(err.value, TimeoutError)
    assert (err.value.stdout, err.value.stderr) == ("partial\n", "err\n")


def test_requests_name_their_session_unless_it_is_the_engines_own(fake: paddock.Engine) -> None:
    own = fake.session(fake.session_id)
    sent = json.loads(own.run("shape").stdout)
    assert "session" not in sent and sent["stream"] is True and sent["args"] == {"command": "shape"}
    other = fake.session("task-17")
    sent = json.loads(other.run(["ls", "a b"], cwd="/w").stdout)
    assert sent["session"] == "task-17" and sent["args"] == {"command": "ls 'a b'", "workdir": "/w"}


def test_close_ends_the_session_and_its_methods_then_raise_session_not_found(fake: paddock.Engine) -> None:
    with fake.session("short-lived") as s:
        s.run("hello")
        assert fake.connect("short-lived").id == "short-lived"
    with pytest.raises(paddock.SessionNotFound):
        s.run("hello")
    with pytest.raises(paddock.SessionNotFound):
        s.files.read("x")
    with pytest.raises(LookupError):
        fake.connect("short-lived")
    s.close()  # again: nothing to do
    with pytest.raises(paddock.SessionNotFound):
        fake.connect("never-started")


@pytest.mark.parametrize("code, cls", [(r[0], r[2]) for r in ERROR_TABLE if r[1] is None], ids=lambda v: str(v))
def test_each_code_of_a_failed_call_raises_its_class(fake: paddock.Engine, code: str, cls: type) -> None:
    with pytest.raises(cls) as err:
        fake.session("x").run(f"fail {code}")
    assert type(err.value) is cls and err.value.code == code and err.value.message == "scripted failure"


def test_a_callback_that_raises_stops_the_call_and_the_engine_goes_on(fake: paddock.Engine) -> None:
    s = fake.session("x")

    def boom(text: str) -> None:
        raise RuntimeError("callback failed")

    with pytest.raises(RuntimeError, match="callback failed"):
        s.run("stream", on_stdout=boom)
    assert s.run("stream").stdout == "one\nthree\n"


def test_an_engine_older_than_sessions_is_refused_for_other_sessions(fake_bin: str) -> None:
    env = {**os.environ, "PADDOCK_FAKE_OLD": "1"}
    with paddock.Engine(binary=fake_bin, env=env) as engine:
        with pytest.raises(paddock.PaddockError, match="predates sessions"):
            engine.session()
        with pytest.raises(paddock.PaddockError, match="predates sessions"):
            engine.connect("task-17")
        # A Session object made another way (a fork's id) is refused at its first call, not
        # run in the engine's own session.
        with pytest.raises(paddock.PaddockError, match="predates sessions"):
            paddock.Session(engine, "fork-1").run("shape")
        # Its own session needs no routing.
        assert engine.session(engine.session_id).run("stream").stdout == "one\nthree\n"


# ================================================================== 3. the real engine


@pytest.fixture
def engine() -> Iterator[paddock.Engine]:
    with paddock.Engine() as e:
        yield e


@pytest.fixture
def session(engine: paddock.Engine) -> Iterator[paddock.Session]:
    with engine.session() as s:
        yield s


def wait_for(predicate: Any, what: str, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def live_session_ids() -> List[str]:
    out = subprocess.run(
        [paddock.find_paddock_bin(), "sessions", "list"], capture_output=True, text=True, check=True
    ).stdout
    return [json.loads(line)["id"] for line in out.splitlines() if line.strip()]


# ------------------------------------------------------------------ commands


def test_output_streams_as_written_stdout_and_stderr_apart(session: paddock.Session) -> None:
    events: List[Tuple[float, str, str]] = []
    started = time.monotonic()
    result = session.run(
        # Apart in time: two pipes give no order to writes a moment apart.
        "echo one; sleep 1; echo two >&2; sleep 0.3; echo three",
        on_stdout=lambda t: events.append((time.monotonic(), "out", t)),
        on_stderr=lambda t: events.append((time.monotonic(), "err", t)),
    )
    ended = time.monotonic()
    assert (result.stdout, result.stderr, result.exit_code) == ("one\nthree\n", "two\n", 0)
    assert isinstance(result.duration_ms, float) and 900 <= result.duration_ms <= (ended - started) * 1000 + 50
    assert events and events[0][0] < ended - 0.7, "the first chunk did not arrive before the command ended"
    assert "".join(t for _, k, t in events if k == "out") == "one\nthree\n"
    assert "".join(t for _, k, t in events if k == "err") == "two\n"
    order = [k for _, k, t in events if t.strip()]
    assert order.index("err") > 0 and "out" in order[order.index("err") :], events


def test_a_character_split_across_writes_arrives_whole(session: paddock.Session) -> None:
    chunks: List[str] = []
    result = session.run(
        r"printf '\xe2\x82'; sleep 0.3; printf '\xac\n'; printf '\xf0\x9f'; sleep 0.3; printf '\x98\x80\n'",
        on_stdout=chunks.append,
    )
    assert result.stdout == "€\n😀\n" and "".join(chunks) == "€\n😀\n"
    assert len(chunks) >= 2 and not any("\ufffd" in c for c in chunks), chunks


def test_argv_env_cwd_and_exit_codes(session: paddock.Session, private_state: Path) -> None:
    assert session.run(["printf", "%s|", "a b", "$HOME", "it's", ";", "*"]).stdout == "a b|$HOME|it's|;|*|"
    sub = private_state / "sub dir"
    sub.mkdir()
    here = session.run('echo "[$GREETING]"; pwd', env={"GREETING": "hi there"}, cwd=str(sub))
    assert here.stdout == f"[hi there]\n{sub}\n"
    # Both for that command only.
    assert session.run('echo "[$GREETING]"; pwd').stdout == f"[]\n{private_state}\n"
    failed = session.run("echo nope >&2; sh -c 'exit 7'")
    assert (failed.exit_code, failed.stderr) == (7, "nope\n")
    assert session.run("cat", stdin="fed\n").stdout == "fed\n"


def test_megabytes_of_stdin_reach_a_command_that_writes_first_or_never_reads(session: paddock.Session) -> None:
    # More than any socket holds, both ways: the engine feeds the input while it reads the
    # output, and a command that ends without reading is answered as it ended.
    big = "y" * 3_000_000
    r = session.run("head -c 1000000 /dev/zero | tr '\\0' a; echo; wc -c", stdin=big, timeout=60)
    assert r.exit_code == 0 and r.stdout.endswith("\n3000000\n") and len(r.stdout) > 1_000_000
    for _ in range(5):
        r = session.run("echo early", stdin=big, timeout=60)
        assert (r.exit_code, r.stdout) == (0, "early\n")


def agent_pids(home: str) -> List[int]:
    """The sandboxed agents serving sessions of the state directory `home`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"serve" in argv and any(a.startswith(f"{home}/agents/".encode()) for a in argv):
            found.append(int(entry))
    return found


def test_a_command_after_its_agent_died_gets_a_new_agent_and_the_session_state(session: paddock.Session) -> None:
    # The engine keeps its connection to the session's agent open from one command to the
    # next. An agent that died meanwhile (killed; or idle past its time) leaves that
    # connection closed: the next command must notice, start a new agent and lose nothing.
    assert session.run("export KEPT=1; echo one").stdout == "one\n"
    # Until the session's live shell serves (`$$` twice the same): its runs keep the connection.
    shells = [session.run("echo $$").stdout]
    deadline = time.monotonic() + 15
    while len(shells) < 2 or shells[-1] != shells[-2]:
        assert time.monotonic() < deadline, f"no live shell served within 15 s: {shells}"
        time.sleep(0.05)
        shells.append(session.run("echo $$").stdout)
    home = os.environ["PADDOCK_HOME"]
    agents = agent_pids(home)
    assert agents, "no sandboxed agent serves the session"
    for pid in agents:
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not any(pid in agent_pids(home) for pid in agents), "the killed agent to go")
    result = session.run("echo three; echo $KEPT")
    assert (result.stdout, result.exit_code) == ("three\n1\n", 0)
    assert agent_pids(home), "no new agent serves the session"


def test_a_timeout_raises_with_the_output_so_far(session: paddock.Session) -> None:
    with pytest.raises(paddock.CommandTimeout) as err:
        session.run("echo partial; echo oops >&2; sleep 30", timeout=1)
    assert isinstance(err.value, TimeoutError) and isinstance(err.value, paddock.ToolError)
    assert "partial" in err.value.stdout and "oops" in err.value.stderr
    assert session.run("echo after").stdout == "after\n"


def test_a_background_command_stdin_signal_wait_timeout_and_kill(session: paddock.Session) -> None:
    seen: List[str] = []
    seen_err: List[str] = []
    h = session.run(
        "trap 'echo got-INT' INT; echo warn >&2; echo ready; read line; echo \"line:$line\"; while true; do sleep 0.1; done",
        background=True,
        on_stdout=seen.append,
        on_stderr=seen_err.append,
    )
    assert isinstance(h, paddock.CommandHandle) and isinstance(h.pid, int) and h.pid > 0
    # The last line of a running command comes as it is; its newline with the next line.
    wait_for(lambda: "ready" in "".join(seen), "ready")
    h.send_stdin("hello\n")
    wait_for(lambda: "line:hello" in h.stdout, "the line it read")
    h.signal("INT")
    wait_for(lambda: "got-INT" in h.stdout, "the INT trap")
    # stderr apart, as it was written: before the command ends.
    assert h.stderr == "warn\n" and "".join(seen_err) == "warn\n"
    with pytest.raises(paddock.CommandTimeout) as err:
        h.wait(timeout=0.5)
    assert "line:hello" in err.value.stdout
    h.kill()
    result = h.wait(timeout=15)
    assert result.exit_code != 0 and result.stderr == "warn\n"
    assert result.stdout.startswith("ready\nline:hello\n") and "got-INT\n" in result.stdout
    assert "".join(seen) == result.stdout


def test_a_pty_command_is_resized(session: paddock.Session) -> None:
    p = session.run("bash --norc --noprofile", pty=True, background=True)
    try:
        p.send_stdin("stty size\n")
        # A line of a terminal's log may start with escape sequences and a carriage return.
        wait_for(lambda: re.search(r"(?:^|\r)\d+ \d+\s*$", p.stdout, re.M), "a first size")
        p.resize(rows=50, cols=200)
        p.send_stdin("stty size\n")
        wait_for(lambda: re.search(r"(?:^|\r)50 200\s*$", p.stdout, re.M), "the new size")
    finally:
        p.kill()
    p.wait(timeout=15)


# ------------------------------------------------------------------ files


def test_bytes_go_in_and_out_exactly(session: paddock.Session, private_state: Path) -> None:
    blob = bytes(range(256)) * 4 + b"\r\n\x00\xff end"
    target = private_state / "deep" / "er" / "blob.bin"
    session.files.write(str(target), blob)
    assert session.files.read(str(target)) == blob
    assert target.read_bytes() == blob  # the local backend's workspace is this machine's
    session.files.write(str(target), "ünïcode\n")
    assert session.files.read_text(str(target)) == "ünïcode\n"
    assert session.files.read(str(target)) == "ünïcode\n".encode()
    assert os.listdir(target.parent) == ["blob.bin"], "a staging file was left"
    assert session.files.read("deep/er/blob.bin") == "ünïcode\n".encode()  # relative: the session's directory


def test_list_info_exists_make_dir_remove_rename(session: paddock.Session, private_state: Path) -> None:
    files = session.files
    root = private_state / "tree"
    files.make_dir(str(root / "a" / "b"))
    files.make_dir(str(root / "a" / "b"))  # fine when it exists
    files.write(str(root / "a" / "f.txt"), "12345")
    entries = files.list(str(root), depth=2)
    assert [(e.path, e.name, e.kind) for e in entries] == [
        (f"{root}/a", "a", "directory"),
        (f"{root}/a/b", "b", "directory"),
        (f"{root}/a/f.txt", "f.txt", "file"),
    ]
    assert entries[2].size == 5 and all(isinstance(e, paddock.FileEntry) for e in entries)
    assert [e.path for e in files.list(str(root))] == [f"{root}/a"]
    assert [e.path for e in files.list("tree/a")] == [f"{root}/a/b", f"{root}/a/f.txt"]
    info = files.info(str(root / "a" / "f.txt"))
    assert (info.path, info.name, info.kind, info.size, info.mime) == (
        f"{root}/a/f.txt",
        "f.txt",
        "file",
        5,
        "text/plain",
    )
    assert info.mode == (root / "a" / "f.txt").stat().st_mode & 0o7777
    assert abs(info.modified_ms - time.time() * 1000) < 60_000
    assert files.info("tree/a").path == f"{root}/a"
    assert files.exists(str(root / "a" / "f.txt")) and files.exists(str(root / "a"))
    assert not files.exists(str(root / "nope")) and not files.exists(str(root / "a" / "f.txt" / "x"))
    files.rename(str(root / "a" / "f.txt"), str(root / "g.txt"))
    assert files.exists(str(root / "g.txt")) and not files.exists(str(root / "a" / "f.txt"))
    files.write(str(root / "h.txt"), "h")
    with pytest.raises(paddock.ToolError) as err:
        files.rename(str(root / "g.txt"), str(root / "h.txt"))
    assert err.value.code == "file:exists"
    files.rename(str(root / "g.txt"), str(root / "h.txt"), overwrite=True)
    assert files.read_text(str(root / "h.txt")) == "12345"
    with pytest.raises(paddock.NotADirectory):
        files.make_dir(str(root / "h.txt" / "sub"))
    files.remove(str(root / "a"))  # a directory with what is in it
    assert not (root / "a").exists()
    files.remove(str(root / "h.txt"))
    assert files.list(str(root)) == []


def test_watch_yields_events_with_absolute_paths(session: paddock.Session, private_state: Path) -> None:
    watched = private_state / "watched"
    session.files.make_dir(str(watched))
    session.run(
        f"sleep 1; cd {shlex.quote(str(watched))} && echo x > a.txt && echo y >> a.txt && mv a.txt b.txt "
        "&& rm b.txt && mkdir sub && echo z > sub/c.txt",
        background=True,
    )
    started = time.monotonic()
    events = list(session.files.watch(str(watched), recursive=True, timeout=4))
    assert time.monotonic() - started < 10
    assert events and all(isinstance(e, paddock.WatchEvent) for e in events)
    assert all(e.path.startswith(str(watched) + "/") for e in events), events
    kinds = {(Path(e.path).name, e.kind) for e in events}
    assert ("a.txt", "created") in kinds and ("b.txt", "removed") in kinds, events
    assert any(e.path == f"{watched}/sub/c.txt" for e in events), "recursive: the new subdirectory is watched"
    assert {e.kind for e in events} <= {"created", "modified", "removed", "renamed"}


# ------------------------------------------------------------------ code


def test_run_code_keeps_state_returns_the_last_expression_displays_and_errors(session: paddock.Session) -> None:
    x = session.run_code("x = 41\nx + 1", context="default", timeout=30)
    assert isinstance(x, paddock.Execution) and x.error is None
    assert x.text == "42" and x.results[-1]["is_main_result"] is True
    shown = session.run_code("import sys\nprint('out')\nprint('err', file=sys.stderr)\ndisplay({'a': 1})\nx")
    assert (shown.stdout, shown.stderr) == ("out\n", "err\n")
    assert [r.get("text/plain") for r in shown.results] == ["{'a': 1}", "41"]
    assert not shown.results[0].get("is_main_result") and shown.text == "41"
    failed = session.run_code("def f():\n    return 1 / 0\nf()")
    assert failed.error is not None and failed.text is None
    assert (failed.error.name, failed.error.value) == ("ZeroDivisionError", "division by zero")
    assert "ZeroDivisionError" in failed.error.traceback and "f()" in failed.error.traceback
    assert session.run_code("x").text == "41", "an exception does not lose the context"


def test_a_run_code_timeout_keeps_the_context(session: paddock.Session) -> None:
    session.run_code("kept = 7")
    started = time.monotonic()
    with pytest.raises(paddock.CommandTimeout) as err:
        session.run_code("import time\nprint('before', flush=True)\nwhile True:\n    time.sleep(0.05)", timeout=1)
    assert time.monotonic() - started < 10
    assert "before" in err.value.stdout
    assert session.run_code("kept").text == "7"


def test_contexts_are_isolated_and_managed(session: paddock.Session, private_state: Path) -> None:
    session.run_code("v = 'one'", context="one")
    session.run_code("v = 'two'", context="two")
    assert session.run_code("v", context="one").text == "'one'"
    assert session.run_code("v", context="two").text == "'two'"
    (private_state / "ctx").mkdir()
    session.contexts.create("configured", cwd=str(private_state / "ctx"), env={"CTX_VAR": "set"})
    seen = session.run_code("import os\n(os.getcwd(), os.environ.get('CTX_VAR'))", context="configured")
    assert seen.text == repr((str(private_state / "ctx"), "set"))
    ids = {c.get("id") for c in session.contexts.list()}
    assert {"one", "two", "configured"} <= ids
    session.contexts.restart("one")
    assert session.run_code("v", context="one").error.name == "NameError"
    session.contexts.remove("two")
    assert "two" not in {c.get("id") for c in session.contexts.list()}
    with pytest.raises(paddock.ToolError):
        session.contexts.restart("no-such-context")


def test_a_matplotlib_figure_comes_back_as_png(session: paddock.Session) -> None:
    """Needs matplotlib in the session's Python (the local backend's `python3`): missing, this
    fails, unless PADDOCK_SKIP_MATPLOTLIB=1 says that environment has none on purpose."""
    probe = session.run_code("import importlib.util\nimportlib.util.find_spec('matplotlib') is not None")
    if probe.text != "True":
        if os.environ.get("PADDOCK_SKIP_MATPLOTLIB") == "1":
            pytest.skip("matplotlib is left out (PADDOCK_SKIP_MATPLOTLIB=1)")
        pytest.fail(
            "matplotlib is not installed for the session's python3; install it, or set PADDOCK_SKIP_MATPLOTLIB=1"
        )
    x = session.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nNone")
    pngs = [r["image/png"] for r in x.results if "image/png" in r]
    assert pngs and base64.b64decode(pngs[0]).startswith(b"\x89PNG\r\n\x1a\n"), x.results


# ------------------------------------------------------------------ sessions


def test_a_second_process_attaches_by_id_and_sees_the_files(engine: paddock.Engine, private_state: Path) -> None:
    with engine.session() as s:
        shared = private_state / "shared.txt"
        s.files.write(str(shared), "from the first\n")
        s.run("export MARK=first-process")
        code = textwrap.dedent(f"""
            import paddock
            with paddock.Engine() as engine:
                s = engine.connect({s.id!r})
                print(s.files.read_text({str(shared)!r}).strip())
                print(s.run("echo $MARK").stdout.strip())
                s.files.write({str(private_state / "back.txt")!r}, "from the second")
            """)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=90)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split("\n")[:2] == ["from the first", "first-process"]
        # The second engine's close left the session alive.
        assert s.files.read_text(str(private_state / "back.txt")) == "from the second"


def test_with_closes_and_a_closed_session_raises_session_not_found(engine: paddock.Engine) -> None:
    with engine.session() as s:
        s.run("true")
        sid = s.id
        assert sid in live_session_ids()
    assert sid not in live_session_ids()
    for call in (lambda: s.run("true"), lambda: s.files.list("."), lambda: s.run_code("1"), lambda: s.snapshot()):
        with pytest.raises(paddock.SessionNotFound):
            call()
    with pytest.raises(paddock.SessionNotFound):
        engine.connect(sid)
    s.close()  # again: nothing to do


def test_engine_close_leaves_sessions_alive(private_state: Path) -> None:
    with paddock.Engine() as first:
        s = first.session("py-outlives-its-engine")
        s.run("echo kept > kept.txt")
        assert first.connect(s.id).id == s.id
    with paddock.Engine() as second:
        again = second.connect("py-outlives-its-engine")
        assert again.files.read_text("kept.txt") == "kept\n"
        assert second.session("py-outlives-its-engine").run("cat kept.txt").stdout == "kept\n"
        again.close()
        with pytest.raises(paddock.SessionNotFound):
            second.connect("py-outlives-its-engine")


def test_snapshot_fork_and_a_session_from_a_snapshot(engine: paddock.Engine, private_state: Path) -> None:
    with engine.session() as s:
        s.run("mkdir -p w && cd w && echo kept > k.txt && export FROM_PY=yes")
        name = s.snapshot()
        assert isinstance(name, str) and name
        forks = s.fork(2)
        fresh = engine.session(from_snapshot=name)
        made = forks + [fresh]
        assert len({f.id for f in made} | {s.id}) == 4
        for f in made:
            out = f.run("pwd; cat k.txt; echo $FROM_PY; echo mine > m.txt").stdout.split()
            assert out[0].endswith("/w") and out[1:] == ["kept", "yes"], out
            f.close()
        assert not (private_state / "w" / "m.txt").exists()
    with pytest.raises(ValueError):
        engine.session("x", from_snapshot=name)


def test_pause_and_resume(session: paddock.Session) -> None:
    session.run("echo before > p.txt")
    assert isinstance(session.pause(), dict)
    assert isinstance(session.resume(), dict)
    session.pause()
    assert session.run("cat p.txt").stdout == "before\n", "a command resumes a paused session"


def test_a_session_on_another_backend_has_an_engine_of_its_own(engine: paddock.Engine) -> None:
    with engine.session(backend="local") as s:
        assert s.run("echo routed").stdout == "routed\n"
        other = engine._backend_engines["local"]
        assert other is not engine and other._proc.poll() is None
        assert engine.session(backend="local")._engine is other  # one per backend
    engine.close()
    assert other._proc.poll() is not None
    with pytest.raises(paddock.EngineStartError):
        with paddock.Engine() as e2:
            e2.session(backend="no-such-backend")


# ------------------------------------------------------------------ errors


def test_file_and_approval_errors_are_typed(session: paddock.Session) -> None:
    files = session.files
    for call in (lambda: files.read("missing.bin"), lambda: files.info("missing"), lambda: files.remove("missing")):
        with pytest.raises(paddock.FileNotFound) as err:
            call()
        assert isinstance(err.value, FileNotFoundError)
    files.write("plain.txt", "x")
    with pytest.raises(NotADirectoryError):
        files.list("plain.txt")
    # Outside the workspace the local sandbox refuses writes.
    for call in (
        lambda: files.write("/opt/paddock-denied/x.bin", b"x"),
        lambda: files.rename("plain.txt", "/opt/paddock-denied.txt"),
    ):
        with pytest.raises(paddock.PermissionDenied) as denied:
            call()
        assert isinstance(denied.value, PermissionError) and not isinstance(denied.value, paddock.ApprovalDenied)
    with pytest.raises(paddock.ApprovalDenied) as refused:
        session.run("rm -rf /")
    assert isinstance(refused.value, PermissionError) and refused.value.code == "tool_approval:denied"


def test_session_and_backend_errors_are_typed(engine: paddock.Engine, tmp_path: Path) -> None:
    with pytest.raises(paddock.SessionNotFound) as missing:
        engine.connect("py-never-started-anywhere")
    assert isinstance(missing.value, LookupError)
    policy = tmp_path / "gone.toml"
    policy.write_text(
        '[backends.gone]\nkind = "apptainer"\nimage = "/nonexistent/x.sif"\nbinary = "/nonexistent/apptainer"\n\n'
        '[routes]\nterminal = "gone"\nprocess = "gone"\npython_execute = "gone"\nfiles = "gone"\n'
    )
    with paddock.Engine(policy=policy) as gone:
        with gone.session() as s:
            with pytest.raises(paddock.BackendUnavailable):
                s.run("true")


# ------------------------------------------------------------------ async


def test_async_session_with_async_callbacks(private_state: Path) -> None:
    async def main() -> None:
        async with await paddock.Engine.start() as engine:
            async with await engine.asession() as s:
                seen: List[Tuple[str, str]] = []

                async def out(text: str) -> None:
                    await asyncio.sleep(0)
                    seen.append(("out", text))

                async def err(text: str) -> None:
                    seen.append(("err", text))

                result = await s.run("echo a; sleep 0.3; echo b >&2", on_stdout=out, on_stderr=err)
                assert (result.stdout, result.stderr) == ("a\n", "b\n")
                assert seen == [("out", "a\n"), ("err", "b\n")]
                seen.clear()
                h = await s.run("echo one; sleep 0.3; echo e1 >&2; echo two", background=True, on_stdout=out, on_stderr=err)
                assert isinstance(h, paddock.AsyncCommandHandle)
                done = await h.wait(timeout=15)
                assert done.stdout == "one\ntwo\n" and await h.stdout == "one\ntwo\n" and await h.stderr == "e1\n"
                assert ("err", "e1\n") in seen and seen[0] == ("out", "one\n")
                await s.files.write("async.bin", bytes(range(256)))
                assert await s.files.read("async.bin") == bytes(range(256))
                assert [e.name for e in await s.files.list(".")] == ["async.bin"]
                assert (await s.run_code("1 + 1")).text == "2"
                again = await engine.aconnect(s.id)
                assert (await again.run("cat async.bin | wc -c")).stdout.strip() == "256"
                sid = s.id
            with pytest.raises(paddock.SessionNotFound):
                await engine.aconnect(sid)
            with pytest.raises(paddock.SessionNotFound):
                await s.run("true")

    asyncio.run(main())
