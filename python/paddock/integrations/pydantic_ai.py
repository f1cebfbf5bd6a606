"""pydantic-ai workspaces on Paddock sessions: `PaddockWorkspace` (DESIGN.md section 9).

```python
from paddock.integrations.pydantic_ai import PaddockWorkspace

workspace = PaddockWorkspace(policy="ops.toml", backend="docker")    # no I/O yet
result = await agent.run("...", workspace=workspace)                # first use: engine + session
ref = workspace.ref                    # WorkspaceRef(provider="paddock", id=<Paddock session id>)
again = PaddockWorkspace(policy="ops.toml", backend="docker", ref=ref)   # attaches, never creates
await again.close()                    # ends the Paddock session and everything in it
```

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
- A process that outlives its command: Paddock's in-environment agent ends what a finished
  command leaves running (local sandbox and docker alike), including a process that `setsid`
  detached into its own session, since it still carries the command's run id. The suite's rule
  "a backend attached by ref reaches a detached process" fails for that reason; long-running
  work belongs in `adapter.session.run(..., background=True)` (Paddock's `process` tool).
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

__all__ = ["PaddockWorkspace", "PROVIDER"]

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
