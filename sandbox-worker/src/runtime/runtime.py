"""Paddock's script runtime, loaded once in the zygote before it forks.

``_run(source, tools)`` runs one prepared script (see prepare.rs) and returns its outcome as a
tuple the Rust side turns into a wire message. Everything a script could tamper with (builtins,
this module, sys.modules) dies with the child that ran it: every script gets a fresh fork.
"""

import builtins
import sys

import _host
import asyncio
from json import dumps as _dumps

# The standard modules scripts may import, imported now so a child pays nothing for them.
import base64, bisect, collections, copy, dataclasses, datetime, decimal, enum  # noqa: E401,F401
import fractions, functools, hashlib, heapq, itertools, json, math, operator  # noqa: E401,F401
import random, re, statistics, string, textwrap, time, typing  # noqa: E401,F401

_BLOCKED_MODULES = {
    "socket": "network", "_socket": "network", "ssl": "network", "select": "network",
    "selectors": "network", "http": "network", "urllib": "network",
    "subprocess": "processes", "_posixsubprocess": "processes", "multiprocessing": "processes",
    "threading": "threads", "_thread": "threads", "signal": "signals",
    "ctypes": "native code", "_ctypes": "native code", "mmap": "memory mapping",
    "fcntl": "file descriptors", "resource": "resource limits", "pty": "terminals",
    "termios": "terminals", "shutil": "the file system", "tempfile": "the file system",
    "glob": "the file system", "pathlib": "the file system", "io": None,
}


class _SandboxImportBlocker:
    """Refuses, with a reason, modules that would reach the host."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        what = _BLOCKED_MODULES.get(name.partition(".")[0])
        if what:
            raise ModuleNotFoundError(
                f"module {name!r} is not available in the Paddock sandbox (no {what}); "
                "call a tool instead", name=name)
        return None


def _denied_open(*args, **kwargs):
    raise PermissionError(
        "open() is not available: scripts in the Paddock sandbox have no file system; "
        "call a tool instead")


for _blocked in list(_BLOCKED_MODULES):
    if _BLOCKED_MODULES[_blocked] and _blocked in sys.modules:
        del sys.modules[_blocked]
sys.meta_path.insert(0, _SandboxImportBlocker)
builtins.open = _denied_open
try:
    import io as _io
    _io.open = _denied_open
except ImportError:
    pass

_PyCF_ALLOW_TOP_LEVEL_AWAIT = 0x2000
_CO_COROUTINE = 0x80
_INF = float("inf")


class __paddock_return__(BaseException):
    """Raised by a rewritten top-level ``return``; carries the script's result."""

    def __init__(self, value=None):
        super().__init__()
        self.value = value


class _HostStream:
    """sys.stdout and sys.stderr: every write goes to the engine at once."""

    encoding = "utf-8"
    errors = "strict"

    def write(self, text):
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        if text:
            _host.write(text)
        return len(text)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        pass

    def isatty(self):
        return False

    def fileno(self):
        raise OSError("the sandbox's output has no file descriptor")


_TOOLS = {}


class _Tools:
    """The ``tools`` global: ``await tools.<name>(key=value)`` calls a tool."""

    __slots__ = ()

    def __getattr__(self, name):
        tool = _TOOLS.get(name)
        if tool is None:
            if name.startswith("__"):
                raise AttributeError(name)
            err = AttributeError(f"there is no tool named {name!r}")
            err.paddock_unknown_tool = name
            raise err

        def call(*args, **kwargs):
            if args:
                raise TypeError(
                    f"tools.{name}() takes keyword arguments only, e.g. tools.{name}(key=value)")
            return asyncio.get_event_loop()._call_tool(tool, kwargs)

        call.__name__ = name
        call.__qualname__ = f"tools.{name}"
        return call

    def __dir__(self):
        return sorted(_TOOLS)

    def __repr__(self):
        return "<tools: " + ", ".join(sorted(_TOOLS)) + ">"


def _jsonable(value, depth=0):
    kind = type(value)
    if kind is int:
        # Beyond 64 bits JSON consumers lose precision: such ints travel as their digits.
        return value if -(1 << 63) <= value < (1 << 64) else str(value)
    if value is None or kind is bool or kind is str:
        return value
    if kind is float:
        if value != value or value in (_INF, -_INF):
            return repr(value)
        return value
    if depth > 100:
        return repr(value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return _jsonable(int(value), depth)
    if isinstance(value, float):
        return _jsonable(float(value), depth)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, depth + 1) for v in value]
    if isinstance(value, (set, frozenset)):
        items = [_jsonable(v, depth + 1) for v in value]
        try:
            items.sort()
        except TypeError:
            pass
        return items
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if isinstance(k, str):
                key = str(k)
            elif k is None or isinstance(k, (bool, int, float)):
                key = _dumps(_jsonable(k, depth + 1))
            else:
                key = repr(k)
            out[key] = _jsonable(v, depth + 1)
        return out
    return repr(value)


