"""Paddock's asyncio for sandboxed scripts.

The sandbox interpreter has no sockets, selectors or signals, so the standard asyncio cannot
import. This module implements the part of its API that scripts use, on a single event loop
whose only source of I/O is the engine: tool calls are sent with ``_host.submit`` and their
answers collected with ``_host.wait``. Semantics follow CPython's asyncio (3.11+) where a
script can observe them.
"""

import _host
import heapq as _heapq
from json import JSONDecoder as _JSONDecoder, dumps as _dumps, encoder as _json_encoder
from json import loads as _loads
from collections import deque as _deque

__all__ = [
    "CancelledError", "InvalidStateError", "TimeoutError", "QueueEmpty", "QueueFull",
    "Future", "Task", "Handle", "TimerHandle", "AbstractEventLoop",
    "get_event_loop", "get_running_loop", "new_event_loop", "set_event_loop", "run",
    "sleep", "gather", "create_task", "ensure_future", "wait_for", "wait", "shield",
    "as_completed", "current_task", "all_tasks", "iscoroutine", "iscoroutinefunction",
    "isfuture", "Lock", "Event", "Semaphore", "BoundedSemaphore", "Condition", "Queue",
    "LifoQueue", "PriorityQueue", "TaskGroup", "timeout", "timeout_at", "Timeout",
    "FIRST_COMPLETED", "FIRST_EXCEPTION", "ALL_COMPLETED", "to_thread",
]

TimeoutError = TimeoutError  # noqa: the builtin, as in CPython 3.11+


# Tool arguments and answers cross as JSON on every call. `json.dumps` and `json.loads` build
# their encoder and check their input in interpreted code first (8 and 4 microseconds a call
# here, against 1 for the native encoder and scanner called directly), so the runtime keeps one
# of each, with json.dumps' defaults and messages.
def _not_json(value):
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


def _make_args_encoder():
    make = _json_encoder.c_make_encoder
    if make is None:
        return None
    return make({}, _not_json, _json_encoder.encode_basestring_ascii, None, ": ", ", ",
                False, False, True)


_ARGS_ENCODER = _make_args_encoder()
_SCAN_JSON = _JSONDecoder().scan_once


def _encode_args(kwargs):
    """``json.dumps(kwargs)``."""
    global _ARGS_ENCODER
    if _ARGS_ENCODER is None:
        return _dumps(kwargs)
    try:
        return "".join(_ARGS_ENCODER(kwargs, 0))
    except BaseException:
        # Its circular-reference markers may still hold this call's containers.
        _ARGS_ENCODER = _make_args_encoder()
        raise


def _decode_answer(text):
    """``json.loads(text)`` for the engine's own JSON (one value, no surrounding space)."""
    try:
        value, end = _SCAN_JSON(text, 0)
    except StopIteration:
        return _loads(text)
    return value if end == len(text) else _loads(text)


class CancelledError(BaseException):
    """The task or future was cancelled."""


class InvalidStateError(Exception):
    """A future's result was read before it was set, or set twice."""


class QueueEmpty(Exception):
    pass


class QueueFull(Exception):
    pass


FIRST_COMPLETED = "FIRST_COMPLETED"
FIRST_EXCEPTION = "FIRST_EXCEPTION"
ALL_COMPLETED = "ALL_COMPLETED"

_PENDING, _CANCELLED, _FINISHED = "PENDING", "CANCELLED", "FINISHED"


def _coroutine_types():
    async def _probe():
        pass
    c = _probe()
    t = type(c)
    c.close()
    return t


_CoroutineType = _coroutine_types()


def iscoroutine(obj):
    return isinstance(obj, _CoroutineType) or (
        hasattr(obj, "send") and hasattr(obj, "throw") and hasattr(obj, "__await__"))


def iscoroutinefunction(func):
    code = getattr(func, "__code__", None)
    return code is not None and bool(code.co_flags & 0x80)


def isfuture(obj):
    return getattr(obj, "_asyncio_future_blocking", None) is not None


class Handle:
    __slots__ = ("_callback", "_args", "_cancelled")

    def __init__(self, callback, args):
        self._callback = callback
        self._args = args
        self._cancelled = False

    def cancel(self):
        self._cancelled = True

    def cancelled(self):
        return self._cancelled

    def _run(self):
        if not self._cancelled:
            self._callback(*self._args)


