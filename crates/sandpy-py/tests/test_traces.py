"""Traces from the Python package: with an OTLP endpoint in the environment, a run is
traced as the CLI traces it, and the spans are sent by the time the process exits."""

import json
import os
import subprocess
import sys
import time

from conftest import REPO

RECEIVER = REPO / "crates" / "sandpy-mcp" / "tests" / "otlp_receiver.py"


def test_runs_are_traced_when_an_otlp_endpoint_is_set(tmp_path):
    spans_file = tmp_path / "spans.jsonl"
    receiver = subprocess.Popen([sys.executable, str(RECEIVER), str(spans_file)],
                                stdout=subprocess.PIPE, text=True)
    try:
        port = int(receiver.stdout.readline())
        env = dict(os.environ, OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}",
                   OTEL_SERVICE_NAME="evals")
        code = "import sandpy\nassert sandpy.Sandbox().run('6 * 7').return_value == 42"
        subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
        deadline = time.monotonic() + 10
        spans = []
        while time.monotonic() < deadline and not any(s["name"] == "sandbox_run" for s in spans):
            time.sleep(0.1)
            if spans_file.exists():
                spans = [json.loads(line) for line in spans_file.read_text().splitlines()]
    finally:
        receiver.kill()
    run = next(s for s in spans if s["name"] == "sandbox_run")
    assert run["service"] == "evals"
    assert run["attributes"]["status"] == "ok"
    children = {s["name"] for s in spans if s["parent_span_id"] == run["span_id"]}
    assert {"admission", "instantiate", "execute"} <= children, spans
