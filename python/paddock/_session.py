"""Sessions from Python (DESIGN.md 8.1): a `Session` object over one Paddock session, the
shape users of sandbox SDKs (E2B, Daytona, Modal) reach for first.

`Session` blocks; `AsyncSession` has the same methods, awaitable, and takes async callbacks
too. Both are thin: every method is one or a few requests of the embedding protocol
(docs/embedding-protocol.md) to the `Engine` that made the session, and the parts that decide
something (how a command line is built, what an answer means, which exception a failure is,
how a background command's streams are read) are plain functions shared by the two, so the
blocking and the async API cannot drift apart.

Where the work happens:
- commands: the `terminal` tool (foreground with `"stream": true`, so stdout and stderr come
  apart and reach the callbacks as they are written; background: the `process` tool);
- code: `python_execute` with a `context` (a long-lived CPython of the session);
- files: the file tools, and for bytes the protocol's `upload`/`download` through a temporary
  local file, byte-exact (the file tools carry text only).
"""

from __future__ import annotations

import asyncio
import inspect
import os
import posixpath
import secrets
import shlex
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import (
    TYPE_CHECKING,
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    Dict,
    Iterator,
    List,
    Literal,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
    overload,
)

from ._errors import (
    CommandTimeout,
    FileNotFound,
    NotADirectory,
    SessionNotFound,
    ToolError,
    error_from,
    file_code_of_message,
)

if TYPE_CHECKING:  # the engine imports this module: no cycle at run time
    from ._engine import Engine

#: An output callback: gets each new piece of text (`str`, never a split UTF-8 character).
#: `AsyncSession` also takes `async def` ones and awaits them, in order.
TextCallback = Callable[[str], Union[None, Awaitable[None]]]
Command = Union[str, Sequence[str]]
PathLike = Union[str, "os.PathLike[str]"]

#: The code of the timeouts this package raises (`CommandTimeout`).
TIMEOUT_CODE = "command:timeout"
#: Seconds one `process wait` may take; longer waits are several.
WAIT_SLICE = 300.0
#: Seconds one `process output` waits for new text of a background command that feeds
#: callbacks (it answers as soon as there is some, or the command ended).
FOLLOW_WAIT = 5.0


# ------------------------------------------------------------------ results


@dataclass(frozen=True)
class CommandResult:
    """A finished command. A non-zero `exit_code` is a normal result, never an exception."""

    stdout: str
    stderr: str
    exit_code: int
    duration_ms: float


@dataclass(frozen=True)
class ExecutionError:
    """The exception the code of `run_code` raised (data about the code, not raised here)."""

    name: str
    value: str
    traceback: str


@dataclass(frozen=True)
class Execution:
    """What `run_code` did: `results` are MIME bundles (every `display(...)`, then the last
    expression's with `"is_main_result": True`); `error` is the code's exception, if any."""

    results: List[Dict[str, Any]]
    stdout: str
    stderr: str
    error: Optional[ExecutionError]
    execution_count: Optional[int] = None
    context: Optional[str] = None

    @property
    def text(self) -> Optional[str]:
        """The last expression's `text/plain` (None when the code did not end on a value)."""
        for bundle in self.results:
            if bundle.get("is_main_result"):
                value = bundle.get("text/plain")
                return value if isinstance(value, str) else None
        return None


@dataclass(frozen=True)
class FileEntry:
    """A file, directory or link of the session's environment; `path` is absolute. `list`
    fills the first four fields, `info` all of them (`mode` as a number, e.g. 0o644)."""

    path: str
    name: str
    kind: str
    size: int
    mode: Optional[int] = None
    modified_ms: Optional[int] = None
    mime: Optional[str] = None


@dataclass(frozen=True)
class WatchEvent:
    """A change under a watched directory: `path` absolute, `kind` one of created, modified,
    removed, renamed."""

    path: str
    kind: str


# ------------------------------------------------------------------ pure helpers


def command_line(command: Command) -> str:
    """The command the `terminal` tool runs: a string as it is (a shell line), a list as an
    argv, each word quoted so that no shell syntax in it is interpreted."""
    if isinstance(command, str):
        return command
    words = [os.fspath(word) if isinstance(word, os.PathLike) else str(word) for word in command]
    if not words:
        raise ValueError("an empty argv: give at least the program to run")
    return shlex.join(words)


def terminal_args(
    command: Command,
    *,
    cwd: Optional[PathLike],
    env: Optional[Mapping[str, Any]],
    timeout: Optional[float],
    background: bool,
    pty: bool,
    stdin: Optional[Union[str, bytes]],
    keep_detached: bool = False,
) -> Dict[str, Any]:
    """The `terminal` tool's arguments for `Session.run`; only what was given is sent, so the
    engine's defaults (a 180 s timeout) apply otherwise."""
    if background and timeout is not None:
        raise ValueError("timeout applies to a foreground command; give a background one to h.wait(timeout=...)")
    args: Dict[str, Any] = {"command": command_line(command)}
    if background:
        args["background"] = True
    if pty:
        args["pty"] = True
    if cwd is not None:
        args["workdir"] = os.fspath(cwd)
    if env:
        args["env"] = {str(name): str(value) for name, value in env.items()}
    if timeout is not None:
        args["timeout"] = timeout
    if stdin is not None:
        args["stdin"] = stdin.decode("utf-8") if isinstance(stdin, bytes) else stdin
    if keep_detached:
        args["keep_detached"] = True
    return args


