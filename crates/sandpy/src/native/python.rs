//! The CPython the native tier runs: found by asking its executable once (host side),
//! and loaded into the zygote through its shared `libpython` (zygote side).

use super::NativeError;
use serde::{Deserialize, Serialize};
use std::ffi::{c_char, c_int, c_void, CString};
use std::path::{Path, PathBuf};

/// What the host learns about a Python installation by running it once.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct PythonInstall {
    /// `major.minor.micro`.
    pub version: String,
    /// The installation's own prefix (`PYTHONHOME` of the embedded interpreter).
    pub base_prefix: PathBuf,
    /// The environment's prefix: a venv's folder, or `base_prefix`.
    pub prefix: PathBuf,
    /// The shared library to embed; `None` for a statically linked Python.
    pub libpython: Option<PathBuf>,
    /// Folders of the environment's packages.
    pub site_dirs: Vec<PathBuf>,
    /// The standard library's folders.
    pub stdlib: Vec<PathBuf>,
}

/// Prints what [`PythonInstall`] holds, as JSON.
const PROBE: &str = r#"
import json, os, sys, sysconfig
var = sysconfig.get_config_var
lib = None
if var("Py_ENABLE_SHARED"):
    for name in (var("INSTSONAME"), var("LDLIBRARY")):
        for folder in (var("LIBDIR"), os.path.join(sys.base_prefix, "lib")):
            if name and folder and os.path.exists(os.path.join(folder, name)):
                lib = lib or os.path.realpath(os.path.join(folder, name))
paths = sysconfig.get_paths()
print(json.dumps({
    "version": "%d.%d.%d" % sys.version_info[:3],
    "base_prefix": sys.base_prefix,
    "prefix": sys.prefix,
    "libpython": lib,
    "site_dirs": sorted({paths["purelib"], paths["platlib"]}),
    "stdlib": sorted({paths["stdlib"], paths["platstdlib"]}),
}))
"#;

impl PythonInstall {
    /// Ask `python` (an executable path or a name on `PATH`) what it is.
    pub(super) fn probe(python: &Path) -> Result<PythonInstall, NativeError> {
        let output = std::process::Command::new(python)
            .args(["-I", "-c", PROBE])
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|source| NativeError::Python {
                python: python.to_path_buf(),
                message: format!("cannot run it: {source}"),
            })?;
        if !output.status.success() {
            return Err(NativeError::Python {
                python: python.to_path_buf(),
                message: format!(
                    "it failed ({}): {}",
                    output.status,
                    String::from_utf8_lossy(&output.stderr).trim()
                ),
            });
        }
        let install: PythonInstall =
            serde_json::from_slice(&output.stdout).map_err(|e| NativeError::Python {
                python: python.to_path_buf(),
                message: format!("it did not describe itself: {e}"),
            })?;
        let minor: Option<u32> = install
            .version
            .split('.')
            .nth(1)
            .and_then(|m| m.parse().ok());
        if !install.version.starts_with("3.") || minor.is_none_or(|m| m < 10) {
            return Err(NativeError::Python {
                python: python.to_path_buf(),
                message: format!(
                    "it is Python {}; the native tier needs 3.10 or newer",
                    install.version
                ),
            });
        }
        if install.libpython.is_none() {
            return Err(NativeError::Python {
                python: python.to_path_buf(),
                message: "it has no shared libpython (built without --enable-shared); use a \
                          Python that has one (Debian's, pyenv's with PYTHON_CONFIGURE_OPTS=\
                          --enable-shared, uv's)"
                    .into(),
            });
        }
        Ok(install)
    }

    /// Folders the confined child reads: the installation, the environment, the shared
    /// library's folder.
    pub(super) fn folders(&self) -> Vec<PathBuf> {
        let mut folders = vec![self.base_prefix.clone(), self.prefix.clone()];
        folders.extend(self.stdlib.iter().cloned());
        folders.extend(self.site_dirs.iter().cloned());
        if let Some(parent) = self.libpython.as_deref().and_then(Path::parent) {
            folders.push(parent.to_path_buf());
        }
        folders
    }
}

