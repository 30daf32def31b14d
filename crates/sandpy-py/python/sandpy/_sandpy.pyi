"""Type stubs of the extension module `sandpy._sandpy` (the Rust side of `sandpy`).

Read this file for the API: every public name is here, with its documentation.
"""

import os
import pathlib
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from typing import Any, Literal, TypeAlias

__version__: str

#: A JSON value as Python holds it.
JSON: TypeAlias = None | bool | int | float | str | list["JSON"] | dict[str, "JSON"]
#: A policy: a name (`"strict"`, `"default"` or one the config defines), or a dict in the
#: config's policy shape (`allowed_modules`, `denied_modules`, `denied_builtins`,
#: `denied_attributes`, `allowed_tools` and limit keys such as `timeout_ms`).
PolicyArg: TypeAlias = str | Mapping[str, Any]
#: Host tools: name -> function (sync or `async def`), or -> (function, JSON schema of its
#: arguments object), called by the sandboxed code as `tools.host.<name>(**kwargs)` or
#: `call_mcp_tool("mcp__host__<name>", {...})`. With a schema, arguments that do not fit
#: fail as `ToolError` (listing every violation) before the function is called.
HostTools: TypeAlias = Mapping[
    str, Callable[..., Any] | tuple[Callable[..., Any], Mapping[str, Any]]
]
#: How a run ended. Only "ok" and "error" are decided by the program.
Status: TypeAlias = Literal[
    "ok", "error", "timeout", "memory_limit", "output_limit", "tool_call_limit",
    "disk_limit", "stack_overflow", "policy_violation", "invalid_input",
    "session_poisoned", "busy", "cancelled", "internal_error",
]

class SandboxError(Exception):
    """The sandbox itself could not be set up or failed (never raised for what the code in
    it does: that is in the `Execution`)."""

class ConfigError(SandboxError):
    """The config file cannot be used: the message names the file, the key and what is
    wrong."""

class SessionError(SandboxError):
    """A session could not be saved, restored or forked (its journal passed its cap, the
    snapshot is of another format or runtime, or a replayed run ended differently)."""

class ToolError(Exception):
    """Raise it in a host tool to fail with a message the sandboxed code may read: the
    guest gets `ToolError` with this text. Any other exception a host tool raises passes
    only its type and the tool's name (`host tool mcp__host__lookup raised KeyError`),
    unless the Sandbox was made with `tool_error_messages=True`. A `KeyboardInterrupt` or
    `SystemExit` in a host tool is never the guest's: the run stops and the call that
    started it raises it."""

class ErrorInfo:
    """Why a run did not end "ok": a Python exception in the sandbox, or the limit that
    stopped it."""

    @property
    def type(self) -> str:
        """The exception type ("ValueError"), or for a limit a name such as "Timeout"."""
    @property
    def message(self) -> str:
        """The exception's message, or which limit was hit and its value."""
    @property
    def traceback(self) -> str | None:
        """The traceback as Python prints it (only the program's frames); None for limits."""

class Violation:
    """One place where code breaks a policy."""

    @property
    def line(self) -> int:
        """Line, from 1 (0 when refused while running at no known line)."""
    @property
    def column(self) -> int:
        """Column, from 1."""
    @property
    def rule(self) -> Literal["import", "builtin", "attribute", "syntax"]:
        """The rule broken."""
    @property
    def message(self) -> str:
        """What was refused and by which rule."""

class OutputFile:
    """A file the program left under `/output`."""

    @property
    def name(self) -> str:
        """Path under `/output`."""
    @property
    def size(self) -> int:
        """Size in bytes."""
    @property
    def mime_type(self) -> str:
        """MIME type guessed from the name."""
    @property
    def content(self) -> bytes:
        """The bytes."""
    @property
    def text(self) -> str | None:
        """The content as text when it is UTF-8, else None."""