class OutputStreams:
    """A streamed call's `output` messages: kept per stream (to build `stdout` and `stderr`)
    and handed to the callback of their stream, in the order the engine sent them."""

    def __init__(self, on_stdout: Optional[TextCallback] = None, on_stderr: Optional[TextCallback] = None) -> None:
        self.callbacks = {"stdout": on_stdout, "stderr": on_stderr}
        self.parts: Dict[str, List[str]] = {"stdout": [], "stderr": []}
        self.seen = False

    def take(self, message: Mapping[str, Any]) -> Tuple[Optional[TextCallback], str]:
        """Records one `output` message; returns the callback to give its text to."""
        stream = "stderr" if message.get("stream") == "stderr" else "stdout"
        text = message.get("text") or ""
        self.seen = True
        self.parts[stream].append(text)
        return (self.callbacks[stream] if text else None), text

    def unstreamed(self, merged: str) -> Optional[Tuple[TextCallback, str]]:
        """An engine older than `stream` sends no `output` messages: the callback of stdout
        then gets the command's whole (merged) output once, at its end."""
        callback = self.callbacks["stdout"]
        if self.seen or not merged or callback is None:
            return None
        return callback, merged

    def texts(self, merged: str) -> Tuple[str, str]:
        """(stdout, stderr). An engine that streamed nothing although the command printed
        (one older than `stream`) gave only the merged `output`: that is stdout then."""
        if not self.seen:
            return merged, ""
        return "".join(self.parts["stdout"]), "".join(self.parts["stderr"])

    def handle_sync(self, message: Mapping[str, Any]) -> None:
        callback, text = self.take(message)
        if callback is not None:
            callback(text)

    async def handle_async(self, message: Mapping[str, Any]) -> None:
        callback, text = self.take(message)
        if callback is not None:
            done = callback(text)
            if inspect.isawaitable(done):
                await done


def timed_out(answer: Mapping[str, Any]) -> bool:
    """Whether a `terminal`/`python_execute` answer is a timeout. An engine older than
    `timed_out` said so only by exit code 124 and an `error` starting "timed out"."""
    if "timed_out" in answer:
        return bool(answer["timed_out"])
    return answer.get("exit_code") == 124 and str(answer.get("error") or "").startswith("timed out")


def command_result(answer: Mapping[str, Any], streams: OutputStreams) -> CommandResult:
    """A foreground `terminal` answer as a `CommandResult`, or `CommandTimeout`."""
    stdout, stderr = streams.texts(str(answer.get("output") or ""))
    if timed_out(answer):
        raise CommandTimeout(TIMEOUT_CODE, str(answer.get("error") or "the command timed out"), stdout, stderr)
    code = answer.get("exit_code")
    return CommandResult(stdout, stderr, int(code) if code is not None else -1, float(answer.get("duration_ms") or 0.0))


def execution(answer: Mapping[str, Any], streams: OutputStreams) -> Execution:
    """A `python_execute` answer (with a context) as an `Execution`, or `CommandTimeout`
    (the execution was interrupted; the context lives), or `ToolError` for the tool's own
    failure (`error`, which is not the code's exception)."""
    streamed_out, streamed_err = streams.texts(str(answer.get("output") or ""))
    stdout = answer["stdout"] if isinstance(answer.get("stdout"), str) else streamed_out
    stderr = answer["stderr"] if isinstance(answer.get("stderr"), str) else streamed_err
    if timed_out(answer):
        raise CommandTimeout(TIMEOUT_CODE, str(answer.get("error") or "the execution timed out"), stdout, stderr)
    exception = answer.get("exception")
    if not exception and answer.get("error"):
        raise ToolError("tool:failed", str(answer["error"]))
    return Execution(
        results=list(answer.get("results") or []),
        stdout=stdout,
        stderr=stderr,
        error=execution_error(exception) if exception else None,
        execution_count=answer.get("execution_count"),
        context=answer.get("context"),
    )


def execution_error(exception: Mapping[str, Any]) -> ExecutionError:
    trace = exception.get("traceback") or ""
    if isinstance(trace, list):
        trace = "\n".join(str(line) for line in trace)
    return ExecutionError(str(exception.get("name") or ""), str(exception.get("value") or ""), str(trace))


def file_entry(path: str, item: Mapping[str, Any]) -> FileEntry:
    """A `list_files` entry or a `file_info` answer, at the absolute `path`."""
    mode = item.get("mode")
    if isinstance(mode, str):
        mode = int(mode, 8)
    return FileEntry(
        path=path,
        name=posixpath.basename(path.rstrip("/")) or path,
        kind=str(item.get("kind") or ""),
        size=int(item.get("size") or 0),
        mode=mode,
        modified_ms=item.get("modified_ms"),
        mime=item.get("mime"),
    )


def shell_word(path: str) -> str:
    """`path` as one word for the environment's shell; a leading `~/` stays unquoted, so that
    the shell makes it the home directory as the file tools do."""
    if path == "~":
        return "~"
    if path.startswith("~/"):
        return "~/" + shlex.quote(path[2:])
    return shlex.quote(path)


def temporary_sibling(path: str) -> str:
    """A name beside `path` for writing it whole before the rename that makes it atomic."""
    head, base = posixpath.split(path)
    if not base:
        raise ValueError(f"{path!r} names a directory, not a file")
    return posixpath.join(head, f".{base}.paddock-{secrets.token_hex(4)}")


def transfer_error(err: ToolError) -> ToolError:
    """A failed `upload`/`download` (always `files:transfer_failed`, with what the
    environment's shell said) as the typed error a file tool would have given."""
    code = file_code_of_message(err.message, err.code)
    return err if code == err.code else error_from(code, err.message)


def make_dir_command(path: str) -> str:
    """`make_dir` is one `terminal` command (one round trip, no helper file a watcher would
    see): mkdir with parents, fine if the directory exists, messages in English so that
    `file_code_of_message` can read them."""
    return f"LC_ALL=C command mkdir -p -- {shell_word(path)}"


