"""Least-privilege policies: which modules, builtins and attributes user code may use.

A policy is checked twice. Before running, `check` parses the code with Python's own `ast`
and reports every violation with its line and column (imports, denied builtins, denied
attributes, syntax errors); strings and look-alike names are not matched. At run time,
`enforce` installs guards so dynamic tricks are refused too: a guarded `__import__` and
`importlib.import_module`, modules handed out as filtered views (no private names, no
forbidden modules reachable as attributes), stubs for denied builtins, and a `getattr`
that refuses denied attributes.

The WebAssembly boundary is the security boundary; a policy adds least privilege and
predictability on top of it (an eval function that imports `socket` fails before it runs,
not halfway through).
"""

import ast
import builtins
import importlib
import sys
import types
from dataclasses import dataclass
from typing import Any, Callable

from wit_world.imports.types import Policy, Violation


class PolicyViolation(BaseException):
    """Raised when code uses what its policy denies; a BaseException, so that `except
    Exception` cannot swallow it."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(message)
        self.rule = rule


PolicyViolation.__module__ = "builtins"


@dataclass
class _State:
    policy: Policy | None = None
    violation: PolicyViolation | None = None


_STATE = _State()


def _module_allowed(policy: Policy, name: str) -> tuple[bool, str]:
    """Whether module `name` may be used, and the rule that decided."""

    def matches(pattern: str) -> bool:
        base = pattern[:-2] if pattern.endswith(".*") else pattern
        return name == base or name.startswith(base + ".")

    for pattern in policy.denied_modules:
        if matches(pattern):
            return False, f"denied_modules: {pattern!r}"
    if policy.allowed_modules is None:
        return True, ""
    for pattern in policy.allowed_modules:
        if matches(pattern):
            return True, ""
    return False, f"allowed_modules of policy {policy.name!r} does not include {name!r}"


def _violation(node: ast.AST, rule: str, message: str) -> Violation:
    return Violation(line=getattr(node, "lineno", 0), column=getattr(node, "col_offset", 0) + 1, rule=rule, message=message)


def _literal(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def check(code: str, filename: str, policy: Policy) -> list[Violation]:
    """Every violation of `policy` in `code`, in source order (a syntax error is one)."""
    try:
        tree = ast.parse(code, filename=filename)
    except SyntaxError as exc:
        return [Violation(line=exc.lineno or 0, column=exc.offset or 0, rule="syntax", message=f"SyntaxError: {exc.msg}")]
    found: list[Violation] = []

    def check_module(node: ast.AST, name: str) -> None:
        allowed, rule = _module_allowed(policy, name)
        if not allowed:
            found.append(_violation(node, "import", f"import of {name!r} is not allowed ({rule})"))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                check_module(node, alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                found.append(_violation(node, "import", "relative imports are not allowed"))
            elif node.module:
                check_module(node, node.module)
        elif isinstance(node, ast.Call):
            target = node.args[0] if node.args else None
            name = _literal(target) if target is not None else None
            func = node.func
            is_dunder_import = isinstance(func, ast.Name) and func.id == "__import__"
            is_import_module = isinstance(func, ast.Attribute) and func.attr == "import_module"
            if name is not None and (is_dunder_import or is_import_module):
                check_module(node, name)
        elif isinstance(node, ast.Name) and node.id in policy.denied_builtins:
            found.append(_violation(node, "builtin", f"builtin {node.id!r} is denied by policy {policy.name!r}"))
        elif isinstance(node, ast.Name) and node.id in policy.denied_attributes:
            found.append(_violation(node, "attribute", f"name {node.id!r} is denied by policy {policy.name!r}"))
        elif isinstance(node, ast.Attribute) and node.attr in policy.denied_attributes:
            found.append(_violation(node, "attribute", f"attribute {node.attr!r} is denied by policy {policy.name!r}"))
    found.sort(key=lambda v: (v.line, v.column))
    return found


def _refuse(rule: str, message: str) -> PolicyViolation:
    violation = PolicyViolation(rule, message)
    _STATE.violation = violation  # reported even if the code catches it
    return violation


def _view(
    module: types.ModuleType,
    policy: Policy,
    cache: dict[str, types.ModuleType],
    overrides: dict[str, dict[str, Any]],
) -> types.ModuleType:
    """A module with only public names, whose module-valued attributes are views too
    (or absent when the policy denies them), and with the guards in `overrides`."""
    if module.__name__ in cache:
        return cache[module.__name__]
    view = types.ModuleType(module.__name__, module.__doc__)
    cache[module.__name__] = view
    for key, value in list(vars(module).items()):
        if key.startswith("_") and not (key.startswith("__") and key.endswith("__")):
            continue
        if key in policy.denied_attributes or key in ("__builtins__", "__loader__", "__spec__"):
            continue
        if isinstance(value, types.ModuleType):
            if not _module_allowed(policy, value.__name__)[0]:
                continue
            value = _view(value, policy, cache, overrides)
        setattr(view, key, value)
    for key, value in overrides.get(module.__name__, {}).items():
        setattr(view, key, value)
    if module is sys:
        # `sys.modules` would reach every loaded module: offer only the allowed ones.
        allowed = {n: m for n, m in list(sys.modules.items()) if m is not None and _module_allowed(policy, n)[0]}
        view.modules = {n: _view(m, policy, cache, overrides) for n, m in allowed.items()}  # type: ignore[attr-defined]
    return view


def enforce(policy: Policy, namespace: dict[str, Any]) -> None:
    """Install the run-time guards for `policy` in the user's namespace."""
    _STATE.policy = policy
    real_import = builtins.__import__
    real_getattr = builtins.getattr
    views: dict[str, types.ModuleType] = {}

    def check_name(name: str) -> None:
        allowed, rule = _module_allowed(policy, name)
        if not allowed:
            raise _refuse("import", f"import of {name!r} is not allowed ({rule})")

    def guarded_import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
        if level:
            raise _refuse("import", "relative imports are not allowed")
        check_name(name)
        module = real_import(name, globals, locals, fromlist, level)
        for item in fromlist or ():
            full = f"{name}.{item}"
            if full in sys.modules:
                check_name(full)
        return _view(module, policy, views, overrides)

    def guarded_import_module(name: str, package: str | None = None) -> types.ModuleType:
        check_name(name)
        return _view(importlib.import_module(name, package), policy, views, overrides)

    def guarded_getattr(obj: Any, name: str, *default: Any) -> Any:
        if name in policy.denied_attributes:
            raise _refuse("attribute", f"attribute {name!r} is denied by policy {policy.name!r}")
        return real_getattr(obj, name, *default)

    def denied(name: str) -> Callable[..., Any]:
        def stub(*args: Any, **kwargs: Any) -> Any:
            raise _refuse("builtin", f"builtin {name!r} is denied by policy {policy.name!r}")

        stub.__name__ = name
        return stub

    # The import statement itself needs `__import__`; explicit uses of a denied
    # `__import__` are found by the check.
    replaced = {name: denied(name) for name in policy.denied_builtins if name != "__import__"}
    replaced.update({"__import__": guarded_import, "getattr": guarded_getattr})
    overrides: dict[str, dict[str, Any]] = {
        "builtins": replaced,
        "importlib": {"import_module": guarded_import_module},
    }
    namespace["__builtins__"] = {**vars(builtins), **replaced}


def violation() -> PolicyViolation | None:
    """The first violation raised during this run, even if the code caught it."""
    return _STATE.violation
