"""The engine: a `paddock embed` process spoken to over JSON lines (docs/embedding-protocol.md).

Threads: one reader thread reads the engine's messages and hands each where it belongs (the
future of the request it answers, a host tool, the approver, the event callback); sync host
tools run in a thread pool, async ones on the event loop of the request whose script called
them (or on the engine's own loop thread, for the sync API). The engine process ends with
`close()`, the context managers, or this interpreter (its stdin closes).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import inspect
import itertools
import json
import os
import secrets
import subprocess
import threading
import time
from queue import SimpleQueue
from typing import (
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    Dict,
    Iterable,
    List,
    Mapping,
    Optional,
    Tuple,
    Union,
)

from ._binary import find_paddock_bin

# ToolError stays importable from here, as before the errors had a module of their own.
from ._errors import EngineClosed, EngineStartError, PaddockError, SessionNotFound, ToolError, error_from  # noqa: F401
from ._schema import signature_schema
from ._session import AsyncSession, Session

#: What `_request`'s `on_output` gets: each `output` message of the request, in order; an async
#: request awaits what it returns when that is awaitable.
OutputHandler = Callable[[Dict[str, Any]], Any]

PROTOCOL_VERSION = 1

#: What an approver returns: True/False, or "once" / "session" / "always" / "deny".
ApprovalAnswer = Union[bool, str]
Approver = Callable[[Dict[str, Any]], Union[ApprovalAnswer, Awaitable[ApprovalAnswer]]]
EventCallback = Callable[[Dict[str, Any]], Union[None, Awaitable[None]]]


class HostTool:
    """A Python callable offered to scripts as `await tools.<name>(...)`.

    Built by `paddock.tool` or from a plain function given in `Engine(tools=[...])`: the name is
    the function's, the description its docstring's summary, the JSON schema comes from its
    type hints (int, float, str, bool, list[...], dict[...], Optional, Literal, enums,
    dataclasses, pydantic models) and its defaults.
    """

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        name: Optional[str] = None,
        description: Optional[str] = None,
        requires_approval: bool = False,
        input_schema: Optional[Dict[str, Any]] = None,
    ) -> None:
        if not callable(func):
            raise TypeError(f"a host tool must be callable, got {func!r}")
        self.func = func
        self.name = name or getattr(func, "__name__", "")
        if not self.name or self.name == "<lambda>":
            raise ValueError(f"host tool {func!r} needs a name: pass name=...")
        schema, summary, models = signature_schema(func)
        self.input_schema = input_schema if input_schema is not None else schema
        self.description = description if description is not None else summary
        self.requires_approval = requires_approval
        self.models = models
        target = func.__call__ if not inspect.isroutine(func) and hasattr(func, "__call__") else func
        self.is_async = inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(target)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        kind = "async" if self.is_async else "sync"
        return f"HostTool({self.name!r}, {kind})"

    def spec(self) -> Dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
            "requires_approval": self.requires_approval,
        }

    def _arguments(self, args: Dict[str, Any]) -> Dict[str, Any]:
        for param, model in self.models.items():
            if param in args and args[param] is not None:
                args[param] = model.model_validate(args[param])
        return args


def tool(
    func: Optional[Callable[..., Any]] = None,
    *,
    name: Optional[str] = None,
    description: Optional[str] = None,
    requires_approval: bool = False,
) -> Any:
    """Marks a function as a host tool (`@paddock.tool` or `@paddock.tool(requires_approval=True)`)."""

    def wrap(f: Callable[..., Any]) -> HostTool:
        return HostTool(f, name=name, description=description, requires_approval=requires_approval)

    return wrap(func) if func is not None else wrap


def _as_host_tool(item: Union[HostTool, Callable[..., Any]]) -> HostTool:
    return item if isinstance(item, HostTool) else HostTool(item)


def _to_json(value: Any) -> Any:
    """`json.dumps`'s fallback for what tools commonly return."""
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")


def _resolve(fut: "asyncio.Future[Any]", message: Dict[str, Any]) -> None:
    if not fut.done():
        fut.set_result(message)


def _reject(fut: "asyncio.Future[Any]", error: BaseException) -> None:
    if not fut.done():
        fut.set_exception(error)


class _Waiter:
    """Where the answer to one request goes: an asyncio future on its loop, or a concurrent one."""

    __slots__ = ("loop", "future")

    def __init__(self, loop: Optional[asyncio.AbstractEventLoop], future: Any) -> None:
        self.loop = loop
        self.future = future

    def deliver(self, message: Dict[str, Any]) -> None:
        if self.loop is None:
            if not self.future.done():
                self.future.set_result(message)
            return
        try:
            self.loop.call_soon_threadsafe(_resolve, self.future, message)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    def fail(self, error: BaseException) -> None:
        if self.loop is None:
            if not self.future.done():
                self.future.set_exception(error)
            return
        try:
            self.loop.call_soon_threadsafe(_reject, self.future, error)
        except RuntimeError:
            pass

    def output(self, message: Dict[str, Any]) -> None:
        """A request that did not ask for a stream has nobody to give output to."""


