"""Write a WASI pyconfig.h: the names of a CPython 3.14 pyconfig.h (Debian's, as the
template), each set as componentize-py's own CPython build configured it (its
_sysconfigdata__wasi_wasm32-wasi.py, where an undefined name is 0)."""
import importlib.util, re, sys
template, sysconfigdata, out = sys.argv[1:4]
spec = importlib.util.spec_from_file_location("sc", sysconfigdata)
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
v = mod.build_time_vars
lines = []
missing = []
for line in open(template):
    m = re.match(r"#define ([A-Za-z_][A-Za-z0-9_]*)(?: (.*))?$", line.rstrip("\n")) or \
        re.match(r"/\* #undef ([A-Za-z_][A-Za-z0-9_]*) \*/$", line.rstrip("\n"))
    if not m or m.group(1) in ("Py_PYCONFIG_H",):
        lines.append(line.rstrip("\n")); continue
    name = m.group(1)
    if name not in v:
        # sysconfig only records names that start with a letter: the rest as the
        # template has them, but for the WASI emulations CPython's WASI build defines.
        missing.append(name)
        if name.startswith("_WASI_EMULATED_"):
            lines.append(f"#define {name} 1")
        elif name in ("_PYTHREAD_NAME_MAXLEN", "_Py_FFI_SUPPORT_C_COMPLEX"):
            lines.append(f"/* #undef {name} */")
        else:
            lines.append(line.rstrip("\n"))
        continue
    val = v[name]
    if val == 0 and not name.startswith("SIZEOF"):
        lines.append(f"/* #undef {name} */")
    else:
        lines.append(f"#define {name} {val}")
open(out, "w").write("\n".join(lines) + "\n")
print("names not in WASI data:", missing, file=sys.stderr)
