//! The one run path, used by fresh runs, function calls, checks and session cells alike:
//! prepare (code size, limits, tool access), admit (a run slot), instantiate or reuse the
//! guest, call it under the limits, collect the verdict and the output files.
//!
//! A session is a run that keeps its interpreter ([`Interpreter`], in `session`); the native tier's
//! runs are in `native`.

mod native;
mod session;

pub(crate) use session::{Interpreter, SessionRun, Stage};

use crate::access::Access;
use crate::admission::Admission;
use crate::bindings::{GuestOptions, GuestPolicy, Task};
use crate::error::error_chain;
use crate::execution::{Execution, Status};
use crate::plan::{Deadline, Plan};
use crate::verdict::Refusal;
use crate::wasm::{
    Disposal, Guest, InstanceFor, InstanceShape, MadeAhead, RunFolders, Runtime, SpareCore,
};
use crate::{Config, Error, Limits, Policy, RunOptions};
use std::sync::{Arc, OnceLock};
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
    session_runtime: OnceLock<Result<Arc<Runtime>, Error>>,
    config: Config,
    admission: Admission,
    folders: Arc<RunFolders>,
    /// The native tier, started by its first run and again by the first run after its
    /// zygote died (the lock also keeps two runs from starting it at once).
    native: tokio::sync::Mutex<Option<Arc<crate::native::NativeTier>>>,
    /// Fresh runs' instances left to the process's exit (`Config::leave_instances_to_exit`).
    left: std::sync::Mutex<Vec<Guest>>,
    /// Where fresh runs' instances are dropped after they answered, when no other run is
    /// going; `None` with one run at a time (one core: nothing to hand the work to).
    disposal: Option<Disposal>,
    /// The next fresh runs' instances, made after a run that was alone answered (see
    /// [`ahead_depth`] for how many); `None` with one run at a time, or when the pool has no slot beyond the
    /// runs'.
    made_ahead: Option<MadeAhead>,
    /// The next session's instance, made after a session's first run that was alone
    /// answered; `None` with one run at a time.
    session_made_ahead: Option<MadeAhead>,
    /// Whether the process left a core spare for the disposal and made-ahead threads.
    spare_core: SpareCore,
}

/// A run that passed its checks and holds a run slot.
struct Admitted {
    limits: Limits,
    access: Access,
    /// Held until the run's instance is dropped (see [`Disposal`]).
    slot: tokio::sync::OwnedSemaphorePermit,
    /// Its clock starts at admission, so setting up the instance and writing input files
    /// count against it.
    deadline: Deadline,
}

