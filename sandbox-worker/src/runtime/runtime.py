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

# What the runtime itself uses.
import json, math, random, re  # noqa: E401,F401,E402

# The standard modules scripts commonly import. The zygote imports them (`_preload_next`) when
# it is idle after its first fork, so that later children pay nothing for them, while the first
# script of a cold engine does not wait for modules it may not use (about 35 ms here, typing
# and enum the most). A child forked before imports what its script asks for, as any child
# does for the heavy and rarer modules (dataclasses, decimal, fractions, statistics, and
# _strptime behind datetime.strptime), never preloaded: they made the zygote's heap 11 MB
# larger (every fork copies its page tables and every exit tears them down).
_PRELOADED = ("base64", "bisect", "collections", "copy", "datetime", "enum", "functools",
              "hashlib", "heapq", "itertools", "operator", "string", "textwrap", "time",
              "typing", "warnings")


def _preload_next():
    """Imports the next module of `_PRELOADED` not imported yet; False once all are. One at a
    time: a fork asked for meanwhile waits for one import (typing's 9 ms at most), not all."""
    for name in _PRELOADED:
        if name not in sys.modules:
            __import__(name)
            return True
    return False

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
# Python identifier -> the tool's parameter names in its schema's order (positional calls).
_TOOL_PARAMETERS = {}
# `tools.<name>` as made once per run: a loop of calls pays for the lookup once.
_TOOL_CALLS = {}


def _bind(name, args, kwargs):
    """A tool call's arguments object: positional arguments take the tool's parameters in the
    order of its JSON schema (as CodeAct-style code, ``lookup("paris")``, assumes)."""
    if not args:
        return kwargs
    names = _TOOL_PARAMETERS.get(name, ())
    if len(args) > len(names):
        listed = ", ".join(names) if names else "none"
        raise TypeError(
            f"{name}() takes at most {len(names)} positional argument(s) but {len(args)} were "
            f"given (its parameters, in order: {listed}); e.g. {name}(key=value)")
    bound = dict(zip(names, args))
    for key in kwargs:
        if key in bound:
            raise TypeError(f"{name}() got multiple values for argument {key!r}")
    bound.update(kwargs)
    return bound


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
            return asyncio.get_event_loop()._call_tool(tool, _bind(name, args, kwargs))

        call.__name__ = name
        call.__qualname__ = f"tools.{name}"
        _TOOL_CALLS[name] = call
        return call

    def __dir__(self):
        return sorted(_TOOLS)

    def __repr__(self):
        return "<tools: " + ", ".join(sorted(_TOOLS)) + ">"


def _call_now(name, args, kwargs):
    """A tool called as a plain function (CodeAct style): waits for its answer and returns it,
    answers to other calls in flight going to their futures meanwhile."""
    loop = asyncio.get_event_loop()
    future = loop._call_tool(_TOOLS[name], _bind(name, args, kwargs))
    while not future.done():
        loop._deliver(_host.wait(None))
    return future.result()


# Plain-function tools made so far: they look their tool up when called, so a notebook's next
# script reuses them.
_PLAIN_TOOLS = {}


