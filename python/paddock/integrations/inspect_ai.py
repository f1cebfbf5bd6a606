"""Inspect AI sandbox environments on Paddock sessions: sandbox type `"paddock"` (DESIGN.md section 9).

```python
from inspect_ai import Task
from paddock.integrations.inspect_ai import PaddockSandboxConfig

Task(..., sandbox="paddock")                                             # the default policy
Task(..., sandbox=("paddock", "ops.toml"))                               # a policy file
Task(..., sandbox=("paddock", PaddockSandboxConfig(policy="ops.toml", backend="docker")))
```

`PaddockSandboxEnvironment` is an `inspect_ai.util.SandboxEnvironment` (inspect-ai 0.3.285)
registered as `"paddock"` by importing this module (`@sandboxenv(name="paddock")`); installed
with the package's `inspect-ai` extra, the entry point `[project.entry-points.inspect_ai] paddock
= "paddock.integrations.inspect_ai"` makes Inspect import it when a task names the type. It
passes Inspect's own conformance checks, `inspect_ai.util._sandbox.self_check`, except where
the list at the end says otherwise.

What maps to what
-----------------

- Config: `PaddockSandboxConfig(policy=None, backend=None)` (a pydantic model; also what
  `config_deserialize` makes of a dict), or a string, which is a policy file path. `policy=None`:
  the engine's default (`$PADDOCK_POLICY`, else the built-in policy: the local backend in its
  workspace-write sandbox). `backend=`: the backend of the policy the sessions' tools run on. A
  relative policy path is made absolute where the engine starts (Inspect runs `task_init` in the
  task's directory).
- `task_init` starts the engine (`paddock embed`, in a worker thread: not on the event loop), one
  per config, shared by the samples of every task that uses that config; `task_cleanup` closes it.
  The engines live on Inspect's sandbox lifecycle scope (one per eval batch), or in this module
  when the provider is driven directly. A `sample_init` without a `task_init` starts the engine
  itself (it then ends with `task_cleanup`, or with this interpreter).
- `sample_init` -> one Paddock session per sample (id `inspect-<hex>`), returned as the
  `"default"` environment, and its working directory: its own, never the caller's current
  directory (on a container backend whose image has a writable `/workspace` (docker),
  `/workspace`; elsewhere `/tmp/paddock-workspace-<session id>`, which on the sandboxed local
  backend lies in the session's private `/tmp`). The same command records who the session runs
  as and whether it can switch users (below).
- `sample_cleanup` -> the working directory removed (where `/tmp` is not the session's own) and
  the session closed: its environment, files and processes. `task_cleanup(cleanup=True)` also
  closes the sessions of samples whose cleanup did not run; with `cleanup=False`
  (`--no-sandbox-cleanup`) they stay live, listed in a warning (`paddock sessions list` /
  `close`).
- `exec(cmd, input, cwd, env, user, timeout)` -> `AsyncSession.run` (the `terminal` tool, stdout
  and stderr streamed apart): the argv quoted into a shell line (`shlex.join`), started in the
  working directory (made again if a command removed it) or in `cwd` (a relative `cwd` resolves
  against the working directory). `cmd[0]` is found through the session's `PATH`, with `env`
  applied (the `terminal` tool's `env`). A non-zero exit is a result, `ExecResult(success,
  returncode, stdout, stderr)`; a signal death is 128 + the signal (`143` for SIGTERM).
  - `input`: text (or bytes that are UTF-8) up to 1 MiB goes as the `terminal` tool's `stdin`;
    anything else (binary, large) is uploaded byte-exact to a file in the session's `/tmp` that
    the command reads as its stdin, removed as it starts. Without `input`, stdin is at EOF.
  - `timeout` -> Paddock's `timeout`: `TimeoutError` (the output so far in its
    `truncated_output`), and Paddock kills the command and every process it started. `None` ->
    3600 s, Paddock's longest, as is anything longer. `timeout_retry` and `concurrency` are
    accepted and have no effect (a Paddock timeout is the command's own, not a transport hang).
  - Output limit: each stream keeps its last `SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE`
    bytes (10 MiB, `INSPECT_SANDBOX_MAX_EXEC_OUTPUT_SIZE`), the beginning discarded, as Inspect's
    local sandbox does; the command runs to its end.
  - `user=`: the session's own user (by name or uid) runs as any command does. Another user
    needs a session running as root that can switch users, found at `sample_init`: util-linux
    `runuser -u USER --` (launched by absolute path), else busybox's `su -s /bin/sh USER -c`; a
    numeric uid is looked up in the environment's `/etc/passwd`. Where the session cannot (not
    root, no such tool, or the sandbox lacks the privilege, as Paddock's local sandbox does:
    no `CAP_SETUID`/`CAP_SETGID`, no new privileges), `SandboxUserUnsupportedError` says so. A
    user that does not exist is a failed result whose stderr names it.
  - Errors: `cwd` that does not exist / is not a directory / cannot be entered ->
    `FileNotFoundError` / `NotADirectoryError` / `PermissionError`; a `cmd[0]` path that is a
    directory or not executable -> `PermissionError` (both checked by the command itself before
    it starts, so the command's own failures stay results); a command the policy or an approver
    refuses -> `paddock.PermissionDenied` (a `PermissionError`); a session that is gone (closed,
    swept), an engine that is closed, a backend that is down -> `SandboxUnavailableError`.
- `read_file(file, text=)` -> one shell test of the path (following symlinks) then
  `AsyncSession.files.read` (the embedding protocol's byte-exact download): bytes, or text
  decoded as strict UTF-8 (`UnicodeDecodeError`) with newlines as they are (`\\r\\n` stays).
  Missing -> `FileNotFoundError`; a directory -> `IsADirectoryError`; not readable by the
  session's user -> `PermissionError`; larger than `SandboxEnvironmentLimits.MAX_READ_FILE_SIZE`
  (100 MiB, `INSPECT_SANDBOX_MAX_READ_FILE_SIZE`) -> `OutputLimitExceededError` before anything
  is read; a FIFO, device or socket -> `OSError` (EINVAL). Every error names the path as given.
- `write_file(file, contents)` -> the contents (text as UTF-8) as the stdin of one shell command
  that makes the parents and writes the file in place (`cat > file`, as `open(file, "w")` would:
  through a symlink, the mode, owner and hard links of an existing file kept). A directory ->
  `IsADirectoryError`; a file among the parents -> `NotADirectoryError`; a file or directory the
  session's user may not write -> `PermissionError`.
- Relative paths (`read_file`, `write_file`, `cwd`) resolve against the session's working
  directory; absolute ones are the environment's own (`/tmp` is the session's private one on the
  local sandbox).
- `PaddockSandboxEnvironment.session` (`paddock.AsyncSession`), `.engine` and `.working_dir` give
  what the Inspect interface has no word for (background commands, Python contexts, snapshots).

Not supported, or different
---------------------------

- Permissions are the session user's: Paddock's local sandbox drops every capability, so even
  root there keeps to permission bits (Inspect's three permission checks pass); a session that
  is root with `CAP_DAC_OVERRIDE` (a docker container as root) reads and writes any file, and
  those checks fail there, as Inspect's own docker sandbox as root fails its write checks, unless
  the docker backend says `drop_capabilities = ["DAC_OVERRIDE"]`. The
  adapter reports what the session's user can do and does not judge by the mode bits.
- Every command passes Paddock's policy, the adapter's helper commands too. What its rules send
  for a human's approval (changing user accounts, writing system files, a recursive delete
  outside temporary directories, ...) fails with `paddock.ApprovalDenied` (a `PermissionError`):
  the adapter's engines have no approver. Inspect's `test_exec_as_user` fails on that (its
  `adduser`) before anything else.
- Another user's exec on Paddock's sandboxed local backend: its sandbox cannot switch users
  (`SandboxUserUnsupportedError`). On docker `user=` works (busybox su in the `paddock-test`
  image), but that image has no `adduser` for `test_exec_as_user`.
- No command runs longer than 3600 s (Paddock's longest); a timed-out command is not retried; a
  timeout that is not a positive number is a `ValueError`.
- A process a command leaves running (`cmd &`, `nohup`, `setsid`) ends with the command, as Paddock
  ends what a finished command leaves behind: background work belongs to
  `env.session.run(..., background=True)`. Inspect's tools that rely on its injected
  `inspect-sandbox-tools` server (`exec_remote`, `bash_session`, `text_editor`, the web browser)
  are not tested here; those whose state lives in a server one exec leaves running are not
  expected to keep it.
- Undecodable output bytes of `exec` arrive as U+FFFD (Inspect allows this); `read_file` is exact.
- Commands share the Paddock session's shell state (an `export` of one is seen by the next; its
  `cd` is not).
- `connection()` (`inspect sandbox connect`) and `cli_cleanup` (`inspect sandbox cleanup paddock`)
  are not implemented: use `paddock sessions list` / `paddock sessions close ID`.
- Paddock's client is asyncio-based: Inspect must run on asyncio (its default), not trio.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import logging
import os
import posixpath
import secrets
import shlex
import tempfile
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Deque, Dict, List, Literal, Optional, Set, Tuple, Union, overload

try:
    from inspect_ai.util import (
        ExecResult,
        OutputLimitExceededError,
        SandboxEnvironment,
        SandboxEnvironmentConfigType,
        SandboxEnvironmentLimits,
        SandboxUnavailableError,
        SandboxUserUnsupportedError,
        sandboxenv,
    )
    from inspect_ai.util._sandbox.lifecycle import sandbox_lifecycle_state
    from pydantic import BaseModel, ConfigDict
except ImportError as _err:  # pragma: no cover - depends on the installation
    raise ImportError(
        "paddock.integrations.inspect_ai needs inspect-ai (0.3.285): pip install 'paddock[inspect-ai]'"
    ) from _err

from .._engine import Engine
from .._errors import (
    BackendUnavailable,
    CommandTimeout,
    EngineClosed,
    FileNotFound,
    NotADirectory,
    PaddockError,
    PermissionDenied,
    SessionNotFound,
    ToolError,
    file_code_of_message,
)
from .._session import AsyncSession
from . import _common

__all__ = ["PaddockSandboxConfig", "PaddockSandboxEnvironment", "SANDBOX_TYPE"]

logger = logging.getLogger(__name__)

#: The sandbox type's name in Inspect.
SANDBOX_TYPE = "paddock"
#: The longest foreground command Paddock's `terminal` tool accepts, seconds.
MAX_TIMEOUT = 3600.0
#: The time limit of the adapter's own helper commands (a file's test, a write), seconds.
HELPER_TIMEOUT = 600.0
#: Stdin (UTF-8 bytes) sent inline with the command; more (or binary) goes through a file.
INLINE_STDIN_BYTES = 1024 * 1024
#: A command line longer than this (characters) is uploaded and run from a file: one line of
#: the embedding protocol may not pass 16 MiB, and a longer one would end the engine.
INLINE_SCRIPT_CHARS = 4 * 1024 * 1024

_SESSION_PREFIX = "inspect-"

# Exit codes of the adapter's shell helpers: 100 + the Linux errno (pydantic_ai's convention).
_EXIT_NOT_DIRECTORY = 120
_EXIT_IS_DIRECTORY = 121
_EXIT_PERMISSION = 113


# ------------------------------------------------------------------ config


class PaddockSandboxConfig(BaseModel):
    """The `"paddock"` sandbox's configuration.

    Args:
        policy: a policy file for the engine (None: `$PADDOCK_POLICY`, else the built-in policy).
        backend: the backend of the policy the sessions' tools run on (None: the policy's routes).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    policy: Optional[str] = None
    backend: Optional[str] = None


