//! Process-wide settings of a [`Sandbox`](crate::Sandbox).

use std::path::PathBuf;
use std::sync::Arc;

/// How to set up the runtime. Defaults: the compiled-code cache lives in
/// `$SANDPY_CACHE_DIR`, else the user's cache folder (`~/.cache/sandpy` on Linux); no
/// progress messages; a pool of 256 reusable instance slots.
#[derive(Clone)]
pub struct Config {
    /// Where the compiled runtime (`.cwasm`) is cached.
    pub cache_dir: Option<PathBuf>,
    /// Called with a human-readable message before slow steps (compiling the runtime).
    pub progress: Option<Arc<dyn Fn(&str) + Send + Sync>>,
    /// Instance slots of wasmtime's pooling allocator (also the most runs alive at once;
    /// a run beyond it ends `internal_error`). `None` allocates each instance afresh.
    pub pooled_instances: Option<u32>,
}

impl Default for Config {
    fn default() -> Self {
        Config { cache_dir: None, progress: None, pooled_instances: Some(256) }
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("cache_dir", &self.cache_dir)
            .field("progress", &self.progress.is_some())
            .field("pooled_instances", &self.pooled_instances)
            .finish()
    }
}

impl Config {
    /// The cache folder in use.
    pub fn resolved_cache_dir(&self) -> PathBuf {
        if let Some(dir) = &self.cache_dir {
            return dir.clone();
        }
        if let Some(dir) = std::env::var_os("SANDPY_CACHE_DIR") {
            return PathBuf::from(dir);
        }
        dirs::cache_dir().unwrap_or_else(std::env::temp_dir).join("sandpy")
    }

    pub(crate) fn report_progress(&self, message: &str) {
        if let Some(progress) = &self.progress {
            progress(message);
        }
    }
}
