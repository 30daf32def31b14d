//! Runs on the native tier: a fresh run in a confined fork of the tier's zygote, a
//! session's cell in its own kept process, and the tier itself, started on first use.

use super::{guest_options, Admitted};
use super::{Interpreter, Runner, SessionRun, Stage};
use crate::bindings::Task;
use crate::error::error_chain;
use crate::execution::{Execution, Status};
use crate::plan::Plan;
use crate::tools::RecordedCall;
use crate::RunOptions;
use std::collections::VecDeque;
use std::sync::Arc;

impl Runner {
    /// Run `task` in a confined fork of the native tier's zygote (started now if this is
    /// its first run).
    pub(super) async fn native_fresh(&self, task: &Task, options: &RunOptions) -> Execution {
        let (tier, run, inputs) = match self.native_admit(task, options).await {
            Ok(admitted) => admitted,
            Err((execution, _)) => return execution,
        };
        let plan = Plan {
            task,
            options,
            guest: guest_options(options, &run.limits, false),
            limits: &run.limits,
            deadline: run.deadline,
        };
        tier.run(&plan, run.access, inputs).await
    }

    /// What a native run needs before it starts: the tier (started now if need be, before
    /// admission: the zygote's imports are not the run's time), a run slot, and its
    /// checked inputs; or the refusal, and whether it came after the slot was taken.
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
        (Execution, Stage),
    > {
        let tier = self.native_tier().await.map_err(|message| {
            (
                Execution::refused(Status::InternalError, message),
                Stage::Refused,
            )
        })?;
        let run = self
            .admit(task, options)
            .await
            .map_err(|refused| (refused.into(), Stage::Refused))?;
        let inputs = crate::native::Inputs::check(options, &run.limits).map_err(|why| {
            (
                Execution::refused(Status::InvalidInput, why),
                Stage::Admitted,
            )
        })?;
        Ok((tier, run, inputs))
    }

    /// The native tier, started on first use or when its zygote is gone (off the async
    /// threads: starting blocks while the zygote imports its packages).
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

    /// Run a session's cell in its native tier process (started now for its first).
    pub(super) async fn native_cell(
        &self,
        task: Task,
        options: &RunOptions,
        interpreter: &mut Interpreter,
        replay: Option<VecDeque<RecordedCall>>,
    ) -> SessionRun {
        let (tier, mut run, inputs) = match self.native_admit(&task, options).await {
            Ok(admitted) => admitted,
            Err((execution, stage)) => return SessionRun { execution, stage },
        };
        run.access.tools.recorded = Some(Vec::new());
        run.access.tools.replay = replay;
        interpreter.tier = Some(crate::Tier::Native);
        let plan = Plan {
            task: &task,
            options,
            guest: guest_options(options, &run.limits, true),
            limits: &run.limits,
            deadline: run.deadline,
        };
        let memory_cap = interpreter.wasm.memory_cap() as u64;
        let (execution, calls) = tier
            .cell(
                &mut interpreter.native,
                memory_cap,
                &plan,
                run.access,
                inputs,
            )
            .await;
        let stage = match calls {
            Some(calls) => Stage::Fit(calls),
            None => Stage::Unfit,
        };
        SessionRun { execution, stage }
    }
}
