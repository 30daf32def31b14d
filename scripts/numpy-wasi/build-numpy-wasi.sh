#!/usr/bin/env bash
# Spike (issue 61): cross-build numpy's extension modules for wasm32-wasi as position-
# independent shared libraries for the vendored componentize-py, with registry tools only.
# See docs/dev/numpy-wasi-spike.md. Usage: scripts/numpy-wasi/build-numpy-wasi.sh [WORK_DIR]
# Needs (bookworm): clang-19 lld-19 libclang-rt-19-dev-wasm32 libc++-19-dev-wasm32, python3,
# zstd; fetches from Debian sid (apt-get download, not installed): libpython3.14-dev (the
# CPython 3.14 headers) and wasi-libc (wasip2 headers close to the libc.so componentize-py links);
# from PyPI: numpy's sdist, cython, ninja.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
WORK=${1:-/work/spike}
NUMPY_VERSION=${NUMPY_VERSION:-2.4.6}
JOBS=${JOBS:-2}
mkdir -p "$WORK"; cd "$WORK"

# 1. componentize-py's bundled CPython: libpython3.14.so, libc.so, and its sysconfigdata
#    (every pyconfig.h value its WASI build configured).
mkdir -p cpy
for f in "$REPO"/vendor/componentize-py/*.zst; do
  b=$(basename "$f" .zst); [ -e "cpy/$b" ] || zstd -dqf "$f" -o "cpy/$b"
done
[ -e cpy/_sysconfigdata__wasi_wasm32-wasi.py ] || (cd cpy && tar xf python-lib.tar _sysconfigdata__wasi_wasm32-wasi.py)

# 2. Headers from Debian sid, unpacked only.
if [ ! -d apt-sid/root/usr/include/wasm32-wasip2 ]; then
  mkdir -p apt-sid/lists/partial apt-sid/cache/archives/partial
  echo 'deb http://deb.debian.org/debian sid main' > apt-sid/sources.list
  APTOPT=(-o Dir::Etc::SourceList="$WORK/apt-sid/sources.list" -o Dir::Etc::SourceParts=/dev/null
          -o Dir::State::Lists="$WORK/apt-sid/lists" -o Dir::Cache="$WORK/apt-sid/cache"
          -o Dir::State::status=/dev/null)
  apt-get "${APTOPT[@]}" update
  (cd apt-sid && apt-get "${APTOPT[@]}" download libpython3.14-dev wasi-libc && for d in *.deb; do dpkg -x "$d" root; done)
fi
SID=$WORK/apt-sid/root/usr

# 3. Python headers with a WASI pyconfig.h generated from componentize-py's sysconfigdata.
rm -rf pyinc && mkdir -p pyinc && cp -r "$SID/include/python3.14" pyinc/
python3 "$REPO/scripts/numpy-wasi/gen_pyconfig.py" "$SID/include/x86_64-linux-gnu/python3.14/pyconfig.h" \
  cpy/_sysconfigdata__wasi_wasm32-wasi.py pyinc/python3.14/pyconfig.h

# 4. Host tools (a venv) and numpy's sdist.
[ -x venv/bin/python ] || python3 -m venv venv
venv/bin/pip install -q ninja 'cython>=3.1'
if [ ! -d "numpy-$NUMPY_VERSION" ]; then
  # `pip download` of an sdist builds the whole wheel natively to get its metadata
  # (meson-python has no metadata hook), so take the URL pip would from PyPI's JSON API.
  venv/bin/python - "$NUMPY_VERSION" <<'PY'
import hashlib, json, sys, urllib.request
v = sys.argv[1]
# PyPI's simple index (PEP 691 JSON), as pip reads it.
req = urllib.request.Request("https://pypi.org/simple/numpy/",
                             headers={"Accept": "application/vnd.pypi.simple.v1+json"})
files = json.load(urllib.request.urlopen(req))["files"]
sdist = next(f for f in files if f["filename"] == f"numpy-{v}.tar.gz")
data = urllib.request.urlopen(sdist["url"]).read()
assert hashlib.sha256(data).hexdigest() == sdist["hashes"]["sha256"]
open(sdist["filename"], "wb").write(data)
PY
  tar xzf "numpy-$NUMPY_VERSION.tar.gz"
fi

# 5. A python for meson that reports the WASI CPython (sitecustomize patches sysconfig).
mkdir -p pyshim
cp "$REPO/scripts/numpy-wasi/wasi_sitecustomize.py" pyshim/sitecustomize.py
cat > pyshim/python <<SH
#!/bin/sh
SANDPY_WASI_SYSCONFIG=$WORK/cpy/_sysconfigdata__wasi_wasm32-wasi.py \\
SANDPY_WASI_INCLUDE=$WORK/pyinc/python3.14 \\
PYTHONPATH=$WORK/pyshim\${PYTHONPATH:+:\$PYTHONPATH} exec $WORK/venv/bin/python "\$@"
SH
chmod +x pyshim/python

# 6. Compiler wrappers and the meson cross file. Objects are compiled for wasm32-wasip2
#    (the headers of the libc.so componentize-py links); a link with -shared (an
#    extension) leaves libc and crt1 out, their symbols imported when componentize-py
#    links the component; any other link (meson's has_function checks) is a wasip1
#    executable against sid's static libc.a, so the checks find what wasi-libc has.
mkdir -p bin
clang-19 --target=wasm32-wasip2 --sysroot="$SID" -fPIC -O2 -c "$REPO/scripts/numpy-wasi/cxa_stub.c" -o bin/cxa_stub.o
rm -f bin/libcxa_stub.a && llvm-ar-19 rcs bin/libcxa_stub.a bin/cxa_stub.o
for tool in clang clang++; do
cat > bin/wasi-$tool <<SH
#!/bin/bash
case " \$* " in
  *" -c "*) exec $tool-19 --target=wasm32-wasip2 --sysroot=$SID "\$@" ;;
  *" -shared "*)
    # wasm-ld has no archive groups (it resolves across archives anyway).
    args=(); for a in "\$@"; do case "\$a" in -Wl,--start-group|-Wl,--end-group) ;; *) args+=("\$a") ;; esac; done
    exec $tool-19 --target=wasm32-wasi --sysroot=$SID "\${args[@]}" -nostartfiles -nodefaultlibs \\
      -Wl,--experimental-pic -Wl,--no-entry \\
      $WORK/cpy/libpython3.14.so $WORK/cpy/libc.so $WORK/cpy/libc++.so $WORK/cpy/libc++abi.so \\
      $WORK/cpy/libwasi-emulated-signal.so $WORK/cpy/libwasi-emulated-mman.so \\
      $WORK/cpy/libwasi-emulated-process-clocks.so $WORK/cpy/libwasi-emulated-getpid.so \\
      $WORK/bin/libcxa_stub.a /usr/lib/llvm-19/lib/clang/19/lib/wasi/libclang_rt.builtins-wasm32.a ;;
  *) exec $tool-19 --target=wasm32-wasi --sysroot=$SID "\$@" -lwasi-emulated-signal -lwasi-emulated-process-clocks -lwasi-emulated-mman -lwasi-emulated-getpid ;;
esac
SH
chmod +x bin/wasi-$tool
done
WASI_FLAGS="'-fPIC', '-I$WORK/pyinc/python3.14', '-D_WASI_EMULATED_SIGNAL', '-D_WASI_EMULATED_PROCESS_CLOCKS', '-D_WASI_EMULATED_MMAN', '-D_WASI_EMULATED_GETPID', '-DNPY_NO_SIGNAL'"
cat > wasi-cross.ini <<INI
[binaries]
c = '$WORK/bin/wasi-clang'
cpp = '$WORK/bin/wasi-clang++'
ar = 'llvm-ar-19'
strip = 'llvm-strip-19'
python = '$WORK/pyshim/python'
cython = '$WORK/venv/bin/cython'

[built-in options]
c_args = [$WASI_FLAGS]
cpp_args = [$WASI_FLAGS, '-isystem', '/usr/lib/llvm-19/include/wasm32-wasi/c++/v1', '-fexceptions']

[properties]
needs_exe_wrapper = true
longdouble_format = 'IEEE_QUAD_LE'

[host_machine]
system = 'wasi'
cpu_family = 'wasm32'
cpu = 'wasm32'
endian = 'little'
INI

# 7. Configure and build numpy (nice, at most $JOBS jobs).
cd "numpy-$NUMPY_VERSION"
export PATH=$WORK/venv/bin:$PATH
if [ ! -f build-wasi/build.ninja ]; then
  nice -n 19 "$WORK/venv/bin/python" vendored-meson/meson/meson.py setup build-wasi \
    --cross-file "$WORK/wasi-cross.ini" --buildtype=release -Db_ndebug=if-release \
    -Dallow-noblas=true -Dblas=none -Dlapack=none -Ddisable-threading=true \
    -Ddisable-optimization=true -Ddisable-svml=true -Ddisable-highway=true \
    -Ddisable-intel-sort=true --prefix="$WORK/numpy-install"
fi
time nice -n 19 ninja -C build-wasi -j "$JOBS" -k 0

# 8. The package tree componentize-py takes (it links every extension .so it finds on the
#    guest's Python path beside libpython3.14.so): numpy's Python files and the .so files.
rm -rf "$WORK/numpy-dest" "$WORK/site-np"
nice -n 19 "$WORK/venv/bin/python" vendored-meson/meson/meson.py install -C build-wasi \
  --destdir "$WORK/numpy-dest" --tags runtime,python-runtime >/dev/null
mkdir -p "$WORK/site-np"
cp -a "$(find "$WORK/numpy-dest" -type d -name numpy -path '*site-packages*' | head -1)" "$WORK/site-np/"
# numpy.distutils is installed only for a host Python < 3.12 (this venv's); 3.14 has none.
rm -rf "$WORK/site-np/numpy/distutils"
find "$WORK/site-np" -name __pycache__ -prune -exec rm -rf {} +
du -sh "$WORK/site-np"; find "$WORK/site-np" -name '*.so' | xargs du -cb | tail -1
