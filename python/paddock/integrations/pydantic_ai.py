"""pydantic-ai on Paddock (DESIGN.md section 9): `PaddockWorkspace`, a workspace backend on a
Paddock session, and `PaddockCodeMode`, a toolset whose one tool, `run_code`, runs the model's
Python in Paddock's code mode with the wrapped tools callable from it (CodeAct; its section is
at the end of this file, after the workspace's).

```python
from paddock.integrations.pydantic_ai import PaddockWorkspace

workspace = PaddockWorkspace(policy="ops.toml", backend="docker")    # no I/O yet
result = await agent.run("...", workspace=workspace)                # first use: engine + session
ref = workspace.ref                    # WorkspaceRef(provider="paddock", id=<Paddock session id>)
again = PaddockWorkspace(policy="ops.toml", backend="docker", ref=ref)   # attaches, never creates
await again.close()                    # ends the Paddock session and everything in it
```

```python
from pydantic_ai.toolsets import FunctionToolset
from paddock.integrations.pydantic_ai import PaddockCodeMode

code_mode = PaddockCodeMode(FunctionToolset([lookup, convert]))    # no I/O yet
agent = Agent("openai:gpt-5", toolsets=[code_mode])                 # the model sees one tool: run_code
result = await agent.run("...")        # run_code: `lookup("paris")`, `await asyncio.gather(tools.lookup(...))`
await code_mode.close()                # ends the engine it started (each run's session ends with the run)
```

`PaddockCodeMode(*toolsets, engine=None, policy=None, max_duration=, max_tool_calls=,
max_memory_mb=, max_output_chars=, max_retries=3, id=None)`: one Paddock notebook session per
agent run (names persist between `run_code` calls, `restart: true` starts afresh, the session
closes when the run ends); the wrapped tools are called through pydantic-ai's `ToolManager`
with the run's `RunContext` (validation, hooks, approvals by a `HandleDeferredToolCalls`
capability), and a failing one raises in the script; results go back as the last expression's
value (with `{"output", "result"}` when something was printed), errors as `ModelRetry`.

`PaddockWorkspace(engine=None, *, policy=None, backend=None, ref=None)` implements pydantic-ai's
`WorkspaceBackend`, `SupportsCommands`, `SupportsFilesystem` and `SupportsRealpath` (pydantic-ai-slim
2.68.0) and passes its conformance suite, `pydantic_ai.workspaces.conformance.WorkspaceBackendSuite`,
except where Paddock itself behaves otherwise (the list at the end).

What maps to what
-----------------

- The environment is one Paddock session: `engine.asession(backend=backend)` on first use (the ref
  is recorded as soon as that returns), or `engine.aconnect(ref.id, backend=backend)` when built
  from a ref (a session that is not live: `WorkspaceUnavailableError`, nothing is created).
  `engine=` shares an existing `paddock.Engine`; `policy=` makes the adapter start one itself (in a
  thread, once, even under concurrent first calls; `backend=` is then that engine's route).
- The working directory is the session's own and never the caller's current directory: on a
  container backend whose image has a writable `/workspace` (docker), `/workspace`; elsewhere
  `/tmp/paddock-workspace-<session id>`, which on the sandboxed local backend lies in the session's
  private `/tmp` (`$PADDOCK_HOME/sandbox-tmp/<session id>` on the host). The name depends only on
  the session, so an adapter attached by ref finds the same directory. It is made (and the
  session's shell `cd`'d into it) by one command on first use; `working_dir()` is its `pwd -P`.
- `run(command, shell=, env=, timeout=)` -> `AsyncSession.run` (the `terminal` tool, stdout and
  stderr streamed apart): an argv is quoted into a shell line (`shlex.join`), a string needs
  `shell=True` (else `TypeError`) and an argv `shell=False`; every command starts with `cd` into
  the working directory (made again if a command removed it); stdin is at EOF; undecodable bytes
  arrive as U+FFFD; a non-zero exit is a result. `timeout` -> Paddock's `timeout`, and
  `CommandTimeout` -> `WorkspaceTimeoutError` with the output so far. Cancelling `run` cancels the
  request, and Paddock kills the command's process tree. More than 10 MiB of output ->
  `WorkspaceOutputLimitError` (the command is stopped), as `LocalWorkspaceBackend` does.
- Files -> `AsyncSession.files`, byte-exact (the protocol's upload/download): `read_bytes` ->
  `files.read`, `write_bytes` -> `files.write` (parents made; atomic: a new file replaces the old
  one, whose permission bits are put back), `list_dir` -> `files.list`, `make_dir` ->
  `files.make_dir`, `remove` -> `files.remove`. Where the Paddock file tools answer otherwise
  than POSIX `open`/`stat` would, one small shell command in the session fills the gap: `stat`,
  `exists` and the check before `read_bytes` test the path with `test -d/-f/-e` (following
  symlinks; `file_info` follows none, and it opens the file, so a FIFO would block it; and
  `files.read` would download a directory whole before refusing it); `write_bytes` first
  resolves the path (writes go through a symlink) and refuses a directory, FIFO or device;
  `make_dir` tells `FileExistsError` from `NotADirectoryError` (Paddock reports both as not a
  directory); `list_dir` follows the symlinks among the entries, and lists with the shell a
  directory `files.list` cannot answer whole (over 5000 entries, or a result long enough to be
  spilled, which `files.list` returns as empty). `realpath` is a shell helper too (like
  `os.path.realpath(strict=False)`, base64 on the way back so that any name survives).
- Errors: Paddock's typed errors become the builtin ones (`FileNotFoundError`, `NotADirectoryError`,
  `IsADirectoryError`, `FileExistsError`, `PermissionError`, with `errno` and `filename`); a
  FIFO or device is refused with `OSError`; `remove` refuses the working directory and its
  ancestors with `ValueError` (a symlink is removed itself); relative paths are a `ValueError`.
  A session that is not live (closed, swept, or closed while a command ran) ->
  `WorkspaceUnavailableError`; an approval Paddock denies stays `paddock.ApprovalDenied` (a
  `PermissionError`); anything else Paddock raises (`BackendUnavailable` of a live session,
  `EngineClosed`) propagates so that a durable engine can retry.
- `close()` ends the Paddock session (the environment and its processes: the suite's destroy) and
  an engine the adapter started; `detach()` only lets go (the session lives on for a later
  attach by ref). Nothing ends the session when a run ends.

Not supported, or different
---------------------------

- `timeout=None` (no limit) and timeouts above 3600 s: Paddock's `terminal` accepts at most
  3600 s, so such a command is stopped after 3600 s with `WorkspaceTimeoutError`.
- A process a command detaches from itself (`setsid`, a daemon's double fork) runs on after the
  command, as in a terminal, and ends when the workspace's Paddock session ends (the adapter runs
  its commands with `keep_detached=True`); what stays in the command's own process group ends
  with the command. Long-running work is better in `adapter.session.run(..., background=True)`
  (Paddock's `process` tool), which can be polled and killed.
- Commands share the Paddock session's shell state: what a `shell=True` command `export`s is
  still set for the next command (the working directory is not: every command `cd`s first).
- `write_bytes` replaces the file (a hard link to it keeps the old content); its permission
  bits are restored with `chmod`, its owner is not.
- A session closed from elsewhere (another adapter, `paddock sessions close`) while a command of
  this adapter runs: the command raises `paddock.BackendUnavailable`, not
  `WorkspaceUnavailableError`, because Paddock still reports the session live at that moment
  (an in-flight command's end writes its session record again). `close()` on this adapter is
  recognised and gives `WorkspaceUnavailableError`.
- A session closed elsewhere while an adapter still holds it is started again, empty, by that
  adapter's next call (Paddock starts a session on first use); only attaching checks liveness.
- The working directory on docker is `/workspace` as the policy makes it: with a `workspace`
  bind mount, every session of that backend sees the same host directory there (leave
  `workspace` out, keep `workdir = "/workspace"`, for one per container). The local backend is
  recognised by `PADDOCK_LOCAL_SESSION` in the command's environment.
"""

from __future__ import annotations

import asyncio
import base64
import errno
import math
import os
import posixpath
import shlex
from typing import Any, Awaitable, Callable, List, Mapping, Optional, Sequence, Tuple, TypeVar, Union

try:
    from pydantic_ai.workspaces import (
        CommandResult,
        FileEntry,
        SupportsCommands,
        SupportsFilesystem,
        SupportsRealpath,
        WorkspaceBackend,
        WorkspaceError,
        WorkspaceOutputLimitError,
        WorkspaceRef,
        WorkspaceTimeoutError,
        WorkspaceUnavailableError,
    )
