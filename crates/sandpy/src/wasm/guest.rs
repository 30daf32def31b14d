//! A WebAssembly run's instance and its host side: the store (WASI context, memory
//! limiter, disk quotas, tool access), captured output and folders; made for a fresh run
//! and dropped after it, or kept by a session ([`SessionInstance`]) while it stays fit.

use super::host::{HostState, MemoryLimiter};
use super::overrun::Watchdog;
use super::runtime::Runtime;
use super::workspace::{RunFolders, Workspace};
use crate::access::Access;
use crate::bindings::{GuestOptions, Sandbox as Instance, Task};
use crate::execution::{ErrorInfo, Execution, Status};
use crate::files::InputsError;
use crate::options::OutputSink;
use crate::output::{Capture, Captured};
use crate::plan::{Deadline, Plan};
use crate::tools::RecordedCall;
use crate::verdict::{outcome_verdict, ran, CallResult, Cutoff, Refusal, Stop};
use crate::{Limits, RunOptions};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::Instrument;
use wasmtime::component::ResourceTable;
use wasmtime::{Store, Trap, UpdateDeadline};
use wasmtime_wasi::p2::pipe::MemoryInputPipe;
use wasmtime_wasi::{I32Exit, WasiCtxBuilder};

/// What an instance is made for: it decides its memory cap and whether it reads the
/// run's stdin.
pub(crate) enum InstanceFor {
    /// A fresh run: the run's memory cap, its stdin.
    Fresh,
    /// A session's first run: the session's memory cap, no stdin.
    Session { memory_cap: usize },
    /// A run to come, made ahead (see `made_ahead`): the memory cap of the limits it is made
    /// with, no stdin (a run with stdin makes its own instance).
    Ahead,
}

/// A guest instance with its host side: its store (WASI context, memory limiter, tools),
/// captured output and folders.
pub(crate) struct Guest {
    store: Store<HostState>,
    /// `None` until instantiated: inside the first call's time limit, or ahead of its run
    /// (see `made_ahead`).
    instance: Option<Instance>,
    capture: Capture,
    workspace: Workspace,
    memory_cap: usize,
}

/// A session's instance: made on its first run (on the runtime without the instance
/// pool, with the session's memory cap), kept while runs leave it fit for another.
pub(crate) struct SessionInstance {
    guest: Option<Guest>,
    memory_cap: usize,
}

impl SessionInstance {
    /// No instance yet; it will get `memory_cap` bytes at most.
    pub(crate) fn new(memory_cap: usize) -> SessionInstance {
        SessionInstance {
            guest: None,
            memory_cap,
        }
    }

    /// The instance, if it was made and is fit; taken for a run, given back by [`SessionInstance::keep`].
    pub(crate) fn take(&mut self) -> Option<Guest> {
        self.guest.take()
    }

    /// Keep `guest` for the next run.
    pub(crate) fn keep(&mut self, guest: Guest) {
        self.guest = Some(guest);
    }

    /// The memory cap its instance gets.
    pub(crate) fn memory_cap(&self) -> usize {
        self.memory_cap
    }

    /// The largest size its linear memory reached, if it was made.
    pub(crate) fn memory_peak(&self) -> u64 {
        self.guest
            .as_ref()
            .map_or(0, |g| g.store.data().limiter.peak as u64)
    }
}

impl Guest {
    /// A store for one instance, with fresh folders: its WASI context (stdio captured
    /// and handed to `options.on_output`, `options.stdin` when `with_stdin`, the
    /// workspace's folders with `options.mounts`, no network), memory limiter and tools;
    /// epoch ticks yield to tokio so timeouts can fire. `invalid_input` for bad mounts,
    /// `internal_error` when the host cannot make the folders.
    pub(crate) fn new(
        runtime: &Runtime,
        folders: &Arc<RunFolders>,
        limits: &Limits,
        options: &RunOptions,
        made_for: InstanceFor,
        access: Access,
    ) -> Result<Guest, Refusal> {
        let (memory_cap, with_stdin) = match made_for {
            InstanceFor::Fresh => (limits.memory_bytes, true),
            InstanceFor::Session { memory_cap } => (memory_cap, false),
            InstanceFor::Ahead => (limits.memory_bytes, false),
        };
        let mounts = crate::files::check_mounts(&options.mounts)
            .map_err(|e| Refusal::new(Status::InvalidInput, e.to_string()))?;
        let workspace = Workspace::create(folders, limits, mounts)
            .map_err(|e| Refusal::new(Status::InternalError, e.to_string()))?;
        let capture = Capture::new(limits.output_bytes, options.on_output.clone());
        let mut wasi = WasiCtxBuilder::new();
        wasi.stdout(capture.stdout_factory())
            .stderr(capture.stderr_factory())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        if let Some(stdin) = options.stdin.as_deref().filter(|_| with_stdin) {
            wasi.stdin(MemoryInputPipe::new(stdin.to_vec()));
        }
        workspace
            .preopen(&mut wasi)
            .map_err(|e| Refusal::new(Status::InternalError, e.to_string()))?;
        let state = HostState {
            wasi: wasi.build(),
            table: ResourceTable::new(),
            limiter: MemoryLimiter {
                cap: memory_cap,
                peak: 0,
                refused: false,
            },
            access,
            disk: workspace.guard(),
        };
        let mut store = Store::new(&runtime.engine, state);
        store.limiter(|s| &mut s.limiter);
        if runtime.interruption.has_checks() {
            store.set_epoch_deadline(1);
            store.epoch_deadline_callback(|_| Ok(UpdateDeadline::Yield(1)));
        }
        Ok(Guest {
            store,
            instance: None,
            capture,
            workspace,
            memory_cap,
        })
    }

