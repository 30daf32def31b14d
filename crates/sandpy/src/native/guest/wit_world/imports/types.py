"""The records and variants of the `types` interface of `guest/wit/sandpy.wit`."""

from dataclasses import dataclass
from enum import Enum
from typing import Optional


@dataclass
class FunctionCall:
    code: str
    function: str
    arguments: str


@dataclass
class Task_Run:
    value: str


@dataclass
class Task_Call:
    value: FunctionCall


@dataclass
class Task_ListModules:
    pass


@dataclass
class Task_Check:
    value: str


@dataclass
class Task_Compile:
    value: str


@dataclass
class CompiledCall:
    call: FunctionCall
    compiled: bytes


@dataclass
class Task_CallCompiled:
    value: CompiledCall


Task = Task_Run | Task_Call | Task_ListModules | Task_Check | Task_Compile | Task_CallCompiled


@dataclass
class Policy:
    name: str
    allowed_modules: Optional[list[str]]
    denied_modules: list[str]
    denied_builtins: list[str]
    denied_attributes: list[str]


@dataclass
class Violation:
    line: int
    column: int
    rule: str
    message: str


@dataclass
class RichOutputLimits:
    count: int
    bytes: int


class RichOutputKind(Enum):
    DISPLAY_DATA = 0
    EXECUTE_RESULT = 1


@dataclass
class RichOutput:
    kind: RichOutputKind
    data: list[tuple[str, str]]
    omitted: list[tuple[str, str]]


@dataclass
class RunOptions:
    filename: str
    policy: Optional[Policy]
    keep_globals: bool
    environment: list[tuple[str, str]]
    rich_output_limits: RichOutputLimits


@dataclass
class PythonError:
    type_name: str
    message: str
    traceback: str


@dataclass
class Value_Json:
    value: str


@dataclass
class Value_Repr:
    value: str


Value = Value_Json | Value_Repr


@dataclass
class Outcome:
    value: Optional[Value]
    error: Optional[PythonError]
    violations: list[Violation]
    outputs: list[RichOutput]
    outputs_dropped: int
