//! Tools as Python signatures: a tool's `inputSchema` and `outputSchema` (JSON schemas)
//! as the stub of a function a model can read and code against, e.g.
//!
//! ```python
//! # tools.everything.get_structured_content
//! class GetStructuredContentResult(TypedDict):
//!     temperature: float  # Temperature in celsius
//! def get_structured_content(*, location: Literal["New York", "Chicago"]) -> GetStructuredContentResult:
//!     """Returns structured content along with an output schema."""
//! ```
//!
//! Arguments are keyword-only (as `tools.<server>.<tool>(**kwargs)` takes them), required
//! ones first; an optional one shows its schema's `default`, or `= None` (the guest leaves
//! an argument passed as `None` out of the call). When an argument's name is not a Python
//! identifier (or is a keyword), the tool takes one positional dict instead, typed by a
//! functional `TypedDict`. The return type is the output schema's (`Any` without one).
//!
//! The text is valid Python whatever the schemas hold (a hostile upstream chooses them):
//! names, literals, docstrings and comments are made safe in [`python`], and every part
//! is bounded ([`SignatureLimits`]); a stub still over [`SignatureLimits::bytes`] is made
//! again with less detail, at worst as `def name(**kwargs: Any) -> Any`, with `...` where
//! something was left out.

mod python;
mod types;

pub use python::python_name;

use crate::tools::ToolInfo;
use python::{camel, comment, cut, docstring, is_plain_name, literal};
use serde_json::Value;
use types::{required, union, Types};

/// The import line every stub needs, at the top of a file of stubs.
pub const STUB_IMPORTS: &str = "from typing import Any, Literal, NotRequired, TypedDict";

/// The longest signature line kept on one line; a longer one puts each argument on its own.
const LINE_BYTES: usize = 120;
/// The longest default value shown; a longer one is shown as `...`.
const DEFAULT_BYTES: usize = 80;
/// The longest argument description in a docstring's `Args:`.
const ARGUMENT_NOTE_BYTES: usize = 120;
/// The longest first line of a description in [`Detail::Brief`].
const BRIEF_BYTES: usize = 200;

/// Bounds of one tool's stub: what a hostile schema can make it cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureLimits {
    /// How deep types nest before they are `Any`.
    pub depth: usize,
    /// Fields shown per object (arguments too); the others are counted in a comment.
    pub fields: usize,
    /// Values of an enum shown as a `Literal`; an enum with more is its base type.
    pub literals: usize,
    /// `TypedDict`s made per tool; objects past them are `dict[str, Any]`.
    pub typed_dicts: usize,
    /// Schema nodes looked at per tool; past them, types are `Any`.
    pub nodes: usize,
    /// The most bytes of one stub.
    pub bytes: usize,
    /// The most bytes of the tool's description in a [`Detail::Full`] docstring.
    pub doc_bytes: usize,
}

impl Default for SignatureLimits {
    fn default() -> Self {
        SignatureLimits {
            depth: 6,
            fields: 24,
            literals: 16,
            typed_dicts: 12,
            nodes: 2000,
            bytes: 6000,
            doc_bytes: 1500,
        }
    }
}

/// How much of the descriptions a stub carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detail {
    /// The description as a docstring (up to [`SignatureLimits::doc_bytes`]), the
    /// arguments' descriptions under `Args:`, the fields' as comments.
    Full,
    /// The description's first line as the docstring.
    Brief,
    /// No docstring: the body is `...`.
    Bare,
}

/// How a tool is called from Python, and the name its stub's `def` gets.
struct CallForm {
    /// The comment above the stub: `# tools.<server>.<tool>`, or how to call it by name.
    header: String,
    def_name: String,
}

fn call_form(full: &str) -> CallForm {
    let by_name = || {
        let quoted = comment(&Value::String(full.to_string()).to_string(), usize::MAX);
        format!("# call_mcp_tool({quoted}, {{...}}) (not in `tools`)")
    };
    let mut parts = full.splitn(3, "__");
    let split = match (parts.next(), parts.next(), parts.next()) {
        (Some("mcp"), Some(server), Some(tool)) => Some((server, tool)),
        _ => None,
    };
    let short = split.map_or(full, |(_, tool)| tool);
    let mut def_name = python_name(short).unwrap_or_else(|| format!("tool{short}"));
    def_name = plain_def_name(&def_name);
    let attributes = split.map(|(server, tool)| (python_name(server), python_name(tool)));
    let header = match attributes {
        Some((Some(server), Some(tool))) if is_plain_name(&server) && is_plain_name(&tool) => {
            format!("# tools.{server}.{tool}")
        }
        _ => by_name(),
    };
    CallForm { header, def_name }
}

