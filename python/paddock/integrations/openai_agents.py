"""OpenAI Agents SDK sandboxes on Paddock sessions: `PaddockSandboxClient` (DESIGN.md section 9).

```python
from agents import Runner, RunConfig
from agents.sandbox import SandboxAgent, SandboxRunConfig
from agents.sandbox.capabilities import Shell
from paddock.integrations.openai_agents import PaddockSandboxClient, PaddockSandboxClientOptions

client = PaddockSandboxClient(policy="ops.toml")                  # no I/O yet
agent = SandboxAgent(name="dev", model=..., capabilities=[Shell()])
sandbox = SandboxRunConfig(client=client, options=PaddockSandboxClientOptions(backend="docker"))
result = await Runner.run(agent, "...", run_config=RunConfig(sandbox=sandbox))
await client.aclose()                                              # the engine it started
```

`PaddockSandboxClient(engine=None, *, policy=None)` is a `BaseSandboxClient` of the Agents SDK
(openai-agents 0.24.0) whose sessions, `PaddockSandboxSession`, are `BaseSandboxSession`s on one
Paddock session each. `backend_id`, the options' `type` and the session state's `type` are all
`"paddock"`, so a serialized state names this client.

What maps to what
-----------------

- The client: `engine=` shares an existing `paddock.Engine` (never closed by the client);
  `policy=` (or neither: `$PADDOCK_POLICY`, else the built-in policy) makes the client start an
  engine of its own on first use, once even under concurrent first calls (in a worker thread,
  under a lock), closed by `aclose()`/`close()`. The constructor does no I/O.
- `PaddockSandboxClientOptions(backend=None)`: the backend of the policy the session's tools
  run on (`engine.asession(backend=...)`); None: the policy's routes. Options may be left out
  (`supports_default_options`), as for the SDK's own Unix-local client.
- `create(snapshot=, manifest=, options=)` starts a Paddock session (`openai-agents-<hex>`) and
  makes its working directory: `/workspace` of its container on docker (an image with a writable
  `/workspace`), else `/tmp/paddock-workspace-<session id>`, which on the sandboxed local backend
  lies in the session's private `/tmp` (`$PADDOCK_HOME/sandbox-tmp/<session id>` on the host):
  never the caller's current directory. A manifest with the SDK's default root (`/workspace`)
  gets that directory as its root (`state.workspace_root_owned`); another root is used as
  given, and `start()` makes it (`WorkspaceStartError` when the environment cannot).
- `exec(*cmd, timeout=, shell=)` -> `AsyncSession.run` (Paddock's `terminal`: bash, stdout and
  stderr apart), started in the manifest root (made again if a command removed it), with the
  manifest's environment. `shell=True` (what the `Shell` capability uses) makes the line the
  terminal's own command rather than the SDK's `sh -lc LINE`: no login shell (the machine's
  profile) and no second shell per command; `shell=False` or a shell of the caller's
  (`["bash", "-c"]`) quotes the argv into one line (`shlex.join`). A non-zero exit is an
  `ExecResult`; `timeout` -> Paddock's (None: 3600 s, Paddock's longest, which also caps larger
  ones), and `paddock.CommandTimeout` -> `ExecTimeoutError` (Paddock killed the command and
  everything it started). Output is text from Paddock: bytes that are not UTF-8 arrive as
  U+FFFD (`read` is byte-exact).
- A command Paddock refuses (a policy rule denies it, as for `rm -rf /`, or it needs a human's
  approval and the engine has no approver) is never run: `PaddockCommandRefusedError` (an
  `ExecTransportError`, `__cause__` the `paddock.ApprovalDenied`/`PermissionDenied`) with
  Paddock's reason, at once, from `exec` and `pty_exec_start`; a `Runner` run then ends with
  `UserError("Error running tool exec_command: ...")`. Give `paddock.Engine(approver=...)` to
  let someone approve.
- `read(path)` -> `AsyncSession.files.read` (the embedding protocol's byte-exact download),
  after the SDK's confinement check of the path in the environment (`_validate_remote_path_access`,
  as the SDK's remote backends) and a `test` that it is a readable regular file: missing ->
  `WorkspaceReadNotFoundError`, a directory or unreadable file -> `WorkspaceArchiveReadError`.
- `write(path, data)` -> the bytes uploaded byte-exact to a file in the environment's `/tmp`,
  then `cat` into place by one command (parents made; an existing file keeps its mode, owner and
  hard links; a symlink is written through), as the SDK's docker backend writes.
- `rm(path, recursive=True)` -> Paddock's `delete_file` tool, and the SDK's helper scripts
  (`/tmp/openai-agents/bin`) are installed by a command of this module: the SDK's own commands
  for both contain `rm -rf -- PATH`, which Paddock's approval rules ask a person about outside
  `/tmp` (and refuse without an approver). The helpers are run with `sh HELPER`, so that
  a `/tmp` mounted noexec (some images and hosts do) does not stop them.
- `persist_workspace()` -> `tar -c` of the root in the environment (busybox tar is enough), the
  archive downloaded byte-exact, then made portable on this side: the SDK's skip paths and
  FIFOs/devices dropped, hard links made regular files, members workspace-relative, absolute
  symlinks inside the root made relative (`strip_tar_member_prefix`).
  `hydrate_workspace(data)` -> the SDK's tar validation (no escaping members, no symlink to
  outside), the archive uploaded, `tar -x -o` into the root.
- `resume(state)`: the state's Paddock session when it is still live (the workspace as it was,
  `running()` true); otherwise a session is started again under the same id (an empty one,
  same working directory name) and `start()` restores the SDK snapshot, if any, into it.
  `serialize_session_state`/`deserialize_session_state` are the SDK's, with
  `PaddockSandboxSessionState` (`paddock_session_id`, `backend`, `workspace_root_owned`).
- PTY (`supports_pty()` is true, so the `Shell` capability's `exec_command` uses it and offers
  `write_stdin`): `pty_exec_start` -> a background command (`terminal` with `background=True`,
  `pty=tty`), its output followed through Paddock's `process` tool until `yield_time_s` passes
  or it ends; a live one gets an SDK process id. `pty_write_stdin` -> `process write` (a tty
  only; a Ctrl-C character interrupts as on a terminal), then the output of `yield_time_s`.
  Without a tty stdin is `/dev/null` and writing is refused with the SDK's own
  `RuntimeError("stdin is not available for this process")`. `pty_terminate_all` (also on
  `shutdown()`) kills them; at most 64 are kept, the least recently used finished one pruned.
- `running()` -> whether the Paddock session is live. `shutdown()` (the end of
  `async with session`) stops the PTY processes and keeps the session, so that `resume` can
  attach; `client.delete(session)` (the `Runner` calls it after each run of a session it made)
  closes the Paddock session and everything in it (processes, container, private `/tmp`), and
  removes a `/tmp/paddock-workspace-*` root where `/tmp` outlives the session.
- `PaddockSandboxSession.paddock_session` is the `paddock.AsyncSession`, for what the SDK has no
  word for (Python contexts, Paddock snapshots and forks, watching files).

Not supported, or different
---------------------------

- Commands share the Paddock session's shell state, as in the other adapters: what a command
  `export`s (functions, aliases) is still set for the next one; its `cd` is not (every command
  starts in the root). The SDK's other backends start every command in a fresh `sh`.
- `user=` (`SandboxAgent(run_as=...)`, manifest users): commands run as the user the backend
  gives (root in a docker container, the caller on the local backend); any `user` is refused
  with `ValueError` rather than prefixed with `sudo`.
- `resolve_exposed_port`: Paddock forwards no ports (`ExposedPortUnavailableError`).
- Manifest `extra_path_grants` with a `host_path` (a host directory seen elsewhere in the
  sandbox): refused with `ValueError`, as the SDK's Unix-local client does.
- A command longer than 3600 s, and `pty_exec_start`'s `timeout` (a PTY process runs until it
  ends, is interrupted, or the session ends).
- Without `client.delete(session)` the Paddock session lives until Paddock's idle sweep
  (`[sessions] idle_timeout_seconds`, 30 minutes by default); a session swept while an SDK
  session still holds it is started again, empty, by its next command.
- Paddock's `terminal` judges every command line (approval rules, the sandbox): the SDK's path
  checks are advisory there, Paddock's sandbox is the boundary. On docker, where `/workspace`
  is not a temporary directory, a model's `rm -rf build` is such a command: it needs an
  approver (or a policy rule allowing it), else the run ends with the refusal.
"""

