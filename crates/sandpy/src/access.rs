//! What one run may reach outside its sandbox ([`Access`]): its tools ([`ToolAccess`]: the
//! allowlist, the call and size limits, the deadline, the journal of a session) and its
//! network ([`NetworkAccess`]). Both tiers serve the guest's requests through it: the
//! WebAssembly host functions (`wasm/host.rs`) and the native tier's channel
//! (`native/serve.rs`) only forward to it.

use crate::bindings::ToolCall;
use crate::execution::Status;
use crate::network::NetworkAccess;
use crate::options::ToolCallSink;
use crate::plan::Deadline;
use crate::tools::approval::Approval;
use crate::tools::search::{self, ToolSummary};
use crate::tools::signature;
use crate::tools::{Allowlist, RecordedCall, ToolError, ToolHost, ToolInfo};
use crate::verdict::Refusal;
use crate::{Limits, RunOptions};
use futures::stream::{FuturesUnordered, StreamExt};
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

/// What one run may reach outside its sandbox, handed around by both tiers as one value.
pub(crate) struct Access {
    pub tools: ToolAccess,
    /// The run's network, when the operator gave it one.
    pub network: Option<NetworkAccess>,
}

impl Access {
    /// What a run may reach under its options (tools and network narrowed by its policy),
    /// until `deadline`; the run's refusal when the allowlist or approval patterns are
    /// invalid.
    pub(crate) fn for_run(
        options: &RunOptions,
        limits: &Limits,
        deadline: Deadline,
    ) -> Result<Access, Refusal> {
        let network = options.network.clone().map(|network| {
            let narrowed = options
                .policy
                .as_ref()
                .and_then(|p| p.network_allow.clone());
            NetworkAccess::new(network, narrowed, deadline)
        });
        Ok(Access {
            tools: ToolAccess::for_run(options, limits, deadline)?,
            network,
        })
    }
}

/// What one run may do with tools, and what it did.
#[derive(Clone)]
pub(crate) struct ToolAccess {
    pub host: Option<Arc<dyn ToolHost>>,
    pub allowlist: Allowlist,
    /// Which calls wait for approval, and who gives it.
    pub approval: Approval,
    /// Told of each call as it leaves the sandbox.
    pub on_call: Option<ToolCallSink>,
    pub max_calls: usize,
    pub max_bytes: usize,
    /// Time one call may take, unless the run's deadline comes first.
    pub tool_timeout: Duration,
    /// When the run's time ends.
    pub deadline: Deadline,
    /// What the run waits for, named: calls sent to the host and not answered yet (their
    /// batch position), approvals (the same), and servers still starting (no position). A
    /// run that reaches its deadline names these.
    pub waiting: Vec<(Option<usize>, String)>,
    pub calls: usize,
    pub limit_hit: bool,
    /// Calls made, kept when the run is part of a session journal.
    pub recorded: Option<Vec<RecordedCall>>,
    /// Answers to give instead of calling tools, when replaying a journal.
    pub replay: Option<std::collections::VecDeque<RecordedCall>>,
}

impl ToolAccess {
    /// The tools a run may use under its options (allowlist narrowed by its policy), or
    /// the run's refusal when the allowlist or approval patterns are invalid.
    pub(crate) fn for_run(
        options: &RunOptions,
        limits: &Limits,
        deadline: Deadline,
    ) -> Result<ToolAccess, Refusal> {
        let policy_tools = options
            .policy
            .as_ref()
            .and_then(|p| p.allowed_tools.as_deref());
        let allowlist = Allowlist::new(options.allowed_tools.as_deref())
            .and_then(|l| l.narrow(policy_tools))
            .map_err(|e| Refusal::new(Status::InvalidInput, e.to_string()))?;
        let policy_approve = options.policy.iter().flat_map(|p| &p.approve);
        let approve: Vec<&String> = options.approve.iter().chain(policy_approve).collect();
        let approval = Approval::new(&approve, options.approver.clone())
            .map_err(|e| Refusal::new(Status::InvalidInput, e.to_string()))?;
        Ok(ToolAccess {
            host: options.tools.clone(),
            allowlist,
            approval,
            on_call: options.on_tool_call.clone(),
            max_calls: limits.tool_calls,
            max_bytes: limits.tool_result_bytes,
            tool_timeout: limits.tool_timeout,
            deadline,
            waiting: Vec::new(),
            calls: 0,
            limit_hit: false,
            recorded: None,
            replay: None,
        })
    }

    /// The tools of the calls still waiting for an answer, in call order.
    pub(crate) fn waiting_for(&self) -> Vec<String> {
        self.waiting.iter().map(|(_, name)| name.clone()).collect()
    }

