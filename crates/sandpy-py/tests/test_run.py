"""Runs and what comes back: statuses, the Execution's fields, limits, files, policies."""

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

import sandpy

# The fields of `sandpy run --json` (Execution's serde shape) that are always present.
JSON_FIELDS = {
    "status", "stdout", "stderr", "return_value", "error", "output_truncated",
    "duration_ms", "memory_peak_bytes", "tool_calls",
}


def test_ok_run_has_the_cli_json_fields_as_attributes(sb):
    r = sb.run("print('hi')\n6 * 7")
    assert isinstance(r, sandpy.Execution)
    assert (r.status, r.ok, r.stdout, r.stderr) == ("ok", True, "hi\n", "")
    assert r.return_value == 42 and r.return_value_is_repr is False
    assert r.error is None and r.output_truncated is False
    assert r.duration_ms > 0 and r.memory_peak_bytes > 0 and r.tool_calls == 0
    assert r.files == [] and r.violations == []
    d = r.to_dict()
    assert JSON_FIELDS <= d.keys()
    assert d["status"] == "ok" and d["return_value"] == 42 and d["stdout"] == "hi\n"


def test_to_dict_matches_the_cli_json(cli):
    code = "import sys\nprint('out'); print('err', file=sys.stderr)\n{'a': [1, 2.5, None]}"
    out = subprocess.run([str(cli), "run", "--json", "-c", code], capture_output=True, text=True)
    expected = json.loads(out.stdout)
    got = sandpy.Sandbox().run(code).to_dict()
    for d in (expected, got):
        d.pop("duration_ms"), d.pop("memory_peak_bytes")
    assert got == expected


def test_return_values_cross_as_json_or_repr(sb):
    r = sb.run("{'a': [1, 2.5, None, True], 'b': 'x' * 3}")
    assert r.return_value == {"a": [1, 2.5, None, True], "b": "xxx"}
    r = sb.run("object()")
    assert r.return_value_is_repr and r.return_value.startswith("<object object")
    assert sb.run("x = 1").return_value is None


def test_python_exceptions_are_an_error_status_not_raised(sb):
    r = sb.run("def f():\n    raise ValueError('bad value')\nf()")
    assert (r.status, r.ok) == ("error", False)
    assert r.error.type == "ValueError" and r.error.message == "bad value"
    assert "line 2, in f" in r.error.traceback and "ValueError: bad value" in r.stderr
    assert sb.run("def (").error.type == "SyntaxError"


def test_limits_end_runs_with_their_status(sb):
    r = sb.run("while True: pass", timeout_ms=200)
    assert r.status == "timeout" and r.error.type == "Timeout" and r.error.traceback is None
    assert 150 < r.duration_ms < 5000
    r = sb.run("x = bytearray(200 * 1024 * 1024)", memory_mb=64)
    assert r.status == "memory_limit"
    r = sb.run("while True: print('x' * 1000)")
    assert r.status == "output_limit" and r.output_truncated


def test_stdin_and_input_files(sb):
    assert sb.run("input()", stdin="typed\n").return_value == "typed"
    assert sb.run("import sys; sys.stdin.buffer.read()", stdin=b"\x00\x01").return_value_is_repr
    code = "open('/tmp/a.txt').read() + open('/tmp/d/b.bin', 'rb').read().decode()"
    r = sb.run(code, files={"a.txt": "one ", "d/b.bin": b"two"})
    assert r.return_value == "one two"


def test_output_files_come_back(sb):
    r = sb.run("open('/output/r.txt', 'w').write('result')")
    [f] = r.files
    assert (f.name, f.size, f.content, f.text, f.mime_type) == ("r.txt", 6, b"result", "result", "text/plain")


def test_policies_per_run_and_per_sandbox(sb):
    r = sb.run("import socket", policy="strict")
    assert r.status == "policy_violation"
    [v] = r.violations
    assert (v.line, v.rule) == (1, "import") and "socket" in v.message
    assert sb.run("import json", policy={"denied_modules": ["json"]}).status == "policy_violation"
    strict = sandpy.Sandbox(policy="strict")
    assert strict.policy == "strict"
    assert strict.run("import socket").status == "policy_violation"
    assert strict.run("1 + 1").return_value == 2


def test_check_lists_violations_without_running(sb):
    violations = sb.check("import socket\nopen('x')", policy="strict")
    assert [(v.line, v.rule) for v in violations] == [(1, "import"), (2, "builtin")]
    assert sb.check("print(1)") == []
    [syntax] = sb.check("def (")
    assert syntax.rule == "syntax"


def test_call_function_with_args_or_kwargs(sb):
    src = "def f(a, b=2):\n    return {'product': a * b}"
    assert sb.call_function(src, "f", [3]).return_value == {"product": 6}
    assert sb.call_function(src, "f", (3, 4)).return_value == {"product": 12}
    assert sb.call_function(src, "f", kwargs={"a": 3, "b": 5}).return_value == {"product": 15}
    r = sb.call_function(src, "missing")
    assert r.status == "error" and r.error.type in ("AttributeError", "NameError", "LookupError")
    assert sb.call_function(src, "f", ["x", 2]).return_value == {"product": "xx"}