    /// Write the run's input files by `deadline`; `invalid_input` if they do not fit or
    /// the run asks for other mounts than the guest has, `timeout` if the time ran out.
    fn add_inputs(
        &self,
        options: &RunOptions,
        limits: &Limits,
        deadline: Instant,
    ) -> Result<(), Refusal> {
        if !self.workspace.has_mounts(&options.mounts) {
            let message = "a session keeps the mounts of its first run; close it to change them";
            return Err(Refusal::new(Status::InvalidInput, message.into()));
        }
        self.workspace
            .write_inputs(&options.files, limits, deadline)
            .map_err(|e| {
                let status = match e {
                    InputsError::Refused(_) => Status::InvalidInput,
                    InputsError::OutOfTime { .. } => Status::Timeout,
                };
                Refusal::new(status, e.to_string())
            })
    }

    /// The watchdog of `run` when `runtime`'s code cannot be interrupted; refused when
    /// its thread cannot start.
    fn watch(
        &self,
        runtime: &Runtime,
        deadline: Deadline,
        limit: Duration,
    ) -> Result<Option<Watchdog>, Refusal> {
        runtime
            .watch(deadline.started(), deadline.ends(), limit, &self.capture)
            .map_err(|e| {
                Refusal::new(
                    Status::InternalError,
                    format!("cannot start the run's watchdog thread: {e}"),
                )
            })
    }

    /// Write the run's input files, then call the guest under the plan's limits and
    /// deadline and collect the execution, and whether the guest is fit for another
    /// call. `Err`: refused before the guest was called, which is then as it was.
    pub(crate) async fn execute(
        &mut self,
        runtime: &Runtime,
        plan: &Plan<'_>,
    ) -> Result<(Execution, bool), Refusal> {
        let (limits, deadline) = (plan.limits, plan.deadline);
        self.add_inputs(plan.options, limits, deadline.ends())?;
        let watchdog = self.watch(runtime, deadline, limits.timeout)?;
        let cancel = plan.options.cancel.as_ref();
        let result = self
            .call(runtime, plan.task, &plan.guest, deadline, cancel, limits)
            .await;
        drop(watchdog);
        Ok(self.collect(result, limits, deadline.started().elapsed()))
    }

    /// End a session's cell: its output files are gone from `/output` (they were
    /// returned), and the tool calls it recorded are handed to the journal.
    pub(crate) fn end_cell(&mut self) -> Vec<RecordedCall> {
        self.workspace.clear_outputs();
        self.store
            .data_mut()
            .access
            .tools
            .recorded
            .take()
            .unwrap_or_default()
    }

    /// Ready a kept guest (a session's, or one made ahead) for its next call: new tools,
    /// output cap and time slice.
    pub(crate) fn reuse(&mut self, access: Access, limits: &Limits, on_output: Option<OutputSink>) {
        self.capture.reset(limits.output_bytes, on_output);
        let data = self.store.data_mut();
        data.access = access;
        data.limiter.refused = false;
        self.store.set_epoch_deadline(1);
    }

    /// Instantiate the guest now, ahead of its first call (an instance made ahead: see
    /// `made_ahead`); `call` instantiates it otherwise.
    pub(crate) async fn instantiate(&mut self, runtime: &Runtime) -> wasmtime::Result<()> {
        super::runtime::keep_trap_handlers_first();
        if self.instance.is_none() {
            let made = runtime.pre.instantiate_async(&mut self.store);
            self.instance = Some(made.instrument(tracing::info_span!("instantiate")).await?);
        }
        Ok(())
    }

