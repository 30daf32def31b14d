"""Run one task and report its outcome.

The host gives a task (run a program, call a function, list modules); this module runs
it with the tool API in builtins, captures the final expression's value, and turns an
escaping exception into a `PythonError` whose traceback shows only the user's frames.
"""

import ast
import binascii
import builtins
import inspect
import json
import linecache
import marshal
import os
import random
import re
import sys
import tempfile
import traceback
from types import CodeType, TracebackType
from typing import Any

from wit_world.imports.types import (
    CompiledCall,
    FunctionCall,
    Outcome,
    Policy,
    PythonError,
    RunOptions,
    Task,
    Task_Call,
    Task_CallCompiled,
    Task_Check,
    Task_Compile,
    Task_ListModules,
    Task_Run,
    Value,
    Value_Json,
    Value_Repr,
    Violation,
)

from . import display, event_loop, packages, policy, preload, tools
from . import network as _network  # noqa: F401  (routes http.client through the host)

_GUEST_DIR = os.path.dirname(os.path.abspath(__file__))
_RESULT_NAME = "__sandpy_result__"
_SCRATCH_DIR = "/tmp"
# The modules as pre-init left them: restored before reporting, so that user code that
# emptied or poisoned `sys.modules` cannot break the error report.
_SNAPSHOT_MODULES = dict(sys.modules)


_prepared = False
# Tracebacks keep the user's frames only (the run's file and modules under the scratch
# folder): set by the native tier, whose library frames name host paths (the venv's).
USER_FRAMES_ONLY = False
_session_namespace: dict[str, Any] | None = None


def _prepare_interpreter() -> None:
    """Set-up of the snapshot every instance starts from, once per instance."""
    global _prepared
    if _prepared:
        return
    _prepared = True
    # The snapshot's seed is the same for every run: reseed from WASI random. 256 bits,
    # not `random.seed()`'s 2,496 bytes of host randomness (~2% of a `print('hello')`).
    random.seed(int.from_bytes(os.urandom(32)))
    tempfile._name_sequence = None  # type: ignore[attr-defined]
    tempfile.tempdir = _SCRATCH_DIR
    os.chdir(_SCRATCH_DIR)  # the host preopens the run's private scratch folder here
    packages.use_mounted()
    for stream in (sys.stdout, sys.stderr):
        # Line buffering keeps output that precedes a timeout or a trap.
        stream.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    event_loop.install()
    for name, value in tools.API.items():
        setattr(builtins, name, value)
    builtins.display = display.display  # type: ignore[attr-defined]


def _is_internal(filename: str) -> bool:
    return filename.startswith(_GUEST_DIR) or filename.endswith("/app.py")


def _is_users_module(path: str) -> bool:
    """A module the code wrote under the run's scratch folder: not the Python installation's
    or the packages' files (on `sys.path`), which may lie under a host folder named /tmp
    too."""
    libraries = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *sys.path}
    libraries -= {"", ".", _SCRATCH_DIR}
    if any(prefix and path.startswith(prefix.rstrip("/") + "/") for prefix in libraries):
        return False
    return path.startswith(_SCRATCH_DIR + "/")


def _strip_internal(te: traceback.TracebackException, filename: str) -> None:
    """Drop guest frames, and the event-loop frames above the user's first frame."""
    seen: set[int] = set()
    pending = [te]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        frames = [frame for frame in current.stack if not _is_internal(frame.filename)]
        if USER_FRAMES_ONLY:
            frames = [f for f in frames if f.filename == filename or _is_users_module(f.filename)]
        first_user = next((i for i, f in enumerate(frames) if f.filename == filename), 0)
        current.stack = traceback.StackSummary.from_list(frames[first_user:])
        for linked in (current.__cause__, current.__context__, *(current.exceptions or [])):
            if linked is not None:
                pending.append(linked)


def _type_name(exc: BaseException) -> str:
    cls = type(exc)
    if cls.__module__ in ("builtins", "__main__"):
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def _format_exception(exc: BaseException, filename: str) -> str:
    te = traceback.TracebackException.from_exception(exc)
    _strip_internal(te, filename)
    return "".join(te.format())


