"""Host tools under the run's limits (issue 47): the guest hostile, the host tools ordinary
code. Whatever a tool does, the run ends at its deadline and gives its slot back; calls
the run abandons are cancelled; the host holds a bounded batch; Ctrl-C and `SystemExit`
stay the host program's; a host exception tells the guest only what the host chose."""

import asyncio
import inspect
import os
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import sandpy

GATHER = """
import asyncio, time
async def main():
    start = time.monotonic()
    got = await asyncio.gather(*(tools.host.{tool}(i=i) for i in range({n})))
    return got, time.monotonic() - start
asyncio.run(main())
"""


def blocked_until(event, seconds=20):
    """A sync tool that blocks its thread until `event` is set (or `seconds` pass)."""

    def tool():
        event.wait(seconds)
        return "finished"

    return tool


def fds():
    return len(os.listdir("/proc/self/fd"))


# 1. A synchronous tool does not hold the run past its deadline.


def test_a_sync_tool_does_not_hold_the_run_past_its_deadline(sb):
    release = threading.Event()
    try:
        started = time.monotonic()
        r = sb.run(
            "try:\n    tools.host.b()\nexcept ToolError:\n    pass\n'swallowed'",
            tools={"b": blocked_until(release)},
            timeout_ms=2000,
        )
        elapsed = time.monotonic() - started
    finally:
        release.set()
    assert r.status == "timeout", r.error
    assert r.error.message == (
        "the run exceeded its wall-clock limit of 2000 ms while waiting for mcp__host__b"
    )
    assert elapsed < 5, f"a 2 s limit against a 20 s tool took {elapsed:.1f} s"


def test_sync_calls_of_one_batch_run_concurrently_up_to_the_bound(sb):
    def nap(i):
        time.sleep(0.1)
        return i

    # 40 calls of 100 ms on 16 threads: three rounds, not forty.
    r = sb.run(GATHER.format(tool="nap", n=40), tools={"nap": nap}, timeout_ms=20000)
    assert r.ok, r.error
    got, elapsed = r.return_value
    assert got == list(range(40))
    assert elapsed < 2.0, f"forty 0.1 s calls took {elapsed:.2f} s"
    # The bound holds: two threads, six calls of 200 ms, three rounds.
    two = sandpy.Sandbox(tool_threads=2)

    def slower(i):
        time.sleep(0.2)
        return threading.current_thread().name

    r = two.run(GATHER.format(tool="slower", n=6), tools={"slower": slower}, timeout_ms=20000)
    assert r.ok, r.error
    names, elapsed = r.return_value
    assert len(set(names)) == 2 and elapsed >= 0.55, (names, elapsed)
    with pytest.raises(ValueError, match="tool_threads must be at least 1"):
        sandpy.Sandbox(tool_threads=0)


def test_the_run_slot_comes_back_at_the_deadline(sb):
    # As many runs as the machine has slots wait on a tool that never answers in time;
    # one more run gets a slot when their deadlines pass, not when the tool returns.
    release = threading.Event()
    slots = os.cpu_count() or 2
    waits = "tools.host.b()"
    try:
        started = time.monotonic()
        with ThreadPoolExecutor(slots + 1) as pool:
            stuck = [
                pool.submit(sb.run, waits, tools={"b": blocked_until(release)}, timeout_ms=1500)
                for _ in range(slots)
            ]
            time.sleep(0.3)
            after = pool.submit(sb.run, "'after'", timeout_ms=20000)
            results = [f.result() for f in stuck]
            last = after.result()
        elapsed = time.monotonic() - started
    finally:
        release.set()
    assert [r.status for r in results] == ["timeout"] * slots
    assert last.ok and last.return_value == "after", last.error
    assert elapsed < 10, f"{elapsed:.1f} s"


# 2. Abandoned async calls are cancelled; threads and descriptors are bounded.