class TimerHandle(Handle):
    __slots__ = ("_when",)

    def __init__(self, when, callback, args):
        super().__init__(callback, args)
        self._when = when

    def when(self):
        return self._when


class Future:
    __slots__ = ("_loop", "_state", "_result", "_exception", "_callbacks", "_cancel_message",
                 "_asyncio_future_blocking", "__weakref__")

    def __init__(self, *, loop=None):
        self._asyncio_future_blocking = False
        self._loop = loop if loop is not None else get_event_loop()
        self._state = _PENDING
        self._result = None
        self._exception = None
        self._callbacks = []
        self._cancel_message = None

    def __repr__(self):
        return f"<{type(self).__name__} {self._state.lower()}>"

    def get_loop(self):
        return self._loop

    def done(self):
        return self._state != _PENDING

    def cancelled(self):
        return self._state == _CANCELLED

    def cancel(self, msg=None):
        if self._state != _PENDING:
            return False
        self._state = _CANCELLED
        self._cancel_message = msg
        self._schedule_callbacks()
        return True

    def _make_cancelled_error(self):
        if self._cancel_message is None:
            return CancelledError()
        return CancelledError(self._cancel_message)

    def result(self):
        if self._state == _CANCELLED:
            raise self._make_cancelled_error()
        if self._state != _FINISHED:
            raise InvalidStateError("Result is not ready.")
        if self._exception is not None:
            raise self._exception
        return self._result

    def exception(self):
        if self._state == _CANCELLED:
            raise self._make_cancelled_error()
        if self._state != _FINISHED:
            raise InvalidStateError("Exception is not set.")
        return self._exception

    def set_result(self, result):
        if self._state != _PENDING:
            raise InvalidStateError(f"{self._state}: {self!r}")
        self._result = result
        self._state = _FINISHED
        self._schedule_callbacks()

    def set_exception(self, exception):
        if self._state != _PENDING:
            raise InvalidStateError(f"{self._state}: {self!r}")
        if isinstance(exception, type):
            exception = exception()
        self._exception = exception
        self._state = _FINISHED
        self._schedule_callbacks()

    def add_done_callback(self, fn, *, context=None):
        if self._state != _PENDING:
            self._loop.call_soon(fn, self)
        else:
            self._callbacks.append(fn)

    def remove_done_callback(self, fn):
        before = len(self._callbacks)
        self._callbacks = [cb for cb in self._callbacks if cb != fn]
        return before - len(self._callbacks)

    def _schedule_callbacks(self):
        callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            self._loop.call_soon(cb, self)

    def __await__(self):
        if not self.done():
            self._asyncio_future_blocking = True
            yield self
        if not self.done():
            raise RuntimeError("await wasn't used with future")
        return self.result()

    __iter__ = __await__


