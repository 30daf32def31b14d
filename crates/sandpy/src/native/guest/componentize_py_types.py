"""The native tier's stand-in for componentize-py's `componentize_py_types`: the result
types the guest code (`sandpy_guest`) uses for the host's answers."""

from dataclasses import dataclass
from typing import Any


@dataclass
class Ok:
    value: Any


@dataclass
class Err(Exception):
    value: Any