class _Channel:
    """Where a streamed request's messages go, in the order the engine sent them: its `output`
    messages, then its `result` (or the failure that ended it). One queue for all three keeps
    that order, which a future plus a callback could not: the caller's thread (or task) takes
    them out and runs the callbacks itself, never the reader thread, so a callback may be slow
    or call the engine again."""

    __slots__ = ("loop", "queue")

    def __init__(self, loop: Optional[asyncio.AbstractEventLoop], queue_: Any) -> None:
        self.loop = loop
        self.queue = queue_

    def _put(self, item: Tuple[str, Any]) -> None:
        if self.loop is None:
            self.queue.put(item)
            return
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    def deliver(self, message: Dict[str, Any]) -> None:
        self._put(("result", message))

    def fail(self, error: BaseException) -> None:
        self._put(("error", error))

    def output(self, message: Dict[str, Any]) -> None:
        self._put(("output", message))


def _set_variables_script(values: Mapping[str, Any]) -> str:
    """The script that sets `values` in a notebook: the names checked here, the values carried
    as one JSON text (so nothing of them is ever run as code)."""
    import keyword

    if not isinstance(values, Mapping):
        raise TypeError(f"set_variables takes a mapping of names to JSON values, not {type(values).__name__}")
    for name, value in values.items():
        if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
            raise ValueError(f"set_variables: {name!r} is not a Python name")
        if name.startswith("__"):
            raise ValueError(f"set_variables: {name!r}: names starting with '__' belong to the runtime")
        try:
            json.dumps(value, allow_nan=True)
        except (TypeError, ValueError) as err:
            raise TypeError(
                f"set_variables: the value of {name!r} is not a JSON value ({err}); "
                "pass numbers, strings, booleans, None, lists and dicts of them"
            ) from None
    text = json.dumps(dict(values))
    return f"globals().update(__import__('json').loads({text!r}))\nNone\n"


def _check_variables_set(answer: Dict[str, Any]) -> None:
    if not answer.get("ok"):
        raise ToolError(str(answer.get("error_code") or "tool:failed"), f"set_variables failed: {answer.get('error')}")
    if "notebook" not in answer:
        raise ValueError(
            "set_variables needs a notebook session, whose names last from one script to the "
            "next: start the engine with keep_state=True (or [codemode] keep_state = true)"
        )


def _new_session_id() -> str:
    """A session id no one else has (the engine accepts [A-Za-z0-9_.-], at most 128)."""
    return f"py-{secrets.token_hex(6)}"


def _no_id_with_snapshot(id: Optional[str]) -> None:
    if id is not None:
        raise ValueError(
            "from_snapshot starts a new session whose id the engine chooses: leave `id` out "
            "(or `paddock sessions start --from SNAPSHOT --session ID` for a chosen one)"
        )


def _require_live(id: str, answer: Any) -> None:
    if not (isinstance(answer, dict) and answer.get("live")):
        raise SessionNotFound("sessions:not_found", f"session {id!r} is not live")


