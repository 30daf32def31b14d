from typing import Any
import tools as tools
class ToolError(Exception):
    tool: str
def call_mcp_tool(name: str, arguments: dict[str, Any] | None = None, /, **kwargs: Any) -> Any: ...
