"""Make this (host) Python report the WASI CPython 3.14 that componentize-py bundles, for
meson's python introspection when cross-building (scripts/numpy-wasi/build-numpy-wasi.sh). Only where
SANDPY_WASI_SYSCONFIG is set; scripts still run on the host interpreter."""
import os

_data = os.environ.get("SANDPY_WASI_SYSCONFIG")
if _data:
    import importlib.util
    import sysconfig

    _spec = importlib.util.spec_from_file_location("_wasi_sysconfigdata", _data)
    _mod = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_mod)
    _include = os.environ["SANDPY_WASI_INCLUDE"]
    _vars = dict(sysconfig.get_config_vars())
    _vars.update(_mod.build_time_vars)
    _vars.update(INCLUDEPY=_include, LIBPYTHON="", Py_ENABLE_SHARED=0)
    _cached = sysconfig.get_config_vars()
    _cached.clear()
    _cached.update(_vars)
    _get_paths = sysconfig.get_paths

    def get_paths(*args, **kwargs):
        paths = dict(_get_paths(*args, **kwargs))
        paths["include"] = paths["platinclude"] = _include
        return paths

    sysconfig.get_paths = get_paths
    sysconfig.get_python_version = lambda: "3.14"
    sysconfig.get_platform = lambda: "wasi-wasm32"
