"""Latency and throughput of fresh runs from Python, to set beside `sandpy bench --only hello`.

    python crates/sandpy-py/bench.py [RUNS] [SECONDS]

Prints the p50/p99 of `Sandbox.run("print('hello')")` from one thread, then fresh runs per
second from 1 and 2 Python threads and from `run_async` (16 in flight) for SECONDS each,
then the round trip of a host tool (sandboxed code calling a Python function), timed
inside the sandbox over 1,000 sequential calls.
"""

import asyncio
import statistics
import sys
import threading
import time

import sandpy

CODE = "print('hello')"


def latency(sb, runs):
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        r = sb.run(CODE)
        times.append((time.perf_counter() - start) * 1000)
        assert r.ok
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.99) - 1]


def threads_throughput(sb, n, seconds):
    counts = [0] * n
    stop = time.monotonic() + seconds

    def worker(i):
        while time.monotonic() < stop:
            sb.run(CODE)
            counts[i] += 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.monotonic() - start)


def async_throughput(sb, in_flight, seconds):
    async def main():
        done = 0
        stop = time.monotonic() + seconds

        async def worker():
            nonlocal done
            while time.monotonic() < stop:
                await sb.run_async(CODE)
                done += 1

        start = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(in_flight)))
        return done / (time.monotonic() - start)

    return asyncio.run(main())


TOOL_LOOP = """
import time
start = time.perf_counter()
for i in range(1000):
    tools.host.echo(v=i)
(time.perf_counter() - start) / 1000 * 1000
"""


def tool_round_trip(sb):
    def echo(v):
        return v

    r = sb.run(TOOL_LOOP, tools={"echo": echo})
    assert r.ok, r.error
    return r.return_value


if __name__ == "__main__":
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 3.0
    sb = sandpy.Sandbox()
    sb.run(CODE)
    p50, p99 = latency(sb, runs)
    print(f"Sandbox.run(\"print('hello')\") from Python: p50 {p50:.2f} ms  p99 {p99:.2f} ms ({runs} runs)")
    for n in (1, 2):
        print(f"fresh runs/s from {n} Python thread(s): {threads_throughput(sb, n, seconds):.0f}")
    print(f"fresh runs/s from run_async, 16 in flight: {async_throughput(sb, 16, seconds):.0f}")
    print(f"host tool round trip (sync Python function): {tool_round_trip(sb):.3f} ms per call")
