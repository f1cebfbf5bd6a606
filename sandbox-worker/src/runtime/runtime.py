"""Paddock's script runtime, loaded once in the zygote before it forks.

``_run(source, tools)`` runs one prepared script (see prepare.rs) and returns its outcome as a
tuple the Rust side turns into a wire message. Everything a script could tamper with (builtins,
this module, sys.modules) dies with the child that ran it: every script gets a fresh fork.
"""

import builtins
import sys

import _host
import asyncio
import io as _io
from json import dumps as _dumps


def _no_threads(*args, **kwargs):
    raise RuntimeError(
        "threads are not available: scripts in the Paddock sandbox run on one thread; "
        "use asyncio (e.g. asyncio.gather) to run tool calls concurrently")


def _install_thread_stub():
    """Replaces ``_thread`` by a single-threaded stand-in, before any module below imports it.

    ``warnings``, ``_strptime`` (datetime.strptime), ``reprlib`` and ``functools`` only want its
    locks and ``get_ident``; ``threading`` (and with it ``logging``, ``queue``,
    ``concurrent.futures``) also wants thread handles, which are plain records. Locks and
    handles are the native ones (neither creates a thread); every way of starting a thread
    raises, so ``Thread.start()`` fails with a message that points to asyncio. Below this stub,
    the child's seccomp filter refuses clone() and its rlimits allow no new thread.
    """
    import _thread as native

    stub = type(sys)("_thread")
    stub.__doc__ = "Paddock's single-threaded _thread: locks work, starting a thread raises."
    for attr in ("LockType", "lock", "RLock", "allocate_lock", "allocate", "get_ident", "_local",
                 "TIMEOUT_MAX", "_excepthook", "_ExceptHookArgs", "_ThreadHandle",
                 "_make_thread_handle", "_shutdown"):
        if hasattr(native, attr):
            setattr(stub, attr, getattr(native, attr))
    if not hasattr(stub, "allocate_lock"):
        stub.allocate_lock = stub.LockType
    stub.allocate = stub.allocate_lock
    stub.error = RuntimeError
    main_ident = native.get_ident()
    stub.get_native_id = lambda: 1
    stub._count = lambda: 0
    stub._get_main_thread_ident = lambda: main_ident
    stub._is_main_interpreter = lambda: True
    stub.daemon_threads_allowed = lambda: False

    def stack_size(size=0):
        if size:
            _no_threads()
        return 0

    def exit():  # noqa: A001 - the name _thread gives it
        raise SystemExit

    stub.stack_size = stack_size
    stub.exit = stub.exit_thread = exit
    for attr in ("start_new_thread", "start_new", "start_joinable_thread", "interrupt_main",
                 "_set_sentinel"):
        setattr(stub, attr, _no_threads)
    sys.modules["_thread"] = stub


_install_thread_stub()

# The standard modules scripts commonly import, imported now so a child pays nothing for them.
# The heavy and rarer ones (dataclasses, decimal, fractions, statistics, and _strptime behind
# datetime.strptime) are imported by the scripts that use them, in their own child: preloaded,
# they made the zygote's heap 11 MB larger (every fork copies its page tables and every exit
# tears them down) and its start 30 ms longer, for every script and every start.
import base64, bisect, collections, copy, datetime, enum, functools  # noqa: E401,F401,E402
import hashlib, heapq, itertools, json, math, operator, random, re  # noqa: E401,F401,E402
import string, textwrap, time, typing, warnings  # noqa: E401,F401,E402

_BLOCKED_MODULES = {
    "socket": "network", "_socket": "network", "ssl": "network", "select": "network",
    "selectors": "network", "http": "network", "urllib": "network",
    "subprocess": "processes", "_posixsubprocess": "processes", "multiprocessing": "processes",
    "signal": "signals", "pwd": "users", "grp": "users",
    "ctypes": "native code", "_ctypes": "native code", "mmap": "memory mapping",
    "fcntl": "file descriptors", "resource": "resource limits", "pty": "terminals",
    "termios": "terminals", "shutil": "the file system", "tempfile": "the file system",
    "glob": "the file system",
}


class _SandboxImportBlocker:
    """Refuses, with a reason, modules that would reach the host."""

    # Blocked modules the runtime itself imports while it sets up (pathlib wants glob's matcher).
    allowed_during_setup = set()

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        top = name.partition(".")[0]
        what = _BLOCKED_MODULES.get(top)
        if what and top not in cls.allowed_during_setup:
            raise ModuleNotFoundError(
                f"module {name!r} is not available in the Paddock sandbox (no {what}); "
                "call a tool instead", name=name)
        return None


