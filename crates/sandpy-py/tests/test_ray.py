"""Eval batches on Ray (`sandpy.ray`): the scorer alone, then a real local Ray cluster
(started here, two worker processes) scoring 3,000 rows, checked row by row against
`sandpy call --args-file` on the same file."""

import json
import os
import secrets
import socket
import subprocess
import sys
from pathlib import Path

# The cluster uses Ray's token authentication (on by default since Ray 2.5x) with a token
# made here, not the user's ~/.ray/auth_token: set before Ray is imported, which reads it.
os.environ["RAY_AUTH_MODE"] = "token"
os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"

import pyarrow as pa  # noqa: E402
import pytest  # noqa: E402
import ray  # noqa: E402
import ray.data  # noqa: E402

import sandpy  # noqa: E402
import sandpy.ray  # noqa: E402

SCORER = '''
import difflib

def score(pred, gold):
    if pred.startswith("boom"):
        raise ValueError(f"cannot score {pred!r}")
    if pred == "loop":
        while True:
            pass
    if pred == "none":
        return None
    return {"ratio": round(difflib.SequenceMatcher(None, pred, gold).ratio(), 3), "n": len(pred)}
'''


def rows(n):
    """n rows of arguments (keywords), a few raising, timing out or returning None."""
    out = []
    for i in range(n):
        pred = f"answer {i}"
        if i % 1000 == 7:
            pred = f"boom {i}"
        elif i % 1500 == 11:
            pred = "loop"
        elif i % 1000 == 13:
            pred = "none"
        out.append({"pred": pred, "gold": f"answer {i % 97}"})
    return out


# --- the scorer alone (no cluster: Ray calls it exactly like this) -----------------------


def scored(table, **options):
    return sandpy.ray.Scorer(SCORER, "score", **options)(table)


def test_scorer_keeps_the_rows_and_adds_status_result_error_duration():
    table = pa.Table.from_pylist(rows(20))
    out = scored(table, timeout_ms=500)
    assert list(out) == ["pred", "gold", *sandpy.ray.RESULT_COLUMNS]
    assert out["pred"] == table.column("pred").to_pylist()
    assert out["status"][0] == "ok" and out["error"][0] is None
    assert out["result"][0] == {"ratio": 1.0, "n": 8}
    assert out["status"][7] == "error" and out["result"][7] is None
    assert out["error"][7] == {"type": "ValueError", "message": "cannot score 'boom 7'"}
    assert out["status"][13] == "ok" and out["result"][13] is None
    assert out["status"][11] == "timeout" and out["error"][11]["type"] == "Timeout"
    assert all(d > 0 for d in out["duration_ms"])


def test_scorer_timeout_is_that_rows_status():
    out = scored(pa.Table.from_pylist([{"pred": "loop", "gold": ""}, {"pred": "a", "gold": "a"}]),
                 timeout_ms=300)
    assert out["status"] == ["timeout", "ok"]
    assert out["error"][0]["type"] == "Timeout"


def test_scorer_columns_and_args_column_pick_the_arguments():
    table = pa.Table.from_pylist([{"id": 1, "pred": "ab", "gold": "ab"}])
    assert scored(table, columns=["pred", "gold"])["result"] == [{"ratio": 1.0, "n": 2}]
    # With every column as keywords, `id` is an unexpected keyword: the row's error.
    assert scored(table)["error"][0]["type"] == "TypeError"
    table = pa.Table.from_pylist([
        {"args": json.dumps(["ab", "b"])},
        {"args": json.dumps({"pred": "ab", "gold": "ab"})},
        {"args": "not json"},
        {"args": "7"},
    ])
    out = scored(table, args_column="args", result_as_json=True)
    assert out["status"] == ["ok", "ok", "invalid_input", "invalid_input"]
    assert [json.loads(r) for r in out["result"][:2]] == [{"ratio": 0.667, "n": 2}, {"ratio": 1.0, "n": 2}]
    assert "the column 'args' is not JSON" in out["error"][2]["message"]
    assert "must hold a list (positional) or an object (keywords), not int" in out["error"][3]["message"]
    with pytest.raises(ValueError, match="columns or args_column"):
        sandpy.ray.Scorer(SCORER, "score", columns=["a"], args_column="b")


