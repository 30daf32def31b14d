"""The Python side of the native tier: the zygote's start (`boot`) and one run in a
confined child (`run`, or `serve` for a session's cells).

The zygote imports `sandpy_guest` (the same runner, tool API and policy code as the
WebAssembly guest) and the configured packages once; each run is a fork of it. The child
talks to the host over one inherited socket (fd 3), one JSON line per message: the host
sends the task, the child asks for tools (`sandpy_channel.ask`) and finally sends its
outcome.
"""

import base64
import gc
import importlib
import json
import linecache
import os
import random
import resource
import site
import sys
import tempfile

from sandpy_channel import CHANNEL_FD, read, write

# The guest code's modules besides this one: imported at boot, so that the runs need no
# path to the guest folder (a host cache path) on `sys.path`.
GUEST_MODULES = (
    "sandpy_channel",
    "componentize_py_types",
    "wit_world",
    "wit_world.imports",
    "wit_world.imports.types",
    "wit_world.imports.tools",
    "wit_world.imports.network",
    "sandpy_guest",
    "sandpy_guest.display",
    "sandpy_guest.event_loop",
    "sandpy_guest.network",
    "sandpy_guest.http_libraries",
    "sandpy_guest.packages",
    "sandpy_guest.policy",
    "sandpy_guest.tools",
    "sandpy_guest.runner",
)


def boot(site_dirs: list[str], preimport: list[str]) -> None:
    """Set up the zygote: packages' folders, the guest code, the configured imports.
    A failure is written to the control socket (fd 3) and ends the process."""
    try:
        _only_environment_packages(site_dirs)
        # Packages first: they read the environment the zygote set (one BLAS thread),
        # which importing the runner then empties for the runs.
        for name in preimport:
            importlib.import_module(name)
        _light_preload()
        from sandpy_guest import runner

        # What the runner sets up once per interpreter is done here, once for every run
        # (each run's own part is in `run`): fewer pages for each fork to copy.
        runner._prepare_interpreter()
        runner.USER_FRAMES_ONLY = True  # no venv or host paths in a run's traceback
        for name in GUEST_MODULES:
            importlib.import_module(name)
        _forget_guest_folder()
    except BaseException as exc:  # noqa: BLE001 - reported to the host, which refuses to start
        message = f"{type(exc).__name__}: {exc}"
        os.write(CHANNEL_FD, json.dumps({"error": message}).encode())
        os._exit(1)
    # Everything alive now is shared with every run copy-on-write: keep the collector
    # from walking (and so copying) it in each child.
    gc.collect()
    gc.freeze()


def _only_environment_packages(site_dirs: list[str]) -> None:
    """`sys.path`: the standard library and the environment's package folders only. The
    embedded interpreter starts from the base installation, whose `site` added the base's
    own site-packages (a venv made without system site packages must not see them)."""
    environment = {os.path.realpath(folder) for folder in site_dirs}
    base_sites = set(site.getsitepackages([sys.base_prefix, sys.base_exec_prefix]))
    user_site = site.getusersitepackages() if hasattr(site, "getusersitepackages") else None
    for entry in list(sys.path):
        real = os.path.realpath(entry)
        is_site = os.path.basename(real) in ("site-packages", "dist-packages")
        if real not in environment and (entry in base_sites or entry == user_site or is_site):
            sys.path.remove(entry)
            sys.path_importer_cache.pop(entry, None)
    for folder in site_dirs:
        site.addsitedir(folder)


def _forget_guest_folder() -> None:
    """The guest code is imported: its folder (under the host's cache folder) leaves
    `sys.path`, so that the runs see no host path but the Python's and the venv's."""
    folder = os.path.dirname(os.path.abspath(__file__))
    for entry in list(sys.path):
        if os.path.abspath(entry) == folder:
            sys.path.remove(entry)
            sys.path_importer_cache.pop(entry, None)


