"""A misbehaving MCP server for sandpy's attack tests: raw JSON-RPC over stdio, no SDK.

    python3 hostile_upstream.py odd-tools     odd names, bad schemas, oversized answers
    python3 hostile_upstream.py endless       `tools/list` always says there is another page
    python3 hostile_upstream.py many N        N plain tools in one page

Every mode also has `echo` (returns its `message`), so a test can check that the hub still
answers after the attack.
"""

import json
import sys

sys.setrecursionlimit(10_000)  # json.dumps of the 500-deep schema

MODE = sys.argv[1] if len(sys.argv) > 1 else "odd-tools"
OBJECT = {"type": "object"}


def tool(name, schema=OBJECT, description=""):
    return {"name": name, "description": description, "inputSchema": schema}


def nested(depth):
    schema = {"type": "object"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"x": schema}}
    return schema


def odd_tools():
    cycle = {"type": "object", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}
    return [
        tool("echo", {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]}),
        tool("blob", description="returns n bytes of text"),
        tool("fail_blob", description="an isError result of n bytes"),
        tool("error_blob", description="a JSON-RPC error whose message is n bytes"),
        tool("deep_result", description="a result nested n levels deep"),
        tool("cycle", cycle),
        tool("deep_schema", nested(500)),
        tool("huge_schema", {"type": "object", "description": "x" * 300_000}),
        tool(""),
        tool("a\nb"),
        tool("x" * 5000),
        tool("__class__"),
        tool("__dict__"),
        tool("_private"),
        tool("a-b"),
        tool("a.b"),
    ]


def text_result(text, is_error=False):
    return {"content": [{"type": "text", "text": text}], "isError": is_error}


def call(name, arguments):
    """The result of a tool call, or a JSON-RPC error as ("error", {...})."""
    n = int(arguments.get("n", 0))
    if name == "echo":
        return text_result(str(arguments.get("message")))
    if name == "blob":
        return text_result("x" * n)
    if name == "fail_blob":
        return text_result("e" * n, is_error=True)
    if name == "error_blob":
        return ("error", {"code": -32000, "message": "e" * n})
    if name == "deep_result":
        value = 1
        for _ in range(n):
            value = [value]
        return {"content": [], "structuredContent": {"v": value}}
    if name in ("a-b", "a.b", "__class__", "_private", "cycle") or name.startswith("tool_"):
        return text_result(f"called {name}")
    return ("error", {"code": -32602, "message": f"unknown tool {name}"})


def listing(cursor):
    if MODE == "endless":
        page = int(cursor or 0)
        tools = [tool(f"tool_{page}_{i}", description="d" * 1000) for i in range(10)]
        return {"tools": tools + ([tool("echo")] if page == 0 else []), "nextCursor": str(page + 1)}
    if MODE == "many":
        count = int(sys.argv[2])
        return {"tools": [tool("echo")] + [tool(f"tool_{i}", {"type": "object", "properties": {"i": {"type": "integer"}}}) for i in range(count - 1)]}
    return {"tools": odd_tools()}


def send(message):
    sys.stdout.buffer.write(json.dumps(message).encode() + b"\n")
    sys.stdout.buffer.flush()


for line in sys.stdin.buffer:
    if not line.strip():
        continue
    message = json.loads(line)
    method, id_ = message.get("method"), message.get("id")
    if id_ is None:
        continue  # a notification
    params = message.get("params") or {}
    if method == "initialize":
        result = {"protocolVersion": params.get("protocolVersion", "2025-06-18"), "capabilities": {"tools": {}}, "serverInfo": {"name": "hostile", "version": "0"}}
    elif method == "tools/list":
        result = listing(params.get("cursor"))
    elif method == "tools/call":
        arguments = params.get("arguments") or {}
        result = call(params["name"], arguments)
        if isinstance(result, tuple):
            send({"jsonrpc": "2.0", "id": id_, "error": result[1]})
            continue
        if arguments.get("id_last"):
            # The order the TypeScript SDK writes: the id comes after the result.
            send({"result": result, "jsonrpc": "2.0", "id": id_})
            continue
    elif method == "ping":
        result = {}
    else:
        send({"jsonrpc": "2.0", "id": id_, "error": {"code": -32601, "message": f"no method {method}"}})
        continue
    send({"jsonrpc": "2.0", "id": id_, "result": result})