except ImportError as _err:  # pragma: no cover - depends on the installation
    raise ImportError(
        "paddock.integrations.pydantic_ai needs pydantic-ai (pydantic-ai-slim 2.68.0): "
        "pip install 'paddock[pydantic-ai]'"
    ) from _err

from .._engine import Engine
from .._errors import (
    BackendUnavailable,
    CommandTimeout,
    EngineClosed,
    FileNotFound,
    NotADirectory,
    PaddockError,
    SessionNotFound,
    ToolError,
    file_code_of_message,
)
from .._session import AsyncSession
from . import _common

__all__ = ["PaddockWorkspace", "PaddockCodeMode", "PROVIDER"]

#: `WorkspaceRef.provider` of a Paddock session.
PROVIDER = "paddock"

#: The longest foreground command Paddock's `terminal` tool accepts, seconds.
MAX_TIMEOUT = 3600.0
#: Output (stdout and stderr together, characters) past which a command is stopped.
MAX_OUTPUT_CHARS = 10 * 1024 * 1024
#: Of a command stopped for its output, how much of each stream the error keeps.
_PREVIEW_CHARS = 64 * 1024
#: list_files answers at most this many entries; a listing that long is made by the shell.
_LIST_CAP = 5000
#: Symlinks `realpath` follows before it keeps the rest as written (Linux's MAXSYMLINKS).
_MAX_SYMLINKS = 40

# Exit codes of this module's shell helpers: 100 + the Linux errno, outside what sh and the
# utilities return themselves (the same convention as pydantic-ai's shell filesystem).
_EXIT_NOT_FOUND = 102
_EXIT_PERMISSION = 113
_EXIT_EXISTS = 117
_EXIT_NOT_DIRECTORY = 120
_EXIT_IS_DIRECTORY = 121
_EXIT_NOT_REGULAR = 122

_T = TypeVar("_T")


# ------------------------------------------------------------------ shell helpers (pure)


def _realpath_script(path: str) -> str:
    """Shell that sets `$value` to `path` resolved like `os.path.realpath(strict=False)`: the
    components left to right, each symlink followed one level and its target walked in its
    place, `..` climbing what is resolved so far, a missing component kept as written; past
    `_MAX_SYMLINKS` links (a loop) the rest is kept as written. Exits 1 on a link it cannot read."""
    return (
        f"rest={shlex.quote(path.lstrip('/'))}; resolved=; links=0; "
        'while [ -n "$rest" ]; do '
        'case "$rest" in */*) part="${rest%%/*}"; rest="${rest#*/}";; *) part="$rest"; rest=;; esac; '
        'case "$part" in ""|.) ;; ..) resolved="${resolved%/*}";; *) '
        f'if [ "$links" -lt {_MAX_SYMLINKS} ] && [ -L "$resolved/$part" ]; then '
        "links=$((links + 1)); "
        'target=$(readlink -n -- "$resolved/$part" && printf x) || exit 1; target="${target%x}"; '
        'case "$target" in /*) resolved=;; esac; rest="$target/$rest"; '
        'else resolved="$resolved/$part"; fi;; esac; done; '
        'value="${resolved:-/}"; '
    )


def _parents_script(variable: str) -> str:
    """Shell that walks up from the directory in `$variable`: exit `_EXIT_NOT_DIRECTORY` when an
    existing ancestor (or a dangling link) is not a directory, `_EXIT_PERMISSION` when the
    nearest existing one is not writable."""
    return (
        f'p="${variable}"; while :; do '
        f'if [ -d "$p" ]; then [ -w "$p" ] || exit {_EXIT_PERMISSION}; break; fi; '
        f'if [ -e "$p" ] || [ -L "$p" ]; then exit {_EXIT_NOT_DIRECTORY}; fi; '
        'p="${p%/*}"; [ -n "$p" ] || p=/; done; '
    )


def _follow_script(paths: Sequence[str]) -> str:
    """One line per path, following symlinks: `d` directory, `f SIZE` regular file, `o` another
    kind (FIFO, device, socket), `n` missing below a component that is not a directory, `x`
    nothing there (missing, a dangling link, a loop). Never opens a path: a FIFO cannot block."""
    words = " ".join(shlex.quote(p) for p in paths)
    return (
        f"for p in {words}; do "
        'if [ -d "$p" ]; then echo d; '
        'elif [ -f "$p" ]; then echo "f $(wc -c < "$p" 2>/dev/null)"; '
        'elif [ -e "$p" ]; then echo o; '
        'else q="${p%/*}"; while [ -n "$q" ] && ! { [ -e "$q" ] && ! [ -d "$q" ]; }; do q="${q%/*}"; done; '
        'if [ -n "$q" ]; then echo n; else echo x; fi; fi; done'
    )


def _list_script(path: str) -> str:
    """A directory's entries as base64 of NUL-ended `<d|->NAME` records (`d`: a directory,
    following symlinks), for directories longer than list_files answers."""
    quoted = shlex.quote(path)
    return (
        f"if ! [ -d {quoted} ]; then [ -e {quoted} ] && exit {_EXIT_NOT_DIRECTORY}; exit {_EXIT_NOT_FOUND}; fi; "
        f"cd -- {quoted} || exit {_EXIT_PERMISSION}; "
        'for f in * .[!.]* ..?*; do if [ -d "$f" ]; then printf "d%s\\0" "$f"; '
        'elif [ -e "$f" ] || [ -L "$f" ]; then printf -- "-%s\\0" "$f"; fi; done | base64'
    )


def _command_line(command: Union[str, Sequence[str]], shell: bool) -> str:
    if isinstance(command, str):
        if not shell:
            raise TypeError("a string command requires shell=True; pass an argv sequence otherwise")
        return command
    if shell:
        raise TypeError("an argv sequence cannot be combined with shell=True; pass a single command string")
    words = [os.fspath(word) if isinstance(word, os.PathLike) else word for word in command]
    if not words:
        raise ValueError("command must not be empty")
    for word in words:
        if not isinstance(word, str):
            raise TypeError(f"argv items must be strings, got {type(word).__name__}")
    return shlex.join(words)


def _check_timeout(timeout: Optional[float]) -> None:
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) or timeout <= 0
    ):
        raise ValueError("timeout must be a positive finite number or None")


def _absolute(path: str) -> str:
    if not isinstance(path, str):
        raise TypeError(f"path must be a str, got {type(path).__name__}")
    if not path.startswith("/"):
        raise ValueError(f"path must be absolute, got {path!r}")
    return path


def _os_error(cls: type, number: int, path: str) -> OSError:
    return cls(number, os.strerror(number), path)


def _file_error(err: ToolError, path: str) -> Optional[OSError]:
    """The builtin error for a Paddock file failure, None when it is not one."""
    code = err.code
    if code == "files:transfer_failed":  # what the environment's shell said, as a file:* code
        code = file_code_of_message(err.message, code)
    if isinstance(err, FileNotFound) or code == "file:not_found":
        return _os_error(FileNotFoundError, errno.ENOENT, path)
    if isinstance(err, NotADirectory) or code == "file:not_directory":
        return _os_error(NotADirectoryError, errno.ENOTDIR, path)
    if code == "file:is_directory":
        return _os_error(IsADirectoryError, errno.EISDIR, path)
    if code == "file:exists":
        return _os_error(FileExistsError, errno.EEXIST, path)
    if code == "file:permission_denied":
        return _os_error(PermissionError, errno.EACCES, path)
    return None


def _exit_error(result: Any, path: str) -> Optional[BaseException]:
    """The error a helper's exit code stands for (None: exit 0)."""
    code = result.exit_code
    if code == 0:
        return None
    table = {
        _EXIT_NOT_FOUND: (FileNotFoundError, errno.ENOENT),
        _EXIT_NOT_DIRECTORY: (NotADirectoryError, errno.ENOTDIR),
        _EXIT_IS_DIRECTORY: (IsADirectoryError, errno.EISDIR),
        _EXIT_EXISTS: (FileExistsError, errno.EEXIST),
        _EXIT_PERMISSION: (PermissionError, errno.EACCES),
    }
    if code in table:
        cls, number = table[code]
        return _os_error(cls, number, path)
    if code == _EXIT_NOT_REGULAR:
        return OSError(f"not a regular file: {path!r}")
    said = (result.stderr or result.stdout or "").strip() or f"exit code {code}"
    return OSError(f"{path!r}: {said}")


def _decoded_path(text: str, path: str) -> str:
    try:
        raw = base64.b64decode("".join(text.split()), validate=True)
    except ValueError:
        raise WorkspaceError(f"damaged helper output for {path!r}: {text[:200]!r}") from None
    return raw.decode("utf-8", errors="surrogateescape")


# ------------------------------------------------------------------ the backend


