"""Where host tools run (used by the extension, not an API of its own).

Each `Sandbox` has one `HostCalls`: a bounded pool of daemon threads for synchronous host
tools and one event loop, on a daemon thread of its own, for coroutine host tools of
synchronous runs (`run_async` uses the caller's loop instead). Each run calls through its
own `RunCalls`. Every call is a `concurrent.futures.Future`: the extension awaits it under
the run's deadline and cancels it when the run ends without it (a coroutine gets
`CancelledError`; a synchronous function already running finishes on its thread and its
answer is dropped). The threads and the loop end with the Sandbox.

A call is handed over as an invocation (the extension's `Invocation`): the function and
the guest's JSON, whose `take()` makes the Python arguments only when the call starts, on
the pool's thread (a sync function) or on the loop (a coroutine function). Until then the call *waits*, holding the
JSON alone, and what waits is bounded: in calls per run and per Sandbox, and in the
arguments' size per Sandbox (the extension's estimate, `weight`; a run's are bounded by
the library's batch budget); a call past a bound fails at once with a `sandpy.ToolError`
naming the bound, and a waiting call that is cancelled leaves
the queue and drops its arguments at once, whether a thread is free or not.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import json
import threading
import weakref
from typing import Any, Callable

from ._sandpy import ToolError

# The arguments that may wait for a thread or for the loop, all runs of a Sandbox together,
# as the extension estimates them (about what they take as Python objects). One run's are
# bounded already: it has one batch out at a time, and the library bounds a batch's
# arguments (16 times `tool_result_bytes`, 128 MiB by default, as it counts them).
SANDBOX_BYTES = 256 << 20
# Calls waiting per Sandbox, as a multiple of the per-run bound (`tool_queue`, by default
# 1024: more than a run's default 1000 tool calls, so that a run is refused for its number
# of waiting calls only with a raised `max_tool_calls` or a smaller `tool_queue`).
SANDBOX_RUNS = 4


class _Waiting:
    """What waits to start, per Sandbox and per run, under one lock (see the module docs)."""

    def __init__(self, per_run: int) -> None:
        self.lock = threading.Lock()
        self.per_run = per_run
        self.per_sandbox = per_run * SANDBOX_RUNS
        self.calls = 0
        self.bytes = 0

    def refusal(self, run: RunCalls, name: str, weight: int, where: str) -> str | None:
        """Why a call of `name` may not wait now (None: it may); called under the lock.
        A call always may when nothing else waits (so one large call can run)."""
        if run.calls >= self.per_run:
            held = f"{run.calls} calls of this run"
            bound = f"at most {self.per_run} calls per run (Sandbox(tool_queue=...))"
        elif self.calls >= self.per_sandbox:
            held = f"{self.calls} calls of this Sandbox's runs"
            bound = f"at most {self.per_sandbox} calls per Sandbox ({SANDBOX_RUNS} times tool_queue)"
        elif self.calls and self.bytes + weight > SANDBOX_BYTES:
            held = f"calls of this Sandbox's runs with about {self.bytes} bytes of arguments"
            bound = f"at most {SANDBOX_BYTES} bytes of arguments per Sandbox"
        else:
            return None
        return (
            f"{name} was refused: {held} already wait for {where}, and the host holds "
            f"{bound}; make fewer calls at once"
        )

    def add(self, run: RunCalls, weight: int) -> None:
        self.calls += 1
        self.bytes += weight
        run.calls += 1

    def remove(self, run: RunCalls, weight: int) -> None:
        self.calls -= 1
        self.bytes -= weight
        run.calls -= 1


class _Call:
    __slots__ = ("future", "invocation", "run", "weight")

    def __init__(self, future: concurrent.futures.Future, invocation: Any, run: RunCalls, weight: int) -> None:
        self.future = future
        self.invocation = invocation
        self.run = run
        self.weight = weight


def _refused(message: str) -> concurrent.futures.Future:
    future: concurrent.futures.Future = concurrent.futures.Future()
    future.set_exception(ToolError(message))
    return future


class _Pool:
    """At most `size` daemon threads running synchronous calls, started as needed; the
    calls waiting for one in a queue that a cancelled call leaves at once."""

    def __init__(self, size: int, waiting: _Waiting) -> None:
        self._size = size
        self._waiting = waiting
        self._lock = waiting.lock
        self._wake = threading.Condition(self._lock)
        self._queue: collections.OrderedDict[int, _Call] = collections.OrderedDict()
        self._next = 0
        self._threads = 0
        self._idle = 0
        self._closed = False

    def submit(self, run: RunCalls, name: str, invocation: Any, weight: int) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                return _refused(f"{name} was refused: the Sandbox is closed")
            # A call a thread takes at once (an idle one, or one to start) does not wait.
            free = self._idle + (self._size - self._threads) > len(self._queue)
            where = f"one of the Sandbox's {self._size} host tool threads"
            refusal = None if free else self._waiting.refusal(run, name, weight, where)
            if refusal is not None:
                return _refused(refusal)
            key = self._next
            self._next += 1
            self._queue[key] = _Call(future, invocation, run, weight)
            self._waiting.add(run, weight)
            if len(self._queue) > self._idle and self._threads < self._size:
                self._threads += 1
                threading.Thread(target=self._work, name=f"sandpy-host-tool-{self._threads}", daemon=True).start()
            else:
                self._wake.notify()
        future.add_done_callback(lambda done: done.cancelled() and self._forget(key))
        return future

    def _forget(self, key: int) -> None:
        """A cancelled call leaves the queue (if it is still there) with its arguments."""
        with self._lock:
            call = self._queue.pop(key, None)
            if call is not None:
                self._waiting.remove(call.run, call.weight)
        del call  # its invocation (the arguments) goes here, not when a thread frees

    def _work(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._closed:
                    self._idle += 1
                    self._wake.wait()
                    self._idle -= 1
                if not self._queue:
                    return  # closed
                _, call = self._queue.popitem(last=False)
                self._waiting.remove(call.run, call.weight)
            _run(call.future, call.invocation)
            del call

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._wake.notify_all()


def _arguments(invocation: Any) -> tuple[Callable[..., Any], dict | list]:
    """The function of a call that starts now, and its arguments made from the guest's JSON
    (a dict of keyword arguments, or a list of positional ones)."""
    function, text, keywords = invocation.take()
    arguments = json.loads(text)
    if keywords != isinstance(arguments, dict):
        raise TypeError("the arguments are not of the kind the call takes")
    return function, arguments


def _run(future: concurrent.futures.Future, invocation: Any) -> None:
    """One synchronous call, on a pool thread (its arguments go when it returns)."""
    if not future.set_running_or_notify_cancel():
        return
    try:
        function, arguments = _arguments(invocation)
        del invocation
        result = function(**arguments) if isinstance(arguments, dict) else function(*arguments)
    except BaseException as error:  # KeyboardInterrupt too: the extension re-raises it
        future.set_exception(error)
    else:
        future.set_result(result)


def _serve(loop: asyncio.AbstractEventLoop, closing: threading.Event) -> None:
    asyncio.set_event_loop(loop)
    while not closing.is_set():
        try:
            loop.run_forever()
        except BaseException:
            # A tool's KeyboardInterrupt or SystemExit leaves the loop; its call's future
            # holds it, and the run that made the call re-raises it. The loop goes on.
            continue
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()


class _Inbox:
    """The coroutine calls waiting for one event loop to start them: one callback on the
    loop at a time starts all that wait, so that a loop kept busy holds one callback, and a
    cancelled call leaves the inbox at once (as a queued sync call leaves the pool's)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, waiting: _Waiting) -> None:
        self._loop = loop
        self._waiting = waiting
        self._lock = waiting.lock
        self._calls: collections.OrderedDict[int, _Call] = collections.OrderedDict()
        self._next = 0
        self._scheduled = False

    def submit(self, run: RunCalls, name: str, invocation: Any, weight: int) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            refusal = self._waiting.refusal(run, name, weight, "the event loop")
            if refusal is not None:
                return _refused(refusal)
            key = self._next
            self._next += 1
            self._calls[key] = _Call(future, invocation, run, weight)
            self._waiting.add(run, weight)
            schedule, self._scheduled = not self._scheduled, True
        del invocation
        future.add_done_callback(lambda done: done.cancelled() and self._forget(key))
        if schedule:
            try:
                self._loop.call_soon_threadsafe(self._start)
            except RuntimeError:  # the loop is closed: nothing will start the calls
                self._start_none(f"{name} was refused: its event loop is closed")
        return future

    def _forget(self, key: int) -> None:
        with self._lock:
            call = self._calls.pop(key, None)
            if call is not None:
                self._waiting.remove(call.run, call.weight)
        del call  # its invocation (the arguments) goes now, whether the loop is free or not

    def _take(self) -> list[_Call]:
        with self._lock:
            calls = list(self._calls.values())
            self._calls.clear()
            self._scheduled = False
            for call in calls:
                self._waiting.remove(call.run, call.weight)
        return calls

    def _start_none(self, why: str) -> None:
        for call in self._take():
            if not call.future.done():
                call.future.set_exception(ToolError(why))

    def _start(self) -> None:
        """On the loop: start every call that waits."""
        for call in self._take():
            future, invocation = call.future, call.invocation
            del call
            if future.cancelled():
                continue
            try:
                function, arguments = _arguments(invocation)
                del invocation
                coroutine = function(**arguments) if isinstance(arguments, dict) else function(*arguments)
                del arguments
                task = self._loop.create_task(coroutine)
            except BaseException as error:
                if not future.done():
                    future.set_exception(error)
                continue
            _chain(task, future, self._loop)


def _chain(task: asyncio.Task, future: concurrent.futures.Future, loop: asyncio.AbstractEventLoop) -> None:
    """`future` answers as `task` ends; cancelling `future` cancels `task`."""

    def finish(task: asyncio.Task) -> None:
        if future.done():
            return
        if task.cancelled():
            future.cancel()
        elif task.exception() is not None:
            future.set_exception(task.exception())
        else:
            future.set_result(task.result())

    def cancelled(done: concurrent.futures.Future) -> None:
        if done.cancelled() and not task.done():
            try:
                loop.call_soon_threadsafe(task.cancel)
            except RuntimeError:
                pass  # the loop is closed

    task.add_done_callback(finish)
    future.add_done_callback(cancelled)


class RunCalls:
    """One run's calls: where they go (its Sandbox's `HostCalls`) and what of them waits."""

    __slots__ = ("_host", "calls")

    def __init__(self, host: HostCalls) -> None:
        self._host = host
        self.calls = 0

    def call(self, name: str, invocation: Any, weight: int) -> concurrent.futures.Future:
        """A synchronous call of tool `name` (`invocation.take()` gives the function and
        its arguments), on the pool."""
        return self._host._pool.submit(self, name, invocation, weight)

    def schedule(self, name: str, invocation: Any, weight: int, loop: asyncio.AbstractEventLoop | None) -> concurrent.futures.Future:
        """A coroutine call of tool `name` (`invocation.take()`) on `loop`
        (the caller's, for `run_async`), else on the Sandbox's loop. Until the loop gets to
        it the call waits as a queued sync call does, within the same bounds."""
        return self._host._inbox(loop).submit(self, name, invocation, weight)


class HostCalls:
    """The threads and the event loop a Sandbox's host tools run on."""

    def __init__(self, threads: int, queue: int) -> None:
        self._waiting = _Waiting(queue)
        self._pool = _Pool(threads, self._waiting)
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._inboxes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Inbox] = weakref.WeakKeyDictionary()
        self._closing = threading.Event()

    def run(self) -> RunCalls:
        """The calls of one more run."""
        return RunCalls(self)

    def _inbox(self, loop: asyncio.AbstractEventLoop | None) -> _Inbox:
        """Where coroutine calls wait for `loop` (the caller's), else for the Sandbox's."""
        loop = loop or self._own_loop()
        with self._lock:
            inbox = self._inboxes.get(loop)
            if inbox is None:
                inbox = self._inboxes[loop] = _Inbox(loop, self._waiting)
            return inbox

    def _own_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(
                    target=_serve, args=(loop, self._closing), name="sandpy-host-loop", daemon=True
                ).start()
                self._loop = loop
            return self._loop

    def close(self) -> None:
        """End the threads and the loop (calls still running finish first)."""
        self._closing.set()
        self._pool.close()
        with self._lock:
            loop, self._loop = self._loop, None
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(loop.stop)

    def __del__(self) -> None:
        self.close()


async def awaited(future: Any) -> Any:
    """`future` as a coroutine (what `asyncio.create_task` takes)."""
    return await future
