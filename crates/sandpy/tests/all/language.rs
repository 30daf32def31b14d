//! The language and the stdlib work as in CPython.

use crate::run_ok;
use serde_json::json;

#[test]
fn classes_generators_closures_match_fstrings() {
    let e = run_ok(
        r#"
from dataclasses import dataclass
@dataclass
class Point:
    x: int
    y: int
    def norm2(self): return self.x ** 2 + self.y ** 2

def counter():
    n = 0
    def inc():
        nonlocal n
        n += 1
        return n
    return inc

def squares(n):
    for i in range(n):
        yield i * i

def describe(v):
    match v:
        case Point(x=0, y=0): return "origin"
        case Point(x=x, y=0): return f"on x at {x}"
        case [a, b, *rest]: return f"list {a} {b} +{len(rest)}"
        case {"k": k}: return f"dict {k!r}"
        case _: return "other"

inc = counter(); inc(); inc()
try:
    raise KeyError("missing")
except KeyError as e:
    caught = repr(e)
finally:
    done = True
print(Point(3, 4).norm2(), inc(), list(squares(4)), caught, done)
print(describe(Point(0, 0)), describe(Point(2, 0)), describe([1, 2, 3, 4]), describe({"k": 1}), describe(3.5))
print(f"{3.14159:.2f}|{'x':>3}|{255:#x}")
"#,
    );
    assert_eq!(
        e.stdout,
        "25 3 [0, 1, 4, 9] KeyError('missing') True\norigin on x at 2 list 1 2 +2 dict 1 other\n3.14|  x|0xff\n"
    );
}

#[test]
fn stdlib_samples() {
    let e = run_ok(
        r#"
import json, re, datetime, decimal, fractions, statistics, itertools, collections, typing, hashlib, base64
from decimal import Decimal
assert json.loads(json.dumps({"a": [1, 2.5, None]})) == {"a": [1, 2.5, None]}
assert re.findall(r"(\d+)-(\w+)", "1-a 22-bb") == [("1", "a"), ("22", "bb")]
assert datetime.date(2024, 2, 28) + datetime.timedelta(days=1) == datetime.date(2024, 2, 29)
assert Decimal("0.1") + Decimal("0.2") == Decimal("0.3")
assert fractions.Fraction(1, 3) * 3 == 1
assert statistics.median([5, 1, 3]) == 3
assert list(itertools.accumulate([1, 2, 3])) == [1, 3, 6]
assert collections.Counter("abca").most_common(1) == [("a", 2)]
T = typing.TypeVar("T")
def first(xs: list[T]) -> T: return xs[0]
assert first([7]) == 7
assert hashlib.sha256(b"x").hexdigest().startswith("2d711642")
assert base64.b64encode(b"hi") == b"aGk="
try:
    import zoneinfo
    print("zoneinfo", zoneinfo.ZoneInfo("UTC").key)
except Exception as exc:
    print("zoneinfo absent:", type(exc).__name__)
print("ok")
"#,
    );
    assert!(e.stdout.ends_with("ok\n"), "{}", e.stdout);
}

#[test]
fn top_level_await_and_asyncio_run() {
    let e = run_ok(
        r#"
import asyncio
async def twice(x):
    await asyncio.sleep(0.01)
    return 2 * x
async def main():
    return await asyncio.gather(twice(1), twice(2), twice(3))
print(asyncio.run(main()))
"#,
    );
    assert_eq!(e.stdout, "[2, 4, 6]\n");
    let e = run_ok("import asyncio\nawait asyncio.sleep(0)\nx = await asyncio.gather(*(asyncio.sleep(0.01, result=i) for i in range(3)))\nx");
    assert_eq!(e.return_value, Some(serde_json::json!([0, 1, 2])));
}

#[test]
fn concurrent_sleeps_overlap() {
    let e = run_ok(
        "import asyncio, time\nt = time.monotonic()\nawait asyncio.gather(*(asyncio.sleep(0.2) for _ in range(5)))\nround(time.monotonic() - t, 1)",
    );
    let elapsed = e.return_value.and_then(|v| v.as_f64()).expect("a float");
    assert!(elapsed < 0.5, "five 0.2 s sleeps took {elapsed} s");
}

#[test]
fn awaiting_what_can_never_complete_is_an_error_not_a_hang() {
    let e = crate::run("import asyncio\nawait asyncio.get_running_loop().create_future()");
    assert_eq!(e.status, sandpy::Status::Error);
    assert!(e.error.unwrap().message.contains("nothing left to run"));
}

#[test]
fn each_run_is_fresh() {
    run_ok(
        "import json\njson.secret = 42\nglobal_marker = 1\nimport builtins\nbuiltins.leak = 'x'",
    );
    let e = run_ok("import json, builtins\n[hasattr(json, 'secret'), 'global_marker' in globals(), hasattr(builtins, 'leak')]");
    assert_eq!(
        e.return_value,
        Some(serde_json::json!([false, false, false]))
    );
}

