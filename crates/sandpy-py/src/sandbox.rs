//! `Sandbox`'s methods: the Python face of `sandpy::Sandbox`, with the config's settings,
//! policy, mounts and upstream MCP servers resolved once at construction (the class and
//! what its runs share are in `shared.rs`, which sessions use too).

use crate::convert::{parse_policy, py_to_json, type_name, RunArgs};
use crate::execution::{PyExecution, PyViolation};
use crate::session::PySession;
use crate::shared::{PySandbox, Shared};
use crate::{answer, block_on, config_error, on_loop, runtime, sandbox_error, without_gil};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};
use sandpy::files::Mount;
use sandpy::{Execution, Policy, RunOptions, Status};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;

/// The command that starts the native tier's zygote: the configured Python loading this
/// very extension module by its file (not from `sys.path`, which is that Python's own) and
/// serving as the zygote.
fn native_launcher(py: Python<'_>, python: &std::path::Path) -> PyResult<Vec<std::ffi::OsString>> {
    let extension: String = py
        .import("sandpy._sandpy")?
        .getattr("__file__")?
        .extract()?;
    let literal =
        serde_json::to_string(&extension).map_err(|e| PyValueError::new_err(e.to_string()))?;
    let code = format!(
        "import importlib.util as util\n\
         spec = util.spec_from_file_location('sandpy._sandpy', {literal})\n\
         module = util.module_from_spec(spec)\n\
         spec.loader.exec_module(module)\n\
         module._native_zygote()\n"
    );
    Ok(vec![python.into(), "-I".into(), "-c".into(), code.into()])
}

