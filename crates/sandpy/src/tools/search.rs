//! Tool search: which allowed tools fit a few words, best first, and the compact form
//! results are shown in (a model reads them, so a result is a line, not a schema).
//!
//! Names are split at `_`, `-`, `.` and camelCase boundaries. Words of the tool's name,
//! its server's name and its description are lower-cased, stop words dropped, and reduced
//! by a small suffix stemmer (plurals, `-ing`, `-ed`, `-ation`, a final `e`), so that
//! "store entity observation" finds `add_observations` and "deleting" finds `delete_*`.
//! A query word counts by how rare it is among the tools (inverse document frequency):
//! three times when it is a word of the tool's name, once for its server's name, and
//! `ln(1 + hits)` in its description; a word that is a prefix of another (at least four
//! letters) counts half. The sum is scaled by the square of the share of query words the
//! tool matched, so a tool matching every word beats one matching a single word strongly.
//! Deprecated tools (the word "deprecated" in the name or description) come after all
//! others, whatever their score.
//!
//! The work is bounded whatever the guest asks: the first [`MAX_QUERY_TERMS`] distinct
//! words of the query, and the first [`DESCRIPTION_SCAN_BYTES`] of each description.

use crate::tools::signature::{self, Detail, SignatureLimits};
use crate::tools::ToolInfo;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// Query words beyond this many distinct ones are ignored (the guest chooses the query).
const MAX_QUERY_TERMS: usize = 32;
/// Bytes of a query read for words.
const QUERY_SCAN_BYTES: usize = 1024;
/// Bytes of a description searched (an upstream chooses its descriptions).
const DESCRIPTION_SCAN_BYTES: usize = 4096;
/// A result's description: its first line, cut to its first sentence when longer than
/// this many bytes.
const DESCRIPTION_LINE_BYTES: usize = 160;
/// Longest first sentence kept whole; longer ones are cut at [`DESCRIPTION_LINE_BYTES`].
const DESCRIPTION_SENTENCE_BYTES: usize = 200;
/// Arguments listed per result; more are counted under `…`.
const MAX_ARGUMENTS: usize = 16;
/// Longest argument name or type shown.
const MAX_ARGUMENT_TEXT: usize = 60;

/// Words that say nothing about what a tool does.
const STOP_WORDS: &[&str] = &[
    "a", "an", "and", "any", "are", "as", "at", "be", "by", "can", "do", "does", "for", "from",
    "how", "i", "in", "into", "is", "it", "its", "me", "my", "of", "on", "or", "that", "the",
    "these", "this", "those", "to", "use", "using", "with", "you", "your",
];

/// A tool as search results show it: enough to choose it and call it, not its whole
/// schema (`get_tool_schema` gives that).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolSummary {
    /// Full name, `mcp__<server>__<tool>` for MCP tools.
    pub name: String,
    /// The description's first line (its first sentence when the line is long).
    pub description: String,
    /// Argument name to type (`string`, `number[]`, `"a"|"b"`, ...); optional arguments'
    /// names end in `?`, as in TypeScript. Past 16 arguments (required ones listed first)
    /// the rest are counted under `…`.
    pub arguments: BTreeMap<String, String>,
    /// The tool says it is deprecated (such tools are ranked last); only present when true.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deprecated: bool,
    /// The tool as a Python stub without docstring ([`crate::tools::signature`]): its
    /// arguments' and result's types, in at most 1,500 bytes.
    #[serde(default)]
    pub signature: String,
}

/// The most bytes of a search result's signature.
const SIGNATURE_BYTES: usize = 1500;

impl ToolSummary {
    /// The compact form of `tool`, whose results have `output_schema` when it has one.
    pub fn of(tool: &ToolInfo, output_schema: Option<&Value>) -> ToolSummary {
        let limits = SignatureLimits {
            bytes: SIGNATURE_BYTES,
            ..SignatureLimits::default()
        };
        ToolSummary {
            name: tool.name.clone(),
            description: one_line(&tool.description),
            arguments: arguments(&tool.input_schema),
            deprecated: is_deprecated(tool),
            signature: signature::stub(tool, output_schema, Detail::Bare, &limits),
        }
    }
}