def _denied_open(*args, **kwargs):
    raise PermissionError(
        "open() is not available: scripts in the Paddock sandbox have no file system; "
        "call a tool instead")


for _blocked in list(_BLOCKED_MODULES):
    if _blocked in sys.modules:
        del sys.modules[_blocked]
sys.meta_path.insert(0, _SandboxImportBlocker)
builtins.open = _denied_open
_io.open = _denied_open


def _no_file_system(what):
    return PermissionError(
        f"{what} is not available: scripts in the Paddock sandbox have no file system; "
        "call a tool instead")


def _confine_pathlib():
    """Imports pathlib with every file-system method of ``Path`` refusing.

    Pure paths (PurePath, PurePosixPath, PureWindowsPath) and path arithmetic on ``Path``
    objects (name, suffix, parent, joinpath, with_suffix, parts, relative_to, match...) are
    PurePath's and keep working. Everything ``Path`` adds to PurePath touches the file system
    (stat, exists, open, iterdir, glob, cwd, home, resolve, absolute...): each raises
    PermissionError. Left alone they would reach the refusing ``os`` stub anyway, but some would
    catch its error and answer as if the file were missing (``exists()`` would say False).
    """
    _SandboxImportBlocker.allowed_during_setup.add("glob")
    try:
        import pathlib
    finally:
        _SandboxImportBlocker.allowed_during_setup.clear()
        sys.modules.pop("glob", None)
    keep = {"__new__", "__init__", "__slots__", "__module__", "__doc__", "__qualname__",
            "__firstlineno__", "__static_attributes__", "__weakref__", "__dict__"}

    def refusing(owner, attr, original):
        label = f"Path.{attr}()" if not isinstance(original, property) else f"Path.{attr}"

        def denied(*args, **kwargs):
            raise _no_file_system(label)

        denied.__name__ = attr
        denied.__qualname__ = f"{owner.__name__}.{attr}"
        if isinstance(original, classmethod):
            return classmethod(denied)
        if isinstance(original, staticmethod):
            return staticmethod(denied)
        if isinstance(original, property):
            return property(denied)
        return denied

    for owner in (pathlib.Path, pathlib.PosixPath, pathlib.WindowsPath):
        for attr, original in list(vars(owner).items()):
            if attr in keep or attr.startswith("__") and not callable(original):
                continue
            setattr(owner, attr, refusing(owner, attr, original))


_confine_pathlib()

_PyCF_ALLOW_TOP_LEVEL_AWAIT = 0x2000
_CO_COROUTINE = 0x80
_INF = float("inf")


class __paddock_return__(BaseException):
    """Raised by a rewritten top-level ``return``; carries the script's result."""

    def __init__(self, value=None):
        super().__init__()
        self.value = value


class _HostStream(_io.TextIOBase):
    """sys.stdout and sys.stderr: every write goes to the engine at once.

    A real text stream (``isinstance(sys.stdout, io.TextIOBase)``), shown as CPython shows its
    own (``<class '_io.TextIOWrapper'>``): code that checks the type of its stream keeps working.
    It writes only, and has no file descriptor and no binary ``buffer``.
    """

    encoding = "utf-8"
    errors = "strict"
    newlines = None
    line_buffering = False
    write_through = True
    name = "<stdout>"
    mode = "w"

    def write(self, text):
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        if self.closed:
            raise ValueError("I/O operation on closed file.")
        if text:
            _host.write(text)
        return len(text)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        if self.closed:
            raise ValueError("I/O operation on closed file.")

    def writable(self):
        return True

    def readable(self):
        return False

    def seekable(self):
        return False

    def isatty(self):
        return False

    def fileno(self):
        raise _io.UnsupportedOperation("the sandbox's output has no file descriptor")

    def __repr__(self):
        return f"<_io.TextIOWrapper name={self.name!r} mode={self.mode!r} encoding='utf-8'>"


_HostStream.__name__ = _HostStream.__qualname__ = "TextIOWrapper"
_HostStream.__module__ = "_io"


class _NoInput(_io.TextIOBase):
    """sys.stdin: a script has no input. Reading gives end of file, as CPython's stdin does when
    it is empty, so ``input()`` raises EOFError."""

    encoding = "utf-8"
    errors = "strict"
    newlines = None
    name = "<stdin>"
    mode = "r"

    def readable(self):
        return True

    def read(self, size=-1):
        return ""

    def readline(self, size=-1):
        return ""

    def isatty(self):
        return False

    def fileno(self):
        raise _io.UnsupportedOperation("the sandbox has no input and no file descriptor")

    def __repr__(self):
        return "<_io.TextIOWrapper name='<stdin>' mode='r' encoding='utf-8'>"