#[pymethods]
impl PySandbox {
    #[new]
    #[pyo3(signature = (config=None, policy=None, mounts=None, tier=None, allow_hosts=None, *, tool_threads=16, tool_queue=1024, tool_error_messages=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        config: Option<PathBuf>,
        policy: Option<&Bound<'_, PyAny>>,
        mounts: Option<&Bound<'_, PyDict>>,
        tier: Option<&str>,
        allow_hosts: Option<Vec<String>>,
        tool_threads: usize,
        tool_queue: usize,
        tool_error_messages: bool,
    ) -> PyResult<PySandbox> {
        if tool_threads == 0 {
            return Err(PyValueError::new_err("tool_threads must be at least 1"));
        }
        if tool_queue == 0 {
            return Err(PyValueError::new_err("tool_queue must be at least 1"));
        }
        let host =
            crate::tools::HostSettings::new(py, tool_threads, tool_queue, tool_error_messages)?;
        let file = match &config {
            Some(path) => sandpy_mcp::ConfigFile::load(path).map_err(config_error)?,
            None => sandpy_mcp::ConfigFile::default(),
        };
        let mut settings = file.settings.clone();
        match tier {
            None => {}
            Some("wasm") => settings.tier = sandpy::Tier::Wasm,
            Some("native") => settings.tier = sandpy::Tier::Native,
            Some(other) => {
                return Err(PyValueError::new_err(format!(
                    "tier must be \"wasm\" or \"native\", not {other:?}"
                )))
            }
        }
        let extra = crate::convert::allow_rules(allow_hosts)?;
        sandpy::network::Network::allow_also(&mut settings.network, &extra)
            .map_err(crate::convert::network_error)?;
        if settings.tier == sandpy::Tier::Native || settings.native.is_some() {
            let native = settings.native.get_or_insert_with(Default::default);
            native.launcher = native_launcher(py, &native.python_executable())?;
        }
        if let Some(mounts) = mounts {
            for (guest, host) in mounts.iter() {
                let guest: String = guest.extract().map_err(|_| {
                    PyTypeError::new_err(format!(
                        "mounts: guest paths must be str, found {}",
                        type_name(&guest)
                    ))
                })?;
                let host: PathBuf = host.extract().map_err(|_| {
                    PyTypeError::new_err(format!(
                        "mounts[{guest:?}]: the host folder must be a str or path, found {}",
                        type_name(&host)
                    ))
                })?;
                settings.mounts.push(Mount { host, guest });
            }
            Mount::validate(&settings.mounts)
                .map_err(|e| PyValueError::new_err(format!("mounts: {e}")))?;
        }
        let picked = policy
            .filter(|p| !p.is_none())
            .map(|p| parse_policy(&settings, p))
            .transpose()?;
        let mut resolved = settings.resolve(None).map_err(|e| {
            config_error(sandpy::settings::ConfigError::Invalid {
                path: config.clone().unwrap_or_default(),
                key: "sandpy.default_policy".into(),
                message: e.to_string(),
            })
        })?;
        if picked.is_some() {
            resolved.policy = picked;
        }
        let audit = match &resolved.settings.audit_log {
            Some(path) => Some(
                sandpy_mcp::AuditLog::open(path, resolved.settings.audit_arguments).map_err(
                    |e| {
                        sandbox_error(format!(
                            "cannot open the audit log `{}`: {e}",
                            path.display()
                        ))
                    },
                )?,
            ),
            None => None,
        };
        let sandbox_config = resolved.sandbox_config(crate::library_config());
        let rt = runtime()?;
        let (sandbox, hub) = without_gil(py, move || {
            let sandbox = sandpy::Sandbox::new(sandbox_config)?;
            let hub = if file.servers.is_empty() {
                None
            } else {
                Some(rt.block_on(sandpy_mcp::Hub::start(&file)))
            };
            Ok::<_, sandpy::Error>((sandbox, hub))
        })?
        .map_err(crate::library_error)?;
        Ok(PySandbox {
            shared: Arc::new(Shared::new(sandbox, resolved, hub, audit, host)),
        })
    }

    /// Run `code` as a program (`__main__`) in a fresh instance and return its
    /// `Execution`. Limits, stdin, input files (`/tmp/<path>`), the tool allowlist and
    /// the policy can be set for this run. Never raises for what the code does.
    #[pyo3(
        signature = (code, *, timeout_ms=None, memory_mb=None, stdin=None, files=None, tools=None, allowed_tools=None, policy=None, on_output=None, approve=None, require_approval=None, allow_hosts=None, _on_loop=false),
        text_signature = "(self, code, *, timeout_ms=None, memory_mb=None, stdin=None, files=None, tools=None, allowed_tools=None, policy=None, on_output=None, approve=None, require_approval=None, allow_hosts=None)"
    )]
    #[allow(clippy::too_many_arguments)]
    fn run<'py>(
        &self,
        py: Python<'py>,
        code: String,
        timeout_ms: Option<&Bound<'_, PyAny>>,
        memory_mb: Option<&Bound<'_, PyAny>>,
        stdin: Option<&Bound<'_, PyAny>>,
        files: Option<&Bound<'_, PyAny>>,
        tools: Option<&Bound<'_, PyAny>>,
        allowed_tools: Option<Vec<String>>,
        policy: Option<&Bound<'_, PyAny>>,
        on_output: Option<&Bound<'_, PyAny>>,
        approve: Option<&Bound<'_, PyAny>>,
        require_approval: Option<Vec<String>>,
        allow_hosts: Option<Vec<String>>,
        _on_loop: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let args = RunArgs::parse(
            &self.shared.resolved.settings,
            timeout_ms,
            memory_mb,
            stdin,
            files,
            allowed_tools,
            policy,
        )?;
        let (mut options, stop) = self.shared.run_options(
            py,
            args,
            tools,
            on_output,
            approve,
            require_approval,
            _on_loop,
        )?;
        crate::convert::allow_hosts(&mut options, allow_hosts)?;
        let shared = self.shared.clone();
        let run = async move { PyExecution::from(shared.sandbox.run_with(&code, &options).await) };
        answer(py, run, stop, _on_loop)
    }

    /// `run` as a coroutine on the running asyncio loop: the run executes on sandpy's own
    /// threads, and cancelling the awaiting task stops it.
    #[pyo3(
        signature = (code, **kwargs),
        text_signature = "(self, code, *, timeout_ms=None, memory_mb=None, stdin=None, files=None, tools=None, allowed_tools=None, policy=None, on_output=None, approve=None, require_approval=None, allow_hosts=None)"
    )]
    fn run_async<'py>(
        slf: &Bound<'py, Self>,
        code: String,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let args = PyTuple::new(slf.py(), [code])?;
        on_loop(slf.as_any(), "run", args, kwargs)
    }

    /// Load `source` as a module, call its function `name` with `args` (positional) or
    /// `kwargs` (keywords), and return an `Execution` whose `return_value` is the result.
    /// Arguments and result cross as JSON.
    #[pyo3(
        signature = (source, name, args=None, kwargs=None, *, timeout_ms=None, memory_mb=None, stdin=None, files=None, tools=None, allowed_tools=None, policy=None, _on_loop=false),
        text_signature = "(self, source, name, args=None, kwargs=None, *, timeout_ms=None, memory_mb=None, stdin=None, files=None, tools=None, allowed_tools=None, policy=None)"
    )]
    #[allow(clippy::too_many_arguments)]
    fn call_function<'py>(
        &self,
        py: Python<'py>,
        source: String,
        name: String,
        args: Option<&Bound<'_, PyAny>>,
        kwargs: Option<&Bound<'_, PyAny>>,
        timeout_ms: Option<&Bound<'_, PyAny>>,
        memory_mb: Option<&Bound<'_, PyAny>>,
        stdin: Option<&Bound<'_, PyAny>>,
        files: Option<&Bound<'_, PyAny>>,
        tools: Option<&Bound<'_, PyAny>>,
        allowed_tools: Option<Vec<String>>,
        policy: Option<&Bound<'_, PyAny>>,
        _on_loop: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let arguments = call_arguments(args, kwargs)?;
        let run_args = RunArgs::parse(
            &self.shared.resolved.settings,
            timeout_ms,
            memory_mb,
            stdin,
            files,
            allowed_tools,
            policy,
        )?;
        let (options, stop) = self.shared.call_options(py, run_args, tools, _on_loop)?;
        let shared = self.shared.clone();
        let run = async move {
            let execution = shared
                .sandbox
                .call_function(&source, &name, &arguments, &options)
                .await;
            PyExecution::from(execution)
        };
        answer(py, run, stop, _on_loop)
    }

    /// `call_function` once per item of `arguments` (each a list: positional, or a dict:
    /// keywords), each call in a fresh instance, `jobs` at a time (default: the number of
    /// cores), with the GIL released for the whole batch. The Executions are in the order
    /// of `arguments`; an item that is not usable arguments is that item's `invalid_input`,
    /// as a bad line is for `sandpy call --args-file`.
    #[pyo3(
        signature = (source, name, arguments, *, jobs=None, timeout_ms=None, memory_mb=None, stdin=None, files=None, tools=None, allowed_tools=None, policy=None, _on_loop=false),
        text_signature = "(self, source, name, arguments, *, jobs=None, timeout_ms=None, memory_mb=None, stdin=None, files=None, tools=None, allowed_tools=None, policy=None)"
    )]
    #[allow(clippy::too_many_arguments)]
    fn call_batch<'py>(
        &self,
        py: Python<'py>,
        source: String,
        name: String,
        arguments: &Bound<'_, PyAny>,
        jobs: Option<usize>,
        timeout_ms: Option<&Bound<'_, PyAny>>,
        memory_mb: Option<&Bound<'_, PyAny>>,
        stdin: Option<&Bound<'_, PyAny>>,
        files: Option<&Bound<'_, PyAny>>,
        tools: Option<&Bound<'_, PyAny>>,
        allowed_tools: Option<Vec<String>>,
        policy: Option<&Bound<'_, PyAny>>,
        _on_loop: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (inputs, jobs) = batch_inputs(arguments, jobs)?;
        let run_args = RunArgs::parse(
            &self.shared.resolved.settings,
            timeout_ms,
            memory_mb,
            stdin,
            files,
            allowed_tools,
            policy,
        )?;
        let (options, stop) = self.shared.call_options(py, run_args, tools, _on_loop)?;
        let batch = run_batch(
            self.shared.sandbox.clone(),
            source,
            name,
            inputs,
            Arc::new(options),
            jobs,
        );
        let run = async move {
            let executions = batch.await;
            executions
                .into_iter()
                .map(PyExecution::from)
                .collect::<Vec<_>>()
        };
        answer(py, run, stop, _on_loop)
    }

    /// `call_function` as a coroutine on the running asyncio loop (see `run_async`).
    #[pyo3(
        signature = (source, name, *args, **kwargs),
        text_signature = "(self, source, name, args=None, kwargs=None, *, timeout_ms=None, memory_mb=None, stdin=None, files=None, tools=None, allowed_tools=None, policy=None)"
    )]
    fn call_function_async<'py>(
        slf: &Bound<'py, Self>,
        source: String,
        name: String,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let args = (source, name)
            .into_pyobject(slf.py())?
            .add(args)?
            .cast_into::<PyTuple>()?;
        on_loop(slf.as_any(), "call_function", args, kwargs)
    }

    /// `call_batch` as a coroutine on the running asyncio loop (see `run_async`):
    /// cancelling the awaiting task stops the calls not yet finished.
    #[pyo3(
        signature = (source, name, *args, **kwargs),
        text_signature = "(self, source, name, arguments, *, jobs=None, timeout_ms=None, memory_mb=None, stdin=None, files=None, tools=None, allowed_tools=None, policy=None)"
    )]
    fn call_batch_async<'py>(
        slf: &Bound<'py, Self>,
        source: String,
        name: String,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let args = (source, name)
            .into_pyobject(slf.py())?
            .add(args)?
            .cast_into::<PyTuple>()?;
        on_loop(slf.as_any(), "call_batch", args, kwargs)
    }

    /// Check `code` against a policy without running it: every violation with its line
    /// and column (a syntax error is one). `policy` defaults to the sandbox's, else
    /// `"default"`.
    #[pyo3(signature = (code, policy=None))]
    fn check(
        &self,
        py: Python<'_>,
        code: String,
        policy: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<PyViolation>> {
        let policy = match policy.filter(|p| !p.is_none()) {
            Some(p) => parse_policy(&self.shared.resolved.settings, p)?,
            None => self
                .shared
                .resolved
                .policy
                .clone()
                .unwrap_or_else(Policy::standard),
        };
        let shared = self.shared.clone();
        let violations = block_on(
            py,
            async move { shared.sandbox.validate(&code, &policy).await },
        )?
        .map_err(|e| sandbox_error(format!("the policy check failed: {e}")))?;
        Ok(violations
            .into_iter()
            .map(|inner| PyViolation { inner })
            .collect())
    }

    /// A new `Session`: one interpreter that keeps its state between runs (its limits are
    /// the config's `sandpy.sessions`).
    fn session(&self) -> PySession {
        let session = sandpy::sessions::Session::new(
            &self.shared.sandbox,
            &self.shared.resolved.settings.sessions,
        );
        PySession::new(self.shared.clone(), session)
    }

    /// The compiled runtime's cache file (shared with the `sandpy` CLI).
    #[getter]
    fn cache_file(&self) -> PyResult<PathBuf> {
        crate::cache_file(&self.shared.sandbox)
    }

    /// The name of the policy every run gets (None when there is none).
    #[getter]
    fn policy(&self) -> Option<String> {
        self.shared.resolved.policy.as_ref().map(|p| p.name.clone())
    }

    fn __repr__(&self) -> String {
        match &self.shared.resolved.settings.source {
            Some(path) => format!("Sandbox(config={:?})", path.display().to_string()),
            None => "Sandbox()".into(),
        }
    }
}