    /// The time limit of a call starting now (see [`Deadline::call_timeout`]).
    fn call_timeout(&self) -> Option<Duration> {
        self.deadline.call_timeout(self.tool_timeout)
    }

    /// Let the host make `missing` tools (or, when empty, any tools it is still
    /// starting) available, within the time a call may take. A run that reaches its
    /// deadline meanwhile names the servers it was waiting for.
    async fn prepare(&mut self, missing: &[String]) {
        let Some(host) = &self.host else {
            return;
        };
        let prepared = host.prepare(missing);
        let waited_before = self.waiting.len();
        if missing.is_empty() {
            let starting = "the tool servers still starting".to_string();
            self.waiting.push((None, starting));
        }
        for name in missing {
            let starting = format!("the server of {name} to start");
            self.waiting.push((None, starting));
        }
        match self.call_timeout() {
            None => prepared.await,
            Some(limit) => drop(tokio::time::timeout(limit, prepared).await),
        }
        self.waiting.truncate(waited_before);
    }

    fn allowed_tools(&self) -> Vec<ToolInfo> {
        let Some(host) = &self.host else {
            return Vec::new();
        };
        host.list_tools()
            .into_iter()
            .filter(|t| self.allowlist.allows(&t.name))
            .collect()
    }

    /// Check one call before it leaves the sandbox. `budget` is what the batch's
    /// arguments may still take on the host once parsed; the call's share is taken from
    /// it before its arguments are parsed.
    fn admit(&self, call: &ToolCall, budget: &mut usize) -> Result<serde_json::Value, String> {
        let Some(host) = &self.host else {
            return Err("no tools are configured for this sandbox".into());
        };
        if !self.allowlist.allows(&call.name) {
            return Err(self.allowlist.refusal(&call.name));
        }
        if !host.has_tool(&call.name) {
            return Err(host.explain_missing(&call.name));
        }
        if call.arguments.len() > self.max_bytes {
            return Err(format!(
                "arguments of {} are {} bytes, over the limit of {} bytes",
                call.name,
                call.arguments.len(),
                self.max_bytes
            ));
        }
        let held = held_bytes(&call.arguments);
        if held > *budget {
            let limit = batch_budget(self.max_bytes);
            return Err(format!(
                "arguments of {} would take about {held} bytes on the host once parsed, more than the {} bytes left of the batch's limit of {limit} bytes ({BATCH_BUDGET_FACTOR} times tool_result_bytes)",
                call.name, *budget
            ));
        }
        *budget -= held;
        match serde_json::from_str(&call.arguments) {
            Ok(value @ serde_json::Value::Object(_)) => Ok(value),
            Ok(_) => Err(format!("arguments of {} must be a JSON object", call.name)),
            Err(e) => Err(format!(
                "arguments of {} are not valid JSON: {e}",
                call.name
            )),
        }
    }
}

