"""Run untrusted Python (real CPython 3.14) in a WebAssembly sandbox, from Python.

>>> import sandpy
>>> sb = sandpy.Sandbox()
>>> result = sb.run("print('hi')\\n6 * 7")
>>> result.status, result.stdout, result.return_value
('ok', 'hi\\n', 42)

Every run gets a fresh interpreter with hard limits (time, memory, output, disk); what the
code does (an exception, a timeout) is in the returned `Execution`, never raised. Problems
of the sandbox itself raise `SandboxError`; bad arguments raise `ValueError`/`TypeError`.
"""

from ._sandpy import (
    ConfigError,
    ErrorInfo,
    Execution,
    OutputFile,
    Sandbox,
    SandboxError,
    Session,
    SessionError,
    ToolError,
    Violation,
    __version__,
    warmup,
)
from ._stream import Output, stream

__all__ = [
    "ConfigError",
    "ErrorInfo",
    "Execution",
    "Output",
    "OutputFile",
    "Sandbox",
    "SandboxError",
    "Session",
    "SessionError",
    "ToolError",
    "Violation",
    "__version__",
    "stream",
    "warmup",
]
