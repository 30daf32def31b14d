"""The Python side of the native tier: the zygote's start (`boot`) and one run in a
confined child (`run`, or `serve` for a session's cells).

The zygote imports `sandpy_guest` (the same runner, tool API and policy code as the
WebAssembly guest) and the configured packages once; each run is a fork of it. The child
talks to the host over one inherited socket (fd 3), one JSON line per message: the host
sends the task, the child asks for tools (`sandpy_channel.ask`) and finally sends its
outcome.
"""

import base64
import contextlib
import gc
import importlib
import json
import os
import random
import resource
import shutil
import site
import stat
import sys
import tempfile

from sandpy_channel import CHANNEL_FD, read, write

OUTPUT_DIR = "/output"


def boot(site_dirs: list[str], preimport: list[str]) -> None:
    """Set up the zygote: packages' folders, the guest code, the configured imports.
    A failure is written to the control socket (fd 3) and ends the process."""
    try:
        for folder in site_dirs:
            site.addsitedir(folder)
        # Packages first: they read the environment the zygote set (one BLAS thread),
        # which importing the runner then empties for the runs.
        for name in preimport:
            importlib.import_module(name)
        _light_preload()
        from sandpy_guest import runner

        # What the runner sets up once per interpreter is done here, once for every run
        # (each run's own part is in `run`): fewer pages for each fork to copy.
        runner._prepare_interpreter()
    except BaseException as exc:  # noqa: BLE001 - reported to the host, which refuses to start
        message = f"{type(exc).__name__}: {exc}"
        os.write(CHANNEL_FD, json.dumps({"error": message}).encode())
        os._exit(1)
    # Everything alive now is shared with every run copy-on-write: keep the collector
    # from walking (and so copying) it in each child.
    gc.collect()
    gc.freeze()


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
    if kind == "Call":
        return types.Task_Call(types.FunctionCall(**body))
    raise ValueError(f"unknown task {kind!r}")


def _options(value: dict):  # type: ignore[no-untyped-def, type-arg]
    from wit_world.imports import types

    policy = value.get("policy")
    return types.RunOptions(
        filename=value["filename"],
        policy=types.Policy(**policy) if policy is not None else None,
        keep_globals=value["keep_globals"],
        environment=[tuple(pair) for pair in value["environment"]],
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
    return {"value": value, "error": error, "violations": violations}


def _reseed() -> None:
    """State every fork would otherwise share with its siblings."""
    random.seed(int.from_bytes(os.urandom(32)))
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()  # from the kernel's entropy


def run() -> None:
    """Run the task the host sends, in this (confined) child, and send its outcome."""
    _start()
    _answer(read())


def serve() -> None:
    """A session: run each task the host sends, one after another in the same
    interpreter, until the host hangs up (then `read` ends the process). Each cell gets
    the files it left under /output, which is then emptied."""
    _start()
    while True:
        _answer(read())


def _start() -> None:
    """What a run does once before its first task."""
    from sandpy_guest import packages

    os.chdir("/tmp")  # the run's scratch folder (the zygote prepared the rest)
    packages.use_mounted()
    tempfile._name_sequence = None  # type: ignore[attr-defined]
    _reseed()


def _answer(request: object) -> None:
    """Run one task and send its outcome."""
    from sandpy_guest import runner

    assert isinstance(request, dict)
    _write_inputs(request.get("files", []))
    outcome = runner.execute(_task(request["task"]), _options(request["options"]))
    message = _encode(outcome)
    # With the outcome, what the host would otherwise wait for the process's end to learn:
    # the files under /output (its size cap bounds them; taken, so that the next cell
    # of a session starts with it empty) and the peak resident size.
    message["files"] = _take_output_files()
    message["max_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    write({"outcome": message})


def _write_inputs(files: list[dict[str, str]]) -> None:
    """The run's input files, into the scratch folder (paths checked by the host)."""
    for file in files:
        path = os.path.join("/tmp", file["path"])
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as out:
            out.write(base64.b64decode(file["content_base64"]))


def _take_output_files() -> list[dict[str, str]]:
    """The regular files under /output, read; then everything under it is removed."""
    files = []
    for folder, _, names in os.walk(OUTPUT_DIR):
        for name in names:
            path = os.path.join(folder, name)
            try:
                if not stat.S_ISREG(os.lstat(path).st_mode):
                    continue
                with open(path, "rb") as file:
                    content = file.read()
            except OSError:
                continue
            relative = os.path.relpath(path, OUTPUT_DIR)
            files.append({"name": relative, "content_base64": base64.b64encode(content).decode()})
    with contextlib.suppress(OSError):
        for entry in os.scandir(OUTPUT_DIR):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
    return files