# Packages with compiled parts: they cannot run in WebAssembly, only in the native tier.
_COMPILED_PACKAGES = frozenset(
    "numpy pandas scipy sklearn matplotlib torch tensorflow jax polars pyarrow lxml PIL cv2 "
    "statsmodels seaborn numba xgboost lightgbm shapely h5py tables psycopg2 grpc orjson "
    "pydantic_core cryptography".split()
)


def _hint_for(exc: BaseException) -> str | None:
    """What a `ModuleNotFoundError` of a compiled package should tell: where it runs."""
    if not isinstance(exc, ModuleNotFoundError) or not isinstance(exc.name, str):
        return None
    root = exc.name.partition(".")[0]
    if root not in _COMPILED_PACKAGES:
        return None
    return (
        f"sandpy: {root} has compiled parts, which the WebAssembly tier cannot load; it runs "
        "in sandpy's native tier when the operator enables it (tier \"native\" with a venv "
        "that has it). This tier has the standard library and pure-Python packages."
    )


def _python_error(exc: BaseException, filename: str) -> PythonError:
    _collect_figures()  # before `sys.modules` is put back as it was
    # The snapshot's modules back (the code may have emptied or poisoned `sys.modules`),
    # keeping those the code imported since: a session's later cells still use them (a
    # native extension module cannot be imported twice in one process).
    sys.modules.update(_SNAPSHOT_MODULES)
    hint = _hint_for(exc)
    if hint is not None:
        exc.add_note(hint)
    try:
        text = _format_exception(exc, filename)
    except BaseException as failure:  # noqa: BLE001 - the user broke the interpreter
        text = f"{type(exc).__name__}: {exc}\n(traceback unavailable: {type(failure).__name__})\n"
    sys.stderr.write(text)  # as CPython would print it
    sys.stderr.flush()
    message = str(exc) if hint is None else f"{exc}. {hint}"
    return PythonError(type_name=_type_name(exc), message=message, traceback=text)


def _to_value(value: Any) -> Value:
    try:
        return Value_Json(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError, RecursionError):
        return Value_Repr(repr(value))


def _compile_program(code: str, filename: str) -> CodeType:
    """Compile module code; a final expression is assigned to `_RESULT_NAME`."""
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    tree = compile(code, filename, "exec", flags=flags | ast.PyCF_ONLY_AST, dont_inherit=True)
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = tree.body[-1]
        # Both new nodes take the expression's place (not `fix_missing_locations`, which
        # walks the whole tree in Python on every run).
        target = ast.copy_location(ast.Name(id=_RESULT_NAME, ctx=ast.Store()), last)
        tree.body[-1] = ast.copy_location(ast.Assign(targets=[target], value=last.value), last)
    return compile(tree, filename, "exec", flags=flags, dont_inherit=True)


def _exec_module(code: str, options: RunOptions, compiled: CodeType | None = None) -> dict[str, Any]:
    """Run module `code` (or `compiled`, its code object from `_compile`) in a new
    namespace, or the session's."""
    filename = options.filename
    # Source lines for tracebacks, as CPython shows them for a file.
    linecache.cache[filename] = (len(code), None, code.splitlines(keepends=True), filename)
    global _session_namespace
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    if options.keep_globals:
        if _session_namespace is None:
            _session_namespace = namespace
        namespace = _session_namespace
    if options.policy is not None:
        policy.enforce(options.policy, namespace)
    if compiled is None:
        compiled = _compile_program(code, filename)
    if compiled.co_flags & inspect.CO_COROUTINE:
        event_loop.run(eval(compiled, namespace))  # top-level await
    else:
        exec(compiled, namespace)
    return namespace


def _outcome(value: Value | None = None, error: PythonError | None = None) -> Outcome:
    return Outcome(value=value, error=error, violations=[], outputs=[], outputs_dropped=0)


