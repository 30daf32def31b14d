"""The type stub describes the module as built: same names, same members, all documented."""

import ast
import inspect
from pathlib import Path

import sandpy
import sandpy._sandpy as ext

STUB = Path(sandpy.__file__).with_name("_sandpy.pyi")


def stub_tree():
    return ast.parse(STUB.read_text())


def test_stub_and_package_ship_together():
    assert STUB.is_file() and STUB.with_name("py.typed").is_file()


def test_every_public_name_is_in_the_stub_and_exists():
    tree = stub_tree()
    stubbed = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    stubbed |= {
        n.target.id for n in tree.body
        if isinstance(n, ast.AnnAssign) and ast.unparse(n.annotation) != "TypeAlias"
    }
    for name in sandpy.__all__:
        # Names written in Python (sandpy/_stream.py) carry their own annotations.
        module = inspect.getmodule(getattr(sandpy, name))
        in_python = module is not None and str(module.__file__).endswith(".py")
        assert name in stubbed or in_python, f"{name} is not in the stub"
    for name in stubbed:
        assert hasattr(ext, name), f"the stub has {name}, the module does not"


def test_stub_members_match_the_classes_and_have_docs():
    for node in stub_tree().body:
        if not isinstance(node, ast.ClassDef):
            continue
        cls = getattr(ext, node.name)
        assert inspect.getdoc(cls), f"{node.name} has no docstring"
        for member in node.body:
            if isinstance(member, ast.FunctionDef):
                assert hasattr(cls, member.name), f"stub: {node.name}.{member.name} does not exist"
                if not member.name.startswith("__"):
                    assert ast.get_docstring(member), f"stub: {node.name}.{member.name} has no doc"
        runtime = {n for n in vars(cls) if not n.startswith("_")}
        stubbed = {m.name for m in node.body if isinstance(m, ast.FunctionDef)}
        assert runtime <= stubbed, f"{node.name}: not in the stub: {runtime - stubbed}"