/// `call_batch`'s arguments as JSON (or why each is not usable) and its job count.
fn batch_inputs(
    arguments: &Bound<'_, PyAny>,
    jobs: Option<usize>,
) -> PyResult<(Vec<Result<Value, String>>, usize)> {
    if arguments.is_instance_of::<PyString>() || arguments.is_instance_of::<PyDict>() {
        return Err(PyTypeError::new_err(format!(
            "arguments must be an iterable of argument lists or dicts (one per call), not {}",
            type_name(arguments)
        )));
    }
    let mut inputs = Vec::new();
    for (i, item) in arguments.try_iter()?.enumerate() {
        inputs.push(batch_item(&item?, i));
    }
    let jobs = match jobs {
        Some(0) => return Err(PyValueError::new_err("jobs must be at least 1")),
        Some(n) => n,
        None => std::thread::available_parallelism().map_or(2, |n| n.get()),
    };
    Ok((inputs, jobs))
}

/// The calls of a batch, `jobs` at a time, each a task on sandpy's runtime, the source
/// checked and compiled once when there are two calls or more
/// ([`sandpy::Sandbox::compile_module`]); the executions in the order of `inputs` (an
/// unusable input is its `invalid_input`).
/// Dropping the future (a cancelled `call_batch_async`) stops the calls still running.
async fn run_batch(
    sandbox: sandpy::Sandbox,
    source: String,
    name: String,
    inputs: Vec<Result<Value, String>>,
    options: Arc<RunOptions>,
    jobs: usize,
) -> Vec<Execution> {
    let name = Arc::<str>::from(name);
    let module = if inputs.iter().filter(|input| input.is_ok()).count() > 1 {
        sandbox.compile_module(&source, &options).await
    } else {
        sandpy::CompiledModule::uncompiled(&source)
    };
    let module = Arc::new(module);
    let slots = Arc::new(tokio::sync::Semaphore::new(jobs));
    let mut calls = Calls::default();
    for input in inputs {
        let arguments = match input {
            Ok(arguments) => arguments,
            Err(why) => {
                calls.done(Execution::refused(Status::InvalidInput, why));
                continue;
            }
        };
        // The semaphore is never closed; were it, the call is answered, not lost.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            calls.done(Execution::refused(
                Status::InternalError,
                "the batch's call slots were closed".into(),
            ));
            continue;
        };
        let (sandbox, module, name, options) = (
            sandbox.clone(),
            module.clone(),
            name.clone(),
            options.clone(),
        );
        calls.spawn(async move {
            let execution = sandbox
                .call_compiled(&module, &name, &arguments, &options)
                .await;
            drop(slot);
            execution
        });
    }
    calls.collect().await
}