class PaddockWorkspace(WorkspaceBackend, SupportsCommands, SupportsFilesystem, SupportsRealpath):
    """A pydantic-ai workspace backend whose environment is one Paddock session.

    Args:
        engine: an existing `paddock.Engine` to make the session with (the adapter never closes it).
        policy: a policy file for an engine the adapter starts itself on first use (and closes in
            `close()`); neither: the engine's default policy (`$PADDOCK_POLICY`, else built in).
        backend: the backend of the policy the session's tools run on (`engine.asession(backend=...)`);
            None: the policy's routes.
        ref: the `WorkspaceRef` of a live session to attach to (never creating one).

    The constructor does no I/O: the engine and the session start on the first operation.
    See the module's documentation for what maps to what.
    """

    def __init__(
        self,
        engine: Optional[Engine] = None,
        *,
        policy: Optional[Union[str, "os.PathLike[str]"]] = None,
        backend: Optional[str] = None,
        ref: Optional[WorkspaceRef] = None,
    ) -> None:
        _common.check_engine_args(engine, policy)
        if ref is not None:
            if not isinstance(ref, WorkspaceRef):
                raise TypeError(f"ref must be a WorkspaceRef, got {type(ref).__name__}")
            if ref.provider != PROVIDER:
                raise ValueError(f"ref names a {ref.provider!r} workspace, not a {PROVIDER!r} one")
        self._engine: Optional[Engine] = engine
        self._owns_engine = engine is None
        self._policy = policy
        self._backend = backend
        self._ref: Optional[WorkspaceRef] = ref
        self._attach = ref is not None
        self._session: Optional[AsyncSession] = None
        self._working_dir: Optional[str] = None
        self._lock = asyncio.Lock()
        self._engine_start: Optional["asyncio.Future[Engine]"] = None
        self._closing = False

    def __repr__(self) -> str:
        where = self._ref.id if self._ref is not None else "not started"
        return f"PaddockWorkspace({where!r}{', backend=' + repr(self._backend) if self._backend else ''})"

    # ---------------------------------------------------------------- identity

    @property
    def ref(self) -> Optional[WorkspaceRef]:
        """`WorkspaceRef(provider="paddock", id=<Paddock session id>)`: None until the first
        operation made the session; the given ref when built from one."""
        return self._ref

    @property
    def engine(self) -> Optional[Engine]:
        """The engine the session is made with (None before the first operation when the
        adapter starts its own)."""
        return self._engine

    @property
    def session(self) -> Optional[AsyncSession]:
        """The Paddock session (`paddock.AsyncSession`) once started: for what the workspace
        protocol has no word for (background commands, Python contexts, snapshots)."""
        return self._session

    async def working_dir(self) -> str:
        return (await self._ready())[1]

    # ---------------------------------------------------------------- life cycle

    async def _ready(self) -> Tuple[AsyncSession, str]:
        session, working_dir = self._session, self._working_dir
        if session is not None and working_dir is not None and not self._closing:
            return session, working_dir
        async with self._lock:
            if self._closing:
                raise WorkspaceUnavailableError(f"the Paddock session {self._describe()} was closed")
            if self._session is None:
                await self._open_session()
            assert self._session is not None
            if self._working_dir is None:
                self._working_dir = await self._prepare_working_dir(self._session)
            return self._session, self._working_dir

    def _describe(self) -> str:
        return repr(self._ref.id) if self._ref is not None else "(not started)"

    async def _get_engine(self) -> Engine:
        if self._engine is not None:
            return self._engine
        if self._engine_start is None:
            policy, backend = self._policy, self._backend
            # `paddock embed` takes a moment to start: not on the event loop. The future is
            # kept, so a caller cancelled meanwhile leaves the engine to the next one.
            self._engine_start = asyncio.get_running_loop().run_in_executor(
                None, lambda: Engine(policy=policy, backend=backend)
            )
        start = self._engine_start
        try:
            engine = await asyncio.shield(start)
        except asyncio.CancelledError:
            raise
        except BaseException:
            if self._engine_start is start:
                self._engine_start = None
            raise
        self._engine = engine
        return engine

    async def _open_session(self) -> None:
        engine = await self._get_engine()
        if self._attach:
            assert self._ref is not None
            try:
                session = await engine.aconnect(self._ref.id, backend=self._backend)
            except SessionNotFound as err:
                raise WorkspaceUnavailableError(f"the Paddock session {self._ref.id!r} is not live") from err
        else:
            session = await engine.asession(backend=self._backend)
            # Recorded before anything that can fail, and never changed.
            self._ref = WorkspaceRef(provider=PROVIDER, id=session.id)
        self._session = session

    async def _prepare_working_dir(self, session: AsyncSession) -> str:
        """Makes the session's working directory and `cd`s the session's shell into it; the
        name depends on the session only, so attaching by ref finds it again."""
        result = await self._shell(session, _common.make_script(session.id))
        made = _common.made_dir(result)
        if made is None:
            raise WorkspaceUnavailableError(_common.failure_text(session.id, result))
        return made

    async def close(self) -> None:
        """Ends the Paddock session (the environment, its files and processes) and an engine the
        adapter started. A command running meanwhile ends with `WorkspaceUnavailableError`; so
        does every later call."""
        self._closing = True
        async with self._lock:
            session = self._session
            if session is None and self._attach and self._ref is not None:
                try:
                    engine = await self._get_engine()
                    session = await engine.aconnect(self._ref.id, backend=self._backend)
                except SessionNotFound:
                    session = None
            if session is not None:
                await session.close()
            await self._close_own_engine()

    async def detach(self) -> None:
        """Lets go of the session without ending it (and stops an engine the adapter started);
        the next operation attaches again by `ref`."""
        async with self._lock:
            self._session = None
            self._working_dir = None
            self._attach = self._ref is not None
            await self._close_own_engine()

    async def _close_own_engine(self) -> None:
        if self._owns_engine:
            engine, self._engine, self._engine_start = self._engine, None, None
            if engine is not None:
                await engine.aclose()

    async def _gone(self) -> bool:
        """Whether the session is no longer live (closed here or elsewhere, swept)."""
        if self._closing:
            return True
        engine, ref = self._engine, self._ref
        if engine is None or ref is None:
            return False
        try:
            await engine.aconnect(ref.id, backend=self._backend)
        except SessionNotFound:
            return True
        except PaddockError:
            return False
        return False

    async def _failure(self, err: PaddockError, path: Optional[str] = None) -> BaseException:
        """What to raise for a Paddock failure of an operation (on `path`, for file operations)."""
        if isinstance(err, SessionNotFound) or (isinstance(err, EngineClosed) and self._closing):
            return WorkspaceUnavailableError(f"the Paddock session {self._describe()} is gone: {err}")
        if isinstance(err, ToolError) and path is not None:
            mapped = _file_error(err, path)
            if mapped is not None:
                return mapped
        if isinstance(err, BackendUnavailable) or (isinstance(err, ToolError) and err.code == "tool:failed"):
            if await self._gone():
                return WorkspaceUnavailableError(f"the Paddock session {self._describe()} is gone: {err}")
        return err

    async def _do(self, operation: Callable[[], Awaitable[_T]], path: Optional[str] = None) -> _T:
        try:
            return await operation()
        except PaddockError as err:
            failure = await self._failure(err, path)
            if failure is err:
                raise
            raise failure from err

    async def _shell(self, session: AsyncSession, script: str, path: Optional[str] = None) -> Any:
        """A helper command in the session (not in the working directory), its CommandResult."""
        return await self._do(lambda: session.run(script), path)

    # ---------------------------------------------------------------- commands

    async def run(
        self,
        command: Union[str, Sequence[str]],
        *,
        shell: bool = False,
        env: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
    ) -> CommandResult:
        _check_timeout(timeout)
        line = _command_line(command, shell)
        session, working_dir = await self._ready()
        script = _common.in_dir_script(working_dir, line)
        limit = MAX_TIMEOUT if timeout is None else min(float(timeout), MAX_TIMEOUT)
        stdout: List[str] = []
        stderr: List[str] = []
        captured = [0]

        def collect(buffer: List[str]) -> Callable[[str], None]:
            def take(text: str) -> None:
                buffer.append(text)
                captured[0] += len(text)
                if captured[0] > MAX_OUTPUT_CHARS:
                    # Raised inside the stream: the request is cancelled and the command killed.
                    raise WorkspaceOutputLimitError(
                        f"the command's output exceeded {MAX_OUTPUT_CHARS} characters and it was stopped; "
                        "redirect its output to a file and read part of it instead",
                        limit=MAX_OUTPUT_CHARS,
                        stdout="".join(stdout)[:_PREVIEW_CHARS],
                        stderr="".join(stderr)[:_PREVIEW_CHARS],
                    )

            return take

        try:
            result = await session.run(
                script,
                env={str(k): str(v) for k, v in env.items()} if env else None,
                timeout=limit,
                on_stdout=collect(stdout),
                on_stderr=collect(stderr),
                # A workspace is a terminal: a process the command detached (`setsid ... &`)
                # runs on, until the workspace's session ends.
                keep_detached=True,
            )
        except CommandTimeout as err:
            if await self._gone():
                raise WorkspaceUnavailableError(f"the Paddock session {self._describe()} is gone") from err
            wanted = "no timeout was given; Paddock's limit is" if timeout is None else "command timed out after"
            raise WorkspaceTimeoutError(
                f"{wanted} {limit:g}s and the command was killed", stdout=err.stdout, stderr=err.stderr
            ) from err
        except PaddockError as err:
            failure = await self._failure(err)
            if failure is err:
                raise
            raise failure from err
        # A command killed by a signal in a live session is a result; one ended because the
        # session was closed is not.
        if self._closing or ((result.exit_code >= 128 or result.exit_code < 0) and await self._gone()):
            raise WorkspaceUnavailableError(f"the Paddock session {self._describe()} was closed during the command")
        return CommandResult(exit_code=result.exit_code, stdout=result.stdout, stderr=result.stderr)

    # ---------------------------------------------------------------- files

    async def _lookup(self, session: AsyncSession, path: str) -> Tuple[str, Optional[int]]:
        """(kind, size) of what `path` leads to, following symlinks: kind `file`, `directory`
        or `other`; a missing path raises FileNotFoundError (NotADirectoryError when a component
        is a file). A shell test, not `file_info`, which opens the file (a FIFO would block it)
        and does not follow a symlink."""
        ((kind, size),) = await self._follow(session, [path])
        if kind == "missing":
            raise _os_error(FileNotFoundError, errno.ENOENT, path)
        if kind == "under_file":
            raise _os_error(NotADirectoryError, errno.ENOTDIR, path)
        return kind, size

    async def _follow(self, session: AsyncSession, paths: Sequence[str]) -> List[Tuple[str, Optional[int]]]:
        found: List[Tuple[str, Optional[int]]] = []
        for start in range(0, len(paths), 500):
            chunk = list(paths[start : start + 500])
            result = await self._shell(session, _follow_script(chunk), chunk[0])
            lines = result.stdout.splitlines()
            if result.exit_code != 0 or len(lines) != len(chunk):
                raise WorkspaceError(f"could not follow the symlinks {chunk[:3]!r}...: {result.stderr.strip()}")
            for line in lines:
                mark, _, size = line.partition(" ")
                if mark == "d":
                    found.append(("directory", None))
                elif mark == "f":
                    found.append(("file", int(size) if size.strip().isdigit() else None))
                elif mark == "o":
                    found.append(("other", None))
                elif mark == "n":
                    found.append(("under_file", None))
                else:
                    found.append(("missing", None))
        return found

    async def read_bytes(self, path: str) -> bytes:
        _absolute(path)
        session, _ = await self._ready()
        # Checked first: Paddock would download a directory whole (as a tar) before refusing it.
        kind, _ = await self._lookup(session, path)
        if kind == "directory":
            raise _os_error(IsADirectoryError, errno.EISDIR, path)
        if kind != "file":
            raise OSError(f"not a regular file: {path!r}")
        return await self._do(lambda: session.files.read(path), path)

    async def write_bytes(self, path: str, data: bytes) -> None:
        _absolute(path)
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"data must be bytes, got {type(data).__name__}")
        session, _ = await self._ready()
        # One command: where the path leads (writes go through a symlink), whether that can be
        # written (not a directory, FIFO or device; no file among its parents), its mode.
        script = (
            _realpath_script(path)
            + 'd="$value"; '
            + f'if [ -d "$d" ]; then exit {_EXIT_IS_DIRECTORY}; fi; '
            + f'if [ -e "$d" ] && ! [ -f "$d" ]; then exit {_EXIT_NOT_REGULAR}; fi; '
            + 'parent="${d%/*}"; [ -n "$parent" ] || parent=/; '
            + _parents_script("parent")
            + 'm=; if [ -f "$d" ]; then m=$(stat -c %a -- "$d" 2>/dev/null); fi; '
            + 'printf "%s\\n" "$m"; printf %s "$d" | base64'
        )
        result = await self._shell(session, script, path)
        failure = _exit_error(result, path)
        if failure is not None:
            raise failure
        mode, _, encoded = result.stdout.partition("\n")
        target = _decoded_path(encoded, path)
        await self._do(lambda: session.files.write(target, bytes(data)), path)
        mode = mode.strip()
        if mode and mode != "644":  # files.write makes a new file (0644): give the old mode back
            await self._shell(session, f"chmod {shlex.quote(mode)} -- {shlex.quote(target)}", path)

    async def stat(self, path: str) -> FileEntry:
        _absolute(path)
        session, _ = await self._ready()
        kind, size = await self._lookup(session, path)
        name = posixpath.basename(posixpath.normpath(path))
        if kind == "directory":
            return FileEntry(name=name, path=path, is_dir=True, size=None)
        return FileEntry(name=name, path=path, is_dir=False, size=size)

    async def list_dir(self, path: str) -> Sequence[FileEntry]:
        _absolute(path)
        session, _ = await self._ready()
        entries = await self._do(lambda: session.files.list(path, depth=1), path)
        if not entries or len(entries) >= _LIST_CAP:
            # list_files stops at _LIST_CAP entries, and a listing longer than the policy's
            # `max_result_chars` comes back spilled to a file, which `files.list` answers as
            # no entries at all: the shell lists those (and checks an empty one).
            return await self._list_by_shell(session, path)
        links = [entry.path for entry in entries if entry.kind == "symlink"]
        followed = dict(zip(links, await self._follow(session, links))) if links else {}
        listing: List[FileEntry] = []
        for entry in sorted(entries, key=lambda item: item.path):
            if entry.kind == "symlink":
                kind, size = followed[entry.path]
                is_dir = kind == "directory"
            else:
                is_dir = entry.kind == "directory"
                size = entry.size
            listing.append(FileEntry(name=entry.name, path=entry.path, is_dir=is_dir, size=None if is_dir else size))
        return listing

    async def _list_by_shell(self, session: AsyncSession, path: str) -> Sequence[FileEntry]:
        result = await self._shell(session, _list_script(path), path)
        failure = _exit_error(result, path)
        if failure is not None:
            raise failure
        raw = base64.b64decode("".join(result.stdout.split()))
        listing = []
        for record in raw.split(b"\0"):
            if not record:
                continue
            name = record[1:].decode("utf-8", errors="surrogateescape")
            listing.append(
                FileEntry(name=name, path=posixpath.join(path, name), is_dir=record[:1] == b"d", size=None)
            )
        return sorted(listing, key=lambda entry: entry.path)

    async def make_dir(self, path: str) -> None:
        _absolute(path)
        session, _ = await self._ready()
        try:
            await self._do(lambda: session.files.make_dir(path), path)
        except (NotADirectoryError, FileExistsError) as err:
            # Paddock reports mkdir's "File exists" as not-a-directory: tell the two apart.
            quoted = shlex.quote(path)
            check = (
                f"if [ -e {quoted} ] || [ -L {quoted} ]; then [ -d {quoted} ] || exit {_EXIT_EXISTS}; fi; "
                f"parent={shlex.quote(posixpath.dirname(path) or '/')}; " + _parents_script("parent") + "exit 0"
            )
            refined = _exit_error(await self._shell(session, check, path), path)
            raise (refined if isinstance(refined, (NotADirectoryError, FileExistsError)) else err) from err

    async def remove(self, path: str) -> None:
        _absolute(path)
        session, working_dir = await self._ready()

        def protected(target: str) -> bool:
            return target == working_dir or working_dir.startswith(target.rstrip("/") + "/")

        if protected(posixpath.normpath(path)):
            raise ValueError("cannot remove the workspace's working directory or its ancestor")
        name = posixpath.basename(path)
        if name in ("", ".", ".."):
            target = await self.realpath(path)
        else:  # the link itself, not where it leads, is what goes
            target = posixpath.join(await self.realpath(posixpath.dirname(path)), name)
        if protected(target):
            raise ValueError("cannot remove the workspace's working directory or its ancestor")
        await self._do(lambda: session.files.remove(path), path)

    async def exists(self, path: str) -> bool:
        _absolute(path)
        session, _ = await self._ready()
        try:
            await self._lookup(session, path)
        except (FileNotFoundError, NotADirectoryError):
            return False
        return True

    async def realpath(self, path: str) -> str:
        _absolute(path)
        session, _ = await self._ready()
        result = await self._shell(session, _realpath_script(path) + 'printf %s "$value" | base64', path)
        if result.exit_code != 0:
            said = (result.stderr or result.stdout).strip() or "a link is unreadable"
            raise OSError(f"cannot resolve {path!r}: {said}")
        return _decoded_path(result.stdout, path)


