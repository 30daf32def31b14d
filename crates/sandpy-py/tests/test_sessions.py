"""Sessions keep state between runs; save/restore and fork rebuild it; close frees it."""

import json
import re
import subprocess
import sys
import textwrap
import time

import pytest

import sandpy


def test_state_stays_between_runs(sb):
    with sb.session() as s:
        assert s.run("x = 20\nimport json").ok
        r = s.run("x += 1\njson.dumps(x * 2)")
        assert (r.status, r.return_value) == ("ok", "42")
        assert s.run("raise KeyError('k')").error.type == "KeyError"
        assert s.run("x").return_value == 21, "an exception does not lose the state"
    assert s.closed


def test_save_restore_and_fork(sb):
    s = sb.session()
    s.run("items = [1, 2]")
    s.run("items.append(3)")
    data = s.save()
    assert isinstance(data, bytes)
    restored = sandpy.Session.restore(sb, data)
    assert restored.run("items").return_value == [1, 2, 3]
    fork = s.fork()
    fork.run("items.append('fork')")
    assert s.run("items").return_value == [1, 2, 3]
    assert fork.run("items").return_value == [1, 2, 3, "fork"]
    for one in (s, restored, fork):
        one.close()


def test_reset_forgets_and_limits_poison(sb):
    s = sb.session()
    s.run("y = 1")
    s.reset()
    assert s.run("y").error.type == "NameError"
    assert s.run("while True: pass", timeout_ms=100).status == "timeout"
    assert s.run("1").status == "session_poisoned"
    s.close()


def test_closed_and_bad_data_raise(sb):
    s = sb.session()
    s.close()
    s.close()
    with pytest.raises(ValueError, match="the session is closed"):
        s.run("1")
    with pytest.raises(ValueError, match="not a saved sandpy session"):
        sandpy.Session.restore(sb, b"{}")
    with pytest.raises(TypeError):
        sandpy.Session.restore(sb, "text")
    good = sb.session()
    good.run("z = 1")
    data = good.save().replace(b"sandpy-session/1", b"sandpy-session/99")
    with pytest.raises(sandpy.SessionError, match="unknown session format"):
        sandpy.Session.restore(sb, data)
    assert issubclass(sandpy.SessionError, sandpy.SandboxError)


def test_run_async_and_host_tools_in_a_session(sb):
    import asyncio

    seen = []

    def record(value):
        seen.append(value)
        return value * 2

    async def main():
        s = sb.session()
        await s.run_async("total = 0")
        await s.run_async("total += tools.host.record(value=5)", tools={"record": record})
        r = await s.run_async("total")
        return s, r

    s, r = asyncio.run(main())
    assert r.return_value == 10 and seen == [5]
    with pytest.raises(sandpy.SessionError, match="no MCP server 'host'"):
        sandpy.Session.restore(sb, s.save())
    restored = sandpy.Session.restore(sb, s.save(), tools={"record": record})
    fork = s.fork(tools={"record": record})
    assert restored.run("total").return_value == 10 and fork.run("total").return_value == 10
    assert seen == [5], "a restore answers tool calls from the journal"
    for one in (s, restored, fork):
        one.close()


# A replay (fork, restore) is runs of the guest's code like any other: each cell under the
# limits it ran under, and Ctrl-C stops it (issue 60, part 4).


def spins_after(moment):
    """A cell that ends at once when it runs before `moment` (a time.time()) and spins
    after it: so its replay, made later, spins where the run did not."""
    return f"import time\nif time.time() > {moment}:\n    while True: pass"


def test_a_replay_runs_each_cell_under_its_own_limits(sb):
    s = sb.session()
    moment = time.time() + 2.0
    assert s.run("x = 1").ok
    assert s.run(spins_after(moment), timeout_ms=1000).ok
    data = s.save()
    assert [cell.get("limits") for cell in json.loads(data)["cells"]] == [None, {"timeout_ms": 1000}]
    time.sleep(max(0.0, moment - time.time()) + 0.2)
    diverged = "replaying cell 2 ended timeout where the journal has ok: Timeout: the run exceeded its wall-clock limit of 1000 ms"
    for replay in (s.fork, lambda: sandpy.Session.restore(sb, data)):
        started = time.monotonic()
        with pytest.raises(sandpy.SessionError, match=re.escape(diverged)):
            replay()
        # Its own 1 s, not the Sandbox's 30 s default.
        assert time.monotonic() - started < 8
    assert s.run("x").return_value == 1
    s.close()


CTRL_C_REPLAY = textwrap.dedent(
    """
    import os, signal, threading, time, sandpy
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started with it ignored
    sb = sandpy.Sandbox()
    s = sb.session()
    moment = time.time() + 2.0
    code = f"import time\\nif time.time() > {moment}:\\n    while True: pass"
    assert s.run(code, timeout_ms=60000).ok
    data = s.save()
    time.sleep(max(0.0, moment - time.time()) + 0.2)
    for replay in (s.fork, lambda: sandpy.Session.restore(sb, data)):
        threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
        started = time.monotonic()
        try:
            replay()
            print("not interrupted")
        except KeyboardInterrupt:
            print("interrupted", round(time.monotonic() - started))
    print(s.run("1").status)
    """
)


def test_ctrl_c_interrupts_a_fork_and_a_restore():
    out = subprocess.run(
        [sys.executable, "-c", CTRL_C_REPLAY], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    # Within a second of the signal, not at the replay's 60 s limit; the session the
    # fork was made from is untouched.
    assert out.stdout.splitlines() == ["interrupted 1", "interrupted 1", "ok"], out.stdout