impl ToolAccess {
    /// `call-tools`: the calls of one batch, concurrently, each checked first; one
    /// answer per call, in order. Errors end the run (the call limit, a replay that
    /// diverged).
    pub(crate) async fn call_tools(
        &mut self,
        calls: Vec<ToolCall>,
    ) -> wasmtime::Result<Vec<Result<String, String>>> {
        let access = self;
        if access.calls + calls.len() > access.max_calls {
            access.limit_hit = true;
            wasmtime::bail!("tool call limit of {} reached", access.max_calls);
        }
        access.calls += calls.len();
        if let Some(replay) = &mut access.replay {
            let mut answers = Vec::with_capacity(calls.len());
            for call in &calls {
                match replay.pop_front() {
                    Some(recorded) if recorded.name == call.name => {
                        answers.push(recorded.result.map_err(|e| e.message))
                    }
                    other => wasmtime::bail!(
                        "session replay diverged: the code called {:?} where the journal has {:?}",
                        call.name,
                        other.map(|r| r.name)
                    ),
                }
            }
            if let Some(recorded) = &mut access.recorded {
                let calls = calls.iter().zip(&answers);
                recorded.extend(calls.map(|(call, result)| RecordedCall {
                    name: call.name.clone(),
                    result: result.clone().map_err(ToolError::from),
                }));
            }
            return Ok(answers);
        }
        let timeout = access.call_timeout();
        // Tools the host does not know (yet): it may be starting or retrying their server.
        let missing: Vec<String> = match &access.host {
            Some(host) => calls
                .iter()
                .filter(|c| access.allowlist.allows(&c.name) && !host.has_tool(&c.name))
                .map(|c| c.name.clone())
                .collect(),
            None => Vec::new(),
        };
        if !missing.is_empty() {
            access.prepare(&missing).await;
        }
        let mut results: Vec<Option<Result<serde_json::Value, String>>> = vec![None; calls.len()];
        let mut pending = FuturesUnordered::new();
        let mut budget = batch_budget(access.max_bytes);
        for (i, call) in calls.iter().enumerate() {
            let (arguments, host) = match (access.admit(call, &mut budget), &access.host) {
                (Ok(arguments), Some(host)) => (arguments, host.clone()),
                (Err(reason), host) => {
                    if let Some(host) = host {
                        host.refused(&call.name, &reason);
                    }
                    results[i] = Some(Err(reason));
                    continue;
                }
                (Ok(_), None) => {
                    results[i] = Some(Err("no tools are configured".to_string()));
                    continue;
                }
            };
            if access.approval.needed(&call.name) {
                // Asked in call order; a run that reaches its deadline meanwhile names
                // the approval it was waiting for.
                let waiting = format!("the approval of {}", call.name);
                access.waiting.push((Some(i), waiting));
                let decision = access.approval.decide(&call.name, &arguments).await;
                access.waiting.retain(|(j, _)| *j != Some(i));
                host.decided(&call.name, &arguments, &decision);
                if !decision.approved {
                    results[i] = Some(Err(decision.refusal(&call.name)));
                    continue;
                }
            }
            if let Some(on_call) = &access.on_call {
                on_call(&call.name);
            }
            let call_future = host.call_tool(&call.name, arguments);
            let name = call.name.clone();
            access.waiting.push((Some(i), name.clone()));
            let span = tracing::info_span!(
                "tool_call",
                otel.kind = "client",
                tool = %name,
                status = tracing::field::Empty,
                bytes = tracing::field::Empty,
            );
            let recorded = span.clone();
            pending.push(
                async move {
                    let result = match timeout {
                        None => call_future.await,
                        Some(limit) => tokio::time::timeout(limit, call_future)
                            .await
                            .unwrap_or_else(|_| {
                                let ms = limit.as_millis();
                                Err(format!(
                                    "tool {name} timed out after {ms} ms (tool_timeout_ms)"
                                )
                                .into())
                            }),
                    };
                    // Measured only for a span that is kept (traces on): it costs a pass.
                    if !recorded.is_disabled() {
                        let (status, bytes) = match &result {
                            Ok(value) => ("ok", value.to_string().len()),
                            Err(e) => ("error", e.message.len()),
                        };
                        recorded.record("status", status);
                        recorded.record("bytes", i64::try_from(bytes).unwrap_or(i64::MAX));
                    }
                    (i, result.map_err(|e| e.message))
                }
                .instrument(span),
            );
        }
        // Answers as they come, so that a run stopped by its deadline knows which calls
        // were still out.
        while let Some((i, result)) = pending.next().await {
            access.waiting.retain(|(j, _)| *j != Some(i));
            results[i] = Some(result);
        }
        let max_bytes = access.max_bytes;
        let answers: Vec<Result<String, String>> = calls
            .iter()
            .zip(results)
            .map(|(call, result)| {
                let value = result
                    .unwrap_or_else(|| Err("the call got no answer".into()))
                    .map_err(|message| bound_error(&call.name, message, max_bytes))?;
                // `Display` is serde_json's own compact form, compiled in serde_json (fast
                // in debug builds too, unlike a `to_string` made generic here).
                let text = value.to_string();
                if text.len() > max_bytes {
                    return Err(format!(
                        "result of {} is {} bytes, over the limit of {max_bytes} bytes",
                        call.name,
                        text.len()
                    ));
                }
                Ok(text)
            })
            .collect();
        if let Some(recorded) = &mut access.recorded {
            let calls = calls.iter().zip(&answers);
            recorded.extend(calls.map(|(call, result)| RecordedCall {
                name: call.name.clone(),
                result: result.clone().map_err(ToolError::from),
            }));
        }
        Ok(answers)
    }

    /// `list-tools`: the allowed tools as a JSON array.
    pub(crate) async fn list_tools(&mut self) -> wasmtime::Result<String> {
        self.prepare(&[]).await;
        Ok(serde_json::to_string(&self.allowed_tools())?)
    }

