"""An asyncio event loop for the sandbox.

asyncio's default loop needs a socketpair, which WASI does not have. This loop has no
I/O at all: when no callback is ready it first sends every pending tool call to the host
in one batch, then every pending HTTP request (`network.fetch_soon`) in another (the host
runs each batch concurrently), and otherwise sleeps until the next timer. `asyncio.run`,
top-level `await` and `asyncio.gather` all run on it.
"""

import asyncio
import asyncio.base_events
import asyncio.events
import sys
import time
from typing import Any, Callable

from . import tools


class _NoIOSelector:
    """Stands in for a selector: the only "events" are batches of tool calls and HTTP
    requests, and timers."""

    def select(self, timeout: float | None) -> list[Any]:
        network = sys.modules.get("sandpy_guest.network")  # only when code may fetch
        if timeout == 0:
            # Callbacks are ready: let them queue more calls and requests first, unless
            # requests have waited too long for the loop to be idle.
            if network is not None and network.overdue():
                network.flush_pending()
            return []
        sent_calls = tools.flush_pending()
        if (network is not None and network.flush_pending()) or sent_calls:
            return []
        if timeout is None:
            raise RuntimeError(
                "the event loop has nothing left to run: an awaited future can never "
                "complete (no pending tool calls, requests, timers or tasks)"
            )
        time.sleep(timeout)
        return []

    def close(self) -> None:
        pass


class SandboxEventLoop(asyncio.base_events.BaseEventLoop):
    """A socket-free event loop that batches tool calls and HTTP requests."""

    def __init__(self) -> None:
        super().__init__()
        self._selector = _NoIOSelector()

    def _process_events(self, event_list: list[Any]) -> None:
        pass

    def _write_to_self(self) -> None:
        pass  # single-threaded: nothing else can wake the loop


def install() -> None:
    """Make `asyncio.run`, `asyncio.new_event_loop` and friends use `SandboxEventLoop`."""
    factory: Callable[[], asyncio.AbstractEventLoop] = SandboxEventLoop
    asyncio.events.new_event_loop = factory  # type: ignore[assignment]
    asyncio.new_event_loop = factory  # type: ignore[assignment]
    # 3.14 deprecates the public getter; the native tier may run an older CPython.
    get_policy = getattr(asyncio.events, "_get_event_loop_policy", asyncio.get_event_loop_policy)
    policy = get_policy()
    policy._loop_factory = factory  # type: ignore[attr-defined]


def run(coro: Any) -> Any:
    """Run a coroutine to completion on a fresh loop, like `asyncio.run`."""
    with asyncio.Runner(loop_factory=SandboxEventLoop) as runner:
        return runner.run(coro)
