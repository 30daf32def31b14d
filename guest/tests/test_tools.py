"""Tests of sandpy_guest.tools that need no tool host, run inside the sandbox."""

from sandpy_guest import tools


def test_python_name_makes_identifiers() -> None:
    assert tools.python_name("server-everything") == "server_everything"
    assert tools.python_name("a.b") == "a_b"
    assert tools.python_name("9lives") == "_9lives"
    for internal in ("__class__", "__dict__", "_private"):
        assert tools.python_name(internal) is None, internal


def test_split_full_names() -> None:
    assert tools._split("mcp__fs__read_file") == ("fs", "read_file")
    assert tools._split("mcp__fs__read__twice") == ("fs", "read__twice")
    assert tools._split("plain") is None


def test_arguments_are_validated_before_leaving() -> None:
    for bad in ([1], "x", 3):
        try:
            tools.call_mcp_tool("mcp__a__b", bad)  # type: ignore[arg-type]
        except TypeError as exc:
            assert "must be a dict" in str(exc)
        else:
            raise AssertionError(f"{bad!r} accepted")
    try:
        tools.call_mcp_tool("mcp__a__b", {"x": object()})
    except TypeError as exc:
        assert "not JSON-serialisable" in str(exc)
    else:
        raise AssertionError("object() accepted")


def test_tool_error_keeps_tool_and_message() -> None:
    error = tools.ToolError("mcp__a__b", "boom")
    assert str(error) == "boom" and error.tool == "mcp__a__b"


def test_api_is_in_builtins() -> None:
    import builtins

    for name in tools.API:
        assert hasattr(builtins, name), name
