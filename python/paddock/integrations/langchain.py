"""LangChain Deep Agents sandboxes on Paddock sessions: `PaddockSandbox` (DESIGN.md section 9).

```python
from deepagents import create_deep_agent
from paddock.integrations.langchain import PaddockSandbox

sandbox = PaddockSandbox(policy="ops.toml", backend="docker")   # no I/O yet
agent = create_deep_agent(model=..., backend=sandbox)            # first use: engine + session
sandbox.id                           # the Paddock session id (known before the first use)
again = PaddockSandbox(policy="ops.toml", backend="docker", session=sandbox.id)   # attaches only
sandbox.close()                      # ends the Paddock session and everything in it
```

`PaddockSandbox(engine=None, *, policy=None, backend=None, session=None)` subclasses
`deepagents.backends.sandbox.BaseSandbox` (deepagents 0.6.12) and passes LangChain's standard suite,
`langchain_tests.integration_tests.SandboxIntegrationTests` (langchain-tests 1.1.9).

What maps to what
-----------------

- The sandbox is one Paddock session. `engine=` shares an existing `paddock.Engine` (the adapter
  never closes it); `policy=` (or neither: `$PADDOCK_POLICY`, else the built-in policy) makes the
  adapter start an engine of its own, closed again by `close()`. `backend=` is the backend of the
  policy the session's tools run on (`engine.session(..., backend=...)`). The constructor does no
  I/O: the engine, the session and its working directory are made on first use, once, even
  under concurrent first calls (a lock; async callers start them in a worker thread).
- `id` is the Paddock session id: a fresh `deepagents-<hex>` chosen (without I/O) in the
  constructor, under which Paddock starts the session on first use; or the id given as
  `session=`, which attaches only (`engine.connect`: `paddock.SessionNotFound` on first use
  when that session is not live).
- The working directory is the session's own, never the caller's current directory: on a
  container backend whose image has a writable `/workspace` (docker), `/workspace`; elsewhere
  `/tmp/paddock-workspace-<session id>`, which on the sandboxed local backend lies in the
  session's private `/tmp` (`$PADDOCK_HOME/sandbox-tmp/<session id>` on the host). The name
  depends only on the session, so an adapter attached with `session=` finds the same directory
  (the same rule as `paddock.integrations.pydantic_ai`). `working_dir` is its `pwd -P`. Where
  `/tmp` is not the session's own (a local backend with `sandbox = "none"`, ssh) the directory
  is still one of its own by name, and `close()` removes it.
- `execute(command, timeout=)` / `aexecute` -> `Session.run` / `AsyncSession.run` (the `terminal`
  tool, stdout and stderr streamed): `ExecuteResponse.output` is stdout and stderr together, in
  the order the chunks arrived; `exit_code` the command's. Every command starts with `cd` into
  the working directory (made again if a command removed it), so relative paths resolve there,
  and a `cd` of one command does not carry over to the next. `timeout=None` -> Paddock's default
  (180 s); `timeout=0` ("no timeout") -> 3600 s, the longest Paddock allows; a larger one is
  capped there; a negative one is a `ValueError` (which the execute tool reports as an invalid
  parameter). A timeout is a response, not an exception: the output so far, a line saying so,
  `exit_code=124` (Paddock kills the command and everything it started). A command the policy or
  an approver refuses: a response with the reason and `exit_code=126`. Output over 10 Mi
  characters keeps its first and last 5 Mi with a marker between and `truncated=True`.
  Cancelling `aexecute` (as `agrep`'s time limit does) cancels the request and Paddock kills
  the command.
- `upload_files` / `aupload_files` -> `Files.write` (the embedding protocol's byte-exact
  upload: parents made, the data written beside the file and renamed over it);
  `download_files` / `adownload_files` -> `Files.read` (byte-exact; a symlink is followed). One
  response per path, in order; failures are per file, never raised: a relative path (or one
  with a NUL) -> `invalid_path` without touching the sandbox; `paddock.FileNotFound` ->
  `file_not_found`; `paddock.PermissionDenied` (the sandbox refused: a `chmod 000` file, a
  read-only directory, a denied approval) -> `permission_denied`; a directory -> `is_directory`;
  a path through a file (`NotADirectory`) -> `invalid_path` on upload, `file_not_found` on
  download; anything else -> the error's own `code: message` text.
- Everything else (`ls`, `read`, `write`, `edit`, `grep`, `glob` and their async forms) is
  `BaseSandbox`'s own, built on `execute` and `upload_files` (its helper scripts need `python3`
  in the environment).
- `close()` (`aclose()`, the end of a `with` / `async with` block) ends the Paddock session (its
  environment, files and processes) and an engine the adapter started; later calls raise
  `paddock.SessionNotFound`. `delete` is not the session's end: deepagents 0.6.12's `BaseSandbox`
  has no such method and this adapter adds none, leaving the name to the base class (file
  deletion).

Not supported, or different
---------------------------

- No command runs without a time limit: 3600 s is Paddock's longest (`timeout=0` and larger
  timeouts become that).
- A process a command leaves running (`cmd &`, `nohup`, `setsid`) is ended with the command on
  Paddock's local sandbox; background work belongs to `sandbox.session.run(...,
  background=True)` (`paddock.Session`).
- Commands share the Paddock session's shell state: an `export` of one command is still set for
  the next (its `cd` is not, see above). stdin is at end of file; undecodable output bytes arrive
  as U+FFFD.
- `upload_files` replaces the file at the path: a symlink there is replaced rather than written
  through, and the new file has default permissions (an existing file's mode and hard links are
  not kept).
- A device or FIFO (`/dev/null`) downloads as `file_not_found`.
- Without `close()` the session outlives the adapter until Paddock's idle sweep (`[sessions]
  idle_timeout_seconds`, 30 minutes by default) ends it; an engine the adapter started ends
  with this interpreter.
- A session closed elsewhere (`paddock sessions close`, the idle sweep) while a fresh adapter
  still holds it is started again, empty, by its next call (Paddock starts a session on first
  use); an adapter made with `session=` checks liveness only on its first use.
"""

