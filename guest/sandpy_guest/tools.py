"""The in-sandbox tool API: call, discover and search MCP tools through the host.

Every call goes through the host import `call-tools`, which applies the allowlist, the
schema check and the limits; nothing here is trusted for security. Inside a running event
loop `call_mcp_tool` returns a future and calls are batched (so `asyncio.gather` runs them
concurrently on the host); outside one it is a batch of one and returns the result.
"""

import ast
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


def _tool_schema(name: str) -> dict[str, Any]:
    """The host's answer for one tool: `{inputSchema, signature}`; `ToolError` if unknown
    or refused."""
    try:
        answer: dict[str, Any] = json.loads(host.tool_schema(name))
    except Err as exc:
        raise ToolError(name, str(exc.value)) from None
    return answer


def get_tool_schema(name: str) -> dict[str, Any]:
    """The input JSON schema of one allowed tool; `ToolError` if unknown or refused.
    (`help(tools.<server>.<tool>)` shows it as a Python signature.)"""
    schema: dict[str, Any] = _tool_schema(name)["inputSchema"]
    return schema


class _Annotation:
    """An annotation as the signature's text wrote it (no type is built from it)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _stub_signature(text: str) -> "inspect.Signature | None":
    """The signature of the stub's last `def`, read without running anything: the host
    made the text from the tool's schemas (an upstream's), so it is parsed, never run."""
    try:
        body = ast.parse(text).body
    except (SyntaxError, ValueError):
        return None
    if not body or not isinstance(body[-1], ast.FunctionDef):
        return None
    args = body[-1].args

    def annotation(node: "ast.expr | None") -> Any:
        if node is None:
            return inspect.Parameter.empty
        return _Annotation(ast.get_source_segment(text, node) or ast.unparse(node))

    def default(node: "ast.expr | None") -> Any:
        if node is None:
            return inspect.Parameter.empty
        try:
            return ast.literal_eval(node)
        except ValueError:
            return _Annotation(ast.get_source_segment(text, node) or "...")

    P = inspect.Parameter
    params = [P(a.arg, P.POSITIONAL_ONLY, annotation=annotation(a.annotation)) for a in args.posonlyargs]
    for a, d in zip(args.kwonlyargs, args.kw_defaults):
        params.append(P(a.arg, P.KEYWORD_ONLY, default=default(d), annotation=annotation(a.annotation)))
    if args.kwarg is not None:
        params.append(P(args.kwarg.arg, P.VAR_KEYWORD, annotation=annotation(args.kwarg.annotation)))
    try:
        return inspect.Signature(params, return_annotation=annotation(body[-1].returns))
    except (TypeError, ValueError):
        return None


# Tool name -> (its stub's text, its signature), for this run: fetched when first asked for.
_stubs: dict[str, "tuple[str, inspect.Signature | None]"] = {}


def _stub(full: str) -> "tuple[str, inspect.Signature | None]":
    found = _stubs.get(full)
    if found is None:
        try:
            text = str(_tool_schema(full).get("signature", ""))
        except ToolError:
            text = ""
        found = _stubs[full] = (text, _stub_signature(text))
    return found


def _without_omitted(full: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """`kwargs` without those passed as None whose signature says `= None`: an optional
    argument left out, as the signature promises (its schema may not take null)."""
    if not any(value is None for value in kwargs.values()):
        return kwargs
    signature = _stub(full)[1]
    if signature is None:
        return kwargs
    params = signature.parameters
    return {
        key: value
        for key, value in kwargs.items()
        if not (value is None and key in params and params[key].kind is inspect.Parameter.KEYWORD_ONLY and params[key].default is None)
    }


def search_tools(query: str, limit: int = 10) -> list[dict[str, Any]]:
    """Allowed tools ranked by relevance of their names and descriptions to `query`
    (words are stemmed; deprecated tools come last), in a compact form:
    `{name, description (its first line), arguments: {name: type, "optional?": type},
    deprecated (only when true)}`. `get_tool_schema(name)` gives the whole schema."""
    if limit < 0:
        raise ValueError("limit must be >= 0")
    found: list[dict[str, Any]] = json.loads(host.search_tools(str(query), min(limit, 2**32 - 1)))
    return found


def python_name(name: str) -> str | None:
    """The attribute of an MCP server or tool name in `tools` (`-`, `.` and the like become
    `_`, a leading digit gets a `_`), or None for a name starting with `_`: no tool may
    stand for a Python internal such as `__class__`; call those by full name."""
    if name.startswith("_"):
        return None
    if name.isascii() and name.isidentifier():
        return name  # most names: no regex for each of 10,000 tools
    ident = re.sub(r"\W", "_", name, flags=re.ASCII)
    return "_" + ident if ident[:1].isdigit() else ident


def _split(full_name: str) -> tuple[str, str] | None:
    parts = full_name.split("__", 2)
    if len(parts) == 3 and parts[0] == "mcp":
        return parts[1], parts[2]
    return None


def _some(names: Any, most: int = 30) -> str:
    names = sorted(names)
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


class _Tool:
    """One tool of `tools.<server>`: call it with a dict and/or keywords. Its
    `__signature__`, `__doc__` and `__annotations__` are those of the signature the host
    made from its schemas (`help()` shows it)."""

    __slots__ = ("_full",)

    def __init__(self, full: str) -> None:
        object.__setattr__(self, "_full", full)

    def __getattribute__(self, attr: str) -> Any:
        full: str = object.__getattribute__(self, "_full")
        if attr == "__signature__":
            return _stub(full)[1]
        if attr == "__doc__":
            return _stub(full)[0] or None
        if attr == "__annotations__":
            signature = _stub(full)[1]
            if signature is None:
                return {}
            annotations = {n: p.annotation for n, p in signature.parameters.items() if p.annotation is not p.empty}
            if signature.return_annotation is not signature.empty:
                annotations["return"] = signature.return_annotation
            return annotations
        if attr in ("__name__", "__qualname__"):
            split = _split(full)
            return (python_name(split[1]) or split[1]) if split is not None else full
        raise AttributeError(f"a tool has no attribute {attr!r}; call it")

    def __call__(self, arguments: dict[str, Any] | None = None, /, **kwargs: Any) -> Any:
        full: str = object.__getattribute__(self, "_full")
        return call_mcp_tool(full, arguments, **_without_omitted(full, kwargs))

    def __repr__(self) -> str:
        return f"<tool {object.__getattribute__(self, '_full')}>"


class _Server:
    """`tools.<server>`: an attribute per allowed tool, and nothing else."""

    __slots__ = ("_server", "_tools", "_clashes")

    def __init__(self, server: str, tool_names: dict[str, str], clashes: dict[str, list[str]]) -> None:
        object.__setattr__(self, "_server", server)
        object.__setattr__(self, "_tools", tool_names)  # python name -> full name
        object.__setattr__(self, "_clashes", clashes)  # python name -> full names

    def __getattribute__(self, attr: str) -> Any:
        tool_names: dict[str, str] = object.__getattribute__(self, "_tools")
        full = tool_names.get(attr)
        if full is not None:
            return _Tool(full)
        server: str = object.__getattribute__(self, "_server")
        clashes: dict[str, list[str]] = object.__getattribute__(self, "_clashes")
        if attr in clashes:
            names = clashes[attr]
            raise AttributeError(
                f"tools.{python_name(server)}.{attr} is ambiguous: tools {_some(names)} all map to it; "
                f"call one by its full name, e.g. call_mcp_tool({names[0]!r}, ...)"
            )
        raise AttributeError(
            f"server {server!r} has no allowed tool {attr!r}; available: {_some(tool_names)} "
            "(tools whose names start with _ are called by full name with call_mcp_tool)"
        )

    def __dir__(self) -> list[str]:
        return sorted(object.__getattribute__(self, "_tools"))

    def __repr__(self) -> str:
        server = object.__getattribute__(self, "_server")
        return f"<tools.{python_name(server)}: {_some(object.__getattribute__(self, '_tools'))}>"


# The namespace of the current run, made on first use: the next run may allow other tools.
_servers_cache: "tuple[dict[str, _Server], dict[str, list[str]]] | None" = None


def new_run() -> None:
    """Forget the last run's tool namespace (the runner calls this as each run starts)."""
    global _servers_cache
    _servers_cache = None
    _stubs.clear()


