"""The native tier from Python: `Sandbox(tier="native")` runs numpy in the machine's
CPython, confined by the kernel, with the same `Execution` as the WebAssembly tier."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

import sandpy

from conftest import REPO

# The venv the CLI's tests make with `sandpy build --native` (same pins).
PACKAGES = ["numpy==2.4.6", "pandas==3.1.1"]
VENV = REPO / "target" / "native-test-venv"


@pytest.fixture(scope="module")
def native_config(tmp_path_factory, cli):
    marker = VENV / ".installed"
    if not marker.is_file() or marker.read_text() != " ".join(PACKAGES):
        args = [str(cli), "build", "--native", "--output", str(VENV)]
        for package in PACKAGES:
            args += ["--with", package]
        subprocess.run(args, check=True)
        marker.write_text(" ".join(PACKAGES))
    config = tmp_path_factory.mktemp("native") / "sandpy.json"
    native = {"venv": str(VENV), "preimport": ["numpy"]}
    config.write_text(json.dumps({"sandpy": {"native": native}}))
    return config


def test_tier_native_runs_numpy_and_answers_like_the_wasm_tier(native_config):
    native = sandpy.Sandbox(config=native_config, tier="native")
    execution = native.run("import numpy as np, sys\nprint('hi')\n[int(np.arange(5).sum()), sys.version_info[1]]")
    assert execution.status == "ok", execution.error
    assert execution.stdout == "hi\n"
    total, minor = execution.return_value
    assert total == 10
    assert minor == sys.version_info[1] or minor < 14  # the venv's Python, not 3.14
    failed = native.run("1 / 0")
    assert failed.status == "error"
    assert failed.error.type == "ZeroDivisionError"
    timed_out = native.run("while True: pass", timeout_ms=500)
    assert timed_out.status == "timeout"
    called = native.call_function("def f(x):\n    return x * 2\n", "f", [21])
    assert called.return_value == 42


def test_native_sessions_keep_state_call_tools_and_restore_by_replay(native_config):
    native = sandpy.Sandbox(config=native_config, tier="native")
    calls = []

    def double(x):
        calls.append(x)
        return x * 2

    s = native.session()
    first = s.run(
        "import numpy as np, sys\nx = np.arange(4)\ny = call_mcp_tool('mcp__host__double', {'x': 21})\nsys.version_info[1]",
        tools={"double": double},
    )
    assert first.status == "ok", first.error
    assert first.return_value < 14  # the venv's Python: the session runs on the native tier
    assert s.run("[int(x.sum()), y]").return_value == [6, 42]
    # A replay answers the tool call from the journal: the tool is not called again.
    restored = sandpy.Session.restore(native, s.save())
    assert restored.run("[int(x.sum()), y]").return_value == [6, 42]
    assert calls == [21]
    # A snapshot of a native session is refused by a WebAssembly sandbox.
    with pytest.raises(sandpy.SessionError, match="runtime native-"):
        sandpy.Session.restore(sandpy.Sandbox(), s.save())
    assert s.run("while True: pass", timeout_ms=500).status == "timeout"
    assert s.run("1").status == "session_poisoned"
    for one in (s, restored):
        one.close()


def test_host_tools_answer_native_runs(native_config):
    native = sandpy.Sandbox(config=native_config, tier="native")
    execution = native.run(
        "import numpy\ncall_mcp_tool('mcp__host__double', {'x': int(numpy.int64(21))})",
        tools={"double": lambda x: x * 2},
    )
    assert execution.status == "ok", execution.error
    assert execution.return_value == 42


def test_native_runs_stream_ask_for_approval_and_announce_nothing_refused(native_config):
    native = sandpy.Sandbox(config=native_config, tier="native")
    seen, asked, reached = [], [], []

    def write(path):
        reached.append(path)
        return path

    def approve(tool, arguments):
        asked.append(arguments["path"])
        return arguments["path"] == "ok"

    code = (
        "print('before', flush=True)\nout = []\n"
        "for p in ['ok', 'no']:\n"
        "    try:\n        out.append(tools.host.write(path=p))\n"
        "    except ToolError as e:\n        out.append(str(e))\nout"
    )
    execution = native.run(code, tools={"write": write}, approve=approve,
                           require_approval=["mcp__host__write"],
                           on_output=lambda stream, text: seen.append(text))
    assert execution.status == "ok", execution.error
    assert execution.return_value == ["ok", "the user declined mcp__host__write"]
    assert asked == ["ok", "no"] and reached == ["ok"]
    assert "".join(seen) == "before\n"


def test_the_config_tier_is_the_default_and_wasm_stays_available(native_config):
    wasm = sandpy.Sandbox(config=native_config)
    assert wasm.run("import sys\nsys.version_info[:2]").return_value == [3, 14]
    refused = wasm.run("import numpy")
    assert refused.status == "error"
    with pytest.raises(ValueError, match="tier"):
        sandpy.Sandbox(tier="docker")


def _zygotes_of_this_process() -> list[int]:
    """Pids of this process's children that serve as the native tier's zygote."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = open(f"/proc/{entry}/stat").read()
            cmdline = open(f"/proc/{entry}/cmdline", "rb").read()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == os.getpid() and b"_native_zygote" in cmdline:
            found.append(int(entry))
    return found


def test_a_run_after_the_zygote_died_starts_a_new_one(native_config):
    native = sandpy.Sandbox(config=native_config, tier="native")
    assert native.run("1").status == "ok"
    before = set(_zygotes_of_this_process())
    assert before, "no zygote found"
    for pid in before:
        os.kill(pid, signal.SIGKILL)
    time.sleep(0.2)
    again = native.run("import numpy\nint(numpy.ones(3).sum())")
    assert again.status == "ok", again.error
    assert again.return_value == 3
    assert not before & set(_zygotes_of_this_process())


def test_native_runs_never_lose_their_last_output(native_config):
    # The host read the pipes once more after the outcome with tokio's `try_read`, which
    # answers "would block" while its reactor has not seen the pipe readable yet: under
    # load a run's last output was lost (seen in the full suite). Many short runs, each
    # printing right before its outcome.
    native = sandpy.Sandbox(config=native_config, tier="native")
    lost = [i for i in range(300) if native.run(f"print({i})").stdout != f"{i}\n"]
    assert lost == []
