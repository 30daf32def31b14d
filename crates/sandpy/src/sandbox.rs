//! [`Sandbox`]: runs each task in a fresh instance under the run's limits, and decides
//! the run's [`Status`].

use crate::admission::Admission;
use crate::bindings::{
    FunctionCall, GuestOptions, GuestPolicy, GuestViolation, Outcome, PythonError, Task, Value,
};
use crate::execution::{ErrorInfo, Execution, Status};
use crate::files::{InputFile, Mount, RunFolders, Workspace};
use crate::host::{HostState, MemoryLimiter, ToolAccess};
use crate::output::Capture;
use crate::runtime::Runtime;
use crate::tools::{Allowlist, ToolHost};
use crate::{Config, Error, Limits, Policy, Violation};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::OwnedSemaphorePermit;
use wasmtime::component::ResourceTable;
use wasmtime::{Store, Trap, UpdateDeadline};
use wasmtime_wasi::p2::pipe::MemoryInputPipe;
use wasmtime_wasi::{I32Exit, WasiCtxBuilder};

/// Runs Python programs, each in a brand-new WebAssembly instance.
///
/// Creating a `Sandbox` compiles (or loads from the cache) the Python runtime, which can
/// take seconds the first time; each run then costs about a millisecond. A `Sandbox` is
/// cheap to clone and safe to share across threads and tasks: clones share one engine and
/// one admission queue (runs beyond [`Config::max_concurrent_runs`] wait in line, and end
/// `busy` when the line is full).
#[derive(Clone)]
pub struct Sandbox {
    runtime: Arc<Runtime>,
    /// The runtime sessions use, loaded on the first session (see [`Sandbox::session_runtime`]).
    session_runtime: Arc<std::sync::OnceLock<Result<Runtime, String>>>,
    config: Arc<Config>,
    admission: Arc<Admission>,
    folders: Arc<RunFolders>,
}

/// Everything about one run besides the code. Defaults: [`Limits::default`], empty stdin,
/// no tools, every tool of the tool host allowed, no policy, tracebacks naming `<sandbox>`,
/// no input files, no mounts.
#[derive(Clone, Default)]
pub struct RunOptions {
    /// The run's limits.
    pub limits: Limits,
    /// Bytes the program reads from stdin; empty when `None`.
    pub stdin: Option<Vec<u8>>,
    /// Where tool calls go; `None` means the program has no tools.
    pub tools: Option<Arc<dyn ToolHost>>,
    /// Exact tool names or globs the program may use; `None` allows every tool.
    pub allowed_tools: Option<Vec<String>>,
    /// File name shown in tracebacks.
    pub filename: Option<String>,
    /// Checked before the code runs and enforced while it runs. Its limit defaults are not
    /// applied here (see [`Policy::limits`]); its `allowed_tools` narrow `allowed_tools`.
    pub policy: Option<Policy>,
    /// Files written into the scratch folder (`/tmp`) before the code runs.
    pub files: Vec<InputFile>,
    /// Host folders the code may read. A session keeps the mounts of its first run.
    pub mounts: Vec<Mount>,
}

impl std::fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions")
            .field("limits", &self.limits)
            .field("stdin_bytes", &self.stdin.as_ref().map(Vec::len))
            .field("tools", &self.tools.is_some())
            .field("allowed_tools", &self.allowed_tools)
            .field("filename", &self.filename)
            .field("policy", &self.policy.as_ref().map(|p| &p.name))
            .field(
                "files",
                &self.files.iter().map(|f| &f.path).collect::<Vec<_>>(),
            )
            .field("mounts", &self.mounts)
            .finish()
    }
}

impl RunOptions {
    /// Options with these limits and every other default.
    pub fn with_limits(limits: Limits) -> Self {
        RunOptions {
            limits,
            ..RunOptions::default()
        }
    }
}