def test_abandoned_async_calls_are_cancelled_when_a_sync_run_ends(sb):
    cancelled = []
    finished = []

    async def forever(i):
        try:
            await asyncio.sleep(3600)
            finished.append(i)
        except asyncio.CancelledError:
            cancelled.append(i)
            raise

    async def ready():
        return 1

    assert sb.run("tools.host.ready()", tools={"ready": ready}).ok  # the Sandbox's loop runs
    threads, descriptors = threading.active_count(), fds()
    r = sb.run(GATHER.format(tool="forever", n=300), tools={"forever": forever}, timeout_ms=2000)
    assert r.status == "timeout", r.error
    assert "while waiting for mcp__host__forever (300 calls)" in r.error.message
    deadline = time.monotonic() + 5
    while len(cancelled) < 300 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(cancelled) == 300 and finished == []
    # One loop for every call: no thread or descriptor per call, none left behind.
    assert threading.active_count() <= threads + 1
    # A few each for the instances made ahead for the next runs (up to four wait, each with
    # its run folder), far below one per call.
    assert fds() <= descriptors + 16
    # A run with files and an async tool still works.
    r = sb.run("open('/tmp/a.txt').read()", files={"a.txt": "x"}, timeout_ms=20000)
    assert r.ok and r.return_value == "x", r.error


def test_run_async_cancels_its_tool_calls_at_its_deadline_and_when_cancelled(sb):
    landed = []
    cancelled = []

    async def slow(i):
        try:
            await asyncio.sleep(3)
            landed.append(i)  # a side effect after the run ended
        except asyncio.CancelledError:
            cancelled.append(i)
            raise

    async def main():
        r = await sb.run_async(GATHER.format(tool="slow", n=5), tools={"slow": slow}, timeout_ms=1500)
        assert r.status == "timeout", r.error
        await asyncio.sleep(0.2)
        assert sorted(cancelled) == list(range(5))
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(
                sb.run_async(GATHER.format(tool="slow", n=5), tools={"slow": slow}, timeout_ms=60000),
                timeout=1.5,
            )
        await asyncio.sleep(0.5)
        assert len(cancelled) == 10
        await asyncio.sleep(3)  # past when the calls would have finished

    asyncio.run(main())
    assert landed == []


# 3. The host holds a bounded batch.


def test_a_batch_whose_arguments_expand_on_the_host_is_refused_before_it_is_held(sb):
    # 1.5 million empty lists: about 6 MB of JSON each (under the 8 MiB cap), but a list
    # object each on the host. Two calls fit the batch's 128 MiB budget; the others are
    # refused before their arguments are parsed.
    seen = []

    def count(a):
        seen.append(len(a))
        return len(a)

    code = textwrap.dedent(
        """
        import asyncio
        args = {'a': [[] for _ in range(1_500_000)]}
        async def one():
            try:
                return await call_mcp_tool('mcp__host__count', args)
            except ToolError as e:
                return str(e)
        await asyncio.gather(*(one() for _ in range(4)))
        """
    )
    r = sb.run(code, tools={"count": count}, timeout_ms=60000, memory_mb=1024)
    assert r.ok, r.error
    assert r.return_value[:2] == [1_500_000, 1_500_000], r.return_value
    for refused in r.return_value[2:]:
        assert refused.startswith("arguments of mcp__host__count would take about "), refused
        assert "of the batch's limit of 134217728 bytes" in refused
    assert seen == [1_500_000, 1_500_000]


# 4. Ctrl-C and SystemExit are the host program's.


def test_keyboard_interrupt_in_a_host_tool_reaches_the_host_program(sb):
    def interrupted():
        raise KeyboardInterrupt

    async def exits():
        raise SystemExit(3)

    swallow = "try:\n    tools.host.{}()\nexcept ToolError:\n    pass\nwhile True: pass"
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        sb.run(swallow.format("interrupted"), tools={"interrupted": interrupted}, timeout_ms=20000)
    with pytest.raises(SystemExit):
        sb.run(swallow.format("exits"), tools={"exits": exits}, timeout_ms=20000)

    async def main():
        with pytest.raises(KeyboardInterrupt):
            await sb.run_async(
                swallow.format("interrupted"), tools={"interrupted": interrupted}, timeout_ms=20000
            )

    asyncio.run(main())
    assert time.monotonic() - started < 10
    # The Sandbox's loop survived the SystemExit.
    async def fine():
        return "fine"

    assert sb.run("tools.host.fine()", tools={"fine": fine}).return_value == "fine"


