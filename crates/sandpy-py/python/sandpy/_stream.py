"""`sandpy.stream`: a run's output as an async iterator, for code that prefers `async for`
to an `on_output` callback."""

from __future__ import annotations

import asyncio
import collections
import io
import threading
from collections.abc import AsyncIterator
from typing import Any, NamedTuple, Protocol

from ._sandpy import Execution


class Output(NamedTuple):
    """What the program wrote, as it wrote it: `stream` is `"stdout"` or `"stderr"`."""

    stream: str
    text: str


class _Runs(Protocol):
    def run_async(self, code: str, **options: Any) -> Any: ...


# Pieces of output that may wait for the consumer one by one; past that, a stream's later
# writes join its last waiting piece (see `_Pieces`).
PIECES = 256


class _Pieces:
    """What the program wrote and the consumer has not taken yet, filled from the run's
    thread and taken on the loop. Bounded by the run's output cap in text and by `PIECES`
    in pieces: while the consumer keeps up each write is its own piece; when more than
    `PIECES` wait, a stream's writes join its last waiting piece (so the order between
    stdout and stderr is then approximate, no text is lost, and 1-byte writes cost no
    object each). One wake-up is scheduled on the loop at a time, whatever was written."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._pieces: collections.deque[list[Any]] = collections.deque()
        self._last: dict[str, list[Any]] = {}  # each stream's last waiting piece
        self._woken = False
        self.ready = asyncio.Event()

    def add(self, stream_name: str, text: str) -> None:
        with self._lock:
            last = self._last.get(stream_name)
            if len(self._pieces) < PIECES or last is None:
                piece = [stream_name, text]
                self._pieces.append(piece)
                self._last[stream_name] = piece
            else:
                if isinstance(last[1], str):
                    last[1] = io.StringIO(last[1])
                    last[1].seek(0, io.SEEK_END)
                last[1].write(text)
            wake, self._woken = not self._woken, True
        if wake:
            self._loop.call_soon_threadsafe(self.ready.set)

    def take(self) -> list[Output]:
        """On the loop: every piece waiting, in order."""
        with self._lock:
            pieces = list(self._pieces)
            self._pieces.clear()
            self._last.clear()
            self._woken = False
            self.ready.clear()
        return [Output(name, text if isinstance(text, str) else text.getvalue()) for name, text in pieces]


async def stream(runner: _Runs, code: str, **options: Any) -> AsyncIterator[Output | Execution]:
    """Run `code` with `runner.run_async` (a `Sandbox` or a `Session`, with the same keyword
    options) and yield what the program writes as `Output(stream, text)` items while it
    runs, then its `Execution` last. Leaving the loop early (or cancelling the task that
    iterates) stops the run.

    >>> async for item in sandpy.stream(sb, "print('a')"):
    ...     print(item)

    What waits for the loop is bounded by the run's output cap in text and by 256 pieces:
    while the loop keeps up, each write is an item; when it lags further, a stream's later
    writes join its last waiting item.
    """
    if "on_output" in options:
        raise TypeError("stream() makes its own on_output; pass the rest of the options only")
    pieces = _Pieces(asyncio.get_running_loop())
    run = asyncio.ensure_future(runner.run_async(code, on_output=pieces.add, **options))
    ready: asyncio.Future[Any] | None = None
    try:
        while True:
            ready = asyncio.ensure_future(pieces.ready.wait())
            await asyncio.wait({ready, run}, return_when=asyncio.FIRST_COMPLETED)
            for item in pieces.take():
                yield item
            if not run.done():
                continue
            ready.cancel()
            execution = run.result()
            # Output written before the end is waiting by now (the sink runs first).
            await asyncio.sleep(0)
            for item in pieces.take():
                yield item
            yield execution
            return
    finally:
        if ready is not None:
            ready.cancel()
        if not run.done():
            run.cancel()
            try:
                await run
            except asyncio.CancelledError:
                pass
