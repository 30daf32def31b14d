//! The run tools: `run_python` (a program, alone or in a session) and
//! `call_python_function` (one function of a module, with JSON arguments).

use super::approval;
use super::arguments::{parses_as, Check};
use super::caller::Caller;
use super::leftovers;
use super::progress::ProgressStream;
use super::run_request::RunRequest;
use super::ServerState;
use crate::summary::summarize;
use rmcp::handler::server::tool::Extension;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject};
use rmcp::service::RequestContext;
use rmcp::{tool, tool_router, ErrorData, RoleServer};
use sandpy::{Execution, RunOptions};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::num::NonZeroU64;
use tracing::Instrument;

/// The in-sandbox API, taught in the `run_python` description (which the server completes
/// with the upstream servers).
const API_GUIDE: &str = "Run Python in a fresh sandbox. \
The value of the last expression is returned; print() output is captured.\n\
Files: the working directory is a private /tmp (pass `files` to put inputs there); files written \
under /output are returned with the result (images as images).\n\
Call MCP tools from the code (no imports needed):\n\
- `await call_mcp_tool(\"mcp__<server>__<tool>\", {...})` (or without await in plain sync code)\n\
- `tools.<server>.<tool>(**kwargs)` (names with - or . use _)\n\
- `discover_mcp_tools()`, `search_tools(query, limit=10)`, `get_tool_schema(name)`\n\
- `await asyncio.gather(...)` over calls runs them concurrently; failures raise `ToolError`.\n\
Results are the tool's structured content, else its text (JSON-decoded when it is JSON).\n\
Pass `session_id` to keep globals and imports between runs (like notebook cells).";

/// The argument checks of these tools.
pub(super) const CHECKS: [(&str, Check); 2] = [
    ("run_python", parses_as::<RunPython>),
    ("call_python_function", parses_as::<CallPythonFunction>),
];

/// `run_python`'s arguments.
#[derive(Deserialize, JsonSchema)]
struct RunPython {
    /// Python source
    code: String,
    /// wall-clock limit in ms (at most the server's limit)
    timeout_ms: Option<NonZeroU64>,
    /// tool names or globs this run may use (narrows the server's allowlist)
    allowed_tools: Option<Vec<String>>,
    /// run in this session: globals and imports persist between runs with the same id
    session_id: Option<String>,
    /// input files, put in /tmp (the working directory) before the code runs
    files: Option<Vec<FileArg>>,
    /// wasm, or native (compiled packages such as numpy); without it, the server's tier
    tier: Option<TierArg>,
}

/// The tiers a request may name.
#[derive(Deserialize, JsonSchema, Clone, Copy)]
#[serde(rename_all = "lowercase")]
#[schemars(inline)]
enum TierArg {
    Wasm,
    Native,
}

/// Why a request may not name its tier where the operator does not allow it.
const TIER_NOT_CHOSEN: &str =
    "this server does not let requests choose their tier (sandpy.native.per_run): leave out `tier`";

/// The run tools' `inputSchema` where the operator does not let requests choose their
/// tier: without `tier`, so that the schema lists only what a caller may send.
pub(super) fn without_tier(tool: &mut rmcp::model::Tool) {
    if !CHECKS.iter().any(|(name, _)| *name == tool.name) {
        return;
    }
    let mut schema = tool.input_schema.as_ref().clone();
    if let Some(Value::Object(properties)) = schema.get_mut("properties") {
        properties.remove("tier");
    }
    tool.input_schema = std::sync::Arc::new(schema);
}

impl ServerState {
    /// A run tool's `arguments` that name a tier (any value) where the operator does not
    /// let requests choose it: the refusal, a tool error saying why, before the value is
    /// parsed (a made-up tier is refused for the same reason, not for its spelling).
    pub(super) fn tier_refused(&self, tool: &str, arguments: &Value) -> Option<CallToolResult> {
        let names_tier = arguments.get("tier").is_some_and(|tier| !tier.is_null());
        if self.tier_per_run || !names_tier || !CHECKS.iter().any(|(name, _)| *name == tool) {
            return None;
        }
        let message = format!("`tier` refused: {TIER_NOT_CHOSEN}");
        Some(self.refused_run(sandpy::Status::InvalidInput, message))
    }

    /// The tier a request asked for, or why it may not choose.
    fn requested_tier(&self, tier: Option<TierArg>) -> Result<Option<sandpy::Tier>, String> {
        let Some(tier) = tier else {
            return Ok(None);
        };
        if !self.tier_per_run {
            return Err(TIER_NOT_CHOSEN.into());
        }
        let tier = match tier {
            TierArg::Wasm => sandpy::Tier::Wasm,
            TierArg::Native => sandpy::Tier::Native,
        };
        Ok(Some(tier))
    }
}

