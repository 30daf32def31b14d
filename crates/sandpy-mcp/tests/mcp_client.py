"""A real MCP client (the official Python SDK) that drives `sandpy serve` in the tests.

    mcp_client.py stdio COMMAND [ARGS...]      < requests.json
    mcp_client.py http URL [BEARER_TOKEN]      < requests.json

stdin: a JSON list of requests, `{"method": "list_tools"}` or
`{"method": "call_tool", "name": ..., "arguments": {...}}` (with `"progress": true`, the
call asks for progress notifications: the result gets `_progress`, each notification's
message and how many seconds before the result it came; with `"cancel_after_s": S`, the
call is cancelled after S seconds (the SDK sends `notifications/cancelled`) and its result
is `{"cancelled": true}`; `"meta": {...}` is sent as the request's `_meta`). stdout: one JSON list with a result (or `{"error": "..."}`)
per request, in order. A connection failure prints `{"connect_error": "..."}` and exits 3.

`{"method": "list_resources"}` and `{"method": "read_resource", "uri": ...}` (or `"link": K`:
the URI of the K-th `resource_link` item the call results so far carried) read the server's
resources. Over http with `MCP_CLIENT_SECOND_TOKEN` set, a second MCP session is opened with
that bearer token beside the first, and a request with `"client": "second"` is sent
through it (another tenant, while the first is still connected).

With `MCP_CLIENT_ELICIT=accept,decline,...` set, the client supports elicitation and
answers the server's requests with these actions in turn (the last one repeats; `never`
does not answer); each result gets `_elicitations`, the messages it was asked.
"""

import asyncio
import contextlib
import json
import sys
import time
from typing import Any

import os

import httpx2
from mcp import ClientSession, types
from mcp.client.stdio import StdioServerParameters, get_default_environment, stdio_client
from mcp.client.streamable_http import streamable_http_client


ELICIT = [a for a in os.environ.get("MCP_CLIENT_ELICIT", "").split(",") if a]
elicited: list[str] = []


async def on_elicit(context: Any, params: Any) -> types.ElicitResult:
    """Answer an elicitation with the next of MCP_CLIENT_ELICIT's actions."""
    elicited.append(params.message)
    action = ELICIT.pop(0) if len(ELICIT) > 1 else ELICIT[0]
    if action == "never":
        await asyncio.sleep(3600)
    return types.ElicitResult(action=action, content={} if action == "accept" else None)


def session_options() -> dict[str, Any]:
    return {"elicitation_callback": on_elicit} if ELICIT else {}


async def serve_requests(sessions: dict[str, ClientSession], requests: list[dict[str, Any]]) -> list[Any]:
    for session in sessions.values():
        await session.initialize()
    out: list[Any] = []
    links: list[str] = []
    for request in requests:
        session = sessions[request.get("client", "first")]
        try:
            progress: list[tuple[str | None, float]] = []
            elicited.clear()

            async def on_progress(value: float, total: float | None, message: str | None) -> None:
                progress.append((message, time.monotonic()))

            if request["method"] == "list_tools":
                result = await session.list_tools()
            elif request["method"] == "list_resources":
                result = await session.list_resources()
            elif request["method"] == "read_resource":
                uri = links[request["link"]] if "link" in request else request["uri"]
                result = await session.read_resource(uri)
            else:
                call = session.call_tool(
                    request["name"], request.get("arguments", {}),
                    progress_callback=on_progress if request.get("progress") else None,
                    meta=request.get("meta"))
                if "cancel_after_s" in request:
                    task = asyncio.ensure_future(call)
                    await asyncio.sleep(request["cancel_after_s"])
                    task.cancel()
                    try:
                        await task
                    except asyncio.CancelledError:
                        pass
                    out.append({"cancelled": True})
                    continue
                result = await call
            ended = time.monotonic()
            dumped = result.model_dump(by_alias=True, exclude_none=True, mode="json")
            if request["method"] == "call_tool":
                links.extend(item["uri"] for item in dumped.get("content", [])
                             if item.get("type") == "resource_link")
            if request.get("progress"):
                dumped["_progress"] = [
                    {"message": message, "before_result_s": ended - at} for message, at in progress]
            if ELICIT:
                dumped["_elicitations"] = list(elicited)
            out.append(dumped)
        except Exception as exc:  # noqa: BLE001 - reported to the test
            error: dict[str, Any] = {"error": f"{type(exc).__name__}: {exc}"}
            if isinstance(getattr(exc, "code", None), int):
                error["code"] = exc.code  # an MCPError's JSON-RPC code
            out.append(error)
    return out


async def main() -> int:
    requests = json.load(sys.stdin)
    kind, target, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
    out = None
    try:
        if kind == "stdio":
            # The SDK gives a stdio server a minimal environment; the OpenTelemetry
            # variables of the trace tests are passed on as well.
            env = get_default_environment()
            env.update({k: v for k, v in os.environ.items() if k.startswith("OTEL_")})
            params = StdioServerParameters(command=target, args=rest, env=env)
            async with stdio_client(params) as (read, write):
                async with ClientSession(read, write, **session_options()) as session:
                    out = await serve_requests({"first": session}, requests)
        else:
            tokens = {"first": rest[0] if rest else None}
            if os.environ.get("MCP_CLIENT_SECOND_TOKEN"):
                tokens["second"] = os.environ["MCP_CLIENT_SECOND_TOKEN"]
            async with contextlib.AsyncExitStack() as stack:
                sessions = {}
                for name, token in tokens.items():
                    headers = {"Authorization": f"Bearer {token}"} if token else {}
                    http = await stack.enter_async_context(
                        httpx2.AsyncClient(headers=headers, timeout=120))
                    streams = await stack.enter_async_context(
                        streamable_http_client(target, http_client=http))
                    sessions[name] = await stack.enter_async_context(
                        ClientSession(streams[0], streams[1], **session_options()))
                out = await serve_requests(sessions, requests)
    except BaseException as exc:  # noqa: BLE001 - connection failures are the result
        if out is not None:
            # Every request was answered; the connection broke as the client closed it
            # (the server shutting down ends its streams).
            print(json.dumps(out))
            return 0
        print(json.dumps({"connect_error": f"{type(exc).__name__}: {exc!r}"}))
        return 3
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
