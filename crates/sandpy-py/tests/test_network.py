"""The network from the Python package: `allow_hosts` lets runs reach a real local
server through the host; nothing else is reachable, and without it nothing at all."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import sandpy


class _Echo(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        body = json.dumps({"path": self.path, "agent": self.headers.get("User-Agent")}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def port():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


FETCH = """
import json, urllib.request
try:
    with urllib.request.urlopen("http://127.0.0.1:{port}/hi?x=1") as r:
        result = json.load(r)["path"]
except OSError as e:
    result = type(e).__name__ + ": " + str(e)
result
"""


def test_allowed_hosts_are_reached_and_recorded(port):
    sb = sandpy.Sandbox(allow_hosts=[f"127.0.0.1:{port}"])
    r = sb.run(FETCH.format(port=port))
    assert r.return_value == "/hi?x=1", r
    assert [(q["method"], q["url"], q["status"]) for q in r.requests] == [
        ("GET", f"http://127.0.0.1:{port}/hi", 200)
    ]


def test_without_allow_hosts_there_is_no_network(sb, port):
    r = sb.run(FETCH.format(port=port))
    assert r.return_value.startswith("PermissionError: sandpy network: the sandbox has no network")
    other = sandpy.Sandbox(allow_hosts=[f"127.0.0.1:{port + 1}"]).run(FETCH.format(port=port))
    assert "is not allowed by sandpy.network.allow" in other.return_value


def test_a_bad_entry_is_refused_with_the_forms():
    with pytest.raises(ValueError, match=r"allow_hosts: .*ftp://x.*http or https"):
        sandpy.Sandbox(allow_hosts=["ftp://x/"])


def test_a_run_of_its_own_may_allow_hosts_for_itself_only(sb, port):
    r = sb.run(FETCH.format(port=port), allow_hosts=[f"127.0.0.1:{port}"])
    assert r.return_value == "/hi?x=1", r
    after = sb.run(FETCH.format(port=port))
    assert after.return_value.startswith("PermissionError"), after.return_value


async def _fetch_async(sb, port):
    return await sb.run_async(FETCH.format(port=port), allow_hosts=[f"127.0.0.1:{port}"])


def test_run_async_takes_allow_hosts_too(sb, port):
    import asyncio

    assert asyncio.run(_fetch_async(sb, port)).return_value == "/hi?x=1"
