//! Ending a server well: the drain refuses new runs, waits for those in flight, and saves
//! the sessions of tenants that outlive their MCP session (token and OAuth tenants), so
//! that another replica sharing `save_dir` can restore them.

use super::saves::SaveDir;
use super::SandpyServer;
use crate::identity::ClaimedTenant;
use sandpy::sessions::Tenant;
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl SandpyServer {
    /// Stop taking new runs (each is answered `busy`, saying the server is shutting down),
    /// wait up to `grace` for the runs in flight to end, then save the sessions of the
    /// config's token tenants so that another replica can restore them
    /// ([`SandpyServer::save_sessions`]). Returns how many runs were still going.
    pub async fn drain(&self, grace: std::time::Duration) -> i64 {
        self.state.draining.store(true, Ordering::Relaxed);
        let deadline = tokio::time::Instant::now() + grace;
        let metrics = self.state.hub.metrics();
        while metrics.in_flight() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let left = metrics.in_flight();
        let saved = self.save_sessions().await;
        tracing::info!("drained: {left} runs still going, {saved} sessions saved");
        left
    }

    /// Save every session of the config's token tenants and of the OAuth tenants (those
    /// named by an access token's claim) under its own id, in the tenant's folder of
    /// `save_dir` (`restore_session` with `name` = the session's id brings it back, on any
    /// replica that shares the folder). Sessions whose id is not a plain name, or whose
    /// journal passed its cap, are skipped and logged. Returns how many were saved.
    pub async fn save_sessions(&self) -> usize {
        let state = &self.state;
        let Some(root) = &state.session_dir else {
            return 0;
        };
        let mut owners: Vec<(String, Tenant)> = (state.token_tenants.iter())
            .map(|(name, tenant)| (name.to_string(), tenant.clone()))
            .collect();
        let quota = state.sessions.limits().per_tenant;
        for (id, _) in state.sessions.open_by_tenant() {
            if let Some(claim) = id.strip_prefix("oauth:") {
                let folder = ClaimedTenant(Arc::from(claim)).folder();
                owners.push((folder, Tenant::new(id.clone(), quota)));
            }
        }
        let mut saved = 0;
        for (name, tenant) in &owners {
            for id in state.sessions.ids_of(&tenant.id) {
                let written = async {
                    if !sandpy::settings::is_plain_name(&id) {
                        return Err("its id is not a plain name".to_string());
                    }
                    let snapshot = state.sessions.of(tenant).snapshot(&id).await;
                    let snapshot = snapshot.map_err(|e| e.to_string())?;
                    let text = serde_json::to_string(&snapshot).map_err(|e| e.to_string())?;
                    let dir = SaveDir::open(root, Some(name));
                    let dir = dir.map_err(|e| e.to_string())?;
                    dir.write(&id, text.as_bytes()).map_err(|e| e.to_string())
                };
                match written.await {
                    Ok(path) => {
                        saved += 1;
                        tracing::info!("saved session {id} of {name} to {}", path.display());
                    }
                    Err(why) => tracing::warn!("session {id} of {name} not saved: {why}"),
                }
            }
        }
        saved
    }
}
