"""`Sandbox(config=...)` with upstream MCP servers: a real stdio server made with the
official MCP Python SDK, its tools called from sandboxed code beside host tools."""

import json
import sys
import textwrap

import pytest

import sandpy

SERVER = textwrap.dedent('''
    from mcp.server import MCPServer

    server = MCPServer("calc")

    @server.tool()
    def add(a: int, b: int) -> dict:
        """Add two integers."""
        return {"sum": a + b}

    @server.tool()
    def fail(why: str) -> str:
        """Always fails."""
        raise ValueError(why)

    if __name__ == "__main__":
        server.run()
''')


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    """A Sandbox whose config names the `calc` server (started by sandpy over stdio)."""
    folder = tmp_path_factory.mktemp("upstream")
    (folder / "calc_server.py").write_text(SERVER)
    config = folder / "sandpy.json"
    config.write_text(json.dumps({
        "mcpServers": {"calc": {"command": sys.executable, "args": [str(folder / "calc_server.py")]}},
        "sandpy": {"audit_log": str(folder / "audit.jsonl")},
    }))
    return sandpy.Sandbox(config=str(config)), folder


def test_upstream_tools_are_called_from_sandboxed_code(upstream):
    sb, folder = upstream
    r = sb.run(
        "a = tools.calc.add(a=2, b=3)['sum']\n"
        "b = call_mcp_tool('mcp__calc__add', {'a': 10, 'b': -4})['sum']\n"
        "names = sorted(t['name'] for t in discover_mcp_tools())\n"
        "[a, b, names]"
    )
    assert r.ok, r.error
    value = r.return_value
    assert value[:2] == [5, 6] and {"mcp__calc__add", "mcp__calc__fail"} <= set(value[2])
    assert r.tool_calls == 2
    audit = [json.loads(line) for line in (folder / "audit.jsonl").read_text().splitlines()]
    assert any(rec.get("tool") == "mcp__calc__add" for rec in audit), audit


def test_an_upstream_error_is_a_tool_error_in_the_guest(upstream):
    sb, _ = upstream
    r = sb.run("try:\n    tools.calc.fail(why='no luck')\nexcept ToolError as e:\n    why = str(e)\nwhy")
    # The SDK sends `isError` with its own text (it keeps the exception's message to itself).
    assert r.ok and "Error executing tool fail" in r.return_value, r.error


def test_host_tools_and_upstream_tools_in_one_run(upstream):
    sb, _ = upstream
    r = sb.run(
        "import asyncio\n"
        "async def main():\n"
        "    return await asyncio.gather(tools.calc.add(a=1, b=2), tools.host.double(x=21))\n"
        "asyncio.run(main())",
        tools={"double": lambda x: 2 * x},
    )
    assert r.ok, r.error
    assert r.return_value == [{"sum": 3}, 42]


def test_allowed_tools_narrow_the_upstream_tools(upstream):
    sb, _ = upstream
    r = sb.run("tools.calc.fail(why='x')", allowed_tools=["mcp__calc__add"])
    assert (r.status, r.error.type) == ("error", "AttributeError")
    assert "no allowed tool 'fail'; available: add" in r.error.message
    r = sb.run("call_mcp_tool('mcp__calc__fail', {'why': 'x'})", allowed_tools=["mcp__calc__add"])
    assert r.error.type == "ToolError" and "not allowed" in r.error.message, r.error
    r = sb.run("tools.calc.add(a=1, b=1)", allowed_tools=["mcp__calc__*"])
    assert r.return_value == {"sum": 2}


def test_call_batch_reaches_the_upstream_from_every_call(upstream):
    sb, _ = upstream
    source = "def f(n):\n    return tools.calc.add(a=n, b=n)['sum']"
    out = sb.call_batch(source, "f", [[i] for i in range(20)], jobs=4)
    assert [e.return_value for e in out] == [2 * i for i in range(20)]
