"""`sandpy.stream`: a run's output as an async iterator, for code that prefers `async for`
to an `on_output` callback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, NamedTuple, Protocol

from ._sandpy import Execution


class Output(NamedTuple):
    """What the program wrote, as it wrote it: `stream` is `"stdout"` or `"stderr"`."""

    stream: str
    text: str


class _Runs(Protocol):
    def run_async(self, code: str, **options: Any) -> Any: ...


async def stream(runner: _Runs, code: str, **options: Any) -> AsyncIterator[Output | Execution]:
    """Run `code` with `runner.run_async` (a `Sandbox` or a `Session`, with the same keyword
    options) and yield what the program writes as `Output(stream, text)` items while it
    runs, then its `Execution` last. Leaving the loop early (or cancelling the task that
    iterates) stops the run.

    >>> async for item in sandpy.stream(sb, "print('a')"):
    ...     print(item)

    What is queued is bounded by the run's output cap: the sink gets only what the cap
    lets through.
    """
    if "on_output" in options:
        raise TypeError("stream() makes its own on_output; pass the rest of the options only")
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Output] = asyncio.Queue()

    def on_output(stream_name: str, text: str) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, Output(stream_name, text))

    run = asyncio.ensure_future(runner.run_async(code, on_output=on_output, **options))
    try:
        while True:
            got = asyncio.ensure_future(queue.get())
            await asyncio.wait({got, run}, return_when=asyncio.FIRST_COMPLETED)
            if got.done():
                yield got.result()
                continue
            got.cancel()
            execution = run.result()
            # Output written before the end is queued by now (the sink runs first).
            await asyncio.sleep(0)
            while not queue.empty():
                yield queue.get_nowait()
            yield execution
            return
    finally:
        if not run.done():
            run.cancel()
            try:
                await run
            except asyncio.CancelledError:
                pass