/// `text` cut to at most `max` bytes, on a character boundary.
fn prefix(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The first line of a description; a long one is cut after its first sentence, or at
/// [`DESCRIPTION_LINE_BYTES`] with `…`.
fn one_line(description: &str) -> String {
    let line = description.trim().lines().next().unwrap_or_default().trim();
    if line.len() <= DESCRIPTION_LINE_BYTES {
        return line.to_string();
    }
    let head = prefix(line, DESCRIPTION_SENTENCE_BYTES);
    if let Some(end) = head.find(". ") {
        return line[..=end].to_string();
    }
    format!("{}…", prefix(line, DESCRIPTION_LINE_BYTES).trim_end())
}

/// Argument names (optional ones ending in `?`) and their types, from an input schema.
fn arguments(schema: &Value) -> BTreeMap<String, String> {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return BTreeMap::new();
    };
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    // Required arguments first, when there are too many to list.
    let mut listed: Vec<(bool, &String, &Value)> = properties
        .iter()
        .map(|(name, property)| (!required.contains(&name.as_str()), name, property))
        .collect();
    listed.sort_by_key(|(optional, name, _)| (*optional, *name));
    let mut out: BTreeMap<String, String> = listed
        .into_iter()
        .take(MAX_ARGUMENTS)
        .map(|(optional, name, property)| {
            let mark = if optional { "?" } else { "" };
            let name = format!("{}{mark}", prefix(name, MAX_ARGUMENT_TEXT));
            (name, bounded(type_name(property, 0)))
        })
        .collect();
    if properties.len() > MAX_ARGUMENTS {
        let more = properties.len() - MAX_ARGUMENTS;
        out.insert("…".into(), format!("{more} more"));
    }
    out
}

fn bounded(text: String) -> String {
    if text.len() <= MAX_ARGUMENT_TEXT {
        return text;
    }
    format!("{}…", prefix(&text, MAX_ARGUMENT_TEXT))
}

/// A JSON schema's type in a short, TypeScript-like form: `string`, `number|null`,
/// `string[]`, `"a"|"b"`, `any`.
fn type_name(schema: &Value, depth: usize) -> String {
    if depth > 3 {
        return "any".into();
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let mut shown: Vec<String> = values.iter().take(5).map(Value::to_string).collect();
        if values.len() > 5 {
            shown.push("…".into());
        }
        return shown.join("|");
    }
    if let Some(value) = schema.get("const") {
        return value.to_string();
    }
    let one = |kind: &str| {
        if kind != "array" {
            return kind.to_string();
        }
        match schema.get("items") {
            Some(items) => {
                let inner = type_name(items, depth + 1);
                if inner.contains('|') {
                    format!("({inner})[]")
                } else {
                    format!("{inner}[]")
                }
            }
            None => "any[]".into(),
        }
    };
    match schema.get("type") {
        Some(Value::String(kind)) => one(kind),
        Some(Value::Array(kinds)) => kinds
            .iter()
            .filter_map(Value::as_str)
            .map(one)
            .collect::<Vec<_>>()
            .join("|"),
        _ => {
            let alternatives = schema
                .get("anyOf")
                .or_else(|| schema.get("oneOf"))
                .and_then(Value::as_array);
            match alternatives {
                Some(list) => list
                    .iter()
                    .map(|s| type_name(s, depth + 1))
                    .collect::<Vec<_>>()
                    .join("|"),
                None if schema.get("properties").is_some() => "object".into(),
                None => "any".into(),
            }
        }
    }
}