def _config_of(config: Optional[SandboxEnvironmentConfigType]) -> PaddockSandboxConfig:
    if config is None:
        return PaddockSandboxConfig()
    if isinstance(config, PaddockSandboxConfig):
        return config
    if isinstance(config, (str, os.PathLike)):
        return PaddockSandboxConfig(policy=os.fspath(config))
    if isinstance(config, dict):
        return PaddockSandboxConfig(**config)
    raise TypeError(
        f"the {SANDBOX_TYPE!r} sandbox takes a PaddockSandboxConfig or a policy file path, "
        f"not {type(config).__name__}"
    )


_ConfigKey = Tuple[Optional[str], Optional[str]]


def _key_of(config: PaddockSandboxConfig) -> _ConfigKey:
    return (config.policy, config.backend)


# ------------------------------------------------------------------ engines of a lifecycle


@dataclass(eq=False)
class _EngineEntry:
    """One config's engine: started once (in a thread), shared by the samples that use it."""

    start: "concurrent.futures.Future[Engine]"
    tasks: int = 0  # task_init calls not yet matched by task_cleanup
    environments: Set["PaddockSandboxEnvironment"] = field(default_factory=set)


class _EngineRegistry:
    """The engines of one Inspect sandbox lifecycle scope (an eval batch), by config."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.entries: Dict[_ConfigKey, _EngineEntry] = {}


_DIRECT = _EngineRegistry()  # the provider driven directly, outside any lifecycle scope


def _registry() -> _EngineRegistry:
    scope = sandbox_lifecycle_state()
    return scope.get(_EngineRegistry) if scope is not None else _DIRECT


def _start_engine(
    policy: Optional[str], backend: Optional[str], future: "concurrent.futures.Future[Engine]"
) -> None:
    if not future.set_running_or_notify_cancel():
        return
    try:
        engine = Engine(policy=policy, backend=backend)
    except BaseException as err:  # noqa: BLE001 - every waiter gets it
        future.set_exception(err)
    else:
        future.set_result(engine)


async def _engine_entry(config: PaddockSandboxConfig, *, for_task: bool) -> Tuple[_EngineEntry, Engine]:
    """The config's engine (started now, once, if none is), and its entry."""
    registry = _registry()
    key = _key_of(config)
    with registry.lock:
        entry = registry.entries.get(key)
        if entry is None:
            entry = _EngineEntry(start=concurrent.futures.Future())
            registry.entries[key] = entry
            # The policy path is made absolute now, in the caller's directory (task_init: the
            # task's), before the engine starts in a thread of its own.
            policy = os.path.abspath(config.policy) if config.policy is not None else None
            threading.Thread(
                target=_start_engine,
                args=(policy, config.backend, entry.start),
                name="paddock-inspect-engine",
                daemon=True,
            ).start()
        if for_task:
            entry.tasks += 1
    try:
        engine = await asyncio.shield(asyncio.wrap_future(entry.start))
    except asyncio.CancelledError:
        raise
    except BaseException:
        with registry.lock:
            if registry.entries.get(key) is entry:
                del registry.entries[key]
        raise
    return entry, engine


