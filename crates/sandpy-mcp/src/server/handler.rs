//! The MCP handler: `initialize`'s answer, the tool list, the resources this MCP session's
//! runs left, and each tool call checked, given its caller and routed to its tool.

use super::tool_list::STARTING_WAIT;
use super::{invalid, resources, run, SandpyServer};
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities,
    ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{tool_handler, ErrorData, RoleServer, ServerHandler};
use serde_json::Value;
use std::sync::atomic::Ordering;

/// What `initialize` tells a client of the server's purpose.
const INSTRUCTIONS: &str =
    "Write one Python program that orchestrates many tools instead of calling them one by one: \
                            use run_python; find tools with search_tools.";

#[tool_handler(router = self.state.tools)]
impl ServerHandler for SandpyServer {
    /// Tools, and resources: the files this MCP session's runs left.
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_resources()
            .build();
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("sandpy", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS.to_string())
    }

    /// The files this caller's runs left through this MCP session, all in one page.
    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let owner = self.caller(&context).owner;
        let cursor = request.and_then(|r| r.cursor);
        resources::list(&self.state.resources, &owner, cursor, &context)
    }

    /// A file one of this caller's runs left through this MCP session; any other URI is
    /// `resource not found` (-32002, the URI in `data`), someone else's too.
    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let owner = self.caller(&context).owner;
        resources::read(&self.state.resources, &owner, &request.uri)
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        // Every tool is in the one page: no cursor was ever handed out, so any is invalid
        // (the pagination page: an invalid cursor SHOULD get -32602).
        if let Some(cursor) = request.and_then(|r| r.cursor) {
            return Err(invalid(format!(
                "invalid cursor {cursor:?}: this server lists every tool in one page (no nextCursor)"
            )));
        }
        // Servers still starting: wait a little, so the description says how they are.
        self.state.hub.wait_started(STARTING_WAIT).await;
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    /// Check the arguments by parsing them as the tool's parameters, then call it for its
    /// caller. Arguments that do not fit are a tool error naming the field (`isError`, so
    /// that the model corrects its call); an unknown tool is a protocol error
    /// (`invalid_params`).
    async fn call_tool(
        &self,
        mut request: CallToolRequestParams,
        mut context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let state = self.state.as_ref();
        let name = request.name.as_ref();
        let route = state
            .tools
            .map
            .get(name)
            .ok_or_else(|| invalid(format!("unknown tool {name:?}")))?;
        if let Some(check) = state.checks.get(name) {
            let arguments = Value::Object(request.arguments.take().unwrap_or_default());
            if let Some(refused) = state.tier_refused(name, &arguments) {
                return Ok(CallToolResponse::from(refused));
            }
            if let Err(why) = check(&arguments) {
                let message = format!("arguments of {name} do not fit its inputSchema: {why}");
                return Ok(CallToolResponse::from(
                    state.refused_arguments(name, message),
                ));
            }
            if let Value::Object(arguments) = arguments {
                request.arguments = Some(arguments);
            }
        }
        if state.draining.load(Ordering::Relaxed) && run::CHECKS.iter().any(|(n, _)| *n == name) {
            let metrics = state.hub.metrics();
            metrics.run(
                state.run.tier,
                sandpy::Status::Busy,
                std::time::Duration::ZERO,
            );
            return Ok(CallToolResponse::from(state.refused_while_draining()));
        }
        let caller = self.caller(&context);
        context.extensions.insert(caller);
        (route.call)(ToolCallContext::new(state, request, context)).await
    }
}
