//! The resources as MCP shows them: a kept file as a listed `Resource` and as
//! `ResourceContents`, and the answers to `resources/list` and `resources/read` for one
//! owner (the caller, through its MCP session).

use super::super::invalid;
use super::{Owner, Resource, ResourceStore};
use rmcp::model::{
    CacheScope, ListResourcesResult, ProtocolVersion, ReadResourceResponse, ReadResourceResult,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};

impl Resource {
    /// As `resources/list` and a `resource_link` item show it: URI, name, type and size.
    pub(crate) fn listed(&self) -> rmcp::model::Resource {
        rmcp::model::Resource::new(self.uri.clone(), self.name.clone())
            .with_mime_type(self.mime_type.clone())
            .with_size(self.size())
    }

    /// Its contents as `resources/read` (and an embedded resource) carries them: text
    /// when it is UTF-8, else base64.
    pub(crate) fn contents(&self) -> rmcp::model::ResourceContents {
        use base64::Engine;
        let contents = match std::str::from_utf8(&self.content) {
            Ok(text) => rmcp::model::ResourceContents::text(text, self.uri.clone()),
            Err(_) => {
                let encoded =
                    base64::engine::general_purpose::STANDARD.encode(self.content.as_slice());
                rmcp::model::ResourceContents::blob(encoded, self.uri.clone())
            }
        };
        contents.with_mime_type(self.mime_type.clone())
    }
}

/// `resources/list` for `owner`: every one of its resources in one page (a `cursor` is
/// invalid: none was ever handed out), never cached, as each run changes the list.
pub(crate) fn list(
    store: &ResourceStore,
    owner: &Owner,
    cursor: Option<String>,
    context: &RequestContext<RoleServer>,
) -> Result<ListResourcesResult, ErrorData> {
    if let Some(cursor) = cursor {
        return Err(invalid(format!(
            "invalid cursor {cursor:?}: this server lists every resource in one page (no nextCursor)"
        )));
    }
    let listed = store.list(owner);
    let listed = listed.iter().map(Resource::listed).collect();
    let mut result = ListResourcesResult::with_all_items(listed);
    // Each run changes the list, and it is this client's own: never cached.
    if context
        .protocol_version()
        .is_some_and(|version| version >= ProtocolVersion::V_2026_07_28)
    {
        result = result.with_ttl_ms(0).with_cache_scope(CacheScope::Private);
    }
    Ok(result)
}

/// `resources/read` for `owner`: the resource at `uri` if it kept it; any other URI is
/// `resource not found` (-32002, the URI in `data`), someone else's too.
pub(crate) fn read(
    store: &ResourceStore,
    owner: &Owner,
    uri: &str,
) -> Result<ReadResourceResponse, ErrorData> {
    match store.read(owner, uri) {
        Ok(resource) => Ok(ReadResourceResult::new(vec![resource.contents()]).into()),
        Err(not_found) => {
            let data = serde_json::json!({"uri": not_found.uri});
            Err(ErrorData::resource_not_found(
                not_found.to_string(),
                Some(data),
            ))
        }
    }
}
