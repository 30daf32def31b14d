"""Shared fixtures: one Sandbox for the tests that need no settings of their own."""

import pytest

import sandpy


@pytest.fixture(scope="session")
def sb() -> sandpy.Sandbox:
    return sandpy.Sandbox()
