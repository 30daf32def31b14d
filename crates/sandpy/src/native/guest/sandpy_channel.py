"""The native run's channel to the host: one inherited socket (fd 3), one JSON line per
message. The runner's tool calls (through `wit_world.imports.tools`) and the run itself
(`sandpy_native`) both use it; it imports neither."""

import json
import os
import threading

CHANNEL_FD = 3
_pending = bytearray()


def write(message: object) -> None:
    """Send one message, whole."""
    data = memoryview((json.dumps(message) + "\n").encode())
    while data:
        data = data[os.write(CHANNEL_FD, data) :]


def read() -> object:
    """The next message; ends the run if the host is gone."""
    while True:
        end = _pending.find(b"\n")
        if end >= 0:
            line = bytes(_pending[:end])
            del _pending[: end + 1]
            return json.loads(line)
        chunk = os.read(CHANNEL_FD, 1 << 16)
        if not chunk:
            os._exit(70)  # the host is gone: nobody is left to read a result
        _pending.extend(chunk)


# One question at a time: the host answers in order, so two threads asking at once would
# each read the other's answer.
_asking = threading.Lock()


def ask(request: object) -> object:
    """One request to the host and its answer (threads take turns)."""
    with _asking:
        write(request)
        return read()
