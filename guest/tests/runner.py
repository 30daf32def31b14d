"""A minimal test runner for the guest package's own tests, run inside the sandbox.

Each test file defines `test_*` functions (plain or async); the host test
(`crates/sandpy/tests/all/guest_python.rs`) appends this file and `run_tests(globals())`,
which runs them all and fails with a summary if any failed. It is not part of the guest
component: production runs cannot import it.
"""

import asyncio
import inspect
import traceback
from typing import Any


def run_tests(namespace: dict[str, Any]) -> dict[str, int]:
    passed, failures = 0, []
    for name, test in sorted(namespace.items()):
        if not (name.startswith("test_") and callable(test)):
            continue
        try:
            result = test()
            if inspect.iscoroutine(result):
                asyncio.run(result)
        except BaseException:  # noqa: BLE001 - report every failure
            failures.append(f"{name}:\n{traceback.format_exc()}")
        else:
            passed += 1
    if failures:
        raise AssertionError(f"{len(failures)} failed, {passed} passed\n" + "\n".join(failures))
    return {"passed": passed, "failed": 0}
