//! A session's runs: the interpreter a session keeps between them ([`Interpreter`]), and the run
//! of a cell in it, on either tier. A WebAssembly session's instance is made for its first
//! run on the runtime without the instance pool ([`Runner::session_runtime`]), or made
//! ahead of it (`wasm::made_ahead`); it is kept while runs return normally, and its tool calls
//! are journaled for save and restore.

use super::{guest_options, run_span, tier_name, InstanceFor, Runner};
use crate::bindings::Task;
use crate::error::error_chain;
use crate::execution::{Execution, Status};
use crate::plan::Plan;
use crate::tools::RecordedCall;
use crate::verdict::Refusal;
use crate::wasm::{InstanceShape, Runtime};
use crate::{Config, RunOptions};
use std::collections::VecDeque;
use std::sync::Arc;
use tracing::Instrument;

/// What a session keeps between its runs: the interpreter of the tier its first run
/// took, once made.
pub(crate) struct Interpreter {
    /// The tier of the session's first run; every later run must ask for the same.
    pub(super) tier: Option<crate::Tier>,
    pub(super) wasm: crate::wasm::SessionInstance,
    pub(super) native: Option<crate::native::NativeSession>,
}

impl Interpreter {
    /// Nothing yet; the interpreter will get `memory_cap` bytes at most.
    pub(crate) fn new(memory_cap: usize) -> Interpreter {
        Interpreter {
            tier: None,
            wasm: crate::wasm::SessionInstance::new(memory_cap),
            native: None,
        }
    }

    /// The tier its runs take, once one ran.
    pub(crate) fn tier(&self) -> Option<crate::Tier> {
        self.tier
    }

    /// The largest size its interpreter stage (the instance's linear memory, the
    /// process's resident size).
    pub(crate) fn memory_peak(&self) -> u64 {
        if let Some(session) = &self.native {
            return session.memory_peak();
        }
        self.wasm.memory_peak()
    }
}

/// How far a session's run got, for the session to keep its books.
pub(crate) enum Stage {
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
pub(crate) struct SessionRun {
    pub execution: Execution,
    pub stage: Stage,
}

impl Runner {
    /// Run `task` in the session's instance (made now if it has none), journaling its
    /// tool calls; they are answered from `replay` when given. stdin is always empty.
    pub(crate) async fn cell(
        &self,
        task: Task,
        options: &RunOptions,
        interpreter: &mut Interpreter,
        replay: Option<VecDeque<RecordedCall>>,
    ) -> SessionRun {
        let span = run_span(options, true);
        let ran = self
            .cell_run(task, options, interpreter, replay)
            .instrument(span.clone())
            .await;
        span.record("status", ran.execution.status.as_str());
        ran
    }

    async fn cell_run(
        &self,
        task: Task,
        options: &RunOptions,
        interpreter: &mut Interpreter,
        replay: Option<VecDeque<RecordedCall>>,
    ) -> SessionRun {
        let refused = |refused: Refusal, stage| SessionRun {
            execution: refused.into(),
            stage,
        };
        if let Some(tier) = interpreter.tier.filter(|&tier| tier != options.tier) {
            let message = format!(
                "this session runs on the {} tier; a run of it cannot take the {} tier",
                tier_name(tier),
                tier_name(options.tier)
            );
            return refused(Refusal::new(Status::InvalidInput, message), Stage::Refused);
        }
        if options.tier == crate::Tier::Native {
            return self.native_cell(task, options, interpreter, replay).await;
        }
        let mut run = match self.admit(&task, options).await {
            Ok(run) => run,
            Err(execution) => return refused(execution, Stage::Refused),
        };
        let limits = &run.limits;
        run.access.tools.recorded = Some(Vec::new());
        run.access.tools.replay = replay;
        let runtime = match self.session_runtime() {
            Ok(runtime) => runtime,
            Err(execution) => return refused(execution, Stage::Admitted),
        };
        interpreter.tier = Some(crate::Tier::Wasm);
        let kept = &mut interpreter.wasm;
        // A session's first run takes the instance made ahead for sessions, or makes its
        // own; either way the next session's is asked for once this run answered.
        let (mut guest, first) = match kept.take() {
            Some(mut guest) => {
                guest.reuse(run.access, limits, options.on_output.clone());
                (guest, None)
            }
            None => {
                let memory_cap = kept.memory_cap();
                let ahead = self
                    .session_made_ahead
                    .as_ref()
                    .zip(InstanceShape::of(options, limits, memory_cap));
                let instance_for = InstanceFor::Session { memory_cap };
                match self.new_guest(runtime, ahead, instance_for, options, limits, run.access) {
                    Ok(guest) => (guest, ahead),
                    Err(execution) => return refused(execution, Stage::Admitted),
                }
            }
        };
        let plan = Plan {
            task: &task,
            options,
            guest: guest_options(options, limits, true),
            limits,
            deadline: run.deadline,
        };
        let executed = guest.execute(runtime, &plan).await;
        if let Some((made_ahead, shape)) = first.filter(|_| self.hand_over()) {
            made_ahead.request(runtime, shape);
        }
        let (execution, fit) = match executed {
            Ok(executed) => executed,
            Err(execution) => {
                kept.keep(guest);
                return refused(execution, Stage::Admitted);
            }
        };
        let calls = guest.end_cell();
        let stage = if fit && execution.status != Status::MemoryLimit {
            kept.keep(guest);
            Stage::Fit(calls)
        } else {
            Stage::Unfit
        };
        SessionRun { execution, stage }
    }

    /// The runtime for sessions: the same component on an engine without the instance
    /// pool. A pooled slot keeps the pages its last instance dirtied resident for the
    /// next run (what makes fresh runs fast); a session's instance lives long and its
    /// slot would then hold that memory after the session closed. Without the pool a
    /// closed session gives its memory back. Loaded on first use (the cached `.cwasm`
    /// fits both engines).
    fn session_runtime(&self) -> Result<&Arc<Runtime>, Refusal> {
        self.session_runtime
            .get_or_init(|| {
                let config = Config {
                    pooled_instances: None,
                    ..self.config.clone()
                };
                Runtime::load(&config, &self.runtime_id).map(Arc::new)
            })
            .as_ref()
            .map_err(|e| Refusal::new(Status::InternalError, error_chain(e)))
    }
}
