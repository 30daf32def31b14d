//! The limit flags of the commands that run code.

use sandpy::{LimitOverrides, Limits};

/// Limit flags shared by the commands that run code; unset flags keep the config's
/// defaults (30 s, 256 MiB, 1 MiB of output unless the config says otherwise).
#[derive(clap::Args, Clone)]
pub(crate) struct LimitArgs {
    /// Wall-clock limit in milliseconds [default: 30000].
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) timeout_ms: Option<u64>,
    /// Linear-memory limit in MiB [default: 256].
    #[arg(long, value_name = "MIB", value_parser = clap::value_parser!(u64).range(1..=Limits::MAX_MEMORY_MB))]
    pub(crate) memory_mb: Option<u64>,
    /// Cap on stdout + stderr in bytes [default: 1048576].
    #[arg(long, value_name = "BYTES")]
    pub(crate) max_output_bytes: Option<usize>,
    /// Disk quota of the scratch folder /tmp, input files included, in MiB [default: 64].
    #[arg(long, value_name = "MIB")]
    pub(crate) disk_mb: Option<u64>,
    /// Disk quota of /output (what a run can return) in MiB [default: 8].
    #[arg(long, value_name = "MIB")]
    pub(crate) output_files_mb: Option<u64>,
}

impl LimitArgs {
    /// The flags that were given, as limits to put over the config's and the policy's.
    pub(crate) fn overrides(&self) -> LimitOverrides {
        LimitOverrides {
            timeout_ms: self.timeout_ms,
            memory_mb: self.memory_mb,
            max_output_bytes: self.max_output_bytes,
            disk_mb: self.disk_mb,
            output_files_mb: self.output_files_mb,
            ..LimitOverrides::default()
        }
    }
}
