"""The `network` interface of `guest/wit/sandpy.wit`, answered by the host over the run's
channel (bodies travel as base64)."""

import base64
from dataclasses import dataclass

from componentize_py_types import Err, Ok

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


def _encoded(request: Request) -> dict:
    return {
        "method": request.method,
        "url": request.url,
        "headers": [list(pair) for pair in request.headers],
        "body_base64": base64.b64encode(request.body).decode(),
        "timeout_ms": request.timeout_ms,
    }


def _decoded(answer: dict) -> Response:
    """The response of an `Ok` answer; raises `Err` with the `FetchError` of an `Err` one."""
    if "Err" in answer:
        ((kind, message),) = answer["Err"].items()
        raise Err(_ERRORS[kind](message))
    ok = answer["Ok"]
    headers = [(name, value) for name, value in ok["headers"]]
    return Response(ok["status"], ok["reason"], headers, base64.b64decode(ok["body_base64"]))


def fetch(request: Request) -> Response:
    return _decoded(sandpy_channel.ask({"fetch": _encoded(request)}))


# Bodies one `fetch_many` message carries at most: a bigger batch goes as several, one
# after another (the host holds a message of about the run's bytes out).
_BATCH_BODY_BYTES = 4 << 20


def fetch_many(requests: list[Request]) -> list[Ok | Err]:
    results: list[Ok | Err] = []
    start = 0
    while start < len(requests):
        end, size = start, 0
        while end < len(requests) and (end == start or size + len(requests[end].body) <= _BATCH_BODY_BYTES):
            size += len(requests[end].body)
            end += 1
        answers = sandpy_channel.ask({"fetch_many": [_encoded(r) for r in requests[start:end]]})
        for answer in answers:
            try:
                results.append(Ok(_decoded(answer)))
            except Err as error:
                results.append(error)
        start = end
    return results
