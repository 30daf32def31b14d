"""The Python side of sandpy: runs user code inside the WebAssembly sandbox.

Modules:
- `preload`: imports the usable stdlib at build time (only pre-imported modules exist later).
- `event_loop`: an asyncio loop that needs no sockets and batches tool calls.
- `tools`: the in-sandbox MCP tool API (`call_mcp_tool`, `tools.<server>.<tool>`, ...).
- `runner`: runs a task and turns its result or exception into an `Outcome`.
"""