def absolute_command(path: str) -> str:
    """Prints `path` made absolute in the session's current directory; the subshell keeps the
    session's own directory where it was."""
    return f"(cd -- {shell_word(path)} && pwd)"


def split_relative(path: str) -> Tuple[str, str]:
    """(the directory to ask the shell about, the name to add to its answer): the directory
    of a file, since only a directory can be `cd`'d into."""
    if path in ("~", ".", "..") or path.endswith("/") or posixpath.basename(path) in (".", ".."):
        return path, ""
    directory, name = posixpath.split(path)
    return directory or ".", name


def joined_absolute(answer: Mapping[str, Any], name: str) -> str:
    """The absolute path from `absolute_command`'s answer and the name `split_relative` kept."""
    failure = shell_failure(answer)
    if failure is not None:
        raise failure
    lines = str(answer.get("output") or "").strip().splitlines()
    if not lines or not lines[-1].startswith("/"):
        raise ToolError("file:io", f"the session's shell did not print a directory: {answer.get('output')!r}")
    return posixpath.normpath(posixpath.join(lines[-1], name)) if name else lines[-1]


def shell_failure(answer: Mapping[str, Any]) -> Optional[ToolError]:
    """The typed error of a helper command that failed, None when it succeeded."""
    if answer.get("exit_code") == 0:
        return None
    said = str(answer.get("output") or "").strip() or f"exit code {answer.get('exit_code')}"
    return error_from(file_code_of_message(said, "file:io"), said)


def signal_name(name: Union[str, int]) -> str:
    """`SIGINT`, `int` and `INT` are all `INT` (the `process` tool's spelling); a number stays."""
    text = str(name).strip().upper()
    return text[3:] if text.startswith("SIG") else text


class StreamReader:
    """Reads a background command's stdout and stderr apart through `process output`, each from
    where the last read ended (the engine's byte offsets, on whole UTF-8 characters)."""

    def __init__(self) -> None:
        self.offsets = {"stdout": 0, "stderr": 0}
        self.texts: Dict[str, List[str]] = {"stdout": [], "stderr": []}

    def args(self, timeout: float) -> Dict[str, Any]:
        return {"stdout_offset": self.offsets["stdout"], "stderr_offset": self.offsets["stderr"], "timeout": timeout}

    def take(self, answer: Mapping[str, Any]) -> Tuple[str, str, bool]:
        """The new (stdout, stderr) of one answer, and whether that was all: the command
        ended and nothing is left to read."""
        new = []
        for stream in ("stdout", "stderr"):
            text = str(answer.get(stream) or "")
            self.offsets[stream] = int(answer.get(f"{stream}_offset") or self.offsets[stream])
            self.texts[stream].append(text)
            new.append(text)
        done = answer.get("state") != "running" and not answer.get("more")
        return new[0], new[1], done


def _sync_callback(callback: Optional[TextCallback], name: str) -> Optional[TextCallback]:
    if callback is not None and inspect.iscoroutinefunction(callback):
        raise TypeError(f"{name} is an async function: use an AsyncSession (engine.asession()) for async callbacks")
    return callback


# ------------------------------------------------------------------ the blocking API


class _SessionState:
    """What `Session` and `AsyncSession` share: the engine they speak through, the id, and
    whether `close()` ended the session."""

    def __init__(self, engine: "Engine", id: str) -> None:
        self._engine = engine
        self.id = id
        self._closed = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.id!r}{', closed' if self._closed else ''})"

    def _check_open(self) -> None:
        if self._closed:
            raise SessionNotFound("sessions:not_found", f"session {self.id!r} was closed")

    def _needs_routing(self) -> bool:
        """Whether the engine must still show it routes requests by session: one older than
        that would run this session's calls in its own session, silently."""
        return self.id != self._engine.session_id and not self._engine._sessions_known