class Task(Future):
    __slots__ = ("_coro", "_name", "_fut_waiter", "_must_cancel", "_cancel_requests")

    def __init__(self, coro, *, loop=None, name=None, context=None):
        super().__init__(loop=loop)
        if not iscoroutine(coro):
            if not hasattr(coro, "__await__"):
                raise TypeError(f"a coroutine was expected, got {coro!r}")
            # `create_task(tools.x())`: a tool call is a future; wrap it so it can be a task.
            coro = _await_awaitable(coro)
        self._coro = coro
        self._name = name if name is not None else f"Task-{_next_task_id()}"
        self._fut_waiter = None
        self._must_cancel = False
        self._cancel_requests = 0
        self._loop._tasks.add(self)
        self._loop.call_soon(self._step)

    def __repr__(self):
        return f"<Task {self._state.lower()} name={self._name!r}>"

    def get_name(self):
        return self._name

    def set_name(self, value):
        self._name = str(value)

    def get_coro(self):
        return self._coro

    def cancelling(self):
        return self._cancel_requests

    def uncancel(self):
        if self._cancel_requests > 0:
            self._cancel_requests -= 1
        return self._cancel_requests

    def cancel(self, msg=None):
        if self.done():
            return False
        self._cancel_requests += 1
        if self._fut_waiter is not None and self._fut_waiter.cancel(msg=msg):
            return True
        self._must_cancel = True
        self._cancel_message = msg
        return True

    def _step(self, exc=None):
        if self.done():
            return
        if self._must_cancel:
            if not isinstance(exc, CancelledError):
                exc = self._make_cancelled_error()
            self._must_cancel = False
        self._fut_waiter = None
        loop = self._loop
        previous = loop._current_task
        loop._current_task = self
        try:
            if exc is None:
                result = self._coro.send(None)
            else:
                result = self._coro.throw(exc)
        except StopIteration as stop:
            if self._must_cancel:
                self._must_cancel = False
                Future.cancel(self, msg=self._cancel_message)
            else:
                Future.set_result(self, stop.value)
        except CancelledError as err:
            self._cancel_message = err.args[0] if err.args else None
            Future.cancel(self, msg=self._cancel_message)
        except BaseException as err:
            Future.set_exception(self, err)
        else:
            if getattr(result, "_asyncio_future_blocking", None):
                result._asyncio_future_blocking = False
                result.add_done_callback(self._wakeup)
                self._fut_waiter = result
                if self._must_cancel and result.cancel(msg=self._cancel_message):
                    self._must_cancel = False
            elif result is None:
                loop.call_soon(self._step)
            else:
                loop.call_soon(self._step, RuntimeError(f"Task got bad yield: {result!r}"))
        finally:
            loop._current_task = previous
            if self.done():
                loop._tasks.discard(self)

    def _wakeup(self, future):
        try:
            future.result()
        except BaseException as err:
            self._step(err)
        else:
            self._step()


async def _await_awaitable(awaitable):
    return await awaitable


_task_counter = [0]


def _next_task_id():
    _task_counter[0] += 1
    return _task_counter[0]


class AbstractEventLoop:
    pass


class _HostLoop(AbstractEventLoop):
    """One event loop per script; its I/O is the engine socket."""

    def __init__(self):
        self._ready = _deque()
        self._timers = []
        self._timer_seq = 0
        self._pending_calls = {}
        self._tasks = set()
        self._current_task = None
        self._running = False
        self._closed = False

    # -- scheduling --
    def time(self):
        return _host.monotonic()

    def call_soon(self, callback, *args, context=None):
        handle = Handle(callback, args)
        self._ready.append(handle)
        return handle

    def call_later(self, delay, callback, *args, context=None):
        return self.call_at(self.time() + delay, callback, *args)

    def call_at(self, when, callback, *args, context=None):
        handle = TimerHandle(when, callback, args)
        self._timer_seq += 1
        _heapq.heappush(self._timers, (when, self._timer_seq, handle))
        return handle

    def create_future(self):
        return Future(loop=self)

    def create_task(self, coro, *, name=None, context=None):
        return Task(coro, loop=self, name=name)

    def is_running(self):
        return self._running

    def is_closed(self):
        return self._closed

    def close(self):
        self._closed = True

    def get_debug(self):
        return False

    def set_debug(self, enabled):
        pass

    def run_in_executor(self, executor, func, *args):
        raise NotImplementedError("threads are not available in the Paddock sandbox")

    # -- tool calls --
    def _call_tool(self, tool, kwargs):
        future = Future(loop=self)
        try:
            args_json = _encode_args(kwargs) if kwargs else "{}"
        except (TypeError, ValueError) as err:
            raise TypeError(f"arguments of tool {tool!r} must be JSON values: {err}") from None
        call_id = _host.submit(tool, args_json)
        self._pending_calls[call_id] = future
        return future

    def _deliver(self, replies):
        for call_id, value_json, exception, message, error_code in replies:
            future = self._pending_calls.pop(call_id, None)
            if future is None or future.done():
                continue
            if value_json is not None:
                future.set_result(_decode_answer(value_json))
            else:
                future.set_exception(_tool_error(exception, message, error_code))

    # -- running --
    def _run_once(self):
        timeout = None
        if self._ready:
            timeout = 0.0
        elif self._timers:
            timeout = max(0.0, self._timers[0][0] - self.time())
        if self._pending_calls:
            if timeout != 0.0 or _host.replies_waiting():
                self._deliver(_host.wait(timeout))
        elif timeout is None:
            raise RuntimeError(
                "deadlock: every task is waiting and nothing can wake them "
                "(no tool call in flight, no timer pending)")
        elif timeout > 0.0:
            _host.sleep(timeout)
        now = self.time()
        while self._timers and self._timers[0][0] <= now:
            _, _, handle = _heapq.heappop(self._timers)
            if not handle._cancelled:
                self._ready.append(handle)
        for _ in range(len(self._ready)):
            self._ready.popleft()._run()

    def run_until_complete(self, future):
        if self._running:
            raise RuntimeError("This event loop is already running")
        future = ensure_future(future, loop=self)
        global _running_loop
        previous = _running_loop
        _running_loop = self
        self._running = True
        try:
            while not future.done():
                self._run_once()
        finally:
            self._running = False
            _running_loop = previous
        return future.result()

    def run_forever(self):
        raise NotImplementedError("run_forever is not supported in the Paddock sandbox")