impl Runner {
    /// Load the runtime and set up admission and run folders for `config`.
    pub(crate) fn new(config: Config) -> Result<Runner, Error> {
        let scratch = config.resolved_scratch_dir();
        // Another user's folder (or a link) is refused here; one that cannot be made yet
        // (a read-only file system) fails each run instead, as `internal_error`, so that a
        // server still starts and says why in every answer.
        match crate::host_paths::ensure(&scratch, crate::host_paths::Use::Private) {
            Err(crate::host_paths::FolderError::Io { path, source }) => {
                tracing::warn!("the scratch folder `{}`: {source}", path.display());
            }
            checked => checked?,
        }
        crate::wasm::sweep_stale(&scratch);
        let runtime_id = Runtime::id_of(&config)?;
        let runtime = OnceLock::new();
        let concurrency = config.concurrency();
        if !config.runtime_on_first_use {
            let _ = runtime.set(Ok(Arc::new(Runtime::load(&config, &runtime_id)?)));
        }
        let folders = Arc::new(RunFolders::new(config.resolved_scratch_dir(), concurrency));
        // Each instance made ahead needs a pool slot that no run may need; not for one-shot processes.
        let depth = ahead_depth(concurrency, config.pooled_instances);
        let ahead = concurrency > 1 && !config.leave_instances_to_exit;
        let made_ahead =
            (ahead && depth > 0).then(|| MadeAhead::new("sandpy-ahead", folders.clone(), depth));
        let session_made_ahead =
            ahead.then(|| MadeAhead::new("sandpy-session-ahead", folders.clone(), 1));
        Ok(Runner {
            runtime,
            runtime_id,
            session_runtime: OnceLock::new(),
            admission: Admission::new(concurrency, config.max_queued_runs),
            folders,
            config,
            native: tokio::sync::Mutex::new(None),
            left: std::sync::Mutex::new(Vec::new()),
            disposal: (concurrency > 1).then(Disposal::new),
            made_ahead,
            session_made_ahead,
            spare_core: SpareCore::new(),
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
    fn runtime(&self) -> Result<&Arc<Runtime>, Refusal> {
        self.loaded_runtime()
            .map_err(|e| Refusal::new(Status::InternalError, error_chain(e)))
    }

    /// Check the code's size and the tool access, then wait for a run slot.
    async fn admit(&self, task: &Task, options: &RunOptions) -> Result<Admitted, Refusal> {
        let limits = options.effective_limits();
        if let Some(refused) = check_code(task, &limits) {
            return Err(refused);
        }
        let entered = self
            .admission
            .enter(limits.timeout)
            .instrument(tracing::info_span!("admission"));
        let entered = match &options.cancel {
            None => entered.await,
            Some(cancel) => cancel.run_until_cancelled(entered).await.ok_or_else(|| {
                let message = "the run was cancelled while it waited for a run slot";
                Refusal::new(Status::Cancelled, message.into())
            })?,
        };
        let slot = entered.map_err(|refusal| Refusal::new(Status::Busy, refusal.message()))?;
        let deadline = Deadline::starting_now(limits.timeout);
        let access = Access::for_run(options, &limits, deadline)?;
        Ok(Admitted {
            limits,
            access,
            slot,
            deadline,
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
        let limits = &run.limits;
        let ahead =
            self.made_ahead
                .as_ref()
                .zip(InstanceShape::of(options, limits, limits.memory_bytes));
        let made = self.new_guest(
            runtime,
            ahead,
            InstanceFor::Fresh,
            options,
            limits,
            run.access,
        );
        let mut guest = match made {
            Ok(guest) => guest,
            Err(refused) => return refused.into(),
        };
        let plan = Plan {
            task: &task,
            options,
            guest: guest_options(options, limits, false),
            limits,
            deadline: run.deadline,
        };
        let executed = guest.execute(runtime, &plan).await;
        let execution = match executed {
            Ok((execution, _)) => execution,
            Err(refused) => return refused.into(),
        };
        if self.config.leave_instances_to_exit {
            self.left
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(guest);
        } else if let Some(disposal) = self.disposal.as_ref().filter(|_| self.hand_over()) {
            // Its reset is left to the disposal thread while the caller has the answer;
            // with other runs going, or the cores busy with other work, the hand-over
            // would cost. So is refilling the instances made ahead. Refilled after every
            // run instead, 16 runs at once in process made 0.65-0.70x the runs/s
            // (docs/dev/performance.md, "Instances made ahead").
            disposal.dispose(guest, run.slot);
            if let Some((made_ahead, shape)) = ahead {
                made_ahead.request(runtime, shape);
            }
        }
        execution
    }

    /// A run's new instance: the one made ahead in `ahead`'s made_ahead when it has the
    /// run's shape, else one made now (instantiated at the run's first call).
    fn new_guest(
        &self,
        runtime: &Runtime,
        ahead: Option<(&MadeAhead, InstanceShape)>,
        instance_for: InstanceFor,
        options: &RunOptions,
        limits: &Limits,
        access: Access,
    ) -> Result<Guest, Refusal> {
        if let Some(mut guest) = ahead.and_then(|(made_ahead, shape)| made_ahead.take(shape)) {
            guest.reuse(access, limits, options.on_output.clone());
            return Ok(guest);
        }
        Guest::new(
            runtime,
            &self.folders,
            limits,
            options,
            instance_for,
            access,
        )
    }

    /// Whether work off the runs' path (a reset, instances made ahead) goes to the helper
    /// threads now: the run calling is the only one executing or waiting (an instance
    /// still being reset after its run is not a run), and the process left a core spare
    /// lately (see [`SpareCore`]).
    fn hand_over(&self) -> bool {
        self.admission
            .alone(self.disposal.as_ref().map_or(0, Disposal::holding))
            && self.spare_core.now()
    }

    /// The instances made ahead: fresh runs' and sessions'.
    fn made_ahead_pools(&self) -> impl Iterator<Item = &MadeAhead> {
        [&self.made_ahead, &self.session_made_ahead]
            .into_iter()
            .flatten()
    }

    /// How many runs (fresh, or a session's first) took an instance made ahead.
    pub(crate) fn instances_made_ahead_taken(&self) -> u64 {
        self.made_ahead_pools().map(MadeAhead::taken).sum()
    }

    /// How many instances made ahead (fresh runs' and sessions') wait now.
    pub(crate) fn instances_made_ahead_waiting(&self) -> usize {
        self.made_ahead_pools().map(MadeAhead::waiting).sum()
    }

    /// The identity of what `tier`'s runs get, as a session's snapshot names it (the
    /// native tier's is known once it started: it is started now if need be).
    pub(crate) async fn runtime_id_of(&self, tier: crate::Tier) -> Result<String, String> {
        match tier {
            crate::Tier::Wasm => Ok(self.runtime_id.clone()),
            crate::Tier::Native => Ok(self.native_tier().await?.runtime_id().to_string()),
        }
    }

    /// The identity of the runtime of WebAssembly runs (a module compiled by one
    /// runtime is not another's).
    pub(crate) fn runtime_id(&self) -> &str {
        &self.runtime_id
    }

    /// Remove this process's run folders (see [`crate::Sandbox::release_at_exit`]).
    pub(crate) fn remove_own_folders(&self) {
        crate::wasm::remove_own_folders(&self.config.resolved_scratch_dir());
    }
}

/// How many instances are made ahead for fresh runs: one per run that may execute at once,
/// at most [`MAX_DEPTH`](crate::wasm::MAX_DEPTH), and no more than the pool has slots
/// beyond the runs' (none without a slot to spare).
fn ahead_depth(concurrency: usize, pooled_instances: Option<u32>) -> usize {
    let spare = pooled_instances.map_or(usize::MAX, |slots| {
        (slots as usize).saturating_sub(concurrency)
    });
    concurrency.min(crate::wasm::MAX_DEPTH).min(spare)
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
fn check_code(task: &Task, limits: &Limits) -> Option<Refusal> {
    let code = match task {
        Task::Run(code) | Task::Check(code) | Task::Compile(code) => code,
        Task::Call(call) | Task::CallCompiled(crate::bindings::CompiledCall { call, .. }) => {
            &call.code
        }
        Task::ListModules => return None,
    };
    (code.len() > limits.code_bytes).then(|| {
        let message = format!(
            "the code is {} bytes, over the limit of {} bytes",
            code.len(),
            limits.code_bytes
        );
        Refusal::new(Status::InvalidInput, message)
    })
}

fn guest_options(options: &RunOptions, limits: &Limits, keep_globals: bool) -> GuestOptions {
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
        rich_output_limits: crate::bindings::RichOutputLimits {
            count: crate::rich_output::MAX_COUNT,
            bytes: limits.output_files_bytes,
        },
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
