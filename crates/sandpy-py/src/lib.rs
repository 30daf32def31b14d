//! The extension module `sandpy._sandpy` of the `sandpy` Python package: a thin layer
//! over the `sandpy` library (and `sandpy-mcp` for a config's upstream servers).
//!
//! - `Sandbox` ([`sandbox`]) resolves a config once and runs code through the library's
//!   one run path; `Execution` ([`execution`]) is the library's `Execution` read from Python.
//! - Threads: one tokio runtime per process ([`runtime`]), shared by every Sandbox. A
//!   synchronous run releases the GIL and drives its run on the calling thread
//!   (`block_on`), so runs from many Python threads run in parallel; `run_async` spawns
//!   the run on the runtime's workers and hands asyncio a future (pyo3-async-runtimes).
//! - Errors: the sandbox's own failures raise `SandboxError` (and its subclasses), bad
//!   arguments `ValueError`/`TypeError`; what the code does is in the `Execution`.
//! - The runtime component is inside this library (the `sandpy-guest` crate embeds it,
//!   given to the library in [`library_config`]), so the wheel carries it; the first Sandbox compiles it into the same `.cwasm` cache as the
//!   CLI (`warmup()` does it ahead of time).

use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;
use std::sync::OnceLock;

mod approve;
mod convert;
mod execution;
mod invocation;
mod sandbox;
mod session;
mod shared;
mod tools;

pyo3::create_exception!(
    sandpy,
    SandboxError,
    PyException,
    "The sandbox itself could not be set up or failed (never raised for what the code in it does)."
);
pyo3::create_exception!(
    sandpy,
    ConfigError,
    SandboxError,
    "The config file cannot be used: it names the file, the key and what is wrong."
);

pyo3::create_exception!(
    sandpy,
    SessionError,
    SandboxError,
    "A session could not be saved, restored or forked (e.g. its journal passed its cap, or a replayed run ended differently)."
);

pyo3::create_exception!(
    sandpy,
    ToolError,
    PyException,
    "Raised by a host tool to fail with a message the sandboxed code may read: its text becomes the guest's `ToolError`. Any other exception passes only its type and the tool's name (unless the Sandbox was made with `tool_error_messages=True`)."
);

/// A `SandboxError` with `message`.
pub(crate) fn sandbox_error(message: String) -> PyErr {
    SandboxError::new_err(message)
}

/// A library setup error as `SandboxError`, its causes on one line.
pub(crate) fn library_error(error: sandpy::Error) -> PyErr {
    SandboxError::new_err(format!("{:#}", anyhow::Error::from(error)))
}

/// The compiled runtime's cache file, or why the runtime could not be loaded as
/// `SandboxError`, its causes on one line.
pub(crate) fn cache_file(sandbox: &sandpy::Sandbox) -> PyResult<std::path::PathBuf> {
    sandbox
        .cache_file()
        .map(std::path::Path::to_path_buf)
        .map_err(|e| {
            let mut message = e.to_string();
            let mut cause = std::error::Error::source(e);
            while let Some(c) = cause {
                message = format!("{message}: {c}");
                cause = c.source();
            }
            SandboxError::new_err(message)
        })
}

/// A config error as `ConfigError`, its causes on one line.
pub(crate) fn config_error(error: sandpy::settings::ConfigError) -> PyErr {
    ConfigError::new_err(format!("{:#}", anyhow::Error::from(error)))
}

static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();

/// The process's tokio runtime (made on first use; also the one `run_async` uses).
pub(crate) fn runtime() -> PyResult<&'static tokio::runtime::Runtime> {
    if let Some(rt) = RUNTIME.get() {
        return Ok(rt);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("sandpy")
        .build()
        .map_err(|e| sandbox_error(format!("cannot start sandpy's tokio runtime: {e}")))?;
    // Another thread may have won the race: its runtime is the one.
    let rt = RUNTIME.get_or_init(|| rt);
    let _ = pyo3_async_runtimes::tokio::init_with_runtime(rt);
    Ok(rt)
}

/// Run `f` with the GIL released, refusing to block a thread of sandpy's own runtime
/// (a synchronous run called from inside a run would deadlock it).
pub(crate) fn without_gil<T: Send, F: FnOnce() -> T + Send>(py: Python<'_>, f: F) -> PyResult<T> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(sandbox_error(
            "a synchronous sandpy call cannot run on one of sandpy's own threads; use the async form"
                .into(),
        ));
    }
    Ok(py.detach(f))
}

