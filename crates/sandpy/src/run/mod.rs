//! The one run path, used by fresh runs, function calls, checks and session cells alike:
//! prepare (code size, limits, tool access), admit (a run slot), instantiate or reuse the
//! guest, call it under the limits, collect the verdict and the output files.
//!
//! A session is a run that keeps its interpreter ([`Kept`], in `kept`); the native tier's
//! runs are in `native`.

mod kept;
mod native;

pub(crate) use kept::{Kept, Ran, Reached};

use crate::admission::Admission;
use crate::bindings::{GuestOptions, GuestPolicy, Task};
use crate::execution::{Execution, Status};
use crate::tool_access::ToolAccess;
use crate::verdict::Refused;
use crate::wasm::{Disposal, Guest, RunFolders, Runtime, Shape, Spares};
use crate::{Config, Error, Limits, Policy, RunOptions};
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
    session_runtime: OnceLock<Result<Arc<Runtime>, Error>>,
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
    /// The next session's instance, made after a session's first run that was alone
    /// answered; `None` with one run at a time.
    session_spares: Option<Spares>,
}

/// What a run's new instance is for: it decides the memory cap and whether stdin is read.
enum InstanceFor {
    /// A fresh run: the run's memory cap, its stdin.
    Fresh,
    /// A session's first run: the session's memory cap, no stdin.
    Session { memory_cap: usize },
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
        let scratch = config.resolved_scratch_dir();
        // Another user's folder (or a link) is refused here; one that cannot be made yet
        // (a read-only file system) fails each run instead, as `internal_error`, so that a
        // server still starts and says why in every answer.
        match crate::private_folder::ensure(&scratch, crate::private_folder::Use::Private) {
            Err(crate::private_folder::FolderError::Io { path, source }) => {
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
        // A spare needs a pool slot that no run may need; not for one-shot processes.
        let spare_slot = config
            .pooled_instances
            .is_none_or(|slots| slots as usize > concurrency);
        let ahead = concurrency > 1 && !config.leave_instances_to_exit;
        let spares = (ahead && spare_slot).then(|| Spares::new("sandpy-spare", folders.clone()));
        let session_spares = ahead.then(|| Spares::new("sandpy-session-spare", folders.clone()));
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
            session_spares,
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
        let tools = ToolAccess::for_run(options, &limits)?;
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
        let ahead = self
            .spares
            .as_ref()
            .zip(Shape::of(options, limits, limits.memory_bytes));
        let made = self.new_guest(
            runtime,
            ahead,
            InstanceFor::Fresh,
            options,
            limits,
            run.tools,
        );
        let mut guest = match made {
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
            if let Some((spares, shape)) = ahead {
                spares.request(runtime, shape);
            }
        }
        execution
    }

    /// A run's new instance: the one made ahead in `ahead`'s spares when it has the
    /// run's shape, else one made now (instantiated at the run's first call).
    fn new_guest(
        &self,
        runtime: &Runtime,
        ahead: Option<(&Spares, Shape)>,
        instance_for: InstanceFor,
        options: &RunOptions,
        limits: &Limits,
        tools: ToolAccess,
    ) -> Result<Guest, Refused> {
        if let Some(mut guest) = ahead.and_then(|(spares, shape)| spares.take(shape)) {
            guest.reuse(tools, limits, options.on_output.clone());
            return Ok(guest);
        }
        let (memory_cap, with_stdin) = match instance_for {
            InstanceFor::Fresh => (limits.memory_bytes, true),
            InstanceFor::Session { memory_cap } => (memory_cap, false),
        };
        Guest::new(
            runtime,
            &self.folders,
            limits,
            memory_cap,
            options,
            with_stdin,
            tools,
        )
    }

    /// How many runs (fresh, or a session's first) took an instance made ahead.
    pub(crate) fn instances_made_ahead_taken(&self) -> u64 {
        [&self.spares, &self.session_spares]
            .into_iter()
            .flatten()
            .map(Spares::taken)
            .sum()
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
