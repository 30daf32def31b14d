//! What the HTTP layer's probes read of the server: the upstreams `/readyz` waits for,
//! and the text of a `/metrics` scrape.

use super::SandpyServer;

impl SandpyServer {
    /// The upstream servers `/readyz` requires (`sandpy.ready_requires`) that are not
    /// ready now.
    pub(crate) fn required_upstreams_down(&self) -> Vec<String> {
        let state = &self.state;
        if state.ready_requires.is_empty() {
            return Vec::new();
        }
        let servers = state.hub.servers();
        state
            .ready_requires
            .iter()
            .filter(|name| !servers.iter().any(|s| &&s.name == name && s.is_ready()))
            .cloned()
            .collect()
    }

    /// The text of a `/metrics` scrape: the counters so far, with the upstreams' health,
    /// the sessions per tenant (labelled by the tenants' names when `names`, else by
    /// keyed hashes of them) and `mcp_sessions` (over HTTP) read now.
    pub(crate) fn metrics_text(&self, mcp_sessions: Option<usize>, names: bool) -> String {
        let state = &self.state;
        let upstreams: Vec<(String, bool)> = state
            .hub
            .servers()
            .into_iter()
            .map(|s| {
                let ready = s.is_ready();
                (s.name, ready)
            })
            .collect();
        let sessions = state.sessions.open_by_tenant();
        state
            .hub
            .metrics()
            .scrape(&upstreams, &sessions, mcp_sessions, names)
    }
}
