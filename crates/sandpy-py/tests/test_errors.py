"""Bad arguments raise ValueError/TypeError; sandbox problems raise SandboxError."""

import json

import pytest

import sandpy


def test_exception_tree():
    assert issubclass(sandpy.SandboxError, Exception)
    assert issubclass(sandpy.ConfigError, sandpy.SandboxError)
    assert sandpy.SandboxError.__module__ == "sandpy"


@pytest.mark.parametrize("kwargs, exc, words", [
    ({"timeout_ms": 0}, ValueError, "timeout_ms must be at least 1"),
    ({"timeout_ms": -5}, ValueError, "timeout_ms must be at least 1"),
    ({"memory_mb": 100_000}, ValueError, "memory_mb"),
    ({"timeout_ms": "fast"}, TypeError, "timeout_ms must be an int, not str"),
    ({"timeout_ms": True}, TypeError, "timeout_ms must be an int, not bool"),
    ({"memory_mb": 2**70}, ValueError, "memory_mb is out of range"),
    ({"stdin": 5}, TypeError, "stdin must be str or bytes"),
    ({"files": ["a"]}, TypeError, "files must be a dict"),
    ({"files": {"a": 1}}, TypeError, "files[\"a\"] must be str or bytes"),
    ({"files": {1: "x"}}, TypeError, "paths must be str"),
    ({"policy": 5}, TypeError, "policy must be a name"),
    ({"policy": "nope"}, ValueError, "unknown policy \"nope\""),
    ({"policy": {"denied_modulez": []}}, ValueError, "denied_modulez"),
    ({"allowed_tools": ["["]}, ValueError, "allowed_tools"),
])
def test_bad_run_arguments(sb, kwargs, exc, words):
    with pytest.raises(exc) as info:
        sb.run("1", **kwargs)
    assert words in str(info.value)


def test_code_must_be_a_string(sb):
    with pytest.raises(TypeError):
        sb.run(b"print(1)")


def test_bad_call_arguments(sb):
    src = "def f(a=1): return a"
    with pytest.raises(ValueError, match="args or kwargs, not both"):
        sb.call_function(src, "f", [1], {"a": 1})
    with pytest.raises(TypeError, match="args must be a list or tuple"):
        sb.call_function(src, "f", "abc")
    with pytest.raises(TypeError, match=r"args\[0\]: set is not JSON"):
        sb.call_function(src, "f", [{1}])
    with pytest.raises(ValueError, match="not a JSON number"):
        sb.call_function(src, "f", [float("nan")])
    with pytest.raises(TypeError, match="dict keys must be str"):
        sb.call_function(src, "f", kwargs={"a": {1: 2}})


def test_config_errors_name_the_file_and_key(tmp_path):
    missing = tmp_path / "missing.json"
    with pytest.raises(sandpy.ConfigError, match="cannot read config"):
        sandpy.Sandbox(config=missing)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"sandpy": {"limits": {"timeout_ms": 0}}}))
    with pytest.raises(sandpy.ConfigError) as info:
        sandpy.Sandbox(config=bad)
    assert "bad.json" in str(info.value) and "sandpy.limits.timeout_ms" in str(info.value)


def test_bad_sandbox_arguments(tmp_path):
    with pytest.raises(ValueError, match="unknown policy"):
        sandpy.Sandbox(policy="nope")
    with pytest.raises(TypeError):
        sandpy.Sandbox(mounts=["/data"])
    with pytest.raises(ValueError, match="mounts"):
        sandpy.Sandbox(mounts={"/data": tmp_path / "does-not-exist"})
