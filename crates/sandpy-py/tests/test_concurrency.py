"""The GIL is released while runs execute; threads and asyncio runs overlap in time;
cancelling an awaiting task stops its run."""

import asyncio
import threading
import time

import sandpy

# Runs of a second: their starts, slow on a busy machine, stay small beside them.
SLEEP = "import time\ntime.sleep(1)\n'done'"


def test_runs_from_two_threads_overlap_while_python_keeps_running(sb):
    spans = []

    def worker():
        start = time.monotonic()
        r = sb.run(SLEEP)
        spans.append((start, time.monotonic(), r.status))

    ticks = 0
    threads = [threading.Thread(target=worker) for _ in range(2)]
    started = time.monotonic()
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        ticks += 1  # the main thread holds the GIL between ticks: runs must not need it
        time.sleep(0.001)
    elapsed = time.monotonic() - started
    assert [s[2] for s in spans] == ["ok", "ok"]
    (a0, a1, _), (b0, b1, _) = spans
    assert max(a0, b0) < min(a1, b1), "the two runs did not overlap"
    assert elapsed < 1.8, f"two 1 s runs took {elapsed:.2f} s: they ran one after the other"
    assert ticks > 50, f"the main thread ran only {ticks} times during the runs"


def test_run_async_runs_overlap_on_one_loop(sb):
    async def main():
        started = time.monotonic()
        results = await asyncio.gather(sb.run_async(SLEEP), sb.run_async(SLEEP))
        return time.monotonic() - started, results

    elapsed, results = asyncio.run(main())
    assert [r.return_value for r in results] == ["done", "done"]
    assert elapsed < 1.8, f"two 1 s async runs took {elapsed:.2f} s"


def test_run_async_takes_the_same_arguments(sb):
    async def main():
        return await sb.run_async("while True: pass", timeout_ms=100)

    assert asyncio.run(main()).status == "timeout"


def cancel_and_measure(make_awaitable):
    """Start `make_awaitable()` as a task, cancel it after 0.3 s, and return whether it was
    cancelled and the process's CPU seconds over 0.5 s soon after: a busy loop still
    running would burn a core."""

    async def main():
        task = asyncio.ensure_future(make_awaitable())
        await asyncio.sleep(0.3)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        await asyncio.sleep(0.2)
        cpu = time.process_time()
        await asyncio.sleep(0.5)
        return task.cancelled(), time.process_time() - cpu

    return asyncio.run(main())


def test_cancelling_the_task_stops_its_run(sb):
    cancelled, cpu = cancel_and_measure(lambda: sb.run_async("while True: pass", timeout_ms=20_000))
    assert cancelled
    assert cpu < 0.2, f"the process used {cpu:.2f} s of CPU in 0.5 s after the cancel"
    assert sb.run("1").ok


def test_call_function_and_call_batch_async_on_one_loop(sb):
    source = "def f(x):\n    return x * 3"

    async def main():
        one, batch = await asyncio.gather(
            sb.call_function_async(source, "f", [5]),
            sb.call_batch_async(source, "f", [[i] for i in range(10)] + ["bad"], jobs=3),
        )
        return one, batch

    one, batch = asyncio.run(main())
    assert (one.status, one.return_value) == ("ok", 15)
    assert [e.return_value for e in batch[:10]] == [i * 3 for i in range(10)]
    assert batch[10].status == "invalid_input"


def test_cancelling_call_batch_async_stops_its_calls(sb):
    source = "def spin(x):\n    while True:\n        pass"
    cancelled, cpu = cancel_and_measure(
        lambda: sb.call_batch_async(source, "spin", [[i] for i in range(4)], jobs=2, timeout_ms=20_000)
    )
    assert cancelled
    assert cpu < 0.2, f"the process used {cpu:.2f} s of CPU in 0.5 s after the cancel"
