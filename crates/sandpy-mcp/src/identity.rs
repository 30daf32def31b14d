//! Who an HTTP request authenticated as: the HTTP layer's bearer check puts it in the
//! request's extensions, and the server reads it to choose the tenant of the sessions a
//! call makes. A module of its own so that neither of the two imports the other.

use std::sync::Arc;

/// The tenant a request's bearer token names (from `sandpy.tenants`), put in the HTTP
/// request's extensions by the bearer check.
#[derive(Clone, Debug)]
pub(crate) struct TokenTenantName(pub(crate) Arc<str>);

/// The tenant an access token's claim names, put in the request's extensions by the bearer
/// check: the `run_python` sessions its calls make are the tenant's, whichever MCP session
/// they come through.
#[derive(Clone, Debug)]
pub(crate) struct ClaimedTenant(pub(crate) Arc<str>);

impl ClaimedTenant {
    /// The tenant's id among the server's tenants (`oauth:<claim>`), apart from the
    /// configured tenants (`tenant:<name>`) and MCP sessions (`client-<n>`).
    pub(crate) fn id(&self) -> String {
        format!("oauth:{}", self.0)
    }

    /// Its folder under `save_dir`: a hash of the claim, which may hold any character.
    pub(crate) fn folder(&self) -> String {
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(self.0.as_bytes());
        let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
        format!("oauth-{hex}")
    }
}