_NoInput.__name__ = _NoInput.__qualname__ = "TextIOWrapper"
_NoInput.__module__ = "_io"
sys.stdin = sys.__stdin__ = _NoInput()
# What `sys.stdout = sys.__stdout__` restores after a redirect: a stream to the same place as
# the one each run installs.
sys.__stdout__ = _HostStream()
sys.__stderr__ = _HostStream()
sys.__stderr__.name = "<stderr>"


_TOOLS = {}
# `tools.<name>` as made once per run: a loop of calls pays for the lookup once.
_TOOL_CALLS = {}


class _Tools:
    """The ``tools`` global: ``await tools.<name>(key=value)`` calls a tool."""

    __slots__ = ()

    def __getattr__(self, name):
        made = _TOOL_CALLS.get(name)
        if made is not None:
            return made
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
        _TOOL_CALLS[name] = call
        return call

    def __dir__(self):
        return sorted(_TOOLS)

    def __repr__(self):
        return "<tools: " + ", ".join(sorted(_TOOLS)) + ">"


# Containers deeper than this become their repr(): the engine's JSON parser stops at 128 levels.
_MAX_RESULT_DEPTH = 100


class _CyclicResult(Exception):
    """Raised inside _jsonable when a container contains itself."""


def _jsonable(value, depth=0):
    """The script's result as JSON-ready data: JSON where it maps naturally, else its repr().

    A result that contains itself (``a = []; a.append(a)``) has no JSON form; CPython's json
    refuses it with "Circular reference detected". It comes back whole as its repr()
    (``[[...]]``), as any other value without a natural JSON form does: a script that has done
    its work, tool calls included, should not fail at the very end because of the shape of its
    return value, and the repr shows where the cycle is.
    """
    try:
        return _to_json(value, depth, set())
    except _CyclicResult:
        return repr(value)


def _to_json(value, depth, path):
    kind = type(value)
    if kind is int:
        # Any size: JSON numbers have no limit, and the engine keeps every digit (serde_json's
        # arbitrary_precision). A host that reads numbers as doubles is documented.
        return value
    if value is None or kind is bool or kind is str:
        return value
    if kind is float:
        if value != value or value in (_INF, -_INF):
            return repr(value)
        return value
    if depth > _MAX_RESULT_DEPTH:
        return repr(value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return _to_json(int(value), depth, path)
    if isinstance(value, float):
        return _to_json(float(value), depth, path)
    if isinstance(value, str):
        return str(value)
    if not isinstance(value, (list, tuple, set, frozenset, dict)):
        return repr(value)
    marker = id(value)
    if marker in path:
        raise _CyclicResult
    path.add(marker)
    try:
        if isinstance(value, (list, tuple)):
            return [_to_json(v, depth + 1, path) for v in value]
        if isinstance(value, (set, frozenset)):
            items = [_to_json(v, depth + 1, path) for v in value]
            try:
                items.sort()
            except TypeError:
                pass
            return items
        out = {}
        for k, v in value.items():
            if isinstance(k, str):
                key = str(k)
            elif k is None or isinstance(k, (bool, int, float)):
                key = _dumps(_to_json(k, depth + 1, path))
            else:
                key = repr(k)
            out[key] = _to_json(v, depth + 1, path)
        return out
    finally:
        path.discard(marker)


# RustPython names Rust's integer types where CPython names C's, e.g. "Python int too large to
# convert to Rust isize" (``len(range(2**64))``, ``'x'.ljust(10**20)``): an uncaught one
# reaches the agent in CPython's words. (A script that catches it still reads RustPython's
# text: the message is made inside the VM, whose exception types cannot be patched.)
_C_INT_NAMES = {
    "isize": "C ssize_t", "usize": "C ssize_t", "i64": "C long", "u64": "C unsigned long",
    "i32": "C int", "u32": "C unsigned int", "i16": "C short", "u16": "C unsigned short",
    "i8": "C char", "u8": "C unsigned char",
}
_RUST_WORDING = re.compile(r"to convert to Rust (\w+)")


def _cpython_wording(message):
    if "Rust" not in message:
        return message
    return _RUST_WORDING.sub(
        lambda m: "to convert to " + _C_INT_NAMES.get(m.group(1), "C ssize_t"), message)


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
        message = _cpython_wording(str(err))
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
    _TOOL_CALLS.clear()
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

