//! Per-run limits, and the one shape in which users give them.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The limits of one execution. Every limit, when hit, ends the run with its own
/// [`Status`](crate::Status), never a Python exception the code could swallow (the
/// memory cap is first seen by Python as `MemoryError`, and reported as
/// `memory_limit` unless the code recovered).
///
/// Defaults: 30 s wall clock, 256 MiB linear memory, 1 MiB of stdout + stderr, 1 MiB of
/// code, 1000 tool calls, 60 s per tool call (never more than the run has left), 8 MiB
/// per tool result, 64 MiB of scratch files, 8 MiB of output files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock time for the whole run, tool calls included.
    pub timeout: Duration,
    /// Cap on the guest's linear memory, in bytes (the snapshot itself is ~30 MiB); at
    /// most [`Limits::MAX_MEMORY_MB`] MiB.
    pub memory_bytes: usize,
    /// Cap on stdout and stderr together, in bytes.
    pub output_bytes: usize,
    /// Cap on the size of the submitted code, in bytes.
    pub code_bytes: usize,
    /// Cap on the number of tool calls in one run.
    pub tool_calls: usize,
    /// Time one tool call may take. A call that takes longer fails (Python sees
    /// `ToolError`) and the run goes on; when the run's own time ends first, the run ends
    /// `timeout`, naming the tools it was waiting for.
    pub tool_timeout: Duration,
    /// Cap on the size of one tool result (and of one call's arguments), in bytes.
    pub tool_result_bytes: usize,
    /// Disk quota of the scratch folder `/tmp` (input files included), in bytes.
    pub disk_bytes: u64,
    /// Disk quota of `/output`, and so the most file bytes a run returns.
    pub output_files_bytes: u64,
}

impl Limits {
    /// The largest memory cap a run may be given, in MiB: the instance pool reserves this
    /// much address space per slot.
    pub const MAX_MEMORY_MB: u64 = 4096;
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout: Duration::from_secs(30),
            memory_bytes: 256 << 20,
            output_bytes: 1 << 20,
            code_bytes: 1 << 20,
            tool_calls: 1000,
            tool_timeout: Duration::from_secs(60),
            tool_result_bytes: 8 << 20,
            disk_bytes: 64 << 20,
            output_files_bytes: 8 << 20,
        }
    }
}

/// Limits as users give them, each optional: the `sandpy.limits` of a config file, a
/// policy's own limits, the CLI's flags and an MCP request all take this one shape, in
/// the units users write (milliseconds, MiB, bytes), and [`LimitOverrides::apply`] puts
/// the given ones over a base. Unknown keys are refused when read from JSON.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitOverrides {
    /// Wall-clock limit in milliseconds (at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Linear-memory cap in MiB (1 to [`Limits::MAX_MEMORY_MB`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    /// Cap on stdout + stderr, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_bytes: Option<usize>,
    /// Cap on the submitted code, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_code_bytes: Option<usize>,
    /// Cap on tool calls per run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tool_calls: Option<usize>,
    /// Time one tool call may take, in milliseconds (at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_timeout_ms: Option<u64>,
    /// Cap on one tool result (and one call's arguments), in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tool_result_bytes: Option<usize>,
    /// Disk quota of `/tmp`, input files included, in MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_mb: Option<u64>,
    /// Disk quota of `/output`, in MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_files_mb: Option<u64>,
}

/// A limit given out of its range; names the key as users write it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{key}` {requirement}")]
pub struct LimitError {
    /// The key, e.g. `memory_mb`.
    pub key: &'static str,
    /// What it must be, e.g. `must be between 1 and 4096`.
    pub requirement: String,
}

