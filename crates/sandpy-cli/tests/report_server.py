"""A stdio MCP server (the official Python SDK) whose one tool, `started`, reports how the
server was started: its arguments and `$REPORT_TOKEN`. The tests of `${VAR}` expansion in
the config start it through sandpy and check what it got.

    report_server.py [ARGS...]
"""

import json
import os
import sys

from mcp.server import MCPServer

server = MCPServer("report")


@server.tool(structured_output=False)
def started() -> str:
    """The server's command-line arguments and its REPORT_TOKEN variable, as JSON text."""
    return json.dumps({"argv": sys.argv[1:], "env": os.environ.get("REPORT_TOKEN")})


if __name__ == "__main__":
    server.run()