/// The handful of CPython's C API the zygote calls, from a `libpython` loaded at run time
/// (so that the `sandpy` binary links no Python and works with any 3.10+).
pub(crate) struct CApi {
    run_simple_string: unsafe extern "C" fn(*const c_char) -> c_int,
    before_fork: unsafe extern "C" fn(),
    after_fork_parent: unsafe extern "C" fn(),
    after_fork_child: unsafe extern "C" fn(),
}

impl CApi {
    /// The C API of the interpreter already running this process (a zygote started as
    /// a Python process); it must hold the GIL on this thread.
    pub(crate) fn attach() -> Result<CApi, String> {
        Self::bind(libc::RTLD_DEFAULT, Path::new("this process"), false)
    }

    /// Load `libpython` into this process (its symbols global, as extension modules
    /// expect) and start the interpreter, without its signal handlers.
    pub(crate) fn start(libpython: &Path) -> Result<CApi, String> {
        let path = CString::new(libpython.as_os_str().as_encoded_bytes())
            .map_err(|_| "the libpython path has a NUL byte".to_string())?;
        // SAFETY: dlopen with a valid C string; the handle is kept for the process's life.
        let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        if handle.is_null() {
            return Err(format!(
                "cannot load {}: {}",
                libpython.display(),
                dl_error()
            ));
        }
        Self::bind(handle, libpython, true)
    }

    /// Look the functions up in `handle` and, when `initialize`, start the interpreter.
    fn bind(handle: *mut c_void, libpython: &Path, initialize: bool) -> Result<CApi, String> {
        let symbol = |name: &str| -> Result<*mut c_void, String> {
            let c_name = CString::new(name).map_err(|_| name.to_string())?;
            // SAFETY: a symbol lookup in a live handle.
            let found = unsafe { libc::dlsym(handle, c_name.as_ptr()) };
            if found.is_null() {
                return Err(format!("{} has no symbol {name}", libpython.display()));
            }
            Ok(found)
        };
        type Hook = unsafe extern "C" fn();
        type RunString = unsafe extern "C" fn(*const c_char) -> c_int;
        type Initialize = unsafe extern "C" fn(c_int);
        // SAFETY: the signatures are CPython's stable C API (Python 3.7+).
        unsafe {
            let start_interpreter =
                std::mem::transmute::<*mut c_void, Initialize>(symbol("Py_InitializeEx")?);
            let api = CApi {
                run_simple_string: std::mem::transmute::<*mut c_void, RunString>(symbol(
                    "PyRun_SimpleString",
                )?),
                before_fork: std::mem::transmute::<*mut c_void, Hook>(symbol("PyOS_BeforeFork")?),
                after_fork_parent: std::mem::transmute::<*mut c_void, Hook>(symbol(
                    "PyOS_AfterFork_Parent",
                )?),
                after_fork_child: std::mem::transmute::<*mut c_void, Hook>(symbol(
                    "PyOS_AfterFork_Child",
                )?),
            };
            if initialize {
                start_interpreter(0);
            }
            Ok(api)
        }
    }

    /// Run `code` in `__main__`; false when it raised (the traceback went to stderr).
    pub(crate) fn run(&self, code: &str) -> bool {
        let Ok(code) = CString::new(code) else {
            return false;
        };
        // SAFETY: the interpreter is initialised and this thread holds the GIL.
        unsafe { (self.run_simple_string)(code.as_ptr()) == 0 }
    }

    /// Around `fork()`: CPython's locks and at-fork handlers.
    pub(crate) fn before_fork(&self) {
        // SAFETY: called by the thread holding the GIL, right before fork.
        unsafe { (self.before_fork)() }
    }

    /// In the parent after `fork()`.
    pub(crate) fn after_fork_parent(&self) {
        // SAFETY: paired with `before_fork`.
        unsafe { (self.after_fork_parent)() }
    }

    /// In the child that will run Python after `fork()`.
    pub(crate) fn after_fork_child(&self) {
        // SAFETY: paired with `before_fork`, in the forked process.
        unsafe { (self.after_fork_child)() }
    }
}

fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a valid C string owned by libc.
    let message = unsafe { libc::dlerror() };
    if message.is_null() {
        return "unknown error".into();
    }
    // SAFETY: non-null, NUL-terminated.
    unsafe { std::ffi::CStr::from_ptr(message) }
        .to_string_lossy()
        .into_owned()
}