#[test]
fn random_and_urandom_differ_between_runs() {
    let code = "import random, os\n[random.random(), os.urandom(8).hex()]";
    let a = run_ok(code).return_value;
    let b = run_ok(code).return_value;
    assert_ne!(a, b);
}

#[test]
fn module_report_lists_available_and_absent_modules() {
    let report = crate::block_on(crate::sandbox().module_report()).expect("a report");
    let available: Vec<&str> = report.available.iter().map(String::as_str).collect();
    for module in ["json", "re", "asyncio", "sqlite3", "decimal", "zlib"] {
        assert!(
            available.contains(&module),
            "{module} missing from {available:?}"
        );
    }
    assert!(report.absent["tkinter"].contains("GUI"));
}

#[test]
fn stdin_is_empty_unless_given() {
    let e = run_ok("import sys\nsys.stdin.read()");
    assert_eq!(e.return_value, Some(serde_json::json!("")));
    let options = sandpy::RunOptions {
        stdin: Some(b"line one\nline two\n".to_vec()),
        ..Default::default()
    };
    let e = crate::run_with("import sys\n[l.strip() for l in sys.stdin]", &options);
    assert_eq!(
        e.return_value,
        Some(serde_json::json!(["line one", "line two"]))
    );
}

#[test]
fn the_curated_packages_are_built_in_and_work() {
    let e = run_ok(
        "import attrs, dateutil.parser, yaml, tabulate, jinja2, markupsafe, idna, six\n\
         @attrs.define\nclass P:\n    x: int\n\
         [yaml.safe_load('a: [1, 2]'), jinja2.Template('{{ n|upper }}').render(n='x'), tabulate.tabulate([[1]], tablefmt='plain'),\n\
          dateutil.parser.parse('2026-11-23T10:00:00Z').isoformat(), idna.encode('bücher.de').decode(), str(markupsafe.escape('<a>')),\n\
          repr(P(1)), six.PY3, yaml.__with_libyaml__]",
    );
    assert_eq!(
        e.return_value,
        Some(
            json!([{"a": [1, 2]}, "X", "1", "2026-11-23T10:00:00+00:00", "xn--bcher-kva.de", "&lt;a&gt;", "P(x=1)", true, false])
        )
    );
}

#[test]
fn deep_recursion_ends_in_recursion_error_like_native_python() {
    // Recursion through a C function (`lru_cache`) takes C stack (linear memory) and
    // WebAssembly stack on every level. With componentize-py's 1 MiB C stack it ended at
    // ~2,300 levels (and before that, on a 512 KiB WebAssembly stack, trapped at 200-500);
    // the 4 MiB C stack the guest is built with takes it past 9,000, and deeper recursion
    // ends at CPython's own C-stack check with a `RecursionError` the code can catch, as
    // natively.
    let e = run_ok(
        "import sys, functools\nsys.setrecursionlimit(100000)\n\
         @functools.lru_cache(maxsize=None)\ndef f(n):\n    return 0 if n == 0 else f(n - 1) + 1\n\
         def g(n):\n    return 0 if n == 0 else g(n - 1) + 1\n\
         def deeper():\n    f.cache_clear()\n    try:\n        return f(50000)\n    except RecursionError as e:\n        return str(e).split(' (')[0]\n\
         [f(3000), f.cache_clear(), f(8000), g(8000), deeper()]",
    );
    assert_eq!(
        e.return_value,
        Some(serde_json::json!([
            3000,
            null,
            8000,
            8000,
            "Stack overflow"
        ]))
    );
}

/// `import pandas` in the WebAssembly tier: the error says where compiled packages run
/// (in the message the model reads and in the traceback), and nothing more for a module
/// that is simply not there; code that catches the import itself sees a plain one.
#[test]
fn a_compiled_package_missing_here_says_it_runs_in_the_native_tier() {
    let e = crate::run("import pandas as pd\npd.DataFrame()");
    assert_eq!(e.status, sandpy::Status::Error);
    let error = e.error.expect("an error");
    assert_eq!(error.kind, "ModuleNotFoundError");
    assert!(
        error
            .message
            .starts_with("No module named 'pandas'. sandpy: pandas has compiled parts"),
        "{}",
        error.message
    );
    assert!(error.message.contains("native tier"), "{}", error.message);
    assert!(
        e.stderr.contains("runs in sandpy's native tier"),
        "{}",
        e.stderr
    );
    let e = crate::run("import no_such_module_here");
    assert_eq!(
        e.error.expect("an error").message,
        "No module named 'no_such_module_here'"
    );
    let e = run_ok("try:\n    import numpy\nexcept ImportError as e:\n    r = str(e)\nr");
    assert_eq!(e.return_value, Some(json!("No module named 'numpy'")));
}