_TOOL_ERROR_TYPES = {
    "ValueError": ValueError,
    "PermissionError": PermissionError,
    "RuntimeError": RuntimeError,
    "TimeoutError": TimeoutError,
}


def _tool_error(exception, message, error_code):
    err = _TOOL_ERROR_TYPES.get(exception, RuntimeError)(message)
    err.paddock_error_code = error_code
    return err


_running_loop = None
_default_loop = None


def get_running_loop():
    if _running_loop is None:
        raise RuntimeError("no running event loop")
    return _running_loop


def get_event_loop():
    global _default_loop
    if _running_loop is not None:
        return _running_loop
    if _default_loop is None or _default_loop._closed:
        _default_loop = _HostLoop()
    return _default_loop


def new_event_loop():
    return _HostLoop()


def set_event_loop(loop):
    global _default_loop
    _default_loop = loop


def current_task(loop=None):
    loop = loop or _running_loop
    return None if loop is None else loop._current_task


def all_tasks(loop=None):
    loop = loop or get_running_loop()
    return {t for t in loop._tasks if not t.done()}


def run(main, *, debug=None, loop_factory=None):
    if _running_loop is not None:
        raise RuntimeError("asyncio.run() cannot be called from a running event loop")
    if not iscoroutine(main):
        raise ValueError(f"a coroutine was expected, got {main!r}")
    loop = get_event_loop()
    task = loop.create_task(main)
    try:
        return loop.run_until_complete(task)
    finally:
        for t in list(loop._tasks):
            t.cancel()


def ensure_future(obj, *, loop=None):
    if isfuture(obj):
        return obj
    loop = loop or get_event_loop()
    if iscoroutine(obj):
        return loop.create_task(obj)
    if hasattr(obj, "__await__"):
        async def _wrap():
            return await obj
        return loop.create_task(_wrap())
    raise TypeError("An asyncio.Future, a coroutine or an awaitable is required")


def create_task(coro, *, name=None, context=None):
    return get_running_loop().create_task(coro, name=name)


async def sleep(delay, result=None):
    loop = get_running_loop()
    future = loop.create_future()
    if delay <= 0:
        loop.call_soon(_set_result_unless_done, future, result)
    else:
        handle = loop.call_later(delay, _set_result_unless_done, future, result)
        future.add_done_callback(lambda _f: handle.cancel())
    return await future


def _set_result_unless_done(future, result):
    if not future.done():
        future.set_result(result)


class _GatheringFuture(Future):
    __slots__ = ("_children",)

    def __init__(self, children, loop):
        super().__init__(loop=loop)
        self._children = children

    def cancel(self, msg=None):
        if self.done():
            return False
        cancelled = False
        for child in self._children:
            if child.cancel(msg=msg):
                cancelled = True
        return cancelled