impl Sandbox {
    /// Load the runtime: from the on-disk cache, or compiled now and cached.
    pub fn new(config: Config) -> Result<Sandbox, Error> {
        let admission = Admission::new(config.concurrency(), config.max_queued_runs);
        crate::files::sweep_stale(&config.resolved_scratch_dir());
        Ok(Sandbox {
            runtime: Arc::new(Runtime::load(&config)?),
            session_runtime: Arc::new(std::sync::OnceLock::new()),
            admission: Arc::new(admission),
            folders: Arc::new(RunFolders::new(
                config.resolved_scratch_dir(),
                config.concurrency(),
            )),
            config: Arc::new(config),
        })
    }

    /// The compiled runtime's cache file (to copy into images, or to check it exists).
    pub fn cache_file(&self) -> &std::path::Path {
        &self.runtime.cache_file
    }

    /// Run `code` as a program (`__main__`) with `limits` and no tools.
    pub async fn run(&self, code: &str, limits: &Limits) -> Execution {
        self.run_with(code, &RunOptions::with_limits(limits.clone()))
            .await
    }

    /// Run `code` as a program with every option.
    pub async fn run_with(&self, code: &str, options: &RunOptions) -> Execution {
        if let Some(refused) = check_code(code, &options.limits) {
            return refused;
        }
        self.execute(Task::Run(code.to_string()), options).await
    }

    /// Load `code` as a module, call `function` with JSON `arguments` (a list for
    /// positional, an object for keyword arguments), and return its JSON result.
    pub async fn call_function(
        &self,
        code: &str,
        function: &str,
        arguments: &serde_json::Value,
        options: &RunOptions,
    ) -> Execution {
        if let Some(refused) = check_code(code, &options.limits) {
            return refused;
        }
        if !(arguments.is_array() || arguments.is_object()) {
            return Execution::refused(
                Status::InvalidInput,
                "InvalidInput",
                "arguments must be a JSON list (positional) or object (keywords)".into(),
            );
        }
        let task = Task::Call(FunctionCall {
            code: code.to_string(),
            function: function.to_string(),
            arguments: arguments.to_string(),
        });
        self.execute(task, options).await
    }

    /// Which stdlib modules the guest has, and why the others are absent: an `ok`
    /// execution whose `return_value` is `{"available": [...], "absent": {name: reason}}`.
    pub async fn module_report(&self) -> Execution {
        self.execute(Task::ListModules, &RunOptions::default())
            .await
    }

    /// Check `code` against `policy` without running it: every violation with its line
    /// and column (a syntax error is one), or why the check itself failed.
    pub async fn validate(&self, code: &str, policy: &Policy) -> Result<Vec<Violation>, ErrorInfo> {
        let options = RunOptions {
            policy: Some(policy.clone()),
            ..RunOptions::default()
        };
        let execution = self.execute(Task::Check(code.to_string()), &options).await;
        match execution.status {
            Status::Ok | Status::PolicyViolation => Ok(execution.violations),
            _ => Err(execution.error.unwrap_or_else(|| ErrorInfo {
                kind: "InternalError".into(),
                message: format!("the check ended with status {}", execution.status),
                traceback: None,
            })),
        }
    }

    async fn execute(&self, task: Task, options: &RunOptions) -> Execution {
        let _slot = match self.admit(options).await {
            Ok(slot) => slot,
            Err(refused) => return refused,
        };
        let started = Instant::now();
        let limits = &options.limits;
        let tools = match tool_access(options) {
            Ok(tools) => tools,
            Err(refused) => return refused,
        };
        let workspace = match self.workspace(options) {
            Ok(workspace) => workspace,
            Err(refused) => return refused,
        };
        let capture = Capture::new(limits.output_bytes);
        let mut store = match self.new_store(
            &self.runtime,
            &capture,
            limits.memory_bytes,
            options.stdin.as_deref(),
            tools,
            &workspace,
        ) {
            Ok(store) => store,
            Err(refused) => return refused,
        };
        let guest_options = guest_options(options, false);
        let result = {
            let pre = &self.runtime.pre;
            let store = &mut store;
            let run = async move {
                let instance = pre.instantiate_async(&mut *store).await?;
                tracing::debug!(
                    elapsed_us = started.elapsed().as_micros() as u64,
                    "instantiated"
                );
                instance
                    .call_execute(&mut *store, &task, &guest_options)
                    .await
            };
            tokio::time::timeout(limits.timeout, run).await
        };
        let mut execution = finish(&store, &capture, result, limits, started).0;
        execution.files = workspace.outputs();
        execution
    }

