//! The catalog of upstream tools: each server's `tools/list` read within limits, every
//! tool vetted as it comes (name, schema, description size), and the tools kept by full
//! name beside the ones skipped and why.

use super::names;
use super::schema::{self, ArgumentSchema};
use super::upstream::Upstream;
use super::Hub;
use rmcp::model::{JsonObject, PaginatedRequestParams, Tool};
use rmcp::service::ClientCacheConfig;
use rmcp::{Peer, RoleClient, ServiceError};
use sandpy::tools::ToolInfo;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// How long a server may take to list its tools.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(120);

/// The most `tools/list` pages read from one server (a server may always say there are more).
pub(super) const MAX_PAGES: usize = 100;

/// The most tools kept of one server.
pub(super) const MAX_TOOLS: usize = 20_000;

/// The most bytes of tool names, descriptions and schemas kept of one server.
pub(super) const MAX_LISTED_BYTES: usize = 64 << 20;

/// The longest tool description kept; a longer one is cut, the cut marked.
const MAX_DESCRIPTION_BYTES: usize = 64 * 1024;

/// How many skipped tools of one server the hub remembers (with their reasons).
const MAX_SKIPPED: usize = 100;

/// One listed tool: what the guest sees of it, where its calls go, and its argument
/// validator once its first call made it.
pub(super) struct Entry {
    pub(super) info: ToolInfo,
    /// Its `outputSchema`, when it declares one (vetted as input schemas are): the return
    /// type of its Python signature.
    pub(super) output_schema: Option<Value>,
    pub(super) upstream: Arc<Upstream>,
    pub(super) tool: String,
    pub(super) schema: OnceLock<ArgumentSchema>,
}

#[derive(Default)]
pub(super) struct Catalog {
    /// By full name, so in the order `list_tools` gives.
    pub(super) tools: BTreeMap<String, Arc<Entry>>,
    /// Tools a server listed and the hub skipped: full name -> (server, why).
    pub(super) skipped: HashMap<String, (String, String)>,
}

/// What one server listed, within the limits: the tools kept (name as listed, info with
/// a description cut to size), the ones skipped and why, and why listing stopped early.
struct Listed {
    kept: Vec<(String, ToolInfo, Option<Value>)>,
    skipped: Vec<(String, String)>,
    skipped_count: usize,
    stopped: Option<String>,
}

/// A name as a log line shows it: quoted, at most 80 characters.
fn shown(name: &str) -> String {
    match name.char_indices().nth(80) {
        Some((end, _)) => format!("{:?}... ({} bytes)", &name[..end], name.len()),
        None => format!("{name:?}"),
    }
}

/// The tool as the hub keeps it (with its output schema, dropped when it is too big or
/// too deep: the tool still works, its results typed `Any`), or why it is skipped.
fn vet_tool(tool: Tool) -> Result<(String, ToolInfo, Option<Value>), String> {
    names::check(&tool.name)?;
    let schema = Value::Object(JsonObject::clone(&tool.input_schema));
    schema::vet(&schema)?;
    let mut description = tool.description.as_deref().unwrap_or_default().to_string();
    if description.len() > MAX_DESCRIPTION_BYTES {
        let mut end = MAX_DESCRIPTION_BYTES;
        while !description.is_char_boundary(end) {
            end -= 1;
        }
        let cut = description.len() - end;
        description.truncate(end);
        description += &format!("[... {cut} more bytes]");
    }
    let info = ToolInfo {
        name: String::new(),
        description,
        input_schema: schema,
    };
    let output = tool
        .output_schema
        .map(|output| Value::Object(JsonObject::clone(&output)))
        .filter(|output| schema::vet(output).is_ok());
    Ok((tool.name.to_string(), info, output))
}

