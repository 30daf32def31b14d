//! The one run path, used by fresh runs, function calls, checks and session cells alike:
//! prepare (code size, limits, tool access), admit (a run slot), instantiate or reuse the
//! guest, call it under the limits, collect the verdict and the output files.
//!
//! A session is a run that keeps its interpreter ([`Kept`]): a [`Guest`] made on its
//! first run (on the runtime without the instance pool), or a native tier process; kept
//! while runs return normally.

use crate::admission::Admission;
use crate::approval::Approval;
use crate::bindings::{GuestOptions, GuestPolicy, Task};
use crate::execution::{Execution, Status};
use crate::tool_access::{RecordedCall, ToolAccess};
use crate::tools::Allowlist;
use crate::verdict::Refused;
use crate::wasm::{Disposal, Guest, RunFolders, Runtime, Shape, Spares};
use crate::{Config, Error, Limits, Policy, RunOptions};
use std::collections::VecDeque;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tracing::Instrument;

/// What every run of one sandbox shares: the runtimes, the admission queue and the run
/// folders.
pub(crate) struct Runner {
    /// The runtime fresh runs use: loaded by [`Runner::new`], or by the first WebAssembly
    /// run with `Config::runtime_on_first_use`.
    runtime: OnceLock<Result<Arc<Runtime>, Error>>,
    /// The runtime's identity (session snapshots name it), known without loading it.
    runtime_id: String,
    /// The runtime sessions use, loaded on the first session (see [`Runner::session_runtime`]).
    session_runtime: OnceLock<Result<Runtime, Error>>,
    config: Config,
    admission: Admission,
    folders: Arc<RunFolders>,
    /// The native tier, started by its first run and again by the first run after its
    /// zygote died (the lock also keeps two runs from starting it at once).
    #[cfg(target_os = "linux")]
    native: tokio::sync::Mutex<Option<Arc<crate::native::NativeTier>>>,
    /// Fresh runs' instances left to the process's exit (`Config::leave_instances_to_exit`).
    left: std::sync::Mutex<Vec<Guest>>,
    /// Where fresh runs' instances are dropped after they answered, when no other run is
    /// going; `None` with one run at a time (one core: nothing to hand the work to).
    disposal: Option<Disposal>,
    /// The next fresh run's instance, made after a run that was alone answered; `None`
    /// with one run at a time, or when the pool has no slot beyond the runs'.
    spares: Option<Spares>,
}

/// What a session keeps between its runs: the interpreter of the tier its first run
/// took, once made.
pub(crate) struct Kept {
    /// The tier of the session's first run; every later run must ask for the same.
    tier: Option<crate::Tier>,
    wasm: crate::wasm::Kept,
    #[cfg(target_os = "linux")]
    native: Option<crate::native::NativeSession>,
}

impl Kept {
    /// Nothing yet; the interpreter will get `memory_cap` bytes at most.
    pub(crate) fn new(memory_cap: usize) -> Kept {
        Kept {
            tier: None,
            wasm: crate::wasm::Kept::new(memory_cap),
            #[cfg(target_os = "linux")]
            native: None,
        }
    }

    /// The tier its runs take, once one ran.
    pub(crate) fn tier(&self) -> Option<crate::Tier> {
        self.tier
    }

    /// The largest size its interpreter reached (the instance's linear memory, the
    /// process's resident size).
    pub(crate) fn memory_peak(&self) -> u64 {
        #[cfg(target_os = "linux")]
        if let Some(session) = &self.native {
            return session.memory_peak();
        }
        self.wasm.memory_peak()
    }
}

/// How far a session's run got, for the session to keep its books.
pub(crate) enum Reached {
    /// Refused before it had a run slot: nothing changed.
    Refused,
    /// Refused after it had a slot, before the guest was called.
    Admitted,
    /// The guest was called and is fit for another call; its tool calls, in order.
    Fit(Vec<RecordedCall>),
    /// The guest was called and is not fit for another (trap, timeout, memory cap).
    Unfit,
}

/// A session run's execution and how far it got.
pub(crate) struct Ran {
    pub execution: Execution,
    pub reached: Reached,
}

/// A run that passed its checks and holds a run slot.
struct Admitted {
    limits: Limits,
    tools: ToolAccess,
    /// Held until the run's instance is dropped (see [`Disposal`]).
    slot: tokio::sync::OwnedSemaphorePermit,
    started: Instant,
}