# ======================================================================================
# PaddockCodeMode: one `run_code` tool over Paddock's code mode (CodeAct style)
# ======================================================================================
#
# Design (see the class's docstring for what the model sees):
#
# - Engine: one per adapter (`policy=`, or none: a policy of code mode and host tools only), or the
#   `engine=` given; started on first use, once, in a thread. Agent runs share it.
# - Session: one Paddock notebook session per agent run (`for_run` gives each run its own state;
#   `for_run_step` copies share it), made at the run's first `run_code` and closed when the run
#   ends (`__aexit__`); `restart: true` closes it and starts another.
# - Host tools: the wrapped tools are registered once per engine under their Python names, each
#   an async dispatcher. Paddock runs an async host tool on the event loop of the request whose
#   script called it, so every `run_code` runs its script on an event loop of its own (in a
#   thread of its own) and the dispatcher finds the calling `run_code`, with its RunContext, by
#   that loop. Two concurrent runs on one engine never see each other's context; no engine per
#   run is needed (starting one and its first script cost ~90 ms; a session ~5 ms).
# - Calls go back to the run's event loop, in the run's contextvars, through a nested
#   `ToolManager.handle_call` on the wrapped toolset (pydantic-ai's validation, hooks, approvals),
#   as pydantic-ai-harness's CodeMode does.