def _light_preload() -> None:
    """Stand in for `sandpy_guest.preload`, which imports the whole stdlib (free in the
    WebAssembly snapshot): here every extension module imported is mapped into the zygote,
    and each mapping is copied by every fork. Modules import at run time instead."""
    import types

    module = types.ModuleType("sandpy_guest.preload")
    module.AVAILABLE = sorted(sys.stdlib_module_names)  # type: ignore[attr-defined]
    module.ABSENT = {}  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    # The zygote's environment is not the runs'.
    os.environ.clear()


def _task(value: object):  # type: ignore[no-untyped-def]
    from wit_world.imports import types

    if value == "ListModules":
        return types.Task_ListModules()
    assert isinstance(value, dict)
    ((kind, body),) = value.items()
    if kind == "Run":
        return types.Task_Run(body)
    if kind == "Check":
        return types.Task_Check(body)
    if kind == "Compile":
        return types.Task_Compile(body)
    if kind == "Call":
        return types.Task_Call(types.FunctionCall(**body))
    raise ValueError(f"unknown task {kind!r}")


# A home for packages that keep a config or a cache there, in the run's own /tmp: without
# one, matplotlib warned on every run (~440 bytes) and made its config in a temporary
# folder. The run's values (the host's, e.g. secrets' placeholders) come after and win.
RUN_HOME = [
    ("HOME", "/tmp"),
    ("XDG_CONFIG_HOME", "/tmp/.config"),
    ("XDG_CACHE_HOME", "/tmp/.cache"),
    ("MPLCONFIGDIR", "/tmp/.config/matplotlib"),
    # Figures come back as outputs (`sandpy_guest.display` is a non-interactive backend
    # whose `show()` records them), whatever display the host has.
    ("MPLBACKEND", "module://sandpy_guest.display"),
]


def _options(value: dict):  # type: ignore[no-untyped-def, type-arg]
    from wit_world.imports import types

    policy = value.get("policy")
    return types.RunOptions(
        filename=value["filename"],
        policy=types.Policy(**policy) if policy is not None else None,
        keep_globals=value["keep_globals"],
        environment=RUN_HOME + [tuple(pair) for pair in value["environment"]],
        rich_output_limits=types.RichOutputLimits(**value["rich_output_limits"]),
    )


def _encode(outcome) -> dict:  # type: ignore[no-untyped-def, type-arg]
    from wit_world.imports import types

    value = outcome.value
    if isinstance(value, types.Value_Json):
        value = {"Json": value.value}
    elif isinstance(value, types.Value_Repr):
        value = {"Repr": value.value}
    error = outcome.error
    if error is not None:
        error = {"type_name": error.type_name, "message": error.message, "traceback": error.traceback}
    violations = [
        {"line": v.line, "column": v.column, "rule": v.rule, "message": v.message} for v in outcome.violations
    ]
    outputs = [
        {
            "kind": "Result" if output.kind == types.RichOutputKind.EXECUTE_RESULT else "Display",
            "data": output.data,
            "omitted": output.omitted,
        }
        for output in outcome.outputs
    ]
    return {
        "value": value,
        "error": error,
        "violations": violations,
        "outputs": outputs,
        "outputs_dropped": outcome.outputs_dropped,
    }


def _reseed() -> None:
    """State every fork would otherwise share with its siblings."""
    random.seed(int.from_bytes(os.urandom(32)))
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()  # from the kernel's entropy


def run(ahead: bool = False) -> None:
    """Run the task the host sends, in this (confined) child, and send its outcome; then
    wait: the zygote stops the process, reads its /output and ends it (`read` ends the
    process when the host hangs up). A process made `ahead` of its run warms up first."""
    _start(ahead)
    _answer(read())
    read()


def serve(ahead: bool = False) -> None:
    """A session: run each task the host sends, one after another in the same
    interpreter, until the host hangs up (then `read` ends the process). Between cells
    the zygote holds the process stopped; it hands each cell's /output files to the host
    and empties the folder."""
    _start(ahead)
    while True:
        _answer(read())


# What a process made ahead runs before its task comes (its value dropped, nothing
# printed): the runner's whole path for a small program, check, compile, run, print,
# the value's repr and the outcome's encoding.
WARM_UP = "print(end='')\nwords = [str(n) for n in range(32)]\n{'words': len(words)}\n"
WARM_UP_FILENAME = "<sandpy warm-up>"


