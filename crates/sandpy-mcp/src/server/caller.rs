//! Who makes a tool call: the tenant it acts for (an OAuth claim, a configured token
//! tenant, or the handler's own), where that tenant's saved sessions go, and whose the
//! resources its runs leave are. Worked out once per call and put in the request's
//! extensions for the tools to read.

use super::resources;
use super::SandpyServer;
use crate::identity::{ClaimedTenant, TokenTenantName};
use rmcp::service::RequestContext;
use rmcp::RoleServer;
use sandpy::sessions::Tenant;
use std::path::PathBuf;

/// The tenant a tool call is made for, and where its saved sessions go; put in the
/// request's extensions by the handler's `call_tool` ([`super::handler`]) for the tools to read.
#[derive(Clone)]
pub(super) struct Caller {
    /// Who the call acts for; it owns the sessions its runs make.
    pub(super) tenant: Tenant,
    /// Where its saved sessions go.
    pub(super) saves: Saves,
    /// Whose the resources of its runs are: the tenant's, through this MCP session.
    pub(super) owner: resources::Owner,
    /// Whether its runs take a slot of its tenant's share ([`super::shares`]): over HTTP,
    /// where tenants share the server; not the process's own client (stdio).
    pub(super) shares_slots: bool,
    /// Whether it reaches the server from elsewhere (over HTTP): its answers name no
    /// path of the server's.
    pub(super) remote: bool,
}

/// Where a tenant's saved sessions are.
#[derive(Clone)]
pub(super) enum Saves {
    /// In the config's `save_dir` (which may not exist yet), in the tenant's own folder
    /// there if it has one.
    In {
        root: PathBuf,
        tenant: Option<String>,
    },
    /// Nowhere, for this reason.
    Off(&'static str),
}

impl SandpyServer {
    /// Who makes a call that came with `context`: the tenant its OAuth access token's
    /// claim names (`oauth:<claim>`, with the per-tenant quota, saving to a folder named
    /// by a hash of the claim), else the tenant its bearer token names, else this
    /// handler's own.
    pub(super) fn caller(&self, context: &RequestContext<RoleServer>) -> Caller {
        let (tenant, saves) = self.tenant_of(context);
        let owner = resources::Owner {
            tenant: tenant.id.clone(),
            connection: self.client.connection,
        };
        let remote = self.client.connection != super::STDIO_CONNECTION;
        Caller {
            tenant,
            saves,
            owner,
            shares_slots: remote,
            remote,
        }
    }

    /// The tenant of [`SandpyServer::caller`], and where its saved sessions go.
    fn tenant_of(&self, context: &RequestContext<RoleServer>) -> (Tenant, Saves) {
        let state = &self.state;
        let named = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<TokenTenantName>())
            .and_then(|name| Some((name, state.token_tenants.get(&name.0)?)));
        const NO_SAVES: &str = "saving sessions is off: set sandpy.sessions.save_dir in the config";
        const NO_OWNER: &str = "saving sessions over HTTP needs a tenant known by its bearer token \
             (sandpy.tenants in the config): a save outlives the MCP session, so it needs an owner that does too";
        let saves = |tenant: Option<&str>| match &state.session_dir {
            None => Saves::Off(NO_SAVES),
            Some(root) => Saves::In {
                root: root.clone(),
                tenant: tenant.map(str::to_string),
            },
        };
        let claimed = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<ClaimedTenant>());
        if let Some(claimed) = claimed {
            let quota = state.sessions.limits().per_tenant;
            let tenant = Tenant::new(claimed.id(), quota);
            return (tenant, saves(Some(&claimed.folder())));
        }
        match named {
            Some((name, tenant)) => (tenant.clone(), saves(Some(&name.0))),
            None if self.client.closes_sessions => {
                let saves = match state.session_dir {
                    None => Saves::Off(NO_SAVES),
                    Some(_) => Saves::Off(NO_OWNER),
                };
                (self.client.tenant.clone(), saves)
            }
            None => (self.client.tenant.clone(), saves(None)),
        }
    }
}