def _collect_figures() -> None:
    try:
        display.collect_figures()
    except BaseException as exc:  # noqa: BLE001 - the user broke matplotlib; report the rest
        sys.stderr.write(f"sandpy: the open figures could not be collected ({type(exc).__name__})\n")


def _with_outputs(outcome: Outcome) -> Outcome:
    """The figures still open become outputs (and are closed); the run's outputs join
    its outcome."""
    _collect_figures()
    outputs, dropped = display.take()
    outcome.outputs = outputs
    outcome.outputs_dropped = dropped
    return outcome


def _run(code: str, options: RunOptions) -> Outcome:
    namespace = _exec_module(code, options)
    if _RESULT_NAME in namespace:
        result = namespace.pop(_RESULT_NAME)
        if result is not None:
            display.add_result(result)
            return _outcome(_to_value(result))
    return _outcome()


def _call(call: FunctionCall, options: RunOptions, compiled: CodeType | None = None) -> Outcome:
    namespace = _exec_module(call.code, options, compiled)
    function = namespace.get(call.function)
    if function is None:
        raise NameError(f"the module defines no function {call.function!r}")
    if not callable(function):
        raise TypeError(f"{call.function!r} is a {type(function).__name__}, not a function")
    arguments = json.loads(call.arguments)
    if isinstance(arguments, list):
        result = function(*arguments)
    elif isinstance(arguments, dict):
        result = function(**arguments)
    else:
        raise TypeError("arguments must be a JSON list (positional) or object (keywords)")
    if inspect.iscoroutine(result):
        result = event_loop.run(result)
    try:
        encoded = json.dumps(result, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"{call.function}() returned a value that is not JSON-serialisable "
            f"({type(result).__name__}: {exc}): {repr(result)[:200]}"
        ) from None
    return _outcome(Value_Json(encoded))


def _compile(code: str, options: RunOptions) -> Outcome:
    """A batch's module compiled once (its check was done): its code object, marshalled, as
    base64 in a JSON string. Nothing of the module runs here."""
    compiled = _compile_program(code, options.filename)
    encoded = binascii.b2a_base64(marshal.dumps(compiled), newline=False).decode("ascii")
    return _outcome(Value_Json(json.dumps(encoded)))


def _call_compiled(task: CompiledCall, options: RunOptions) -> Outcome:
    """`_call` with the module's code object from `_compile` (checked there, under the same
    policy and file name): the module's top level still runs here, in this fresh instance."""
    compiled = marshal.loads(task.compiled)
    if not isinstance(compiled, CodeType):
        raise TypeError("the compiled module is not a code object")
    return _call(task.call, options, compiled)


def _list_modules() -> Outcome:
    report = {
        "available": sorted(preload.AVAILABLE),
        "absent": dict(sorted(preload.ABSENT.items())),
        "packages": sorted(packages.BUNDLED),
        "package_failures": dict(sorted(packages.FAILED.items())),
    }
    return _outcome(Value_Json(json.dumps(report)))


_NO_POLICY = Policy(name="none", allowed_modules=None, denied_modules=[], denied_builtins=[], denied_attributes=[])


def _refused_by_check(code: str, options: RunOptions) -> Outcome | None:
    """Run the static check of the run's policy; an outcome when it found violations."""
    if options.policy is None:
        return None
    found = policy.check(code, options.filename, options.policy)
    if not found:
        return None
    first = found[0]
    text = "".join(f"{options.filename}:{v.line}:{v.column}: {v.rule}: {v.message}\n" for v in found)
    sys.stderr.write(text)
    error = PythonError(type_name="PolicyViolation", message=first.message, traceback=text)
    return Outcome(value=None, error=error, violations=found, outputs=[], outputs_dropped=0)


def _with_runtime_violation(outcome: Outcome) -> Outcome:
    """A violation refused at run time is reported even when the code caught it."""
    refused = policy.violation()
    if refused is None:
        return outcome
    found = Violation(line=0, column=0, rule=refused.rule, message=str(refused))
    error = outcome.error
    if error is None or error.type_name != "PolicyViolation":
        error = PythonError(type_name="PolicyViolation", message=str(refused), traceback=error.traceback if error else "")
    return Outcome(
        value=None, error=error, violations=[found], outputs=outcome.outputs, outputs_dropped=outcome.outputs_dropped
    )