impl LimitOverrides {
    /// `base` with every given limit put over it.
    pub fn apply(&self, base: &Limits) -> Limits {
        let mut limits = base.clone();
        if let Some(ms) = self.timeout_ms {
            limits.timeout = Duration::from_millis(ms);
        }
        if let Some(mb) = self.memory_mb {
            limits.memory_bytes = usize::try_from(mb << 20).unwrap_or(usize::MAX);
        }
        if let Some(bytes) = self.max_output_bytes {
            limits.output_bytes = bytes;
        }
        if let Some(bytes) = self.max_code_bytes {
            limits.code_bytes = bytes;
        }
        if let Some(calls) = self.max_tool_calls {
            limits.tool_calls = calls;
        }
        if let Some(ms) = self.tool_timeout_ms {
            limits.tool_timeout = Duration::from_millis(ms);
        }
        if let Some(bytes) = self.max_tool_result_bytes {
            limits.tool_result_bytes = bytes;
        }
        if let Some(mb) = self.disk_mb {
            limits.disk_bytes = mb.saturating_mul(1 << 20);
        }
        if let Some(mb) = self.output_files_mb {
            limits.output_files_bytes = mb.saturating_mul(1 << 20);
        }
        limits
    }

    /// These overrides, then `later` over them.
    pub fn then(&self, later: &LimitOverrides) -> LimitOverrides {
        LimitOverrides {
            timeout_ms: later.timeout_ms.or(self.timeout_ms),
            memory_mb: later.memory_mb.or(self.memory_mb),
            max_output_bytes: later.max_output_bytes.or(self.max_output_bytes),
            max_code_bytes: later.max_code_bytes.or(self.max_code_bytes),
            max_tool_calls: later.max_tool_calls.or(self.max_tool_calls),
            tool_timeout_ms: later.tool_timeout_ms.or(self.tool_timeout_ms),
            max_tool_result_bytes: later.max_tool_result_bytes.or(self.max_tool_result_bytes),
            disk_mb: later.disk_mb.or(self.disk_mb),
            output_files_mb: later.output_files_mb.or(self.output_files_mb),
        }
    }

    /// Check the ranges: timeouts of at least 1 ms, a memory cap of 1 to
    /// [`Limits::MAX_MEMORY_MB`] MiB.
    pub fn validate(&self) -> Result<(), LimitError> {
        for (key, value) in [
            ("timeout_ms", self.timeout_ms),
            ("tool_timeout_ms", self.tool_timeout_ms),
        ] {
            if value == Some(0) {
                return Err(LimitError {
                    key,
                    requirement: "must be at least 1".into(),
                });
            }
        }
        if let Some(mb) = self.memory_mb {
            if !(1..=Limits::MAX_MEMORY_MB).contains(&mb) {
                return Err(LimitError {
                    key: "memory_mb",
                    requirement: format!("must be between 1 and {}", Limits::MAX_MEMORY_MB),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_apply_in_user_units_and_later_ones_win() {
        let policy = LimitOverrides {
            timeout_ms: Some(5_000),
            memory_mb: Some(64),
            ..LimitOverrides::default()
        };
        let flags = LimitOverrides {
            timeout_ms: Some(100),
            tool_timeout_ms: Some(50),
            disk_mb: Some(2),
            ..LimitOverrides::default()
        };
        let limits = policy.then(&flags).apply(&Limits::default());
        assert_eq!(limits.timeout, Duration::from_millis(100));
        assert_eq!(limits.memory_bytes, 64 << 20);
        assert_eq!(limits.disk_bytes, 2 << 20);
        assert_eq!(limits.tool_timeout, Duration::from_millis(50));
        assert_eq!(limits.output_bytes, Limits::default().output_bytes);
    }

    #[test]
    fn ranges_are_checked_and_named() {
        let zero = LimitOverrides {
            timeout_ms: Some(0),
            ..LimitOverrides::default()
        };
        assert_eq!(
            zero.validate().unwrap_err().to_string(),
            "`timeout_ms` must be at least 1"
        );
        let huge = LimitOverrides {
            memory_mb: Some(Limits::MAX_MEMORY_MB + 1),
            ..LimitOverrides::default()
        };
        assert_eq!(
            huge.validate().unwrap_err().to_string(),
            "`memory_mb` must be between 1 and 4096"
        );
        let zero_tool = LimitOverrides {
            tool_timeout_ms: Some(0),
            ..LimitOverrides::default()
        };
        assert_eq!(
            zero_tool.validate().unwrap_err().to_string(),
            "`tool_timeout_ms` must be at least 1"
        );
        let unknown = serde_json::from_str::<LimitOverrides>(r#"{"timeout": 5}"#);
        assert!(unknown.unwrap_err().to_string().contains("unknown field"));
    }
}