class Engine:
    """A Paddock engine: scripts (`run_tools_script`), any tool (`call`), and your own
    functions as tools scripts can call.

    ```python
    async with paddock.Engine(tools=[search, fetch]) as engine:
        result = await engine.run_tools_script("r = await tools.search(q='x'); r")
    ```

    `keep_state=True` makes the session a notebook (as `[codemode] keep_state` in a policy):
    each script sees the variables, functions and imports earlier scripts of the session
    defined, and its result says so in `notebook` (cell number, `fresh`, why a state ended).

    Sessions (DESIGN.md 8.1): `engine.session(...)` / `engine.connect(id)` give a `Session`
    (`asession` / `aconnect`: an `AsyncSession`); `engine.session_id` is the default
    session's, the one scripts and `call` use. `backend=NAME` routes the environment tools
    (terminal, process, python_execute, the file tools) of this engine to that backend of the
    policy, as `paddock call --backend` does.
    """

    def __init__(
        self,
        policy: Optional[Union[str, os.PathLike]] = None,
        tools: Iterable[Union[HostTool, Callable[..., Any]]] = (),
        approver: Optional[Approver] = None,
        on_event: Optional[EventCallback] = None,
        *,
        session: Optional[str] = None,
        backend: Optional[str] = None,
        keep_state: bool = False,
        events: bool = False,
        binary: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        max_host_threads: int = 32,
        startup_timeout: float = 60.0,
    ) -> None:
        self._closed = False
        self._close_lock = threading.Lock()
        host = [_as_host_tool(t) for t in tools]
        self._host: Dict[str, HostTool] = {}
        for t in host:
            if t.name in self._host:
                raise ValueError(f"two host tools are named {t.name!r}")
            self._host[t.name] = t
        self._approver = approver
        self._on_event = on_event
        self._subscribers: List[Tuple[asyncio.AbstractEventLoop, "asyncio.Queue[Dict[str, Any]]"]] = []
        self._ids = itertools.count(1)
        self._pending: Dict[int, Union[_Waiter, _Channel]] = {}
        self._request_loops: Dict[int, asyncio.AbstractEventLoop] = {}
        self._host_tasks: Dict[int, Any] = {}
        self._write_lock = threading.Lock()
        self._loop_lock = threading.Lock()
        self._own_loop: Optional[asyncio.AbstractEventLoop] = None
        self._own_loop_thread: Optional[threading.Thread] = None
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=max_host_threads, thread_name_prefix="paddock-host"
        )
        self._closed_reason = "the engine was closed"
        self.binary = find_paddock_bin(binary)
        self.backend = backend
        # What an engine for another backend is made with (`session(backend=...)`): the same
        # policy, tools, approver and events, so a session there is asked and reported alike.
        self._config: Dict[str, Any] = {
            "policy": policy,
            "tools": host,
            "approver": approver,
            "on_event": on_event,
            "events": events,
            "binary": self.binary,
            "env": env,
            "max_host_threads": max_host_threads,
            "startup_timeout": startup_timeout,
        }
        self._backend_engines: Dict[str, "Engine"] = {}
        self._backend_lock = threading.Lock()
        self._sessions_known = False
        process_env = dict(os.environ if env is None else env)
        self._proc = subprocess.Popen(
            [self.binary, "embed"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=process_env,
            close_fds=True,
        )
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._stdin = self._proc.stdin
        self._stdout = self._proc.stdout
        self._ready: "concurrent.futures.Future[Dict[str, Any]]" = concurrent.futures.Future()
        # Leader/follower readers: the reader thread runs a sync host tool itself (no thread
        # hand-off, the fastest call); when one runs longer than SLOW_TOOL_SECONDS the monitor
        # makes a new reader, so a slow or hanging sync tool never holds up other messages.
        self._reader_token = 0
        self._busy: Optional[Tuple[int, float]] = None
        self._host_threads = threading.BoundedSemaphore(max_host_threads)
        self._readers: List[threading.Thread] = []
        self._closed_once = threading.Event()
        self._host_threads.acquire()
        self._start_reader()
        self._monitor = threading.Thread(target=self._watch_readers, name="paddock-monitor", daemon=True)
        self._monitor.start()
        hello = {
            "type": "hello",
            "protocol": PROTOCOL_VERSION,
            "policy": os.fspath(policy) if policy is not None else None,
            "session": session,
            "tools": [t.spec() for t in host],
            "approver": approver is not None,
            "events": bool(events or on_event is not None),
            "keep_state": bool(keep_state),
        }
        if backend is not None:
            # Only when given: an engine that predates the field refuses a hello naming it.
            hello["backend"] = backend
        self._events_on = hello["events"]
        try:
            self._send(hello)
            ready = self._ready.result(timeout=startup_timeout)
        except concurrent.futures.TimeoutError:
            self._kill()
            raise EngineStartError(f"`paddock embed` did not answer within {startup_timeout} s") from None
        except BaseException:
            self._kill()
            raise
        #: The default session's id: where scripts and `call` run (was `engine.session`,
        #: which is now the method that makes a `Session`).
        self.session_id: str = ready["session"]
        self.version: str = ready["version"]
        self.tool_names: List[str] = list(ready["tools"])

    # ----------------------------------------------------------------- requests

    async def run_tools_script(
        self,
        code: str,
        *,
        timeout: Optional[float] = None,
        max_tool_calls: Optional[int] = None,
        max_memory_mb: Optional[int] = None,
        max_output_chars: Optional[int] = None,
        session: Optional[str] = None,
    ) -> Dict[str, Any]:
        """Runs a script; returns its result object (`{"ok", "output", "result", ...}` or
        `{"ok": False, "error_code", "error", ...}`), as `paddock run` prints it. In `session`
        (its notebook, with `keep_state`) instead of the engine's own when given.

        A tool is also a plain function in the script (`lookup("paris")`, arguments by keyword
        or in the order of its schema), and `final_answer(value)` ends the script with `value`
        as its result and `"final_answer": True`."""
        message = self._script_message(code, timeout, max_tool_calls, max_memory_mb, max_output_chars, session)
        return self._unwrap(await self._request(message))

    def run_tools_script_sync(
        self,
        code: str,
        *,
        timeout: Optional[float] = None,
        max_tool_calls: Optional[int] = None,
        max_memory_mb: Optional[int] = None,
        max_output_chars: Optional[int] = None,
        session: Optional[str] = None,
    ) -> Dict[str, Any]:
        """`run_tools_script`, blocking."""
        message = self._script_message(code, timeout, max_tool_calls, max_memory_mb, max_output_chars, session)
        return self._unwrap(self._request_sync(message))

    async def add_tools(self, tools: Iterable[Union[HostTool, Callable[..., Any]]]) -> List[str]:
        """Adds host tools while the engine runs (as `Engine(tools=...)` does at start): scripts
        started from now on can call them. A name already taken raises `ValueError` and adds
        none of `tools`. Returns every tool name the engine now has."""
        message = self._add_tools_message(tools)
        try:
            names = self._unwrap(await self._request(message))["tools"]
        except ToolError as err:
            self._forget_tools(message)
            raise ValueError(err.message) from None
        self.tool_names = list(names)
        return list(names)

    def add_tools_sync(self, tools: Iterable[Union[HostTool, Callable[..., Any]]]) -> List[str]:
        """`add_tools`, blocking."""
        message = self._add_tools_message(tools)
        try:
            names = self._unwrap(self._request_sync(message))["tools"]
        except ToolError as err:
            self._forget_tools(message)
            raise ValueError(err.message) from None
        self.tool_names = list(names)
        return list(names)

    def _add_tools_message(self, tools: Iterable[Union[HostTool, Callable[..., Any]]]) -> Dict[str, Any]:
        """The `add_tools` request; the tools are known here first, so a call that comes as
        soon as the engine has them finds them."""
        added = [_as_host_tool(t) for t in tools]
        names = [t.name for t in added]
        for name in names:
            if name in self._host or names.count(name) > 1:
                raise ValueError(f"a host tool named {name!r} exists already or is given twice")
        for t in added:
            self._host[t.name] = t
        self._config["tools"] = list(self._config["tools"]) + added
        return {"type": "add_tools", "tools": [t.spec() for t in added]}

    def _forget_tools(self, message: Dict[str, Any]) -> None:
        refused = {spec["name"] for spec in message["tools"]}
        for name in refused:
            self._host.pop(name, None)
        self._config["tools"] = [t for t in self._config["tools"] if t.name not in refused]

    async def set_variables(self, values: Mapping[str, Any], *, session: Optional[str] = None) -> None:
        """Sets names of a notebook session (`keep_state=True`) from the host: the next
        script sees them. Values are JSON values (a tuple arrives as a list)."""
        answer = await self.run_tools_script(_set_variables_script(values), session=session)
        _check_variables_set(answer)

    def set_variables_sync(self, values: Mapping[str, Any], *, session: Optional[str] = None) -> None:
        """`set_variables`, blocking."""
        answer = self.run_tools_script_sync(_set_variables_script(values), session=session)
        _check_variables_set(answer)

    async def call(self, tool: str, /, **args: Any) -> Any:
        """Calls any tool through the engine's registry (terminal, process, python_execute, your
        host tools...): its JSON answer, or `ToolError`."""
        return self._unwrap(await self._request({"type": "call", "tool": tool, "args": args}))

    def call_sync(self, tool: str, /, **args: Any) -> Any:
        """`call`, blocking."""
        return self._unwrap(self._request_sync({"type": "call", "tool": tool, "args": args}))

    async def upload(
        self, local: Union[str, os.PathLike], remote: str, *, session: Optional[str] = None
    ) -> Dict[str, Any]:
        """Copies `local` (a file, or a directory's contents as a tar stream) into the session's
        environment at `remote` (parents made), on the backend the `files` route names:
        `{"from", "to", "kind", "bytes"}`, or `ToolError` (`files:transfer_failed`).
        `session`: that session's environment instead of the default one."""
        return self._unwrap(await self._request(self._transfer_message("upload", local, remote, session)))

    def upload_sync(
        self, local: Union[str, os.PathLike], remote: str, *, session: Optional[str] = None
    ) -> Dict[str, Any]:
        """`upload`, blocking."""
        return self._unwrap(self._request_sync(self._transfer_message("upload", local, remote, session)))

    async def download(
        self, remote: str, local: Union[str, os.PathLike], *, session: Optional[str] = None
    ) -> Dict[str, Any]:
        """Copies `remote` (a file, or a directory's contents) out of the session's environment
        to `local` (parents made): `{"from", "to", "kind", "bytes"}`."""
        return self._unwrap(await self._request(self._transfer_message("download", local, remote, session)))

    def download_sync(
        self, remote: str, local: Union[str, os.PathLike], *, session: Optional[str] = None
    ) -> Dict[str, Any]:
        """`download`, blocking."""
        return self._unwrap(self._request_sync(self._transfer_message("download", local, remote, session)))

    def _transfer_message(
        self, kind: str, local: Union[str, os.PathLike], remote: str, session: Optional[str]
    ) -> Dict[str, Any]:
        message: Dict[str, Any] = {"type": kind, "local": os.path.abspath(os.fspath(local)), "remote": remote}
        return self._in_session(message, session)

    def _in_session(self, message: Dict[str, Any], session: Optional[str]) -> Dict[str, Any]:
        """`message` for `session`. The default session is left unnamed, so that an engine
        older than the `session` field (which ignores it) still answers for the right one."""
        if session is not None and session != self.session_id:
            message["session"] = session
        return message

    async def snapshot(self, session: Optional[str] = None, *, name: Optional[str] = None) -> Dict[str, Any]:
        """Saves `session` (default: this engine's) as a snapshot: its files and shell state,
        and with `keep_state=True` its notebook's names; not its running processes (`paddock
        sessions snapshot`). Returns `{"name", "bytes", "files", "not_carried", "notebook"?,
        ...}`, or raises `ToolError` (`sessions:snapshot_failed`)."""
        message = {"type": "snapshot", "session": session, "name": name}
        return self._unwrap(await self._request(message))

    def snapshot_sync(self, session: Optional[str] = None, *, name: Optional[str] = None) -> Dict[str, Any]:
        """`snapshot`, blocking."""
        message = {"type": "snapshot", "session": session, "name": name}
        return self._unwrap(self._request_sync(message))

    async def fork(self, snapshot: str, count: int = 1) -> List[str]:
        """Starts `count` new sessions from snapshot `snapshot`, each independent; returns their
        ids (use one as `Engine(session=ID)`; `paddock sessions close ID` ends it)."""
        message = {"type": "fork", "snapshot": snapshot, "count": count}
        return list(self._unwrap(await self._request(message))["sessions"])

    def fork_sync(self, snapshot: str, count: int = 1) -> List[str]:
        """`fork`, blocking."""
        message = {"type": "fork", "snapshot": snapshot, "count": count}
        return list(self._unwrap(self._request_sync(message))["sessions"])

    async def events(self) -> AsyncIterator[Dict[str, Any]]:
        """Every ToolCallEvent from now on (needs `Engine(events=True)` or `on_event`)."""
        if not self._events_on:
            raise PaddockError("events were not asked for: create the engine with events=True")
        queue: "asyncio.Queue[Dict[str, Any]]" = asyncio.Queue()
        entry = (asyncio.get_running_loop(), queue)
        self._subscribers.append(entry)
        try:
            while True:
                event = await queue.get()
                if event.get("__closed__"):
                    return
                yield event
        finally:
            if entry in self._subscribers:
                self._subscribers.remove(entry)

    # ----------------------------------------------------------------- sessions

    def session(
        self,
        id: Optional[str] = None,
        *,
        backend: Optional[str] = None,
        from_snapshot: Optional[str] = None,
    ) -> Session:
        """A `Session`: `id`'s (attached when it is live, started on first use otherwise), a
        new one with an id of its own when `id` is None, or a new one started from snapshot
        `from_snapshot` (then leave `id` out: a fork gets a fresh id). `backend`: the
        environment tools of this session run on that backend of the policy (one more
        `paddock embed` process per backend, kept by this engine and closed with it)."""
        engine = self._engine_for(backend)
        if from_snapshot is not None:
            _no_id_with_snapshot(id)
            return Session(engine, engine.fork_sync(from_snapshot, 1)[0])
        sid = id if id is not None else _new_session_id()
        if sid != engine.session_id and not engine._sessions_known:
            engine._session_answer(engine._request_sync(engine._session_message("exists", sid)))
        return Session(engine, sid)

    def connect(self, id: str, *, backend: Optional[str] = None) -> Session:
        """The live session `id`, attached; `SessionNotFound` when it is not live (never
        started, closed, swept). Unlike `session(id)` it never starts one."""
        engine = self._engine_for(backend)
        if id != engine.session_id:
            answer = engine._session_answer(engine._request_sync(engine._session_message("exists", id)))
            _require_live(id, answer)
        return Session(engine, id)

    async def asession(
        self,
        id: Optional[str] = None,
        *,
        backend: Optional[str] = None,
        from_snapshot: Optional[str] = None,
    ) -> AsyncSession:
        """`session(...)` as an `AsyncSession` (awaitable methods, async callbacks welcome)."""
        engine = await self._aengine_for(backend)
        if from_snapshot is not None:
            _no_id_with_snapshot(id)
            return AsyncSession(engine, (await engine.fork(from_snapshot, 1))[0])
        sid = id if id is not None else _new_session_id()
        if sid != engine.session_id and not engine._sessions_known:
            engine._session_answer(await engine._request(engine._session_message("exists", sid)))
        return AsyncSession(engine, sid)

    async def aconnect(self, id: str, *, backend: Optional[str] = None) -> AsyncSession:
        """`connect(id)` as an `AsyncSession`."""
        engine = await self._aengine_for(backend)
        if id != engine.session_id:
            answer = engine._session_answer(await engine._request(engine._session_message("exists", id)))
            _require_live(id, answer)
        return AsyncSession(engine, id)

    def _engine_for(self, backend: Optional[str]) -> "Engine":
        """This engine, or the one routing to `backend` (made on first use, once)."""
        if self._closed:
            raise EngineClosed(self._closed_reason)
        if backend is None or backend == self.backend:
            return self
        with self._backend_lock:
            if self._closed:
                raise EngineClosed(self._closed_reason)
            engine = self._backend_engines.get(backend)
            if engine is None or engine._closed:
                engine = Engine(**self._config, backend=backend)
                self._backend_engines[backend] = engine
            return engine

    async def _aengine_for(self, backend: Optional[str]) -> "Engine":
        if backend is None or backend == self.backend or backend in self._backend_engines:
            return self._engine_for(backend)
        # Starting `paddock embed` takes a few hundred milliseconds: not on the event loop.
        return await asyncio.get_running_loop().run_in_executor(None, self._engine_for, backend)

    @staticmethod
    def _session_message(action: str, session: str) -> Dict[str, Any]:
        return {"type": "session", "action": action, "session": session}

    def _session_answer(self, message: Dict[str, Any]) -> Any:
        """The value of a `session` request's answer. An engine that does not know the request
        is too old to run calls in other sessions (it would ignore their `session` and run
        them in its own): that is said plainly rather than done wrongly."""
        error = message.get("error") or {}
        if (
            not message.get("ok")
            and error.get("error_code") == "embed:protocol"
            and "session" in str(error.get("error", ""))
        ):
            raise PaddockError(
                f"this paddock binary ({self.binary}, version {self.version}) predates sessions "
                "other than the engine's own (the embedding protocol's `session` request): "
                "install a newer one, or use engine.session(engine.session_id)"
            )
        value = self._unwrap(message)
        self._sessions_known = True
        return value

    @staticmethod
    def _script_message(
        code: str,
        timeout: Optional[float],
        max_tool_calls: Optional[int],
        max_memory_mb: Optional[int],
        max_output_chars: Optional[int],
        session: Optional[str] = None,
    ) -> Dict[str, Any]:
        limits = {
            "timeout_seconds": timeout,
            "max_tool_calls": max_tool_calls,
            "max_memory_mb": max_memory_mb,
            "max_output_chars": max_output_chars,
        }
        message: Dict[str, Any] = {
            "type": "run_tools_script",
            "code": code,
            "limits": {k: v for k, v in limits.items() if v is not None},
        }
        if session is not None:
            message["session"] = session
        return message

    @staticmethod
    def _unwrap(message: Dict[str, Any]) -> Any:
        if message.get("ok"):
            return message.get("value")
        error = message.get("error") or {}
        raise error_from(error.get("error_code", "tool:failed"), error.get("error", "the request failed"))

    def _call_message(self, tool: str, args: Dict[str, Any], session: Optional[str], stream: bool) -> Dict[str, Any]:
        message: Dict[str, Any] = {"type": "call", "tool": tool, "args": args}
        if stream:
            message["stream"] = True
        return self._in_session(message, session)

    def _call_sync(
        self,
        tool: str,
        args: Dict[str, Any],
        *,
        session: Optional[str] = None,
        on_output: Optional[OutputHandler] = None,
    ) -> Any:
        """`call_sync` in `session`; with `on_output`, the call streams its output to it."""
        message = self._call_message(tool, args, session, on_output is not None)
        return self._unwrap(self._request_sync(message, on_output))

    async def _call(
        self,
        tool: str,
        args: Dict[str, Any],
        *,
        session: Optional[str] = None,
        on_output: Optional[OutputHandler] = None,
    ) -> Any:
        """`call` in `session`; with `on_output`, the call streams its output to it."""
        message = self._call_message(tool, args, session, on_output is not None)
        return self._unwrap(await self._request(message, on_output))

    async def _request(self, message: Dict[str, Any], on_output: Optional[OutputHandler] = None) -> Dict[str, Any]:
        loop = asyncio.get_running_loop()
        request_id = next(self._ids)
        message["id"] = request_id
        if on_output is None:
            fut: "asyncio.Future[Dict[str, Any]]" = loop.create_future()
            self._pending[request_id] = _Waiter(loop, fut)
        else:
            channel: "asyncio.Queue[Tuple[str, Any]]" = asyncio.Queue()
            self._pending[request_id] = _Channel(loop, channel)
        self._request_loops[request_id] = loop
        try:
            self._send(message)
            if on_output is None:
                return await fut
            return await self._drain(channel, on_output)
        except BaseException:
            # The caller gave up (cancelled, or its callback raised): the engine stops the
            # request (a script's child is killed, a command's process tree ended).
            self._send_quietly({"type": "cancel", "id": request_id})
            raise
        finally:
            self._pending.pop(request_id, None)
            self._request_loops.pop(request_id, None)

    @staticmethod
    async def _drain(channel: "asyncio.Queue[Tuple[str, Any]]", on_output: OutputHandler) -> Dict[str, Any]:
        while True:
            kind, item = await channel.get()
            if kind == "output":
                done = on_output(item)
                if inspect.isawaitable(done):
                    await done
            elif kind == "error":
                raise item
            else:
                return item

    def _request_sync(self, message: Dict[str, Any], on_output: Optional[OutputHandler] = None) -> Dict[str, Any]:
        request_id = next(self._ids)
        message["id"] = request_id
        fut: "concurrent.futures.Future[Dict[str, Any]]" = concurrent.futures.Future()
        channel: "SimpleQueue[Tuple[str, Any]]" = SimpleQueue()
        self._pending[request_id] = _Waiter(None, fut) if on_output is None else _Channel(None, channel)
        try:
            self._send(message)
            if on_output is None:
                return fut.result()
            while True:
                kind, item = channel.get()
                if kind == "output":
                    on_output(item)  # in the caller's thread, in order
                elif kind == "error":
                    raise item
                else:
                    return item
        except BaseException:
            if request_id in self._pending:  # not answered: interrupted, or a callback raised
                self._send_quietly({"type": "cancel", "id": request_id})
            raise
        finally:
            self._pending.pop(request_id, None)

    # ------------------------------------------------------------------ wire

    def _send(self, message: Dict[str, Any]) -> None:
        if self._closed and message.get("type") != "close":
            raise EngineClosed(self._closed_reason)
        data = json.dumps(message, separators=(",", ":"), default=_to_json).encode() + b"\n"
        try:
            with self._write_lock:
                self._stdin.write(data)
                self._stdin.flush()
        except (BrokenPipeError, ValueError, OSError) as err:
            raise EngineClosed(f"the engine process is gone ({err})") from None

    def _send_quietly(self, message: Dict[str, Any]) -> None:
        try:
            self._send(message)
        except PaddockError:
            pass

    SLOW_TOOL_SECONDS = 0.01

    def _start_reader(self) -> None:
        self._reader_token += 1
        thread = threading.Thread(
            target=self._read_loop, args=(self._reader_token,), name="paddock-reader", daemon=True
        )
        self._readers = [t for t in self._readers if t.is_alive()] + [thread]
        thread.start()

    def _watch_readers(self) -> None:
        while not self._closed_once.wait(0.005):
            busy = self._busy
            if (
                busy is not None
                and busy[0] == self._reader_token
                and time.monotonic() - busy[1] > self.SLOW_TOOL_SECONDS
                and self._host_threads.acquire(blocking=False)
            ):
                # The reader is stuck in a slow tool: that thread keeps the tool, a new one reads.
                self._start_reader()

    def _read_loop(self, token: int) -> None:
        reason = "the engine process exited"
        try:
            while token == self._reader_token:
                line = self._stdout.readline()
                if not line:
                    break
                try:
                    message = json.loads(line)
                except ValueError:
                    continue
                kind = message.get("type")
                if kind == "result":
                    waiter = self._pending.pop(message.get("id"), None)
                    if waiter is not None:
                        waiter.deliver(message)
                elif kind == "output":
                    waiter = self._pending.get(message.get("id"))
                    if waiter is not None:
                        waiter.output(message)
                elif kind == "host_call":
                    self._on_host_call(message, token)
                elif kind == "host_cancel":
                    self._cancel_host_task(message.get("id"))
                elif kind == "event":
                    self._on_event_message(message.get("event", {}))
                elif kind == "approval_request":
                    self._on_approval_request(message)
                elif kind == "ready":
                    self._ready.set_result(message)
                elif kind == "error":
                    if message.get("fatal"):
                        reason = message.get("error", reason)
                        if not self._ready.done():
                            self._ready.set_exception(EngineStartError(reason))
                    else:
                        waiter = self._pending.pop(message.get("id"), None)
                        if waiter is not None:
                            waiter.deliver(
                                {"ok": False, "error": {"error_code": "embed:protocol", "error": message.get("error")}}
                            )
            else:
                # Another thread reads now: this one ran a slow tool and gives its slot back.
                self._host_threads.release()
                return
        except (OSError, ValueError):
            pass
        self._on_closed(reason)

    def _on_closed(self, reason: str) -> None:
        if self._closed_once.is_set():
            return
        self._closed_once.set()
        self._closed_reason = reason if not self._closed else "the engine was closed"
        if not self._ready.done():
            self._ready.set_exception(EngineStartError(reason))
        error = EngineClosed(self._closed_reason)
        for request_id in list(self._pending):
            waiter = self._pending.pop(request_id, None)
            if waiter is not None:
                waiter.fail(error)
        for loop, queue in list(self._subscribers):
            try:
                loop.call_soon_threadsafe(queue.put_nowait, {"__closed__": True})
            except RuntimeError:
                pass

    # ------------------------------------------------------------- host side

    def _loop_for(self, request: Optional[int]) -> asyncio.AbstractEventLoop:
        loop = self._request_loops.get(request) if request is not None else None
        if loop is not None and not loop.is_closed():
            return loop
        return self._private_loop()

    def _private_loop(self) -> asyncio.AbstractEventLoop:
        """The engine's own loop thread: async host tools of sync requests run there."""
        with self._loop_lock:
            if self._own_loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="paddock-loop", daemon=True)
                thread.start()
                self._own_loop, self._own_loop_thread = loop, thread
            return self._own_loop

    def _on_host_call(self, message: Dict[str, Any], token: int) -> None:
        call_id = message["id"]
        host_tool = self._host.get(message.get("tool", ""))
        args = message.get("args") or {}
        if host_tool is None:
            self._answer(call_id, error=("LookupError", f"no host tool named {message.get('tool')!r}"))
            return
        if not host_tool.is_async:
            # On this reader thread (see _watch_readers); a sync call cannot be cancelled.
            self._busy = (token, time.monotonic())
            try:
                self._run_sync_tool(host_tool, call_id, args)
            finally:
                if self._busy is not None and self._busy[0] == token:
                    self._busy = None
            return
        loop = self._loop_for(message.get("request"))

        def start() -> None:
            task = loop.create_task(self._run_async_tool(host_tool, call_id, args))
            # Kept for host_cancel until done.
            self._host_tasks[call_id] = (loop, task)
            task.add_done_callback(lambda _: self._host_tasks.pop(call_id, None))

        loop.call_soon_threadsafe(start)

    def _cancel_host_task(self, call_id: Any) -> None:
        entry = self._host_tasks.pop(call_id, None)
        if entry is not None:
            loop, task = entry
            try:
                loop.call_soon_threadsafe(task.cancel)
            except RuntimeError:  # its loop is closed: the task is gone with it
                pass

    def _run_sync_tool(self, host_tool: HostTool, call_id: int, args: Dict[str, Any]) -> None:
        try:
            value = host_tool.func(**host_tool._arguments(args))
        except BaseException as err:  # noqa: BLE001 - every failure goes back to the script
            self._answer(call_id, error=(type(err).__name__, str(err)))
        else:
            self._answer(call_id, value=value)

    async def _run_async_tool(self, host_tool: HostTool, call_id: int, args: Dict[str, Any]) -> None:
        try:
            value = await host_tool.func(**host_tool._arguments(args))
        except asyncio.CancelledError:
            raise  # the engine gave up on this call (host_cancel): nobody waits for an answer
        except BaseException as err:  # noqa: BLE001
            self._answer(call_id, error=(type(err).__name__, str(err)))
        else:
            self._answer(call_id, value=value)

    def _answer(
        self,
        call_id: int,
        value: Any = None,
        error: Optional[Tuple[str, str]] = None,
    ) -> None:
        if error is None:
            try:
                data = {"type": "host_result", "id": call_id, "ok": True, "value": value}
                self._send(data)
                return
            except TypeError as err:
                error = ("TypeError", f"the tool returned a value that is not JSON: {err}")
            except PaddockError:
                return
        self._send_quietly(
            {
                "type": "host_result",
                "id": call_id,
                "ok": False,
                "error": {"exception": error[0], "message": error[1]},
            }
        )

    def _on_approval_request(self, message: Dict[str, Any]) -> None:
        approver = self._approver
        request_id = message["id"]
        request = message.get("request", {})

        def reply(answer: Any) -> None:
            if isinstance(answer, str):
                word = answer.strip().lower()
                approved = word in ("once", "session", "always", "yes", "y", "approve", "allow")
                scope = word if word in ("session", "always") else "once"
            else:
                approved, scope = bool(answer), "once"
            self._send_quietly({"type": "approval_reply", "id": request_id, "approved": approved, "scope": scope})

        if approver is None:
            reply(False)
            return
        if inspect.iscoroutinefunction(approver):

            async def ask_async() -> None:
                try:
                    answer = await approver(request)  # type: ignore[misc]
                except Exception:  # noqa: BLE001 - an approver that fails denies
                    answer = False
                reply(answer)

            asyncio.run_coroutine_threadsafe(ask_async(), self._private_loop())
        else:

            def ask() -> None:
                try:
                    answer = approver(request)
                except Exception:  # noqa: BLE001
                    answer = False
                reply(answer)

            self._executor.submit(ask)

    def _on_event_message(self, event: Dict[str, Any]) -> None:
        callback = self._on_event
        if callback is not None:
            if inspect.iscoroutinefunction(callback):
                asyncio.run_coroutine_threadsafe(callback(event), self._private_loop())  # type: ignore[arg-type]
            else:
                try:
                    callback(event)
                except Exception:  # noqa: BLE001 - a failing callback must not stop the reader
                    pass
        for loop, queue in list(self._subscribers):
            try:
                loop.call_soon_threadsafe(queue.put_nowait, event)
            except RuntimeError:
                pass

    # --------------------------------------------------------------- closing

    def close(self, timeout: float = 30.0) -> None:
        """Ends the engine: running scripts are cancelled, its own session (the one it made
        when none was named) closed, its process gone. Sessions made with `session()` stay
        live (they are the state directory's, as `paddock sessions list` shows): end them
        with `Session.close()` or a `with` block."""
        with self._close_lock:
            if self._closed:
                return
            self._send_quietly({"type": "close"})
            self._closed = True
        with self._backend_lock:
            others, self._backend_engines = list(self._backend_engines.values()), {}
        for other in others:
            other.close(timeout)
        try:
            self._stdin.close()
        except OSError:
            pass
        try:
            self._proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._kill()
        # The reader ends at the end of the engine's output; one stuck in a sync tool that does
        # not return is a daemon thread and is not waited for.
        if self._readers:
            self._readers[-1].join(timeout=5)
        self._on_closed("the engine was closed")
        self._monitor.join(timeout=1)
        try:
            self._stdout.close()
        except OSError:
            pass
        for call_id in list(self._host_tasks):
            self._cancel_host_task(call_id)
        self._executor.shutdown(wait=False, cancel_futures=True)
        with self._loop_lock:
            loop, thread = self._own_loop, self._own_loop_thread
            self._own_loop = None
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
            if thread is not None:
                thread.join(timeout=5)
            loop.close()

    async def aclose(self) -> None:
        """`close` without blocking the event loop."""
        await asyncio.get_running_loop().run_in_executor(None, self.close)

    @classmethod
    async def start(cls, *args: Any, **kwargs: Any) -> "Engine":
        """`Engine(...)` without blocking the event loop while `paddock embed` starts (a few
        hundred milliseconds): `async with await paddock.Engine.start(tools=[...]) as engine:`.
        Takes the constructor's arguments."""
        return await asyncio.get_running_loop().run_in_executor(None, lambda: cls(*args, **kwargs))

    def _kill(self) -> None:
        self._closed = True
        if self._proc.poll() is None:
            self._proc.kill()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    async def __aenter__(self) -> "Engine":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    def __del__(self) -> None:
        proc = getattr(self, "_proc", None)
        if proc is not None and proc.poll() is None:
            try:
                proc.stdin.close()  # the engine closes itself at the end of its input
            except Exception:  # noqa: BLE001
                pass