/// `name` as a plain Python name: other characters as `_`, a keyword with `_` after it.
fn plain_def_name(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    if !is_plain_name(&out) {
        out.push('_');
    }
    out
}

/// The stub of `tool` (its `outputSchema` given apart, when it has one): valid Python of
/// at most `limits.bytes` bytes (given the [`STUB_IMPORTS`]), headed by a comment saying
/// how to call it.
pub fn stub(
    tool: &ToolInfo,
    output_schema: Option<&Value>,
    detail: Detail,
    limits: &SignatureLimits,
) -> String {
    let details = [Detail::Full, Detail::Brief, Detail::Bare];
    let start = details.iter().position(|d| *d == detail).unwrap_or(0);
    for detail in &details[start..] {
        let text = render(tool, output_schema, *detail, limits);
        if text.len() <= limits.bytes {
            return text;
        }
    }
    let plain = SignatureLimits {
        typed_dicts: 0,
        literals: 0,
        fields: limits.fields.min(8),
        ..limits.clone()
    };
    let text = render(tool, output_schema, Detail::Bare, &plain);
    if text.len() <= limits.bytes {
        return text;
    }
    let form = call_form(&tool.name);
    let fallback = format!(
        "{}\ndef {}(**kwargs: Any) -> Any: ...  # signature too long; get_tool_schema gives the schema",
        form.header, form.def_name
    );
    if fallback.len() <= limits.bytes {
        return fallback;
    }
    "def tool(**kwargs: Any) -> Any: ...".into()
}

/// One rendering of a stub, before its size is checked.
fn render(
    tool: &ToolInfo,
    output_schema: Option<&Value>,
    detail: Detail,
    limits: &SignatureLimits,
) -> String {
    let form = call_form(&tool.name);
    let prefix = camel(&form.def_name, "Tool");
    let mut types = Types::new(prefix.clone(), limits, detail);
    let input = &tool.input_schema;
    let empty = serde_json::Map::new();
    let schema = input.as_object().unwrap_or(&empty);
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let mut params: Vec<String> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    let mut keyword_only = true;
    if !properties.keys().all(|key| is_plain_name(key)) {
        let name = types.fresh_name(&format!("{prefix}Arguments"));
        let annotation = types.typed_dict(input, schema, name, 1);
        params.push(format!("arguments: {annotation}"));
        params.push("/".into());
        keyword_only = false;
        notes.push(
            "Takes its arguments as one dict: some of their names are not Python names.".into(),
        );
    } else {
        let wanted = required(schema);
        let mut names: Vec<&String> = properties.keys().collect();
        names.sort_by_key(|name| !wanted.contains(name.as_str()));
        let more = names.len().saturating_sub(limits.fields);
        names.truncate(limits.fields);
        for name in names {
            let property = &properties[name];
            let hint = format!("{prefix}{}", camel(name, "Field"));
            let annotation = types.annotation(input, property, &hint, 1);
            params.push(if wanted.contains(name.as_str()) {
                format!("{name}: {annotation}")
            } else {
                optional(name, &annotation, property.get("default"))
            });
            let note = property.get("description").and_then(Value::as_str);
            if let Some(note) = note.map(|n| comment(n, ARGUMENT_NOTE_BYTES)) {
                if !note.is_empty() {
                    notes.push(format!("{name}: {note}"));
                }
            }
        }
        // The catch-all's name must not be an argument's.
        let mut rest = String::from("more");
        while properties.contains_key(&rest) {
            rest.push('_');
        }
        if more > 0 {
            params.push(format!("# ... and {more} more arguments"));
            params.push(format!("**{rest}: Any"));
        } else if let Some(extra) = schema.get("additionalProperties").filter(|v| *v != false) {
            let hint = format!("{prefix}Extra");
            let annotation = types.annotation(input, extra, &hint, 1);
            params.push(format!("**{rest}: {annotation}"));
        }
    }
    let returns = match output_schema {
        Some(output) => {
            types.new_document();
            types.annotation(output, output, &format!("{prefix}Result"), 0)
        }
        None => "Any".into(),
    };
    let doc = match detail {
        Detail::Bare => None,
        Detail::Brief => Some(comment(&tool.description, BRIEF_BYTES)),
        Detail::Full => Some(full_doc(&tool.description, &notes, keyword_only, limits)),
    };
    let mut out = form.header;
    for definition in &types.defs {
        out.push('\n');
        out.push_str(definition);
    }
    out.push('\n');
    out.push_str(&def_line(&form.def_name, &params, keyword_only, &returns));
    match doc.filter(|d| !d.trim().is_empty()) {
        Some(doc) => out.push_str(&format!("\n    \"\"\"{}\"\"\"", docstring(&doc, "    "))),
        None => out.push_str(" ..."),
    }
    out
}

