# One Paddock context: a long-lived CPython process whose globals persist between executions,
# served to paddock-agent (agent/src/contexts.rs). Standard library only; Python >= 3.8.
#
# The agent starts `python3 -u -c BOOT`, where BOOT reads this source from stdin (a decimal
# length line, then the bytes) and runs it, so that no file has to be written anywhere and the
# process's command line stays short.
#
# Channels, all set up before any user code runs:
# - requests: JSON lines on the original stdin, moved to a private descriptor; fd 0 becomes
#   /dev/null so that input() or a subprocess can never eat a request;
# - protocol: JSON lines on the original stdout, moved to a private descriptor (only this
#   program writes there, under a lock, one whole line at a time);
# - diagnostics: the original stderr, moved to a private descriptor, for this program's own
#   failures (the agent keeps its tail to explain a dead context);
# - fd 1 and fd 2 become two pipes read by a forwarder thread, so that prints and the output
#   of subprocesses are sent as stdout and stderr events as they are written.
#
# Requests:  {"op": "execute", "seq": N, "code": "..."}
# Events:    {"event": "ready", "pid", "python", "executable"}
#            {"event": "stdout" | "stderr", "seq", "text"}
#            {"event": "display", "seq", "bundle": {mime: value, ..., "is_main_result": bool},
#             "note"?: text}
#            {"event": "done", "seq", "execution_count", "exception": null | {"name", "value",
#             "traceback"}, "interrupted": bool}
# Every event of an execution is written before its "done".

import ast
import base64
import builtins
import codecs
import errno
import io
import json
import linecache
import os
import platform
import select
import signal
import sys
import threading
import time
import traceback
import types
import warnings

# The name this source was compiled under: frames of the driver itself carry it, and are left
# out of the tracebacks users see.
_DRIVER_FILE = sys._getframe().f_code.co_filename
# A protocol line longer than this is refused by the agent: bundles are kept below it.
_MAX_LINE = 15 * 1024 * 1024
# repr() of a huge object is cut, so one display cannot make the line too long by itself.
_MAX_TEXT = 1024 * 1024
_MAX_EXCEPTION_VALUE = 64 * 1024
_MAX_TRACEBACK = 256 * 1024
# Bytes drained from the output pipes at the end of an execution (a subprocess left writing
# in the background cannot hold the execution's answer forever).
_MAX_DRAIN = 8 * 1024 * 1024
# Output written between executions kept for the next one before its writers are made to wait.
_MAX_PENDING = 1024 * 1024
# code.co_flags of code compiled with top-level await (inspect.CO_COROUTINE; inspect itself
# is slow to import).
_CO_COROUTINE = 0x0080


class _State:
    def __init__(self):
        self.executing = False
        # > 0 while the main thread writes a protocol line: an interrupt then waits, since a
        # KeyboardInterrupt raised mid-write would leave half a line on the channel.
        self.shield = 0
        self.pending_interrupt = False
        self.count = 0
        self.seq = 0
        self.loop = None


_state = _State()
_send_lock = threading.Lock()
# Signal handlers run in the main thread: only its own writes are shielded from them.
_main_thread = threading.main_thread()
_proto_fd = -1
_diag_fd = -1


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _send(message):
    """Writes one protocol line (never interrupted half-way)."""
    line = json.dumps(message, ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=str)
    # Lone surrogates (a user's string) cannot be UTF-8: they become '?'.
    data = (line + "\n").encode("utf-8", "replace")
    if threading.current_thread() is not _main_thread:
        with _send_lock:
            _write_all(_proto_fd, data)
        return
    _state.shield += 1
    try:
        with _send_lock:
            _write_all(_proto_fd, data)
    finally:
        _state.shield -= 1
    if _state.pending_interrupt and _state.executing:
        _state.pending_interrupt = False
        raise KeyboardInterrupt


def _diagnose(text):
    try:
        _write_all(_diag_fd, ("paddock context driver: " + text + "\n").encode("utf-8", "replace"))
    except OSError:
        pass


def _on_interrupt(signum, frame):
    # Only user code is interrupted: between executions, or while the driver itself answers,
    # the signal is dropped (the agent sent it as the execution ended) or deferred.
    if not _state.executing:
        return
    if _state.shield:
        _state.pending_interrupt = True
        return
    raise KeyboardInterrupt