def test_scorer_refuses_an_input_that_already_has_a_result_column():
    with pytest.raises(ValueError, match="already has a column 'status'"):
        scored(pa.Table.from_pylist([{"pred": "a", "gold": "a", "status": "x"}]))


def test_call_batch_answers_in_order_and_each_bad_item_alone(sb):
    source = "def f(x, y=0):\n    return x * 10 + y"
    items = [[1], {"x": 2, "y": 3}, "nope", [object()], (4, 5)]
    out = sb.call_batch(source, "f", items, jobs=2)
    assert [e.status for e in out] == ["ok", "ok", "invalid_input", "invalid_input", "ok"]
    assert [e.return_value for e in out] == [10, 23, None, None, 45]
    assert "arguments[2] must be a list (positional) or dict (keywords), not str" in out[2].error.message
    assert "arguments[3]" in out[3].error.message
    assert sb.call_batch(source, "f", []) == []
    with pytest.raises(TypeError, match="iterable of argument lists or dicts"):
        sb.call_batch(source, "f", {"x": 1})
    with pytest.raises(ValueError, match="jobs must be at least 1"):
        sb.call_batch(source, "f", [[1]], jobs=0)


# --- a real local cluster ----------------------------------------------------------------


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A local Ray cluster of one head node, started as on a real machine (`ray start
    --head`), joined with `ray.init(address=...)` as a remote one would be. Three logical
    CPUs: two for the scorer workers, one for the read task (the machine has two cores)."""
    ray_cli = Path(sys.executable).with_name("ray")
    port = free_port()
    started = subprocess.run(
        [str(ray_cli), "start", "--head", f"--port={port}", "--num-cpus=3",
         "--include-dashboard=false", "--disable-usage-stats"],
        capture_output=True, text=True, timeout=120,
    )
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        ray.init(address=f"127.0.0.1:{port}", log_to_driver=False)
        yield
    finally:
        ray.shutdown()
        subprocess.run([str(ray_cli), "stop", "--force"], capture_output=True, timeout=120)


class PidScorer(sandpy.ray.Scorer):
    """The scorer, and which worker process scored each row (shipped to the workers by
    value: they cannot import this test module)."""

    def __call__(self, batch):
        out = super().__call__(batch)
        out["pid"] = [os.getpid()] * batch.num_rows
        return out


ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def test_ray_cluster_scores_3000_rows_as_sandpy_call_args_file_does(cluster, cli, tmp_path):
    # 15 blocks of 200 rows over the two workers (10,000 rows took 39 s of CI's time: the
    # checks are per row and per block, not of the count).
    inputs = rows(3_000)
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in inputs))
    scorer = tmp_path / "scorer.py"
    scorer.write_text(SCORER)
    out = subprocess.run(
        [str(cli), "call", str(scorer), "score", "--timeout-ms", "2000", "--args-file", str(path)],
        capture_output=True, text=True, timeout=900,
    )
    expected = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(expected) == len(inputs), out.stderr

    ray.data.DataContext.get_current().execution_options.preserve_order = True
    dataset = ray.data.read_json(str(path))
    got = sandpy.ray.score(dataset, SCORER, "score", timeout_ms=2000, scorer=PidScorer,
                           concurrency=2, batch_size=200).take_all()

    assert len(got) == len(inputs)
    assert len({row["pid"] for row in got}) == 2 and os.getpid() not in {row["pid"] for row in got}
    for line, (row, want, given) in enumerate(zip(got, expected, inputs), start=1):
        assert {"pred": row["pred"], "gold": row["gold"]} == given, f"row {line} is out of place"
        assert row["status"] == want["status"], f"line {line}: {row} != {want}"
        if want["status"] == "ok":
            assert row["result"] == want["result"] and row["error"] is None, f"line {line}"
        else:
            assert row["error"] == want["error"], f"line {line}"
    statuses = [row["status"] for row in got]
    assert statuses.count("error") == 3 and statuses.count("timeout") == 2