class Execution:
    """The result of one run: what the program printed and returned, and how it ended.

    The attributes are the fields of `sandpy run --json`. A run that failed is still an
    `Execution` (see `status` and `error`), never an exception.
    """

    @property
    def status(self) -> Status:
        """How the run ended."""
    @property
    def ok(self) -> bool:
        """True when the program ran to completion (`status == "ok"`)."""
    @property
    def stdout(self) -> str:
        """What the program wrote to stdout."""
    @property
    def stderr(self) -> str:
        """What the program wrote to stderr (with the traceback of an uncaught exception)."""
    @property
    def return_value(self) -> JSON:
        """The value of the final expression (or the called function's result) as JSON
        types, its `repr()` string when it is not JSON-able (see `return_value_is_repr`), or
        None."""
    @property
    def return_value_is_repr(self) -> bool:
        """True when `return_value` is the value's `repr()` rather than the value."""
    @property
    def error(self) -> ErrorInfo | None:
        """Why the run did not end "ok" (None when it did)."""
    @property
    def output_truncated(self) -> bool:
        """True when stdout/stderr were cut at the output cap."""
    @property
    def duration_ms(self) -> float:
        """Wall time of the run, instantiation included, in milliseconds."""
    @property
    def memory_peak_bytes(self) -> int:
        """Largest size the guest's memory reached, in bytes."""
    @property
    def tool_calls(self) -> int:
        """Tool calls the program made."""
    @property
    def violations(self) -> list[Violation]:
        """Policy violations, when `status` is "policy_violation"."""
    @property
    def requests(self) -> list[dict[str, JSON]]:
        """HTTP requests the program made or tried: `method`, `url` (no query), `status`,
        `bytes_out`, `bytes_in`, and `error` when it failed."""
    @property
    def files(self) -> list[OutputFile]:
        """Files the program left under `/output`, whatever the status."""
    @property
    def outputs(self) -> list[dict[str, JSON]]:
        """What a notebook would show, in order: `kind` ("display" for `display()`,
        `plt.show()` and figures left open; "result" for the final value), `data` (mime
        type to text, `image/png` as base64; `text/plain` always) and `omitted` when a
        format was left out (over the budget, or its `_repr_*_` method failed)."""
    @property
    def outputs_dropped(self) -> int:
        """Rich outputs past the run's budget (100 outputs, the `/output` quota's
        bytes), not kept."""
    def to_dict(self) -> dict[str, JSON]:
        """The execution as the dict `sandpy run --json` prints (file contents in
        `content_base64`)."""