    /// Fresh folders for a run or a session: `invalid_input` for bad mounts,
    /// `internal_error` when the host cannot make them.
    pub(crate) fn new_workspace(
        &self,
        limits: &Limits,
        mounts: &[Mount],
    ) -> Result<Workspace, Execution> {
        let mounts = crate::files::check_mounts(mounts)
            .map_err(|message| Execution::refused(Status::InvalidInput, "InvalidInput", message))?;
        Workspace::create(&self.folders, limits, mounts)
            .map_err(|message| Execution::refused(Status::InternalError, "InternalError", message))
    }

    /// The run's folders, with its input files written; `invalid_input` for bad mounts
    /// or inputs.
    fn workspace(&self, options: &RunOptions) -> Result<Workspace, Execution> {
        let workspace = self.new_workspace(&options.limits, &options.mounts)?;
        workspace
            .write_inputs(&options.files, &options.limits)
            .map_err(|message| Execution::refused(Status::InvalidInput, "InvalidInput", message))?;
        Ok(workspace)
    }

    /// A run slot, or the `busy` execution that says why there is none.
    pub(crate) async fn admit(
        &self,
        options: &RunOptions,
    ) -> Result<OwnedSemaphorePermit, Execution> {
        self.admission
            .enter(options.limits.timeout)
            .await
            .map_err(|refusal| Execution::refused(Status::Busy, "Busy", refusal.message()))
    }