class _Forwarder(threading.Thread):
    """Reads fd 1 and fd 2 (pipes) and sends what comes as events of the running execution.

    The thread only wakes when there is output: an execution's start and end are handled by the
    main thread itself (begin, finish), so an execution that prints nothing hands nothing from
    thread to thread (each handoff can wait for the GIL's 5 ms switch interval). Output written
    between executions (a background thread, a subprocess left running) is kept, up to
    _MAX_PENDING bytes, and sent with the next execution; past that the pipes are not read
    and the writers wait."""

    def __init__(self, out_fd, err_fd):
        super().__init__(name="paddock-output", daemon=True)
        self.streams = {out_fd: "stdout", err_fd: "stderr"}
        self.decoders = {
            fd: codecs.getincrementaldecoder("utf-8")(errors="replace") for fd in self.streams
        }
        # A list, not a set: when both have output, stdout's goes first.
        self.open = [out_fd, err_fd]
        self.wake_r, self.wake_w = os.pipe()
        # Held while reading and sending, by this thread and by begin/finish: the order of
        # each stream's bytes is kept.
        self.lock = threading.Lock()
        self.active = False
        self.pending = []
        self.pending_bytes = 0
        self.paused = False
        self.seq = 0

    def begin(self, seq):
        with self.lock:
            self.seq = seq
            self.active = True
            pending, self.pending, self.pending_bytes = self.pending, [], 0
            for fd, data in pending:
                self.forward(fd, data)
            if self.paused:
                self.paused = False
                os.write(self.wake_w, b"x")

    def finish(self):
        """Sends everything written so far on fd 1 and fd 2 (called once the execution's code
        returned)."""
        with self.lock:
            self.drain()
            self.active = False

    def forward(self, fd, data, final=False):
        text = self.decoders[fd].decode(data, final)
        if text:
            _send({"event": self.streams[fd], "seq": self.seq, "text": text})

    def read(self, fd):
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return 0
        except OSError:
            data = b""
        if not data:
            # Every writer closed it (user code closed fd 1): never poll it again.
            if fd in self.open:
                self.open.remove(fd)
            if self.active:
                self.forward(fd, b"", True)
            return 0
        if self.active:
            self.forward(fd, data)
        else:
            self.pending.append((fd, data))
            self.pending_bytes += len(data)
            if self.pending_bytes >= _MAX_PENDING:
                self.paused = True
        return len(data)

    def drain(self):
        for fd in list(self.open):
            total = 0
            while fd in self.open and total < _MAX_DRAIN:
                got = self.read(fd)
                if got == 0:
                    break
                total += got
            if fd in self.open:
                # A multi-byte character cut at the end of an execution is not kept for the
                # next one.
                self.forward(fd, b"", True)

    def run(self):
        while True:
            poller = select.poll()
            poller.register(self.wake_r, select.POLLIN)
            if not self.paused:
                for fd in self.open:
                    poller.register(fd, select.POLLIN)
            try:
                ready = poller.poll()
            except InterruptedError:
                continue
            for fd, _ in ready:
                if fd == self.wake_r:
                    os.read(self.wake_r, 512)
                    continue
                with self.lock:
                    if fd in self.open and not self.paused:
                        self.read(fd)


_forwarder = None


def _cut(text, limit):
    if len(text) <= limit:
        return text
    return text[:limit] + "\n[paddock: %d more characters cut]" % (len(text) - limit)


def _as_base64(value):
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, str):
        return value
    return None


_REPR_METHODS = (
    ("_repr_html_", "text/html"),
    ("_repr_markdown_", "text/markdown"),
    ("_repr_svg_", "image/svg+xml"),
    ("_repr_png_", "image/png"),
    ("_repr_jpeg_", "image/jpeg"),
    ("_repr_latex_", "text/latex"),
    ("_repr_json_", "application/json"),
)
_BINARY_MIMES = ("image/png", "image/jpeg", "image/gif", "image/webp", "application/pdf")


def _mime_value(mime, value):
    """`value` as a bundle carries it, or None when it cannot be carried."""
    if mime in _BINARY_MIMES:
        return _as_base64(value)
    if mime == "application/json" or mime.endswith("+json"):
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            return None
        return value
    if isinstance(value, str):
        return value
    return None