from __future__ import annotations

import asyncio
import copy
import io
import os
import posixpath
import secrets
import shlex
import tarfile
import tempfile
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any, Deque, Dict, List, Literal, Optional, Sequence, Set, Tuple, Union, cast

try:
    from agents.sandbox.errors import (
        ExecNonZeroError,
        ExecTimeoutError,
        ExecTransportError,
        WorkspaceArchiveReadError,
        WorkspaceArchiveWriteError,
        WorkspaceReadNotFoundError,
        WorkspaceStartError,
        WorkspaceWriteTypeError,
    )
    from agents.sandbox.manifest import Manifest
    from agents.sandbox.session import SandboxSession, SandboxSessionState
    from agents.sandbox.session.base_sandbox_session import BaseSandboxSession
    from agents.sandbox.session.dependencies import Dependencies
    from agents.sandbox.session.manager import Instrumentation
    from agents.sandbox.session.pty_output import collect_pty_output
    from agents.sandbox.session.pty_types import (
        PTY_PROCESSES_MAX,
        PtyExecUpdate,
        allocate_pty_process_id,
        clamp_pty_yield_time_ms,
        process_id_to_prune_from_meta,
        resolve_pty_write_yield_time_ms,
    )
    from agents.sandbox.session.runtime_helpers import RESOLVE_WORKSPACE_PATH_HELPER, RuntimeHelperScript
    from agents.sandbox.session.sandbox_client import BaseSandboxClient, BaseSandboxClientOptions
    from agents.sandbox.session.workspace_payloads import coerce_write_payload
    from agents.sandbox.snapshot import SnapshotBase, SnapshotSpec, resolve_snapshot
    from agents.sandbox.types import ExecResult, User
    from agents.sandbox.util.tar_utils import (
        UnsafeTarMemberError,
        should_skip_tar_member,
        strip_tar_member_prefix,
        validate_tar_bytes,
    )
    from agents.sandbox.workspace_paths import sandbox_path_str
