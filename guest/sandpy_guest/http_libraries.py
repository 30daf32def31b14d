"""`requests` and `httpx` through the host, like `http.client` (`network.py`).

Each library is changed where it hands a request to the network, and nowhere else:
`requests`' `HTTPAdapter.send` and `httpx`'s `HTTPTransport` / `AsyncHTTPTransport` make
the request with `network.fetch`, the host call that checks the run's allowlist, fills in
secrets and scrubs them. Everything above that seam is the library's own: sessions,
cookies, auth, redirects (each hop is a new request, checked by the host like the first),
JSON, decoding. The classes are changed in place, so sessions, clients, adapters and
transports the code makes itself (`HTTPAdapter(max_retries=3)`, a subclass) go the same
way. Nothing here is trusted for security: a library that went around it would meet
closed sockets (no WASI sockets; the native tier's empty network namespace).

What differs from the libraries over their own sockets:
- The answer comes whole (bounded by `sandpy.network.limits.max_bytes_in`); a streamed
  body (`stream=True`, `client.stream(...)`) is read from memory.
- A timeout bounds the whole answer: a number, or the longer of the connect and read
  parts (`requests`' tuple, `httpx.Timeout`), and never more than the host's
  `request_timeout_ms`.
- TLS is the host's, with the operator's trust: `verify`, `cert` and ssl contexts are not
  used. Proxies are refused: the host makes the request.
- An `httpx.AsyncClient` request is awaited on the event loop: requests gathered with
  `asyncio.gather` (or tasks) go to the host as one batch when the loop is idle, and the
  host makes them at once (`network.fetch_soon`); the batch's answers all come when its
  slowest has. On a loop other than sandpy's the request is made at once, blocking.

Errors are the library's own types carrying the host's message, and also the built-in
error `urllib.request` raises for the same refusal: a refusal by the operator's rules is a
`SandpyRefused`, a `requests.ConnectionError` / `httpx.ConnectError` that is a
`PermissionError`; a timeout a `SandpyTimeout`, a `requests.ReadTimeout` /
`httpx.ReadTimeout` that is a `TimeoutError`; a failed exchange a `SandpyFailed`, that is a
`ConnectionError` (each in the library's exceptions module).

The libraries are changed as they are imported (a finder on `sys.meta_path`), or at
once when they were imported before (the native tier's `preimport`); never imported here.
"""

import asyncio
import http.client
import importlib.abc
import importlib.machinery
import io
import sys
from types import ModuleType
from typing import Any, Callable

from componentize_py_types import Err
from wit_world.imports import network as host

from . import event_loop, network

NO_PROXIES = "sandpy network: proxies are not supported; the host makes the request"


def _fetch(method: str, url: str, headers: list[tuple[str, str]], body: bytes, timeout: float | None, errors: dict[type, Callable[[str], BaseException]]) -> "host.Response":
    try:
        return network.fetch(method, url, headers, body, timeout)
    except Err as failed:
        error = failed.value
        raise errors[type(error)](f"sandpy network: {error.value}") from None


async def _fetch_async(method: str, url: str, headers: list[tuple[str, str]], body: bytes, timeout: float | None, errors: dict[type, Callable[[str], BaseException]]) -> "host.Response":
    """`_fetch` for a coroutine: on sandpy's event loop, batched with the other requests
    awaited at the same time."""
    if not isinstance(asyncio.get_running_loop(), event_loop.SandboxEventLoop):
        return _fetch(method, url, headers, body, timeout, errors)
    try:
        return await network.fetch_soon(method, url, headers, body, timeout)
    except Err as failed:
        error = failed.value
        raise errors[type(error)](f"sandpy network: {error.value}") from None


def _longest(*parts: object) -> float | None:
    """A timeout for the whole answer from a library's parts (connect, read): the longest
    part given; none when none is."""
    given = [float(part) for part in parts if isinstance(part, (int, float))]
    return max(given) if given else None


def _errors(module: ModuleType, connect: type, timeout: type) -> tuple[type, type, type]:
    """A library's errors for the host's three answers, each also the built-in error
    `urllib.request` raises, put in the library's exceptions `module` under their names
    (so that a traceback names them where they are)."""
    made = []
    for name, bases, doc in (
        ("SandpyRefused", (connect, PermissionError), "The operator's rules refused the request; nothing was sent."),
        ("SandpyTimeout", (timeout, TimeoutError), "No whole answer within the request's timeout or the host's limit."),
        ("SandpyFailed", (connect, ConnectionError), "The connection or the exchange failed."),
    ):
        kind = type(name, bases, {"__doc__": doc, "__module__": module.__name__})
        setattr(module, name, kind)
        made.append(kind)
    return made[0], made[1], made[2]


# --- requests -------------------------------------------------------------------------


def _patch_requests(adapters: ModuleType) -> None:
    import requests.exceptions as exceptions
    from urllib3._collections import HTTPHeaderDict
    from urllib3.response import HTTPResponse
    from urllib3.util import Timeout as TimeoutSauce

    Refused, TimedOut, Failed = _errors(exceptions, exceptions.ConnectionError, exceptions.ReadTimeout)

    def send(self: Any, request: Any, stream: bool = False, timeout: Any = None, verify: Any = True, cert: Any = None, proxies: Any = None) -> Any:
        """Make `request` through the host (see `sandpy_guest.http_libraries`)."""
        if proxies and adapters.select_proxy(request.url, proxies):
            raise exceptions.ProxyError(NO_PROXIES, request=request)
        if isinstance(timeout, tuple):
            seconds = _longest(*timeout)
        elif isinstance(timeout, TimeoutSauce):
            seconds = _longest(timeout.connect_timeout, timeout.read_timeout)
        else:
            seconds = _longest(timeout)

        def error(kind: type) -> Callable[[str], BaseException]:
            return lambda message: kind(message, request=request)

        errors = {
            host.FetchError_Refused: error(Refused),
            host.FetchError_Timeout: error(TimedOut),
            host.FetchError_Failed: error(Failed),
        }
        headers = [(str(name), str(value)) for name, value in request.headers.items()]
        answer = _fetch(request.method, request.url, headers, _body(request.body), seconds, errors)
        message = http.client.HTTPMessage()
        for name, value in answer.headers:
            message[name] = value
        raw = HTTPResponse(
            body=io.BytesIO(bytes(answer.body)),
            headers=HTTPHeaderDict(answer.headers),
            status=answer.status,
            version=11,
            reason=answer.reason,
            preload_content=False,
            original_response=_Original(message, request.method),  # type: ignore[arg-type]
            msg=message,
            enforce_content_length=False,
            request_method=request.method,
            request_url=request.url,
        )
        return self.build_response(request, raw)

    adapters.HTTPAdapter.send = send