# ------------------------------------------------------------------ pure helpers


def _argv(cmd: Any) -> List[str]:
    if isinstance(cmd, (str, bytes)):
        raise TypeError("cmd must be a list of arguments (e.g. ['sh', '-c', 'echo hi']), not a string")
    words = [os.fspath(word) if isinstance(word, os.PathLike) else str(word) for word in cmd]
    if not words:
        raise ValueError("cmd must not be empty")
    return words


def _timeout(timeout: Optional[float]) -> float:
    if timeout is None:
        return MAX_TIMEOUT
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout != timeout or timeout <= 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    return min(float(timeout), MAX_TIMEOUT)


def _inline_text(data: bytes) -> Optional[str]:
    """`data` as the `terminal` tool's stdin text, or None when it must go through a file."""
    if len(data) > INLINE_STDIN_BYTES:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _as_bytes(value: Union[str, bytes, bytearray, memoryview]) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"expected str or bytes, got {type(value).__name__}")


def _stdin_wrapped(script: str, staged: Optional[str]) -> str:
    """`script` with its stdin read from the uploaded file `staged`, which is removed (still
    open) before anything else runs."""
    if staged is None:
        return script
    quoted = shlex.quote(staged)
    return f"{{\ncommand -p rm -f -- {quoted}\n{script}\n}} < {quoted}"