class Sandbox:
    """Runs Python code in a WebAssembly sandbox, each run in a brand-new instance.

    `config` is a path to the JSON config file the `sandpy` CLI reads (upstream
    `mcpServers`, whose tools the code may call, and the `sandpy` section); None means no
    config: default limits (30 s, 256 MiB, 1 MiB of output), no tools. `policy` applies to
    every run. `mounts` maps guest paths to host folders the code may read. `tier` is
    where runs execute: `"wasm"` (the default) or `"native"`, the machine's CPython with
    compiled packages (numpy, pandas) confined by the kernel, configured in the config's
    `sandpy.native` section (Linux only; see docs/guide/native-tier.md). `allow_hosts`
    adds entries to the config's `sandpy.network.allow` (`"api.github.com"`,
    `"127.0.0.1:8080"`, `"GET https://pypi.org/simple/*"`): the code reaches them with
    `urllib.request` or `http.client`, the requests made by the host (docs/guide/network.md);
    without any, runs have no network.

    Host tools (`tools=` of a run) never run on the run's thread, so the run's deadline,
    `tool_timeout_ms` and cancellation hold whatever they do: sync functions run on this
    Sandbox's pool of at most `tool_threads` daemon threads, `async def` ones on the
    caller's loop under `run_async`, else on this Sandbox's own event loop (one thread).
    A call the run stops waiting for is cancelled (a sync function already running
    finishes on its thread, its answer dropped; one still waiting for a thread or the loop
    leaves at once with its arguments). When every thread is busy, at most `tool_queue`
    calls of one run wait to start, four times that of all runs, and their arguments at
    most about 256 MiB (as Python objects, estimated): a call past a bound fails at once
    with a `ToolError` naming it. `tool_error_messages=True` passes every exception's
    message to the code, not only a `sandpy.ToolError`'s.

    Creating the first Sandbox of a process loads the compiled runtime (compiling it once
    per machine and version, see `warmup`). A Sandbox is safe to share between threads;
    runs release the GIL. Raises `ConfigError` for an unusable config, `SandboxError` when
    the runtime cannot be loaded, `ValueError`/`TypeError` for bad arguments.
    """

    def __init__(
        self,
        config: str | os.PathLike[str] | None = None,
        policy: PolicyArg | None = None,
        mounts: Mapping[str, str | os.PathLike[str]] | None = None,
        tier: Literal["wasm", "native"] | None = None,
        allow_hosts: Sequence[str] | None = None,
        *,
        tool_threads: int = 16,
        tool_queue: int = 1024,
        tool_error_messages: bool = False,
    ) -> None: ...
    def run(
        self,
        code: str,
        *,
        timeout_ms: int | None = None,
        memory_mb: int | None = None,
        stdin: str | bytes | None = None,
        files: Mapping[str, str | bytes] | None = None,
        tools: HostTools | None = None,
        allowed_tools: Sequence[str] | None = None,
        policy: PolicyArg | None = None,
        on_output: Callable[[str, str], object] | None = None,
        approve: Callable[[str, dict[str, Any]], bool | Awaitable[bool]] | None = None,
        require_approval: Sequence[str] | None = None,
        allow_hosts: Sequence[str] | None = None,
    ) -> Execution:
        """Run `code` as a program (`__main__`) in a fresh instance.

        `timeout_ms`/`memory_mb` override the config's and the policy's limits; `stdin` is
        what the program reads; `files` are written to `/tmp/<path>` first;
        `allowed_tools` (names or globs) narrows the tools it may call; `policy` replaces
        the sandbox's for this run. `tools` gives the code Python functions as the MCP
        server `host` (beside the config's servers): arguments and results cross as JSON
        (the arguments object becomes keyword arguments), an exception reaches the code
        as `ToolError` (a `sandpy.ToolError`'s message, else the exception's type and the
        tool's name), and calls the code makes together (`asyncio.gather`) run
        concurrently (sync ones up to the Sandbox's `tool_threads`). At the run's
        deadline the run ends `timeout` naming the tools it waited for, whatever they
        do; their calls are cancelled. Ctrl-C stops the run and raises
        `KeyboardInterrupt`, as does a `KeyboardInterrupt` raised in a host tool. `on_output(stream, text)` is called with
        what the program writes (`"stdout"` or `"stderr"`) as it writes it, within the
        output cap (the `Execution` still has all of it; an exception it raises is
        reported through `sys.unraisablehook`). `approve(tool, arguments)` (a function or
        a coroutine function) decides on each tool call that needs approval (the
        config's `sandpy.approve`, the policy's `approve`, and `require_approval` here):
        the call waits for it within the run's time limit, and a falsy answer or an
        exception refuses the call (the code gets `ToolError`); without `approve` such
        calls are refused. `allow_hosts` adds entries to the sandbox's network for this
        run only (as `Sandbox(allow_hosts=...)` does for every run). Never raises for
        what the code does.
        """
    def run_async(
        self,
        code: str,
        *,
        timeout_ms: int | None = None,
        memory_mb: int | None = None,
        stdin: str | bytes | None = None,
        files: Mapping[str, str | bytes] | None = None,
        tools: HostTools | None = None,
        allowed_tools: Sequence[str] | None = None,
        policy: PolicyArg | None = None,
        on_output: Callable[[str, str], object] | None = None,
        approve: Callable[[str, dict[str, Any]], bool | Awaitable[bool]] | None = None,
        require_approval: Sequence[str] | None = None,
        allow_hosts: Sequence[str] | None = None,
    ) -> Coroutine[Any, Any, Execution]:
        """`run` on the running asyncio loop, as a coroutine (`asyncio.create_task` takes
        it): the run executes on sandpy's threads, and cancelling the awaiting task stops
        it (status `cancelled`) and cancels its host calls. `async def` host tools run on
        this loop. Call it from a coroutine."""
    def call_function(
        self,
        source: str,
        name: str,
        args: Sequence[JSON] | None = None,
        kwargs: Mapping[str, JSON] | None = None,
        *,
        timeout_ms: int | None = None,
        memory_mb: int | None = None,
        stdin: str | bytes | None = None,
        files: Mapping[str, str | bytes] | None = None,
        tools: HostTools | None = None,
        allowed_tools: Sequence[str] | None = None,
        policy: PolicyArg | None = None,
    ) -> Execution:
        """Load `source` as a module and call its function `name` with `args` (positional)
        or `kwargs` (keywords; not both); the result is the `return_value`. Arguments and
        result cross as JSON."""
    def call_batch(
        self,
        source: str,
        name: str,
        arguments: Iterable[Sequence[JSON] | Mapping[str, JSON]],
        *,
        jobs: int | None = None,
        timeout_ms: int | None = None,
        memory_mb: int | None = None,
        stdin: str | bytes | None = None,
        files: Mapping[str, str | bytes] | None = None,
        tools: HostTools | None = None,
        allowed_tools: Sequence[str] | None = None,
        policy: PolicyArg | None = None,
    ) -> list[Execution]:
        """`call_function` once per item of `arguments` (a list: positional, a dict:
        keywords), each in a fresh instance, `jobs` at a time (default: the number of
        cores), the GIL released for the whole batch. The Executions are in the order of
        `arguments`; an item that is not usable arguments is that item's `invalid_input`."""
    def call_function_async(
        self,
        source: str,
        name: str,
        args: Sequence[JSON] | None = None,
        kwargs: Mapping[str, JSON] | None = None,
        *,
        timeout_ms: int | None = None,
        memory_mb: int | None = None,
        stdin: str | bytes | None = None,
        files: Mapping[str, str | bytes] | None = None,
        tools: HostTools | None = None,
        allowed_tools: Sequence[str] | None = None,
        policy: PolicyArg | None = None,
    ) -> Coroutine[Any, Any, Execution]:
        """`call_function` on the running asyncio loop (see `run_async`)."""
    def call_batch_async(
        self,
        source: str,
        name: str,
        arguments: Iterable[Sequence[JSON] | Mapping[str, JSON]],
        *,
        jobs: int | None = None,
        timeout_ms: int | None = None,
        memory_mb: int | None = None,
        stdin: str | bytes | None = None,
        files: Mapping[str, str | bytes] | None = None,
        tools: HostTools | None = None,
        allowed_tools: Sequence[str] | None = None,
        policy: PolicyArg | None = None,
    ) -> Coroutine[Any, Any, list[Execution]]:
        """`call_batch` on the running asyncio loop; cancelling the awaiting task stops
        the calls not yet finished."""
    def check(self, code: str, policy: PolicyArg | None = None) -> list[Violation]:
        """Check `code` against a policy without running it (a syntax error is a
        violation). `policy` defaults to the sandbox's, else "default"."""
    def session(self) -> Session:
        """A new `Session` (limits from the config's `sandpy.sessions`)."""
    @property
    def cache_file(self) -> pathlib.Path:
        """The compiled runtime's cache file (shared with the `sandpy` CLI)."""
    @property
    def policy(self) -> str | None:
        """The name of the policy every run gets (None when there is none)."""

