"""A real MCP client (the official Python SDK) that drives `sandpy serve` in the tests.

    mcp_client.py stdio COMMAND [ARGS...]      < requests.json
    mcp_client.py http URL [BEARER_TOKEN]      < requests.json

stdin: a JSON list of requests, `{"method": "list_tools"}` or
`{"method": "call_tool", "name": ..., "arguments": {...}}` (with `"progress": true`, the
call asks for progress notifications: the result gets `_progress`, each notification's
message and how many seconds before the result it came). stdout: one JSON list with a
result (or `{"error": "..."}`) per request, in order. A connection failure prints
`{"connect_error": "..."}` and exits 3.
"""

import asyncio
import json
import sys
import time
from typing import Any

import httpx2
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client


async def serve_requests(session: ClientSession, requests: list[dict[str, Any]]) -> list[Any]:
    await session.initialize()
    out: list[Any] = []
    for request in requests:
        try:
            progress: list[tuple[str | None, float]] = []

            async def on_progress(value: float, total: float | None, message: str | None) -> None:
                progress.append((message, time.monotonic()))

            if request["method"] == "list_tools":
                result = await session.list_tools()
            else:
                result = await session.call_tool(
                    request["name"], request.get("arguments", {}),
                    progress_callback=on_progress if request.get("progress") else None)
            ended = time.monotonic()
            dumped = result.model_dump(by_alias=True, exclude_none=True, mode="json")
            if request.get("progress"):
                dumped["_progress"] = [
                    {"message": message, "before_result_s": ended - at} for message, at in progress]
            out.append(dumped)
        except Exception as exc:  # noqa: BLE001 - reported to the test
            out.append({"error": f"{type(exc).__name__}: {exc}"})
    return out


async def main() -> int:
    requests = json.load(sys.stdin)
    kind, target, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
    try:
        if kind == "stdio":
            params = StdioServerParameters(command=target, args=rest)
            async with stdio_client(params) as (read, write):
                async with ClientSession(read, write) as session:
                    out = await serve_requests(session, requests)
        else:
            headers = {"Authorization": f"Bearer {rest[0]}"} if rest else {}
            async with httpx2.AsyncClient(headers=headers, timeout=120) as http:
                async with streamable_http_client(target, http_client=http) as streams:
                    async with ClientSession(streams[0], streams[1]) as session:
                        out = await serve_requests(session, requests)
    except BaseException as exc:  # noqa: BLE001 - connection failures are the result
        print(json.dumps({"connect_error": f"{type(exc).__name__}: {exc!r}"}))
        return 3
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