_SURROGATES = re.compile("[\ud800-\udfff]")


def _valid(text: Any) -> Any:
    """`text` as valid Unicode: each lone surrogate (a `__repr__`'s, a file name's) as
    U+FFFD. The WIT boundary carries UTF-8, which cannot hold one: lowering it would abort
    the interpreter and lose the run's outcome."""
    if not isinstance(text, str) or str.isascii(text):
        return text
    try:
        str.encode(text, "utf-8")
    except UnicodeEncodeError:
        return _SURROGATES.sub("\ufffd", text)
    return text


# The host's caps (`crates/sandpy/src/guest_report.rs`), one past each where the host
# says that there were more: what is past them is not lowered, only to be dropped.
_MAX_OUTPUTS = 100
_MAX_MIME_TYPES = 64 + 1
_MAX_VIOLATIONS = 1_000 + 1


def _valid_outcome(outcome: Outcome) -> Outcome:
    """Every string of `outcome` valid Unicode (see `_valid`), its lists cut at the host's
    caps. The host checks everything (sizes, counts, names, images) again: this side cannot
    be trusted to, as the code may replace it."""
    if len(outcome.outputs) > _MAX_OUTPUTS:
        outcome.outputs_dropped = min(outcome.outputs_dropped + len(outcome.outputs) - _MAX_OUTPUTS, 2**32 - 1)
        outcome.outputs = outcome.outputs[:_MAX_OUTPUTS]
    outcome.violations = outcome.violations[:_MAX_VIOLATIONS]
    value = outcome.value
    if isinstance(value, (Value_Json, Value_Repr)):
        value.value = _valid(value.value)
    error = outcome.error
    if error is not None:
        error.type_name = _valid(error.type_name)
        error.message = _valid(error.message)
        error.traceback = _valid(error.traceback)
    for found in outcome.violations:
        found.rule = _valid(found.rule)
        found.message = _valid(found.message)
    for output in outcome.outputs:
        output.data = [(_valid(mime), _valid(data)) for mime, data in output.data[:_MAX_MIME_TYPES]]
        output.omitted = [(_valid(mime), _valid(why)) for mime, why in output.omitted[:_MAX_MIME_TYPES]]
    return outcome


def execute(task: Task, options: RunOptions) -> Outcome:
    """Run `task`; never raises (a Python error becomes `Outcome.error`)."""
    try:
        _prepare_interpreter()
        tools.new_run()
        display.new_run(options.rich_output_limits)
        for name, value in options.environment:
            os.environ[name] = value
        if isinstance(task, Task_Check):
            found = policy.check(task.value, options.filename, options.policy or _NO_POLICY)
            outcome = Outcome(value=None, error=None, violations=found, outputs=[], outputs_dropped=0)
        elif isinstance(task, Task_Run):
            outcome = _refused_by_check(task.value, options) or _run(task.value, options)
        elif isinstance(task, Task_Call):
            outcome = _refused_by_check(task.value.code, options) or _call(task.value, options)
        elif isinstance(task, Task_Compile):
            outcome = _refused_by_check(task.value, options) or _compile(task.value, options)
        elif isinstance(task, Task_CallCompiled):
            outcome = _call_compiled(task.value, options)
        elif isinstance(task, Task_ListModules):
            outcome = _list_modules()
        else:
            raise TypeError(f"unknown task {task!r}")
    except SystemExit as exc:
        if exc.code is None or exc.code == 0:
            outcome = _outcome()
        else:
            outcome = _outcome(error=_python_error(exc, options.filename))
    except BaseException as exc:  # noqa: BLE001 - every escape is reported, never raised
        outcome = _outcome(error=_python_error(exc, options.filename))
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:  # noqa: BLE001 - a closed stream must not lose the outcome
                pass
    return _valid_outcome(_with_runtime_violation(_with_outputs(outcome)))
