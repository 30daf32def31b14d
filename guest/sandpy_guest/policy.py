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


# A view's module and filter, by the view's id (the view is kept with them, so the id is
# not reused). Kept for the instance's life: a session's later cells still read the views
# its earlier cells imported.
_VIEWED: dict[int, tuple[types.ModuleType, types.ModuleType, "_Filter"]] = {}


class _View(types.ModuleType):
    """A module with only public names, whose module-valued attributes are views too (or
    absent when the policy denies them), and with the guards of its policy. Filled on
    use: a name is looked up in the module when first read, then kept, so that importing
    a module under a policy costs one object, not a filtered copy of its namespace (and of
    every module it reaches), on every run."""

    def __getattr__(self, key: str) -> Any:
        entry = _VIEWED.get(id(self))
        if entry is None or entry[0] is not self:
            raise AttributeError(key)
        _, module, filter_ = entry
        if key == "__all__" and "__all__" not in vars(module):
            # `from m import *` then takes the view's namespace: fill it first.
            for name in filter_.names(module):
                if name not in vars(self):
                    setattr(self, name, filter_.get(module, name))
            raise AttributeError(f"module {module.__name__!r} has no attribute '__all__'")
        value = filter_.get(module, key)
        setattr(self, key, value)
        return value

    def __dir__(self) -> list[str]:
        entry = _VIEWED.get(id(self))
        names = set(vars(self))
        if entry is not None and entry[0] is self:
            names.update(entry[2].names(entry[1]))
        return sorted(names)


_View.__module__ = "builtins"
_View.__qualname__ = _View.__name__ = "module"


class _Filter:
    """What a policy lets views show, with the per-name answers kept for the run."""

    def __init__(self, policy: Policy, overrides: dict[str, dict[str, Any]]) -> None:
        self.policy = policy
        self.denied = frozenset(policy.denied_attributes) | {"__builtins__", "__loader__", "__spec__"}
        self.overrides = overrides
        self.cache: dict[str, types.ModuleType] = {}
        self.allowed: dict[str, bool] = {}

    def module_allowed(self, name: str) -> bool:
        allowed = self.allowed.get(name)
        if allowed is None:
            allowed = self.allowed[name] = _module_allowed(self.policy, name)[0]
        return allowed

    def hides(self, key: str) -> bool:
        return (key.startswith("_") and not (key.startswith("__") and key.endswith("__"))) or key in self.denied

    def names(self, module: types.ModuleType) -> list[str]:
        names = []
        for key, value in list(vars(module).items()):
            if self.hides(key) or (isinstance(value, types.ModuleType) and not self.module_allowed(value.__name__)):
                continue
            names.append(key)
        return names

    def get(self, module: types.ModuleType, key: str) -> Any:
        """`module`'s `key` as its view shows it; AttributeError when it hides it."""
        if self.hides(key):
            raise AttributeError(f"module {module.__name__!r} has no attribute {key!r}")
        if module is sys and key == "modules":
            # `sys.modules` would reach every loaded module: offer only the allowed ones.
            loaded = list(sys.modules.items())
            return {n: self.view(m) for n, m in loaded if m is not None and self.module_allowed(n)}
        namespace = vars(module)
        if key in namespace:
            value = namespace[key]
        elif "__getattr__" in namespace and not self.hides("__getattr__"):
            value = namespace["__getattr__"](key)  # the module's own (PEP 562)
        else:
            raise AttributeError(f"module {module.__name__!r} has no attribute {key!r}")
        if isinstance(value, types.ModuleType):
            if not self.module_allowed(value.__name__):
                raise AttributeError(f"module {module.__name__!r} has no attribute {key!r}")
            return self.view(value)
        return value

    def view(self, module: types.ModuleType) -> types.ModuleType:
        found = self.cache.get(module.__name__)
        if found is not None:
            return found
        view = _View(module.__name__, module.__doc__)
        vars(view)["__package__"] = vars(module).get("__package__")
        self.cache[module.__name__] = view
        _VIEWED[id(view)] = (view, module, self)
        for key, value in self.overrides.get(module.__name__, {}).items():
            setattr(view, key, value)
        return view


def enforce(policy: Policy, namespace: dict[str, Any]) -> None:
    """Install the run-time guards for `policy` in the user's namespace."""
    _STATE.policy = policy
    real_import = builtins.__import__
    real_getattr = builtins.getattr

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
        return views.view(module)

    def guarded_import_module(name: str, package: str | None = None) -> types.ModuleType:
        check_name(name)
        return views.view(importlib.import_module(name, package))

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
    views = _Filter(policy, overrides)
    namespace["__builtins__"] = {**vars(builtins), **replaced}


def violation() -> PolicyViolation | None:
    """The first violation raised during this run, even if the code caught it."""
    return _STATE.violation