/// `call_python_function`'s arguments.
#[derive(Deserialize, JsonSchema)]
struct CallPythonFunction {
    /// Python source
    code: String,
    /// name of the function to call
    function: String,
    /// the function's arguments
    #[serde(default)]
    arguments: Arguments,
    /// wall-clock limit in ms (at most the server's limit)
    timeout_ms: Option<NonZeroU64>,
    /// input files, put in /tmp (the working directory) before the code runs
    files: Option<Vec<FileArg>>,
    /// wasm, or native (compiled packages such as numpy); without it, the server's tier
    tier: Option<TierArg>,
}

// One input file: `path` and exactly one of `text` and `content_base64` (checked by
// `input_files`). Inlined and without a doc comment (it would become the items'
// description), so that the `files` schema reads as one piece.
#[derive(Deserialize, JsonSchema)]
#[schemars(inline)]
struct FileArg {
    /// relative to /tmp, e.g. data.csv
    path: String,
    /// content as UTF-8 text
    text: Option<String>,
    /// content as base64 (binary files)
    content_base64: Option<String>,
}

/// A function's JSON arguments.
#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(
    untagged,
    expecting = "`arguments` must be a list (positional) or an object (keyword arguments)"
)]
#[schemars(inline)]
enum Arguments {
    /// positional arguments
    Positional(Vec<Value>),
    /// keyword arguments
    Keyword(JsonObject),
}

impl Default for Arguments {
    fn default() -> Self {
        Arguments::Positional(Vec::new())
    }
}

impl Arguments {
    fn into_value(self) -> Value {
        match self {
            Arguments::Positional(list) => Value::Array(list),
            Arguments::Keyword(map) => Value::Object(map),
        }
    }
}

/// The `files` argument as the library's input files: decoded, each with exactly one of
/// `text` and `content_base64`.
fn input_files(files: Option<Vec<FileArg>>) -> Result<Vec<sandpy::files::InputFile>, String> {
    use base64::Engine;
    let files = files.unwrap_or_default();
    files
        .into_iter()
        .enumerate()
        .map(|(i, file)| {
            let content = match (file.text, file.content_base64) {
                (Some(text), None) => text.into_bytes(),
                (None, Some(encoded)) => base64::engine::general_purpose::STANDARD
                    .decode(encoded)
                    .map_err(|e| format!("`files[{i}].content_base64` is not base64: {e}"))?,
                _ => {
                    return Err(format!(
                        "`files[{i}]` needs exactly one of `text` and `content_base64`"
                    ))
                }
            };
            Ok(sandpy::files::InputFile {
                path: file.path,
                content,
            })
        })
        .collect()
}

/// The content item of the `i`th rich output: its richest format, an image as
/// `ImageContent` (`whole`, as the run made it), a text (HTML, Markdown, ...) as text
/// that names its mime type (`cut`, bounded as the model is shown text). A result with
/// only `text/plain` has none: the summary shows the return value already.
fn output_block(
    i: usize,
    whole: &sandpy::RichOutput,
    cut: &sandpy::RichOutput,
) -> Option<ContentBlock> {
    let (mime, data) = whole.richest();
    if sandpy::RichOutput::is_binary(mime) {
        return Some(ContentBlock::image(data.to_string(), mime.to_string()));
    }
    if mime == "text/plain" && whole.kind == sandpy::RichOutputKind::Result {
        return None;
    }
    let text = cut.get(mime).unwrap_or_default();
    Some(ContentBlock::text(format!(
        "--- output {} ({mime}) ---\n{text}",
        i + 1
    )))
}

#[tool_router(router = run_tools, vis = "pub(super)")]
impl ServerState {
    #[tool(description = API_GUIDE)]
    async fn run_python(
        &self,
        Parameters(args): Parameters<RunPython>,
        Extension(caller): Extension<Caller>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let _in_flight = self.hub.metrics().run_started();
        let id = self.next_execution_id();
        let (files, tier) = match self.files_and_tier(args.files, args.tier) {
            Ok(checked) => checked,
            Err(refused) => return Ok(refused),
        };
        let request = RunRequest {
            timeout_ms: args.timeout_ms,
            allowed_tools: args.allowed_tools,
            files,
            tier,
        };
        let mut options = self.options(id.clone(), request);
        let _turn = match self.share(&caller, &options, &context).await {
            Ok(turn) => turn,
            Err(refused) => {
                return Ok(
                    self.refused_for_share(&id, &caller, &args.code, &options, refused, &context)
                )
            }
        };
        let stream = live(self, &context, &mut options);
        let span = run_span("run_python", &id, &caller, &options, &context);
        let execution = match &args.session_id {
            None => {
                self.sandbox
                    .run_with(&args.code, &options)
                    .instrument(span.clone())
                    .await
            }
            Some(session) => {
                let sessions = self.sessions.of(&caller.tenant);
                let run = sessions.run(session, &args.code, &options);
                run.instrument(span.clone()).await
            }
        };
        span.record("status", execution.status.as_str());
        if let Some(stream) = stream {
            stream.finish().await;
        }
        let links = reads_links(&context);
        let result = self.execution_result(&id, &caller, &args.code, &options, execution, links);
        Ok(result)
    }