from __future__ import annotations

import asyncio
import math
import os
import secrets
import threading
from collections import deque
from typing import Any, Deque, List, Optional, Sequence, Tuple, Union

try:
    from deepagents.backends.protocol import (
        ExecuteResponse,
        FileDownloadResponse,
        FileUploadResponse,
    )
    from deepagents.backends.sandbox import BaseSandbox
except ImportError as _err:  # pragma: no cover - depends on the installation
    raise ImportError(
        "paddock.integrations.langchain needs deepagents (0.6.12): pip install 'paddock[langchain]'"
    ) from _err

from .._engine import Engine
from .._errors import (
    CommandTimeout,
    FileNotFound,
    NotADirectory,
    PaddockError,
    PermissionDenied,
    SessionNotFound,
    ToolError,
)
from .._session import AsyncSession, Session
from . import _common

__all__ = ["PaddockSandbox"]

#: Paddock's `terminal` timeout when none is given, seconds.
DEFAULT_TIMEOUT = 180.0
#: The longest foreground command Paddock's `terminal` tool accepts, seconds.
MAX_TIMEOUT = 3600.0
#: Output (stdout and stderr together, characters) kept of one command: its first and last half.
MAX_OUTPUT_CHARS = 10 * 1024 * 1024
#: `exit_code` of a command that passed its timeout (as `timeout(1)` and deepagents' own shell).
TIMEOUT_EXIT_CODE = 124
#: `exit_code` of a command the policy or an approver refused (the shell's "cannot execute").
REFUSED_EXIT_CODE = 126

_SESSION_PREFIX = "deepagents-"


# ------------------------------------------------------------------ pure helpers


def _new_session_id() -> str:
    """An id no other session has (Paddock accepts [A-Za-z0-9_.-], at most 128 characters)."""
    return f"{_SESSION_PREFIX}{secrets.token_hex(6)}"