/// A batch's calls in input order: answers known at once and tasks on sandpy's runtime,
/// which are aborted if the batch is dropped before they end.
#[derive(Default)]
struct Calls {
    answers: Vec<Option<Execution>>,
    tasks: tokio::task::JoinSet<(usize, Execution)>,
}

impl Calls {
    /// The next input's answer, known without a run.
    fn done(&mut self, execution: Execution) {
        self.answers.push(Some(execution));
    }

    /// The next input's run.
    fn spawn(&mut self, run: impl std::future::Future<Output = Execution> + Send + 'static) {
        let index = self.answers.len();
        self.answers.push(None);
        self.tasks.spawn(async move { (index, run.await) });
    }

    /// Every answer, in input order (a task that ended without one is `internal_error`).
    async fn collect(mut self) -> Vec<Execution> {
        while let Some(joined) = self.tasks.join_next().await {
            if let Ok((index, execution)) = joined {
                self.answers[index] = Some(execution);
            }
        }
        self.answers
            .into_iter()
            .map(|answer| {
                answer.unwrap_or_else(|| {
                    Execution::refused(
                        Status::InternalError,
                        "the call ended without an answer".into(),
                    )
                })
            })
            .collect()
    }
}

/// One item of `call_batch`'s arguments as JSON, or why it is not usable (that call's
/// `invalid_input`).
fn batch_item(item: &Bound<'_, PyAny>, index: usize) -> Result<Value, String> {
    if !(item.is_instance_of::<PyList>()
        || item.is_instance_of::<PyTuple>()
        || item.is_instance_of::<PyDict>())
    {
        return Err(format!(
            "arguments[{index}] must be a list (positional) or dict (keywords), not {}",
            type_name(item)
        ));
    }
    py_to_json(item, &format!("arguments[{index}]")).map_err(|e| e.to_string())
}

/// The JSON arguments of a call: a list for positional arguments, an object for keywords.
fn call_arguments(
    args: Option<&Bound<'_, PyAny>>,
    kwargs: Option<&Bound<'_, PyAny>>,
) -> PyResult<Value> {
    let args = args.filter(|a| !a.is_none());
    let kwargs = kwargs.filter(|k| !k.is_none());
    match (args, kwargs) {
        (Some(_), Some(_)) => Err(PyValueError::new_err(
            "give args or kwargs, not both (a call takes positional or keyword arguments)",
        )),
        (Some(args), None) => {
            if !(args.is_instance_of::<PyList>() || args.is_instance_of::<PyTuple>()) {
                return Err(PyTypeError::new_err(format!(
                    "args must be a list or tuple, not {}",
                    type_name(args)
                )));
            }
            py_to_json(args, "args")
        }
        (None, Some(kwargs)) => {
            if !kwargs.is_instance_of::<PyDict>() {
                return Err(PyTypeError::new_err(format!(
                    "kwargs must be a dict, not {}",
                    type_name(kwargs)
                )));
            }
            py_to_json(kwargs, "kwargs")
        }
        (None, None) => Ok(Value::Array(Vec::new())),
    }
}