/// Words of `text`, lower-cased, split at anything not alphanumeric and at camelCase
/// boundaries (`getTinyImage` is `get tiny image`).
pub(crate) fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut prev_lower = false;
    for c in text.chars() {
        if !c.is_alphanumeric() {
            prev_lower = false;
            if !current.is_empty() {
                out.push(std::mem::take(&mut current));
            }
            continue;
        }
        if c.is_uppercase() && prev_lower && !current.is_empty() {
            out.push(std::mem::take(&mut current)); // camelCase boundary
        }
        prev_lower = c.is_lowercase();
        current.extend(c.to_lowercase());
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// A word reduced to a rough stem, so that forms of one word meet: `entities` and
/// `entity`, `storing`, `stored` and `store` (`stor`), `observations` and `observation`
/// (`observat`). Not a linguist's stemmer: both sides go through the same one.
pub(crate) fn stem(word: &str) -> String {
    if word.len() <= 3 || !word.chars().all(|c| c.is_ascii_lowercase()) {
        return word.to_string();
    }
    let mut w = word.to_string();
    // Plurals.
    if w.ends_with("ies") && w.len() > 4 {
        w.truncate(w.len() - 3);
        w.push('y');
    } else if w.ends_with("sses")
        || ["xes", "ches", "shes", "zes"]
            .iter()
            .any(|s| w.ends_with(s))
    {
        w.truncate(w.len() - 2);
    } else if w.ends_with('s') && !["ss", "us", "is"].iter().any(|s| w.ends_with(s)) {
        w.truncate(w.len() - 1);
    }
    // One inflection or derivation.
    for (suffix, replacement) in [("ation", "ate"), ("ing", ""), ("ed", "")] {
        if w.ends_with(suffix) && w.len() - suffix.len() >= 3 {
            w.truncate(w.len() - suffix.len());
            w.push_str(replacement);
            // `running` -> `run`, but `adding` keeps `add` whole below four letters.
            let bytes = w.as_bytes();
            if replacement.is_empty() && bytes.len() >= 4 {
                let (last, before) = (bytes[bytes.len() - 1], bytes[bytes.len() - 2]);
                if last == before && !b"lszaeiou".contains(&last) {
                    w.pop();
                }
            }
            break;
        }
    }
    if w.len() > 3 && w.ends_with('e') {
        w.pop();
    }
    w
}

/// The stemmed words of `text` that carry meaning.
fn terms(text: &str) -> Vec<String> {
    words(text)
        .into_iter()
        .filter(|w| !STOP_WORDS.contains(&w.as_str()))
        .map(|w| stem(&w))
        .collect()
}

/// How well query term `term` matches word `word`: 1 when equal, 0.5 when one is a prefix
/// of the other and the shorter has at least four letters.
fn likeness(term: &str, word: &str) -> f64 {
    if term == word {
        return 1.0;
    }
    let (short, long) = if term.len() <= word.len() {
        (term, word)
    } else {
        (word, term)
    };
    if short.len() >= 4 && long.starts_with(short) {
        0.5
    } else {
        0.0
    }
}

fn is_deprecated(tool: &ToolInfo) -> bool {
    let description = prefix(&tool.description, DESCRIPTION_SCAN_BYTES);
    words(&tool.name)
        .into_iter()
        .chain(words(description))
        .any(|w| w == "deprecated")
}

/// One tool's words, ready to score.
struct Indexed<'a> {
    tool: &'a ToolInfo,
    name: Vec<String>,
    server: Vec<String>,
    description: Vec<String>,
    deprecated: bool,
}

impl<'a> Indexed<'a> {
    fn new(tool: &'a ToolInfo) -> Self {
        // `mcp__<server>__<tool>`: the server's words count apart from the tool's.
        let (server, name) = match tool.name.split_once("__") {
            Some(("mcp", rest)) => rest.split_once("__").unwrap_or(("", rest)),
            _ => ("", tool.name.as_str()),
        };
        Indexed {
            tool,
            name: terms(name),
            server: terms(server),
            description: terms(prefix(&tool.description, DESCRIPTION_SCAN_BYTES)),
            deprecated: is_deprecated(tool),
        }
    }