import concurrent.futures  # noqa: E402
import contextvars  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import builtins  # noqa: E402
import keyword  # noqa: E402
import re  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import warnings  # noqa: E402
import weakref  # noqa: E402
from typing import Dict, Set  # noqa: E402

try:
    from pydantic import Field, TypeAdapter
    from pydantic_core import ValidationError as _ValidationError
    from pydantic_core import to_jsonable_python
    from typing_extensions import Annotated, NotRequired, TypedDict

    from pydantic_ai.exceptions import ApprovalRequired, CallDeferred, ModelRetry, UserError
    from pydantic_ai.function_signature import FunctionSignature
    from pydantic_ai.messages import ToolCallPart, ToolReturn, ToolReturnPart
    from pydantic_ai.tool_manager import ToolManager
    from pydantic_ai.tools import RunContext, ToolDefinition, ToolDenied
    from pydantic_ai.toolsets import AbstractToolset, CombinedToolset
    from pydantic_ai.toolsets.abstract import ToolsetTool
except ImportError as _err:  # pragma: no cover - depends on the installation
    raise ImportError(
        "paddock.integrations.pydantic_ai needs pydantic-ai (pydantic-ai-slim 2.68.0): "
        "pip install 'paddock[pydantic-ai]'"
    ) from _err

from .._engine import HostTool  # noqa: E402

#: The one tool the model sees.
RUN_CODE = "run_code"

#: The policy of an engine the adapter starts without `policy=`: code mode and host tools only
#: (no terminal, no file or web tools reachable from the model's code).
_CODEMODE_ONLY_POLICY = """\
# PaddockCodeMode's own engine: scripts reach the wrapped pydantic-ai tools and nothing else.
[toolsets]
enabled = ["codemode", "host"]

[codemode]
max_kept_sessions = 64   # runs keeping a notebook at once (Paddock's default: 16)
"""

# Names a wrapped tool cannot take in the script: Paddock's own tool, the script's `tools`,
# `final_answer` and `asyncio`, keywords and builtins (those would be `tools.<name>` only).
_RESERVED = frozenset(dir(builtins)) | {"tools", "final_answer", "asyncio", "run_tools_script"}
_NOT_IDENTIFIER = re.compile(r"[^A-Za-z0-9_]")
# How much of an argument or result a failure's list of the calls made shows.
_PREVIEW_CHARS = 120
_PREVIEW_CALLS = 10


class _RunCodeArguments(TypedDict):
    code: Annotated[str, Field(description="The Python code to run.")]
    restart: NotRequired[
        Annotated[
            bool,
            Field(
                description="true: start from an empty namespace (forget the variables, functions and "
                "imports of earlier calls) before running the code. Default false: state is kept."
            ),
        ]
    ]


_RUN_CODE_ADAPTER: Any = TypeAdapter(_RunCodeArguments)
_RUN_CODE_SCHEMA: Dict[str, Any] = _RUN_CODE_ADAPTER.json_schema()

_DESCRIPTION_HEAD = """\
Run Python code in a sandbox and get back what it printed and the value of its last expression.

The sandbox is a full Python 3 interpreter (Paddock's code mode: RustPython in a confined worker): \
classes with inheritance, generators, comprehensions, dataclasses, match, exceptions, async/await, \
and the pure-Python standard library (json, re, math, itertools, collections, datetime, functools, \
statistics, ...). It has no file system, network, processes or environment variables: the world \
outside is reached only through the functions listed below.

State persists between calls (variables, functions, classes, imports), REPL-style, for this \
conversation; pass `restart: true` to start from an empty namespace. A script that times out or runs \
out of memory loses the state too (the answer says so).

The last expression's value is returned; you do not need to print it. With `print()` output the \
answer is `{"output": <printed text>, "result": <last expression>}`; without, the value alone \
(`{}` when there is neither). If the code raises, the printed output, the traceback and the error \
come back instead: fix the code and call again."""


def _functions_head(limits: str) -> str:
    return (
        "Functions available in the code (already defined: do not import or redefine them). Call them "
        "directly and synchronously, e.g. `result = name(arg=value)`, with keyword arguments as shown "
        "(positional ones bind in the order listed too). To run calls concurrently, use their awaitable form "
        "`tools.<name>(...)`: `a, b = await asyncio.gather(tools.x(arg=1), tools.x(arg=2))` "
        "(after `import asyncio`). A failing call raises an exception the code can catch: ValueError "
        "for invalid arguments, PermissionError when a call is denied or needs an approval, "
        "RuntimeError otherwise." + limits
    )


def _python_name(name: str) -> str:
    """A wrapped tool's name in the script: non-identifier characters as `_`, `_` before a leading
    digit, and `_` after a keyword, a builtin or a name the script already has."""
    safe = _NOT_IDENTIFIER.sub("_", name) or "_"
    if safe[0].isdigit():
        safe = "_" + safe
    if keyword.iskeyword(safe) or safe in _RESERVED:
        safe += "_"
    return safe


def _parameters(tool_def: ToolDefinition) -> Tuple[str, ...]:
    """The tool's parameter names in its schema's order (the order positional arguments bind in)."""
    properties = (tool_def.parameters_json_schema or {}).get("properties") or {}
    return tuple(str(name) for name in properties)


def _loose_schema(parameters: Sequence[str]) -> Dict[str, Any]:
    """The schema a host tool is registered with: the parameter names only, in order, so Paddock
    binds positional arguments and pydantic-ai (not Paddock) validates the values."""
    return {"type": "object", "properties": {name: {} for name in parameters}}


def _catalog(defs: Mapping[str, ToolDefinition]) -> str:
    """The wrapped tools as Python: TypedDicts for their object types, then one signature each."""
    try:
        signatures = [d.function_signature for d in defs.values()]
        conflicting = FunctionSignature.get_conflicting_type_names(signatures)
        types = FunctionSignature.render_type_definitions(signatures, conflicting)
        functions = [
            d.render_signature("...", is_async=False, conflicting_type_names=conflicting) for d in defs.values()
        ]
    except Exception:  # noqa: BLE001 - a schema the renderer cannot read: names and docs only
        types = []
        functions = []
        for d in defs.values():
            params = ", ".join(_parameters(d))
            doc = f'\n    """{d.description}"""' if d.description else ""
            functions.append(f"def {d.name}({params}):{doc}\n    ...")
    blocks = []
    if types:
        blocks.append("```python\n" + "\n\n".join(types) + "\n```")
    blocks.append("```python\n" + "\n\n".join(functions) + "\n```")
    return "\n\n".join(blocks)