    pub(crate) fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// The runtime for sessions: the same component on an engine without the instance
    /// pool. A pooled slot keeps the pages its last instance dirtied resident for the
    /// next run (what makes fresh runs fast); a session's instance lives long and its
    /// slot would then hold that memory after the session closed. Without the pool a
    /// closed session gives its memory back. Loaded on first use (the cached `.cwasm`
    /// fits both engines).
    pub(crate) fn session_runtime(&self) -> Result<&Runtime, Execution> {
        self.session_runtime
            .get_or_init(|| {
                let config = Config {
                    pooled_instances: None,
                    ..(*self.config).clone()
                };
                Runtime::load(&config).map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(|message| {
                Execution::refused(Status::InternalError, "InternalError", message.clone())
            })
    }

    /// A store for one instance: its WASI context (stdio captured, the workspace's
    /// folders, no network), memory limiter and tools; epoch ticks yield to tokio so
    /// timeouts can fire.
    pub(crate) fn new_store(
        &self,
        runtime: &Runtime,
        capture: &Capture,
        memory_bytes: usize,
        stdin: Option<&[u8]>,
        tools: ToolAccess,
        workspace: &Workspace,
    ) -> Result<Store<HostState>, Execution> {
        let mut wasi = WasiCtxBuilder::new();
        wasi.stdout(capture.stdout_factory())
            .stderr(capture.stderr_factory())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        if let Some(stdin) = stdin {
            wasi.stdin(MemoryInputPipe::new(stdin.to_vec()));
        }
        workspace.preopen(&mut wasi).map_err(|message| {
            Execution::refused(Status::InternalError, "InternalError", message)
        })?;
        let state = HostState {
            wasi: wasi.build(),
            table: ResourceTable::new(),
            limiter: MemoryLimiter {
                cap: memory_bytes,
                peak: 0,
                refused: false,
            },
            tools,
            disk: workspace.guard(),
        };
        let mut store = Store::new(&runtime.engine, state);
        store.limiter(|s| &mut s.limiter);
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(|_| Ok(UpdateDeadline::Yield(1)));
        Ok(store)
    }
}

/// The tools a run may use under its options (allowlist narrowed by its policy).
pub(crate) fn tool_access(options: &RunOptions) -> Result<ToolAccess, Execution> {
    let limits = &options.limits;
    let policy_tools = options
        .policy
        .as_ref()
        .and_then(|p| p.allowed_tools.as_deref());
    let allowlist = Allowlist::new(options.allowed_tools.as_deref())
        .and_then(|l| l.narrow(policy_tools))
        .map_err(|message| Execution::refused(Status::InvalidInput, "InvalidInput", message))?;
    Ok(ToolAccess {
        host: options.tools.clone(),
        allowlist,
        max_calls: limits.tool_calls,
        max_bytes: limits.tool_result_bytes,
        calls: 0,
        limit_hit: false,
        recorded: None,
        replay: None,
    })
}

pub(crate) fn guest_options(options: &RunOptions, keep_globals: bool) -> GuestOptions {
    GuestOptions {
        filename: options
            .filename
            .clone()
            .unwrap_or_else(|| "<sandbox>".into()),
        policy: options
            .policy
            .as_ref()
            .filter(|p| p.restricts_code())
            .map(guest_policy),
        keep_globals,
    }
}

/// The execution of one finished (or stopped) call, and whether the guest returned
/// normally (a trap or a timeout leaves an instance unfit for another call).
pub(crate) fn finish(
    store: &Store<HostState>,
    capture: &Capture,
    result: Result<wasmtime::Result<Outcome>, tokio::time::error::Elapsed>,
    limits: &Limits,
    started: Instant,
) -> (Execution, bool) {
    let duration_ms = started.elapsed().as_secs_f64() * 1e3;
    tracing::debug!(
        elapsed_us = started.elapsed().as_micros() as u64,
        "executed"
    );
    let state = store.data();
    let captured = capture.finish();
    let mut execution = Execution {
        status: Status::Ok,
        stdout: captured.stdout,
        stderr: captured.stderr,
        return_value: None,
        return_value_is_repr: false,
        error: None,
        output_truncated: captured.truncated,
        duration_ms,
        memory_peak_bytes: state.limiter.peak as u64,
        tool_calls: state.tools.calls as u64,
        violations: Vec::new(),
        files: Vec::new(),
    };
    let returned = matches!(result, Ok(Ok(_)));
    let disk_refusal = state.disk.take_refusal();
    let (status, error) = match result {
        Err(_elapsed) => (
            Status::Timeout,
            limit_error(
                "Timeout",
                format!(
                    "the run exceeded its wall-clock limit of {} ms",
                    limits.timeout.as_millis()
                ),
            ),
        ),
        Ok(Err(trap)) => classify_trap(&trap, state, captured.truncated, limits),
        Ok(Ok(outcome)) => classify_outcome(outcome, state, disk_refusal, limits, &mut execution),
    };
    execution.status = status;
    execution.error = error;
    (execution, returned)
}

fn guest_policy(policy: &Policy) -> GuestPolicy {
    GuestPolicy {
        name: policy.name.clone(),
        allowed_modules: policy.allowed_modules.clone(),
        denied_modules: policy.denied_modules.clone(),
        denied_builtins: policy.denied_builtins.clone(),
        denied_attributes: policy.denied_attributes.clone(),
    }
}

fn violation(v: GuestViolation) -> Violation {
    Violation {
        line: v.line,
        column: v.column,
        rule: v.rule,
        message: v.message,
    }
}

/// The `invalid_input` execution for code over the size cap.
pub(crate) fn check_code(code: &str, limits: &Limits) -> Option<Execution> {
    (code.len() > limits.code_bytes).then(|| {
        Execution::refused(
            Status::InvalidInput,
            "InvalidInput",
            format!(
                "the code is {} bytes, over the limit of {} bytes",
                code.len(),
                limits.code_bytes
            ),
        )
    })
}

/// The guest's error report, each text cut at the output cap: the guest chooses how long
/// an exception message is, and the host keeps what it is given.
fn python_error(error: PythonError, limits: &Limits) -> ErrorInfo {
    let cut = |mut text: String| {
        if text.len() > limits.output_bytes {
            let mut end = limits.output_bytes;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
            text.push_str(crate::output::TRUNCATION_MARKER);
        }
        text
    };
    ErrorInfo {
        kind: cut(error.type_name),
        message: cut(error.message),
        traceback: Some(cut(error.traceback)),
    }
}

fn limit_error(kind: &str, message: String) -> Option<ErrorInfo> {
    Some(ErrorInfo {
        kind: kind.into(),
        message,
        traceback: None,
    })
}

fn memory_limit(limits: &Limits) -> (Status, Option<ErrorInfo>) {
    (
        Status::MemoryLimit,
        limit_error(
            "MemoryLimit",
            format!(
                "the run exceeded its memory limit of {} bytes",
                limits.memory_bytes
            ),
        ),
    )
}

fn classify_trap(
    trap: &wasmtime::Error,
    state: &HostState,
    truncated: bool,
    limits: &Limits,
) -> (Status, Option<ErrorInfo>) {
    if truncated {
        let message = format!(
            "stdout + stderr exceeded the output limit of {} bytes",
            limits.output_bytes
        );
        return (Status::OutputLimit, limit_error("OutputLimit", message));
    }
    if state.tools.limit_hit {
        let message = format!(
            "the run exceeded its limit of {} tool calls",
            limits.tool_calls
        );
        return (Status::ToolCallLimit, limit_error("ToolCallLimit", message));
    }
    if let Some(exit) = trap.downcast_ref::<I32Exit>() {
        return match exit.0 {
            0 => (Status::Ok, None),
            code => (
                Status::Error,
                limit_error(
                    "SystemExit",
                    format!("the program exited with status {code}"),
                ),
            ),
        };
    }
    if let Some(Trap::StackOverflow) = trap.downcast_ref::<Trap>() {
        let message = "the WebAssembly stack overflowed (recursion too deep in C code)".to_string();
        return (Status::StackOverflow, limit_error("StackOverflow", message));
    }
    if state.limiter.refused {
        return memory_limit(limits);
    }
    // The interpreter aborted: the program broke it (or hit a CPython bug). The host is
    // fine; report it as the program's error.
    tracing::debug!("guest trapped: {trap:?}");
    let message = format!("the Python interpreter aborted: {}", trap.root_cause());
    (Status::Error, limit_error("InterpreterCrash", message))
}

fn classify_outcome(
    outcome: Outcome,
    state: &HostState,
    disk_refusal: Option<crate::disk::Refusal>,
    limits: &Limits,
    execution: &mut Execution,
) -> (Status, Option<ErrorInfo>) {
    if !outcome.violations.is_empty() {
        execution.violations = outcome.violations.into_iter().map(violation).collect();
        if let Some(error) = outcome.error {
            return (Status::PolicyViolation, Some(python_error(error, limits)));
        }
        let first = &execution.violations[0];
        let message = format!(
            "{} violation(s); first at line {}: {}",
            execution.violations.len(),
            first.line,
            first.message
        );
        return (
            Status::PolicyViolation,
            limit_error("PolicyViolation", message),
        );
    }
    if let Some(error) = outcome.error {
        if state.limiter.refused && error.type_name == "MemoryError" {
            return memory_limit(limits);
        }
        if let Some(refusal) = disk_refusal {
            // The program did not recover from a refused write; its traceback says where.
            let mut info = python_error(error, limits);
            info.message = format!("{} ({}: {})", refusal.message(), info.kind, info.message);
            info.kind = "DiskLimit".into();
            return (Status::DiskLimit, Some(info));
        }
        return (Status::Error, Some(python_error(error, limits)));
    }
    let (text, is_repr) = match outcome.value {
        None => return (Status::Ok, None),
        Some(Value::Json(text)) => (text, false),
        Some(Value::Repr(text)) => (text, true),
    };
    if text.len() > limits.output_bytes {
        let message = format!(
            "the return value is {} bytes, over the output limit of {} bytes",
            text.len(),
            limits.output_bytes
        );
        return (Status::OutputLimit, limit_error("OutputLimit", message));
    }
    execution.return_value_is_repr = is_repr;
    execution.return_value = Some(if is_repr {
        serde_json::Value::String(text)
    } else {
        match serde_json::from_str(&text) {
            Ok(value) => value,
            Err(e) => {
                return (
                    Status::InternalError,
                    limit_error("InternalError", format!("the guest returned bad JSON: {e}")),
                )
            }
        }
    });
    (Status::Ok, None)
}
