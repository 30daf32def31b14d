//! sandpy's integration tests: one binary (every test binary links wasmtime), one module
//! per concern. All share one `Sandbox`, and through it the on-disk `.cwasm` cache.

mod attacks;
mod cache;
mod compiled;
mod epoch_probes;
mod files;
mod guest_python;
// Everything the guest reports, checked by the host (issue 60, part 3).
mod guest_reports;
// `requests` and `httpx` through the host, under the rules urllib meets (issue 46).
mod http_libraries;
mod language;
mod limits;
mod live;
// Several instances made ahead under concurrent runs: what they hold, how many wait.
mod made_ahead;
mod network;
// The allowlist, secrets and the audit record attacked from outside (issue 40).
mod network_attacks;
mod policy;
mod results;
// Config::guest: no guest is a typed error.
mod runtime_choice;
mod scratch_attacks;
mod search;
mod sessions;
mod tools;

use sandpy::{Execution, Limits, RunOptions, Sandbox};
use std::sync::OnceLock;

/// The library's defaults on the built-in guest: every test's sandbox starts from them.
pub fn config() -> sandpy::Config {
    sandpy::Config {
        guest: Some(sandpy_guest::GUEST),
        ..sandpy::Config::default()
    }
}

/// The process-wide sandbox (compiled once, or loaded from the shared cache).
pub fn sandbox() -> &'static Sandbox {
    static SANDBOX: OnceLock<Sandbox> = OnceLock::new();
    // Tests about behaviour, not admission: let every test's runs in at once, so that a
    // timing assertion never measures time spent waiting for another test's run.
    let config = sandpy::Config {
        max_concurrent_runs: Some(64),
        ..crate::config()
    };
    SANDBOX.get_or_init(|| Sandbox::new(config).expect("the runtime loads"))
}

/// A sandbox of its own with two run slots, the fewest with which instances are made ahead
/// (and the default pool, with slots to spare).
pub fn sandbox_with_two_run_slots() -> Sandbox {
    let config = sandpy::Config {
        max_concurrent_runs: Some(2),
        ..crate::config()
    };
    Sandbox::new(config).expect("the runtime loads")
}

/// Block on a future on a fresh current-thread runtime (epoch yields need no more).
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(future)
}

/// Run `code` with default limits.
pub fn run(code: &str) -> Execution {
    block_on(sandbox().run(code, &Limits::default()))
}

/// Run `code` with these options.
pub fn run_with(code: &str, options: &RunOptions) -> Execution {
    block_on(sandbox().run_with(code, options))
}

/// Run and require `ok`, showing the whole execution otherwise.
pub fn run_ok(code: &str) -> Execution {
    let execution = run(code);
    assert_eq!(execution.status, sandpy::Status::Ok, "{execution:#?}");
    execution
}

/// Assert the host is fine after an attack: a plain run still works.
pub fn assert_host_fine() {
    let after = run_ok("print(sum(range(10)))");
    assert_eq!(after.stdout, "45\n");
}
