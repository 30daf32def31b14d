//! Per-run limits.

use std::time::Duration;

/// The limits of one execution. Every limit, when hit, ends the run with its own
/// [`Status`](crate::Status), never a Python exception the code could swallow (the
/// memory cap is first seen by Python as `MemoryError`, and reported as
/// `memory_limit` unless the code recovered).
///
/// Defaults: 30 s wall clock, 256 MiB linear memory, 1 MiB of stdout + stderr, 1 MiB of
/// code, 1000 tool calls, 8 MiB per tool result, 64 MiB of scratch files, 8 MiB of
/// output files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock time for the whole run, tool calls included.
    pub timeout: Duration,
    /// Cap on the guest's linear memory, in bytes (the snapshot itself is ~30 MiB).
    pub memory_bytes: usize,
    /// Cap on stdout and stderr together, in bytes.
    pub output_bytes: usize,
    /// Cap on the size of the submitted code, in bytes.
    pub code_bytes: usize,
    /// Cap on the number of tool calls in one run.
    pub tool_calls: usize,
    /// Cap on the size of one tool result (and of one call's arguments), in bytes.
    pub tool_result_bytes: usize,
    /// Disk quota of the scratch folder `/tmp` (input files included), in bytes.
    pub disk_bytes: u64,
    /// Disk quota of `/output`, and so the most file bytes a run returns.
    pub output_files_bytes: u64,
}

impl Limits {
    /// These limits with a new wall-clock limit and memory cap, where given.
    pub fn with_time_and_memory(&self, timeout_ms: Option<u64>, memory_mb: Option<u64>) -> Limits {
        let mut limits = self.clone();
        if let Some(ms) = timeout_ms {
            limits.timeout = Duration::from_millis(ms);
        }
        if let Some(mb) = memory_mb {
            limits.memory_bytes = (mb as usize) << 20;
        }
        limits
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout: Duration::from_secs(30),
            memory_bytes: 256 << 20,
            output_bytes: 1 << 20,
            code_bytes: 1 << 20,
            tool_calls: 1000,
            tool_result_bytes: 8 << 20,
            disk_bytes: 64 << 20,
            output_files_bytes: 8 << 20,
        }
    }
}
