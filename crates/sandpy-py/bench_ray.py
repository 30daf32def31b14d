"""The Ray recipe's throughput against `sandpy call --args-file` on the same rows.

    python crates/sandpy-py/bench_ray.py SANDPY_BIN [ROWS] [ROUNDS]

Scores ROWS rows (default 10,000) with the eval batch of `sandpy bench --only eval` (a
difflib ratio, policy `strict`): by the CLI (`--args-file`, one job per core) and by
`sandpy.ray.score` on a local Ray cluster made here with two scorer workers, alternately
for ROUNDS rounds (default 3). Each Ray round counts from building the dataset to the last
row taken, so the workers' start (a Sandbox each) is inside the figure. Prints calls/s of
each round and the ratio of the medians.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import ray  # noqa: E402
import ray.data  # noqa: E402

import sandpy.ray  # noqa: E402

SCORER = """import difflib
def score(pred, gold):
    return round(difflib.SequenceMatcher(None, pred, gold).ratio(), 3)
"""


def cli_round(cli, scorer, rows_file, rows):
    start = time.perf_counter()
    out = subprocess.run(
        [cli, "call", str(scorer), "score", "--policy", "strict", "--args-file", str(rows_file)],
        capture_output=True, text=True, check=True,
    )
    seconds = time.perf_counter() - start
    ok = sum('"status":"ok"' in line for line in out.stdout.splitlines())
    assert ok == rows, f"{ok} of {rows} ok: {out.stderr[-2000:]}"
    return rows / seconds


def ray_round(rows_file, rows):
    start = time.perf_counter()
    dataset = ray.data.read_json(str(rows_file))
    out = sandpy.ray.score(dataset, SCORER, "score", policy="strict", concurrency=2,
                           batch_size=500, result_as_json=True)
    statuses = out.select_columns(["status"]).take_all()
    seconds = time.perf_counter() - start
    ok = sum(row["status"] == "ok" for row in statuses)
    assert ok == rows, f"{ok} of {rows} ok"
    return rows / seconds


def main():
    cli = sys.argv[1]
    rows = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    folder = Path(tempfile.mkdtemp(prefix="sandpy-bench-ray-"))
    scorer = folder / "scorer.py"
    scorer.write_text(SCORER)
    rows_file = folder / "rows.jsonl"
    rows_file.write_text("".join(
        json.dumps({"pred": f"answer {i}", "gold": f"answer {i % 97}"}) + "\n" for i in range(rows)
    ))
    # Two scorer workers and one CPU for the read task (see sandpy.ray.score).
    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    cli_rates, ray_rates = [], []
    for _ in range(rounds):
        cli_rates.append(cli_round(cli, scorer, rows_file, rows))
        ray_rates.append(ray_round(rows_file, rows))
    ray.shutdown()
    print(f"sandpy call --args-file ({os.cpu_count()} jobs): "
          + "  ".join(f"{r:.0f}" for r in cli_rates) + " calls/s")
    print("sandpy.ray.score (2 workers, local cluster): "
          + "  ".join(f"{r:.0f}" for r in ray_rates) + " calls/s")
    ratio = statistics.median(ray_rates) / statistics.median(cli_rates)
    print(f"Ray / CLI, medians of {rounds} alternating rounds of {rows} rows: {ratio:.2f}x")


if __name__ == "__main__":
    main()