impl Admitted {
    /// When the run's time limit ends: its clock starts at admission, so setting up the
    /// instance and writing input files count against it.
    fn deadline(&self) -> Instant {
        self.started
            .checked_add(self.limits.timeout)
            .unwrap_or_else(|| self.started + Duration::from_secs(365 * 86_400))
    }
}

impl Runner {
    /// Load the runtime and set up admission and run folders for `config`.
    pub(crate) fn new(config: Config) -> Result<Runner, Error> {
        crate::wasm::sweep_stale(&config.resolved_scratch_dir());
        let runtime_id = Runtime::id_of(&config)?;
        let runtime = OnceLock::new();
        let concurrency = config.concurrency();
        if !config.runtime_on_first_use {
            let _ = runtime.set(Ok(Arc::new(Runtime::load(&config, &runtime_id)?)));
        }
        let folders = Arc::new(RunFolders::new(config.resolved_scratch_dir(), concurrency));
        // A spare needs a pool slot that no run may need; not for one-shot processes.
        let spare_slot = config
            .pooled_instances
            .is_none_or(|slots| slots as usize > concurrency);
        let spares = (concurrency > 1 && spare_slot && !config.leave_instances_to_exit)
            .then(|| Spares::new(folders.clone()));
        Ok(Runner {
            runtime,
            runtime_id,
            session_runtime: OnceLock::new(),
            admission: Admission::new(concurrency, config.max_queued_runs),
            folders,
            config,
            #[cfg(target_os = "linux")]
            native: tokio::sync::Mutex::new(None),
            left: std::sync::Mutex::new(Vec::new()),
            disposal: (concurrency > 1).then(Disposal::new),
            spares,
        })
    }

    /// The runtime fresh runs use, loaded now (on this thread) if it was left to its
    /// first use.
    pub(crate) fn loaded_runtime(&self) -> Result<&Arc<Runtime>, &Error> {
        self.runtime
            .get_or_init(|| Runtime::load(&self.config, &self.runtime_id).map(Arc::new))
            .as_ref()
    }

    /// [`Runner::loaded_runtime`], its failure as a run's `internal_error`.
    fn runtime(&self) -> Result<&Arc<Runtime>, Refused> {
        self.loaded_runtime()
            .map_err(|e| Refused::new(Status::InternalError, error_chain(e)))
    }

    /// Check the code's size and the tool access, then wait for a run slot.
    async fn admit(&self, task: &Task, options: &RunOptions) -> Result<Admitted, Refused> {
        let limits = options.effective_limits();
        if let Some(refused) = check_code(task, &limits) {
            return Err(refused);
        }
        let tools = tool_access(options, &limits)?;
        let entered = self
            .admission
            .enter(limits.timeout)
            .instrument(tracing::info_span!("admission"));
        let entered = match &options.cancel {
            None => entered.await,
            Some(cancel) => cancel.run_until_cancelled(entered).await.ok_or_else(|| {
                let message = "the run was cancelled while it waited for a run slot";
                Refused::new(Status::Cancelled, message.into())
            })?,
        };
        let slot = entered.map_err(|refusal| Refused::new(Status::Busy, refusal.message()))?;
        Ok(Admitted {
            limits,
            tools,
            slot,
            started: Instant::now(),
        })
    }

    /// Run `task` in a new instance, dropped afterwards.
    pub(crate) async fn fresh(&self, task: Task, options: &RunOptions) -> Execution {
        let span = run_span(options, false);
        let execution = self.fresh_run(task, options).instrument(span.clone()).await;
        span.record("status", execution.status.as_str());
        execution
    }

    async fn fresh_run(&self, task: Task, options: &RunOptions) -> Execution {
        if options.tier == crate::Tier::Native {
            return self.native_fresh(&task, options).await;
        }
        // Loaded (when left to its first use) before the run's clock starts at admission.
        let runtime = match self.runtime() {
            Ok(runtime) => runtime,
            Err(refused) => return refused.into(),
        };
        let run = match self.admit(&task, options).await {
            Ok(run) => run,
            Err(refused) => return refused.into(),
        };
        let (limits, deadline) = (&run.limits, run.deadline());
        let mut guest = match self.fresh_guest(runtime, options, limits, run.tools) {
            Ok(guest) => guest,
            Err(refused) => return refused.into(),
        };
        let guest_options = guest_options(options, false);
        let executed = guest
            .execute(
                runtime,
                &task,
                options,
                &guest_options,
                limits,
                run.started,
                deadline,
            )
            .await;
        let execution = match executed {
            Ok((execution, _)) => execution,
            Err(refused) => return refused.into(),
        };
        if self.config.leave_instances_to_exit {
            self.left
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(guest);
        } else if let Some(disposal) = self.disposal.as_ref().filter(|_| self.admission.alone()) {
            // Its reset is left to the disposal thread while the caller has the answer;
            // with other runs going, the cores have work and the hand-over would cost.
            // So is making the next run's instance: a run that executes alone does not
            // share the machine with either.
            disposal.dispose(guest, run.slot);
            self.make_spare(runtime, options, limits);
        }
        execution
    }

