"""Eval batches on Ray: score every row of a Ray Dataset with a function run in sandpy.

    import ray, ray.data
    import sandpy.ray

    ray.init()                                  # or ray.init(address="ray://head:10001")
    rows = ray.data.read_json("rows.jsonl")     # e.g. {"answer": ..., "expected": ...}
    scored = sandpy.ray.score(rows, open("scorer.py").read(), "score", timeout_ms=2000)
    scored.write_json("scored/")

Each row becomes one call of `function` in a fresh sandbox run, exactly as a line of
`sandpy call scorer.py score --args-file rows.jsonl`: by default the row's columns are the
keyword arguments (`columns=` picks them, `args_column=` names one column that holds a
list of positional arguments or a dict of keywords). Each Ray worker process holds one
`Sandbox` (made in the worker, never shipped from the driver) and runs its batch `jobs`
calls at a time with the GIL released. The output keeps every input column and adds:

- `status`: the run's status (`ok`, `error`, `timeout`, `memory`, `invalid_input`, ...),
- `result`: the function's return value (JSON: a number, str, list, dict or None),
- `error`: None, or `{"type": ..., "message": ...}` as in `--args-file`'s output,
- `duration_ms`: the run's time.

So every result sits in the row it scored, whatever order Ray's blocks finish in; set
`ray.data.DataContext.get_current().execution_options.preserve_order = True` to also keep
the input's order. A result whose shape differs from row to row is stored as a Python
object column (Ray's fallback); pass `result_as_json=True` for a plain string column of
JSON text instead.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

try:
    import ray.data
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError(
        "sandpy.ray needs Ray Data: pip install 'ray[data]'"
    ) from error

from ._sandpy import Sandbox

__all__ = ["RESULT_COLUMNS", "Scorer", "score"]

#: The columns the scorer adds to each row.
RESULT_COLUMNS = ("status", "result", "error", "duration_ms")


class Scorer:
    """A callable class for `Dataset.map_batches(Scorer, batch_format="pyarrow", ...)`.

    Ray makes one per worker process (an actor), so each worker holds one `Sandbox`; every
    row of a batch is one fresh run of `function` from `source`. The keyword arguments
    after `function` are those of `score`, less Ray's own.
    """

    def __init__(
        self,
        source: str,
        function: str,
        *,
        columns: Sequence[str] | None = None,
        args_column: str | None = None,
        jobs: int | None = None,
        result_as_json: bool = False,
        config: str | None = None,
        policy: str | Mapping[str, Any] | None = None,
        timeout_ms: int | None = None,
        memory_mb: int | None = None,
        allowed_tools: Sequence[str] | None = None,
    ) -> None:
        if columns is not None and args_column is not None:
            raise ValueError("give columns or args_column, not both")
        self._source = source
        self._function = function
        self._columns = list(columns) if columns is not None else None
        self._args_column = args_column
        self._jobs = jobs or _worker_cpus()
        self._result_as_json = result_as_json
        self._limits = {
            "timeout_ms": timeout_ms,
            "memory_mb": memory_mb,
            "allowed_tools": list(allowed_tools) if allowed_tools is not None else None,
        }
        self._sandbox = Sandbox(config=config, policy=policy)

    def __call__(self, batch: Any) -> dict[str, list[Any]]:
        """Score one batch (a `pyarrow.Table`); the batch's columns plus `RESULT_COLUMNS`."""
        rows = batch.to_pylist()
        for name in RESULT_COLUMNS:
            if name in batch.column_names:
                raise ValueError(
                    f"the input already has a column {name!r}; the scorer adds "
                    f"{', '.join(RESULT_COLUMNS)} (rename or drop it first)"
                )
        arguments = [self._arguments(row) for row in rows]
        usable = [i for i, a in enumerate(arguments) if not isinstance(a, _Unusable)]
        executions = self._sandbox.call_batch(
            self._source,
            self._function,
            [arguments[i] for i in usable],
            jobs=self._jobs,
            **self._limits,
        )
        outcomes: list[tuple[str, Any, dict[str, str] | None, float]] = [
            ("invalid_input", None, {"type": "InvalidInput", "message": a.message}, 0.0)
            if isinstance(a, _Unusable)
            else ("", None, None, 0.0)
            for a in arguments
        ]
        for i, e in zip(usable, executions):
            error = None if e.error is None else {"type": e.error.type, "message": e.error.message}
            value = e.return_value if error is None else None
            outcomes[i] = (e.status, value, error, e.duration_ms)
        out: dict[str, list[Any]] = {
            name: batch.column(name).to_pylist() for name in batch.column_names
        }
        out["status"] = [o[0] for o in outcomes]
        out["result"] = [json.dumps(o[1]) if self._result_as_json else o[1] for o in outcomes]
        out["error"] = [o[2] for o in outcomes]
        out["duration_ms"] = [o[3] for o in outcomes]
        return out

    def _arguments(self, row: dict[str, Any]) -> Any:
        """The call's arguments for one row, or why there are none (its invalid_input)."""
        if self._args_column is None:
            if self._columns is None:
                return row
            return {name: row.get(name) for name in self._columns}
        if self._args_column not in row:
            return _Unusable(f"the row has no column {self._args_column!r} (args_column)")
        value = row[self._args_column]
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError as error:
                return _Unusable(f"the column {self._args_column!r} is not JSON: {error}")
        if not isinstance(value, (list, dict)):
            return _Unusable(
                f"the column {self._args_column!r} must hold a list (positional) or an "
                f"object (keywords), not {type(value).__name__}"
            )
        return value


class _Unusable:
    """A row whose arguments cannot be made: its result is `invalid_input` with `message`."""

    def __init__(self, message: str) -> None:
        self.message = message


def score(
    dataset: ray.data.Dataset,
    source: str,
    function: str,
    *,
    concurrency: int | None = None,
    batch_size: int = 256,
    num_cpus: float = 1,
    scorer: type[Scorer] = Scorer,
    **options: Any,
) -> ray.data.Dataset:
    """Score every row of `dataset` with `function` from `source`, one fresh run per row.

    `concurrency` is the number of worker processes. Each reserves `num_cpus` CPUs for as
    long as the dataset runs, and Ray's read and write tasks need a CPU of their own: with
    every CPU held by a scorer they never run and the dataset waits forever. So the default
    is the cluster's CPUs less one, divided by `num_cpus` (at least 1); `batch_size` is the
    rows a worker takes at once.
    `options` go to `Scorer`: `columns`, `args_column`, `jobs` (calls at once in a worker,
    default its CPUs), `result_as_json`, `config`, `policy`, `timeout_ms`, `memory_mb`,
    `allowed_tools`. `scorer` is the class Ray instantiates in each worker: a subclass of
    `Scorer` can add columns of its own. Lazy, as every Ray Dataset: it runs when the
    result is consumed.
    """
    if concurrency is None:
        cpus = ray.cluster_resources().get("CPU", 1) if ray.is_initialized() else 1
        concurrency = max(1, int((cpus - 1) // num_cpus))
    return dataset.map_batches(
        scorer,
        fn_constructor_args=(source, function),
        fn_constructor_kwargs=options,
        batch_format="pyarrow",
        batch_size=batch_size,
        concurrency=concurrency,
        num_cpus=num_cpus,
    )


def _worker_cpus() -> int:
    """The CPUs Ray gave this worker (at least 1); 1 outside Ray (asking Ray there would
    start a local cluster)."""
    if not ray.is_initialized():
        return 1
    cpus = ray.get_runtime_context().get_assigned_resources().get("CPU", 1)
    return max(1, round(cpus))