/// Run `future` to its end on sandpy's runtime, with the GIL released (see
/// [`without_gil`]): the one way a synchronous call waits for the library.
pub(crate) fn block_on<F>(py: Python<'_>, future: F) -> PyResult<F::Output>
where
    F: std::future::Future + Send,
    F::Output: Send,
{
    let rt = runtime()?;
    without_gil(py, move || rt.block_on(future))
}

/// A run's `future` to its end on sandpy's runtime, with the GIL released (see
/// [`without_gil`]), checking for signals every 50 ms: a Ctrl-C (or any signal handler
/// that raises) cancels the run through `stop`, waits for it to end (a session's run
/// then poisons it, as a timeout does) and raises. A `KeyboardInterrupt` or `SystemExit`
/// a host tool raised is raised here too.
pub(crate) fn wait_run<F>(py: Python<'_>, future: F, stop: &tools::RunStop) -> PyResult<F::Output>
where
    F: std::future::Future + Send,
    F::Output: Send,
{
    let rt = runtime()?;
    let token = stop.token.clone();
    let waited = without_gil(py, move || {
        rt.block_on(async move {
            tokio::pin!(future);
            let mut tick = tokio::time::interval(std::time::Duration::from_millis(50));
            loop {
                tokio::select! {
                    out = &mut future => return Ok(out),
                    _ = tick.tick() => {
                        if let Err(signal) = Python::attach(|py| py.check_signals()) {
                            token.cancel();
                            let _ = (&mut future).await;
                            return Err(signal);
                        }
                    }
                }
            }
        })
    })?;
    stop.outcome(waited?)
}

/// `future` to its end on sandpy's runtime with the GIL released (see [`without_gil`]),
/// checking for signals every 50 ms: a Ctrl-C drops the future (it stops waiting: for a
/// lock, say, which nothing then holds) and raises. For waits that start no run; a run's
/// is [`wait_run`].
pub(crate) fn wait<F>(py: Python<'_>, future: F) -> PyResult<F::Output>
where
    F: std::future::Future + Send,
    F::Output: Send,
{
    let rt = runtime()?;
    without_gil(py, move || {
        rt.block_on(async move {
            tokio::pin!(future);
            let mut tick = tokio::time::interval(std::time::Duration::from_millis(50));
            loop {
                tokio::select! {
                    out = &mut future => return Ok(out),
                    _ = tick.tick() => Python::attach(|py| py.check_signals())?,
                }
            }
        })
    })?
}

/// A run's `future` as a coroutine on the running asyncio loop (a coroutine, so that
/// `asyncio.create_task` takes it): the run is a task on sandpy's runtime; cancelling the
/// awaiting task cancels the run through `stop` (it ends `cancelled`, a session's run
/// poisoning it as a timeout does, its host calls cancelled). A `KeyboardInterrupt` or
/// `SystemExit` a host tool raised is raised by the await.
pub(crate) fn run_coroutine<'py, F, T>(
    py: Python<'py>,
    future: F,
    stop: std::sync::Arc<tools::RunStop>,
) -> PyResult<Bound<'py, PyAny>>
where
    F: std::future::Future<Output = T> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    let rt = runtime()?;
    let cancel = stop.token.clone().drop_guard();
    let task = rt.spawn(future);
    let awaitable = pyo3_async_runtimes::tokio::future_into_py(py, async move {
        let out = task.await;
        let _ = cancel.disarm();
        let out = out.map_err(|e| sandbox_error(format!("the run's task failed: {e}")))?;
        stop.outcome(out)
    })?;
    py.import("sandpy._host")?
        .getattr("awaited")?
        .call1((awaitable,))
}

/// What a run method answers: the result, waited for here with the GIL released
/// ([`wait_run`]), or with `on_loop` a coroutine on the caller's running asyncio loop
/// ([`run_coroutine`]). The sync method does both, so that its `_async` twin is a call of
/// it ([`on_loop`]) instead of a second copy of its arguments.
pub(crate) fn answer<'py, F, T>(
    py: Python<'py>,
    future: F,
    stop: std::sync::Arc<tools::RunStop>,
    on_loop: bool,
) -> PyResult<Bound<'py, PyAny>>
where
    F: std::future::Future<Output = T> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    if on_loop {
        return run_coroutine(py, future, stop);
    }
    wait_run(py, future, &stop)?.into_bound_py_any(py)
}

/// An `_async` method: its sync twin `name` called with the same arguments and
/// `_on_loop=True` (see [`answer`]), so that Python checks them against one signature.
pub(crate) fn on_loop<'py>(
    slf: &Bound<'py, PyAny>,
    name: &str,
    args: Bound<'py, pyo3::types::PyTuple>,
    kwargs: Option<&Bound<'py, pyo3::types::PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    let kwargs = match kwargs {
        Some(kwargs) => kwargs.copy()?,
        None => pyo3::types::PyDict::new(slf.py()),
    };
    kwargs.set_item("_on_loop", true)?;
    slf.call_method(name, args, Some(&kwargs))
}

