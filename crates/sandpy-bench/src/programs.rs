//! The programs the parts run.

/// Per-call milliseconds of `calls` sequential calls of `tool`, timed inside the program.
pub(crate) const CALL_LOOP: &str = "import time\nt = time.perf_counter()\nfor _ in range(N):\n    call_mcp_tool(TOOL, ARGS)\n(time.perf_counter() - t) * 1000 / N";

pub(crate) fn call_loop(tool: &str, arguments: &str, calls: usize) -> String {
    CALL_LOOP
        .replace("N", &calls.to_string())
        .replace("TOOL", &format!("{tool:?}"))
        .replace("ARGS", arguments)
}

/// CPU-bound programs; each prints its own elapsed seconds so that start-up is excluded
/// on both sides.
pub(crate) const CPU_SET: &[(&str, &str)] = &[
    ("loops", "s = 0\nfor i in range(3_000_000):\n    s += i % 7\n"),
    ("sorting", "import random\nr = random.Random(1)\nxs = [r.random() for _ in range(300_000)]\nfor _ in range(3):\n    sorted(xs)\n"),
    ("strings", "parts = []\nfor i in range(200_000):\n    parts.append(f'{i}:{i*i:x}'.upper().replace('A', 'z'))\n' '.join(parts).split(' ')\n"),
    ("json", "import json\ndoc = [{'id': i, 'name': f'n{i}', 'tags': ['a', 'b'], 'v': i / 3} for i in range(20_000)]\nfor _ in range(5):\n    json.loads(json.dumps(doc))\n"),
];

/// A fresh run that writes far more of the snapshot than `print('hello')` does: new
/// objects by the thousand, and a reference to every module's every global (each a
/// reference count written on a snapshot page).
pub(crate) const HEAVY: &str = "import json, sys\nrows = [{'k': n, 'v': str(n) * 10} for n in range(20_000)]\njson.loads(json.dumps(rows))\nfor module in list(sys.modules.values()):\n    for value in list(vars(module).values()):\n        pass\n";

pub(crate) fn timed(body: &str) -> String {
    format!("import time as _t\n_t0 = _t.perf_counter()\n{body}\nprint(_t.perf_counter() - _t0)\n")
}
