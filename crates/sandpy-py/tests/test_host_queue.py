"""The host's queue of tool calls waiting to start (issue 60, part 4): the guest hostile,
the host tools ordinary code that may be slow. With every tool thread (or the Sandbox's
event loop) kept busy, later calls wait; what waits is bounded per run and per Sandbox,
a call past a bound fails at once naming it, and a call its run stops waiting for leaves
the queue with its arguments at once, not when a thread frees."""

import asyncio
import json
import subprocess
import sys
import textwrap
import threading
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor

import pytest

import sandpy

# `n` calls of `tool` at once; what each got (its result or its ToolError's text).
GATHER = """
import asyncio
async def one(i):
    try:
        return await tools.host.{tool}(i=i)
    except ToolError as e:
        return str(e)
async def main():
    return await asyncio.gather(*(one(i) for i in range({n})))
asyncio.run(main())
"""


def keeps_its_thread(release):
    def tool(**_):
        release.wait(60)
        return "late"

    return tool


def keeps_the_loop(release):
    async def tool(**_):
        release.wait(60)  # blocks the loop's thread: host code that should not, but may
        return "late"

    return tool


def test_calls_past_the_per_run_bound_are_refused_at_once_naming_it(sb):
    release = threading.Event()
    two = sandpy.Sandbox(tool_threads=1, tool_queue=2)
    slow = keeps_its_thread(release)
    try:
        # The one thread is kept by a call its run abandoned; of six calls of the next
        # run two wait and four are refused at once. The thread frees: the two run.
        assert two.run("tools.host.slow(i=0)", tools={"slow": slow}, timeout_ms=300).status == "timeout"
        with ThreadPoolExecutor(1) as pool:
            run = pool.submit(two.run, GATHER.format(tool="slow", n=6), tools={"slow": slow},
                              timeout_ms=20000)
            time.sleep(1.0)
            release.set()
            r = run.result()
    finally:
        release.set()
    assert r.ok, r.error
    refusal = (
        "mcp__host__slow was refused: 2 calls of this run already wait for one of the "
        "Sandbox's 1 host tool threads, and the host holds at most 2 calls per run "
        "(Sandbox(tool_queue=...)); make fewer calls at once"
    )
    assert r.return_value == ["late", "late"] + [refusal] * 4, r.return_value
    # With the thread kept, a run whose calls all wait ends at its deadline naming them:
    # only the two that wait, not the refused.
    release.clear()
    try:
        two.run("tools.host.slow(i=0)", tools={"slow": slow}, timeout_ms=300)
        r = two.run(GATHER.format(tool="slow", n=6), tools={"slow": slow}, timeout_ms=1000)
    finally:
        release.set()
    assert r.status == "timeout", r.error
    assert "while waiting for mcp__host__slow (2 calls)" in r.error.message, r.error.message
    with pytest.raises(ValueError, match="tool_queue must be at least 1"):
        sandpy.Sandbox(tool_queue=0)


def test_calls_past_the_per_sandbox_bound_are_refused_and_the_queue_empties_with_its_runs(tmp_path):
    config = tmp_path / "sandpy.json"
    config.write_text(json.dumps({"sandpy": {"max_concurrent_runs": 8}}))
    # One waiting call per run, four per Sandbox; one thread.
    sb = sandpy.Sandbox(config=config, tool_threads=1, tool_queue=1)
    release = threading.Event()
    slow = keeps_its_thread(release)
    waits = "tools.host.slow(i=1)"
    try:
        assert sb.run("tools.host.slow(i=0)", tools={"slow": slow}, timeout_ms=300).status == "timeout"
        # Five runs at once, one call each: four wait, the fifth is refused at once.
        with ThreadPoolExecutor(5) as pool:
            runs = [pool.submit(sb.run, waits, tools={"slow": slow}, timeout_ms=3000)
                    for _ in range(5)]
            results = [f.result() for f in runs]
        statuses = sorted(r.status for r in results)
        assert statuses == ["error", "timeout", "timeout", "timeout", "timeout"], statuses
        refused = next(r for r in results if r.status == "error")
        assert refused.error.type == "ToolError"
        assert refused.error.message == (
            "mcp__host__slow was refused: 4 calls of this Sandbox's runs already wait for one "
            "of the Sandbox's 1 host tool threads, and the host holds at most 4 calls per "
            "Sandbox (4 times tool_queue); make fewer calls at once"
        ), refused.error.message
        # Their runs ended, so their calls left the queue though the thread is still kept:
        # eight runs more, one after another, each gets its call queued (a timeout), never
        # refused.
        for _ in range(8):
            r = sb.run(waits, tools={"slow": slow}, timeout_ms=200)
            assert r.status == "timeout", r.error
    finally:
        release.set()