def gather(*aws, return_exceptions=False):
    loop = _running_loop or get_event_loop()
    if not aws:
        outer = loop.create_future()
        outer.set_result([])
        return outer
    children = []
    seen = {}
    for aw in aws:
        if iscoroutine(aw) and aw in seen:
            children.append(seen[aw])
            continue
        fut = ensure_future(aw, loop=loop)
        if iscoroutine(aw):
            seen[aw] = fut
        children.append(fut)
    outer = _GatheringFuture(children, loop)
    remaining = [len(children)]

    def on_child_done(child):
        remaining[0] -= 1
        if outer.done():
            if not child.cancelled():
                child.exception()
            return
        if not return_exceptions:
            if child.cancelled():
                outer.set_exception(child._make_cancelled_error())
                return
            exc = child.exception()
            if exc is not None:
                outer.set_exception(exc)
                return
        if remaining[0] == 0:
            results = []
            for fut in children:
                if fut.cancelled():
                    results.append(fut._make_cancelled_error())
                elif fut.exception() is not None:
                    results.append(fut.exception())
                else:
                    results.append(fut.result())
            outer.set_result(results)

    for child in children:
        child.add_done_callback(on_child_done)
    return outer


def shield(arg):
    inner = ensure_future(arg)
    if inner.done():
        return inner
    loop = inner.get_loop()
    outer = loop.create_future()

    def copy_state(inner):
        if outer.done():
            return
        if inner.cancelled():
            outer.cancel()
        elif inner.exception() is not None:
            outer.set_exception(inner.exception())
        else:
            outer.set_result(inner.result())

    inner.add_done_callback(copy_state)
    return outer


async def wait(fs, *, timeout=None, return_when=ALL_COMPLETED):
    fs = {ensure_future(f) for f in fs}
    if not fs:
        raise ValueError("Set of Tasks/Futures is empty.")
    loop = get_running_loop()
    waiter = loop.create_future()
    counter = [len(fs)]
    handle = None
    if timeout is not None:
        handle = loop.call_later(timeout, _set_result_unless_done, waiter, None)

    def on_done(f):
        counter[0] -= 1
        if (counter[0] <= 0 or return_when == FIRST_COMPLETED or
                (return_when == FIRST_EXCEPTION and not f.cancelled() and
                 f.exception() is not None)):
            _set_result_unless_done(waiter, None)

    for f in fs:
        f.add_done_callback(on_done)
    try:
        if not all(f.done() for f in fs) and not (
                return_when != ALL_COMPLETED and any(f.done() for f in fs)):
            await waiter
    finally:
        if handle is not None:
            handle.cancel()
        for f in fs:
            f.remove_done_callback(on_done)
    done = {f for f in fs if f.done()}
    return done, fs - done


class Timeout:
    """``async with asyncio.timeout(delay)``: cancels the block and raises TimeoutError."""

    def __init__(self, when):
        self._when = when
        self._task = None
        self._handle = None
        self._expired = False

    def when(self):
        return self._when

    def expired(self):
        return self._expired

    def reschedule(self, when):
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._when = when
        if when is not None and self._task is not None:
            self._handle = get_running_loop().call_at(when, self._on_timeout)

    def _on_timeout(self):
        self._expired = True
        self._handle = None
        self._task.cancel()

    async def __aenter__(self):
        self._task = current_task()
        if self._task is None:
            raise RuntimeError("Timeout should be used inside a task")
        self.reschedule(self._when)
        return self

    async def __aexit__(self, exc_type, exc, tb):
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._expired and exc_type is not None and issubclass(exc_type, CancelledError):
            self._task.uncancel()
            raise TimeoutError() from exc
        return None


def timeout(delay):
    loop = get_running_loop()
    return Timeout(None if delay is None else loop.time() + delay)


def timeout_at(when):
    return Timeout(when)


async def wait_for(aw, timeout):
    if timeout is None:
        return await aw
    fut = ensure_future(aw)
    if timeout <= 0:
        if fut.done():
            return fut.result()
        fut.cancel()
        raise TimeoutError()
    async with Timeout(get_running_loop().time() + timeout):
        return await fut


