//! [`Sandbox`]: the facade over the one run path (`run/`) for fresh runs, function
//! calls, checks and the module report.

use crate::bindings::{FunctionCall, Task};
use crate::execution::{ErrorInfo, Execution, Status};
use crate::run::Runner;
use crate::{Config, Error, Limits, Policy, RunOptions, Violation};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Runs Python programs, each in a brand-new WebAssembly instance.
///
/// Creating a `Sandbox` compiles (or loads from the cache) the Python runtime, which can
/// take seconds the first time; each run then costs about a millisecond. A `Sandbox` is
/// cheap to clone and safe to share across threads and tasks: clones share one engine and
/// one admission queue (runs beyond [`Config::max_concurrent_runs`] wait in line, and end
/// `busy` when the line is full).
#[derive(Clone)]
pub struct Sandbox {
    runner: Arc<Runner>,
}

/// Which stdlib modules the guest has, which are absent and why, and the third-party
/// packages of its runtime ([`Sandbox::module_report`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleReport {
    /// Importable stdlib modules.
    pub available: Vec<String>,
    /// Absent stdlib modules, each with the reason.
    pub absent: BTreeMap<String, String>,
    /// Third-party packages the runtime has imported in its snapshot.
    #[serde(default)]
    pub packages: Vec<String>,
    /// Bundled packages (or their submodules) that failed to import, with the error.
    #[serde(default)]
    pub package_failures: BTreeMap<String, String>,
}

/// The guest could not produce what was asked (a check or a module report): the
/// execution's error, with the status it ended with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status}: {}: {}", .error.kind, .error.message)]
pub struct GuestFailure {
    /// How the guest's run ended.
    pub status: Status,
    /// Why.
    pub error: ErrorInfo,
}

impl GuestFailure {
    fn of(execution: Execution, what: &str) -> GuestFailure {
        let status = execution.status;
        let error = execution.error.unwrap_or_else(|| ErrorInfo {
            kind: "InternalError".into(),
            message: format!("{what} ended with status {status}"),
            traceback: None,
        });
        GuestFailure { status, error }
    }
}

impl Sandbox {
    /// Load the runtime: from the on-disk cache, or compiled now and cached.
    pub fn new(config: Config) -> Result<Sandbox, Error> {
        Ok(Sandbox {
            runner: Arc::new(Runner::new(config)?),
        })
    }

    /// For a process that exits once its runs are done (the CLI's one-shot commands):
    /// removes this process's run folders and leaves everything else (the compiled code's
    /// mapping, the engine's tables) to the exit, which frees it at once instead of piece
    /// by piece. Call it when no clone of this `Sandbox` will run again.
    pub fn release_at_exit(self) {
        self.runner.remove_own_folders();
        std::mem::forget(self);
    }

    /// How many runs (fresh runs, and sessions' first runs) took an instance made ahead of
    /// them (made after runs of their kind answered; see docs/dev/performance.md,
    /// "Instances made ahead"): for benchmarks and tests, as no run can tell.
    pub fn runs_on_instances_made_ahead(&self) -> u64 {
        self.runner.instances_made_ahead_taken()
    }

    /// How many instances made ahead wait for runs now (fresh runs' and sessions'): each
    /// holds memory and a run folder, so that count is bounded (at most one per run that
    /// may execute at once, and four, for fresh runs; one for sessions). For benchmarks
    /// and tests.
    pub fn instances_made_ahead_waiting(&self) -> usize {
        self.runner.instances_made_ahead_waiting()
    }

    /// The compiled runtime's cache file (to copy into images, or to check it exists),
    /// the runtime loaded now if it was left to its first use.
    pub fn cache_file(&self) -> Result<&std::path::Path, &Error> {
        Ok(&self.runner.loaded_runtime()?.cache_file)
    }

    /// Run `code` as a program (`__main__`) with `limits` and no tools.
    pub async fn run(&self, code: &str, limits: &Limits) -> Execution {
        self.run_with(code, &RunOptions::with_limits(limits.clone()))
            .await
    }

    /// Run `code` as a program with every option.
    pub async fn run_with(&self, code: &str, options: &RunOptions) -> Execution {
        self.runner
            .fresh(Task::Run(code.to_string()), options)
            .await
    }

    /// Load `code` as a module, call `function` with JSON `arguments` (a list for
    /// positional, an object for keyword arguments), and return its JSON result.
    pub async fn call_function(
        &self,
        code: &str,
        function: &str,
        arguments: &serde_json::Value,
        options: &RunOptions,
    ) -> Execution {
        match function_call(code, function, arguments) {
            Ok(call) => self.runner.fresh(Task::Call(call), options).await,
            Err(refused) => *refused,
        }
    }

    /// Which stdlib modules the guest has, which are absent and why, and the runtime's
    /// third-party packages.
    pub async fn module_report(&self) -> Result<ModuleReport, GuestFailure> {
        let execution = self
            .runner
            .fresh(Task::ListModules, &RunOptions::default())
            .await;
        if execution.status != Status::Ok {
            return Err(GuestFailure::of(execution, "the module report"));
        }
        let value = execution.return_value.unwrap_or_default();
        serde_json::from_value(value).map_err(|e| GuestFailure {
            status: Status::InternalError,
            error: ErrorInfo {
                kind: "InternalError".into(),
                message: format!("the guest's module report is malformed: {e}"),
                traceback: None,
            },
        })
    }

    /// Check `code` against `policy` without running it: every violation with its line
    /// and column (a syntax error is one), or why the check itself failed.
    pub async fn validate(
        &self,
        code: &str,
        policy: &Policy,
    ) -> Result<Vec<Violation>, GuestFailure> {
        let options = RunOptions {
            policy: Some(policy.clone()),
            ..RunOptions::default()
        };
        let execution = self
            .runner
            .fresh(Task::Check(code.to_string()), &options)
            .await;
        match execution.status {
            Status::Ok | Status::PolicyViolation => Ok(execution.violations),
            _ => Err(GuestFailure::of(execution, "the check")),
        }
    }

    /// The one run path, for sessions.
    pub(crate) fn runner(&self) -> &Runner {
        &self.runner
    }
}

/// The guest's call of `function` in `code` with `arguments` (shared by
/// [`Sandbox::call_function`] and [`Sandbox::call_compiled`]); refused unless the
/// arguments are a JSON list (positional) or object (keywords).
pub(crate) fn function_call(
    code: &str,
    function: &str,
    arguments: &serde_json::Value,
) -> Result<FunctionCall, Box<Execution>> {
    if !(arguments.is_array() || arguments.is_object()) {
        return Err(Box::new(Execution::refused(
            Status::InvalidInput,
            "arguments must be a JSON list (positional) or object (keywords)".into(),
        )));
    }
    Ok(FunctionCall {
        code: code.to_string(),
        function: function.to_string(),
        arguments: arguments.to_string(),
    })
}