def test_coroutine_calls_waiting_for_a_kept_loop_leave_it_with_their_runs():
    # An `async def` tool that blocks the Sandbox's loop keeps every later coroutine call
    # waiting; they are bounded as queued sync calls are, and leave with their runs.
    release = threading.Event()
    sb = sandpy.Sandbox(tool_queue=1)
    hog = keeps_the_loop(release)

    async def fine(**_):
        return "fine"

    tools = {"hog": hog, "fine": fine}
    try:
        assert sb.run("tools.host.hog(i=0)", tools=tools, timeout_ms=300).status == "timeout"
        r = sb.run(GATHER.format(tool="fine", n=3), tools=tools, timeout_ms=3000)
        assert r.status == "timeout", r.error
        assert "while waiting for mcp__host__fine" in r.error.message
        for _ in range(8):  # twice the Sandbox's bound: the cancelled calls left
            r = sb.run("tools.host.fine(i=1)", tools=tools, timeout_ms=200)
            assert r.status == "timeout", r.error
    finally:
        release.set()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        r = sb.run("tools.host.fine(i=2)", tools=tools, timeout_ms=5000)
        if r.ok:
            break
    assert r.ok and r.return_value == "fine", r.error


# Runs in a fresh interpreter, so that its RSS is this attack's alone.
FLOOD = textwrap.dedent(
    """
    import os, sys, threading, time, sandpy

    def rss_mb():
        # Anonymous memory: the compiled runtime's file-backed pages come and go with the
        # page cache (26 MB at a time), whatever the runs do.
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("RssAnon:")) / 1024

    release = threading.Event()

    def slow(**kwargs):
        release.wait(300)
        return "late"

    sb = sandpy.Sandbox()
    keep = "import asyncio\\nasync def main():\\n    await asyncio.gather(*(tools.host.slow(i=i) for i in range(16)))\\nasyncio.run(main())"
    # Sixteen calls of {}-filled arguments at once, within the batch's budget (about
    # 8 MiB each as the library counts, 32 bytes a value): as Python objects about
    # 18 MB each.
    flood = (
        "import asyncio\\n"
        "args = {'a': [{}] * 230_000}\\n"
        "async def main():\\n"
        "    await asyncio.gather(*(call_mcp_tool('mcp__host__slow', args) for _ in range(16)),\\n"
        "                         return_exceptions=True)\\n"
        "asyncio.run(main())"
    )
    r = sb.run(keep, tools={"slow": slow}, timeout_ms=1000)
    assert r.status == "timeout", r.error
    # One flood first: what any run with these arguments leaves (its instance's pages, the
    # allocator's), the same when a free thread answers its calls at once.
    assert sb.run(flood, tools={"slow": slow}, timeout_ms=3000).status == "timeout"
    start = rss_mb()
    for _ in range(6):
        r = sb.run(flood, tools={"slow": slow}, timeout_ms=3000)
        assert r.status == "timeout", r.error
        print(round(rss_mb()), file=sys.stderr)
    after = rss_mb()
    release.set()
    print(round(start), round(after))
    """
)


def test_host_memory_stays_flat_while_runs_flood_a_kept_pool():
    # Before issue 60: +255 MB a run (the waiting calls' Python arguments stayed queued
    # until a thread freed), 1.6 GB after six.
    out = subprocess.run([sys.executable, "-c", FLOOD], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    start, after = map(int, out.stdout.split())
    assert after - start < 50, f"RSS {start} MB before six runs, {after} MB after ({out.stderr})"


def test_a_lagging_stream_holds_at_most_its_pieces_not_an_object_per_write():
    # What `sandpy.stream` keeps for a consumer that does not take it: 200,000 one-byte
    # writes, alternating stdout and stderr (the worst case for joining), from the run's
    # thread. At most PIECES pieces wait, no text is lost, each stream's text in order, and
    # the host holds about the text (a list item, tuple and str per write were ~200 bytes).
    from sandpy._stream import PIECES, _Pieces

    async def main():
        pieces = _Pieces(asyncio.get_running_loop())

        def write():
            for i in range(100_000):
                pieces.add("stdout", "x" if i % 2 else "a")
                pieces.add("stderr", "y")

        tracemalloc.start()
        await asyncio.to_thread(write)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        await pieces.ready.wait()
        return pieces.take(), peak

    items, peak = asyncio.run(main())
    assert len(items) <= PIECES, len(items)
    assert "".join(i.text for i in items if i.stream == "stdout") == "ax" * 50_000
    assert "".join(i.text for i in items if i.stream == "stderr") == "y" * 100_000
    assert peak < 4 << 20, f"{peak} bytes held for 200,000 bytes of output"
