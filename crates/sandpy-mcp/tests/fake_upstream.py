"""A misbehaving MCP server over stdio (raw JSON-RPC, one message per line), for tests.

    python3 fake_upstream.py [--grandchild PIDFILE] [--pidfile PIDFILE] [--starts FILE]
                             [--need FILE] [--silent] [--calls FILE] [--traces FILE]

--grandchild PIDFILE  start `sleep 1000` in the background (same process group) and write
                      its pid to PIDFILE: what an upstream's own children look like.
--pidfile PIDFILE     write this server's own pid to PIDFILE.
--starts FILE         append a line to FILE at each start.
--need FILE           exit 1 at once unless FILE exists (a server that fails to start).
--silent              read stdin and never answer (a server that never does the handshake).
--calls FILE          append the name of each tool called to FILE.
--traces FILE         append the `traceparent` in each tool call's `_meta` (or "-") to FILE.

Tools: `ping` answers "pong"; `crash` exits the server without an answer (its background
child stays, as after a real crash).
"""

import json
import os
import subprocess
import sys


def option(name):
    if name in sys.argv:
        return sys.argv[sys.argv.index(name) + 1]
    return None


def main():
    starts = option("--starts")
    if starts:
        with open(starts, "a") as f:
            f.write("start\n")
    need = option("--need")
    if need and not os.path.exists(need):
        sys.exit(1)
    pidfile = option("--pidfile")
    if pidfile:
        with open(pidfile, "w") as f:
            f.write(str(os.getpid()))
    grandchild = option("--grandchild")
    if grandchild:
        child = subprocess.Popen(
            ["sleep", "1000"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        with open(grandchild, "w") as f:
            f.write(str(child.pid))
    silent = "--silent" in sys.argv
    for line in sys.stdin:
        if silent:
            continue
        message = json.loads(line)
        method = message.get("method")
        if "id" not in message:
            continue  # a notification
        if method == "initialize":
            result = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "fake", "version": "0"},
            }
        elif method == "tools/list":
            schema = {"type": "object", "properties": {}}
            result = {
                "tools": [
                    {"name": "ping", "description": "Answers pong.", "inputSchema": schema},
                    {"name": "crash", "description": "Exits.", "inputSchema": schema},
                ]
            }
        elif method == "tools/call":
            traces = option("--traces")
            if traces:
                meta = message["params"].get("_meta") or {}
                with open(traces, "a") as f:
                    f.write(meta.get("traceparent", "-") + "\n")
            calls = option("--calls")
            if calls:
                with open(calls, "a") as f:
                    f.write(message["params"]["name"] + "\n")
            if message["params"]["name"] == "crash":
                os._exit(3)
            result = {"content": [{"type": "text", "text": "pong"}]}
        else:
            result = {}
        reply = {"jsonrpc": "2.0", "id": message["id"], "result": result}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