def _terminal_timeout(timeout: Optional[float]) -> Optional[float]:
    """deepagents' `timeout` as Paddock's: None stays (Paddock's default), 0 ("none") and
    anything longer than Paddock allows become its longest."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise ValueError(f"timeout must be a number of seconds, got {timeout!r}")
    if math.isnan(timeout) or timeout < 0:
        raise ValueError(f"timeout must be non-negative, got {timeout}")
    if timeout == 0:
        return MAX_TIMEOUT
    return min(float(timeout), MAX_TIMEOUT)


def _working_dir_of(session_id: str, result: Any) -> str:
    made = _common.made_dir(result)
    if made is None:
        raise PaddockError(_common.failure_text(session_id, result))
    return made


class _Output:
    """A command's stdout and stderr chunks, together in the order they came; past
    `limit` characters the first and last half are kept."""

    def __init__(self, limit: int = MAX_OUTPUT_CHARS) -> None:
        self.head_limit = limit // 2
        self.tail_limit = limit - self.head_limit
        self.head: List[str] = []
        self.head_chars = 0
        self.tail: Deque[str] = deque()
        self.tail_chars = 0
        self.dropped = 0

    def add(self, text: str) -> None:
        if not text:
            return
        room = self.head_limit - self.head_chars
        if room > 0:
            part = text[:room]
            self.head.append(part)
            self.head_chars += len(part)
            text = text[room:]
            if not text:
                return
        self.tail.append(text)
        self.tail_chars += len(text)
        while self.tail_chars > self.tail_limit:
            excess = self.tail_chars - self.tail_limit
            first = self.tail[0]
            if len(first) <= excess:
                self.tail.popleft()
                cut = len(first)
            else:
                self.tail[0] = first[excess:]
                cut = excess
            self.tail_chars -= cut
            self.dropped += cut

    @property
    def truncated(self) -> bool:
        return self.dropped > 0

    def text(self) -> str:
        head, tail = "".join(self.head), "".join(self.tail)
        if not self.dropped:
            return head + tail
        return (
            f"{head}\n\n[... {self.dropped} characters of output left out: only the first and last "
            f"{self.head_limit} are kept; redirect the output to a file and read it in parts ...]\n\n{tail}"
        )


def _with_note(output: _Output, note: str) -> str:
    text = output.text()
    if text and not text.endswith("\n"):
        text += "\n"
    return text + note


def _timed_out(output: _Output, limit: Optional[float], custom: bool) -> ExecuteResponse:
    seconds = DEFAULT_TIMEOUT if limit is None else limit
    hint = (
        "The command may be stuck or need more time."
        if custom
        else "For long-running commands, run it again with the timeout parameter."
    )
    note = (
        f"Error: Command timed out after {seconds:g} seconds; it and everything it started were killed. "
        f"{hint} (Paddock allows at most {MAX_TIMEOUT:g} seconds.)"
    )
    return ExecuteResponse(output=_with_note(output, note), exit_code=TIMEOUT_EXIT_CODE, truncated=output.truncated)


def _refused(output: _Output, err: PermissionDenied) -> ExecuteResponse:
    note = f"Error: the sandbox's policy refused the command: {err.message}"
    return ExecuteResponse(output=_with_note(output, note), exit_code=REFUSED_EXIT_CODE, truncated=output.truncated)


def _bad_command(command: Any) -> Optional[ExecuteResponse]:
    if not isinstance(command, str) or not command.strip():
        return ExecuteResponse(output="Error: Command must be a non-empty string.", exit_code=1, truncated=False)
    return None


def _invalid_path(path: Any) -> Optional[str]:
    """`invalid_path` for what is not an absolute path of the sandbox (the protocol's rule)."""
    if not isinstance(path, str) or not path.startswith("/") or "\x00" in path:
        return "invalid_path"
    return None


def _file_error(err: BaseException, *, upload: bool) -> str:
    """A failed transfer as a `FileOperationError` code, else the error's own text."""
    if isinstance(err, FileNotFound):
        return "file_not_found"
    if isinstance(err, PermissionDenied):
        return "permission_denied"
    if isinstance(err, NotADirectory):
        return "invalid_path" if upload else "file_not_found"
    if isinstance(err, ToolError):
        if err.code == "file:is_directory":
            return "is_directory"
        return f"{err.code}: {err.message}"
    if isinstance(err, ValueError):  # e.g. a path ending in "/": it names a directory
        return "invalid_path"
    return f"{type(err).__name__}: {err}"


# ------------------------------------------------------------------ the sandbox


class PaddockSandbox(BaseSandbox):
    """A Deep Agents sandbox backend whose environment is one Paddock session.

    Args:
        engine: an existing `paddock.Engine` to make the session with (the adapter never closes it).
        policy: a policy file for an engine the adapter starts itself on first use (and closes in
            `close()`); neither: the engine's default policy (`$PADDOCK_POLICY`, else built in).
        backend: the backend of the policy the session's tools run on; None: the policy's routes.
        session: the id of a live Paddock session to attach to (never creating one).

    The constructor does no I/O: the engine and the session start on first use. See the module's
    documentation for what maps to what.
    """

    def __init__(
        self,
        engine: Optional[Engine] = None,
        *,
        policy: Optional[Union[str, "os.PathLike[str]"]] = None,
        backend: Optional[str] = None,
        session: Optional[str] = None,
    ) -> None:
        _common.check_engine_args(engine, policy)
        if session is not None and (not isinstance(session, str) or not session):
            raise TypeError(f"session must be a Paddock session id (a non-empty str), got {session!r}")
        self._engine: Optional[Engine] = engine
        self._owns_engine = engine is None
        # Absolute now: the engine starts later, maybe after the caller changed directory.
        self._policy = os.path.abspath(os.fspath(policy)) if policy is not None else None
        self._backend = backend
        self._attach = session is not None
        self._id = session if session is not None else _new_session_id()
        self._lock = threading.Lock()
        self._session: Optional[Session] = None
        self._session_engine: Optional[Engine] = None
        self._asession: Optional[AsyncSession] = None
        self._working_dir: Optional[str] = None
        self._closed = False

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("live" if self._session is not None else "not started")
        backend = f", backend={self._backend!r}" if self._backend else ""
        return f"PaddockSandbox({self._id!r}{backend}, {state})"

    # ---------------------------------------------------------------- identity

    @property
    def id(self) -> str:
        """The Paddock session id (known before the session starts)."""
        return self._id

    @property
    def engine(self) -> Optional[Engine]:
        """The engine the session is made with (None before first use when the adapter starts its own)."""
        return self._engine

    @property
    def session(self) -> Optional[Session]:
        """The `paddock.Session` once started: for what the sandbox protocol has no word for
        (background commands, Python contexts, snapshots, watching files)."""
        return self._session

    @property
    def working_dir(self) -> str:
        """The session's working directory (starts the session on first use)."""
        return self._ready()[1]

    # ---------------------------------------------------------------- life cycle

    def _check_open(self) -> None:
        if self._closed:
            raise SessionNotFound("sessions:not_found", f"the sandbox {self._id!r} was closed")

    def _get_engine(self) -> Engine:
        """The engine (under the lock); the adapter's own is started here, once."""
        if self._engine is None:
            self._engine = Engine(policy=self._policy, backend=self._backend)
        return self._engine

    def _ready(self) -> Tuple[Session, str]:
        """The session and its working directory, started on first use (once, under a lock)."""
        session, working_dir = self._session, self._working_dir
        if session is not None and working_dir is not None:
            self._check_open()
            return session, working_dir
        with self._lock:
            self._check_open()
            if self._session is None:
                engine = self._get_engine()
                if self._attach:
                    self._session = engine.connect(self._id, backend=self._backend)
                else:
                    self._session = engine.session(self._id, backend=self._backend)
                self._session_engine = engine
            if self._working_dir is None:
                result = self._session.run(_common.make_script(self._id))
                self._working_dir = _working_dir_of(self._id, result)
            return self._session, self._working_dir

    async def _aready(self) -> Tuple[AsyncSession, str]:
        """`_ready` for async callers: the first start in a worker thread, off the event loop."""
        working_dir = self._working_dir  # set after the session: both are there, or a start is due
        if working_dir is None:
            working_dir = (await asyncio.get_running_loop().run_in_executor(None, self._ready))[1]
        self._check_open()
        asession = self._asession
        if asession is None:
            engine = self._session_engine
            assert engine is not None  # set with the session
            # The engine knows the session (and its backend's route) by now: no request is made.
            asession = self._asession = await engine.asession(self._id, backend=self._backend)
        return asession, working_dir

    def close(self) -> None:
        """Ends the Paddock session (its environment, files and processes) and an engine the
        adapter started. Closing twice does nothing; every later call raises `SessionNotFound`."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                session = self._session
                if session is None and self._attach:
                    # Attached but never used: the session named is still the one to end.
                    try:
                        session = self._get_engine().connect(self._id, backend=self._backend)
                    except SessionNotFound:
                        session = None
                if session is not None:
                    # Where /tmp is not the session's own (an unconfined local backend, ssh) the
                    # directory would outlive the session; elsewhere it goes with it anyway.
                    try:
                        session.run(_common.remove_script(self._id), timeout=60)
                    except PaddockError:
                        pass  # best effort: the session is ended next either way
                    session.close()
            finally:
                if self._owns_engine and self._engine is not None:
                    engine, self._engine = self._engine, None
                    engine.close()

    async def aclose(self) -> None:
        """`close` without blocking the event loop."""
        await asyncio.get_running_loop().run_in_executor(None, self.close)

    def __enter__(self) -> "PaddockSandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    async def __aenter__(self) -> "PaddockSandbox":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    # ---------------------------------------------------------------- commands

    def execute(self, command: str, *, timeout: Optional[int] = None) -> ExecuteResponse:
        """Runs a shell command in the sandbox's working directory: stdout and stderr together,
        the exit code, and whether the output was cut (see the module's documentation)."""
        bad = _bad_command(command)
        if bad is not None:
            return bad
        limit = _terminal_timeout(timeout)
        session, working_dir = self._ready()
        output = _Output()
        try:
            result = session.run(
                _common.in_dir_script(working_dir, command), timeout=limit, on_stdout=output.add, on_stderr=output.add
            )
        except CommandTimeout:
            return _timed_out(output, limit, timeout is not None)
        except PermissionDenied as err:
            return _refused(output, err)
        return ExecuteResponse(output=output.text(), exit_code=result.exit_code, truncated=output.truncated)

    async def aexecute(self, command: str, *, timeout: Optional[int] = None) -> ExecuteResponse:  # noqa: ASYNC109
        """`execute` on the event loop; cancelling it kills the command."""
        bad = _bad_command(command)
        if bad is not None:
            return bad
        limit = _terminal_timeout(timeout)
        session, working_dir = await self._aready()
        output = _Output()
        try:
            result = await session.run(
                _common.in_dir_script(working_dir, command), timeout=limit, on_stdout=output.add, on_stderr=output.add
            )
        except CommandTimeout:
            return _timed_out(output, limit, timeout is not None)
        except PermissionDenied as err:
            return _refused(output, err)
        return ExecuteResponse(output=output.text(), exit_code=result.exit_code, truncated=output.truncated)

    # ---------------------------------------------------------------- files

    def upload_files(self, files: Sequence[Tuple[str, bytes]]) -> List[FileUploadResponse]:
        """Writes each `(absolute path, bytes)` exactly, parents made; one response per file, in order."""
        files = list(files)
        session, _ = self._ready()
        responses: List[FileUploadResponse] = []
        for path, content in files:
            error = _invalid_path(path)
            if error is None:
                try:
                    session.files.write(path, content)
                except (PaddockError, ValueError, OSError) as err:
                    error = _file_error(err, upload=True)
            responses.append(FileUploadResponse(path=path, error=error))
        return responses

    async def aupload_files(self, files: Sequence[Tuple[str, bytes]]) -> List[FileUploadResponse]:
        """`upload_files` on the event loop."""
        files = list(files)
        session, _ = await self._aready()
        responses: List[FileUploadResponse] = []
        for path, content in files:
            error = _invalid_path(path)
            if error is None:
                try:
                    await session.files.write(path, content)
                except (PaddockError, ValueError, OSError) as err:
                    error = _file_error(err, upload=True)
            responses.append(FileUploadResponse(path=path, error=error))
        return responses

    def download_files(self, paths: Sequence[str]) -> List[FileDownloadResponse]:
        """Reads each absolute path's bytes exactly; one response per path, in order."""
        paths = list(paths)
        session, _ = self._ready()
        responses: List[FileDownloadResponse] = []
        for path in paths:
            content: Optional[bytes] = None
            error = _invalid_path(path)
            if error is None:
                try:
                    content = session.files.read(path)
                except (PaddockError, ValueError, OSError) as err:
                    error = _file_error(err, upload=False)
            responses.append(FileDownloadResponse(path=path, content=content, error=error))
        return responses

    async def adownload_files(self, paths: Sequence[str]) -> List[FileDownloadResponse]:
        """`download_files` on the event loop."""
        paths = list(paths)
        session, _ = await self._aready()
        responses: List[FileDownloadResponse] = []
        for path in paths:
            content: Optional[bytes] = None
            error = _invalid_path(path)
            if error is None:
                try:
                    content = await session.files.read(path)
                except (PaddockError, ValueError, OSError) as err:
                    error = _file_error(err, upload=False)
            responses.append(FileDownloadResponse(path=path, content=content, error=error))
        return responses