/// An optional argument: its default from the schema, else `None` (and `| None` added).
fn optional(name: &str, annotation: &str, default: Option<&Value>) -> String {
    match default.map(|value| literal(value, DEFAULT_BYTES)) {
        Some(Some(value)) if value == "None" => {
            format!(
                "{name}: {} = None",
                union(vec![annotation.into(), "None".into()])
            )
        }
        Some(Some(value)) => format!("{name}: {annotation} = {value}"),
        Some(None) => format!("{name}: {annotation} = ..."),
        None => format!(
            "{name}: {} = None",
            union(vec![annotation.into(), "None".into()])
        ),
    }
}

/// The full docstring: the description (cut at `doc_bytes`), then `Args:`.
fn full_doc(
    description: &str,
    notes: &[String],
    keyword_only: bool,
    limits: &SignatureLimits,
) -> String {
    let mut doc = cut(description.trim(), limits.doc_bytes);
    let (arguments, other): (Vec<&String>, Vec<&String>) = notes.iter().partition(|_| keyword_only);
    if !arguments.is_empty() {
        doc.push_str("\n\nArgs:");
        for note in arguments {
            doc.push_str(&format!("\n    {note}"));
        }
    }
    for note in other {
        doc.push_str(&format!("\n\n{note}"));
    }
    doc
}

/// `def name(*, a: int, b: str = "x") -> R:`, one argument a line when long or commented.
fn def_line(name: &str, params: &[String], keyword_only: bool, returns: &str) -> String {
    let star = keyword_only
        && params
            .iter()
            .any(|p| !p.starts_with("**") && !p.starts_with('#'));
    let mut all: Vec<&str> = Vec::new();
    if star {
        all.push("*");
    }
    all.extend(params.iter().map(String::as_str));
    let line = format!("def {name}({}) -> {returns}:", all.join(", "));
    if line.len() <= LINE_BYTES && !params.iter().any(|p| p.starts_with('#')) {
        return line;
    }
    let mut out = format!("def {name}(\n");
    for param in all {
        let comma = if param.starts_with('#') { "" } else { "," };
        out.push_str(&format!("    {param}{comma}\n"));
    }
    out.push_str(&format!(") -> {returns}:"));
    out
}

/// The stubs of `count` tools, with [`STUB_IMPORTS`] first, in at most `budget` bytes:
/// each in the most detail that lets them all fit ([`Detail::Full`], then brief, then
/// bare); when even bare ones do not, as many as fit and a line counting the others. Empty
/// when not even one fits. `tool(i)` gives the `i`th tool and its output schema (`None`
/// for one gone since: it is left out); it is asked only for the tools shown and one more
/// per detail, so that a catalog of 10,000 tools is not copied for a description.
pub fn stubs(
    count: usize,
    tool: &dyn Fn(usize) -> Option<(ToolInfo, Option<Value>)>,
    budget: usize,
    limits: &SignatureLimits,
) -> String {
    let more_line = |n: usize| {
        format!(
            "# ... and {n} more tools: search_tools() and get_tool_schema() give their signatures"
        )
    };
    let reserve = more_line(count).len() + 1;
    for detail in [Detail::Full, Detail::Brief, Detail::Bare] {
        let mut out = STUB_IMPORTS.to_string();
        let (mut shown, mut seen) = (0, 0);
        for i in 0..count {
            let Some((info, output)) = tool(i) else {
                seen += 1;
                continue;
            };
            let text = stub(&info, output.as_ref(), detail, limits);
            if out.len() + 1 + text.len() + reserve > budget {
                break;
            }
            out.push('\n');
            out.push_str(&text);
            (shown, seen) = (shown + 1, seen + 1);
        }
        if seen == count && out.len() <= budget {
            return out;
        }
        if detail == Detail::Bare {
            if shown == 0 {
                return String::new();
            }
            out.push('\n');
            out.push_str(&more_line(count - seen));
            return out;
        }
    }
    String::new()
}

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