class Session(_SessionState):
    """One Paddock session, blocking: commands, code, files, snapshots.

    Made by `engine.session(...)` or `engine.connect(id)`. `close()` (or the end of a `with`
    block) ends the session and everything in it; after that every method raises
    `SessionNotFound`. Sync methods work from any thread, with or without an event loop
    (e.g. inside `loop.run_in_executor`): callbacks run in the calling thread, in order.
    """

    def __init__(self, engine: "Engine", id: str) -> None:
        super().__init__(engine, id)
        self.files = Files(self)
        self.contexts = Contexts(self)

    # -- requests

    def _ready(self) -> None:
        self._check_open()
        if self._needs_routing():
            engine = self._engine
            engine._session_answer(engine._request_sync(engine._session_message("exists", self.id)))

    def _call(
        self, tool: str, args: Dict[str, Any], on_output: Optional[Callable[[Dict[str, Any]], Any]] = None
    ) -> Any:
        self._ready()
        return self._engine._call_sync(tool, args, session=self.id, on_output=on_output)

    def _request(self, message: Dict[str, Any]) -> Any:
        self._ready()
        return self._engine._unwrap(self._engine._request_sync(message))

    def _transfer(self, kind: str, local: str, remote: str) -> Dict[str, Any]:
        self._ready()
        try:
            if kind == "upload":
                return self._engine.upload_sync(local, remote, session=self.id)
            return self._engine.download_sync(remote, local, session=self.id)
        except ToolError as err:
            raise transfer_error(err) from None

    def _session_request(self, action: str) -> Any:
        self._check_open()
        engine = self._engine
        return engine._session_answer(engine._request_sync(engine._session_message(action, self.id)))

    # -- commands

    @overload
    def run(
        self,
        command: Command,
        *,
        cwd: Optional[PathLike] = ...,
        env: Optional[Mapping[str, Any]] = ...,
        timeout: Optional[float] = ...,
        on_stdout: Optional[TextCallback] = ...,
        on_stderr: Optional[TextCallback] = ...,
        background: Literal[False] = ...,
        pty: bool = ...,
        stdin: Optional[Union[str, bytes]] = ...,
        keep_detached: bool = ...,
    ) -> CommandResult: ...

    @overload
    def run(
        self,
        command: Command,
        *,
        cwd: Optional[PathLike] = ...,
        env: Optional[Mapping[str, Any]] = ...,
        timeout: None = ...,
        on_stdout: Optional[TextCallback] = ...,
        on_stderr: Optional[TextCallback] = ...,
        background: Literal[True],
        pty: bool = ...,
        stdin: None = ...,
    ) -> CommandHandle: ...

    def run(
        self,
        command: Command,
        *,
        cwd: Optional[PathLike] = None,
        env: Optional[Mapping[str, Any]] = None,
        timeout: Optional[float] = None,
        on_stdout: Optional[TextCallback] = None,
        on_stderr: Optional[TextCallback] = None,
        background: bool = False,
        pty: bool = False,
        stdin: Optional[Union[str, bytes]] = None,
        keep_detached: bool = False,
    ) -> Any:
        """Runs `command` (a shell line, or a list: an argv) in the session; `cwd` and `env`
        for this command only (over the session's directory and exports). Foreground: waits
        and returns a `CommandResult` (a non-zero exit is not an error); `CommandTimeout`
        after `timeout` seconds (default: the engine's, 180 s), with the output so far.
        `background=True`: returns a `CommandHandle` at once. `on_stdout`/`on_stderr` get the
        text as it is written, stdout and stderr apart (a `pty=True` command's terminal is all
        stdout). `keep_detached=True`: processes the command detaches from itself (`setsid`,
        a daemon) keep running until the session ends, as in a terminal; by default they end
        with the command."""
        args = terminal_args(
            command,
            cwd=cwd,
            env=env,
            timeout=timeout,
            background=background,
            pty=pty,
            stdin=stdin,
            keep_detached=keep_detached,
        )
        on_stdout = _sync_callback(on_stdout, "on_stdout")
        on_stderr = _sync_callback(on_stderr, "on_stderr")
        if background:
            return CommandHandle(self, self._call("terminal", args), on_stdout, on_stderr)
        streams = OutputStreams(on_stdout, on_stderr)
        answer = self._call("terminal", args, streams.handle_sync)
        late = streams.unstreamed(str(answer.get("output") or ""))
        if late is not None:
            late[0](late[1])
        return command_result(answer, streams)

    def run_tools_script(self, code: str, **limits: Any) -> Dict[str, Any]:
        """Runs a code-mode script in this session (its notebook when the engine keeps state):
        `Engine.run_tools_script_sync` with `session=` this one."""
        self._ready()
        return self._engine.run_tools_script_sync(code, session=self.id, **limits)

    def set_variables(self, values: Mapping[str, Any]) -> None:
        """Sets names of this session's notebook (`keep_state=True`) from the host, JSON values."""
        self._ready()
        self._engine.set_variables_sync(values, session=self.id)

    def run_code(
        self,
        code: str,
        *,
        context: str = "default",
        timeout: Optional[float] = None,
        on_stdout: Optional[TextCallback] = None,
        on_stderr: Optional[TextCallback] = None,
    ) -> Execution:
        """Runs Python `code` in `context`, a long-lived CPython of the session (made on first
        use of its id; names persist between calls, as in a Jupyter kernel). A timeout
        interrupts the code (`CommandTimeout`) and keeps the context."""
        args: Dict[str, Any] = {"code": code, "context": context}
        if timeout is not None:
            args["timeout"] = timeout
        streams = OutputStreams(_sync_callback(on_stdout, "on_stdout"), _sync_callback(on_stderr, "on_stderr"))
        wants_stream = on_stdout is not None or on_stderr is not None
        answer = self._call("python_execute", args, streams.handle_sync if wants_stream else None)
        return execution(answer, streams)

    # -- life cycle

    def snapshot(self, name: Optional[str] = None) -> str:
        """Saves the session (files, shell state; not running processes): the snapshot's name."""
        return str(self._request({"type": "snapshot", "session": self.id, "name": name})["name"])

    def fork(self, count: int = 1) -> List["Session"]:
        """Snapshots this session and starts `count` new, independent sessions from it."""
        name = self.snapshot()
        return [Session(self._engine, sid) for sid in self._engine.fork_sync(name, count)]

    def pause(self) -> Dict[str, Any]:
        """Freezes the session (no CPU); the next command, or `resume()`, thaws it."""
        return self._session_request("pause")

    def resume(self) -> Dict[str, Any]:
        return self._session_request("resume")

    def close(self) -> None:
        """Ends the session now: its environments, agents, background processes and contexts.
        Closing a closed (or already ended) session does nothing."""
        if self._closed:
            return
        try:
            self._session_request("close")
        except SessionNotFound:
            pass  # ended already (another handle, the idle sweep): what close wants
        self._closed = True

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class CommandHandle:
    """A background command of a session.

    `stdout` and `stderr` are what it wrote so far, apart (a `pty=True` command's terminal is
    all stdout). `on_stdout`/`on_stderr` (when given) get each new piece as it is written,
    from a thread that asks the engine for it (`process output`, which answers as soon as
    there is some).
    """

    def __init__(
        self,
        session: Session,
        answer: Mapping[str, Any],
        on_stdout: Optional[TextCallback],
        on_stderr: Optional[TextCallback] = None,
    ) -> None:
        self._session = session
        self.id: str = str(answer["session_id"])
        self.pid: Optional[int] = answer.get("pid")
        self._follower: Optional[threading.Thread] = None
        self._follow_error: Optional[BaseException] = None
        if on_stdout is not None or on_stderr is not None:
            self._follower = threading.Thread(
                target=self._follow,
                args=(on_stdout, on_stderr),
                name=f"paddock-follow-{self.id}",
                daemon=True,
            )
            self._follower.start()

    def __repr__(self) -> str:
        return f"CommandHandle({self.id!r}, pid={self.pid})"

    def _process(self, action: str, **args: Any) -> Dict[str, Any]:
        return self._session._call("process", {"action": action, "session_id": self.id, **args})

    @property
    def stdout(self) -> str:
        """Everything the command wrote on stdout so far."""
        return self._read_all()[0]

    @property
    def stderr(self) -> str:
        """Everything the command wrote on stderr so far."""
        return self._read_all()[1]

    def _read_all(self) -> Tuple[str, str]:
        reader = StreamReader()
        while True:
            answer = self._process("output", **reader.args(0))
            reader.take(answer)
            if not answer.get("more"):
                return "".join(reader.texts["stdout"]), "".join(reader.texts["stderr"])

    @property
    def exit_code(self) -> Optional[int]:
        """None while it runs."""
        status = self._process("poll")
        return None if status.get("state") == "running" else status.get("exit_code")

    def send_stdin(self, data: Union[str, bytes]) -> None:
        """Writes `data` to the command's stdin (as it is: add the newline yourself)."""
        self._process("write", data=data.decode("utf-8") if isinstance(data, bytes) else data)

    def close_stdin(self) -> None:
        """Ends the command's stdin (it reads end of file)."""
        self._process("close")

    def signal(self, name: Union[str, int]) -> None:
        """Sends a signal: INT, TERM, KILL, HUP, USR1, ... (`SIGINT` works too)."""
        self._process("signal", name=signal_name(name))

    def kill(self) -> None:
        """Sends KILL."""
        try:
            self.signal("KILL")
        except ToolError as err:
            if not _lacks_signal(err):
                raise
            self._process("kill")  # an engine before `signal`: TERM, a grace, then KILL

    def resize(self, rows: int, cols: int) -> None:
        """The terminal size of a `pty=True` command."""
        self._process("resize", rows=rows, cols=cols)

    def wait(self, timeout: Optional[float] = None) -> CommandResult:
        """Waits for the command to end: its `CommandResult`. `CommandTimeout` (with the output
        so far) when it still runs after `timeout` seconds; it is left running."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = WAIT_SLICE if deadline is None else max(0.0, deadline - time.monotonic())
            status = self._process("wait", timeout=min(left, WAIT_SLICE))
            if status.get("state") != "running":
                break
            if deadline is not None and time.monotonic() >= deadline:
                raise CommandTimeout(TIMEOUT_CODE, f"process {self.id} still runs after {timeout} s", *self._read_all())
        if self._follower is not None:
            self._follower.join()
        if self._follow_error is not None:
            raise self._follow_error
        return background_result(status, self._process("poll"), *self._read_all())

    def _follow(self, on_stdout: Optional[TextCallback], on_stderr: Optional[TextCallback]) -> None:
        reader = StreamReader()
        try:
            while True:
                out, err, done = reader.take(self._process("output", **reader.args(FOLLOW_WAIT)))
                if out and on_stdout is not None:
                    on_stdout(out)
                if err and on_stderr is not None:
                    on_stderr(err)
                if done:
                    return
        except ToolError:
            return  # the session or the process is gone: nothing more to follow
        except BaseException as err:  # noqa: BLE001 - the callback's failure is wait()'s
            self._follow_error = err


def _lacks_signal(err: ToolError) -> bool:
    return err.code == "tool:invalid_arguments" and "signal" in err.message


def background_result(status: Mapping[str, Any], poll: Mapping[str, Any], stdout: str, stderr: str) -> CommandResult:
    code = status.get("exit_code")
    return CommandResult(stdout, stderr, int(code) if code is not None else -1, float(poll.get("duration_ms") or 0.0))


class Files:
    """`session.files`: the session's file system. Paths are the environment's; relative
    ones resolve against the session's current directory."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def write(self, path: PathLike, data: Union[bytes, str]) -> None:
        """Writes the whole file (bytes exactly; a str as UTF-8), parents made, atomically:
        the data goes to a name beside it, then is renamed over it."""
        path = os.fspath(path)
        payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        staged = temporary_sibling(path)
        with tempfile.TemporaryDirectory(prefix="paddock-") as local:
            source = os.path.join(local, "data")
            with open(source, "wb") as f:
                f.write(payload)
            self._session._transfer("upload", source, staged)
        try:
            self._session._call("move_file", {"from": staged, "to": path, "overwrite": True})
        except BaseException:
            try:
                self._session._call("delete_file", {"path": staged})
            except ToolError:
                pass
            raise

    def read(self, path: PathLike) -> bytes:
        """The file's bytes, exactly."""
        path = os.fspath(path)
        with tempfile.TemporaryDirectory(prefix="paddock-") as local:
            target = os.path.join(local, "data")
            moved = self._session._transfer("download", target, path)
            if moved.get("kind") == "directory":
                raise ToolError("file:is_directory", f"{path} is a directory")
            with open(target, "rb") as f:
                return f.read()

    def read_text(self, path: PathLike, encoding: str = "utf-8") -> str:
        path = os.fspath(path)
        return self.read(path).decode(encoding)

    def list(self, path: PathLike = ".", depth: int = 1) -> List[FileEntry]:
        """The entries under directory `path` (to `depth` levels), with absolute paths."""
        path = os.fspath(path)
        answer = self._session._call("list_files", {"path": path, "depth": depth})
        base = self._absolute(path)
        return [file_entry(posixpath.join(base, item["path"]), item) for item in answer.get("entries") or []]

    def info(self, path: PathLike) -> FileEntry:
        """Kind, size, mode, modification time and MIME type of `path` (not following a link)."""
        path = os.fspath(path)
        answer = self._session._call("file_info", {"path": path})
        return file_entry(self._absolute(path), answer)

    def exists(self, path: PathLike) -> bool:
        path = os.fspath(path)
        try:
            self._session._call("file_info", {"path": path})
        except (FileNotFound, NotADirectory):
            return False
        return True

    def make_dir(self, path: PathLike) -> None:
        """Makes the directory and its parents; fine when it exists (`NotADirectory` when a
        file is in the way)."""
        path = os.fspath(path)
        failure = shell_failure(self._session._call("terminal", {"command": make_dir_command(path)}))
        if failure is not None:
            raise failure

    def remove(self, path: PathLike) -> None:
        """Removes a file, a link, or a directory with everything in it."""
        path = os.fspath(path)
        self._session._call("delete_file", {"path": path, "recursive": True})

    def rename(self, source: PathLike, target: PathLike, overwrite: bool = False) -> None:
        """Moves `source` to `target` (parents made); an existing `target` is an error
        (`file:exists`) unless `overwrite`."""
        source = os.fspath(source)
        target = os.fspath(target)
        self._session._call("move_file", {"from": source, "to": target, "overwrite": overwrite})

    def watch(self, path: PathLike, recursive: bool = True, timeout: float = 60.0) -> Iterator[WatchEvent]:
        """The changes under directory `path` until `timeout` seconds (in all) have passed."""
        path = os.fspath(path)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            answer = self._session._call("watch_files", watch_args(path, recursive, left))
            yield from watch_events(answer)
            if answer.get("timed_out"):
                return

    def _absolute(self, path: str) -> str:
        """`path` made absolute: as it is when it is, else through the session's shell (one
        more round trip), which alone knows its current directory."""
        if path.startswith("/"):
            return posixpath.normpath(path)
        directory, name = split_relative(path)
        return joined_absolute(self._session._call("terminal", {"command": absolute_command(directory)}), name)