def _failure(err, source, error_code=None):
    """Describes an uncaught exception: (type, message, line, traceback, code, unknown tool)."""
    lines = source.splitlines()
    frames = []
    line = None
    tb = err.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_filename == "<script>":
            line = tb.tb_lineno
            text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
            where = "<module>" if code.co_name == "<module>" else code.co_name
            frames.append(f"  line {line}, in {where}\n    {text}")
        tb = tb.tb_next
    if isinstance(err, SyntaxError):
        line = err.lineno
        message = err.msg
    else:
        message = str(err)
    if error_code is None:
        if isinstance(err, MemoryError):
            error_code = "codemode:memory_limit"
        elif isinstance(err, PermissionError) and \
                getattr(err, "paddock_error_code", None) == "tool_approval:denied":
            error_code = "tool_approval:denied"
    trace = "Traceback (most recent call last):\n" + "\n".join(frames) if frames else ""
    return (type(err).__name__, message, line, trace, error_code,
            getattr(err, "paddock_unknown_tool", None))


# The namespace of a notebook session: one per child, so one per session (the engine never
# gives a notebook child to another session).
_NOTEBOOK_SCOPE = None


def _script_scope(keep_state):
    """A fresh namespace, or the notebook's, with the names the runtime provides reset."""
    global _NOTEBOOK_SCOPE
    if not keep_state:
        scope = {"__name__": "__main__", "__builtins__": builtins}
    else:
        if _NOTEBOOK_SCOPE is None:
            _NOTEBOOK_SCOPE = {"__name__": "__main__", "__builtins__": builtins}
        scope = _NOTEBOOK_SCOPE
        scope.pop("__paddock_result__", None)
    scope["tools"] = _Tools()
    scope["__paddock_return__"] = __paddock_return__
    return scope


def _run(source, tools, original=None, keep_state=False):
    """Runs one script. Returns (True, result_json) or (False, failure tuple)."""
    try:
        return _run_script(source, tools, original, keep_state)
    except BaseException as err:  # noqa: B036 - e.g. a MemoryError landing between two steps
        return (False, _failure(err, original or source))


def _run_script(source, tools, original, keep_state):
    _TOOLS.clear()
    _TOOLS.update(tools)
    if _NOTEBOOK_SCOPE is None:
        # Every child starts from the zygote's copy of `random`: reseed from the kernel (a
        # notebook once: later scripts continue its sequence).
        random.seed(int.from_bytes(_host.urandom(32), "big"))
    sys.stdout = sys.stderr = _HostStream()
    scope = _script_scope(keep_state)
    try:
        code = compile(source, "<script>", "exec", flags=_PyCF_ALLOW_TOP_LEVEL_AWAIT,
                       dont_inherit=True)
    except SyntaxError as err:
        return (False, _failure(err, original or source, "codemode:syntax_error"))
    try:
        if code.co_flags & _CO_COROUTINE:
            asyncio.get_event_loop().run_until_complete(eval(code, scope))
        else:
            exec(code, scope)
        value = scope.get("__paddock_result__")
    except __paddock_return__ as ret:
        value = ret.value
    except BaseException as err:  # noqa: B036 - everything the script raises is reported
        return (False, _failure(err, original or source))
    try:
        return (True, _dumps(_jsonable(value)))
    except BaseException as err:  # noqa: B036
        return (False, _failure(err, source))


def _warm_up():
    """Runs representative scripts so the zygote's caches are hot before it forks."""
    for _ in range(3):
        _TOOLS.clear()
        scope = {"__builtins__": builtins}
        exec(compile("import json\nx = [i * i for i in range(200)]\nd = json.dumps({'x': x})\n"
                     "async def f(i):\n    await asyncio.sleep(0)\n    return i\n",
                     "<warmup>", "exec"), scope)
        scope["asyncio"] = asyncio
        asyncio.get_event_loop().run_until_complete(
            asyncio.gather(*[scope["f"](i) for i in range(10)]))
    _jsonable({"a": [1, 2.5, None, (1, 2)], 3: {4}})


def _prefault():
    """Takes the path of a script run without a script (no output, no tool calls)."""
    _run("x = {'a': [1, 2.5, 'b']}\nx", {}, None)
    _TOOLS.clear()
