"""The in-sandbox tool API: call, discover and search MCP tools through the host.

Every call goes through the host import `call-tools`, which applies the allowlist, the
schema check and the limits; nothing here is trusted for security. Inside a running event
loop `call_mcp_tool` returns a future and calls are batched (so `asyncio.gather` runs them
concurrently on the host); outside one it is a batch of one and returns the result.
"""

import asyncio
import inspect
import json
import os
import re
import sys
from typing import Any

from componentize_py_types import Err, Ok
from wit_world.imports import tools as host


class ToolError(Exception):
    """A tool call failed: the tool's own message, or the rule that refused the call."""

    def __init__(self, tool: str, message: str) -> None:
        super().__init__(message)
        self.tool = tool


ToolError.__module__ = "builtins"  # shown as plain `ToolError`, like a built-in exception


_pending: list[tuple[str, str, "asyncio.Future[Any]"]] = []


def _encode_arguments(name: str, arguments: Any, kwargs: dict[str, Any]) -> str:
    if not isinstance(name, str):
        raise TypeError(f"tool name must be a str, not {type(name).__name__}")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise TypeError(f"tool arguments must be a dict, not {type(arguments).__name__}")
    merged = {**arguments, **kwargs}
    try:
        return json.dumps(merged)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"arguments of {name} are not JSON-serialisable: {exc}") from None


def _decode(name: str, result: "Ok[str] | Err[str]") -> Any:
    if isinstance(result, Ok):
        return json.loads(result.value)
    raise ToolError(name, result.value)


_HERE = os.path.dirname(os.path.abspath(__file__))
_ASYNC_FLAGS = inspect.CO_COROUTINE | inspect.CO_ITERABLE_COROUTINE | inspect.CO_ASYNC_GENERATOR
# Frames that belong to the expression around them: `gather(*(call(x) for x in xs))`.
_TRANSPARENT = {"<genexpr>", "<lambda>", "<listcomp>", "<dictcomp>", "<setcomp>"}


def _called_from_async_code() -> bool:
    """True when the nearest caller outside this package (looking through generator
    expressions and lambdas) is a coroutine: an `async def`, or a program that uses
    top-level `await`."""
    frame = sys._getframe(1)
    while frame is not None and (
        frame.f_code.co_filename.startswith(_HERE) or frame.f_code.co_name in _TRANSPARENT
    ):
        frame = frame.f_back  # type: ignore[assignment]
    return frame is not None and bool(frame.f_code.co_flags & _ASYNC_FLAGS)


def call_mcp_tool(name: str, arguments: dict[str, Any] | None = None, /, **kwargs: Any) -> Any:
    """Call tool `name` (`mcp__<server>__<tool>`) with a dict of arguments.

    Returns the result (structured content, JSON-decoded text, or text); raises
    `ToolError` when the tool fails or is refused. Called from async code (an `async
    def`, or a program using top-level `await`) it returns an awaitable, and awaited
    calls that are pending together run concurrently on the host.
    """
    encoded = _encode_arguments(name, arguments, kwargs)
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    if loop is None or not _called_from_async_code():
        return _decode(name, flush_pending((name, encoded)))
    future: asyncio.Future[Any] = loop.create_future()
    _pending.append((name, encoded, future))
    return future


def flush_pending(extra: tuple[str, str] | None = None) -> Any:
    """Send every queued call (and `extra`) to the host in one batch and resolve their
    futures. Returns `extra`'s raw result, else whether anything was sent."""
    if not _pending and extra is None:
        return False
    batch = list(_pending)
    _pending.clear()
    calls = [host.ToolCall(name, args) for name, args, _ in batch]
    if extra is not None:
        calls.append(host.ToolCall(*extra))
    results = host.call_tools(calls)
    for (name, _, future), result in zip(batch, results):
        if future.cancelled():
            continue
        try:
            future.set_result(_decode(name, result))
        except ToolError as exc:
            future.set_exception(exc)
    return results[-1] if extra is not None else True


def discover_mcp_tools() -> list[dict[str, Any]]:
    """Every allowed tool: `{name, description, inputSchema}`."""
    tools: list[dict[str, Any]] = json.loads(host.list_tools())
    return tools


def get_tool_schema(name: str) -> dict[str, Any]:
    """The input JSON schema of one allowed tool; `ToolError` if unknown or refused."""
    try:
        schema: dict[str, Any] = json.loads(host.tool_schema(name))
    except Err as exc:
        raise ToolError(name, str(exc.value)) from None
    return schema


def search_tools(query: str, limit: int = 10) -> list[dict[str, Any]]:
    """Allowed tools ranked by relevance of their names and descriptions to `query`
    (words are stemmed; deprecated tools come last), in a compact form:
    `{name, description (its first line), arguments: {name: type, "optional?": type},
    deprecated (only when true)}`. `get_tool_schema(name)` gives the whole schema."""
    if limit < 0:
        raise ValueError("limit must be >= 0")
    found: list[dict[str, Any]] = json.loads(host.search_tools(str(query), min(limit, 2**32 - 1)))
    return found


def python_name(name: str) -> str:
    """An identifier for an MCP server or tool name (`-`, `.` and the like become `_`)."""
    ident = re.sub(r"\W", "_", name)
    return "_" + ident if ident[:1].isdigit() else ident


def _split(full_name: str) -> tuple[str, str] | None:
    parts = full_name.split("__", 2)
    if len(parts) == 3 and parts[0] == "mcp":
        return parts[1], parts[2]
    return None


class _Server:
    def __init__(self, server: str, tool_names: dict[str, str]) -> None:
        self._server = server
        self._tools = tool_names  # python name -> full name

    def __getattr__(self, attr: str) -> Any:
        full = self._tools.get(attr)
        if full is None:
            raise AttributeError(
                f"server {self._server!r} has no allowed tool {attr!r}; "
                f"available: {sorted(self._tools)}"
            )

        def call(arguments: dict[str, Any] | None = None, /, **kwargs: Any) -> Any:
            return call_mcp_tool(full, arguments, **kwargs)

        call.__name__ = attr
        return call

    def __dir__(self) -> list[str]:
        return sorted(self._tools)

    def __repr__(self) -> str:
        return f"<tools.{python_name(self._server)}: {', '.join(sorted(self._tools))}>"


class _Namespace:
    """`tools.<server>.<tool>(**kwargs)`: attribute access over the allowed tools."""

    def _servers(self) -> dict[str, _Server]:
        grouped: dict[str, tuple[str, dict[str, str]]] = {}
        for tool in discover_mcp_tools():
            split = _split(tool["name"])
            if split is None:
                continue
            server, short = split
            entry = grouped.setdefault(python_name(server), (server, {}))
            entry[1][python_name(short)] = tool["name"]
        return {key: _Server(server, names) for key, (server, names) in grouped.items()}

    def __getattr__(self, attr: str) -> _Server:
        if attr.startswith("__"):
            raise AttributeError(attr)
        servers = self._servers()
        if attr not in servers:
            raise AttributeError(f"no MCP server {attr!r} is available; available: {sorted(servers)}")
        return servers[attr]

    def __dir__(self) -> list[str]:
        return sorted(self._servers())

    def __repr__(self) -> str:
        return f"<tools: {', '.join(sorted(self._servers()))}>"


tools = _Namespace()

API: dict[str, Any] = {
    "call_mcp_tool": call_mcp_tool,
    "discover_mcp_tools": discover_mcp_tools,
    "get_tool_schema": get_tool_schema,
    "search_tools": search_tools,
    "tools": tools,
    "ToolError": ToolError,
}
