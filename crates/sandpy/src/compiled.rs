//! [`CompiledModule`]: a batch's module checked and compiled once, for many calls of its
//! functions (`sandpy call --args-file`, the Python package's `call_batch`), each call
//! still in a fresh instance that runs the module's top level itself.

use crate::bindings::{CompiledCall, Task};
use crate::execution::{Execution, Status};
use crate::{Policy, RunOptions, Sandbox, Tier};
use std::sync::Arc;

/// A module checked against a policy and compiled once, for many calls of its functions
/// ([`Sandbox::compile_module`], [`Sandbox::call_compiled`]). Each call is still a fresh
/// instance that runs the module's top level, but skips the guest's static check and
/// compile of the source, most of what a batch line cost over a fresh run
/// (docs/dev/performance.md, "Eval batches against fresh runs").
///
/// It holds the code object made by sandpy's own guest code from the source, with no
/// user code run: only [`Sandbox::compile_module`] makes one.
#[derive(Clone)]
pub struct CompiledModule {
    code: Arc<str>,
    /// `None` when the module was not compiled (it failed its check or its compile, or
    /// runs in the native tier): its calls are plain calls, which report why.
    compiled: Option<Compiled>,
}

/// What the compile answered and what it depended on.
#[derive(Clone)]
struct Compiled {
    /// The module's code object, marshalled by the runtime `runtime_id`.
    bytes: Arc<[u8]>,
    runtime_id: String,
    filename: Option<String>,
    policy: Option<Policy>,
}

impl CompiledModule {
    /// `code` not compiled: each call checks and compiles it, as [`Sandbox::call_function`]
    /// does (for a batch too small to gain from [`Sandbox::compile_module`]'s extra run).
    pub fn uncompiled(code: &str) -> CompiledModule {
        CompiledModule {
            code: Arc::from(code),
            compiled: None,
        }
    }

    /// The module's source.
    pub fn code(&self) -> &str {
        &self.code
    }

    /// Whether its calls skip the check and the compile (else each call does both, and
    /// reports what failed).
    pub fn is_compiled(&self) -> bool {
        self.compiled.is_some()
    }

    /// The code object when a call with `options` on `runtime_id` may use it: the same
    /// runtime, file name and policy, in the WebAssembly tier.
    fn for_call(&self, runtime_id: &str, options: &RunOptions) -> Option<&Compiled> {
        self.compiled.as_ref().filter(|c| {
            options.tier == Tier::Wasm
                && c.runtime_id == runtime_id
                && c.filename == options.filename
                && c.policy == options.policy
        })
    }
}

impl Sandbox {
    /// Check `code` against `options`' policy and compile it once, in a fresh instance
    /// that runs none of it, for [`Sandbox::call_compiled`]: a batch's calls then skip
    /// both. A module that fails either (or runs in the native tier) is returned
    /// uncompiled, and each call checks and compiles it again and says why it failed.
    /// For a batch of one call it costs a run more than [`Sandbox::call_function`].
    pub async fn compile_module(&self, code: &str, options: &RunOptions) -> CompiledModule {
        let mut module = CompiledModule::uncompiled(code);
        if options.tier != Tier::Wasm {
            return module;
        }
        // Only what the compile depends on: the run's files, stdin and tools are its calls'.
        let compile_options = RunOptions {
            limits: options.limits.clone(),
            limit_overrides: options.limit_overrides.clone(),
            filename: options.filename.clone(),
            policy: options.policy.clone(),
            cancel: options.cancel.clone(),
            ..RunOptions::default()
        };
        let execution = self
            .runner()
            .fresh(Task::Compile(code.to_string()), &compile_options)
            .await;
        module.compiled = compiled_bytes(&execution).map(|bytes| Compiled {
            bytes: bytes.into(),
            runtime_id: self.runner().runtime_id().to_string(),
            filename: options.filename.clone(),
            policy: options.policy.clone(),
        });
        if !module.is_compiled() {
            tracing::debug!(status = %execution.status, "the batch's module was not compiled");
        }
        module
    }

    /// [`Sandbox::call_function`] of `module`'s `function` in a fresh instance: without
    /// the check and the compile when `module` was compiled for `options`' file name,
    /// policy and this runtime; with them otherwise.
    pub async fn call_compiled(
        &self,
        module: &CompiledModule,
        function: &str,
        arguments: &serde_json::Value,
        options: &RunOptions,
    ) -> Execution {
        let Some(compiled) = module.for_call(self.runner().runtime_id(), options) else {
            return self
                .call_function(&module.code, function, arguments, options)
                .await;
        };
        let call = match crate::sandbox::function_call(&module.code, function, arguments) {
            Ok(call) => call,
            Err(refused) => return *refused,
        };
        let task = Task::CallCompiled(CompiledCall {
            call,
            compiled: compiled.bytes.to_vec(),
        });
        self.runner().fresh(task, options).await
    }
}

/// The code object of a compile run that succeeded.
fn compiled_bytes(execution: &Execution) -> Option<Vec<u8>> {
    use base64::Engine;
    if execution.status != Status::Ok {
        return None;
    }
    let text = execution.return_value.as_ref()?.as_str()?;
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}
