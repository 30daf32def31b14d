"""The official MCP Python SDK as the client of `sandpy bench --only served`.

    python client.py URL CLIENTS CALLS TOOL ARGUMENTS

Each of CLIENTS clients opens one MCP session (one kept-alive HTTP connection, the SDK's
httpx client) and calls TOOL with ARGUMENTS (a JSON object; `run_python` with
`{"code": "print(1)"}`, or a no-op tool for the client's ceiling) CALLS times in turn.
Prints one JSON object: every call's milliseconds, and the wall-clock seconds of the whole.
"""

import asyncio
import json
import sys
import time

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client


async def client(url: str, calls: int, tool: str, arguments: dict) -> list[float]:
    times = []
    async with httpx2.AsyncClient(timeout=120) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                await session.initialize()
                for _ in range(calls):
                    started = time.perf_counter()
                    result = await session.call_tool(tool, arguments)
                    times.append((time.perf_counter() - started) * 1e3)
                    if result.is_error:
                        raise RuntimeError(f"{tool} failed: {result}")
    return times


async def main() -> None:
    url, clients, calls, tool = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    arguments = json.loads(sys.argv[5])
    started = time.perf_counter()
    done = await asyncio.gather(*(client(url, calls, tool, arguments) for _ in range(clients)))
    seconds = time.perf_counter() - started
    print(json.dumps({"ms": [t for times in done for t in times], "seconds": seconds}))


if __name__ == "__main__":
    asyncio.run(main())