class _Original:
    """What `requests` reads cookies from (and urllib3 closes): the answer's headers."""

    def __init__(self, msg: http.client.HTTPMessage, method: str) -> None:
        self.msg = msg
        self._method = method

    def isclosed(self) -> bool:
        return True

    def close(self) -> None:
        pass


def _body(body: object) -> bytes:
    """A prepared request's body: bytes, text, a file or an iterable of chunks."""
    if body is None:
        return b""
    if isinstance(body, str):
        return body.encode("utf-8")
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body)
    read = getattr(body, "read", None)
    if read is not None:
        data = read()
        return data.encode("utf-8") if isinstance(data, str) else bytes(data)
    return b"".join(chunk.encode("utf-8") if isinstance(chunk, str) else bytes(chunk) for chunk in body)  # type: ignore[attr-defined]


# --- httpx ----------------------------------------------------------------------------


def _patch_httpx(default: ModuleType) -> None:
    # The package is still being imported: its parts are.
    from httpx import _content, _exceptions, _models

    Refused, TimedOut, Failed = _errors(_exceptions, _exceptions.ConnectError, _exceptions.ReadTimeout)

    def outgoing(request: Any) -> tuple[list[tuple[str, str]], float | None, dict[type, Callable[[str], BaseException]]]:
        """The request's headers, timeout and errors for the host's answers."""
        if request.url.scheme not in ("http", "https"):
            raise _exceptions.UnsupportedProtocol(f"sandpy network: {request.url.scheme!r} is not http or https", request=request)
        timeout = request.extensions.get("timeout", {})
        seconds = _longest(timeout.get("connect"), timeout.get("read"))

        def error(kind: type) -> Callable[[str], BaseException]:
            return lambda message: kind(message, request=request)

        errors = {
            host.FetchError_Refused: error(Refused),
            host.FetchError_Timeout: error(TimedOut),
            host.FetchError_Failed: error(Failed),
        }
        # As the code wrote them (`multi_items` would give the names in lowercase).
        headers = [(name.decode("latin-1"), value.decode("latin-1")) for name, value in request.headers.raw]
        return headers, seconds, errors

    def response(answer: "host.Response") -> Any:
        return _models.Response(
            answer.status,
            headers=answer.headers,
            stream=_content.ByteStream(bytes(answer.body)),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": answer.reason.encode("latin-1", "replace")},
        )

    def init(self: Any, *args: object, proxy: object = None, **kwargs: object) -> None:
        """The host's transport: `verify`, `cert`, `limits`, `retries` and the rest are
        the host's to decide."""
        if proxy is not None:
            raise ValueError(NO_PROXIES)

    def handle_request(self: Any, request: Any) -> Any:
        headers, seconds, errors = outgoing(request)
        return response(_fetch(request.method, str(request.url), headers, request.read(), seconds, errors))

    async def handle_async_request(self: Any, request: Any) -> Any:
        headers, seconds, errors = outgoing(request)
        body = await request.aread()
        return response(await _fetch_async(request.method, str(request.url), headers, body, seconds, errors))

    def close(self: Any) -> None:
        pass

    async def aclose(self: Any) -> None:
        pass

    def enter(self: Any) -> Any:
        return self

    def exit(self: Any, *args: object) -> None:
        pass

    async def aenter(self: Any) -> Any:
        return self

    async def aexit(self: Any, *args: object) -> None:
        pass

    sync, async_ = default.HTTPTransport, default.AsyncHTTPTransport
    sync.__init__, sync.handle_request, sync.close = init, handle_request, close
    sync.__enter__, sync.__exit__ = enter, exit
    async_.__init__, async_.handle_async_request, async_.aclose = init, handle_async_request, aclose
    async_.__aenter__, async_.__aexit__ = aenter, aexit


# --- at import ------------------------------------------------------------------------

# The module each library's network seam is in, and what changes it.
PATCHES: dict[str, Callable[[ModuleType], None]] = {
    "requests.adapters": _patch_requests,
    "httpx._transports.default": _patch_httpx,
}


def _patch(module: ModuleType) -> None:
    if not getattr(module, "_sandpy_patched", False):
        PATCHES[module.__name__](module)
        module._sandpy_patched = True  # type: ignore[attr-defined]


class _PatchingLoader(importlib.abc.Loader):
    """The module's own loader, then the patch."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        _patch(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds the modules of `PATCHES` as the path finder does, and patches them once
    loaded."""

    def find_spec(self, name: str, path: Any = None, target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if name not in PATCHES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _PatchingLoader(spec.loader)
        return spec


def install() -> None:
    """Patch the libraries already imported and those imported from now on."""
    for name in PATCHES:
        module = sys.modules.get(name)
        if module is not None:
            _patch(module)
    if not any(isinstance(finder, _PatchOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())


install()
