"""Host tools: Python callables the sandboxed code calls as the MCP server `host`."""

import asyncio
import time

import pytest


def lookup(key):
    """Look a key up."""
    return {"value": key.upper()}


def broken(**_):
    raise KeyError("no such user")


async def slow_echo(value, delay=0.3):
    await asyncio.sleep(delay)
    return value


GATHER = """
import asyncio, time
async def main():
    start = time.monotonic()
    got = await asyncio.gather(*(tools.host.slow_echo(value=i) for i in range(3)))
    return got, time.monotonic() - start
asyncio.run(main())
"""


def test_sync_host_function_is_a_tool(sb):
    code = "a = tools.host.lookup(key='ab')\nb = call_mcp_tool('mcp__host__lookup', {'key': 'c'})\n[a, b]"
    r = sb.run(code, tools={"lookup": lookup})
    assert r.status == "ok", r.error
    assert r.return_value == [{"value": "AB"}, {"value": "C"}]
    assert r.tool_calls == 2
    r = sb.run("[t['name'] for t in discover_mcp_tools()]", tools={"lookup": lookup})
    assert r.return_value == ["mcp__host__lookup"]


def test_exceptions_reach_the_guest_as_tool_error(sb):
    code = "try:\n    tools.host.broken()\nexcept ToolError as e:\n    msg = str(e)\nmsg"
    r = sb.run(code, tools={"broken": broken})
    # Its type and the tool's name only (test_host_limits has the rest of the rule).
    assert r.ok and r.return_value == "host tool mcp__host__broken raised KeyError"
    r = sb.run("tools.host.lookup(key='x', extra=1)", tools={"lookup": lookup})
    assert r.status == "error" and r.error.type == "ToolError" and "TypeError" in r.error.message
    r = sb.run("tools.host.bad()", tools={"bad": lambda: {1, 2}})
    assert r.error.type == "ToolError" and "not JSON" in r.error.message


def test_async_host_functions_run_concurrently_in_a_sync_run(sb):
    r = sb.run(GATHER, tools={"slow_echo": slow_echo})
    assert r.status == "ok", r.error
    got, elapsed = r.return_value
    assert got == [0, 1, 2]
    assert elapsed < 0.8, f"three 0.3 s calls took {elapsed:.2f} s"


def test_async_host_functions_run_on_the_callers_loop(sb):
    loops = []

    async def where(value):
        loops.append(asyncio.get_running_loop())
        return await slow_echo(value)

    async def main():
        started = time.monotonic()
        r = await sb.run_async(GATHER.replace("slow_echo", "where"), tools={"where": where})
        return r, time.monotonic() - started, asyncio.get_running_loop()

    r, elapsed, loop = asyncio.run(main())
    assert r.status == "ok", r.error
    assert r.return_value[0] == [0, 1, 2] and r.return_value[1] < 0.8
    assert loops == [loop] * 3


def test_allowed_tools_narrow_host_tools(sb):
    tools = {"lookup": lookup, "broken": broken}
    r = sb.run("tools.host.broken()", tools=tools, allowed_tools=["mcp__host__lookup"])
    assert r.error.type in ("ToolError", "AttributeError") and "broken" in r.error.message


@pytest.mark.parametrize("tools, exc, words", [
    (["lookup"], TypeError, "tools must be a dict"),
    ({"lookup": 5}, TypeError, "must be callable"),
    ({"_private": lookup}, ValueError, "not a usable tool name"),
    ({"a-b": lookup}, ValueError, "not a usable tool name"),
    ({1: lookup}, TypeError, "names must be str"),
])
def test_bad_tools(sb, tools, exc, words):
    with pytest.raises(exc, match=words):
        sb.run("1", tools=tools)


SCHEMA = {
    "type": "object",
    "properties": {"key": {"type": "string"}},
    "required": ["key"],
    "additionalProperties": False,
}


