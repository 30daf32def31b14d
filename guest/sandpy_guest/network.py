"""HTTP for sandboxed code, made by the host.

`http.client` connections (and so `urllib.request`, and anything built on them) get a
socket-like object instead of a socket: it keeps what `http.client` writes, and when the
response is read it hands the request to the host import `network.fetch`. The host
checks the run's allowlist, resolves the name, does TLS, fills in secrets and scrubs
them from the answer; nothing here is trusted for security. Without ssl (the WebAssembly
tier has none) this module also gives `http.client` its `HTTPSConnection`, TLS being the
host's.

Redirects are the library's to follow (`urllib.request` does): each hop is a new request
that the host checks like the first. `requests` and `httpx` go the same way, through
`fetch` (`http_libraries.py`). A request's own timeout (the connection's, the library's)
goes with it: the host stops waiting at the shorter of it and its own limit. Requests
awaited on the event loop (`httpx.AsyncClient`) go as one batch when the loop is idle
(`fetch_soon`), which the host makes at once.

A refusal by the operator's rules (the allowlist, a policy, a limit) is a
`PermissionError`, never a `ConnectionError` that retry loops would take for a passing
failure. The `socket` module's own ways out (making a socket, resolving a name) fail as
they always did, but say why and where HTTP goes instead.
"""

import asyncio
import errno
import http.client
import io
import math
import socket
import time

from componentize_py_types import Err
from wit_world.imports import network as host


class _HostSocket:
    """What an `http.client` connection takes for its socket: requests go out as one
    host call when their response is read."""

    def __init__(self, scheme: str, hostname: str, port: int, timeout: float | None) -> None:
        self._origin = f"{scheme}://{_bracketed(hostname)}:{port}"
        self._sent = bytearray()
        self._timeout = timeout

    def sendall(self, data: bytes) -> None:
        self._sent += data

    def send(self, data: bytes) -> int:
        self._sent += data
        return len(data)

    def makefile(self, mode: str = "rb", buffering: int | None = None) -> io.BytesIO:
        request, self._sent = bytes(self._sent), bytearray()
        return io.BytesIO(self._exchange(request))

    def _exchange(self, raw: bytes) -> bytes:
        head, _, body = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, target, _version = lines[0].split(" ", 2)
        headers = [tuple(part.strip() for part in line.split(":", 1)) for line in lines[1:] if ":" in line]
        if any(k.lower() == "transfer-encoding" and "chunked" in v.lower() for k, v in headers):
            body = _unchunk(body)
        # Origin form (`/path?query`) as `http.client` writes it; the absolute form only
        # when the code wrote one.
        url = self._origin + target if target.startswith("/") else target
        try:
            response = fetch(method, url, headers, body, self._timeout)
        except Err as refused:
            raise _error(refused.value) from None
        out = [f"HTTP/1.1 {response.status} {response.reason}".encode("latin-1")]
        # The body comes whole: its length replaces the server's framing, except for a
        # HEAD request, whose Content-Length is the size of what a GET would get.
        framing = ("transfer-encoding", "connection") if method == "HEAD" else ("content-length", "transfer-encoding", "connection")
        for name, value in response.headers:
            if name.lower() not in framing:
                out.append(f"{name}: {value}".encode("latin-1", "replace"))
        if method != "HEAD":
            out.append(f"Content-Length: {len(response.body)}".encode())
        out.append(b"Connection: close")
        return b"\r\n".join(out) + b"\r\n\r\n" + bytes(response.body)

    def settimeout(self, timeout: float | None) -> None:
        self._timeout = timeout

    # What `http.client` and its users call on a socket; nothing to do here.

    def setsockopt(self, *args: object) -> None:
        pass

    def shutdown(self, how: int) -> None:
        pass

    def close(self) -> None:
        self._sent = bytearray()


def _request(method: str, url: str, headers: list[tuple[str, str]], body: bytes, timeout: float | None) -> "host.Request":
    timeout_ms = None
    if isinstance(timeout, (int, float)) and timeout >= 0:
        timeout_ms = min(max(math.ceil(timeout * 1000), 1), 2**32 - 1)
    return host.Request(method=method, url=url, headers=headers, body=body, timeout_ms=timeout_ms)


def fetch(method: str, url: str, headers: list[tuple[str, str]], body: bytes, timeout: float | None) -> "host.Response":
    """One request by the host, which waits for the whole answer at most `timeout` seconds
    (or its own limit, when shorter); raises `Err` with the host's `FetchError`."""
    return host.fetch(_request(method, url, headers, body, timeout))


# Requests awaited on the event loop, not yet sent: each with the future of its answer;
# and when the first of them was queued.
_pending: list[tuple["host.Request", "asyncio.Future[host.Response]"]] = []
_pending_since = 0.0

# How long a request waits for the loop to be idle before it goes anyway: a task that
# never lets the loop idle (`while ...: await asyncio.sleep(0)`) does not starve it.
MOST_WAITED = 0.05


