//! The discovery tools: `search_tools` and `get_tool_schema`, over the upstream tools the
//! server's allowlist lets runs call.

use super::arguments::{parses_as, Check};
use super::{structured, tool_error, ServerState};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::{tool, tool_router};
use sandpy::tools::signature::{self, Detail, SignatureLimits};
use sandpy::tools::{ToolHost, ToolSummary};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use std::num::NonZeroUsize;

/// How many tools `search_tools` returns when not told.
const SEARCH_LIMIT: usize = 10;

/// The argument checks of these tools.
pub(super) const CHECKS: [(&str, Check); 2] = [
    ("search_tools", parses_as::<SearchTools>),
    ("get_tool_schema", parses_as::<GetToolSchema>),
];

/// `search_tools`' arguments.
#[derive(Deserialize, JsonSchema)]
struct SearchTools {
    /// words to look for in tool names and descriptions
    query: String,
    /// how many tools to return at most
    #[schemars(extend("default" = SEARCH_LIMIT))]
    limit: Option<NonZeroUsize>,
}

/// `get_tool_schema`'s arguments.
#[derive(Deserialize, JsonSchema)]
struct GetToolSchema {
    /// the tool's name, as mcp__<server>__<tool>
    name: String,
}

#[tool_router(router = discovery_tools, vis = "pub(super)")]
impl ServerState {
    #[tool(
        description = "Find upstream MCP tools callable from run_python, best match first (deprecated tools last). \
                       Each result: name, the first line of its description, its arguments' types \
                       (name? when optional) and its Python signature; get_tool_schema gives a tool's full schema."
    )]
    async fn search_tools(&self, Parameters(args): Parameters<SearchTools>) -> CallToolResult {
        let limit = args.limit.map_or(SEARCH_LIMIT, NonZeroUsize::get);
        let tools = self.hub.list_tools();
        let found: Vec<ToolSummary> = sandpy::tools::search(&tools, &args.query, limit)
            .into_iter()
            .map(|tool| ToolSummary::of(tool, self.hub.output_schema(&tool.name).as_ref()))
            .collect();
        structured(json!({"tools": found}))
    }

    #[tool(
        description = "One upstream tool (name as mcp__<server>__<tool>): its input JSON schema, its \
                       outputSchema when it has one, and its Python signature (the types of its \
                       arguments and result, its description as the docstring)."
    )]
    async fn get_tool_schema(&self, Parameters(args): Parameters<GetToolSchema>) -> CallToolResult {
        let tool = args.name;
        match self.hub.tool(&tool) {
            Some(info) => {
                let output = self.hub.output_schema(&info.name);
                let limits = SignatureLimits::default();
                let signature = signature::stub(&info, output.as_ref(), Detail::Full, &limits);
                let mut answer = json!({"name": info.name, "description": info.description,
                    "inputSchema": info.input_schema, "signature": signature});
                if let Some(output) = output {
                    answer["outputSchema"] = output;
                }
                structured(answer)
            }
            None => tool_error(format!(
                "no allowed tool named {tool:?}; use search_tools to find one"
            )),
        }
    }
}