def watch_args(path: str, recursive: bool, seconds_left: float) -> Dict[str, Any]:
    return {"path": path, "recursive": recursive, "timeout_ms": max(1, int(seconds_left * 1000))}


def watch_events(answer: Mapping[str, Any]) -> List[WatchEvent]:
    return [WatchEvent(str(ev.get("path")), str(ev.get("kind"))) for ev in answer.get("events") or []]


def contexts_list(answer: Any) -> List[Dict[str, Any]]:
    if isinstance(answer, dict) and isinstance(answer.get("contexts"), list):
        return list(answer["contexts"])
    return list(answer) if isinstance(answer, list) else []


def context_args(
    action: str, id: Optional[str] = None, cwd: Optional[str] = None, env: Optional[Mapping[str, Any]] = None
) -> Dict[str, Any]:
    args: Dict[str, Any] = {"action": action}
    if id is not None:
        args["id"] = id
    if cwd is not None:
        args["cwd"] = cwd
    if env is not None:
        args["env"] = {str(k): str(v) for k, v in env.items()}
    return args


class Contexts:
    """`session.contexts`: the session's Python contexts (`run_code(context=...)`). A context
    is made on first use of its id; `create` makes one with a working directory and
    variables of its own."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def create(self, id: str, *, cwd: Optional[str] = None, env: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
        return self._session._call("python_contexts", context_args("create", id, cwd, env))

    def list(self) -> List[Dict[str, Any]]:
        return contexts_list(self._session._call("python_contexts", context_args("list")))

    def restart(self, id: str) -> Dict[str, Any]:
        """A fresh interpreter for the context: its names are gone."""
        return self._session._call("python_contexts", context_args("restart", id))

    def remove(self, id: str) -> Dict[str, Any]:
        return self._session._call("python_contexts", context_args("remove", id))


# ------------------------------------------------------------------ the async API


class AsyncSession(_SessionState):
    """`Session` with awaitable methods; callbacks may be `async def` (awaited in order).
    Made by `await engine.asession(...)` or `await engine.aconnect(id)`; `async with` closes."""

    def __init__(self, engine: "Engine", id: str) -> None:
        super().__init__(engine, id)
        self.files = AsyncFiles(self)
        self.contexts = AsyncContexts(self)

    async def _ready(self) -> None:
        self._check_open()
        if self._needs_routing():
            engine = self._engine
            engine._session_answer(await engine._request(engine._session_message("exists", self.id)))

    async def _call(
        self, tool: str, args: Dict[str, Any], on_output: Optional[Callable[[Dict[str, Any]], Any]] = None
    ) -> Any:
        await self._ready()
        return await self._engine._call(tool, args, session=self.id, on_output=on_output)

    async def _request(self, message: Dict[str, Any]) -> Any:
        await self._ready()
        return self._engine._unwrap(await self._engine._request(message))

    async def _transfer(self, kind: str, local: str, remote: str) -> Dict[str, Any]:
        await self._ready()
        try:
            if kind == "upload":
                return await self._engine.upload(local, remote, session=self.id)
            return await self._engine.download(remote, local, session=self.id)
        except ToolError as err:
            raise transfer_error(err) from None

    async def _session_request(self, action: str) -> Any:
        self._check_open()
        engine = self._engine
        return engine._session_answer(await engine._request(engine._session_message(action, self.id)))

    @overload
    async def run(
        self,
        command: Command,
        *,
        cwd: Optional[PathLike] = ...,
        env: Optional[Mapping[str, Any]] = ...,
        timeout: Optional[float] = ...,
        on_stdout: Optional[TextCallback] = ...,
        on_stderr: Optional[TextCallback] = ...,
        background: Literal[False] = ...,
        pty: bool = ...,
        stdin: Optional[Union[str, bytes]] = ...,
        keep_detached: bool = ...,
    ) -> CommandResult: ...

    @overload
    async def run(
        self,
        command: Command,
        *,
        cwd: Optional[PathLike] = ...,
        env: Optional[Mapping[str, Any]] = ...,
        timeout: None = ...,
        on_stdout: Optional[TextCallback] = ...,
        on_stderr: Optional[TextCallback] = ...,
        background: Literal[True],
        pty: bool = ...,
        stdin: None = ...,
    ) -> AsyncCommandHandle: ...

    async def run(
        self,
        command: Command,
        *,
        cwd: Optional[PathLike] = None,
        env: Optional[Mapping[str, Any]] = None,
        timeout: Optional[float] = None,
        on_stdout: Optional[TextCallback] = None,
        on_stderr: Optional[TextCallback] = None,
        background: bool = False,
        pty: bool = False,
        stdin: Optional[Union[str, bytes]] = None,
        keep_detached: bool = False,
    ) -> Any:
        """`Session.run`, awaitable: a `CommandResult`, or an `AsyncCommandHandle`."""
        args = terminal_args(
            command,
            cwd=cwd,
            env=env,
            timeout=timeout,
            background=background,
            pty=pty,
            stdin=stdin,
            keep_detached=keep_detached,
        )
        if background:
            return AsyncCommandHandle(self, await self._call("terminal", args), on_stdout, on_stderr)
        streams = OutputStreams(on_stdout, on_stderr)
        answer = await self._call("terminal", args, streams.handle_async)
        late = streams.unstreamed(str(answer.get("output") or ""))
        if late is not None:
            done = late[0](late[1])
            if inspect.isawaitable(done):
                await done
        return command_result(answer, streams)

    async def run_tools_script(self, code: str, **limits: Any) -> Dict[str, Any]:
        """`Session.run_tools_script`, awaitable."""
        await self._ready()
        return await self._engine.run_tools_script(code, session=self.id, **limits)

    async def set_variables(self, values: Mapping[str, Any]) -> None:
        """`Session.set_variables`, awaitable."""
        await self._ready()
        await self._engine.set_variables(values, session=self.id)

    async def run_code(
        self,
        code: str,
        *,
        context: str = "default",
        timeout: Optional[float] = None,
        on_stdout: Optional[TextCallback] = None,
        on_stderr: Optional[TextCallback] = None,
    ) -> Execution:
        """`Session.run_code`, awaitable."""
        args: Dict[str, Any] = {"code": code, "context": context}
        if timeout is not None:
            args["timeout"] = timeout
        streams = OutputStreams(on_stdout, on_stderr)
        wants_stream = on_stdout is not None or on_stderr is not None
        answer = await self._call("python_execute", args, streams.handle_async if wants_stream else None)
        return execution(answer, streams)

    async def snapshot(self, name: Optional[str] = None) -> str:
        return str((await self._request({"type": "snapshot", "session": self.id, "name": name}))["name"])

    async def fork(self, count: int = 1) -> List["AsyncSession"]:
        name = await self.snapshot()
        return [AsyncSession(self._engine, sid) for sid in await self._engine.fork(name, count)]

    async def pause(self) -> Dict[str, Any]:
        return await self._session_request("pause")

    async def resume(self) -> Dict[str, Any]:
        return await self._session_request("resume")

    async def close(self) -> None:
        if self._closed:
            return
        try:
            await self._session_request("close")
        except SessionNotFound:
            pass
        self._closed = True

    async def __aenter__(self) -> "AsyncSession":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


class AsyncCommandHandle:
    """`CommandHandle`, awaitable (`await h.wait()`, `await h.stdout`); `on_stdout`/`on_stderr`
    callbacks are fed by a task of the loop that started the command."""

    def __init__(
        self,
        session: AsyncSession,
        answer: Mapping[str, Any],
        on_stdout: Optional[TextCallback],
        on_stderr: Optional[TextCallback] = None,
    ) -> None:
        self._session = session
        self.id: str = str(answer["session_id"])
        self.pid: Optional[int] = answer.get("pid")
        self._follower: Optional["asyncio.Task[None]"] = None
        self._follow_error: Optional[BaseException] = None
        if on_stdout is not None or on_stderr is not None:
            self._follower = asyncio.ensure_future(self._follow(on_stdout, on_stderr))

    def __repr__(self) -> str:
        return f"AsyncCommandHandle({self.id!r}, pid={self.pid})"

    async def _process(self, action: str, **args: Any) -> Dict[str, Any]:
        return await self._session._call("process", {"action": action, "session_id": self.id, **args})

    @property
    def stdout(self) -> Awaitable[str]:
        """`await h.stdout`: everything written on stdout so far."""
        return self._read_stream(0)

    @property
    def stderr(self) -> Awaitable[str]:
        """`await h.stderr`: everything written on stderr so far."""
        return self._read_stream(1)

    async def _read_stream(self, index: int) -> str:
        return (await self._read_all())[index]

    async def _read_all(self) -> Tuple[str, str]:
        reader = StreamReader()
        while True:
            answer = await self._process("output", **reader.args(0))
            reader.take(answer)
            if not answer.get("more"):
                return "".join(reader.texts["stdout"]), "".join(reader.texts["stderr"])

    @property
    def exit_code(self) -> Awaitable[Optional[int]]:
        """`await h.exit_code`: None while it runs."""
        return self._exit_code()

    async def _exit_code(self) -> Optional[int]:
        status = await self._process("poll")
        return None if status.get("state") == "running" else status.get("exit_code")

    async def send_stdin(self, data: Union[str, bytes]) -> None:
        await self._process("write", data=data.decode("utf-8") if isinstance(data, bytes) else data)

    async def close_stdin(self) -> None:
        await self._process("close")

    async def signal(self, name: Union[str, int]) -> None:
        await self._process("signal", name=signal_name(name))

    async def kill(self) -> None:
        try:
            await self.signal("KILL")
        except ToolError as err:
            if not _lacks_signal(err):
                raise
            await self._process("kill")

    async def resize(self, rows: int, cols: int) -> None:
        await self._process("resize", rows=rows, cols=cols)

    async def wait(self, timeout: Optional[float] = None) -> CommandResult:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = WAIT_SLICE if deadline is None else max(0.0, deadline - time.monotonic())
            status = await self._process("wait", timeout=min(left, WAIT_SLICE))
            if status.get("state") != "running":
                break
            if deadline is not None and time.monotonic() >= deadline:
                raise CommandTimeout(
                    TIMEOUT_CODE, f"process {self.id} still runs after {timeout} s", *(await self._read_all())
                )
        if self._follower is not None:
            await self._follower
        if self._follow_error is not None:
            raise self._follow_error
        return background_result(status, await self._process("poll"), *(await self._read_all()))

    async def _follow(self, on_stdout: Optional[TextCallback], on_stderr: Optional[TextCallback]) -> None:
        reader = StreamReader()
        try:
            while True:
                out, err, done = reader.take(await self._process("output", **reader.args(FOLLOW_WAIT)))
                for text, callback in ((out, on_stdout), (err, on_stderr)):
                    if text and callback is not None:
                        result = callback(text)
                        if inspect.isawaitable(result):
                            await result
                if done:
                    return
        except ToolError:
            return
        except asyncio.CancelledError:
            raise
        except Exception as err:  # noqa: BLE001 - the callback's failure is wait()'s
            self._follow_error = err


class AsyncFiles:
    """`Files`, awaitable (`async for ev in s.files.watch(...)`)."""

    def __init__(self, session: AsyncSession) -> None:
        self._session = session

    async def write(self, path: PathLike, data: Union[bytes, str]) -> None:
        path = os.fspath(path)
        payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        staged = temporary_sibling(path)
        with tempfile.TemporaryDirectory(prefix="paddock-") as local:
            source = os.path.join(local, "data")
            with open(source, "wb") as f:
                f.write(payload)
            await self._session._transfer("upload", source, staged)
        try:
            await self._session._call("move_file", {"from": staged, "to": path, "overwrite": True})
        except BaseException:
            try:
                await self._session._call("delete_file", {"path": staged})
            except ToolError:
                pass
            raise

    async def read(self, path: PathLike) -> bytes:
        path = os.fspath(path)
        with tempfile.TemporaryDirectory(prefix="paddock-") as local:
            target = os.path.join(local, "data")
            moved = await self._session._transfer("download", target, path)
            if moved.get("kind") == "directory":
                raise ToolError("file:is_directory", f"{path} is a directory")
            with open(target, "rb") as f:
                return f.read()

    async def read_text(self, path: PathLike, encoding: str = "utf-8") -> str:
        path = os.fspath(path)
        return (await self.read(path)).decode(encoding)

    async def list(self, path: PathLike = ".", depth: int = 1) -> List[FileEntry]:
        path = os.fspath(path)
        answer = await self._session._call("list_files", {"path": path, "depth": depth})
        base = await self._absolute(path)
        return [file_entry(posixpath.join(base, item["path"]), item) for item in answer.get("entries") or []]

    async def info(self, path: PathLike) -> FileEntry:
        path = os.fspath(path)
        answer = await self._session._call("file_info", {"path": path})
        return file_entry(await self._absolute(path), answer)

    async def exists(self, path: PathLike) -> bool:
        path = os.fspath(path)
        try:
            await self._session._call("file_info", {"path": path})
        except (FileNotFound, NotADirectory):
            return False
        return True

    async def make_dir(self, path: PathLike) -> None:
        path = os.fspath(path)
        failure = shell_failure(await self._session._call("terminal", {"command": make_dir_command(path)}))
        if failure is not None:
            raise failure

    async def remove(self, path: PathLike) -> None:
        path = os.fspath(path)
        await self._session._call("delete_file", {"path": path, "recursive": True})

    async def rename(self, source: PathLike, target: PathLike, overwrite: bool = False) -> None:
        source = os.fspath(source)
        target = os.fspath(target)
        await self._session._call("move_file", {"from": source, "to": target, "overwrite": overwrite})

    async def watch(self, path: PathLike, recursive: bool = True, timeout: float = 60.0) -> AsyncIterator[WatchEvent]:
        path = os.fspath(path)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            answer = await self._session._call("watch_files", watch_args(path, recursive, left))
            for event in watch_events(answer):
                yield event
            if answer.get("timed_out"):
                return

    async def _absolute(self, path: str) -> str:
        if path.startswith("/"):
            return posixpath.normpath(path)
        directory, name = split_relative(path)
        return joined_absolute(await self._session._call("terminal", {"command": absolute_command(directory)}), name)


class AsyncContexts:
    """`Contexts`, awaitable."""

    def __init__(self, session: AsyncSession) -> None:
        self._session = session

    async def create(
        self, id: str, *, cwd: Optional[str] = None, env: Optional[Mapping[str, Any]] = None
    ) -> Dict[str, Any]:
        return await self._session._call("python_contexts", context_args("create", id, cwd, env))

    async def list(self) -> List[Dict[str, Any]]:
        return contexts_list(await self._session._call("python_contexts", context_args("list")))

    async def restart(self, id: str) -> Dict[str, Any]:
        return await self._session._call("python_contexts", context_args("restart", id))

    async def remove(self, id: str) -> Dict[str, Any]:
        return await self._session._call("python_contexts", context_args("remove", id))
