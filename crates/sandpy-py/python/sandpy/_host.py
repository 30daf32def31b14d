"""Where host tools run (used by the extension, not an API of its own).

Each `Sandbox` has one `HostCalls`: a bounded pool of daemon threads for synchronous host
tools and one event loop, on a daemon thread of its own, for coroutine host tools of
synchronous runs (`run_async` uses the caller's loop instead). Every call is a
`concurrent.futures.Future`: the extension awaits it under the run's deadline and cancels
it when the run ends without it (a call still queued never starts; a coroutine gets
`CancelledError`; a synchronous function already running finishes on its thread and its
answer is dropped). The threads and the loop end with the Sandbox.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
from typing import Any, Callable


class _Pool:
    """At most `size` daemon threads running synchronous calls, started as needed."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0
        self._queued = 0

    def submit(self, function: Callable[..., Any], args: tuple, kwargs: dict | None) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            self._queue.put((future, function, args, kwargs or {}))
            self._queued += 1
            if self._queued > self._idle and self._threads < self._size:
                self._threads += 1
                threading.Thread(
                    target=_work,
                    args=(self._queue, self._taken),
                    name=f"sandpy-host-tool-{self._threads}",
                    daemon=True,
                ).start()
        return future

    def _taken(self, waiting: bool) -> None:
        """A thread waits for work (`waiting`) or took some."""
        with self._lock:
            if waiting:
                self._idle += 1
            else:
                self._idle -= 1
                self._queued -= 1

    def close(self) -> None:
        with self._lock:
            threads, self._threads = self._threads, self._size  # no new threads
        for _ in range(threads):
            self._queue.put(None)


def _work(work: queue.SimpleQueue, taken: Callable[[bool], None]) -> None:
    while True:
        taken(True)
        item = work.get()
        taken(False)
        if item is None:
            return
        future, function, args, kwargs = item
        if not future.set_running_or_notify_cancel():
            continue  # its run ended before it started
        try:
            result = function(*args, **kwargs)
        except BaseException as error:  # KeyboardInterrupt too: the extension re-raises it
            future.set_exception(error)
        else:
            future.set_result(result)
        del item, future, function, args, kwargs


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


class HostCalls:
    """The threads and the event loop a Sandbox's host tools run on."""

    def __init__(self, threads: int) -> None:
        self._pool = _Pool(threads)
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing = threading.Event()

    def call(self, function: Callable[..., Any], args: tuple, kwargs: dict | None) -> concurrent.futures.Future:
        """A synchronous function called on the pool."""
        return self._pool.submit(function, args, kwargs)

    def schedule(self, coroutine: Any, loop: asyncio.AbstractEventLoop | None) -> concurrent.futures.Future:
        """A coroutine run on `loop` (the caller's, for `run_async`), else on the Sandbox's loop."""
        return asyncio.run_coroutine_threadsafe(coroutine, loop or self._own_loop())

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
