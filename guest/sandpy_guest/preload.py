"""Pre-import every stdlib module that works on WASI, at build time.

componentize-py snapshots the interpreter after this module runs; the component has no
filesystem at run time, so a module not imported here cannot be imported later.
`AVAILABLE` and `ABSENT` (module -> reason) record the result for `--list-modules`.
"""

import os
import sys

# Before `urllib.request` is imported: it registers its https handler only where
# `http.client` has an `HTTPSConnection`, which the host's TLS gives it. Importing
# `http_libraries` imports `network` (which routes `http.client` through the host) and then
# patches requests, httpx and urllib3 as they are imported.
from sandpy_guest import http_libraries as _http_libraries  # noqa: F401

# Modules skipped on purpose, with the reason reported to users.
_SKIPPED: dict[str, str] = {
    "antigravity": "opens a web browser",
    "this": "prints on import",
    "idlelib": "GUI (Tk) application",
    "tkinter": "GUI toolkit: no display in the sandbox",
    "turtle": "GUI toolkit: no display in the sandbox",
    "turtledemo": "GUI demos",
    "_tkinter": "GUI toolkit: no display in the sandbox",
    "test": "CPython's own test suite",
    "ensurepip": "installs packages: no network or filesystem",
    "venv": "creates environments: no filesystem",
    "pydoc": "documentation browser",
    "pydoc_data": "documentation browser data",
    "__phello__": "frozen-module test fixture",
    "_pyrepl": "interactive console",
    "webbrowser": "opens a web browser",
    "msvcrt": "Windows only",
    "winreg": "Windows only",
    "winsound": "Windows only",
    "_winapi": "Windows only",
    "nt": "Windows only",
    "_overlapped": "Windows only",
    "_msi": "Windows only",
    "_wmi": "Windows only",
    "_ios_support": "iOS only",
    "_android_support": "Android only",
}

# Submodules that users import directly and that a package import does not load.
_SUBMODULES: tuple[str, ...] = (
    "json.decoder", "json.encoder", "email.mime.text", "email.mime.multipart",
    "email.parser", "email.policy", "xml.etree.ElementTree", "xml.dom.minidom",
    "xml.sax.saxutils", "urllib.parse", "urllib.request", "urllib.error",
    "concurrent.futures", "importlib.metadata", "importlib.resources", "importlib.util",
    "logging.handlers", "logging.config", "collections.abc", "unittest.mock", "http.client",
    "http.cookies", "encodings.idna", "encodings.utf_16", "encodings.utf_32",
    "encodings.latin_1", "encodings.ascii", "encodings.cp1252", "encodings.unicode_escape",
    "encodings.raw_unicode_escape", "encodings.punycode", "encodings.base64_codec",
    "encodings.hex_codec", "_strptime", "asyncio", "dbm.dumb", "os.path", "json.tool",
    "compression.zstd", "string.templatelib", "annotationlib", "ctypes.util",
    # What importing third-party packages from a mounted folder needs at run time.
    "importlib.metadata._adapters", "importlib.metadata._meta", "importlib.metadata._text",
    "importlib.metadata._functools", "importlib.metadata._itertools",
    "importlib.metadata._collections", "importlib.resources.readers", "email.message",
    "importlib._bootstrap_external", "zipimport", "pkgutil",
)

AVAILABLE: list[str] = []
ABSENT: dict[str, str] = {}


def _try_import(name: str) -> None:
    try:
        __import__(name)
    except BaseException as exc:  # noqa: BLE001 - any failure means "absent"
        ABSENT[name] = f"{type(exc).__name__}: {exc}".strip()
    else:
        AVAILABLE.append(name)


def _preload() -> None:
    for name in sorted(sys.stdlib_module_names):
        if name in _SKIPPED:
            ABSENT[name] = _SKIPPED[name]
        else:
            _try_import(name)
    for name in _SUBMODULES:
        _try_import(name)
    # The build machine's environment was visible during pre-initialisation; the guest
    # must not carry it into any run.
    os.environ.clear()


_preload()