def _bundle(obj):
    """The MIME bundle of `obj`: its repr, and what its `_repr_*_` methods give."""
    data = {"text/plain": _cut(repr(obj), _MAX_TEXT)}
    metadata = {}
    # Classes carry their instances' methods unbound; and an object that answers any
    # attribute (a mock, a proxy) would claim every representation.
    if isinstance(obj, type) or hasattr(obj, "_ipython_canary_method_should_not_exist_"):
        return data
    for name, mime in _REPR_METHODS:
        method = getattr(obj, name, None)
        if not callable(method):
            continue
        try:
            value = method()
        except Exception as exc:
            sys.stderr.write("display: %s failed: %s: %s\n" % (name, type(exc).__name__, exc))
            continue
        if isinstance(value, tuple) and len(value) == 2:
            value, meta = value
            if isinstance(meta, dict):
                metadata[mime] = meta
        if value is None:
            continue
        carried = _mime_value(mime, value)
        if carried is not None:
            data[mime] = carried
    method = getattr(obj, "_repr_mimebundle_", None)
    if callable(method):
        try:
            try:
                produced = method(include=None, exclude=None)
            except TypeError:
                produced = method()
        except Exception as exc:
            sys.stderr.write("display: _repr_mimebundle_ failed: %s: %s\n" % (type(exc).__name__, exc))
            produced = None
        if isinstance(produced, tuple) and len(produced) == 2:
            produced, meta = produced
            if isinstance(meta, dict):
                metadata.update(meta)
        if isinstance(produced, dict):
            for mime, value in produced.items():
                carried = _mime_value(str(mime), value)
                if carried is not None:
                    data[str(mime)] = carried
    if metadata:
        try:
            json.dumps(metadata, allow_nan=False)
            data["metadata"] = metadata
        except (TypeError, ValueError):
            pass
    return data


def _send_bundle(bundle, main):
    bundle["is_main_result"] = main
    message = {"event": "display", "seq": _state.seq, "bundle": bundle}
    size = len(json.dumps(message, ensure_ascii=False, default=str))
    if size > _MAX_LINE:
        # Too big for the channel: its text alone, and why.
        message["bundle"] = {
            "text/plain": _cut(str(bundle.get("text/plain", "")), _MAX_TEXT),
            "is_main_result": main,
        }
        message["note"] = "a result of %d bytes was cut to its text/plain: more than the %d a result may carry" % (
            size,
            _MAX_LINE,
        )
    _send(message)


def display(*objs, **options):
    """Shows each object in the execution's results, as Jupyter's display() does."""
    for obj in objs:
        _send_bundle(_bundle(obj), False)


def _send_figures():
    """Every open matplotlib figure becomes an image/png result, and is closed."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is None:
        return
    for number in list(pyplot.get_fignums()):
        figure = pyplot.figure(number)
        try:
            buffer = io.BytesIO()
            figure.savefig(buffer, format="png", bbox_inches="tight")
            _send_bundle(
                {"text/plain": repr(figure), "image/png": base64.b64encode(buffer.getvalue()).decode("ascii")},
                False,
            )
        except Exception as exc:
            sys.stderr.write("matplotlib figure %s: %s: %s\n" % (number, type(exc).__name__, exc))
        finally:
            pyplot.close(figure)


def _user_traceback(tb):
    """`tb` without the driver's frames, and without what runs a cell (asyncio's loop)."""
    frames = []
    while tb is not None:
        if tb.tb_frame.f_code.co_filename != _DRIVER_FILE:
            frames.append(tb)
        tb = tb.tb_next
    for index, entry in enumerate(frames):
        if entry.tb_frame.f_code.co_filename.startswith("<cell "):
            frames = frames[index:]
            break
    rebuilt = None
    for entry in reversed(frames):
        rebuilt = types.TracebackType(rebuilt, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return rebuilt


def _describe(exc):
    tb = _user_traceback(exc.__traceback__)
    try:
        value = str(exc)
    except Exception:
        value = "<str() of the exception failed>"
    try:
        text = "".join(traceback.format_exception(type(exc), exc, tb))
    except Exception as failure:
        text = "%s: %s\n(the traceback could not be formatted: %r)\n" % (type(exc).__name__, value, failure)
    if len(text) > _MAX_TRACEBACK:
        # The end says where it failed.
        text = "[paddock: %d characters cut]\n" % (len(text) - _MAX_TRACEBACK) + text[-_MAX_TRACEBACK:]
    sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, tb
    return {"name": type(exc).__name__, "value": _cut(value, _MAX_EXCEPTION_VALUE), "traceback": text}


def _evaluate(code, namespace):
    result = eval(code, namespace)
    if code.co_flags & _CO_COROUTINE:
        # Top-level await: the cell is a coroutine, run on the context's own loop.
        import asyncio

        if _state.loop is None or _state.loop.is_closed():
            _state.loop = asyncio.new_event_loop()
        try:
            result = _state.loop.run_until_complete(result)
        except BaseException:
            # An interrupted loop may hold a half-run task: the next cell gets a new loop.
            _state.loop = None
            raise
    return result


def _compile(source, filename):
    """The cell's statements, and its last expression apart when there is one to show."""
    flags = getattr(ast, "PyCF_ALLOW_TOP_LEVEL_AWAIT", 0)
    tree = compile(source, filename, "exec", ast.PyCF_ONLY_AST | flags, dont_inherit=True)
    last = None
    # A trailing semicolon hides the value, as in Jupyter.
    if tree.body and isinstance(tree.body[-1], ast.Expr) and not source.rstrip().endswith(";"):
        last = ast.Expression(tree.body.pop().value)
    body = compile(tree, filename, "exec", flags, dont_inherit=True) if tree.body else None
    expression = compile(last, filename, "eval", flags, dont_inherit=True) if last is not None else None
    return body, expression