    /// A fresh run's instance: the spare made ahead when it has the run's shape, else
    /// a new one (instantiated at the run's first call).
    fn fresh_guest(
        &self,
        runtime: &Arc<Runtime>,
        options: &RunOptions,
        limits: &Limits,
        tools: ToolAccess,
    ) -> Result<Guest, Refused> {
        let shape = Shape::of(options, limits);
        let spare = self
            .spares
            .as_ref()
            .zip(shape)
            .and_then(|(spares, shape)| spares.take(shape));
        match spare {
            Some(mut guest) => {
                guest.reuse(tools, limits, options.on_output.clone());
                Ok(guest)
            }
            None => Guest::new(
                runtime,
                &self.folders,
                limits,
                limits.memory_bytes,
                options,
                true,
                tools,
            ),
        }
    }

    /// Have the next run's instance made with the shape of this run's (`options`,
    /// `limits`), if it has one.
    fn make_spare(&self, runtime: &Arc<Runtime>, options: &RunOptions, limits: &Limits) {
        let Some((spares, shape)) = self.spares.as_ref().zip(Shape::of(options, limits)) else {
            return;
        };
        if let Ok(no_tools) = tool_access(&RunOptions::default(), limits) {
            spares.request(runtime, shape, no_tools);
        }
    }

    /// How many fresh runs took an instance made ahead.
    pub(crate) fn instances_made_ahead_taken(&self) -> u64 {
        self.spares.as_ref().map_or(0, Spares::taken)
    }

    /// Run `task` in a confined fork of the native tier's zygote (started now if this is
    /// its first run).
    #[cfg(target_os = "linux")]
    async fn native_fresh(&self, task: &Task, options: &RunOptions) -> Execution {
        let (tier, run, inputs) = match self.native_admit(task, options).await {
            Ok(admitted) => admitted,
            Err((execution, _)) => return execution,
        };
        let guest_options = guest_options(options, false);
        tier.run(
            task,
            &guest_options,
            &run.limits,
            run.tools,
            inputs,
            run.started,
        )
        .await
    }

    /// What a native run needs before it starts: the tier (started now if need be, before
    /// admission: the zygote's imports are not the run's time), a run slot, and its
    /// checked inputs; or the refusal, and whether it came after the slot was taken.
    #[cfg(target_os = "linux")]
    async fn native_admit(
        &self,
        task: &Task,
        options: &RunOptions,
    ) -> Result<
        (
            Arc<crate::native::NativeTier>,
            Admitted,
            crate::native::Inputs,
        ),
        (Execution, Reached),
    > {
        let tier = self.native_tier().await.map_err(|message| {
            (
                Execution::refused(Status::InternalError, message),
                Reached::Refused,
            )
        })?;
        let run = self
            .admit(task, options)
            .await
            .map_err(|refused| (refused.into(), Reached::Refused))?;
        let inputs = crate::native::Inputs::check(options, &run.limits).map_err(|why| {
            (
                Execution::refused(Status::InvalidInput, why),
                Reached::Admitted,
            )
        })?;
        Ok((tier, run, inputs))
    }

    #[cfg(not(target_os = "linux"))]
    async fn native_fresh(&self, _: &Task, _: &RunOptions) -> Execution {
        Execution::refused(Status::InvalidInput, "the native tier needs Linux".into())
    }

    /// The native tier, started on first use or when its zygote is gone (off the async
    /// threads: starting blocks while the zygote imports its packages).
    #[cfg(target_os = "linux")]
    pub(crate) async fn native_tier(&self) -> Result<Arc<crate::native::NativeTier>, String> {
        let mut current = self.native.lock().await;
        if let Some(tier) = current.as_ref().filter(|tier| tier.is_alive()) {
            return Ok(tier.clone());
        }
        if current.is_some() {
            tracing::warn!("the native tier's zygote is gone; starting a new one");
        }
        let config = self.config.native.clone().unwrap_or_default();
        let cache_dir = self.config.resolved_cache_dir();
        let started = tokio::task::spawn_blocking(move || {
            crate::native::NativeTier::start(&config, &cache_dir)
        })
        .await;
        let tier = match started {
            Ok(Ok(tier)) => Arc::new(tier),
            Ok(Err(e)) => return Err(error_chain(&e)),
            Err(e) => return Err(format!("the native tier's start failed: {e}")),
        };
        *current = Some(tier.clone());
        Ok(tier)
    }