CTRL_C = textwrap.dedent(
    """
    import os, signal, threading, time, sandpy
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started with it ignored
    sb = sandpy.Sandbox()
    s = sb.session()
    assert s.run("x = 1").ok
    for run in (lambda: sb.run("while True: pass", timeout_ms=30000),
                lambda: s.run("while True: pass", timeout_ms=30000)):
        threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
        started = time.monotonic()
        try:
            run()
            print("not interrupted")
        except KeyboardInterrupt:
            print("interrupted", round(time.monotonic() - started))
    print(s.run("x").status)
    """
)


def test_ctrl_c_interrupts_a_synchronous_run():
    out = subprocess.run([sys.executable, "-c", CTRL_C], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[:2] == ["interrupted 1", "interrupted 1"], out.stdout
    # The session's run was stopped as a timeout stops one: the session is poisoned.
    assert lines[2] == "session_poisoned", out.stdout


# 5. What host errors tell the model.


def test_host_errors_pass_a_tool_errors_message_and_only_the_type_of_others(sb):
    def leaks():
        raise KeyError("sk-live-1234 in /home/me/.secrets")

    def refuses():
        raise sandpy.ToolError("no such user")

    code = "out = []\nfor t in (tools.host.leaks, tools.host.refuses):\n    try:\n        t()\n    except ToolError as e:\n        out.append(str(e))\nout"
    tools = {"leaks": leaks, "refuses": refuses}
    r = sb.run(code, tools=tools)
    assert r.return_value == ["host tool mcp__host__leaks raised KeyError", "no such user"]
    assert "sk-live" not in r.stdout + r.stderr
    telling = sandpy.Sandbox(tool_error_messages=True)
    r = telling.run(code, tools=tools)
    assert r.return_value == [
        "KeyError: 'sk-live-1234 in /home/me/.secrets'", "no such user"]


# 6. Sessions, create_task, policies.


def test_cancelling_a_sessions_run_async_poisons_it(sb):
    with sb.session() as s:
        assert s.run("x = 1").ok

        async def main():
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(s.run_async("while True: pass", timeout_ms=60000), 1.0)

        asyncio.run(main())
        r = s.run("x")
        assert r.status == "session_poisoned", r.error
        assert "cancelled" in r.error.message
        s.reset()
        assert s.run("1").ok


def test_run_async_returns_a_coroutine_for_create_task(sb):
    async def main():
        run = sb.run_async("6 * 7")
        assert inspect.iscoroutine(run)
        task = asyncio.create_task(run)
        batch = asyncio.create_task(sb.call_batch_async("def f(x): return x", "f", [[1], [2]]))
        return (await task).return_value, [e.return_value for e in await batch]

    assert asyncio.run(main()) == (42, [1, 2])


def test_a_policy_that_hides_the_host_tools_warns(sb):
    with pytest.warns(UserWarning, match="the policy \"strict\" allows none of the host tools"):
        r = sb.run("1", tools={"lookup": lambda key: key}, policy="strict")
    assert r.ok


def test_a_sync_approve_hook_does_not_hold_the_run_past_its_deadline(sb):
    # The hook is host code as a tool is: it runs on the pool, the deadline holds.
    release = threading.Event()

    def approve(tool, arguments):
        release.wait(20)
        return True

    try:
        started = time.monotonic()
        r = sb.run("tools.host.lookup(key='k')", tools={"lookup": lambda key: key},
                   approve=approve, require_approval=["mcp__host__lookup"], timeout_ms=2000)
        elapsed = time.monotonic() - started
    finally:
        release.set()
    assert r.status == "timeout", r.error
    assert r.error.message == ("the run exceeded its wall-clock limit of 2000 ms while "
                               "waiting for the approval of mcp__host__lookup")
    assert elapsed < 5, f"{elapsed:.1f} s"
