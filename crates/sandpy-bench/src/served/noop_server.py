"""The official MCP Python SDK's own server with a `run_python` that runs nothing: the
ceiling of `client.py` (the SDK's client) in `sandpy bench --only served`.

    python noop_server.py

Serves streamable HTTP at http://127.0.0.1:PORT/mcp (the SDK's `MCPServer` under
uvicorn, its defaults: sessions, SSE answers) and prints PORT on the first line of stdout
once it listens. Runs until it is killed, or its stdin closes.
"""

import asyncio
import logging
import socket
import sys

import uvicorn
from mcp.server.mcpserver import MCPServer

server = MCPServer("noop", log_level="WARNING")


@server.tool()
def run_python(code: str) -> str:
    """Runs nothing: answers what `print(1)` prints."""
    return "1\n"


async def main() -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    app = server.streamable_http_app()
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    uvicorn_server = uvicorn.Server(config)
    serving = asyncio.create_task(uvicorn_server.serve(sockets=[listener]))
    print(listener.getsockname()[1], flush=True)
    # Ends with the bench: when its end of stdin closes.
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    uvicorn_server.should_exit = True
    await serving


if __name__ == "__main__":
    logging.getLogger("mcp").setLevel(logging.WARNING)
    try:
        asyncio.run(main())
    except (KeyboardInterrupt, asyncio.CancelledError):
        pass
