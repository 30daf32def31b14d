"""The process's signal handlers: a boundary the package shares with every other library
in the interpreter. Wasmtime catches the faults of guest code (its epoch checks fault at
every 10 ms tick) with a SIGSEGV handler; a library that installs its own handler later
(Ray's workers install a crash reporter) must not take those faults for crashes."""

import subprocess
import sys
import textwrap

# Runs in a fresh interpreter: the handlers it replaces are process-wide.
SCRIPT = textwrap.dedent(
    """
    import ctypes, signal, sandpy
    sb = sandpy.Sandbox()
    assert sb.run("1").ok  # wasmtime's handlers are installed by now
    libc = ctypes.CDLL(None)
    libc.signal.restype = ctypes.c_void_p
    libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
    for sig in (signal.SIGSEGV, signal.SIGILL, signal.SIGFPE):
        libc.signal(sig, None)  # SIG_DFL: a fault it gets ends the process
    r = sb.run("n = 0\\nfor i in range(3_000_000):\\n    n += i\\nn", timeout_ms=60000)
    print(r.status, r.return_value)
    print(sb.run("while True: pass", timeout_ms=200).status)
    print(sb.run("def f(): return f()\\nf()").error.type)
    """
)


def test_a_signal_handler_installed_after_sandpy_does_not_take_the_guests_faults():
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
    assert out.stdout.split() == ["ok", str(sum(range(3_000_000))), "timeout", "RecursionError"]