    /// Call the guest (instantiating it first if needed) until `deadline`, unless `cancel`
    /// is cancelled first. Its outcome is the attacker's: checked against `limits` by
    /// [`crate::guest_report`] as soon as wasmtime lifted it, before anything copies it.
    async fn call(
        &mut self,
        runtime: &Runtime,
        task: &Task,
        guest_options: &GuestOptions,
        deadline: Deadline,
        cancel: Option<&tokio_util::sync::CancellationToken>,
        limits: &Limits,
    ) -> CallResult {
        super::runtime::keep_trap_handlers_first();
        let store = &mut self.store;
        let instance = &mut self.instance;
        let call = async move {
            let instance = match instance {
                Some(instance) => instance,
                empty => {
                    let made = runtime.pre.instantiate_async(&mut *store);
                    empty.insert(made.instrument(tracing::info_span!("instantiate")).await?)
                }
            };
            let outcome = instance
                .call_execute(&mut *store, task, guest_options)
                .instrument(tracing::info_span!("execute"))
                .await?;
            Ok(crate::guest_report::check(outcome, limits))
        };
        let timed = async {
            tokio::time::timeout_at(deadline.tokio(), call)
                .await
                .map_err(|_| Cutoff::Elapsed)
        };
        match cancel {
            None => timed.await,
            Some(cancel) => cancel
                .run_until_cancelled(timed)
                .await
                .unwrap_or(Err(Cutoff::Cancelled)),
        }
    }

    /// The execution of a finished (or stopped) call, and whether the guest returned
    /// normally (a trap or a timeout leaves an instance unfit for another call).
    fn collect(
        &self,
        result: CallResult,
        limits: &Limits,
        duration: Duration,
    ) -> (Execution, bool) {
        tracing::debug!(elapsed_us = duration.as_micros() as u64, "executed");
        let fit = matches!(result, Ok(Ok(_)));
        let captured = self.capture.finish();
        let state = self.store.data();
        let mut execution = decide(state, captured, result, limits, self.memory_cap, duration);
        execution.files = self.workspace.outputs();
        if let Some(network) = &state.access.network {
            execution.requests = network.made.clone();
        }
        (execution, fit)
    }
}

/// The execution of one finished (or stopped) call. `memory_cap` is the cap the
/// instance has (a session's own, not the run's).
fn decide(
    state: &HostState,
    captured: Captured,
    result: CallResult,
    limits: &Limits,
    memory_cap: usize,
    duration: Duration,
) -> Execution {
    let mut execution = ran(
        captured,
        duration,
        state.limiter.peak as u64,
        state.access.tools.calls as u64,
    );
    let disk_refusal = state.disk.take_refusal();
    let (status, error) = match result {
        Err(Cutoff::Elapsed) => Stop::Timeout {
            limit: limits.timeout,
            waiting_for: state.access.tools.waiting_for(),
        }
        .verdict(),
        Err(Cutoff::Cancelled) => Stop::Cancelled {
            waiting_for: state.access.tools.waiting_for(),
        }
        .verdict(),
        Ok(Err(trap)) => trap_verdict(&trap, state, execution.output_truncated, limits, memory_cap),
        Ok(Ok(outcome)) => outcome_verdict(
            outcome,
            state.limiter.refused,
            disk_refusal.map(|refusal| refusal.message()),
            limits,
            memory_cap,
            &mut execution,
        ),
    };
    execution.status = status;
    execution.error = error;
    execution
}

fn trap_verdict(
    trap: &wasmtime::Error,
    state: &HostState,
    truncated: bool,
    limits: &Limits,
    memory_cap: usize,
) -> (Status, Option<ErrorInfo>) {
    if truncated {
        return Stop::Output(limits.output_bytes).verdict();
    }
    if state.access.tools.limit_hit {
        return Stop::ToolCalls(limits.tool_calls).verdict();
    }
    if let Some(exit) = trap.downcast_ref::<I32Exit>() {
        return match exit.0 {
            0 => (Status::Ok, None),
            code => Stop::Exit(code).verdict(),
        };
    }
    if let Some(Trap::StackOverflow) = trap.downcast_ref::<Trap>() {
        return Stop::StackOverflow.verdict();
    }
    if state.limiter.refused {
        return Stop::Memory(memory_cap).verdict();
    }
    // The interpreter aborted: the program broke it (or hit a CPython bug). The host is
    // fine; report it as the program's error.
    tracing::debug!("guest trapped: {trap:?}");
    Stop::InterpreterCrash(trap.root_cause().to_string()).verdict()
}