def fetch_soon(method: str, url: str, headers: list[tuple[str, str]], body: bytes, timeout: float | None) -> "asyncio.Future[host.Response]":
    """`fetch` for a coroutine on the sandbox's event loop: the future of the answer (or
    of `Err` with the host's `FetchError`). The request waits until no callback is ready,
    then goes to the host with every other one waiting (`flush_pending`), so requests
    gathered with `asyncio.gather` are made at once."""
    global _pending_since
    future: asyncio.Future[host.Response] = asyncio.get_running_loop().create_future()
    if not _pending:
        _pending_since = time.monotonic()
    _pending.append((_request(method, url, headers, body, timeout), future))
    return future


def overdue() -> bool:
    """Whether requests have waited `MOST_WAITED` for the loop to be idle."""
    return bool(_pending) and time.monotonic() - _pending_since >= MOST_WAITED


def flush_pending() -> bool:
    """Send the waiting requests to the host as one batch (made at once there) and settle
    their futures; whether there were any. The event loop calls it when idle."""
    if not _pending:
        return False
    batch = [(request, future) for request, future in _pending if not future.cancelled()]
    _pending.clear()
    if not batch:
        return True
    results = host.fetch_many([request for request, _ in batch])
    for (_, future), result in zip(batch, results):
        if future.cancelled():
            continue
        if isinstance(result, Err):
            future.set_exception(result)
        else:
            future.set_result(result.value)
    return True


def _bracketed(hostname: str) -> str:
    return f"[{hostname}]" if ":" in hostname else hostname


def _unchunk(body: bytes) -> bytes:
    out = bytearray()
    while body:
        size_line, _, body = body.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out += body[:size]
        body = body[size + 2 :]
    return bytes(out)


NO_SOCKETS = "sandpy: no sockets; HTTP(S) to allowed hosts goes through urllib.request, http.client, requests or httpx"


class NoSockets(socket.gaierror, PermissionError):
    """A name lookup in the sandbox: a `socket.gaierror` for code that catches those, and a
    `PermissionError` like every other refusal."""


def _refuse_sockets() -> None:
    """Make the `socket` module's refusals say why: sockets are closed in both tiers (no
    WASI sockets; the native tier's seccomp filter), so the host's message replaces the
    bare `[Errno 2]` or `gaierror -4`. Nothing here is trusted for security."""
    opened = socket.socket.__init__

    def __init__(self: socket.socket, *args: object, **kwargs: object) -> None:
        try:
            opened(self, *args, **kwargs)  # type: ignore[arg-type]
        except OSError:
            raise PermissionError(errno.EACCES, NO_SOCKETS) from None

    socket.socket.__init__ = __init__  # type: ignore[method-assign]
    for name in ("getaddrinfo", "gethostbyname", "gethostbyname_ex", "gethostbyaddr", "getnameinfo"):
        original = getattr(socket, name, None)
        if original is not None:
            setattr(socket, name, _explained(original))


def _explained(lookup: object) -> object:
    def explained(*args: object, **kwargs: object) -> object:
        try:
            return lookup(*args, **kwargs)  # type: ignore[operator]
        except OSError:
            raise NoSockets(errno.EACCES, NO_SOCKETS) from None

    explained.__name__ = getattr(lookup, "__name__", "lookup")
    explained.__doc__ = getattr(lookup, "__doc__", None)
    return explained


def _error(error: object) -> OSError:
    message = f"sandpy network: {error.value}"  # type: ignore[attr-defined]
    if isinstance(error, host.FetchError_Refused):
        return PermissionError(message)
    if isinstance(error, host.FetchError_Timeout):
        return TimeoutError(message)
    return ConnectionError(message)


def _connect(self: http.client.HTTPConnection, scheme: str) -> None:
    if getattr(self, "_tunnel_host", None):
        raise OSError("sandpy network: proxies (CONNECT tunnels) are not supported; the host makes the request")
    timeout = self.timeout if isinstance(self.timeout, (int, float)) else None
    self.sock = _HostSocket(scheme, self.host, self.port, timeout)  # type: ignore[assignment]


def _connect_http(self: http.client.HTTPConnection) -> None:
    _connect(self, "http")


def _connect_https(self: http.client.HTTPConnection) -> None:
    _connect(self, "https")


class HTTPSConnection(http.client.HTTPConnection):
    """`http.client.HTTPSConnection` where there is no ssl: TLS is done by the host (its
    trust settings, not `context`'s)."""

    default_port = http.client.HTTPS_PORT

    def __init__(self, host: str, port: int | None = None, *, context: object = None, **kwargs: object) -> None:
        super().__init__(host, port, **kwargs)  # type: ignore[arg-type]

    connect = _connect_https


def install() -> None:
    """Route `http.client` through the host (before `urllib.request` is imported, so that
    it registers its https handler)."""
    http.client.HTTPConnection.connect = _connect_http  # type: ignore[method-assign]
    if hasattr(http.client, "HTTPSConnection"):
        http.client.HTTPSConnection.connect = _connect_https  # type: ignore[method-assign]
    else:
        http.client.HTTPSConnection = HTTPSConnection  # type: ignore[attr-defined]
        http.client.__all__.append("HTTPSConnection")
        # `urllib.request`'s https handler makes an ssl context it would hand to the
        # connection, which does not use one.
        http.client._create_https_context = lambda http_version: None  # type: ignore[attr-defined]
    _refuse_sockets()


install()