def _flush_output():
    for stream in {id(s): s for s in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)}.values():
        try:
            stream.flush()
        except Exception:
            pass


def _execute(seq, source, namespace):
    _state.count += 1
    _state.seq = seq
    count = _state.count
    filename = "<cell %d>" % count
    # Tracebacks and inspect.getsource() show the cell's lines (an mtime of None: never
    # dropped by linecache.checkcache()).
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    _forwarder.begin(seq)
    exception = None
    interrupted = False
    try:
        body, expression = _compile(source, filename)
        _state.pending_interrupt = False
        _state.executing = True
        try:
            if body is not None:
                _evaluate(body, namespace)
            if expression is not None:
                value = _evaluate(expression, namespace)
                if value is not None:
                    namespace["_"] = value
                    _send_bundle(_bundle(value), True)
            _send_figures()
        finally:
            _state.executing = False
    except BaseException as exc:
        _state.executing = False
        interrupted = isinstance(exc, KeyboardInterrupt)
        exception = _describe(exc)
        try:
            _send_figures()
        except BaseException:
            pass
    _flush_output()
    _forwarder.finish()
    _send(
        {
            "event": "done",
            "seq": seq,
            "execution_count": count,
            "exception": exception,
            "interrupted": interrupted,
        }
    )


def _report_failure(seq, exc):
    """The driver's own failure (never user code's, which _execute reports): said in the
    answer and on the diagnostics channel; the context goes on."""
    _state.executing = False
    if isinstance(exc, OSError) and exc.errno == errno.EPIPE:
        # Nobody reads the answers any more.
        _end_group()
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    _diagnose(text)
    try:
        _send(
            {
                "event": "done",
                "seq": seq,
                "execution_count": _state.count,
                "exception": {"name": "PaddockDriverError", "value": str(exc), "traceback": text},
                "interrupted": isinstance(exc, KeyboardInterrupt),
            }
        )
    except OSError:
        _end_group()


def _end_group():
    """Ends this process and everything it started (same process group): the agent is gone."""
    try:
        os.killpg(os.getpgrp(), signal.SIGKILL)
    finally:
        os._exit(0)


def _watch_parent(parent):
    # An agent killed outright cannot end its contexts: they notice it here and go too.
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            _end_group()


def _main():
    global _proto_fd, _diag_fd, _forwarder
    parent = os.getppid()
    # Private copies (not inherited by subprocesses: os.dup makes them close-on-exec).
    requests_fd = os.dup(0)
    _proto_fd = os.dup(1)
    _diag_fd = os.dup(2)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    os.close(out_w)
    os.close(err_w)
    os.set_blocking(out_r, False)
    os.set_blocking(err_r, False)
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
    # Line-buffered: a printed line reaches the pipe (and so the agent) at once.
    sys.stdout = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding="utf-8", errors="backslashreplace", line_buffering=True
    )
    sys.stderr = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(2, "w", closefd=False)), encoding="utf-8", errors="backslashreplace", line_buffering=True
    )
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
    _forwarder = _Forwarder(out_r, err_r)
    _forwarder.start()
    threading.Thread(target=_watch_parent, args=(parent,), name="paddock-parent", daemon=True).start()
    signal.signal(signal.SIGINT, _on_interrupt)
    # Figures are sent after each execution: show() has nothing to do under Agg.
    warnings.filterwarnings("ignore", message=".*FigureCanvasAgg is non-interactive")

    # User code runs in a module of its own named __main__ (pickle finds its classes there);
    # the driver's names stay out of its sight.
    driver_module = sys.modules.get("__main__")
    user_main = types.ModuleType("__main__")
    user_main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = user_main
    sys.modules["_paddock_context_driver"] = driver_module
    builtins.display = display
    namespace = user_main.__dict__

    _send(
        {
            "event": "ready",
            "pid": os.getpid(),
            "python": platform.python_version(),
            "executable": sys.executable,
        }
    )
    requests = io.open(requests_fd, "rb", buffering=65536)
    for line in requests:
        try:
            request = json.loads(line.decode("utf-8", "replace"))
        except ValueError as exc:
            _diagnose("a request that is not JSON: %s" % exc)
            continue
        if request.get("op") != "execute":
            _diagnose("unknown request %r" % request.get("op"))
            continue
        seq = request.get("seq", 0)
        try:
            _execute(seq, str(request.get("code", "")), namespace)
        except BaseException as exc:
            _report_failure(seq, exc)
    # The agent closed the requests: it is leaving or removing this context.
    _end_group()


_main()