def _servers() -> "tuple[dict[str, _Server], dict[str, list[str]]]":
    """Servers by attribute, and server names that clash on one attribute."""
    global _servers_cache
    if _servers_cache is None:
        grouped: dict[str, dict[str, list[str]]] = {}  # server -> attribute -> full names
        for full in host.tool_names():
            split = _split(full)
            if split is None:
                continue
            server, short = split
            attribute = python_name(short)
            if attribute is not None:
                grouped.setdefault(server, {}).setdefault(attribute, []).append(full)
        by_attribute: dict[str, list[str]] = {}
        for server in grouped:
            attribute = python_name(server)
            if attribute is not None:
                by_attribute.setdefault(attribute, []).append(server)
        servers: dict[str, _Server] = {}
        clashes: dict[str, list[str]] = {}
        for attribute, names in by_attribute.items():
            if len(names) > 1:
                clashes[attribute] = names
                continue
            attributes = grouped[names[0]]
            unique = {a: fulls[0] for a, fulls in attributes.items() if len(fulls) == 1}
            clashing = {a: fulls for a, fulls in attributes.items() if len(fulls) > 1}
            servers[attribute] = _Server(names[0], unique, clashing)
        _servers_cache = (servers, clashes)
    return _servers_cache


class _Namespace:
    """`tools.<server>.<tool>(**kwargs)`: attribute access over the allowed tools, and
    nothing else."""

    __slots__ = ()

    def __getattribute__(self, attr: str) -> _Server:
        servers, clashes = _servers()
        server = servers.get(attr)
        if server is not None:
            return server
        if attr in clashes:
            raise AttributeError(
                f"tools.{attr} is ambiguous: servers {_some(clashes[attr])} all map to it; "
                "call their tools by full name with call_mcp_tool"
            )
        raise AttributeError(f"no MCP server {attr!r} is available; available: {_some(servers)}")

    def __dir__(self) -> list[str]:
        return sorted(_servers()[0])

    def __repr__(self) -> str:
        return f"<tools: {_some(_servers()[0])}>"


tools = _Namespace()

API: dict[str, Any] = {
    "call_mcp_tool": call_mcp_tool,
    "discover_mcp_tools": discover_mcp_tools,
    "get_tool_schema": get_tool_schema,
    "search_tools": search_tools,
    "tools": tools,
    "ToolError": ToolError,
}
