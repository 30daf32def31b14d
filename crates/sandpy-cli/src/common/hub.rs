//! The upstream MCP servers of a command whose code may call their tools.

/// Start the hub when the config names servers, reporting each that failed on stderr.
pub(crate) async fn start_hub(config: &sandpy_mcp::ConfigFile) -> Option<sandpy_mcp::Hub> {
    if config.servers.is_empty() {
        return None;
    }
    let hub = sandpy_mcp::Hub::start(config).await;
    report_start(&hub, &config.settings);
    Some(hub)
}

/// On stderr, once the servers have started: those that failed, and the config's tool
/// patterns (`sandpy.allowed_tools`, `sandpy.approve`) that match none of the tools of
/// the servers that did start (a typo there would allow nothing, or ask for nothing).
pub(crate) fn report_start(hub: &sandpy_mcp::Hub, settings: &sandpy::settings::Settings) {
    for server in hub.servers() {
        if !server.is_ready() {
            eprintln!("sandpy: MCP server `{}` is {}", server.name, server.status);
        }
    }
    let allowed = settings.allowed_tools.as_deref().unwrap_or_default();
    for (key, patterns) in [("allowed_tools", allowed), ("approve", &settings.approve)] {
        for pattern in hub.matching_none(patterns) {
            eprintln!(
                "sandpy: the sandpy.{key} pattern {pattern:?} matches none of the tools of the servers that started"
            );
        }
    }
}
