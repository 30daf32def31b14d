"""The `network` interface of `guest/wit/sandpy.wit`, answered by the host over the run's
channel (bodies travel as base64)."""

import base64
from dataclasses import dataclass

from componentize_py_types import Err

import sandpy_channel


@dataclass
class Request:
    method: str
    url: str
    headers: list[tuple[str, str]]
    body: bytes
    timeout_ms: int | None = None


@dataclass
class Response:
    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes


@dataclass
class FetchError_Refused:
    value: str


@dataclass
class FetchError_Timeout:
    value: str


@dataclass
class FetchError_Failed:
    value: str


FetchError = FetchError_Refused | FetchError_Timeout | FetchError_Failed

_ERRORS = {"refused": FetchError_Refused, "timeout": FetchError_Timeout, "failed": FetchError_Failed}


def fetch(request: Request) -> Response:
    answer = sandpy_channel.ask(
        {
            "fetch": {
                "method": request.method,
                "url": request.url,
                "headers": [list(pair) for pair in request.headers],
                "body_base64": base64.b64encode(request.body).decode(),
                "timeout_ms": request.timeout_ms,
            }
        }
    )
    if "Err" in answer:
        ((kind, message),) = answer["Err"].items()
        raise Err(_ERRORS[kind](message))
    ok = answer["Ok"]
    headers = [(name, value) for name, value in ok["headers"]]
    return Response(ok["status"], ok["reason"], headers, base64.b64decode(ok["body_base64"]))
