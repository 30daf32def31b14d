"""Tests of sandpy_guest.event_loop, run inside the sandbox."""

import asyncio
import time

from sandpy_guest.event_loop import SandboxEventLoop


def test_asyncio_run_uses_the_sandbox_loop() -> None:
    async def which() -> type:
        return type(asyncio.get_running_loop())

    assert asyncio.run(which()) is SandboxEventLoop


def test_new_event_loop_is_the_sandbox_loop() -> None:
    loop = asyncio.new_event_loop()
    try:
        assert isinstance(loop, SandboxEventLoop)
        assert loop.run_until_complete(asyncio.sleep(0, result=5)) == 5
    finally:
        loop.close()


def test_timers_fire_in_order() -> None:
    order: list[int] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        loop.call_later(0.03, order.append, 3)
        loop.call_later(0.01, order.append, 1)
        loop.call_soon(order.append, 0)
        loop.call_later(0.04, done.set_result, None)
        await done

    asyncio.run(main())
    assert order == [0, 1, 3]


def test_wait_for_times_out() -> None:
    async def main() -> str:
        try:
            await asyncio.wait_for(asyncio.sleep(5), timeout=0.02)
        except TimeoutError:
            return "timed out"
        return "not"

    started = time.monotonic()
    assert asyncio.run(main()) == "timed out"
    assert time.monotonic() - started < 1


async def test_tasks_and_queues() -> None:
    queue: asyncio.Queue[int] = asyncio.Queue()

    async def producer() -> None:
        for i in range(5):
            await queue.put(i)
            await asyncio.sleep(0)

    async def consumer() -> list[int]:
        return [await queue.get() for _ in range(5)]

    _, got = await asyncio.gather(producer(), consumer())
    assert got == [0, 1, 2, 3, 4]


def test_requests_awaited_together_go_to_the_host_as_one_batch() -> None:
    from sandpy_guest import network

    batches: list[list[str]] = []
    real = network.host.fetch_many

    def recording(requests: list) -> list:
        batches.append([r.url for r in requests])
        return real(requests)

    async def main() -> list[str]:
        async def one(url: str) -> str:
            try:
                await network.fetch_soon("GET", url, [], b"", None)
                return "answered"
            except Exception as error:  # componentize-py's `Err`, with the host's refusal
                return type(error.value).__name__  # type: ignore[attr-defined]

        first = await asyncio.gather(one("http://a.example/"), one("http://b.example/"))
        second = await one("http://c.example/")
        return [*first, second]

    network.host.fetch_many = recording  # type: ignore[attr-defined]
    try:
        got = asyncio.run(main())
    finally:
        network.host.fetch_many = real  # type: ignore[attr-defined]
    # No network in this run: each is refused, by the host, in the batch it went in.
    assert got == ["FetchError_Refused"] * 3, got
    assert batches == [["http://a.example/", "http://b.example/"], ["http://c.example/"]], batches


def test_a_task_that_never_lets_the_loop_idle_does_not_starve_requests() -> None:
    from sandpy_guest import network

    async def main() -> tuple[str, int]:
        async def fetch() -> str:
            try:
                await network.fetch_soon("GET", "http://a.example/", [], b"", None)
                return "answered"
            except Exception as error:  # the host's refusal: no network in this run
                return type(error.value).__name__  # type: ignore[attr-defined]

        task = asyncio.ensure_future(fetch())
        spins = 0
        while not task.done():  # never idle: the request goes once it has waited a while
            spins += 1
            await asyncio.sleep(0)
        return task.result(), spins

    started = time.monotonic()
    got, spins = asyncio.run(main())
    assert got == "FetchError_Refused", got
    assert spins > 1 and time.monotonic() - started < 5, (spins, time.monotonic() - started)