def _preview(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= _PREVIEW_CHARS else text[:_PREVIEW_CHARS] + "..."


def _jsonable(value: Any) -> Any:
    """A wrapped tool's return value as JSON data for the script."""
    if isinstance(value, ToolReturn):
        value = value.return_value
    return to_jsonable_python(value, bytes_mode="base64", serialize_unknown=True)


@dataclasses.dataclass(kw_only=True)
class _RunCodeTool(ToolsetTool[Any]):
    """`run_code` as `get_tools` made it: the folded tools of this step, by original name, and
    their names in the script."""

    folded: Dict[str, ToolsetTool[Any]]
    names: Dict[str, str]  # name in the script -> the tool's name
    parameters: Dict[str, Tuple[str, ...]]  # name in the script -> parameter names, in order


# ---------------------------------------------------------------- routing host calls to runs

#: The `run_code` call each script's event loop serves.
_CALLS: "Dict[asyncio.AbstractEventLoop, _Call]" = {}


class _EngineTools:
    """The dispatchers one engine has (an engine cannot drop a tool): name -> parameter order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.parameters: Dict[str, Tuple[str, ...]] = {}


_ENGINE_TOOLS: "weakref.WeakKeyDictionary[Engine, _EngineTools]" = weakref.WeakKeyDictionary()
_ENGINE_TOOLS_LOCK = threading.Lock()


def _engine_tools(engine: Engine) -> _EngineTools:
    with _ENGINE_TOOLS_LOCK:
        entry = _ENGINE_TOOLS.get(engine)
        if entry is None:
            entry = _ENGINE_TOOLS[engine] = _EngineTools()
        return entry


def _compatible(have: Tuple[str, ...], want: Tuple[str, ...]) -> bool:
    """Whether positional arguments bound by `have` mean the same for a tool taking `want`."""
    common = min(len(have), len(want))
    return have[:common] == want[:common]


def _missing(engine: Engine, wanted: Mapping[str, Tuple[str, ...]]) -> bool:
    """Whether `_register` has anything to do (add a tool, or refuse one)."""
    have = _engine_tools(engine).parameters
    return any(name not in have or not _compatible(have[name], params) for name, params in wanted.items())


def _register(engine: Engine, wanted: Mapping[str, Tuple[str, ...]]) -> None:
    """Adds a dispatcher for each name of `wanted` the engine lacks (blocking: in a thread)."""
    entry = _engine_tools(engine)
    with entry.lock:
        new: List[HostTool] = []
        for name, parameters in wanted.items():
            have = entry.parameters.get(name)
            if have is None:
                if name in engine.tool_names:
                    raise UserError(
                        f"PaddockCodeMode: the tool {name!r} is also a tool of the Paddock engine's own "
                        "(its policy's toolsets, or a host tool of yours): rename one (e.g. the toolset's "
                        ".prefixed(...)) or let the adapter start its own engine (no engine=/policy=)"
                    )
                new.append(
                    HostTool(
                        _dispatcher(name),
                        name=name,
                        description=f"pydantic-ai tool {name} (PaddockCodeMode)",
                        input_schema=_loose_schema(parameters),
                    )
                )
            elif not _compatible(have, parameters):
                raise UserError(
                    f"PaddockCodeMode: the tool {name!r} takes the parameters {list(parameters)}, but a tool of "
                    f"that name with {list(have)} is registered on this Paddock engine already (by another "
                    "PaddockCodeMode sharing it); positional arguments would bind differently. Give the "
                    "adapters engines of their own, or the tools different names"
                )
        if new:
            try:
                engine.add_tools_sync(new)
            except ValueError as err:
                raise UserError(f"PaddockCodeMode: Paddock refused the tools {[t.name for t in new]}: {err}") from err
            for tool in new:
                entry.parameters[tool.name] = wanted[tool.name]


def _dispatcher(name: str) -> Callable[..., Awaitable[Any]]:
    """The host tool behind `name` on an engine: it runs on the event loop of the script that
    called it (Paddock's rule for async host tools), which names the `run_code` call."""

    async def dispatch(**kwargs: Any) -> Any:
        call = _CALLS.get(asyncio.get_running_loop())
        if call is None:
            raise LookupError(f"{name}() can only be called from the run_code tool of a PaddockCodeMode")
        return await call.forward(name, kwargs)

    dispatch.__name__ = dispatch.__qualname__ = name
    return dispatch


def _settle(
    future: "concurrent.futures.Future[Any]", result: Any = None, error: Optional[BaseException] = None
) -> None:
    try:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except concurrent.futures.InvalidStateError:  # cancelled meanwhile
        pass


class _Call:
    """One `run_code` call: where its script's host calls go (the run's event loop, its
    contextvars, a ToolManager over the wrapped toolset), and what they did."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        context: contextvars.Context,
        manager: ToolManager[Any],
        names: Mapping[str, str],
        parent_id: str,
    ) -> None:
        self.loop = loop
        self.context = context
        self.manager = manager
        self.names = dict(names)
        self.parent_id = parent_id
        self.count = 0
        self.calls: Dict[str, ToolCallPart] = {}
        self.returns: Dict[str, ToolReturnPart] = {}
        self.outcomes: Dict[str, str] = {}

    async def forward(self, name: str, kwargs: Dict[str, Any]) -> Any:
        """On the script's loop: runs the call on the run's loop and waits for it. Cancelled
        (the script ended or was cancelled), it cancels the call there."""
        done: "concurrent.futures.Future[Any]" = concurrent.futures.Future()
        running: Dict[str, "asyncio.Task[Any]"] = {}

        def start() -> None:  # on the run's loop, in the run's contextvars
            if done.done():
                return
            task = asyncio.ensure_future(self._call(name, kwargs))
            running["task"] = task

            def finish(t: "asyncio.Task[Any]") -> None:
                if t.cancelled():  # the run's loop is ending: the script still gets an answer
                    _settle(done, error=RuntimeError(f"{name}() was cancelled"))
                elif t.exception() is not None:
                    _settle(done, error=t.exception())
                else:
                    _settle(done, result=t.result())

            task.add_done_callback(finish)

        self.loop.call_soon_threadsafe(start, context=self.context)
        try:
            return await asyncio.wrap_future(done)
        except asyncio.CancelledError:

            def stop() -> None:
                task = running.get("task")
                if task is not None:
                    task.cancel()

            try:
                self.loop.call_soon_threadsafe(stop)
            except RuntimeError:  # the run's loop is closed
                pass
            raise

    async def _call(self, name: str, kwargs: Dict[str, Any]) -> Any:
        """On the run's loop: the call through pydantic-ai's ToolManager, its failure as the
        exception the script sees."""
        original = self.names.get(name)
        if original is None:
            raise LookupError(f"{name}() is not available in this run")
        self.count += 1
        call_id = f"{self.parent_id}__{self.count}"
        part = ToolCallPart(tool_name=original, args=dict(kwargs), tool_call_id=call_id)
        self.calls[call_id] = part
        try:
            result = await self.manager.handle_call(part, wrap_validation_errors=False)
        except (CallDeferred, ApprovalRequired) as err:
            self.outcomes[call_id] = "needed an approval no one gave, and did not run"
            raise PermissionError(
                f"{name}() needs an approval (or runs outside the agent), which nothing resolved: the agent "
                "has no HandleDeferredToolCalls capability answering it inside run_code"
            ) from err
        except _ValidationError as err:
            self.outcomes[call_id] = "was refused: invalid arguments"
            said = "; ".join(
                f"{'.'.join(str(part) for part in e['loc']) or 'arguments'}: {e['msg']}"
                f" (got {_preview(e.get('input'))})"
                for e in err.errors(include_url=False)
            )
            raise ValueError(f"invalid arguments for {name}(): {said}") from err
        except Exception as err:
            self.outcomes[call_id] = f"raised {type(err).__name__}, so it may have done part of its work"
            raise
        if isinstance(result, ToolDenied):
            self.outcomes[call_id] = "was denied and did not run"
            self.returns[call_id] = ToolReturnPart(
                tool_name=original, content=result.message, tool_call_id=call_id, outcome="denied"
            )
            raise PermissionError(f"the call of {name}() was denied: {result.message}")
        metadata = result.metadata if isinstance(result, ToolReturn) else None
        value = _jsonable(result)
        self.returns[call_id] = ToolReturnPart(
            tool_name=original, content=value, tool_call_id=call_id, metadata=metadata
        )
        self.outcomes[call_id] = f"returned {_preview(value)}"
        return value

    def summary(self) -> str:
        """The calls the script made, for a failure's text: repeating one repeats what it did."""
        if not self.calls:
            return ""
        in_script = {original: name for name, original in self.names.items()}
        lines = [f"{len(self.calls)} tool call(s) ran before the error:"]
        for call_id, part in list(self.calls.items())[:_PREVIEW_CALLS]:
            outcome = self.outcomes.get(call_id, "did not finish")
            lines.append(f"- {in_script.get(part.tool_name, part.tool_name)}({_preview(part.args)}) {outcome}")
        if len(self.calls) > _PREVIEW_CALLS:
            lines.append(f"- ... and {len(self.calls) - _PREVIEW_CALLS} more")
        return "\n".join(lines)


class _OwnLoop:
    """A coroutine run on a new event loop in a thread of its own, registered as a `run_code`
    call's (so the script's host calls find it); `cancel()` from any thread stops it there."""

    def __init__(self, call: _Call) -> None:
        self.call = call
        self.lock = threading.Lock()
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.task: "Optional[asyncio.Task[Any]]" = None
        self.cancelled = False

    async def run(self, make: Callable[[], Awaitable[_T]]) -> _T:
        done: "concurrent.futures.Future[_T]" = concurrent.futures.Future()

        async def main() -> _T:
            loop = asyncio.get_running_loop()
            with self.lock:
                if self.cancelled:
                    raise asyncio.CancelledError()
                self.loop, self.task = loop, asyncio.current_task()
            _CALLS[loop] = self.call
            try:
                return await make()
            finally:
                _CALLS.pop(loop, None)

        def worker() -> None:
            try:
                result = asyncio.run(main())
            except BaseException as err:  # noqa: BLE001 - handed to the caller
                _settle(done, error=err)
            else:
                _settle(done, result=result)

        threading.Thread(target=worker, name="paddock-codemode", daemon=True).start()
        try:
            return await asyncio.wrap_future(done)
        except asyncio.CancelledError:
            self.cancel()
            raise

    def cancel(self) -> None:
        """Stops the coroutine (a script: Paddock cancels it and ends its notebook state)."""
        with self.lock:
            self.cancelled = True
            loop, task = self.loop, self.task
        if loop is not None and task is not None:
            try:
                loop.call_soon_threadsafe(task.cancel)
            except RuntimeError:  # finished meanwhile
                pass


# ---------------------------------------------------------------- engine and run state


class _Shared:
    """What an adapter and its per-run copies share: the engine (started once) and the live
    sessions (closed by `close()`)."""

    def __init__(self, engine: Optional[Engine], policy: Any) -> None:
        self.given = engine
        self.policy = policy
        self.engine: Optional[Engine] = engine
        self.lock = threading.Lock()
        self.start: "Optional[concurrent.futures.Future[Engine]]" = None
        self.policy_file: Optional[str] = None
        self.sessions: Set[AsyncSession] = set()

    async def get_engine(self) -> Engine:
        engine = self.engine
        if engine is not None:
            return engine
        with self.lock:
            start = self.start
            if start is None or start.cancelled() or (start.done() and start.exception() is not None):
                start = self.start = concurrent.futures.Future()
                threading.Thread(target=self._start, args=(start,), name="paddock-codemode-start", daemon=True).start()
        # Shielded: a caller cancelled meanwhile leaves the engine to the next one.
        engine = await asyncio.shield(asyncio.wrap_future(start))
        self.engine = engine
        return engine

    def _start(self, future: "concurrent.futures.Future[Engine]") -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            policy = self.policy
            if policy is None:
                if self.policy_file is None:
                    fd, path = tempfile.mkstemp(prefix="paddock-codemode-", suffix=".toml")
                    with os.fdopen(fd, "w") as out:
                        out.write(_CODEMODE_ONLY_POLICY)
                    self.policy_file = path
                policy = self.policy_file
            future.set_result(Engine(policy=policy, keep_state=True))
        except BaseException as err:  # noqa: BLE001 - the caller raises it
            future.set_exception(err)

    async def close(self) -> None:
        sessions, self.sessions = list(self.sessions), set()
        for session in sessions:
            await _end_session(session)
        if self.given is None:
            with self.lock:
                engine, start, self.engine, self.start = self.engine, self.start, None, None
            if engine is None and start is not None and start.done() and start.exception() is None:
                engine = start.result()
            if engine is not None:
                await engine.aclose()
            path, self.policy_file = self.policy_file, None
            if path is not None:
                try:
                    os.unlink(path)
                except OSError:
                    pass


async def _end_session(session: AsyncSession) -> None:
    """Ends a run's session: its notebook (worker and names) and anything else in it."""
    try:
        await session.close()
    except PaddockError:
        pass  # the engine is gone already: so is the notebook


class _RunState:
    """One agent run's notebook: its Paddock session, made on the first `run_code`, and the
    script running in it."""

    def __init__(self) -> None:
        self.session: Optional[AsyncSession] = None
        self.engine: Optional[Engine] = None  # the session's
        self.lock: Optional[asyncio.Lock] = None
        self.running: Optional[_OwnLoop] = None
        self.entered = 0

    def locked(self) -> asyncio.Lock:
        if self.lock is None:
            self.lock = asyncio.Lock()
        return self.lock

    async def ensure(self, shared: _Shared, engine: Engine) -> AsyncSession:
        if self.session is not None and self.engine is not engine:
            self.session = None  # of an engine `close()` ended: this run starts again, empty
        if self.session is None:
            self.session, self.engine = await engine.asession(), engine
            shared.sessions.add(self.session)
        return self.session

    async def close(self, shared: _Shared) -> None:
        running, self.running = self.running, None
        if running is not None:  # the run ended while its run_code was still going: stop it
            running.cancel()
        session, self.session = self.session, None
        if session is not None:
            shared.sessions.discard(session)
            await _end_session(session)


# ---------------------------------------------------------------- the toolset


class PaddockCodeMode(AbstractToolset[Any]):
    """A pydantic-ai toolset with one tool, `run_code(code, restart=False)`: the model's Python runs
    in Paddock's code mode and calls the wrapped toolsets' tools as plain functions (CodeAct).

    ```python
    agent = Agent(model, toolsets=[PaddockCodeMode(FunctionToolset([lookup, convert]))])
    ```

    Args:
        *toolsets: the toolsets whose tools the code calls (pydantic-ai `AbstractToolset`s).
        engine: an existing `paddock.Engine(keep_state=True)` to run the scripts (never closed here).
        policy: the policy of an engine the adapter starts itself (closed by `close()`); with neither,
            the adapter's engine allows code mode and the host tools only.
        max_duration: seconds a script may run (Paddock's `timeout`); None: the policy's (60 s).
        max_tool_calls: tool calls per script; None: the policy's (50).
        max_memory_mb, max_output_chars: the script's memory and printed output; None: the policy's.
        max_retries: failed `run_code` calls in a row the model may retry (pydantic-ai's tool
            retries: one more ends the run with `UnexpectedModelBehavior`).
        id: the toolset's id (durable execution).

    What the model gets back: the value of the code's last expression, with what it printed as
    `{"output": ..., "result": ...}` (the shape pydantic-ai-harness's `CodeMode` answers in).

    Errors are a `ModelRetry` whose text is the printed output, the traceback and the error (and
    the tool calls already made, since repeating one repeats what it did). pydantic-ai answers the
    call with a `ToolReturnPart(outcome="retried")` carrying that text, which the model adapters
    send on the provider's error channel (Anthropic's `is_error`, Bedrock's `status="error"`), so
    the model reads it as "this call failed, fix it" rather than as a result; it counts against
    `max_retries`, so a model stuck on failing code ends the run (`UnexpectedModelBehavior`)
    instead of looping until the request limit, and a success resets the count. An error
    returned as plain text would look like a success to the model, to the run's retry
    accounting and to instrumentation. It is also what pydantic-ai-harness's `CodeMode` does, so
    prompts written for it carry over.

    One Paddock notebook session per agent run (`for_run`), closed when the run ends; the engine is
    the adapter's (or the one given), shared by its runs; `close()` ends its live sessions and an
    engine it started. See the module's documentation for the rest.
    """

    def __init__(
        self,
        *toolsets: AbstractToolset[Any],
        engine: Optional[Engine] = None,
        policy: Optional[Union[str, "os.PathLike[str]"]] = None,
        max_duration: Optional[float] = None,
        max_tool_calls: Optional[int] = None,
        max_memory_mb: Optional[int] = None,
        max_output_chars: Optional[int] = None,
        max_retries: int = 3,
        id: Optional[str] = None,
    ) -> None:
        _common.check_engine_args(engine, policy)
        for toolset in toolsets:
            if not isinstance(toolset, AbstractToolset):
                raise TypeError(
                    f"PaddockCodeMode takes pydantic-ai toolsets, got {type(toolset).__name__} "
                    "(wrap functions in pydantic_ai.toolsets.FunctionToolset([...]))"
                )
        if max_retries < 0:
            raise ValueError("max_retries must be 0 or more")
        self.wrapped: AbstractToolset[Any] = toolsets[0] if len(toolsets) == 1 else CombinedToolset(list(toolsets))
        self._shared = _Shared(engine, policy)
        self._limits: Dict[str, Any] = {
            key: value
            for key, value in (
                ("timeout", max_duration),
                ("max_tool_calls", max_tool_calls),
                ("max_memory_mb", max_memory_mb),
                ("max_output_chars", max_output_chars),
            )
            if value is not None
        }
        self._max_retries = max_retries
        self._id = id
        self._run: Optional[_RunState] = None

    def _copy(self, wrapped: AbstractToolset[Any], run: Optional[_RunState]) -> "PaddockCodeMode":
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.wrapped = wrapped
        new._run = run
        return new

    def __repr__(self) -> str:
        return f"PaddockCodeMode({self.wrapped.label})"

    # ------------------------------------------------------------ identity

    @property
    def id(self) -> Optional[str]:
        return self._id

    @property
    def label(self) -> str:
        return f"PaddockCodeMode({self.wrapped.label})"

    @property
    def engine(self) -> Optional[Engine]:
        """The engine the scripts run on (None before the first `run_code` when the adapter
        starts its own)."""
        return self._shared.engine

    @property
    def session(self) -> Optional[AsyncSession]:
        """This run's Paddock session (on the per-run copy pydantic-ai uses; None before its
        first `run_code`)."""
        return self._run.session if self._run is not None else None

    # ------------------------------------------------------------ life cycle

    async def for_run(self, ctx: RunContext[Any]) -> AbstractToolset[Any]:
        """A copy with a notebook of its own for this run."""
        return self._copy(await self.wrapped.for_run(ctx), _RunState())

    async def for_run_step(self, ctx: RunContext[Any]) -> AbstractToolset[Any]:
        wrapped = await self.wrapped.for_run_step(ctx)
        if wrapped is self.wrapped:
            return self
        return self._copy(wrapped, self._run)  # the run's notebook goes on

    async def __aenter__(self) -> "PaddockCodeMode":
        await self.wrapped.__aenter__()
        if self._run is not None:
            self._run.entered += 1
        return self

    async def __aexit__(self, *args: Any) -> Optional[bool]:
        """The end of the run: its Paddock session (the notebook) is closed."""
        try:
            return await self.wrapped.__aexit__(*args)
        finally:
            run = self._run
            if run is not None:
                run.entered -= 1
                if run.entered <= 0:
                    run.entered = 0
                    await run.close(self._shared)

    async def close(self) -> None:
        """Closes the live sessions of this adapter's runs and an engine it started (the next use
        starts a new one)."""
        if self._run is not None:
            await self._run.close(self._shared)
        await self._shared.close()

    def apply(self, visitor: Callable[[AbstractToolset[Any]], None]) -> None:
        self.wrapped.apply(visitor)

    def visit_and_replace(
        self, visitor: Callable[[AbstractToolset[Any]], AbstractToolset[Any]]
    ) -> AbstractToolset[Any]:
        return self._copy(self.wrapped.visit_and_replace(visitor), self._run)

    def _instruction_children(self) -> Sequence[AbstractToolset[Any]]:
        return (self.wrapped,)

    def _authors_own_instructions(self) -> bool:
        return False

    # ------------------------------------------------------------ tools

    def _limits_text(self) -> str:
        said = []
        if "timeout" in self._limits:
            said.append(f"{self._limits['timeout']:g} s per call")
        if "max_tool_calls" in self._limits:
            said.append(f"{self._limits['max_tool_calls']} function calls per call")
        return f" Limits: {', '.join(said)}." if said else ""

    async def get_tools(self, ctx: RunContext[Any]) -> Dict[str, ToolsetTool[Any]]:
        """`run_code` (the wrapped tools folded in), and the tools that stay native: framework
        control tools, tools not revealed yet, external and output tools, other code tools."""
        wrapped_tools = await self.wrapped.get_tools(ctx)
        folded: Dict[str, ToolsetTool[Any]] = {}
        native: Dict[str, ToolsetTool[Any]] = {}
        for name, tool in wrapped_tools.items():
            d = tool.tool_def
            if (
                d.tool_kind is not None
                or d.kind not in ("function", "unapproved")
                or d.unless_native is not None
                or (d.metadata is not None and "code_arg_name" in d.metadata)
                or not ctx.is_tool_available(d)
            ):
                native[name] = tool
            else:
                folded[name] = tool
        if RUN_CODE in native:
            raise UserError(f"PaddockCodeMode: a wrapped tool is named {RUN_CODE!r}, the name of its own tool")
        names: Dict[str, str] = {}
        defs: Dict[str, ToolDefinition] = {}
        for name, tool in folded.items():
            python = _python_name(name)
            if python in names:
                warnings.warn(
                    f"PaddockCodeMode: tool {name!r} (as {python!r}) collides with {names[python]!r}; "
                    f"{name!r} is left out of run_code",
                    UserWarning,
                    stacklevel=2,
                )
                continue
            names[python] = name
            defs[python] = tool.tool_def if python == name else dataclasses.replace(tool.tool_def, name=python)
        description = _DESCRIPTION_HEAD
        if defs:
            description += "\n\n" + _functions_head(self._limits_text()) + "\n\n" + _catalog(defs)
        elif self._limits:
            description += "\n\n" + self._limits_text().strip()
        run_code = _RunCodeTool(
            toolset=self,
            tool_def=ToolDefinition(
                name=RUN_CODE,
                description=description,
                parameters_json_schema=_RUN_CODE_SCHEMA,
                metadata={"code_arg_name": "code", "code_arg_language": "python"},
                sequential=True,
            ),
            max_retries=self._max_retries,
            args_validator=_RUN_CODE_ADAPTER.validator,
            folded={names[python]: folded[names[python]] for python in names},
            names=names,
            parameters={python: _parameters(d) for python, d in defs.items()},
        )
        return {**native, RUN_CODE: run_code}

    async def call_tool(
        self, name: str, tool_args: Dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        if not isinstance(tool, _RunCodeTool):
            return await self.wrapped.call_tool(name, tool_args, ctx, tool)
        code = str(tool_args["code"])
        if self._run is None:  # used outside an agent run: the state is this instance's
            self._run = _RunState()
        run, shared = self._run, self._shared
        async with run.locked():
            engine = await shared.get_engine()
            if _missing(engine, tool.parameters):
                await asyncio.get_running_loop().run_in_executor(None, _register, engine, tool.parameters)
            if tool_args.get("restart"):
                await run.close(shared)
            session = await run.ensure(shared, engine)
            parent = ctx.tool_manager
            manager = ToolManager(
                toolset=self.wrapped,
                root_capability=parent.root_capability if parent is not None else None,
                ctx=ctx,
                tools=tool.folded,
            )
            call = _Call(
                asyncio.get_running_loop(),
                contextvars.copy_context(),
                manager,
                tool.names,
                ctx.tool_call_id or RUN_CODE,
            )
            limits = dict(self._limits)
            script = run.running = _OwnLoop(call)
            try:
                answer = await script.run(lambda: session.run_tools_script(code, **limits))
            finally:
                if run.running is script:
                    run.running = None
        return _answer(answer, call)


def _answer(answer: Mapping[str, Any], call: _Call) -> Any:
    """What `run_code` returns for a script's result object, or the ModelRetry it raises."""
    notebook = answer.get("notebook")
    if not isinstance(notebook, Mapping):
        raise UserError(
            "PaddockCodeMode needs an engine that keeps state between scripts: "
            "paddock.Engine(..., keep_state=True), or let the adapter start its own"
        )
    output = str(answer.get("output") or "")
    if not answer.get("ok"):
        raise ModelRetry(_failure_text(answer, output, notebook, call))
    result = answer.get("result")
    notice = notebook.get("reset_reason")
    if notice:
        value: Any = {"notice": f"the state was reset before this call: {notice}"}
        if output:
            value["output"] = output
        if result is not None:
            value["result"] = result
    elif not output:
        value = result if result is not None else {}
    elif result is None:
        value = {"output": output}
    else:
        value = {"output": output, "result": result}
    return ToolReturn(
        return_value=value,
        metadata={
            "code_mode": True,
            "tool_calls": call.calls,
            "tool_returns": call.returns,
            "final_answer": bool(answer.get("final_answer")),
            "stats": answer.get("stats"),
            "notebook": dict(notebook),
        },
    )


def _failure_text(answer: Mapping[str, Any], output: str, notebook: Mapping[str, Any], call: _Call) -> str:
    parts: List[str] = []
    if output:
        parts.append("Printed before the error:\n" + output.rstrip("\n"))
    if answer.get("traceback"):
        parts.append(str(answer["traceback"]))
    parts.append(str(answer.get("error") or answer.get("error_code") or "the code failed"))
    if answer.get("hint"):
        parts.append(f"Hint: {answer['hint']}")
    if notebook.get("state_ended"):
        parts.append(f"Note: {notebook['state_ended']}")
    summary = call.summary()
    if summary:
        parts.append(summary)
    return "\n".join(parts)