def test_config_file_limits_and_policies(tmp_path):
    config = tmp_path / "sandpy.json"
    config.write_text(json.dumps({"sandpy": {
        "limits": {"timeout_ms": 150},
        "policies": {"nojson": {"denied_modules": ["json"]}},
    }}))
    sb = sandpy.Sandbox(config=config)
    r = sb.run("while True: pass")
    assert r.status == "timeout" and "150 ms" in r.error.message
    assert sb.run("import json", policy="nojson").status == "policy_violation"
    assert sandpy.Sandbox(config=str(config), policy="nojson").policy == "nojson"


def test_mounts_are_readable(tmp_path):
    (tmp_path / "x.txt").write_text("mounted")
    sb = sandpy.Sandbox(mounts={"/data": tmp_path})
    assert sb.run("open('/data/x.txt').read()").return_value == "mounted"
    assert sb.run("open('/data/y.txt', 'w')").status == "error"


def test_warmup_reports_and_returns_the_cache_file(capsys):
    path = sandpy.warmup()
    assert Path(path).is_file()
    assert "sandpy: runtime ready in" in capsys.readouterr().err


def test_on_output_gets_what_the_program_writes_as_it_writes_it(sb):
    seen = []
    r = sb.run(
        "import sys, time\nprint('first')\nprint('oops', file=sys.stderr)\n"
        "time.sleep(1)\nprint('last')",
        on_output=lambda stream, text: seen.append((stream, text, time.monotonic())),
    )
    ended = time.monotonic()
    assert r.ok and r.stdout == "first\nlast\n" and r.stderr == "oops\n"
    # Each write as it happens (`print` writes text and newline apart); run by run, the
    # streams interleave as the program wrote them.
    runs = []
    for stream, text, _ in seen:
        if runs and runs[-1][0] == stream:
            runs[-1][1] += text
        else:
            runs.append([stream, text])
    assert runs == [["stdout", "first\n"], ["stderr", "oops\n"], ["stdout", "last\n"]]
    # The first line came while the program still slept, not with its result.
    assert ended - seen[0][2] > 0.5


def test_on_output_keeps_the_output_cap_and_survives_a_failing_callback(sb, monkeypatch):
    chunks = []
    r = sb.run("print('x' * 5000)", policy={"max_output_bytes": 100},
               on_output=lambda s, t: chunks.append(t))
    assert r.status == "output_limit" and sum(map(len, chunks)) == 100

    def broken(stream, text):
        raise RuntimeError("the callback failed")

    reported = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: reported.append(u.exc_value))
    r = sb.run("print('still runs')", on_output=broken)
    assert r.ok and r.stdout == "still runs\n"
    assert reported and all(isinstance(e, RuntimeError) for e in reported)
    with pytest.raises(TypeError, match="on_output must be a callable"):
        sb.run("1", on_output=42)


def test_on_output_in_a_session_and_a_coroutine(sb):
    seen = []
    with sb.session() as s:
        s.run("x = 1\nprint('cell one')", on_output=lambda st, t: seen.append(t))
        s.run("print('cell', x + 1)", on_output=lambda st, t: seen.append(t))

        async def cell():
            return await s.run_async("print('async cell')", on_output=lambda st, t: seen.append(t))

        assert asyncio.run(cell()).ok
    assert "".join(seen) == "cell one\ncell 2\nasync cell\n"


def test_stream_yields_output_as_it_is_written_then_the_execution(sb):
    code = "import time\nprint('one', flush=True)\ntime.sleep(0.5)\nprint('two')\n42"

    async def main():
        items, started = [], time.monotonic()
        async for item in sandpy.stream(sb, code, timeout_ms=10_000):
            items.append((item, time.monotonic() - started))
        return items

    items = asyncio.run(main())
    outputs = [item for item, _ in items if isinstance(item, sandpy.Output)]
    assert "".join(o.text for o in outputs) == "one\ntwo\n"
    assert outputs[0] == sandpy.Output("stdout", "one")  # print writes the line, then "\n"
    execution, ended = items[-1]
    assert isinstance(execution, sandpy.Execution) and execution.return_value == 42
    first_at = items[0][1]
    assert ended - first_at > 0.3, items  # the first line came while the program slept


def test_leaving_a_stream_early_stops_the_run(sb):
    code = "import time\nprint('started', flush=True)\ntime.sleep(30)"

    with sb.session() as session:
        async def main():
            items = sandpy.stream(session, code, timeout_ms=60_000)
            async for item in items:
                assert item == sandpy.Output("stdout", "started")
                break
            await items.aclose()
            # A session runs one program at a time: the next one waits for the first.
            started = time.monotonic()
            await session.run_async("1 + 1")
            return time.monotonic() - started

        assert asyncio.run(main()) < 10