def as_completed(fs, *, timeout=None):
    """Iterates awaitables in completion order (sync and async iteration both work)."""
    loop = get_event_loop()
    todo = [ensure_future(f, loop=loop) for f in fs]
    done_queue = _deque()
    waiters = _deque()
    deadline = None if timeout is None else loop.time() + timeout

    def on_done(f):
        done_queue.append(f)
        while waiters:
            w = waiters.popleft()
            if not w.done():
                w.set_result(None)
                break

    for f in todo:
        f.add_done_callback(on_done)

    async def next_done():
        if not done_queue:
            waiter = loop.create_future()
            waiters.append(waiter)
            if deadline is None:
                await waiter
            else:
                try:
                    await wait_for(waiter, max(0.0, deadline - loop.time()))
                except TimeoutError:
                    raise TimeoutError() from None
        return done_queue.popleft().result()

    class _AsCompleted:
        def __init__(self):
            self._left = len(todo)

        def __iter__(self):
            return self

        def __next__(self):
            if self._left == 0:
                raise StopIteration
            self._left -= 1
            return next_done()

        def __aiter__(self):
            return self

        async def __anext__(self):
            if self._left == 0:
                raise StopAsyncIteration
            self._left -= 1
            return await next_done()

    return _AsCompleted()


class Event:
    def __init__(self):
        self._waiters = _deque()
        self._value = False

    def is_set(self):
        return self._value

    def set(self):
        if not self._value:
            self._value = True
            for fut in self._waiters:
                if not fut.done():
                    fut.set_result(True)

    def clear(self):
        self._value = False

    async def wait(self):
        if self._value:
            return True
        fut = get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
            return True
        finally:
            self._waiters.remove(fut)


async def _await_queued(waiters, fut):
    """Awaits `fut`, which the caller queued in `waiters`: it leaves the queue however the wait
    ends (a notified future is removed by its waiter, not by who notified it)."""
    try:
        await fut
    finally:
        if fut in waiters:
            waiters.remove(fut)


class _WaiterLock:
    """What Lock and Semaphore share (CPython's ``_ContextManagerMixin`` and more): ``async with``
    acquires and releases, and a release hands the lock to the first waiter still pending."""

    async def __aenter__(self):
        await self.acquire()
        return None

    async def __aexit__(self, exc_type, exc, tb):
        self.release()

    def _wake_up_first(self):
        for fut in self._waiters:
            if not fut.done():
                fut.set_result(True)
                return


class Lock(_WaiterLock):
    def __init__(self):
        self._waiters = _deque()
        self._locked = False

    def locked(self):
        return self._locked

    async def acquire(self):
        if not self._locked and not any(not w.cancelled() for w in self._waiters):
            self._locked = True
            return True
        fut = get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        except CancelledError:
            if fut.done() and not fut.cancelled():
                self._locked = False
                self._wake_up_first()
            raise
        finally:
            if fut in self._waiters:
                self._waiters.remove(fut)
        self._locked = True
        return True

    def release(self):
        if not self._locked:
            raise RuntimeError("Lock is not acquired.")
        self._locked = False
        self._wake_up_first()



class Semaphore(_WaiterLock):
    def __init__(self, value=1):
        if value < 0:
            raise ValueError("Semaphore initial value must be >= 0")
        self._value = value
        self._waiters = _deque()

    def locked(self):
        return self._value == 0

    async def acquire(self):
        while self._value <= 0:
            fut = get_running_loop().create_future()
            self._waiters.append(fut)
            await _await_queued(self._waiters, fut)
        self._value -= 1
        return True

    def release(self):
        self._value += 1
        self._wake_up_first()


class BoundedSemaphore(Semaphore):
    def __init__(self, value=1):
        self._bound_value = value
        super().__init__(value)

    def release(self):
        if self._value >= self._bound_value:
            raise ValueError("BoundedSemaphore released too many times")
        super().release()


class Condition:
    def __init__(self, lock=None):
        self._lock = lock or Lock()
        self._waiters = _deque()
        self.locked = self._lock.locked
        self.acquire = self._lock.acquire
        self.release = self._lock.release

    async def __aenter__(self):
        await self._lock.acquire()

    async def __aexit__(self, exc_type, exc, tb):
        self._lock.release()

    async def wait(self):
        self._lock.release()
        fut = get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await _await_queued(self._waiters, fut)
        finally:
            await self._lock.acquire()
        return True

    async def wait_for(self, predicate):
        result = predicate()
        while not result:
            await self.wait()
            result = predicate()
        return result

    def notify(self, n=1):
        woken = 0
        for fut in self._waiters:
            if woken >= n:
                break
            if not fut.done():
                fut.set_result(False)
                woken += 1

    def notify_all(self):
        self.notify(len(self._waiters))