    /// Run `task` in the session's instance (made now if it has none), journaling its
    /// tool calls; they are answered from `replay` when given. stdin is always empty.
    pub(crate) async fn kept(
        &self,
        task: Task,
        options: &RunOptions,
        kept: &mut Kept,
        replay: Option<VecDeque<RecordedCall>>,
    ) -> Ran {
        let span = run_span(options, true);
        let ran = self
            .kept_run(task, options, kept, replay)
            .instrument(span.clone())
            .await;
        span.record("status", ran.execution.status.as_str());
        ran
    }

    async fn kept_run(
        &self,
        task: Task,
        options: &RunOptions,
        kept: &mut Kept,
        replay: Option<VecDeque<RecordedCall>>,
    ) -> Ran {
        let refused = |refused: Refused, reached| Ran {
            execution: refused.into(),
            reached,
        };
        if let Some(tier) = kept.tier.filter(|&tier| tier != options.tier) {
            let message = format!(
                "this session runs on the {} tier; a run of it cannot take the {} tier",
                tier_name(tier),
                tier_name(options.tier)
            );
            return refused(
                Refused::new(Status::InvalidInput, message),
                Reached::Refused,
            );
        }
        if options.tier == crate::Tier::Native {
            return self.native_cell(task, options, kept, replay).await;
        }
        let mut run = match self.admit(&task, options).await {
            Ok(run) => run,
            Err(execution) => return refused(execution, Reached::Refused),
        };
        let (limits, deadline) = (&run.limits, run.deadline());
        run.tools.recorded = Some(Vec::new());
        run.tools.replay = replay;
        let runtime = match self.session_runtime() {
            Ok(runtime) => runtime,
            Err(execution) => return refused(execution, Reached::Admitted),
        };
        kept.tier = Some(crate::Tier::Wasm);
        let kept = &mut kept.wasm;
        let mut guest = match kept.take() {
            Some(mut guest) => {
                guest.reuse(run.tools, limits, options.on_output.clone());
                guest
            }
            None => {
                let made = Guest::new(
                    runtime,
                    &self.folders,
                    limits,
                    kept.memory_cap(),
                    options,
                    false,
                    run.tools,
                );
                match made {
                    Ok(guest) => guest,
                    Err(execution) => return refused(execution, Reached::Admitted),
                }
            }
        };
        let guest_options = guest_options(options, true);
        let executed = guest
            .execute(
                runtime,
                &task,
                options,
                &guest_options,
                limits,
                run.started,
                deadline,
            )
            .await;
        let (execution, fit) = match executed {
            Ok(executed) => executed,
            Err(execution) => {
                kept.keep(guest);
                return refused(execution, Reached::Admitted);
            }
        };
        let calls = guest.end_cell();
        let reached = if fit && execution.status != Status::MemoryLimit {
            kept.keep(guest);
            Reached::Fit(calls)
        } else {
            Reached::Unfit
        };
        Ran { execution, reached }
    }

    /// Run a session's cell in its native tier process (started now for its first).
    #[cfg(target_os = "linux")]
    async fn native_cell(
        &self,
        task: Task,
        options: &RunOptions,
        kept: &mut Kept,
        replay: Option<VecDeque<RecordedCall>>,
    ) -> Ran {
        let (tier, mut run, inputs) = match self.native_admit(&task, options).await {
            Ok(admitted) => admitted,
            Err((execution, reached)) => return Ran { execution, reached },
        };
        run.tools.recorded = Some(Vec::new());
        run.tools.replay = replay;
        kept.tier = Some(crate::Tier::Native);
        let (execution, calls) = tier
            .cell(
                &mut kept.native,
                kept.wasm.memory_cap() as u64,
                &task,
                &guest_options(options, true),
                &run.limits,
                run.tools,
                inputs,
                run.started,
            )
            .await;
        let reached = match calls {
            Some(calls) => Reached::Fit(calls),
            None => Reached::Unfit,
        };
        Ran { execution, reached }
    }

    #[cfg(not(target_os = "linux"))]
    async fn native_cell(
        &self,
        _: Task,
        _: &RunOptions,
        _: &mut Kept,
        _: Option<VecDeque<RecordedCall>>,
    ) -> Ran {
        Ran {
            execution: Execution::refused(
                Status::InvalidInput,
                "the native tier needs Linux".into(),
            ),
            reached: Reached::Refused,
        }
    }