def _warm_up() -> None:
    """Copy ahead the zygote's pages that every run writes to. A fork shares the zygote's
    memory copy-on-write, and a run's first write to each page (reference counts of the
    runner's functions, code objects and dicts) copies it: ~170 faults, most of a fresh
    `print('hello')`'s time in the child (1.3 ms against 0.3 ms for a second run). A
    process made ahead takes them while it waits, off its run's path. Nothing of the
    warm-up stays: its namespace is dropped, its source leaves the line cache, and it
    neither prints, writes files nor draws random numbers."""
    from sandpy_guest import policy, runner
    from wit_world.imports import types

    options = types.RunOptions(
        filename=WARM_UP_FILENAME,
        policy=None,
        keep_globals=False,
        environment=list(RUN_HOME),
        rich_output_limits=types.RichOutputLimits(count=1, bytes=1 << 10),
    )
    empty = types.Policy(name="", allowed_modules=None, denied_modules=[], denied_builtins=[], denied_attributes=[])
    policy.check(WARM_UP, WARM_UP_FILENAME, empty)
    json.dumps(_encode(runner.execute(types.Task_Run(WARM_UP), options)))
    linecache.cache.pop(WARM_UP_FILENAME, None)


def _start(ahead: bool = False) -> None:
    """What a run does once before its first task (warmed up when made `ahead`)."""
    from sandpy_guest import packages

    os.chdir("/tmp")  # the run's scratch folder (the zygote prepared the rest)
    _name_thread_limit()
    packages.use_mounted()
    if ahead:
        _warm_up()
    tempfile._name_sequence = None  # type: ignore[attr-defined]
    _reseed()


def _name_thread_limit() -> None:
    """A thread the kernel refuses raises an error that says why: the run's task limit
    (RLIMIT_NPROC in its own user namespace), or its memory cap (RLIMIT_AS), which each
    thread's stack counts against."""
    import threading

    limit = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    for name in ("_start_new_thread", "_start_joinable_thread"):
        start = getattr(threading, name, None)
        if start is None:
            continue

        def bounded(*args, _start=start, **kwargs):  # type: ignore[no-untyped-def]
            try:
                return _start(*args, **kwargs)
            except RuntimeError as exc:
                if threading.active_count() >= limit:
                    why = f"a native run may have at most {limit} threads at once"
                else:
                    why = "each thread's stack counts against the run's memory cap"
                raise RuntimeError(f"{exc} (sandpy: {why})") from None

        setattr(threading, name, bounded)


def _answer(request: object) -> None:
    """Run one task and send its outcome."""
    from sandpy_guest import runner

    assert isinstance(request, dict)
    try:
        _write_inputs(request.get("files", []))
    except _InputError as exc:
        # The cell's error, as its code's would be: no frames of this module (whose
        # path is the host's cache folder), and a session goes on to its next cell.
        error = {"type_name": type(exc.cause).__name__, "message": str(exc), "traceback": ""}
        write({"outcome": {"value": None, "error": error, "violations": [], "outputs": [], "outputs_dropped": 0}})
        return
    outcome = runner.execute(_task(request["task"]), _options(request["options"]))
    # Only the code's outcome: the files under /output and the memory peak are read by
    # the zygote, never taken from the run.
    write({"outcome": _encode(outcome)})


class _InputError(Exception):
    """An input file that could not be written where the run's earlier code left
    something in the way (a link, a folder, a full /tmp)."""

    def __init__(self, path: str, cause: OSError) -> None:
        super().__init__(f"sandpy could not write the input file {path!r}: {cause.strerror or cause}")
        self.cause = cause


def _write_inputs(files: list[dict[str, str]]) -> None:
    """The run's input files, into the scratch folder (paths checked by the host). A link
    a session's earlier cell left at a file's own name is replaced, not followed."""
    for file in files:
        path = os.path.join("/tmp", file["path"])
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if os.path.islink(path):
                os.unlink(path)
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
            with open(os.open(path, flags, 0o644), "wb") as out:
                out.write(base64.b64decode(file["content_base64"]))
        except OSError as exc:
            raise _InputError(path, exc) from None