class Queue:
    def __init__(self, maxsize=0):
        self._maxsize = maxsize
        self._init()
        self._getters = _deque()
        self._putters = _deque()
        self._unfinished = 0
        self._finished = Event()
        self._finished.set()

    def _init(self):
        self._queue = _deque()

    def _put(self, item):
        self._queue.append(item)

    def _get(self):
        return self._queue.popleft()

    @property
    def maxsize(self):
        return self._maxsize

    def qsize(self):
        return len(self._queue)

    def empty(self):
        return not self._queue

    def full(self):
        return 0 < self._maxsize <= self.qsize()

    def _wake(self, waiters):
        while waiters:
            w = waiters.popleft()
            if not w.done():
                w.set_result(None)
                return

    async def put(self, item):
        while self.full():
            fut = get_running_loop().create_future()
            self._putters.append(fut)
            await fut
        self.put_nowait(item)

    def put_nowait(self, item):
        if self.full():
            raise QueueFull
        self._put(item)
        self._unfinished += 1
        self._finished.clear()
        self._wake(self._getters)

    async def get(self):
        while self.empty():
            fut = get_running_loop().create_future()
            self._getters.append(fut)
            await fut
        return self.get_nowait()

    def get_nowait(self):
        if self.empty():
            raise QueueEmpty
        item = self._get()
        self._wake(self._putters)
        return item

    def task_done(self):
        if self._unfinished <= 0:
            raise ValueError("task_done() called too many times")
        self._unfinished -= 1
        if self._unfinished == 0:
            self._finished.set()

    async def join(self):
        if self._unfinished > 0:
            await self._finished.wait()


class LifoQueue(Queue):
    def _init(self):
        self._queue = []

    def _put(self, item):
        self._queue.append(item)

    def _get(self):
        return self._queue.pop()


class PriorityQueue(Queue):
    def _init(self):
        self._queue = []

    def _put(self, item):
        _heapq.heappush(self._queue, item)

    def _get(self):
        return _heapq.heappop(self._queue)


class TaskGroup:
    """``async with asyncio.TaskGroup() as tg``: waits for every task; the first failure
    cancels the rest and the failures are raised together as an ExceptionGroup."""

    def __init__(self):
        self._tasks = set()
        self._errors = []
        self._entered = False
        self._exiting = False
        self._aborting = False
        self._parent_task = None
        self._waiter = None

    async def __aenter__(self):
        self._entered = True
        self._parent_task = current_task()
        return self

    def create_task(self, coro, *, name=None, context=None):
        if not self._entered:
            raise RuntimeError("TaskGroup has not been entered")
        if self._exiting and not self._tasks:
            raise RuntimeError("TaskGroup is finished")
        task = get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._on_task_done)
        return task

    def _abort(self):
        self._aborting = True
        for t in self._tasks:
            if not t.done():
                t.cancel()

    def _on_task_done(self, task):
        self._tasks.discard(task)
        if self._waiter is not None and not self._tasks and not self._waiter.done():
            self._waiter.set_result(True)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None:
            return
        self._errors.append(exc)
        if not self._aborting:
            self._abort()
            if self._parent_task is not None and not self._exiting:
                self._parent_task.cancel()

    async def __aexit__(self, exc_type, exc, tb):
        self._exiting = True
        propagate_cancel = None
        if exc is not None and not isinstance(exc, CancelledError):
            self._errors.append(exc)
            if not self._aborting:
                self._abort()
        while self._tasks:
            self._waiter = get_running_loop().create_future()
            try:
                await self._waiter
            except CancelledError as err:
                propagate_cancel = err
                if not self._aborting:
                    self._abort()
            self._waiter = None
        if exc_type is not None and issubclass(exc_type, CancelledError) and not self._errors:
            raise exc
        if propagate_cancel is not None and not self._errors:
            raise propagate_cancel
        if self._errors:
            errors = [e for e in self._errors if not isinstance(e, CancelledError)]
            self._errors = []
            if self._parent_task is not None:
                self._parent_task.uncancel()
            raise BaseExceptionGroup("unhandled errors in a TaskGroup", errors)
        return None


async def to_thread(func, *args, **kwargs):
    raise NotImplementedError("threads are not available in the Paddock sandbox")
