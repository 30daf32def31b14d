"""Sessions keep state between runs; save/restore and fork rebuild it; close frees it."""

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
