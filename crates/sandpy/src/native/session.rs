//! A session's process on the native tier: a confined fork of the zygote that keeps its
//! interpreter from one cell to the next. Between cells it is stopped (`SIGSTOP`, by the
//! zygote once the cell answered), so that nothing a cell left running uses the CPU; the
//! host tells the zygote when the next cell starts (with its time limit), and the zygote
//! lets it go on.

use super::made_ahead::TopUp;
use super::serve::{Inputs, Run, RunEnd, Streams};
use super::tier::NativeTier;
use crate::access::Access;
use crate::execution::{Execution, Status};
use crate::plan::Plan;
use crate::tools::RecordedCall;
use crate::verdict::NativeEnd;
use crate::Limits;
use std::sync::Arc;

/// A session's process: a confined fork of the zygote that keeps its interpreter (and
/// its scratch folder) from one cell to the next. Dropped, it hangs up its report
/// socket and the zygote ends it.
pub(crate) struct NativeSession {
    /// The zygote the process was forked from, kept running while the session lives.
    pub(super) _tier: Arc<NativeTier>,
    pub(super) streams: Streams,
    pub(super) memory_peak: u64,
}

impl NativeSession {
    /// The process's peak resident size so far (the zygote's pages it shares included).
    pub(crate) fn memory_peak(&self) -> u64 {
        self.memory_peak
    }

    /// Tell the zygote that a cell starts with `limits.timeout`, and wait until its limits
    /// are in force and the process runs again; fails when the process ended since its
    /// last cell.
    pub(super) async fn start_cell(&mut self, limits: &Limits) -> Result<(), NativeEnd> {
        let ms = limits.timeout.as_millis().min(u64::MAX as u128) as u64;
        super::made_ahead::start(&mut self.streams.report, ms)
            .await
            .map_err(super::made_ahead::NotStarted::cell_end)
    }
}

impl NativeTier {
    /// Run one cell of a session in its process: `kept`'s, or a new one (with the
    /// session's `memory_cap`, the mounts and quotas of this first cell; made ahead when
    /// one of that shape waits). The process is kept for the next cell when this one
    /// returned normally: then its tool calls are returned, in order.
    pub(crate) async fn cell(
        self: &Arc<Self>,
        kept: &mut Option<NativeSession>,
        memory_cap: u64,
        plan: &Plan<'_>,
        access: Access,
        inputs: Inputs,
    ) -> (Execution, Option<Vec<RecordedCall>>) {
        let limits = &Limits {
            memory_bytes: memory_cap as usize,
            ..plan.limits.clone()
        };
        let mut run = Run::new(access, limits, &inputs);
        let mut top_up = TopUp::default();
        let session = match kept.take() {
            Some(mut session) => session.start_cell(limits).await.map(|()| session),
            None => self
                .process_for(self.request(limits, &inputs.mounts, true))
                .await
                .map_err(NativeEnd::Internal)
                // A session's stdin is empty.
                .map(|(streams, _stdin, first)| {
                    top_up = first;
                    NativeSession {
                        _tier: self.clone(),
                        streams,
                        memory_peak: 0,
                    }
                }),
        };
        let (ended, session) = match session {
            Ok(mut session) => {
                let ended = run
                    .serve(
                        &mut session.streams,
                        None,
                        plan.task,
                        &plan.guest,
                        &inputs,
                        plan.deadline,
                    )
                    .await;
                self.made_ahead.top_up(top_up, |r| self.launch(r));
                (ended, Some(session))
            }
            Err(end) => (RunEnd::without(end), None),
        };
        // Kept only when the zygote stopped the whole process once the cell answered.
        let answered = matches!(ended.end, NativeEnd::Outcome(_)) && ended.stopped;
        let memory_peak = ended.max_rss_bytes;
        let execution = run.execution(ended, plan.deadline.started());
        if let Some(mut session) = session {
            let fit =
                answered && execution.status != Status::MemoryLimit && !execution.output_truncated;
            if fit {
                session.memory_peak = session.memory_peak.max(memory_peak);
                *kept = Some(session);
                let calls = run.access.tools.recorded.take().unwrap_or_default();
                return (execution, Some(calls));
            }
        }
        (execution, None)
    }
}
