"""The `tools` interface of `guest/wit/sandpy.wit`, answered by the host over the run's
channel: each function sends one request line and waits for its answer line."""

from dataclasses import dataclass

from componentize_py_types import Err, Ok

import sandpy_channel


@dataclass
class ToolCall:
    name: str
    arguments: str


def call_tools(calls: list[ToolCall]) -> list[Ok | Err]:
    answers = sandpy_channel.ask({"call_tools": [{"name": c.name, "arguments": c.arguments} for c in calls]})
    return [Ok(a["Ok"]) if "Ok" in a else Err(a["Err"]) for a in answers]


def list_tools() -> str:
    return sandpy_channel.ask("list_tools")


def tool_names() -> list[str]:
    return sandpy_channel.ask("tool_names")


def tool_schema(name: str) -> str:
    answer = sandpy_channel.ask({"tool_schema": name})
    if "Err" in answer:
        raise Err(answer["Err"])
    return answer["Ok"]


def search_tools(query: str, limit: int) -> str:
    return sandpy_channel.ask({"search_tools": {"query": query, "limit": limit}})