    #[tool(
        description = "Load Python code as a module in a fresh sandbox and call one of its functions with JSON arguments \
                       (a list for positional, an object for keyword arguments); returns the JSON result."
    )]
    async fn call_python_function(
        &self,
        Parameters(args): Parameters<CallPythonFunction>,
        Extension(caller): Extension<Caller>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let _in_flight = self.hub.metrics().run_started();
        let id = self.next_execution_id();
        let (files, tier) = match self.files_and_tier(args.files, args.tier) {
            Ok(checked) => checked,
            Err(refused) => return Ok(refused),
        };
        let request = RunRequest {
            timeout_ms: args.timeout_ms,
            files,
            tier,
            ..RunRequest::default()
        };
        let mut options = self.options(id.clone(), request);
        let _turn = match self.share(&caller, &options, &context).await {
            Ok(turn) => turn,
            Err(refused) => {
                return Ok(
                    self.refused_for_share(&id, &caller, &args.code, &options, refused, &context)
                )
            }
        };
        let stream = live(self, &context, &mut options);
        let arguments = args.arguments.into_value();
        let span = run_span("call_python_function", &id, &caller, &options, &context);
        let execution = self
            .sandbox
            .call_function(&args.code, &args.function, &arguments, &options)
            .instrument(span.clone())
            .await;
        span.record("status", execution.status.as_str());
        if let Some(stream) = stream {
            stream.finish().await;
        }
        let links = reads_links(&context);
        let result = self.execution_result(&id, &caller, &args.code, &options, execution, links);
        Ok(result)
    }
}

/// An execution as a remote caller (over HTTP) is shown it: the message of a failure of
/// the sandbox itself (`internal_error`: a run folder that could not be made, a mount that
/// could not be opened) names the server's paths, so it is logged and the caller is told
/// where to look instead. The audit log keeps it whole.
fn without_server_paths(id: &str, mut execution: Execution) -> Execution {
    if execution.status != sandpy::Status::InternalError {
        return execution;
    }
    if let Some(error) = &mut execution.error {
        tracing::warn!(execution_id = id, "internal error: {}", error.message);
        error.message = format!(
            "the sandbox failed on the server, not because of the code; its log has why (execution {id})"
        );
    }
    execution
}

/// Whether the client reads `resource_link` content items (protocol 2025-06-18 and later).
fn reads_links(context: &RequestContext<RoleServer>) -> bool {
    let version = context.protocol_version();
    version.is_some_and(|v| v >= rmcp::model::ProtocolVersion::V_2025_06_18)
}

/// The span of one run (`run_python`, `call_python_function`), joined to the client's
/// trace when the request's `_meta` carries one; its `status` is recorded at the end.
fn run_span(
    name: &'static str,
    execution_id: &str,
    caller: &Caller,
    options: &RunOptions,
    context: &RequestContext<RoleServer>,
) -> tracing::Span {
    let tier = match options.tier {
        sandpy::Tier::Wasm => "wasm",
        sandpy::Tier::Native => "native",
    };
    let span = tracing::info_span!(
        "run",
        otel.name = name,
        otel.kind = "server",
        execution_id,
        tenant = %caller.tenant.id,
        tier,
        status = tracing::field::Empty,
    );
    crate::telemetry::join(&span, &context.meta);
    span
}

/// A run's options for this request: cancelled with the request (the client's
/// `notifications/cancelled`, or its session closing); calls that need approval asked of
/// the client's user; and when the request carries a `progressToken`, the run's output and
/// tool calls sent as `notifications/progress` while it runs (the stream to finish when it
/// ends).
fn live(
    state: &ServerState,
    context: &RequestContext<RoleServer>,
    options: &mut RunOptions,
) -> Option<ProgressStream> {
    options.cancel = Some(context.ct.clone());
    options.approver = Some(approval::approver(context.peer.clone()));
    let token = context.meta.get_progress_token()?;
    let metrics = state.hub.metrics().clone();
    let (stream, output, calls) = ProgressStream::start(context.peer.clone(), token, metrics);
    options.on_output = Some(output);
    options.on_tool_call = Some(calls);
    Some(stream)
}