except ImportError as _err:  # pragma: no cover - depends on the installation
    raise ImportError(
        "paddock.integrations.openai_agents needs the OpenAI Agents SDK (openai-agents 0.24.0): "
        "pip install 'paddock[openai-agents]'"
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
from .._session import AsyncCommandHandle, AsyncSession
from . import _common

__all__ = [
    "BACKEND_ID",
    "PaddockCommandRefusedError",
    "PaddockSandboxClient",
    "PaddockSandboxClientOptions",
    "PaddockSandboxSession",
    "PaddockSandboxSessionState",
]

#: `backend_id` of the client, `type` of its options and of its session state.
BACKEND_ID = "paddock"
#: The longest foreground command Paddock's `terminal` tool accepts, seconds.
MAX_TIMEOUT = 3600.0
#: The manifest root the SDK gives when none is chosen: such a session gets Paddock's own directory.
DEFAULT_MANIFEST_ROOT = cast(str, Manifest.model_fields["root"].default)

_SESSION_PREFIX = "openai-agents-"
#: Where this module stages transfers in the environment (the session's private /tmp locally).
_STAGING_DIR = "/tmp"
#: Seconds a PTY process may take to end after it was killed before its watcher is cancelled.
_KILL_GRACE = 5.0

# Exit codes of the read check (`_read_check`), outside what `test` and the shell return themselves.
_EXIT_MISSING = 102
_EXIT_UNREADABLE = 113
_EXIT_DIRECTORY = 121
_EXIT_NOT_REGULAR = 122
#: What the command that runs one of the SDK's helper scripts exits with when the script is gone.
_EXIT_HELPER_MISSING = 199


# ------------------------------------------------------------------ pure helpers


def _new_session_id() -> str:
    """A Paddock session id no other session has ([A-Za-z0-9_.-], at most 128 characters)."""
    return f"{_SESSION_PREFIX}{secrets.token_hex(6)}"


def _read_check(path: str) -> str:
    """Shell that exits 0 when `path` leads to a readable regular file, else one of the `_EXIT_*`."""
    p = shlex.quote(path)
    return (
        f"if [ -d {p} ]; then exit {_EXIT_DIRECTORY}; fi; "
        f"if ! [ -e {p} ]; then exit {_EXIT_MISSING}; fi; "
        f"if ! [ -f {p} ]; then exit {_EXIT_NOT_REGULAR}; fi; "
        f"[ -r {p} ] || exit {_EXIT_UNREADABLE}"
    )


def _staging_path(suffix: str) -> str:
    return posixpath.join(_STAGING_DIR, f"paddock-agents-{secrets.token_hex(8)}{suffix}")


def _terminal_timeout(timeout: Optional[float]) -> float:
    """The SDK's `timeout` as Paddock's: None (no limit) and anything longer become Paddock's longest."""
    if timeout is None:
        return MAX_TIMEOUT
    return min(float(timeout), MAX_TIMEOUT)


def _no_user(user: Union[str, User, None], what: str) -> None:
    if user:
        name = user.name if isinstance(user, User) else user
        raise ValueError(
            f"{what} as user {name!r} is not supported by the Paddock sandbox: a session's commands run as "
            "the user its backend gives (root in a docker container, you on the local backend). Leave "
            "SandboxAgent(run_as=...) and user= unset, or switch users inside the command (runuser -u NAME -- ...)"
        )


def _no_host_path_grants(manifest: Manifest) -> None:
    for grant in manifest.extra_path_grants:
        if grant.host_path is not None:
            raise ValueError(
                f"the Paddock sandbox does not map host paths into its environment (extra_path_grants "
                f"{grant.path!r} with host_path={grant.host_path!r}): leave host_path unset, or copy the "
                "files in with a manifest entry (LocalDir/LocalFile)"
            )


def _helper_install_script(helper: RuntimeHelperScript) -> str:
    """Shell that writes `helper` where the SDK runs it from, unless an executable copy is there."""
    dest = shlex.quote(str(helper.install_path))
    marker = "PADDOCK_AGENTS_HELPER_END"
    return (
        # `-f`, not `-x`: where /tmp is mounted noexec `-x` is false; the name carries a
        # digest of the content, and the copy is renamed into place whole.
        f"test -f {dest} && exit 0; "
        f'd=$(dirname -- {dest}) && mkdir -p -- "$d" && t={dest}.tmp.$$ && '
        f'cat > "$t" <<\'{marker}\' && chmod 0555 "$t" && mv -f -- "$t" {dest}\n'
        f"{helper.content.lstrip()}\n{marker}\n"
    )


def _text_bytes(text: str) -> bytes:
    return text.encode("utf-8", errors="replace")


def _said(result: Any) -> str:
    return (str(result.stderr or "") or str(result.stdout or "")).strip()[:4096]


def _portable_archive(raw: bytes, *, root: str, skip: Set[Path]) -> io.IOBase:
    """The environment's `tar -c -C <parent> <name>` of the root as a portable workspace archive:
    members relative to the root, the SDK's skip paths and FIFOs/devices left out, hard links made
    regular files (the SDK's extractors refuse links), absolute symlinks under the root rebased."""
    name = posixpath.basename(root.rstrip("/"))
    filtered = tempfile.TemporaryFile()
    try:
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as source:
            with tarfile.open(fileobj=filtered, mode="w:", format=tarfile.PAX_FORMAT) as target:
                for member in source:
                    if should_skip_tar_member(member.name, skip_rel_paths=skip, root_name=name):
                        continue
                    if member.isfifo() or member.ischr() or member.isblk():
                        continue
                    if member.islnk():
                        try:  # the target's data (the archive is seekable)
                            linked, size = source.extractfile(member), source.getmember(member.linkname).size
                        except KeyError:
                            continue  # a link to nothing the archive holds
                        regular = copy.copy(member)
                        regular.type = tarfile.REGTYPE
                        regular.linkname = ""
                        regular.pax_headers = {k: v for k, v in member.pax_headers.items() if k != "linkpath"}
                        regular.size = size
                        target.addfile(regular, linked)
                    elif member.isreg():
                        target.addfile(member, source.extractfile(member))
                    else:
                        target.addfile(member)
        filtered.seek(0)
    except BaseException:
        filtered.close()
        raise
    return strip_tar_member_prefix(cast(io.IOBase, filtered), prefix=name, relativize_symlinks_under=root)


def _read_all(data: io.IOBase, path: Path) -> bytes:
    chunks: List[bytes] = []
    while True:
        chunk = data.read(1 << 20)
        if chunk in (b"", "", None):
            return b"".join(chunks)
        if isinstance(chunk, str):
            chunk = chunk.encode("utf-8")
        if not isinstance(chunk, (bytes, bytearray, memoryview)):
            raise WorkspaceWriteTypeError(path=path, actual_type=type(chunk).__name__)
        chunks.append(bytes(chunk))


class _ShellLine(str):
    """A command line given with `shell=True`: the command of the session's own shell."""


# ------------------------------------------------------------------ errors


class PaddockCommandRefusedError(ExecTransportError):
    """Paddock refused to run the command (never started): a policy rule denies it, or it needed
    a human's approval and nobody could give it (an engine without an approver). `__cause__` is
    the `paddock.ApprovalDenied` / `paddock.PermissionDenied`; `context["error_code"]` its code."""

    def __init__(self, *, command: Sequence[Union[str, Path]], cause: ToolError) -> None:
        super().__init__(
            command=command,
            message=(
                f"Paddock refused the command and did not run it: {cause.message}. To let a person approve "
                "such commands, give the engine an approver (paddock.Engine(approver=...)); to allow them, "
                "change the policy's approval rules"
            ),
            context={"reason": "refused_by_paddock", "error_code": cause.code},
            cause=cause,
            retryable=False,
        )


# ------------------------------------------------------------------ options and state


class PaddockSandboxClientOptions(BaseSandboxClientOptions):
    """What `PaddockSandboxClient.create` takes: `backend`, the backend of the policy the
    session's tools run on (None: the policy's routes)."""

    type: Literal["paddock"] = "paddock"
    backend: Optional[str] = None

    def __init__(self, backend: Optional[str] = None, *, type: Literal["paddock"] = "paddock") -> None:
        if backend is not None and (not isinstance(backend, str) or not backend):
            raise TypeError(f"backend must be the name of a backend of the policy (a non-empty str), got {backend!r}")
        super().__init__(type=type, backend=backend)


class PaddockSandboxSessionState(SandboxSessionState):
    """The SDK's session state plus what names the Paddock session: its id, the backend it runs
    on, and whether its root is the directory this adapter made (removed with the session)."""

    type: Literal["paddock"] = "paddock"
    paddock_session_id: str = ""
    backend: Optional[str] = None
    workspace_root_owned: bool = False

    def _sanitize_persisted_provider_identity(self, data: Dict[str, Any], *, mount_authority_redacted: bool) -> None:
        # As the SDK's docker state does: a state whose mount credentials were redacted must not
        # reattach to the live environment; resume then starts a new Paddock session.
        if mount_authority_redacted:
            data["paddock_session_id"] = ""
            data["workspace_root_ready"] = False


# ------------------------------------------------------------------ PTY processes


@dataclass
class _PtyProcess:
    """A background command the SDK drives through `pty_exec_start`/`pty_write_stdin`: its
    output as Paddock's follower hands it over, and its end (exit code, or why it is unknown)."""

    tty: bool
    handle: Optional[AsyncCommandHandle] = None
    chunks: Deque[bytes] = field(default_factory=deque)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    notify: asyncio.Event = field(default_factory=asyncio.Event)
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    exit_code: Optional[int] = None
    failure: Optional[PaddockError] = None
    watcher: Optional["asyncio.Task[None]"] = None
    last_used: float = field(default_factory=time.monotonic)

    def take(self, text: str) -> None:
        if text:
            self.chunks.append(_text_bytes(text))
            self.notify.set()

    async def watch(self) -> None:
        assert self.handle is not None
        try:
            self.exit_code = (await self.handle.wait()).exit_code
        except PaddockError as err:
            self.failure = err
        finally:
            self.ended.set()
            self.notify.set()


# ------------------------------------------------------------------ the session


class PaddockSandboxSession(BaseSandboxSession):
    """An Agents SDK sandbox session whose environment is one Paddock session. Made by
    `PaddockSandboxClient.create`/`resume`; see the module's documentation for what maps to what."""

    state: PaddockSandboxSessionState

    def __init__(self, *, state: PaddockSandboxSessionState, session: AsyncSession, engine: Engine) -> None:
        self.state = state
        self._paddock = session
        self._engine = engine
        self._deleted = False
        self._pty_lock = asyncio.Lock()
        self._pty_processes: Dict[int, _PtyProcess] = {}
        self._reserved_pty_ids: Set[int] = set()
        #: The SDK's helper scripts installed in this session so far, by where they are.
        self._helpers: Dict[str, RuntimeHelperScript] = {}

    def __repr__(self) -> str:
        return f"PaddockSandboxSession({self._paddock.id!r}, root={self.state.manifest.root!r})"

    @property
    def paddock_session(self) -> AsyncSession:
        """The `paddock.AsyncSession` (Python contexts, Paddock snapshots and forks, watching files)."""
        return self._paddock

    def supports_pty(self) -> bool:
        return True

    def _runtime_helpers(self) -> Tuple[RuntimeHelperScript, ...]:
        return (RESOLVE_WORKSPACE_PATH_HELPER,)

    def _current_runtime_helper_cache_key(self) -> object:
        return self._paddock.id

    async def _validate_path_access(self, path: Union[Path, str], *, for_write: bool = False) -> Path:
        # As the SDK's remote backends: the path is resolved in the environment, where its links are.
        return await self._validate_remote_path_access(path, for_write=for_write)

    async def _ensure_runtime_helper_installed(self, helper: RuntimeHelperScript) -> PurePath:
        """Installs one of the SDK's helper scripts with a command of its own, once per session
        (a helper a command removed is installed again when it is next run: `_exec_internal`):
        the SDK's installer removes an old copy with `rm -rf -- "$dest"`, which Paddock's approval
        rules cannot tell from a recursive delete of anything and refuse without an approver."""
        if str(helper.install_path) in self._helpers:
            return helper.install_path
        await self._install_helper(helper)
        return helper.install_path

    async def _install_helper(self, helper: RuntimeHelperScript) -> None:
        try:
            result = await self._shell(_helper_install_script(helper), timeout=60)
        except PaddockError as err:
            raise self._exec_failure(("install_runtime_helper", str(helper.install_path)), err) from err
        if result.exit_code != 0:
            raise ExecNonZeroError(
                ExecResult(
                    stdout=_text_bytes(result.stdout), stderr=_text_bytes(result.stderr), exit_code=result.exit_code
                ),
                command=("install_runtime_helper", str(helper.install_path)),
            )
        self._helpers[str(helper.install_path)] = helper

    async def rm(self, path: Union[Path, str], *, recursive: bool = False, user: Union[str, User, None] = None) -> None:
        """A recursive removal goes through Paddock's file tool (`delete_file`): the SDK's
        `rm -rf -- PATH` outside `/tmp` is a command Paddock's approval rules ask a person about
        (and refuse without an approver); a single entry is the SDK's own `rm`."""
        if not recursive:
            await super().rm(path, recursive=False, user=user)
            return
        _no_user(user, "removing a file")
        workspace_path = await self._validate_remote_path_access(path, for_write=True, recursive_remove=True)
        target = sandbox_path_str(workspace_path)
        try:
            await self._paddock.files.remove(target)
        except FileNotFound:
            return  # as `rm -rf` of nothing
        except PaddockError as err:
            said = self._gone_text() if self._gone(err) else str(err)
            raise ExecNonZeroError(
                ExecResult(stdout=b"", stderr=_text_bytes(said), exit_code=1), command=("rm", "-rf", "--", target)
            ) from err

    def _prepare_exec_command(
        self, *command: Union[str, Path], shell: Union[bool, List[str]], user: Union[str, User, None]
    ) -> List[str]:
        _no_user(user, "running a command")
        if shell is True:
            # Paddock's terminal is a shell (bash) already: the line is its command, as in the
            # other adapters, rather than one more `sh -lc` (a login shell, reading the machine's
            # profile) started for every command.
            words = [str(word) for word in command]
            return [_ShellLine(words[0] if len(words) == 1 else shlex.join(words))]
        return super()._prepare_exec_command(*command, shell=shell, user=None)

    # ---------------------------------------------------------------- life cycle

    async def _prepare_backend_workspace(self) -> None:
        root = self.state.manifest.root
        try:
            result = await self._paddock.run(f"mkdir -p -- {shlex.quote(root)}", timeout=60)
        except PaddockError as err:
            message = self._gone_text() if self._gone(err) else f"Paddock could not make the manifest root: {err}"
            raise WorkspaceStartError(path=Path(root), message=message, cause=err) from err
        if result.exit_code != 0:
            raise WorkspaceStartError(
                path=Path(root),
                message=(
                    f"the Paddock session cannot make the manifest root {root!r} ({_said(result)}): choose a root "
                    "its sandbox may write, or keep the SDK's default root for the session's own directory"
                ),
                context={"exit_code": result.exit_code},
            )

    async def running(self) -> bool:
        if self._deleted:
            return False
        try:
            await self._engine.aconnect(self._paddock.id, backend=self.state.backend)
        except SessionNotFound:
            return False
        return True

    async def _end(self) -> None:
        """Ends the Paddock session and everything in it (what `client.delete` does)."""
        if self._deleted:
            return
        await self.pty_terminate_all()
        self._deleted = True
        root = self.state.manifest.root
        if self.state.workspace_root_owned and root == _common.private_dir(self._paddock.id):
            # Where /tmp is not the session's own (an unconfined local backend, ssh) the directory
            # would outlive the session; elsewhere it goes with it anyway.
            try:
                await self._paddock.run(_common.remove_script(self._paddock.id), timeout=60)
            except PaddockError:
                pass  # best effort: the session is closed next either way
        await self._paddock.close()

    def _gone(self, err: PaddockError) -> bool:
        return isinstance(err, SessionNotFound) or self._deleted

    def _gone_text(self) -> str:
        what = "was deleted" if self._deleted else "is gone (closed or swept by Paddock's idle timeout)"
        return (
            f"the Paddock session {self._paddock.id!r} {what}: resume the SDK session from its state "
            "(client.resume) or create a new one"
        )

    # ---------------------------------------------------------------- commands

    async def _command_env(self) -> Optional[Dict[str, str]]:
        environment = self.state.manifest.environment
        if not environment.value:
            return None
        return {str(k): str(v) for k, v in (await environment.resolve()).items()}

    def _script(self, argv: Sequence[Union[str, Path]], *, stdin_null: bool = False) -> str:
        if len(argv) == 1 and isinstance(argv[0], _ShellLine):
            line = str(argv[0])
            if stdin_null:  # for the whole line (`:` first: comments alone are still a valid group)
                line = f"{{\n:\n{line}\n}} </dev/null"
        else:
            words = [str(word) for word in argv]
            if not words:
                raise ValueError("an empty command: give at least the program to run")
            line = shlex.join(words) + (" </dev/null" if stdin_null else "")
            if words[0] in self._helpers:
                # a /tmp may be mounted noexec: the SDK's helpers (sh scripts) run
                # through sh; one that is gone is said apart from what the helper itself exits with.
                line = f"test -f {shlex.quote(words[0])} || exit {_EXIT_HELPER_MISSING}\nsh {line}"
        return _common.in_dir_script(self.state.manifest.root, line)

    def _exec_failure(self, command: Sequence[Union[str, Path]], err: PaddockError) -> ExecTransportError:
        if isinstance(err, PermissionDenied):
            return PaddockCommandRefusedError(command=command, cause=err)
        if self._gone(err):
            return ExecTransportError(command=command, message=self._gone_text(), cause=err, retryable=False)
        return ExecTransportError(command=command, message=f"Paddock could not run the command: {err}", cause=err)

    async def _exec_internal(self, *command: Union[str, Path], timeout: Optional[float] = None) -> ExecResult:
        if timeout is not None and timeout <= 0:
            raise ExecTimeoutError(command=command, timeout_s=timeout, context={"reason": "no time given"})
        script = self._script(command)
        helper = self._helpers.get(str(command[0])) if command else None
        try:
            result = await self._paddock.run(script, env=await self._command_env(), timeout=_terminal_timeout(timeout))
            if helper is not None and result.exit_code == _EXIT_HELPER_MISSING:
                await self._install_helper(helper)  # a command removed it: once more
                result = await self._paddock.run(
                    script, env=await self._command_env(), timeout=_terminal_timeout(timeout)
                )
        except CommandTimeout as err:
            raise ExecTimeoutError(
                command=command,
                timeout_s=timeout if timeout is not None else MAX_TIMEOUT,
                context={"stdout": err.stdout[-4096:], "stderr": err.stderr[-4096:]},
                cause=err,
            ) from err
        except PaddockError as err:
            raise self._exec_failure(command, err) from err
        return ExecResult(
            stdout=_text_bytes(result.stdout), stderr=_text_bytes(result.stderr), exit_code=result.exit_code
        )

    async def _shell(self, script: str, *, timeout: float = 600.0) -> Any:
        """A helper command of this module (not in the root): its `CommandResult`."""
        return await self._paddock.run(script, timeout=timeout)

    # ---------------------------------------------------------------- files

    async def read(self, path: Path, *, user: Union[str, User, None] = None) -> io.IOBase:
        _no_user(user, "reading a file")
        workspace_path = await self._validate_path_access(path)
        target = sandbox_path_str(workspace_path)
        try:
            # Checked first: Paddock would download a directory whole before refusing it.
            check = await self._shell(_read_check(target), timeout=60)
            if check.exit_code == _EXIT_MISSING:
                raise WorkspaceReadNotFoundError(path=path, context={"path": target})
            if check.exit_code != 0:
                reason = {
                    _EXIT_DIRECTORY: "is_directory",
                    _EXIT_NOT_REGULAR: "not_a_regular_file",
                    _EXIT_UNREADABLE: "permission_denied",
                }.get(check.exit_code, "read_check_failed")
                raise WorkspaceArchiveReadError(path=path, context={"reason": reason, "stderr": _said(check)})
            data = await self._paddock.files.read(target)
        except (FileNotFound, NotADirectory) as err:
            raise WorkspaceReadNotFoundError(path=path, context={"path": target}, cause=err) from err
        except PaddockError as err:
            reason = self._gone_text() if self._gone(err) else str(err)
            raise WorkspaceArchiveReadError(path=path, context={"reason": reason}, cause=err) from err
        return io.BytesIO(data)

    async def write(self, path: Path, data: io.IOBase, *, user: Union[str, User, None] = None) -> None:
        _no_user(user, "writing a file")
        payload = coerce_write_payload(path=path, data=data)
        workspace_path = await self._validate_path_access(path, for_write=True)
        target = sandbox_path_str(workspace_path)
        raw = _read_all(payload.stream, path)
        staged = _staging_path(".data")
        quoted, quoted_staged = shlex.quote(target), shlex.quote(staged)
        try:
            await self._paddock.files.write(staged, raw)
            # `cat` into place, as the SDK's docker backend does: an existing file keeps its mode.
            result = await self._shell(
                f'd=$(dirname -- {quoted}) && mkdir -p -- "$d" && cat -- {quoted_staged} > {quoted}; '
                f"rc=$?; rm -f -- {quoted_staged}; exit $rc"
            )
        except PaddockError as err:
            reason = self._gone_text() if self._gone(err) else str(err)
            raise WorkspaceArchiveWriteError(path=workspace_path, context={"reason": reason}, cause=err) from err
        if result.exit_code != 0:
            raise WorkspaceArchiveWriteError(
                path=workspace_path,
                message=f"could not write {target} in the Paddock session: {_said(result)}",
                context={"exit_code": result.exit_code, "stderr": _said(result)},
            )

    # ---------------------------------------------------------------- workspace archives

    async def persist_workspace(self) -> io.IOBase:
        root = self._workspace_root_path()
        root_text = root.as_posix()
        parent, name = posixpath.split(root_text.rstrip("/"))
        if not name:
            raise WorkspaceArchiveReadError(path=root, context={"reason": "the workspace root is /: nothing to name"})
        staged = _staging_path(".tar")
        try:
            made = await self._shell(
                f"cd / && tar -c -f {shlex.quote(staged)} -C {shlex.quote(parent or '/')} {shlex.quote(name)}"
            )
            if made.exit_code != 0:
                raise WorkspaceArchiveReadError(
                    path=root, context={"reason": "tar_failed", "exit_code": made.exit_code, "stderr": _said(made)}
                )
            raw = await self._paddock.files.read(staged)
        except PaddockError as err:
            reason = self._gone_text() if self._gone(err) else str(err)
            raise WorkspaceArchiveReadError(path=root, context={"reason": reason}, cause=err) from err
        finally:
            await self._remove_quietly(staged)
        try:
            return await asyncio.to_thread(
                _portable_archive, raw, root=root_text, skip=set(self._persist_workspace_skip_relpaths())
            )
        except UnsafeTarMemberError as err:
            raise WorkspaceArchiveReadError(
                path=root, context={"reason": err.reason, "member": err.member}, cause=err
            ) from err
        except (tarfile.TarError, OSError) as err:
            raise WorkspaceArchiveReadError(path=root, cause=err) from err

    async def hydrate_workspace(self, data: io.IOBase) -> None:
        root = self._workspace_root_path()
        raw = _read_all(data, root)
        try:
            validate_tar_bytes(raw, allow_external_symlink_targets=False)
        except UnsafeTarMemberError as err:
            raise WorkspaceArchiveWriteError(
                path=root, context={"reason": err.reason, "member": err.member}, cause=err
            ) from err
        staged = _staging_path(".tar")
        quoted_root, quoted_staged = shlex.quote(root.as_posix()), shlex.quote(staged)
        try:
            await self._paddock.files.write(staged, raw)
            result = await self._shell(
                f"mkdir -p -- {quoted_root} && tar -x -o -f {quoted_staged} -C {quoted_root}; "
                f"rc=$?; rm -f -- {quoted_staged}; exit $rc"
            )
        except PaddockError as err:
            await self._remove_quietly(staged)
            reason = self._gone_text() if self._gone(err) else str(err)
            raise WorkspaceArchiveWriteError(path=root, context={"reason": reason}, cause=err) from err
        if result.exit_code != 0:
            raise WorkspaceArchiveWriteError(
                path=root,
                message=f"could not extract the workspace archive into {root.as_posix()}: {_said(result)}",
                context={"reason": "tar_failed", "exit_code": result.exit_code, "stderr": _said(result)},
            )

    async def _remove_quietly(self, path: str) -> None:
        try:
            await self._shell(f"rm -f -- {shlex.quote(path)}", timeout=60)
        except PaddockError:
            pass  # best effort: it is in /tmp, which goes with the session

    # ---------------------------------------------------------------- PTY

    async def pty_exec_start(
        self,
        *command: Union[str, Path],
        timeout: Optional[float] = None,
        shell: Union[bool, List[str]] = True,
        user: Union[str, User, None] = None,
        tty: bool = False,
        yield_time_s: Optional[float] = None,
        max_output_tokens: Optional[int] = None,
    ) -> PtyExecUpdate:
        _ = timeout  # a PTY process runs until it ends, is interrupted, or the session ends
        argv = self._prepare_exec_command(*command, shell=shell, user=user)
        script = self._script(argv, stdin_null=not tty)
        entry = _PtyProcess(tty=tty)
        try:
            entry.handle = await self._paddock.run(
                script,
                env=await self._command_env(),
                background=True,
                pty=tty,
                on_stdout=entry.take,
                on_stderr=entry.take,
            )
        except PaddockError as err:
            raise self._exec_failure(command, err) from err
        entry.watcher = asyncio.ensure_future(entry.watch())
        async with self._pty_lock:
            process_id = allocate_pty_process_id(self._reserved_pty_ids)
            self._reserved_pty_ids.add(process_id)
            pruned = self._prune_pty_processes()
            self._pty_processes[process_id] = entry
        if pruned is not None:
            await self._terminate(pruned)
        yield_ms = 10_000 if yield_time_s is None else int(yield_time_s * 1000)
        return await self._pty_update(process_id, entry, clamp_pty_yield_time_ms(yield_ms), max_output_tokens)

    async def pty_write_stdin(
        self,
        *,
        session_id: int,
        chars: str,
        yield_time_s: Optional[float] = None,
        max_output_tokens: Optional[int] = None,
    ) -> PtyExecUpdate:
        async with self._pty_lock:
            entry = self._resolve_pty_session_entry(pty_processes=self._pty_processes, session_id=session_id)
        if chars:
            if not entry.tty:
                raise RuntimeError("stdin is not available for this process")  # the SDK's words
            assert entry.handle is not None
            try:
                await entry.handle.send_stdin(chars)
            except PaddockError as err:
                try:  # it may have ended meanwhile: then the update below says so
                    await asyncio.wait_for(entry.ended.wait(), timeout=1.0)
                except asyncio.TimeoutError:
                    raise self._exec_failure(("write_stdin",), err) from err
        yield_ms = 250 if yield_time_s is None else int(yield_time_s * 1000)
        wait_ms = resolve_pty_write_yield_time_ms(yield_time_ms=yield_ms, input_empty=chars == "")
        entry.last_used = time.monotonic()
        return await self._pty_update(session_id, entry, wait_ms, max_output_tokens)

    async def _pty_update(
        self, process_id: int, entry: _PtyProcess, yield_ms: int, max_output_tokens: Optional[int]
    ) -> PtyExecUpdate:
        output, original_token_count, ended = await collect_pty_output(
            output_chunks=entry.chunks,
            output_lock=entry.lock,
            output_notify=entry.notify,
            is_done=entry.ended.is_set,
            yield_time_ms=yield_ms,
            max_output_tokens=max_output_tokens,
        )
        if ended and entry.failure is not None:
            await self._forget(process_id)
            raise self._exec_failure(("pty", str(process_id)), entry.failure) from entry.failure
        live: Optional[int] = process_id
        if ended:
            await self._forget(process_id)
            live = None
        return PtyExecUpdate(
            process_id=live,
            output=output,
            exit_code=entry.exit_code if ended else None,
            original_token_count=original_token_count,
        )

    async def _forget(self, process_id: int) -> None:
        async with self._pty_lock:
            self._pty_processes.pop(process_id, None)
            self._reserved_pty_ids.discard(process_id)

    def _prune_pty_processes(self) -> Optional[_PtyProcess]:
        if len(self._pty_processes) < PTY_PROCESSES_MAX:
            return None
        meta = [(pid, entry.last_used, entry.ended.is_set()) for pid, entry in self._pty_processes.items()]
        victim = process_id_to_prune_from_meta(meta)
        if victim is None:
            return None
        self._reserved_pty_ids.discard(victim)
        return self._pty_processes.pop(victim, None)

    async def pty_terminate_all(self) -> None:
        async with self._pty_lock:
            entries = list(self._pty_processes.values())
            self._pty_processes.clear()
            self._reserved_pty_ids.clear()
        await asyncio.gather(*(self._terminate(entry) for entry in entries))

    async def _terminate(self, entry: _PtyProcess) -> None:
        """Kills a PTY process (and what it started) and lets its watcher end."""
        if entry.handle is not None and not entry.ended.is_set():
            try:
                await entry.handle.kill()
            except PaddockError:
                pass  # it ended meanwhile, or the session did
        watcher = entry.watcher
        if watcher is None:
            return
        done, _ = await asyncio.wait([watcher], timeout=_KILL_GRACE)
        if not done:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)