    /// `tool-schema`: one allowed tool's `{inputSchema, signature}` (its input schema, and
    /// its stub as Python, [`crate::tools::signature`]), or why not.
    pub(crate) async fn tool_schema(
        &mut self,
        name: String,
    ) -> wasmtime::Result<Result<String, String>> {
        if !self.allowlist.allows(&name) {
            return Ok(Err(self.allowlist.refusal(&name)));
        }
        if let Some(host) = &self.host {
            if !host.has_tool(&name) {
                self.prepare(std::slice::from_ref(&name)).await;
            }
        }
        let found = self.host.as_ref().and_then(|host| host.tool(&name));
        Ok(match (found, &self.host) {
            (Some(tool), Some(host)) => {
                let output = host.output_schema(&name);
                let signature = signature::stub(
                    &tool,
                    output.as_ref(),
                    signature::Detail::Full,
                    &signature::SignatureLimits::default(),
                );
                let answer =
                    serde_json::json!({"inputSchema": tool.input_schema, "signature": signature});
                Ok(serde_json::to_string(&answer)?)
            }
            (None, Some(host)) => Err(host.explain_missing(&name)),
            (_, None) => Err("no tools are configured for this sandbox".into()),
        })
    }

    /// `tool-names`: the allowed tools' names.
    pub(crate) async fn tool_names(&mut self) -> wasmtime::Result<Vec<String>> {
        self.prepare(&[]).await;
        let Some(host) = &self.host else {
            return Ok(Vec::new());
        };
        let mut names = host.tool_names();
        names.retain(|name| self.allowlist.allows(name));
        Ok(names)
    }

    /// `search-tools`: allowed tools ranked for `query`, as a JSON array.
    pub(crate) async fn search_tools(
        &mut self,
        query: String,
        limit: u32,
    ) -> wasmtime::Result<String> {
        self.prepare(&[]).await;
        let allowed = self.allowed_tools();
        let found: Vec<ToolSummary> = search::search(&allowed, &query, limit as usize)
            .into_iter()
            .map(|tool| {
                let output = self.host.as_ref().and_then(|h| h.output_schema(&tool.name));
                ToolSummary::of(tool, output.as_ref())
            })
            .collect();
        Ok(serde_json::to_string(&found)?)
    }
}

/// How many times the per-argument size cap (`tool_result_bytes`) the arguments of one
/// batch may take on the host once parsed, all calls together.
const BATCH_BUDGET_FACTOR: usize = 16;

/// What one JSON value is taken to hold on the host once parsed, besides its text: a
/// `serde_json::Value` is 32 bytes, a Python object for it (a host tool's argument) more.
const VALUE_BYTES: usize = 32;

/// What the arguments of one batch may take on the host once parsed.
fn batch_budget(max_bytes: usize) -> usize {
    max_bytes.saturating_mul(BATCH_BUDGET_FACTOR)
}

/// What `json` takes on the host once parsed, about: its text and [`VALUE_BYTES`] per
/// value. Counted on the text, before anything is parsed: `[[],[],...]` is 2 bytes of
/// text per value but a list object per value on the host, so the text's size alone
/// does not bound it.
fn held_bytes(json: &str) -> usize {
    let (mut values, mut in_string, mut escaped, mut in_scalar) = (0usize, false, false, false);
    for byte in json.bytes() {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => {
                in_string = true;
                in_scalar = false;
                values += 1;
            }
            b'[' | b'{' => {
                in_scalar = false;
                values += 1;
            }
            b',' | b':' | b']' | b'}' | b' ' | b'\t' | b'\n' | b'\r' => in_scalar = false,
            _ if in_scalar => {}
            _ => {
                in_scalar = true;
                values += 1;
            }
        }
    }
    values
        .saturating_mul(VALUE_BYTES)
        .saturating_add(json.len())
}

/// A tool's error message as the guest gets it: one over `max_bytes` is replaced by a
/// message naming the tool, the size and the limit, and its start.
fn bound_error(tool: &str, message: String, max_bytes: usize) -> String {
    if message.len() <= max_bytes {
        return message;
    }
    let mut end = 1024.min(max_bytes);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "the error message of {tool} is {} bytes, over the limit of {max_bytes} bytes; it begins: {}[... {} more bytes]",
        message.len(),
        &message[..end],
        message.len() - end
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_bytes_counts_values_outside_strings() {
        assert_eq!(held_bytes("{}"), VALUE_BYTES + 2);
        assert_eq!(held_bytes(r#"{"a": [1, 22, true]}"#), 6 * VALUE_BYTES + 20);
        // Brackets, commas and escaped quotes inside a string are its text, not values.
        let text = r#"{"k": "[[],[],\"{,}\"]"}"#;
        assert_eq!(held_bytes(text), 3 * VALUE_BYTES + text.len());
        // Two bytes of text per value: sixteen times that on the host.
        let nested = format!("{{\"a\": [{}[]]}}", "[],".repeat(1000));
        assert_eq!(held_bytes(&nested), 1004 * VALUE_BYTES + nested.len());
    }
}