def _identity_script(session_id: str) -> str:
    """Who the session runs as, and how (if at all) it can run a command as another user;
    then `_common.make_script` (its working directory, printed last)."""
    return (
        'printf "uid=%s\\n" "$(id -u 2>/dev/null)"; '
        'printf "user=%s\\n" "$(id -un 2>/dev/null)"; '
        "sw=; "
        'if [ "$(id -u 2>/dev/null)" = 0 ]; then '
        "for r in /usr/sbin/runuser /sbin/runuser /usr/bin/runuser /bin/runuser; do "
        'if [ -x "$r" ]; then "$r" -u root -- true >/dev/null 2>&1 && sw="runuser $r"; break; fi; done; '
        'if [ -z "$sw" ]; then for r in /bin/su /usr/bin/su /sbin/su; do '
        'if [ -x "$r" ]; then case "$(readlink -f "$r" 2>/dev/null)" in */busybox) '
        '"$r" -s /bin/sh root -c true >/dev/null 2>&1 </dev/null && sw="su $r";; esac; break; fi; done; fi; '
        "fi; "
        'printf "switch=%s\\n" "$sw"; ' + _common.make_script(session_id)
    )


@dataclass(frozen=True)
class _Identity:
    uid: str
    user: str
    switch: Optional[Tuple[str, str]]  # ("runuser" | "su", absolute path), None: cannot switch


def _identity_of(stdout: str) -> _Identity:
    fields: Dict[str, str] = {}
    for line in stdout.splitlines():
        name, sep, value = line.partition("=")
        if sep and name in ("uid", "user", "switch"):
            fields[name] = value.strip()
    kind, _, path = fields.get("switch", "").partition(" ")
    switch = (kind, path) if kind in ("runuser", "su") and path.startswith("/") else None
    return _Identity(uid=fields.get("uid", ""), user=fields.get("user", ""), switch=switch)


def _launch_line(argv: List[str], user: Optional[str], identity: _Identity) -> str:
    """The shell line that runs `argv`, as `user` when that is another user than the session's."""
    if user is None or user in (identity.user, identity.uid):
        return shlex.join(argv)
    if identity.switch is None:
        who = f"{identity.user!r} (uid {identity.uid})" if identity.user else f"uid {identity.uid or '?'}"
        raise SandboxUserUnsupportedError(
            f"the Paddock session runs as {who} and cannot run a command as {user!r}: switching users "
            "needs a session running as root with the privilege to change its uid and groups and "
            "util-linux runuser or busybox su in the environment (Paddock's sandboxed local backend "
            "has not that privilege; a docker backend whose container runs as root has)"
        )
    kind, path = identity.switch
    # A numeric uid is looked up in the environment's passwd file (runuser and su take names).
    resolve = (
        f"u={shlex.quote(user)}; "
        'case "$u" in ""|*[!0-9]*) ;; *) n=$(command -p awk -F: -v id="$u" \'$3 == id { print $1; exit }\' '
        '/etc/passwd 2>/dev/null); [ -n "$n" ] && u=$n;; esac\n'
    )
    if kind == "runuser":
        return resolve + f'{shlex.quote(path)} -u "$u" -- {shlex.join(argv)}'
    # busybox su: the argv inside -c, so that none of its words is read as an option of su.
    return resolve + f'{shlex.quote(path)} -s /bin/sh "$u" -c {shlex.quote("exec " + shlex.join(argv))}'