    /// The identity of what `tier`'s runs get, as a session's snapshot names it (the
    /// native tier's is known once it started: it is started now if need be).
    pub(crate) async fn runtime_id_of(&self, tier: crate::Tier) -> Result<String, String> {
        match tier {
            crate::Tier::Wasm => Ok(self.runtime_id.clone()),
            #[cfg(target_os = "linux")]
            crate::Tier::Native => Ok(self.native_tier().await?.runtime_id().to_string()),
            #[cfg(not(target_os = "linux"))]
            crate::Tier::Native => Err("the native tier needs Linux".into()),
        }
    }

    /// Remove this process's run folders (see [`crate::Sandbox::release_at_exit`]).
    pub(crate) fn remove_own_folders(&self) {
        crate::wasm::remove_own_folders(&self.config.resolved_scratch_dir());
    }

    /// The runtime for sessions: the same component on an engine without the instance
    /// pool. A pooled slot keeps the pages its last instance dirtied resident for the
    /// next run (what makes fresh runs fast); a session's instance lives long and its
    /// slot would then hold that memory after the session closed. Without the pool a
    /// closed session gives its memory back. Loaded on first use (the cached `.cwasm`
    /// fits both engines).
    fn session_runtime(&self) -> Result<&Runtime, Refused> {
        self.session_runtime
            .get_or_init(|| {
                let config = Config {
                    pooled_instances: None,
                    ..self.config.clone()
                };
                Runtime::load(&config, &self.runtime_id)
            })
            .as_ref()
            .map_err(|e| Refused::new(Status::InternalError, error_chain(e)))
    }
}

/// The span of one run (its admission, instantiation, execution and tool calls are its
/// children); `status` is recorded when it ends.
fn run_span(options: &RunOptions, session: bool) -> tracing::Span {
    let tier = tier_name(options.tier);
    tracing::info_span!("sandbox_run", tier, session, status = tracing::field::Empty)
}

/// The tier as configs and requests name it.
fn tier_name(tier: crate::Tier) -> &'static str {
    match tier {
        crate::Tier::Wasm => "wasm",
        crate::Tier::Native => "native",
    }
}

/// The `invalid_input` execution for code over the size cap.
fn check_code(task: &Task, limits: &Limits) -> Option<Refused> {
    let code = match task {
        Task::Run(code) | Task::Check(code) => code,
        Task::Call(call) => &call.code,
        Task::ListModules => return None,
    };
    (code.len() > limits.code_bytes).then(|| {
        let message = format!(
            "the code is {} bytes, over the limit of {} bytes",
            code.len(),
            limits.code_bytes
        );
        Refused::new(Status::InvalidInput, message)
    })
}

/// The tools a run may use under its options (allowlist narrowed by its policy).
fn tool_access(options: &RunOptions, limits: &Limits) -> Result<ToolAccess, Refused> {
    let policy_tools = options
        .policy
        .as_ref()
        .and_then(|p| p.allowed_tools.as_deref());
    let allowlist = Allowlist::new(options.allowed_tools.as_deref())
        .and_then(|l| l.narrow(policy_tools))
        .map_err(|e| Refused::new(Status::InvalidInput, e.to_string()))?;
    let policy_approve = options.policy.iter().flat_map(|p| &p.approve);
    let approve: Vec<&String> = options.approve.iter().chain(policy_approve).collect();
    let approval = Approval::new(&approve, options.approver.clone())
        .map_err(|e| Refused::new(Status::InvalidInput, e.to_string()))?;
    Ok(ToolAccess {
        host: options.tools.clone(),
        allowlist,
        approval,
        on_call: options.on_tool_call.clone(),
        max_calls: limits.tool_calls,
        max_bytes: limits.tool_result_bytes,
        tool_timeout: limits.tool_timeout,
        deadline: None,
        waiting: Vec::new(),
        calls: 0,
        limit_hit: false,
        recorded: None,
        replay: None,
        network: options.network.clone().map(|network| {
            let narrowed = options
                .policy
                .as_ref()
                .and_then(|p| p.network_allow.clone());
            crate::network::NetworkAccess::new(network, narrowed)
        }),
    })
}

fn guest_options(options: &RunOptions, keep_globals: bool) -> GuestOptions {
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
        environment: options
            .network
            .as_ref()
            .map(|n| n.placeholders())
            .unwrap_or_default(),
    }
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

/// `error` and its causes on one line, for a message a person reads.
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