/// Read a server's `tools/list`, page by page, within [`MAX_PAGES`], [`MAX_TOOLS`] and
/// [`MAX_LISTED_BYTES`]; each tool is vetted as it comes ([`vet_tool`]).
async fn list_tools(peer: &Peer<RoleClient>, server: &str) -> Result<Listed, ServiceError> {
    let mut listed = Listed {
        kept: Vec::new(),
        skipped: Vec::new(),
        skipped_count: 0,
        stopped: None,
    };
    // rmcp would keep a copy of every page a server marks cacheable (`ttlMs`): up to 512
    // pages of 16 MiB. The hub keeps what it vetted, and nothing else.
    peer.set_response_cache_config(ClientCacheConfig::disabled())
        .await;
    let mut bytes = 0usize;
    let mut cursor = None;
    'pages: for page in 1..=MAX_PAGES {
        let params = PaginatedRequestParams::default().with_cursor(cursor.take());
        let result = peer.list_tools(Some(params)).await?;
        for tool in result.tools {
            let name = tool.name.to_string();
            match vet_tool(tool) {
                Ok((name, info, output)) => {
                    let size = name.len()
                        + info.description.len()
                        + schema::json_len(&info.input_schema)
                        + output.as_ref().map_or(0, schema::json_len);
                    if listed.kept.len() == MAX_TOOLS || bytes + size > MAX_LISTED_BYTES {
                        listed.stopped = Some(format!(
                            "listing stopped at {} tools: at most {MAX_TOOLS} tools and {MAX_LISTED_BYTES} bytes of them are kept",
                            listed.kept.len()
                        ));
                        break 'pages;
                    }
                    bytes += size;
                    listed.kept.push((name, info, output));
                }
                Err(why) => {
                    tracing::warn!("upstream {server}: tool {} skipped: {why}", shown(&name));
                    listed.skipped_count += 1;
                    if listed.skipped.len() < MAX_SKIPPED && name.len() <= 8192 {
                        listed.skipped.push((name, why));
                    }
                }
            }
        }
        match result.next_cursor {
            None => break,
            Some(_) if page == MAX_PAGES => {
                listed.stopped = Some(format!(
                    "listing stopped after {MAX_PAGES} pages, the server still listing more"
                ));
            }
            Some(next) => cursor = Some(next),
        }
    }
    if let Some(why) = &listed.stopped {
        tracing::warn!("upstream {server}: {why}");
    }
    for (attribute, tools) in names::collisions(listed.kept.iter().map(|(n, ..)| n.as_str())) {
        tracing::warn!(
            "upstream {server}: tools {tools:?} all map to tools.{server}.{attribute}; none gets that attribute, call them by full name with call_mcp_tool"
        );
    }
    Ok(listed)
}

impl Hub {
    /// (Re)connect one server if needed and replace its tools in the catalog.
    pub(super) async fn refresh(&self, upstream: Arc<Upstream>) {
        let listed = async {
            let (peer, _) = upstream.peer().await?;
            tokio::time::timeout(STARTUP_TIMEOUT, list_tools(&peer, &upstream.name))
                .await
                .map_err(|_| "listing tools timed out".to_string())?
                .map_err(|e| upstream.spec.hide(&format!("listing tools failed: {e}")))
        }
        .await;
        let mut catalog = self.0.catalog.write().unwrap_or_else(|e| e.into_inner());
        catalog
            .tools
            .retain(|_, entry| entry.upstream.name != upstream.name);
        catalog
            .skipped
            .retain(|_, (server, _)| *server != upstream.name);
        match listed {
            Ok(listed) => {
                let mut status = format!("ready ({} tools", listed.kept.len());
                if listed.skipped_count > 0 {
                    status += &format!(
                        "; {} skipped for bad names or schemas",
                        listed.skipped_count
                    );
                }
                if let Some(why) = &listed.stopped {
                    status += &format!("; {why}");
                }
                status.push(')');
                upstream.set_status(status);
                let prefix = format!("mcp__{}__", upstream.name);
                for (name, why) in listed.skipped {
                    let server = upstream.name.clone();
                    catalog
                        .skipped
                        .insert(format!("{prefix}{name}"), (server, why));
                }
                for (tool, mut info, output_schema) in listed.kept {
                    info.name = format!("{prefix}{tool}");
                    let entry = Entry {
                        info,
                        output_schema,
                        upstream: upstream.clone(),
                        tool,
                        schema: OnceLock::new(),
                    };
                    catalog
                        .tools
                        .insert(entry.info.name.clone(), Arc::new(entry));
                }
            }
            Err(reason) => {
                tracing::warn!("upstream {}: {reason}", upstream.name);
                upstream.set_status(format!("unavailable: {reason}"));
            }
        }
    }
}