def _exec_body(argv: List[str], launch: str, cwd: Optional[str], token: str) -> str:
    """The checks before the command (reported on stderr as `<token> <errno>`) and the command."""
    lines: List[str] = []
    if cwd is not None:
        q = shlex.quote(cwd)
        lines.append(
            f"if ! cd -- {q} 2>/dev/null; then "
            f"if ! [ -e {q} ]; then e={errno.ENOENT}; elif ! [ -d {q} ]; then e={errno.ENOTDIR}; "
            f"else e={errno.EACCES}; fi; "
            f'printf "\\n%s %s\\n" {token} "$e" >&2; exit 1; fi'
        )
    if "/" in argv[0]:
        q = shlex.quote(argv[0])
        lines.append(
            f"if [ -d {q} ] || {{ [ -e {q} ] && ! [ -x {q} ]; }}; then "
            f'printf "\\n%s %s\\n" {token} x{errno.EACCES} >&2; exit 126; fi'
        )
    lines.append(launch)
    return "\n".join(lines)


def _check_failure(stderr: str, token: str) -> Optional[str]:
    """The code a check before the command reported (its last stderr line), else None."""
    tail = stderr.rstrip("\n").rsplit("\n", 1)[-1]
    word, _, code = tail.partition(" ")
    return code if word == token and code else None


def _read_probe_script(path: str) -> str:
    """One line about `path`, following symlinks: `d` directory, `f SIZE` a readable regular
    file, `r` one the session's user may not read, `o` another kind, `n` below a file, `x`
    nothing there. Never opens the path (a FIFO cannot block it)."""
    q = shlex.quote(path)
    return (
        f"p={q}; "
        'if [ -d "$p" ]; then echo d; '
        'elif [ -f "$p" ]; then if [ -r "$p" ]; then '
        's=$(command -p stat -L -c %s -- "$p" 2>/dev/null) || s=$(command -p wc -c < "$p"); echo "f $s"; '
        "else echo r; fi; "
        'elif [ -e "$p" ]; then echo o; '
        'else q="${p%/*}"; while [ -n "$q" ] && ! { [ -e "$q" ] && ! [ -d "$q" ]; }; do q="${q%/*}"; done; '
        'if [ -n "$q" ]; then echo n; else echo x; fi; fi'
    )


def _write_script(path: str) -> str:
    """Writes its stdin to `path` in place, parents made; exit 100 + errno for what the
    session's user cannot do."""
    q = shlex.quote(path)
    return (
        f"t={q}; "
        f'if [ -d "$t" ]; then exit {_EXIT_IS_DIRECTORY}; fi; '
        'd="${t%/*}"; [ -n "$d" ] || d=/; '
        'if ! [ -d "$d" ]; then '
        'p="$d"; while ! [ -e "$p" ] && ! [ -L "$p" ]; do p="${p%/*}"; [ -n "$p" ] || p=/; done; '
        f'[ -d "$p" ] || exit {_EXIT_NOT_DIRECTORY}; '
        f'command -p mkdir -p -- "$d" 2>/dev/null || exit {_EXIT_PERMISSION}; fi; '
        f'if [ -e "$t" ]; then [ -w "$t" ] || exit {_EXIT_PERMISSION}; '
        f'else [ -w "$d" ] || exit {_EXIT_PERMISSION}; fi; '
        'LC_ALL=C command -p cat > "$t"'
    )


def _staging_path() -> str:
    return f"/tmp/.paddock-inspect-{secrets.token_hex(8)}"


