"""Shared fixtures: one Sandbox for the tests that need no settings of their own, and the
`sandpy` CLI built by the workspace (the tests compare the package with it)."""

import os
from pathlib import Path

import pytest

import sandpy

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def sb() -> sandpy.Sandbox:
    return sandpy.Sandbox()


@pytest.fixture(scope="session")
def cli() -> Path:
    """The CLI: $SANDPY_BIN, else the workspace's debug build (`cargo build` makes it)."""
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    path = Path(os.environ.get("SANDPY_BIN", target / "debug" / "sandpy"))
    if not path.is_file():
        pytest.fail(f"no sandpy CLI at {path}: run `cargo build` first (or set SANDPY_BIN)")
    return path