def _plain_tool(name):
    made = _PLAIN_TOOLS.get(name)
    if made is not None:
        return made

    def call(*args, **kwargs):
        if name not in _TOOLS:
            raise NameError(f"tool {name!r} is not available to this script")
        return _call_now(name, args, kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"Calls tool {name!r} and returns its answer (same as `await tools.{name}(...)`)."
    call.__paddock_tool__ = True
    _PLAIN_TOOLS[name] = call
    return call


class __paddock_final_answer__(BaseException):
    """Raised by ``final_answer(value)``: the script ends with ``value`` as its result."""

    def __init__(self, value=None):
        super().__init__()
        self.value = value


def final_answer(*args, **kwargs):
    """Ends the script with its argument as the final answer (``final_answer(value)`` or
    ``final_answer(answer=value)``). When there is a tool named ``final_answer``, it is called
    first with the same arguments and its return value is the answer."""
    if "final_answer" in _TOOLS:
        raise __paddock_final_answer__(_call_now("final_answer", args, kwargs))
    if len(args) + len(kwargs) > 1 or (kwargs and "answer" not in kwargs):
        raise TypeError("final_answer() takes one argument, the answer: final_answer(value)")
    raise __paddock_final_answer__(args[0] if args else kwargs.get("answer"))


final_answer.__paddock_tool__ = True
# Names a tool must not take as a plain function: the runtime's own, and every builtin (a tool
# named `print` or `len` is `tools.print` only).
_NOT_PLAIN = frozenset(dir(builtins)) | {"tools", "final_answer", "asyncio"}


def _install_plain_tools(scope):
    """Every tool as a plain function in the script's namespace, where that shadows nothing: a
    builtin keeps its name, and so does a notebook's own variable of that name."""
    for name in _TOOLS:
        if name in _NOT_PLAIN:
            continue
        current = scope.get(name)
        if current is None or getattr(current, "__paddock_tool__", False):
            scope[name] = _plain_tool(name)
    current = scope.get("final_answer")
    if current is None or getattr(current, "__paddock_tool__", False):
        scope["final_answer"] = final_answer


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


# The message of an uncaught exception reaches the agent in CPython's words where RustPython
# words it its own way: models learned CPython's messages and read the others worse. The words
# are CPython 3.14's, the current release's (3.11 says "unhashable type: 'list'" for a dict key,
# "3 is not in list" for list.index and "math domain error" for every math function). A script
# that catches the exception still reads RustPython's text: the message is made inside the VM,
# whose exception types cannot be patched. Some of RustPython's messages lack what CPython's
# name (a method's type, the format specifier, a math function's argument): those are read from
# the failing line and the values its frame holds, without running any of the script's code
# again, and a message the line does not settle stays RustPython's.

# RustPython names Rust's integer types where CPython names C's, e.g. "Python int too large to
# convert to Rust isize" (``len(range(2**64))``, ``'x'.ljust(10**20)``).
_C_INT_NAMES = {
    "isize": "C ssize_t", "usize": "C ssize_t", "i64": "C long", "u64": "C unsigned long",
    "i32": "C int", "u32": "C unsigned int", "i16": "C short", "u16": "C unsigned short",
    "i8": "C char", "u8": "C unsigned char",
}
_RUST_WORDING = re.compile(r"to convert to Rust (\w+)")

# CPython's METH_O functions ("len() takes exactly one argument (2 given)") and METH_NOARGS ones
# ("dict.keys() takes no arguments (1 given)"), by the owner CPython's message names; RustPython
# says "len expected 1 argument, got 2" for both kinds and for CPython's _PyArg_CheckPositional
# ones ("sorted expected 1 argument, got 0"), which keep those words.
_ONE_ARGUMENT = {
    "": "abs aiter all any ascii bin callable chr hash hex id len oct ord repr",
    "math.": "acos acosh asin asinh atan atanh cbrt ceil cos cosh degrees erf erfc exp exp2 "
             "expm1 fabs factorial floor frexp fsum gamma isfinite isinf isnan isqrt lgamma "
             "log10 log1p log2 modf radians sin sinh sqrt tan tanh trunc ulp",
    "list.": "append count extend remove",
    "tuple.": "count",
    "set.": "add discard isdisjoint issubset issuperset remove symmetric_difference "
            "symmetric_difference_update",
    "frozenset.": "isdisjoint issubset issuperset symmetric_difference",
    "str.": "format_map join partition removeprefix removesuffix rpartition translate zfill",
    "bytes.": "fromhex join partition removeprefix removesuffix rpartition zfill",
    "bytearray.": "append extend fromhex join partition remove removeprefix removesuffix "
                  "rpartition zfill",
    "float.": "fromhex",
}
_CASE_METHODS = "capitalize isalnum isalpha isascii isdigit islower isspace istitle isupper " \
                "lower swapcase title upper"
_NO_ARGUMENTS = {
    "": "globals locals",
    "list.": "clear copy reverse",
    "dict.": "clear copy items keys popitem values",
    "set.": "clear copy pop",
    "frozenset.": "copy",
    "str.": _CASE_METHODS + " casefold isdecimal isidentifier isnumeric isprintable",
    "bytes.": _CASE_METHODS,
    "bytearray.": _CASE_METHODS + " clear copy reverse",
    "int.": "as_integer_ratio bit_count bit_length conjugate is_integer",
    "float.": "as_integer_ratio conjugate hex is_integer",
}
# Math functions RustPython still answers with "math domain error": CPython 3.14's words (its
# Modules/mathmodule.c) and the domain, so that only an argument outside it is named.
_MATH_DOMAIN = {
    "acosh": ("expected argument value not less than 1, got ", lambda x: x < 1),
    "log1p": ("expected argument value > -1, got ", lambda x: x <= -1),
    "lgamma": ("expected a noninteger or positive integer, got ",
               lambda x: math.isfinite(x) and x <= 0 and x == int(x)),
}
_MISSING = object()
_MATH_WORDS = ("expected a nonnegative input", "expected a positive input",
               "expected a finite input", "expected a number in range from -1 up to 1",
               "expected a number between -1 and 1", "expected a noninteger or positive integer")


def _cpython_wording(err, where):
    """CPython's words for the message of `err`; `where` is (frame, source line) of the
    innermost frame when that is the script's, else None."""
    message = str(err)
    try:
        if "Rust" in message:
            message = _RUST_WORDING.sub(
                lambda m: "to convert to " + _C_INT_NAMES.get(m.group(1), "C ssize_t"), message)
        kind = type(err).__name__
        for name, hint, pattern, words in _ROWS:
            # `re` compiles a row's pattern (RustPython takes about a millisecond) the first
            # time a message holds its hint, and caches it.
            match = re.fullmatch(pattern, message) if name == kind and hint in message else None
            if match is not None:
                words = match.expand(words) if isinstance(words, str) else words(match, where)
                return message if words is None else words
    except Exception:  # noqa: BLE001 - a script may have broken anything: keep the message
        pass
    return message


# Reading the failing line: plain string scanning, no more patterns to compile.

def _line_of(where):
    """The failing line of the script, unless it builds the exception itself (`raise X(...)`)
    or is too long to read quickly (the scans below are not all linear)."""
    if where is None or len(where[1]) > 1000:
        return None
    words = where[1].strip()
    if words.startswith("raise") and words[5:6].isspace():
        rest = words[5:].strip()
        end = 0
        while end < len(rest) and (rest[end].isalnum() or rest[end] in "_."):
            end += 1
        if end and rest[end:].lstrip().startswith("("):
            return None
    return where[1]


def _reads_the_line(fix):
    """For a fix that reads the failing line: `fix(match, line, frame, masked)` gets the line,
    the frame it ran in and the line with its strings masked, and is not asked (no rewording)
    when the line cannot be read."""
    def reworded(match, where):
        line = _line_of(where)
        if line is None:
            return None
        return fix(match, line, where[0], _masked(line))
    return reworded


def _strings(line):
    """(start, end, prefix, body start, body end) of each string literal of `line`."""
    i, n = 0, len(line)
    while i < n:
        ch = line[i]
        if ch == "#":
            return
        if ch not in "'\"":
            i += 1
            continue
        quote = line[i:i + 3] if line[i:i + 3] in ("'''", '"""') else ch
        start = i
        while start > 0 and i - start < 2 and line[start - 1] in "rRbBuUfF":
            start -= 1
        if start > 0 and (line[start - 1].isalnum() or line[start - 1] == "_"):
            start = i
        end = i + len(quote)
        while end < n and not line.startswith(quote, end):
            end += 2 if line[end] == "\\" else 1
        if end >= n:
            return  # it goes on past this line
        yield start, end + len(quote), line[start:i], i + len(quote), end
        i = end + len(quote)


def _masked(line):
    """`line` with the body of each string literal (and a comment) blanked, so their brackets,
    commas and words do not count."""
    chars, last = list(line), 0
    for _, end, _, body, body_end in _strings(line):
        chars[body:body_end] = "\0" * (body_end - body)
        last = end
    comment = line.find("#", last)
    if comment >= 0:
        chars[comment:] = "\0" * (len(line) - comment)
    return "".join(chars)


def _words(masked):
    """(start, end) of each identifier or keyword of `masked`."""
    i, n = 0, len(masked)
    while i < n:
        if masked[i].isalpha() or masked[i] == "_" or masked[i].isdigit():
            j = i + 1
            while j < n and (masked[j].isalnum() or masked[j] == "_"):
                j += 1
            if not masked[i].isdigit():
                yield i, j
            i = j
        else:
            i += 1


def _calls(masked, names):
    """(index of the `.` before it or -1, name, index of `(`) of each call of `names`."""
    for start, end in _words(masked):
        name = masked[start:end]
        paren = end
        while paren < len(masked) and masked[paren] in " \t":
            paren += 1
        if name not in names or masked[paren:paren + 1] != "(":
            continue
        dot = start
        while dot > 0 and masked[dot - 1] in " \t":
            dot -= 1
        yield (dot - 1 if dot and masked[dot - 1] == "." else -1), name, paren


def _closing(text, start):
    """The index of the bracket that closes the one at `start`, or -1."""
    return _balancing(text, range(start, len(text)), "([{", ")]}")


def _opening(text, end):
    """The index of the bracket that opens the one that closes at `end`, or -1."""
    return _balancing(text, range(end, -1, -1), ")]}", "([{")


def _balancing(text, indices, deeper, shallower):
    """The first of `indices` where the brackets met since the first one balance, or -1."""
    depth = 0
    for i in indices:
        if text[i] in deeper:
            depth += 1
        elif text[i] in shallower:
            depth -= 1
            if depth == 0:
                return i
    return -1


def _top_level(text, start, end, sep):
    """The spans of text[start:end] between the separators `sep` outside brackets."""
    spans, depth, begin = [], 0, start
    for i in range(start, end):
        if text[i] in "([{":
            depth += 1
        elif text[i] in ")]}":
            depth -= 1
        elif text[i] == sep and depth == 0:
            spans.append((begin, i))
            begin = i + 1
    spans.append((begin, end))
    return spans


def _arguments(masked, paren):
    """The spans of the arguments of the call whose `(` is at `paren`."""
    end = _closing(masked, paren)
    if end < 0:
        return []
    return [(a, b) for a, b in _top_level(masked, paren + 1, end, ",") if masked[a:b].strip()]


def _keyword_argument(text):
    """(name, value) of a `name=value` argument, else None."""
    name, equals, value = text.partition("=")
    if equals and name.strip().isidentifier() and not value.startswith("="):
        return name.strip(), value
    return None


def _value_of(text, frame):
    """The value of a literal, or of a (dotted) name in `frame`, running none of the script's
    code (no attribute lookup, only dictionaries): _MISSING when neither."""
    text = text.strip()
    parts = [part.strip() for part in text.split(".")]
    if all(part.isidentifier() for part in parts) and text not in ("None", "True", "False"):
        for scope in (frame.f_locals, frame.f_globals, builtins.__dict__):
            if parts[0] in scope:
                value = scope[parts[0]]
                break
        else:
            return _MISSING
        for attr in parts[1:]:
            try:
                names = object.__getattribute__(value, "__dict__")
            except Exception:  # noqa: BLE001 - no instance dictionary
                return _MISSING
            if type(names) is not dict or attr not in names:
                return _MISSING
            value = names[attr]
        return value
    try:
        return _literal(text)
    except Exception:  # noqa: BLE001 - not a literal
        return _MISSING


def _literal(text):
    """The value of a literal of numbers, strings without escapes, None, True and False, and
    lists, tuples, sets and dicts of them: what ast.literal_eval reads, but ast takes several
    milliseconds to import. Raises ValueError for anything else."""
    text = text.strip()
    if text in ("None", "True", "False"):
        return {"None": None, "True": True, "False": False}[text]
    if text[:1] in ("+", "-"):
        value = _literal(text[1:])
        if type(value) not in (int, float, complex):
            raise ValueError(text)
        return -value if text[0] == "-" else value
    masked = _masked(text)
    if text[:1] in ("[", "(", "{") and _closing(masked, 0) == len(text) - 1:
        items = _top_level(masked, 1, len(text) - 1, ",")
        if items and not masked[items[-1][0]:items[-1][1]].strip():
            items.pop()  # a trailing comma
        pairs = [_top_level(masked, a, b, ":") for a, b in items]
        if text[0] == "{" and items and all(len(pair) == 2 for pair in pairs):
            return {_literal(text[k[0]:k[1]]): _literal(text[v[0]:v[1]]) for k, v in pairs}
        values = [_literal(text[a:b]) for a, b in items]
        if text[0] == "[":
            return values
        if text[0] == "{":
            return set(values) if values else {}
        if len(values) == 1 and "," not in masked[items[0][1]:]:
            return values[0]  # parentheses, not a tuple
        return tuple(values)
    if text[:1].isdigit() or text[:2].startswith(".") and text[1:2].isdigit():
        if text[-1] in "jJ":
            return complex(text)
        try:
            return int(text, 0)
        except ValueError:
            return float(text)
    parts, end = [], 0
    for start, stop, prefix, body, body_end in _strings(text):
        if text[end:start].strip() or "\\" in text[body:body_end] or "f" in prefix.lower():
            raise ValueError(text)
        parts.append((prefix, text[body:body_end]))
        end = stop
    if not parts or text[end:].strip():
        raise ValueError(text)
    if any("b" in prefix.lower() for prefix, _ in parts):
        return "".join(body for _, body in parts).encode()
    return "".join(body for _, body in parts)


def _receiver(line, masked, dot, frame):
    """The value of what the `.` at `dot` follows, when that is a literal or a name."""
    end = dot
    while end > 0 and masked[end - 1] in " \t":
        end -= 1
    last = masked[end - 1] if end else ""
    if last in (")", "]", "}"):
        start = _opening(masked, end - 1)
    elif last in ("'", '"'):
        start = next((s for s, e, _, _, _ in _strings(line) if e == end), -1)
    else:
        start = end
        while start > 0 and (masked[start - 1].isalnum() or masked[start - 1] in "_."):
            start -= 1
    if start < 0 or start == end:
        return _MISSING
    before = masked[start - 1] if start else ""
    if before.isalnum() or before in ("_", ".", ")", "]", "}", "'", '"'):
        return _MISSING  # the result of a call or a subscript, or an attribute of one
    return _value_of(line[start:end], frame)


def _math_calls(line, masked, frame, names):
    """(name, argument spans) of each call of the math functions `names` on the line, as
    `math.name(...)` or as `name(...)` imported from math."""
    for dot, name, paren in _calls(masked, names):
        if dot >= 0:
            function = _receiver(line, masked, dot, frame)
            function = getattr(function, name, None) if function is math else None
        else:
            function = _value_of(name, frame)
        if function is getattr(math, name):
            yield name, _arguments(masked, paren)


# What the rows' functions read from the line.

def _owner(name, owners, where):
    """The owner CPython's message names (the function's module or the method's type) of the
    function `name` the failing line calls, if it is one of `owners`, and whether the call
    passes a keyword; when the line does not tell, the only owner the tables know."""
    found, keyword = set(), False
    line = _line_of(where)
    if line is not None:
        frame, masked = where[0], _masked(line)
        for dot, _, paren in _calls(masked, (name,)):
            value = _receiver(line, masked, dot, frame) if dot >= 0 else _value_of(name, frame)
            if value is _MISSING:
                continue
            if dot >= 0 and value is not math:
                owner = None
                for cls in type(value).__mro__:
                    if cls.__module__ == "builtins" and cls.__name__ + "." in owners:
                        owner = cls.__name__ + "."
                        break
            elif value is math or value is getattr(math, name, None):
                owner = "math."
            else:
                owner = "" if value is builtins.__dict__.get(name) else None
            found.add(owner)
            keyword = keyword or any(_keyword_argument(masked[a:b])
                                     for a, b in _arguments(masked, paren))
    if not found and len(owners) == 1:
        found.add(owners[0])
    owner = found.pop() if len(found) == 1 else None
    return (owner if owner in owners else None), keyword


def _arity(match, where):
    name, one, given = match.group(1), match.group(2) == "1 argument", match.group(3)
    table = _ONE_ARGUMENT if one else _NO_ARGUMENTS
    owner, keyword = _owner(name, [o for o, names in table.items() if name in names.split()],
                            where)
    if owner is None:
        return None
    if keyword:
        return f"{owner}{name}() takes no keyword arguments"
    if one:
        return f"{owner}{name}() takes exactly one argument ({given} given)"
    return f"{owner}{name}() takes no arguments ({given} given)"


def _keyword(match, where):
    """CPython's METH_O and METH_NOARGS functions refuse every keyword alike."""
    name = match.group(1)
    owners = [o for table in (_ONE_ARGUMENT, _NO_ARGUMENTS) for o, names in table.items()
              if name in names.split()]
    owner = _owner(name, sorted(set(owners)), where)[0]
    return None if owner is None else f"{owner}{name}() takes no keyword arguments"


def _unhashable(value, depth=0):
    if isinstance(value, tuple) and type(value).__hash__ is tuple.__hash__:
        return depth < 50 and any(_unhashable(v, depth + 1) for v in tuple.__iter__(value))
    return getattr(type(value), "__hash__", None) is None


@_reads_the_line
def _dict_key(match, line, frame, masked):
    """CPython 3.14 names the key a dict could not hash, RustPython only what failed inside it
    (as hash() and CPython up to 3.13 do). A dict it is when the failing line indexes, builds
    or queries one with a key that is not known to hash, and does not call hash()."""
    if any(dot < 0 for dot, _, _ in _calls(masked, ("hash",))):
        return None
    keys = []  # the texts of the keys the line uses
    for i, ch in enumerate(masked):
        if ch == "[" and i and (masked[i - 1].isalnum() or masked[i - 1] in "_)]}"):
            end = _closing(masked, i)
            if end > 0:
                keys.append(line[i + 1:end])
        elif ch == "{":
            end = _closing(masked, i)
            for a, b in _top_level(masked, i + 1, end, ",") if end > 0 else []:
                pair = _top_level(masked, a, b, ":")
                if len(pair) > 1:
                    keys.append(line[pair[0][0]:pair[0][1]])
    for dot, _, paren in _calls(masked, ("get", "setdefault", "pop")):
        args = _arguments(masked, paren) if dot >= 0 else []
        if args:
            keys.append(line[args[0][0]:args[0][1]])
    words = [masked[a:b] for a, b in _words(masked)]
    if words.count("in") > words.count("for"):
        keys.append("")  # a membership test: its key is not read
    inner = outer = match.group(1)
    possible = False
    for key in keys:
        value = _value_of(key, frame) if key else _MISSING
        if value is _MISSING:
            possible = True
        elif _unhashable(value):
            cls = type(value)
            outer = cls.__qualname__ if cls.__module__ in ("builtins", "__main__") else \
                f"{cls.__module__}.{cls.__qualname__}"
            possible = True
            break
    if not possible:
        return None
    return f"cannot use '{outer}' as a dict key (unhashable type: '{inner}')"


@_reads_the_line
def _not_in_list(match, line, frame, masked):
    """RustPython words list.index and list.remove alike: the line tells which it was."""
    called = {name for dot, name, _ in _calls(masked, ("index", "remove")) if dot >= 0}
    if len(called) != 1:
        return None
    return f"list.{called.pop()}(x): x not in list"


@_reads_the_line
def _math_domain(match, line, frame, masked):
    """The math function and its argument, read from the failing line."""
    found = set()
    for name, args in _math_calls(line, masked, frame, _MATH_DOMAIN):
        x = _value_of(line[args[0][0]:args[0][1]], frame) if len(args) == 1 else _MISSING
        if not isinstance(x, (int, float)):
            continue
        try:
            x = float(x)
        except OverflowError:
            continue
        words, outside = _MATH_DOMAIN[name]
        if outside(x):
            found.add(words + repr(x))
    return found.pop() if len(found) == 1 else None


def _log_input(match, where):
    """RustPython checks math.log's base before its argument, as a float: CPython the argument
    first, and names no value for an int."""
    words = "expected a positive input, got " + repr(float(match.group(1)))
    line = _line_of(where)
    if line is None:
        return words
    frame, masked = where[0], _masked(line)
    found = set()
    for _, args in _math_calls(line, masked, frame, ("log", "log2", "log10")):
        for a, b in args:
            x = _value_of(line[a:b], frame)
            if not isinstance(x, (int, float)):
                break
            if not x > 0 and x == x:
                found.add("expected a positive input" if isinstance(x, int) else
                          "expected a positive input, got " + repr(float(x)))
                break
    return found.pop() if len(found) == 1 else words


def _float_repr(match, where):
    """RustPython prints a math function's argument with Rust's Display ("-1e20" as
    "-100000000000000000000.0"), CPython with repr()."""
    if match.group(1)[:-len(", got ")] not in _MATH_WORDS:
        return None
    return match.group(1) + repr(float(match.group(2)))


def _format_fields(body):
    """(expression or field name, conversion ("r", "s", "a" or ""), spec) of each replacement
    field of the body of a format string or an f-string."""
    i = 0
    while i < len(body):
        if body[i:i + 2] in ("{{", "}}"):
            i += 2
            continue
        if body[i] != "{":
            i += 1
            continue
        end = _closing(body, i)
        if end < 0:
            return
        head, spec = body[i + 1:end], ""
        parts = _top_level(body, i + 1, end, ":")
        if len(parts) > 1:
            head, spec = body[parts[0][0]:parts[0][1]], body[parts[1][0]:end]
        conversion = head.rstrip()[-1] if head.rstrip()[-2:] in ("!r", "!s", "!a") else ""
        yield (head.rstrip()[:-2] if conversion else head).strip(), conversion, spec
        i = end + 1


@_reads_the_line
def _format_spec(match, line, frame, masked):
    """RustPython names neither the specifier nor the type: the failing line's format() calls,
    f-strings and str.format calls are tried again with the ints, floats and strs they name."""
    tried = []  # (expression, conversion, spec)
    for dot, _, paren in _calls(masked, ("format",)):
        args = _arguments(masked, paren)
        if dot < 0 and len(args) == 2:
            spec = _value_of(line[args[1][0]:args[1][1]], frame)
            if isinstance(spec, str):
                tried.append((line[args[0][0]:args[0][1]], "", spec))
    for _, end, prefix, body, body_end in _strings(line):
        if "f" in prefix.lower():
            tried += _format_fields(line[body:body_end])
            continue
        calls = [paren for dot, _, paren in _calls(masked, ("format",))
                 if dot >= 0 and not masked[end:dot].strip()]
        if not calls:
            continue
        positional, named = [], {}
        for a, b in _arguments(masked, calls[0]):
            keyword = _keyword_argument(line[a:b])
            if keyword:
                named[keyword[0]] = keyword[1]
            else:
                positional.append(line[a:b])
        auto = 0
        for name, conversion, spec in _format_fields(line[body:body_end]):
            if name == "":
                name, auto = str(auto), auto + 1
            if name.isdigit() and int(name) < len(positional):
                tried.append((positional[int(name)], conversion, spec))
            elif name in named:
                tried.append((named[name], conversion, spec))
    found = set()
    for expr, conversion, spec in tried:
        value = _value_of(expr, frame)
        if "{" in spec or type(value) not in (int, float, str, bool, complex):
            continue
        if conversion:
            value = {"r": repr, "s": str, "a": ascii}[conversion](value)
        try:
            format(value, spec)
        except ValueError as err:
            if str(err).startswith("Invalid format specifier"):
                found.add(f"Invalid format specifier '{spec}' for object of type "
                          f"'{type(value).__name__}'")
    return found.pop() if len(found) == 1 else None


# The table: (exception type, a text the message holds, the pattern of the whole message, and
# CPython's words, or a function of the match and `where` that gives them or None).
_ROWS = (
    ("TypeError", " expected ", r"(\w+) expected (0 arguments|1 argument), got (\d+)", _arity),
    ("TypeError", "unexpected keyword", r"(\w+)\(\) got an unexpected keyword argument '\w+'",
     _keyword),
    ("TypeError", "unhashable", r"unhashable type: '([^']*)'", _dict_key),
    ("TypeError", "Cannot add list", r"Cannot add list and (\w+)",
     r'can only concatenate list (not "\1") to list'),
    ("TypeError", "concatenate", r"can only concatenate (\w+) \(not '(\w+)'\) to \1",
     r'can only concatenate \1 (not "\2") to \1'),
    ("TypeError", "deriving from BaseException",
     r"exceptions must be classes or instances deriving from BaseException, not \w+",
     "exceptions must derive from BaseException"),
    ("ValueError", "is not in list", r"(?s)'.*' is not in list", _not_in_list),
    ("ValueError", "math domain", r"math domain error", _math_domain),
    ("ValueError", "positive input, got", r"expected a positive input, got (\S+)", _log_input),
    ("ValueError", ", got ", r"(expected .+, got )(-?\d+\.\d+)", _float_repr),
    ("ValueError", "Invalid format", r"Invalid format specifier", _format_spec),
    ("UnboundLocalError", "referenced before",
     r"local variable '(\w+)' referenced before assignment",
     r"cannot access local variable '\1' where it is not associated with a value"),
    ("RecursionError", "recursion depth", r"maximum recursion depth exceeded ",
     "maximum recursion depth exceeded"),
)


def _failure(err, source, error_code=None):
    """Describes an uncaught exception: (type, message, line, traceback, code, unknown tool)."""
    lines = source.splitlines()
    frames = []
    line = None
    innermost = None
    tb = err.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_filename == "<script>":
            line = tb.tb_lineno
            text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
            where = "<module>" if code.co_name == "<module>" else code.co_name
            frames.append(f"  line {line}, in {where}\n    {text}")
        innermost = tb
        tb = tb.tb_next
    if isinstance(err, SyntaxError):
        line = err.lineno
        message = err.msg
    else:
        where = None
        if innermost is not None and innermost.tb_frame.f_code.co_filename == "<script>" \
                and 0 < innermost.tb_lineno <= len(lines):
            where = (innermost.tb_frame, lines[innermost.tb_lineno - 1])
        message = _cpython_wording(err, where)
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
    _install_plain_tools(scope)
    return scope


# Names the runtime puts in every script's namespace: never part of a notebook's saved state.
_RUNTIME_NAMES = frozenset(("__builtins__", "__name__", "tools", "__paddock_return__",
                            "__paddock_result__"))


def _why_not_kept(value):
    """Why pickle cannot keep `value` in a way a new child can load, before trying it."""
    kind = type(value)
    if getattr(value, "__module__", None) == "__main__" and (
            isinstance(value, type) or callable(value)):
        return ("defined by a script: pickle keeps functions and classes by reference, and "
                "their code is not in the snapshot; define it again after the fork")
    if getattr(kind, "__module__", None) == "__main__":
        return ("an instance of " + kind.__name__ + ", a class defined by a script, which a new "
                "session does not have")
    return None


def _notebook_dump():
    """The notebook's names, as the JSON of a `wire::NotebookState`. Plain data (numbers,
    strings, bytes, lists, tuples, dicts, sets, None) goes by `marshal`, native and already
    loaded; anything else by `pickle`, whose import costs a fresh child milliseconds."""
    import marshal
    scope = _NOTEBOOK_SCOPE or {}
    modules, values, skipped = [], {}, []
    for name, value in scope.items():
        if name in _RUNTIME_NAMES or getattr(value, "__paddock_tool__", False):
            continue
        if isinstance(value, type(sys)):
            modules.append((name, value.__name__))
            continue
        why = _why_not_kept(value)
        if why is None:
            values[name] = value
        else:
            skipped.append((name, why))
    # One dump of all the values keeps objects shared between names shared.
    try:
        data, encoding = marshal.dumps(values), "marshal"
    except Exception:  # noqa: BLE001 - not plain data: pickle below
        data = None
    if data is None:
        import pickle
        encoding = "pickle"
        try:
            data = pickle.dumps(values, protocol=4)
        except Exception:  # noqa: BLE001 - which name failed is found below
            for name in list(values):
                try:
                    pickle.dumps(values[name], protocol=4)
                except Exception as err:  # noqa: BLE001 - named in the list, not raised
                    skipped.append((name, type(err).__name__ + ": " + str(err)))
                    del values[name]
            data = pickle.dumps(values, protocol=4)
    kept = sorted(values) + sorted(name for name, _ in modules)
    return _dumps({"encoding": encoding, "data_base64": _base64_text(data), "modules": modules,
                   "names": kept, "not_kept": sorted(skipped)})


def _base64_text(data):
    import binascii
    return binascii.b2a_base64(data, newline=False).decode("ascii")


def _notebook_load(state_json):
    """Makes the notebook from a `_notebook_dump`; answers the JSON of a `wire::LoadedState`."""
    global _NOTEBOOK_SCOPE
    import binascii
    state = json.loads(state_json)
    modules = state["modules"]
    random.seed(int.from_bytes(_host.urandom(32), "big"))
    scope = {"__name__": "__main__", "__builtins__": builtins}
    failed = []
    for name, module in modules:
        try:
            __import__(module)
            scope[name] = sys.modules[module]
        except BaseException as err:  # noqa: B036 - e.g. a module this sandbox refuses
            failed.append((name, "import " + module + ": " + type(err).__name__ + ": " + str(err)))
    data = binascii.a2b_base64(state["data_base64"])
    if state["encoding"] == "marshal":
        import marshal
        values = marshal.loads(data)
    else:
        import pickle
        values = pickle.loads(data)
    scope.update(values)
    _NOTEBOOK_SCOPE = scope
    restored = sorted(values) + sorted(n for n, _ in modules if n in scope)
    return _dumps({"names": restored, "not_restored": failed})


def _run(source, tools, original=None, keep_state=False, parameters=None):
    """Runs one script. Returns (True, result_json, final_answer) or (False, failure tuple)."""
    try:
        return _run_script(source, tools, original, keep_state, parameters or {})
    except BaseException as err:  # noqa: B036 - e.g. a MemoryError landing between two steps
        return (False, _failure(err, original or source))


def _run_script(source, tools, original, keep_state, parameters):
    _TOOLS.clear()
    _TOOLS.update(tools)
    _TOOL_PARAMETERS.clear()
    _TOOL_PARAMETERS.update(parameters)
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
    final = False
    try:
        if code.co_flags & _CO_COROUTINE:
            asyncio.get_event_loop().run_until_complete(eval(code, scope))
        else:
            exec(code, scope)
        value = scope.get("__paddock_result__")
    except __paddock_return__ as ret:
        value = ret.value
    except __paddock_final_answer__ as answer:
        final = True
        value = answer.value
    except BaseException as err:  # noqa: B036 - everything the script raises is reported
        return (False, _failure(err, original or source))
    try:
        return (True, _dumps(_jsonable(value)), final)
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