    fn best(words: &[String], term: &str) -> f64 {
        words.iter().map(|w| likeness(term, w)).fold(0.0, f64::max)
    }

    fn mentions(&self, term: &str) -> bool {
        [&self.name, &self.server, &self.description]
            .iter()
            .any(|words| Indexed::best(words, term) > 0.0)
    }

    /// This tool's weight for one term, before the term's rarity is applied.
    fn weight(&self, term: &str) -> f64 {
        let hits: f64 = self.description.iter().map(|w| likeness(term, w)).sum();
        3.0 * Indexed::best(&self.name, term) + Indexed::best(&self.server, term) + hits.ln_1p()
    }
}

/// The tools most relevant to `query`, best first (deprecated ones after all others, ties
/// by name); tools matching no word of the query are left out, and so is everything
/// when the query has no words that carry meaning.
pub fn search<'a>(
    tools: impl IntoIterator<Item = &'a ToolInfo>,
    query: &str,
    limit: usize,
) -> Vec<&'a ToolInfo> {
    let mut query_terms: Vec<String> = Vec::new();
    for term in terms(prefix(query, QUERY_SCAN_BYTES)) {
        if query_terms.len() == MAX_QUERY_TERMS {
            break;
        }
        if !query_terms.contains(&term) {
            query_terms.push(term);
        }
    }
    if query_terms.is_empty() || limit == 0 {
        return Vec::new();
    }
    let indexed: Vec<Indexed> = tools.into_iter().map(Indexed::new).collect();
    let count = indexed.len() as f64;
    let rarity: Vec<f64> = query_terms
        .iter()
        .map(|term| {
            let holders = indexed.iter().filter(|t| t.mentions(term)).count() as f64;
            (1.0 + count / (1.0 + holders)).ln()
        })
        .collect();
    let mut scored: Vec<(f64, &Indexed)> = indexed
        .iter()
        .filter_map(|tool| {
            let mut total = 0.0;
            let mut matched = 0usize;
            for (term, rarity) in query_terms.iter().zip(&rarity) {
                let weight = tool.weight(term);
                if weight > 0.0 {
                    matched += 1;
                    total += rarity * weight;
                }
            }
            let coverage = matched as f64 / query_terms.len() as f64;
            (matched > 0).then_some((total * coverage * coverage, tool))
        })
        .collect();
    scored.sort_by(|(a_score, a), (b_score, b)| {
        a.deprecated
            .cmp(&b.deprecated)
            .then_with(|| b_score.total_cmp(a_score))
            .then_with(|| a.tool.name.cmp(&b.tool.name))
    });
    scored
        .into_iter()
        .take(limit)
        .map(|(_, indexed)| indexed.tool)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str, description: &str) -> ToolInfo {
        ToolInfo {
            name: name.into(),
            description: description.into(),
            input_schema: json!({}),
        }
    }

    fn names(found: Vec<&ToolInfo>) -> Vec<&str> {
        found.iter().map(|t| t.name.as_str()).collect()
    }

    #[test]
    fn search_ranks_name_hits_over_description_hits() {
        let tools = [
            tool("mcp__fs__read_file", "Read a file"),
            tool("mcp__fs__write_file", "Write a file"),
            tool("mcp__mem__create_entities", "Store facts; can read later"),
        ];
        assert_eq!(
            names(search(&tools, "read", 10)),
            ["mcp__fs__read_file", "mcp__mem__create_entities"]
        );
        assert!(search(&tools, "nothing-like-it", 10).is_empty());
        assert!(search(&tools, "the of a", 10).is_empty(), "only stop words");
        assert_eq!(search(&tools, "file", 1).len(), 1);
        assert!(search(&tools, "file", 0).is_empty());
    }

    #[test]
    fn deprecated_tools_come_last_whatever_their_score() {
        let tools = [
            tool(
                "mcp__fs__read_file",
                "Read a file. DEPRECATED: use read_text_file.",
            ),
            tool("mcp__fs__read_text_file", "Read a text file from disk."),
            tool("mcp__fs__stat", "Information about a file you may read"),
        ];
        assert_eq!(
            names(search(&tools, "read_file", 10)),
            [
                "mcp__fs__read_text_file",
                "mcp__fs__stat",
                "mcp__fs__read_file"
            ]
        );
    }

    #[test]
    fn words_split_snake_kebab_and_camel_case() {
        assert_eq!(
            words("mcp__my-server__getTinyImage"),
            ["mcp", "my", "server", "get", "tiny", "image"]
        );
    }

    #[test]
    fn the_stemmer_brings_forms_of_a_word_together() {
        let same = [
            ("entities", "entity"),
            ("stored", "store"),
            ("storing", "store"),
            ("observations", "observation"),
            ("searches", "search"),
            ("directories", "directory"),
            ("running", "run"),
            ("adding", "add"),
            ("creation", "create"),
            ("boxes", "box"),
            ("addresses", "address"),
        ];
        for (a, b) in same {
            assert_eq!(stem(a), stem(b), "{a} and {b}");
        }
        assert_ne!(stem("status"), stem("stat"));
        assert_eq!(stem("ÉTÉS"), "ÉTÉS", "only ASCII words are stemmed");
    }

    #[test]
    fn a_huge_query_is_read_only_so_far() {
        let tools = [tool("mcp__a__zzz", "")];
        let query = format!("{} zzz", "word ".repeat(100_000));
        assert!(search(&tools, &query, 10).is_empty(), "zzz is past the cut");
    }

    #[test]
    fn summaries_keep_one_line_and_argument_types() {
        let info = ToolInfo {
            name: "mcp__fs__edit".into(),
            description: format!("Edit a file. {}\nSecond line.", "More words. ".repeat(20)),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "edits": {"type": "array", "items": {"type": "object", "properties": {}}},
                    "mode": {"enum": ["a", "b"]},
                    "count": {"type": ["integer", "null"]},
                    "tags": {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "number"}]}}
                },
                "required": ["path", "edits"]
            }),
        };
        let summary = ToolSummary::of(&info, None);
        assert_eq!(summary.description, "Edit a file.");
        assert_eq!(
            serde_json::to_value(&summary.arguments).unwrap(),
            json!({"path": "string", "edits": "object[]", "mode?": "\"a\"|\"b\"",
                   "count?": "integer|null", "tags?": "(string|number)[]"})
        );
        assert!(!summary.deprecated);
        let short = ToolSummary::of(&tool("x", "  Short.\nMore.  "), None);
        assert_eq!(short.description, "Short.");
        let long = ToolSummary::of(&tool("x", &"a".repeat(500)), None);
        assert_eq!(long.description, format!("{}…", "a".repeat(160)));
        let json = serde_json::to_value(ToolSummary::of(&tool("mcp__s__x", "y"), None)).unwrap();
        assert_eq!(
            json,
            json!({"name": "mcp__s__x", "description": "y", "arguments": {},
                   "signature": "# tools.s.x\ndef x() -> Any: ..."})
        );
    }

    #[test]
    fn many_arguments_are_counted_not_listed() {
        let properties: serde_json::Map<String, Value> = (0..20)
            .map(|i| (format!("a{i:02}"), json!({"type": "string"})))
            .collect();
        let info = ToolInfo {
            name: "x".into(),
            description: String::new(),
            input_schema: json!({"properties": properties}),
        };
        let arguments = ToolSummary::of(&info, None).arguments;
        assert_eq!(arguments.len(), 17);
        assert_eq!(arguments["…"], "4 more");
    }
}