class Session:
    """One interpreter whose globals, imports and files stay between runs.

    A run that hits a limit poisons the session: later runs end "session_poisoned" until
    `reset()`. Use it as a context manager, or call `close()`, to free its instance.
    """

    def run(
        self,
        code: str,
        *,
        timeout_ms: int | None = None,
        files: Mapping[str, str | bytes] | None = None,
        tools: HostTools | None = None,
        allowed_tools: Sequence[str] | None = None,
        policy: PolicyArg | None = None,
        on_output: Callable[[str, str], object] | None = None,
        approve: Callable[[str, dict[str, Any]], bool | Awaitable[bool]] | None = None,
        require_approval: Sequence[str] | None = None,
    ) -> Execution:
        """Run `code` in the session's namespace (its last expression is `return_value`).
        `files` are added to the session's `/tmp`; the memory limit is the session's;
        `tools` are host tools as for `Sandbox.run` (a restore answers their calls from the
        journal); `on_output`, `approve` and `require_approval` as for `Sandbox.run`."""
    def run_async(
        self,
        code: str,
        *,
        timeout_ms: int | None = None,
        files: Mapping[str, str | bytes] | None = None,
        tools: HostTools | None = None,
        allowed_tools: Sequence[str] | None = None,
        policy: PolicyArg | None = None,
        on_output: Callable[[str, str], object] | None = None,
        approve: Callable[[str, dict[str, Any]], bool | Awaitable[bool]] | None = None,
        require_approval: Sequence[str] | None = None,
    ) -> Coroutine[Any, Any, Execution]:
        """`run` as a coroutine on the running asyncio loop (runs of one session still go
        one at a time, in call order). Cancelling the awaiting task stops the run as a
        timeout does: the session is poisoned (`session_poisoned` until `reset()`)."""
    def save(self) -> bytes:
        """The session's journal (JSON bytes), for `Session.restore`."""
    @staticmethod
    def restore(sandbox: Sandbox, data: bytes, *, tools: HostTools | None = None) -> Session:
        """A new session rebuilt from `data` by replaying its runs (`ValueError` for data
        that is not a saved session, `SessionError` when the replay fails). Give the
        `tools` the saved runs used: their calls are answered from the journal, not made
        again, but the code must find the same tools. Each run is replayed under the
        limits it was given (its `timeout_ms`); Ctrl-C stops the replay and raises
        `KeyboardInterrupt`."""
    def fork(self, *, tools: HostTools | None = None) -> Session:
        """A second, independent session with this one's state (its runs are replayed,
        each under its own limits: give the `tools` they used, as for `restore`). Ctrl-C
        stops the replay and raises `KeyboardInterrupt`."""
    def reset(self) -> None:
        """Forget all state: the next run starts from a fresh interpreter."""
    def close(self) -> None:
        """Free the session's instance; later calls raise `ValueError`."""
    @property
    def closed(self) -> bool:
        """True once `close()` was called."""
    def __enter__(self) -> Session: ...
    def __exit__(self, *exc: object) -> bool: ...

def warmup() -> pathlib.Path:
    """Compile the Python runtime into the cache now (once per machine and sandpy
    version), printing a progress line on stderr; returns the cache file's path."""