impl ServerState {
    /// The answer to a run asked for while the server drains: `busy`, nothing ran.
    pub(super) fn refused_while_draining(&self) -> CallToolResult {
        let message =
            "the server is shutting down and takes no new runs; retry (on another replica)";
        self.refused_run(sandpy::Status::Busy, message.into())
    }

    /// Arguments of `tool` that do not fit its inputSchema, as a tool error the model can
    /// read and correct (the 2025-11-25 tools page, SEP-1303), not a protocol error: for a
    /// tool that runs code an `invalid_input` execution, as any refused run; else the text.
    pub(super) fn refused_arguments(&self, tool: &str, message: String) -> CallToolResult {
        if CHECKS.iter().any(|(name, _)| *name == tool) {
            return self.refused_run(sandpy::Status::InvalidInput, message);
        }
        CallToolResult::error(vec![ContentBlock::text(message)])
    }

    /// A request's input files and tier, or its refusal as an `invalid_input` run (a tool
    /// error the model can correct, not a protocol error).
    fn files_and_tier(
        &self,
        files: Option<Vec<FileArg>>,
        tier: Option<TierArg>,
    ) -> Result<(Vec<sandpy::files::InputFile>, Option<sandpy::Tier>), CallToolResult> {
        let checked = input_files(files).and_then(|files| Ok((files, self.requested_tier(tier)?)));
        checked.map_err(|why| self.refused_run(sandpy::Status::InvalidInput, why))
    }

    /// A slot of the caller's tenant's share of the run slots ([`super::shares`]), waited
    /// for at most the run's timeout; `None` for the process's own client (stdio), alone.
    async fn share(
        &self,
        caller: &Caller,
        options: &RunOptions,
        context: &RequestContext<RoleServer>,
    ) -> Result<Option<super::shares::Turn<'_>>, super::shares::NoShare> {
        if !caller.shares_slots {
            return Ok(None);
        }
        let patience = options.effective_limits().timeout;
        let turn = self.shares.take(&caller.tenant.id, patience, &context.ct);
        Ok(Some(turn.await?))
    }

    /// A run refused for its tenant's share: audited and counted as any run that ended.
    fn refused_for_share(
        &self,
        id: &str,
        caller: &Caller,
        code: &str,
        options: &RunOptions,
        refused: super::shares::NoShare,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let execution = Execution::refused(refused.status(), refused.to_string());
        self.execution_result(id, caller, code, options, execution, reads_links(context))
    }

    /// A run refused before it started, as a tool result shaped as every run's.
    fn refused_run(&self, status: sandpy::Status, message: String) -> CallToolResult {
        let execution = Execution::refused(status, message);
        let bounded = self.model_output.bound(&execution);
        let mut result = CallToolResult::error(vec![ContentBlock::text(summarize(&bounded))]);
        result.structured_content = Some(bounded.to_json());
        result
    }

    /// An execution as a tool result: its summary, its rich outputs, then its output
    /// files; `isError` unless it ended `ok`. The summary and the structured content are
    /// the execution bounded by the config's `model_output` (long texts cut and marked,
    /// `truncated` listing them; file bytes only in the file items). Files, and images too
    /// big to send inline, are kept as resources of the caller's MCP session and linked
    /// (`links`: the client reads `resource_link` items; [`leftovers`]). Audited, whole and
    /// with the caller's tenant, when the config asks.
    fn execution_result(
        &self,
        id: &str,
        caller: &Caller,
        code: &str,
        options: &RunOptions,
        execution: Execution,
        links: bool,
    ) -> CallToolResult {
        if let Some(audit) = &self.audit {
            let tenant = &caller.tenant.id;
            audit.execution(id, tenant, code, &options.effective_limits(), &execution);
        }
        let duration = std::time::Duration::from_secs_f64(execution.duration_ms.max(0.0) / 1e3);
        let metrics = self.hub.metrics();
        metrics.run(options.tier, execution.status, duration);
        let execution = if caller.remote {
            without_server_paths(id, execution)
        } else {
            execution
        };
        let bounded = self.model_output.bound(&execution);
        let ok = execution.is_ok();
        let (files, outputs) = (&execution.files, &execution.outputs);
        let kept = leftovers::keep(&self.resources, &caller.owner, files, outputs, links);
        let mut content = vec![ContentBlock::text(summarize(&bounded))];
        let shown = execution.outputs.iter().zip(&bounded.execution.outputs);
        content.extend(shown.enumerate().filter_map(|(i, (whole, cut))| {
            kept.output_item(i).or_else(|| output_block(i, whole, cut))
        }));
        content.extend(kept.file_items(&execution.files));
        let mut result = if ok {
            CallToolResult::success(content)
        } else {
            CallToolResult::error(content)
        };
        let mut structured = bounded.to_json();
        kept.describe(&mut structured);
        result.structured_content = Some(structured);
        result
    }
}
