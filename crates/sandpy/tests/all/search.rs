//! Tool search against the real tool lists of the MCP reference servers (filesystem,
//! memory, everything; `tests/fixtures/reference_tools.json`, checked against the live
//! servers by sandpy-mcp's upstream tests): which tool comes first for what a model asks.

use sandpy::tools::{search, ToolInfo, ToolSummary};
use serde_json::{json, Value};

/// Every tool of the three servers, named as the hub names them.
fn reference_tools() -> Vec<ToolInfo> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/reference_tools.json"
    );
    let text = std::fs::read_to_string(path).expect("the fixture");
    let fixture: Value = serde_json::from_str(&text).expect("JSON");
    let servers = fixture["servers"].as_object().expect("servers");
    let mut tools = Vec::new();
    for (server, entry) in servers {
        for tool in entry["tools"].as_array().expect("tools") {
            tools.push(ToolInfo {
                name: format!("mcp__{server}__{}", tool["name"].as_str().expect("name")),
                description: tool["description"].as_str().unwrap_or_default().into(),
                input_schema: tool["inputSchema"].clone(),
            });
        }
    }
    tools
}

fn top(tools: &[ToolInfo], query: &str, limit: usize) -> Vec<String> {
    search(tools, query, limit)
        .into_iter()
        .map(|t| t.name.clone())
        .collect()
}

/// What a model might ask, and the tool that must come first.
const RELEVANCE: &[(&str, &str)] = &[
    ("read file", "mcp__fs__read_text_file"),
    ("readFile", "mcp__fs__read_text_file"),
    ("store entity observation", "mcp__memory__add_observations"),
    ("write a file", "mcp__fs__write_file"),
    ("list directory", "mcp__fs__list_directory"),
    (
        "directory listing with sizes",
        "mcp__fs__list_directory_with_sizes",
    ),
    ("rename a file", "mcp__fs__move_file"),
    ("add two numbers", "mcp__everything__get-sum"),
    ("echo a message", "mcp__everything__echo"),
    (
        "create relation between entities",
        "mcp__memory__create_relations",
    ),
    ("delete observations", "mcp__memory__delete_observations"),
    ("deleting entities", "mcp__memory__delete_entities"),
    ("search knowledge graph nodes", "mcp__memory__search_nodes"),
    ("open nodes by name", "mcp__memory__open_nodes"),
    ("read the entire knowledge graph", "mcp__memory__read_graph"),
    (
        "find files matching a glob pattern",
        "mcp__fs__search_files",
    ),
    ("file metadata permissions", "mcp__fs__get_file_info"),
    ("create directory", "mcp__fs__create_directory"),
    ("directory tree", "mcp__fs__directory_tree"),
    ("allowed directories", "mcp__fs__list_allowed_directories"),
    ("read multiple files", "mcp__fs__read_multiple_files"),
    ("edit lines in a text file", "mcp__fs__edit_file"),
    (
        "compress with gzip",
        "mcp__everything__gzip-file-as-resource",
    ),
    ("environment variables", "mcp__everything__get-env"),
    ("tiny image", "mcp__everything__get-tiny-image"),
    (
        "long running operation with progress",
        "mcp__everything__trigger-long-running-operation",
    ),
    ("logging", "mcp__everything__toggle-simulated-logging"),
    (
        "research a topic",
        "mcp__everything__simulate-research-query",
    ),
];

#[test]
fn each_query_finds_its_tool_first() {
    let tools = reference_tools();
    assert_eq!(tools.len(), 36, "14 + 9 + 13 tools");
    let misses: Vec<String> = RELEVANCE
        .iter()
        .filter_map(|(query, expected)| {
            let found = top(&tools, query, 3);
            (found.first().map(String::as_str) != Some(expected))
                .then(|| format!("{query:?}: expected {expected}, got {found:?}"))
        })
        .collect();
    assert!(misses.is_empty(), "{}", misses.join("\n"));
}

#[test]
fn stemming_finds_other_forms_of_the_words() {
    let tools = reference_tools();
    let found = top(&tools, "store entity observation", 3);
    assert!(
        found.contains(&"mcp__memory__create_entities".to_string()),
        "{found:?}"
    );
    assert_eq!(
        top(&tools, "observe", 2),
        [
            "mcp__memory__add_observations",
            "mcp__memory__delete_observations"
        ]
    );
}

#[test]
fn the_deprecated_read_file_comes_after_every_other_match() {
    let tools = reference_tools();
    let found = top(&tools, "read file", 50);
    assert_eq!(found.last().map(String::as_str), Some("mcp__fs__read_file"));
    let exact = top(&tools, "read_file", 50);
    assert_eq!(
        exact.first().map(String::as_str),
        Some("mcp__fs__read_text_file")
    );
    assert_eq!(exact.last().map(String::as_str), Some("mcp__fs__read_file"));
    let summary = ToolSummary::of(
        tools
            .iter()
            .find(|t| t.name == "mcp__fs__read_file")
            .unwrap(),
        None,
    );
    assert!(summary.deprecated);
}

#[test]
fn results_are_compact() {
    let tools = reference_tools();
    let read = tools
        .iter()
        .find(|t| t.name == "mcp__fs__read_text_file")
        .expect("read_text_file");
    assert_eq!(
        serde_json::to_value(ToolSummary::of(read, None)).unwrap(),
        json!({
            "name": "mcp__fs__read_text_file",
            "description": "Read the complete contents of a file from the file system as text.",
            "arguments": {"path": "string", "head?": "number", "tail?": "number"},
            "signature": "# tools.fs.read_text_file\ndef read_text_file(*, path: str, head: float | None = None, tail: float | None = None) -> Any: ..."
        })
    );
    let edit = tools
        .iter()
        .find(|t| t.name == "mcp__fs__edit_file")
        .expect("edit_file");
    assert_eq!(
        serde_json::to_value(ToolSummary::of(edit, None).arguments).unwrap(),
        json!({"path": "string", "edits": "object[]", "dryRun?": "boolean"})
    );
    // Ten results for a common word: the full entries are several kilobytes, the compact
    // ones (each with its bare Python signature) a fraction of that.
    let found = search(&tools, "file", 10);
    assert_eq!(found.len(), 10);
    let full = serde_json::to_string(&found).unwrap().len();
    let compact: Vec<ToolSummary> = found
        .into_iter()
        .map(|tool| ToolSummary::of(tool, None))
        .collect();
    let compact = serde_json::to_string(&compact).unwrap().len();
    assert!(full > 5_000, "full {full}");
    assert!(compact < full / 2, "compact {compact} bytes (full {full})");
}