def _write_local(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def _os_error(cls: type, number: int, name: str) -> OSError:
    return cls(number, os.strerror(number), name)


class _Tail:
    """A stream's text, keeping its last `limit` bytes (UTF-8) once it is longer."""

    def __init__(self, limit: int) -> None:
        self.limit = max(0, int(limit))
        self.parts: Deque[Tuple[str, int]] = deque()
        self.size = 0
        self.dropped = 0

    def add(self, text: str) -> None:
        if not text:
            return
        size = len(text.encode("utf-8", "surrogatepass"))
        self.parts.append((text, size))
        self.size += size
        while self.size > self.limit and self.parts:
            first, first_size = self.parts[0]
            excess = self.size - self.limit
            if first_size <= excess:
                self.parts.popleft()
                self.size -= first_size
                self.dropped += first_size
                continue
            # Cut inside the chunk, on a character boundary (a split character is dropped).
            kept = first.encode("utf-8", "surrogatepass")[excess:].decode("utf-8", "ignore")
            kept_size = len(kept.encode("utf-8", "surrogatepass"))
            self.parts[0] = (kept, kept_size)
            self.size -= first_size - kept_size
            self.dropped += first_size - kept_size

    def text(self) -> str:
        return "".join(part for part, _ in self.parts)


# ------------------------------------------------------------------ the sandbox environment


@sandboxenv(name=SANDBOX_TYPE)
class PaddockSandboxEnvironment(SandboxEnvironment):
    """An Inspect sandbox environment whose environment is one Paddock session (one per
    sample). Made by `sample_init`; see the module's documentation for what maps to what."""

    def __init__(
        self,
        engine: Engine,
        session: AsyncSession,
        working_dir: str,
        identity: _Identity,
        config: PaddockSandboxConfig,
    ) -> None:
        super().__init__()
        self._engine = engine
        self._session = session
        self._working_dir = working_dir
        self._identity = identity
        self._config = config
        self._closed = False

    def __repr__(self) -> str:
        backend = f", backend={self._config.backend!r}" if self._config.backend else ""
        return f"PaddockSandboxEnvironment({self._session.id!r}{backend}{', closed' if self._closed else ''})"

    # ---------------------------------------------------------------- identity

    @property
    def session(self) -> AsyncSession:
        """The Paddock session (`paddock.AsyncSession`): for what Inspect's interface has no word
        for (background commands, Python contexts, snapshots)."""
        return self._session

    @property
    def engine(self) -> Engine:
        """The engine the session runs on (shared by the samples of its config)."""
        return self._engine

    @property
    def working_dir(self) -> str:
        """The session's working directory: where relative paths resolve and commands start."""
        return self._working_dir

    # ---------------------------------------------------------------- lifecycle

    @classmethod
    def config_deserialize(cls, config: Dict[str, Any]) -> BaseModel:
        return PaddockSandboxConfig(**config)

    @classmethod
    async def task_init(cls, task_name: str, config: Optional[SandboxEnvironmentConfigType]) -> None:
        await _engine_entry(_config_of(config), for_task=True)

    @classmethod
    async def sample_init(
        cls,
        task_name: str,
        config: Optional[SandboxEnvironmentConfigType],
        metadata: Dict[str, str],
    ) -> Dict[str, SandboxEnvironment]:
        conf = _config_of(config)
        entry, engine = await _engine_entry(conf, for_task=False)
        session_id = f"{_SESSION_PREFIX}{secrets.token_hex(6)}"
        try:
            session = await engine.asession(session_id, backend=conf.backend)
        except PaddockError as err:
            raise _unavailable(session_id, err) from err
        try:
            result = await session.run(_identity_script(session_id), timeout=HELPER_TIMEOUT)
            working_dir = _common.made_dir(result)
            if working_dir is None:
                raise SandboxUnavailableError(_common.failure_text(session_id, result))
        except BaseException as err:
            try:
                await session.close()
            except PaddockError:
                pass
            if isinstance(err, PaddockError):
                raise _unavailable(session_id, err) from err
            raise
        environment = cls(engine, session, working_dir, _identity_of(result.stdout), conf)
        entry.environments.add(environment)
        return {"default": environment}

    @classmethod
    async def sample_cleanup(
        cls,
        task_name: str,
        config: Optional[SandboxEnvironmentConfigType],
        environments: Dict[str, SandboxEnvironment],
        interrupted: bool,
    ) -> None:
        registry = _registry()
        for environment in environments.values():
            if isinstance(environment, PaddockSandboxEnvironment):
                await environment._close()
                with registry.lock:
                    for entry in registry.entries.values():
                        entry.environments.discard(environment)

    @classmethod
    async def task_cleanup(
        cls, task_name: str, config: Optional[SandboxEnvironmentConfigType], cleanup: bool
    ) -> None:
        registry = _registry()
        key = _key_of(_config_of(config))
        with registry.lock:
            entry = registry.entries.get(key)
            if entry is None:
                return
            entry.tasks -= 1
            if entry.tasks > 0:
                return
            del registry.entries[key]
        left = [env for env in list(entry.environments) if not env._closed]
        if left and cleanup:
            for environment in left:
                await environment._close()
        elif left:
            logger.warning(
                "Paddock sessions left running (--no-sandbox-cleanup): %s; end them with "
                "`paddock sessions close ID`",
                ", ".join(env._session.id for env in left),
            )
        try:
            engine = await asyncio.shield(asyncio.wrap_future(entry.start))
        except Exception:  # noqa: BLE001 - an engine that never started has nothing to close
            return
        await engine.aclose()

    async def _close(self) -> None:
        """Removes the working directory (where /tmp is not the session's own) and ends the session."""
        if self._closed:
            return
        self._closed = True
        session = self._session
        try:
            await session.run(_common.remove_script(session.id), timeout=60)
        except PaddockError:
            pass  # best effort: the session is ended next either way
        try:
            await session.close()
        except PaddockError as err:
            logger.warning("could not close the Paddock session %r: %s", session.id, err)

    # ---------------------------------------------------------------- helpers

    def _path(self, file: str) -> str:
        if not isinstance(file, (str, os.PathLike)):
            raise TypeError(f"path must be a str, got {type(file).__name__}")
        path = os.fspath(file)
        if not path:
            raise ValueError("path must not be empty")
        return path if path.startswith("/") else posixpath.join(self._working_dir, path)

    def _failure(self, err: PaddockError) -> BaseException:
        """What to raise for a Paddock failure that is not about one file."""
        if isinstance(err, (SessionNotFound, EngineClosed, BackendUnavailable)) or self._closed:
            return _unavailable(self._session.id, err)
        return err

    async def _run(self, script: str, *, stdin: Optional[str] = None, timeout: float = HELPER_TIMEOUT) -> Any:
        """A helper command of the adapter (absolute paths, not in the working directory)."""
        try:
            return await self._session.run(script, stdin=stdin, timeout=timeout)
        except CommandTimeout as err:
            raise TimeoutError(f"the Paddock session's helper command timed out after {timeout:g} s") from err
        except PaddockError as err:
            failure = self._failure(err)
            if failure is err:
                raise
            raise failure from err

    async def _stage(self, data: bytes, remote: Optional[str] = None) -> str:
        """Uploads `data` byte-exact to a file in the session's /tmp (`remote`, else a fresh
        name); its path."""
        remote = remote or _staging_path()
        loop = asyncio.get_running_loop()
        with tempfile.TemporaryDirectory(prefix="paddock-inspect-") as directory:
            local = os.path.join(directory, "data")
            await loop.run_in_executor(None, _write_local, local, data)
            try:
                # The engine routes to the session's backend: it was started with it.
                await self._engine.upload(local, remote, session=self._session.id)
            except PaddockError as err:
                failure = self._failure(err)
                if failure is err:
                    raise
                raise failure from err
        return remote

    async def _discard(self, staged: Optional[str]) -> None:
        """Removes an uploaded stdin file a command that never ran left behind (best effort:
        where /tmp is the session's own, it goes with the session anyway)."""
        if staged is None or self._closed:
            return
        try:
            await self._session.run(f"command -p rm -f -- {shlex.quote(staged)}", timeout=60)
        except PaddockError:
            pass

    async def _stdin_source(self, data: bytes) -> Tuple[Optional[str], Optional[str]]:
        """(inline stdin text, staged file): one of them is set."""
        text = _inline_text(data)
        if text is not None:
            return text, None
        return None, await self._stage(data)

    # ---------------------------------------------------------------- exec

    async def exec(
        self,
        cmd: List[str],
        input: Union[str, bytes, None] = None,
        cwd: Optional[str] = None,
        env: Optional[Dict[str, str]] = None,
        user: Optional[str] = None,
        timeout: Optional[int] = None,
        timeout_retry: bool = True,
        concurrency: bool = True,
    ) -> ExecResult[str]:
        argv = _argv(cmd)
        limit = _timeout(timeout)
        launch = _launch_line(argv, user, self._identity)
        token = f"paddock-check-{secrets.token_hex(8)}"
        workdir = self._path(cwd) if cwd is not None else None
        stdin_text, staged = (None, None) if input is None else await self._stdin_source(_as_bytes(input))
        body = _exec_body(argv, launch, workdir, token)
        script = _stdin_wrapped(_common.in_dir_script(self._working_dir, body), staged)
        if len(script) > INLINE_SCRIPT_CHARS:
            # Too long for one protocol line: the script goes through a file, which removes
            # itself first (the shell reads on from the file it has open).
            path = _staging_path()
            q = shlex.quote(path)
            await self._stage(f"command -p rm -f -- {q}\n{script}".encode("utf-8"), path)
            script = f". {q}"
        max_output = SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE
        stdout, stderr = _Tail(max_output), _Tail(max_output)
        try:
            result = await self._session.run(
                script,
                env={str(k): str(v) for k, v in env.items()} if env else None,
                timeout=limit,
                stdin=stdin_text,
                on_stdout=stdout.add,
                on_stderr=stderr.add,
            )
        except CommandTimeout as err:
            shown = f"{timeout} seconds" if timeout is not None else f"{limit:g} seconds (Paddock's longest)"
            timed_out = TimeoutError(f"Command timed out after {shown}")
            partial = stdout.text() + stderr.text()
            if partial:
                setattr(timed_out, "truncated_output", partial)
            raise timed_out from err
        except PermissionDenied:
            # The policy or an approver refused the command (a PermissionError): it never ran.
            await self._discard(staged)
            raise
        except PaddockError as err:
            await self._discard(staged)
            failure = self._failure(err)
            if failure is err:
                raise
            raise failure from err
        out, err_text = stdout.text(), stderr.text()
        check = _check_failure(err_text, token)
        if check is not None:
            if check.startswith("x"):
                raise _os_error(PermissionError, errno.EACCES, argv[0])
            number = int(check) if check.isdigit() else errno.EACCES
            cls = {errno.ENOENT: FileNotFoundError, errno.ENOTDIR: NotADirectoryError}.get(number, PermissionError)
            raise _os_error(cls, number, os.fspath(cwd) if cwd is not None else self._working_dir)
        code = result.exit_code
        return ExecResult(success=code == 0, returncode=code, stdout=out, stderr=err_text)

    # ---------------------------------------------------------------- files

    async def write_file(self, file: str, contents: Union[str, bytes]) -> None:
        path = self._path(file)
        data = _as_bytes(contents)
        stdin_text, staged = await self._stdin_source(data)
        try:
            result = await self._run(_stdin_wrapped(_write_script(path), staged), stdin=stdin_text)
        except PaddockError:
            await self._discard(staged)
            raise
        code = result.exit_code
        if code == 0:
            return
        name = os.fspath(file)
        if code == _EXIT_IS_DIRECTORY:
            raise _os_error(IsADirectoryError, errno.EISDIR, name)
        if code == _EXIT_NOT_DIRECTORY:
            raise _os_error(NotADirectoryError, errno.ENOTDIR, name)
        if code == _EXIT_PERMISSION:
            raise _os_error(PermissionError, errno.EACCES, name)
        said = (result.stderr or result.stdout or "").strip() or f"exit code {code}"
        kind = file_code_of_message(said, "")
        if kind == "file:permission_denied":
            raise _os_error(PermissionError, errno.EACCES, name)
        if kind == "file:is_directory":
            raise _os_error(IsADirectoryError, errno.EISDIR, name)
        if kind == "file:not_directory":
            raise _os_error(NotADirectoryError, errno.ENOTDIR, name)
        if kind == "file:not_found":
            raise _os_error(FileNotFoundError, errno.ENOENT, name)
        raise OSError(errno.EIO, f"could not write the file: {said}", name)

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...

    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    async def read_file(self, file: str, text: bool = True) -> Union[str, bytes]:
        path = self._path(file)
        name = os.fspath(file)
        result = await self._run(_read_probe_script(path))
        mark, _, size = (result.stdout.strip().splitlines() or [""])[-1].partition(" ")
        if result.exit_code != 0 or mark not in ("d", "f", "r", "o", "n", "x"):
            said = (result.stderr or result.stdout).strip()
            raise OSError(errno.EIO, f"could not examine the file: {said or f'exit code {result.exit_code}'}", name)
        if mark == "d":
            raise _os_error(IsADirectoryError, errno.EISDIR, name)
        if mark == "r":
            raise _os_error(PermissionError, errno.EACCES, name)
        if mark == "n":
            raise _os_error(NotADirectoryError, errno.ENOTDIR, name)
        if mark == "x":
            raise _os_error(FileNotFoundError, errno.ENOENT, name)
        if mark == "o":
            raise OSError(errno.EINVAL, "not a regular file (a FIFO, device or socket)", name)
        limit = SandboxEnvironmentLimits.MAX_READ_FILE_SIZE
        if size.strip().isdigit() and int(size) > limit:
            raise _too_large()
        try:
            data = await self._session.files.read(path)
        except FileNotFound as err:
            raise _os_error(FileNotFoundError, errno.ENOENT, name) from err
        except NotADirectory as err:
            raise _os_error(NotADirectoryError, errno.ENOTDIR, name) from err
        except PermissionDenied as err:
            raise _os_error(PermissionError, errno.EACCES, name) from err
        except ToolError as err:
            if err.code == "file:is_directory":
                raise _os_error(IsADirectoryError, errno.EISDIR, name) from err
            failure = self._failure(err)
            if failure is err:
                raise
            raise failure from err
        except PaddockError as err:
            raise self._failure(err) from err
        if len(data) > limit:  # grew since the test
            raise _too_large()
        return data.decode("utf-8") if text else data


def _too_large() -> OutputLimitExceededError:
    return OutputLimitExceededError(
        limit_str=SandboxEnvironmentLimits.MAX_READ_FILE_SIZE_STR,
        truncated_output=None,  # the content is neither read nor shown
    )


def _unavailable(session_id: str, err: BaseException) -> SandboxUnavailableError:
    return SandboxUnavailableError(f"the Paddock session {session_id!r} is not available: {err}")
