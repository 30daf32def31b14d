"""Tests of sandpy_guest.runner, run inside the sandbox."""

from sandpy_guest import runner


def test_final_expression_is_captured() -> None:
    code = runner._compile_program("x = 2\nx * 21", "<t>")
    namespace: dict[str, object] = {}
    exec(code, namespace)
    assert namespace[runner._RESULT_NAME] == 42


def test_values_become_json_or_repr() -> None:
    assert runner._to_value([1, "a"]).value == '[1, "a"]'
    assert type(runner._to_value({1, 2})).__name__ == "Value_Repr"
    assert type(runner._to_value(float("inf"))).__name__ == "Value_Repr"


def test_type_names_are_qualified_outside_builtins() -> None:
    import json

    try:
        json.loads("{")
    except ValueError as exc:
        assert runner._type_name(exc) == "json.decoder.JSONDecodeError"
    assert runner._type_name(KeyError()) == "KeyError"