def test_a_schema_checks_arguments_before_the_call(sb):
    calls = []

    def checked(key):
        calls.append(key)
        return key

    tools = {"checked": (checked, SCHEMA)}
    assert sb.run("tools.host.checked(key='ok')", tools=tools).return_value == "ok"
    r = sb.run("tools.host.checked(key=5)", tools=tools)
    assert r.error.type == "ToolError" and "inputSchema" in r.error.message
    assert "5 is not of type" in r.error.message
    assert calls == ["ok"], "a call with bad arguments must not reach the function"
    r = sb.run("get_tool_schema('mcp__host__checked')", tools=tools)
    assert r.return_value == SCHEMA


@pytest.mark.parametrize("schema, exc, words", [
    ([1], TypeError, "must be a dict"),
    ({"type": 5}, ValueError, "the schema: it does not compile"),
])
def test_bad_schemas(sb, schema, exc, words):
    with pytest.raises(exc, match=words):
        sb.run("1", tools={"f": (lookup, schema)})


def write(path):
    """Write a file (for the approval tests: records what reached it)."""
    WRITTEN.append(path)
    return {"written": path}


WRITTEN: list[str] = []

WRITE_TWO = """
out = []
for path in ['ok.txt', 'secret.txt']:
    try:
        out.append(tools.host.write(path=path))
    except ToolError as e:
        out.append(str(e))
out.append(tools.host.lookup(key='k'))
out
"""


def test_approve_decides_on_calls_that_need_it(sb):
    WRITTEN.clear()
    asked = []

    def approve(tool, arguments):
        asked.append((tool, arguments))
        return arguments["path"] == "ok.txt"

    tools = {"write": write, "lookup": lookup}
    r = sb.run(WRITE_TWO, tools=tools, approve=approve, require_approval=["mcp__host__write"])
    assert r.ok, r.error
    assert r.return_value == [
        {"written": "ok.txt"}, "the user declined mcp__host__write", {"value": "K"}]
    assert WRITTEN == ["ok.txt"]  # the declined call never reached the function
    assert asked == [("mcp__host__write", {"path": "ok.txt"}), ("mcp__host__write", {"path": "secret.txt"})]
    # Nobody to ask: refused, never allowed.
    r = sb.run(WRITE_TWO, tools=tools, require_approval=["mcp__host__write"])
    assert "needs approval" in r.return_value[0] and WRITTEN == ["ok.txt"]
    # A hook that raises refuses the call, naming the exception.
    def broken(tool, arguments):
        raise RuntimeError("hook broke")

    r = sb.run(WRITE_TWO, tools=tools, approve=broken, require_approval=["mcp__host__w*"])
    assert "RuntimeError: hook broke" in r.return_value[0], r.return_value
    with pytest.raises(TypeError, match="approve must be a callable"):
        sb.run("1", approve=3)
    with pytest.raises(ValueError, match="require_approval"):
        sb.run("1", require_approval=["["])


def test_async_approve_runs_on_the_callers_loop_and_in_a_sync_run(sb):
    WRITTEN.clear()
    loops = []

    async def approve(tool, arguments):
        loops.append(asyncio.get_running_loop())
        await asyncio.sleep(0.01)
        return arguments["path"] != "secret.txt"

    tools = {"write": write, "lookup": lookup}
    r = sb.run(WRITE_TWO, tools=tools, approve=approve, require_approval=["mcp__host__write"])
    assert r.return_value[1] == "the user declined mcp__host__write", r.return_value

    async def main():
        r = await sb.run_async(WRITE_TWO, tools=tools, approve=approve,
                               require_approval=["mcp__host__write"])
        return r, asyncio.get_running_loop()

    r, loop = asyncio.run(main())
    assert r.return_value[0] == {"written": "ok.txt"}, r.return_value
    assert loops[-2:] == [loop, loop]
    assert WRITTEN == ["ok.txt", "ok.txt"]