# ------------------------------------------------------------------ the client


class PaddockSandboxClient(BaseSandboxClient[Optional[PaddockSandboxClientOptions]]):
    """An Agents SDK sandbox client whose sessions are Paddock sessions.

    Args:
        engine: an existing `paddock.Engine` to make the sessions with (the client never closes it).
        policy: a policy file for an engine the client starts itself on first use (and closes in
            `aclose()`); neither: the engine's default policy (`$PADDOCK_POLICY`, else built in).
        instrumentation, dependencies: the SDK's, as its own clients take them.

    The constructor does no I/O. See the module's documentation for what maps to what.
    """

    backend_id = BACKEND_ID
    supports_default_options = True

    def __init__(
        self,
        engine: Optional[Engine] = None,
        *,
        policy: Optional[Union[str, "os.PathLike[str]"]] = None,
        instrumentation: Optional[Instrumentation] = None,
        dependencies: Optional[Dependencies] = None,
    ) -> None:
        _common.check_engine_args(engine, policy)
        super().__init__()
        self._engine: Optional[Engine] = engine
        self._owns_engine = engine is None
        # Absolute now: the engine starts later, maybe after the caller changed directory.
        self._policy = os.path.abspath(os.fspath(policy)) if policy is not None else None
        self._engine_lock = threading.Lock()
        self._closed = False
        self._instrumentation = instrumentation if instrumentation is not None else Instrumentation()
        self._dependencies = dependencies

    def __repr__(self) -> str:
        where = "engine given" if not self._owns_engine else f"policy={self._policy!r}"
        return f"PaddockSandboxClient({where}{', closed' if self._closed else ''})"

    @property
    def engine(self) -> Optional[Engine]:
        """The engine the sessions are made with (None before first use when the client starts its own)."""
        return self._engine

    def _start_engine(self) -> Engine:
        with self._engine_lock:
            if self._closed:
                raise RuntimeError("this PaddockSandboxClient was closed: make a new one")
            if self._engine is None:
                self._engine = Engine(policy=self._policy)
            return self._engine

    async def _get_engine(self) -> Engine:
        engine = self._engine
        if engine is not None and not self._closed:
            return engine
        # `paddock embed` takes a moment to start: not on the event loop, and once (the lock).
        return await asyncio.get_running_loop().run_in_executor(None, self._start_engine)

    async def _open(self, engine: Engine, session_id: str, backend: Optional[str]) -> Tuple[AsyncSession, str]:
        """Starts Paddock session `session_id` and makes its working directory (its `pwd -P`)."""
        session = await engine.asession(session_id, backend=backend)
        try:
            result = await session.run(_common.make_script(session.id), timeout=120)
        except BaseException:
            await _close_quietly(session)
            raise
        made = _common.made_dir(result)
        if made is None:
            await _close_quietly(session)
            raise WorkspaceStartError(
                path=Path(_common.private_dir(session.id)), message=_common.failure_text(session.id, result)
            )
        return session, made

    async def create(
        self,
        *,
        snapshot: Union[SnapshotSpec, SnapshotBase, None] = None,
        manifest: Optional[Manifest] = None,
        options: Optional[PaddockSandboxClientOptions] = None,
    ) -> SandboxSession:
        if options is None:
            options = PaddockSandboxClientOptions()
        if not isinstance(options, PaddockSandboxClientOptions):
            raise TypeError(
                f"PaddockSandboxClient takes PaddockSandboxClientOptions(backend=...), got {type(options).__name__}"
            )
        manifest = manifest if manifest is not None else Manifest()
        _no_host_path_grants(manifest)
        self._validate_manifest_for_create(manifest)
        engine = await self._get_engine()
        session, working_dir = await self._open(engine, _new_session_id(), options.backend)
        owned = manifest.root == DEFAULT_MANIFEST_ROOT
        if owned:
            manifest = manifest.model_copy(update={"root": working_dir}, deep=True)
        session_id = uuid.uuid4()
        state = PaddockSandboxSessionState(
            session_id=session_id,
            manifest=manifest,
            snapshot=resolve_snapshot(snapshot, str(session_id)),
            paddock_session_id=session.id,
            backend=options.backend,
            workspace_root_owned=owned,
        )
        inner = PaddockSandboxSession(state=state, session=session, engine=engine)
        return self._wrap_session(inner, instrumentation=self._instrumentation)

    async def delete(self, session: SandboxSession) -> SandboxSession:
        inner = getattr(session, "_inner", session)
        if not isinstance(inner, PaddockSandboxSession):
            raise TypeError(f"PaddockSandboxClient.delete expects a session it made, got {type(inner).__name__}")
        await inner._end()
        return session

    async def resume(self, state: SandboxSessionState) -> SandboxSession:
        if not isinstance(state, PaddockSandboxSessionState):
            raise TypeError(
                f"PaddockSandboxClient.resume expects a PaddockSandboxSessionState (type 'paddock'), got "
                f"{type(state).__name__}: deserialize it with this client's deserialize_session_state"
            )
        state.assert_path_grants_rebound()
        _no_host_path_grants(state.manifest)
        engine = await self._get_engine()
        session: Optional[AsyncSession] = None
        if state.paddock_session_id:
            try:
                session = await engine.aconnect(state.paddock_session_id, backend=state.backend)
            except SessionNotFound:
                session = None
        live = session is not None
        if session is None:
            # Gone (deleted, swept): started again under the same id, so that a root this adapter
            # made keeps its name; start() then restores the snapshot into it.
            session, working_dir = await self._open(
                engine, state.paddock_session_id or _new_session_id(), state.backend
            )
            state.paddock_session_id = session.id
            if state.workspace_root_owned and state.manifest.root != working_dir:
                state.manifest = state.manifest.model_copy(update={"root": working_dir}, deep=True)
            state.workspace_root_ready = False
        inner = PaddockSandboxSession(state=state, session=session, engine=engine)
        inner._set_start_state_preserved(live)
        return self._wrap_session(inner, instrumentation=self._instrumentation)

    def deserialize_session_state(self, payload: Dict[str, object]) -> SandboxSessionState:
        return self._deserialize_session_state_payload(payload, PaddockSandboxSessionState)

    async def aclose(self) -> None:
        """Stops an engine the client started (sessions live on in Paddock's state directory until
        `delete` or the idle sweep); an engine given as `engine=` is left alone."""
        with self._engine_lock:
            self._closed = True
            engine, owned = self._engine, self._owns_engine
            if owned:
                self._engine = None
        if owned and engine is not None:
            await engine.aclose()

    def close(self) -> None:
        """`aclose()`, blocking."""
        with self._engine_lock:
            self._closed = True
            engine, owned = self._engine, self._owns_engine
            if owned:
                self._engine = None
        if owned and engine is not None:
            engine.close()


async def _close_quietly(session: AsyncSession) -> None:
    try:
        await session.close()
    except PaddockError:
        pass