/// The library's settings for this process: the built-in guest, progress messages on
/// Python's stderr.
pub(crate) fn library_config() -> sandpy::Config {
    sandpy::Config {
        guest: Some(sandpy_guest::GUEST),
        progress: Some(std::sync::Arc::new(|message: &str| {
            Python::attach(|py| {
                if let Ok(stderr) = py.import("sys").and_then(|sys| sys.getattr("stderr")) {
                    let _ = stderr.call_method1("write", (format!("{message}\n"),));
                    let _ = stderr.call_method0("flush");
                }
            })
        })),
        ..sandpy::Config::default()
    }
}

/// Compile the Python runtime into the cache now (it takes a while once per machine and
/// sandpy version), printing a progress line on stderr; returns the cache file's path.
#[pyfunction]
fn warmup(py: Python<'_>) -> PyResult<std::path::PathBuf> {
    let started = std::time::Instant::now();
    let sandbox =
        without_gil(py, || sandpy::Sandbox::new(library_config()))?.map_err(library_error)?;
    let path = cache_file(&sandbox)?;
    let line = format!(
        "sandpy: runtime ready in {:.1} s (cache: `{}`)\n",
        started.elapsed().as_secs_f64(),
        path.display()
    );
    let stderr = py.import("sys")?.getattr("stderr")?;
    stderr.call_method1("write", (line,))?;
    Ok(path)
}

/// With `SANDPY_LOG` set (e.g. `debug`, `sandpy=trace`), the library's log goes to stderr,
/// filtered as the CLI filters it; with an OTLP endpoint in the environment
/// (`OTEL_EXPORTER_OTLP_ENDPOINT`), runs are traced as the CLI traces them (exported at
/// exit too). With neither, nothing is installed (the application may have its own
/// tracing subscriber).
fn init_log(py: Python<'_>) -> PyResult<()> {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let log = tracing_subscriber::EnvFilter::try_from_env("SANDPY_LOG")
        .ok()
        .map(|filter| {
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(filter)
        });
    let traces = match sandpy_mcp::Telemetry::from_env() {
        Ok(Some((telemetry, layer))) => {
            let _ = TELEMETRY.set(std::sync::Mutex::new(Some(telemetry)));
            let flush = wrap_pyfunction!(flush_traces, py)?;
            py.import("atexit")?.call_method1("register", (flush,))?;
            Some(layer)
        }
        Ok(None) => None,
        Err(e) => {
            let warning = format!("sandpy: traces are off: {e}");
            let warnings = py.import("warnings")?;
            warnings.call_method1("warn", (warning,))?;
            None
        }
    };
    if log.is_some() || traces.is_some() {
        let _ = tracing_subscriber::registry()
            .with(log)
            .with(traces)
            .try_init();
    }
    Ok(())
}

/// The trace exporter, when traces are on; taken at exit.
static TELEMETRY: OnceLock<std::sync::Mutex<Option<sandpy_mcp::Telemetry>>> = OnceLock::new();

/// Send the spans still queued (registered with `atexit` when traces are on).
#[pyfunction]
fn flush_traces(py: Python<'_>) {
    let telemetry = TELEMETRY
        .get()
        .and_then(|slot| slot.lock().ok().and_then(|mut t| t.take()));
    if let Some(telemetry) = telemetry {
        py.detach(|| telemetry.shutdown());
    }
}

#[pymodule]
fn _sandpy(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    init_log(py)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("SandboxError", py.get_type::<SandboxError>())?;
    m.add("ConfigError", py.get_type::<ConfigError>())?;
    m.add("SessionError", py.get_type::<SessionError>())?;
    m.add("ToolError", py.get_type::<ToolError>())?;
    m.add_class::<shared::PySandbox>()?;
    m.add_class::<session::PySession>()?;
    m.add_class::<execution::PyExecution>()?;
    m.add_class::<execution::PyErrorInfo>()?;
    m.add_class::<execution::PyViolation>()?;
    m.add_class::<execution::PyOutputFile>()?;
    m.add_function(wrap_pyfunction!(warmup, m)?)?;
    m.add_function(wrap_pyfunction!(_native_zygote, m)?)?;
    Ok(())
}

/// The native tier's zygote, in the configured Python started by a `Sandbox` whose
/// tier is native (see `sandbox::native_launcher`); never returns. Not for users.
#[pyfunction]
fn _native_zygote() -> PyResult<()> {
    sandpy::native::serve_as_zygote()
}
