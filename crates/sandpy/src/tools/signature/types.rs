//! JSON schemas as Python type annotations: `str`, `list[int]`, `Literal["a", "b"]`,
//! `dict[str, float]`, unions, and objects with properties as `TypedDict`s defined ahead
//! of the signature. Bounded whatever the schema: nesting, fields, literal values, named
//! types and the schema nodes visited all have limits, past which the type is `Any` (or
//! `dict[str, Any]`); `$ref`s into the same document are followed once each, a cycle
//! ending at the `TypedDict` being defined (a quoted forward reference) or at `Any`.

use super::python::{camel, comment, is_plain_name, literal_member};
use super::{Detail, SignatureLimits};
use serde_json::{Map, Value};
use std::collections::{HashMap, HashSet};

/// Names a generated `TypedDict` may not take: those the stubs use.
const RESERVED: [&str; 12] = [
    "Any",
    "Literal",
    "NotRequired",
    "TypedDict",
    "str",
    "int",
    "float",
    "bool",
    "list",
    "dict",
    "tool",
    "Ellipsis",
];
/// The most members a union shows; a wider union is `Any`.
const MAX_UNION: usize = 8;
/// The longest literal value shown in a `Literal[...]`; an enum with a longer one is
/// shown as its base type.
const MAX_LITERAL_BYTES: usize = 80;
/// The longest field comment.
const MAX_COMMENT_BYTES: usize = 80;
/// The longest field name shown; a longer one is counted with the fields left out.
const MAX_FIELD_NAME_BYTES: usize = 80;

/// The annotations of one tool's signature, and the `TypedDict`s they name.
pub(super) struct Types<'a> {
    /// Every name made starts with this (the tool's name in CamelCase), so that the
    /// stubs of many tools can share a file.
    prefix: String,
    limits: &'a SignatureLimits,
    detail: Detail,
    /// `TypedDict` definitions, each after those it uses (but for cycles).
    pub(super) defs: Vec<String>,
    names: HashSet<String>,
    /// `$ref` pointer -> its annotation (a quoted name while its `TypedDict` is made).
    refs: HashMap<String, String>,
    in_progress: HashSet<String>,
    visits: usize,
}

impl<'a> Types<'a> {
    pub(super) fn new(prefix: String, limits: &'a SignatureLimits, detail: Detail) -> Self {
        Types {
            prefix,
            limits,
            detail,
            defs: Vec::new(),
            names: RESERVED.iter().map(|name| name.to_string()).collect(),
            refs: HashMap::new(),
            in_progress: HashSet::new(),
            visits: 0,
        }
    }

    /// Start on another document: `$ref`s are looked up in it from now on.
    pub(super) fn new_document(&mut self) {
        self.refs.clear();
        self.in_progress.clear();
    }

    /// A name not yet used in this signature, from `hint`.
    pub(super) fn fresh_name(&mut self, hint: &str) -> String {
        let mut name = hint.to_string();
        let mut n = 2;
        while self.names.contains(&name) || !is_plain_name(&name) {
            name = format!("{hint}{n}");
            n += 1;
        }
        self.names.insert(name.clone());
        name
    }

    /// The annotation of values of `schema` (in document `root`); `hint` names a
    /// `TypedDict` made for it.
    pub(super) fn annotation(
        &mut self,
        root: &Value,
        schema: &Value,
        hint: &str,
        depth: usize,
    ) -> String {
        self.visits += 1;
        if depth > self.limits.depth || self.visits > self.limits.nodes {
            return "Any".into();
        }
        let Value::Object(map) = schema else {
            return "Any".into(); // `true`, `false`, or not a schema
        };
        let base = self.base(root, map, hint, depth);
        if map.get("nullable") == Some(&Value::Bool(true)) {
            union(vec![base, "None".into()])
        } else {
            base
        }
    }

    fn base(&mut self, root: &Value, map: &Map<String, Value>, hint: &str, depth: usize) -> String {
        if let Some(reference) = map.get("$ref").and_then(Value::as_str) {
            return self.reference(root, reference, depth);
        }
        if let Some(value) = map.get("const") {
            if let Some(member) = literal_member(value).filter(|m| m.len() <= MAX_LITERAL_BYTES) {
                return if member == "None" {
                    member
                } else {
                    format!("Literal[{member}]")
                };
            }
        }
        if let Some(Value::Array(values)) = map.get("enum") {
            if let Some(literal) = self.enumeration(values) {
                return literal;
            }
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(Value::Array(items)) = map.get(key) {
                if items.len() > MAX_UNION {
                    return "Any".into();
                }
                let members = items
                    .iter()
                    .map(|item| self.annotation(root, item, hint, depth + 1))
                    .collect();
                return union(members);
            }
        }
        if let Some(Value::Array(items)) = map.get("allOf") {
            if let [only] = items.as_slice() {
                return self.annotation(root, only, hint, depth + 1);
            }
        }
        match map.get("type") {
            Some(Value::String(kind)) => self.of_type(root, map, kind, hint, depth),
            Some(Value::Array(kinds)) if kinds.len() <= MAX_UNION => {
                let members = kinds
                    .iter()
                    .filter_map(Value::as_str)
                    .map(|kind| self.of_type(root, map, kind, hint, depth))
                    .collect();
                union(members)
            }
            Some(_) => "Any".into(),
            None if map.contains_key("properties") => {
                self.of_type(root, map, "object", hint, depth)
            }
            None if map.contains_key("items") => self.of_type(root, map, "array", hint, depth),
            None => "Any".into(),
        }
    }

    /// `Literal[...]` of an enum's values (and `None` for `null`), or `None` when it has a
    /// value a literal cannot hold, or too many.
    fn enumeration(&self, values: &[Value]) -> Option<String> {
        if values.is_empty() || values.len() > self.limits.literals {
            return None;
        }
        let mut members = Vec::new();
        let mut null = false;
        for value in values {
            match literal_member(value)? {
                none if none == "None" => null = true,
                member if member.len() <= MAX_LITERAL_BYTES => members.push(member),
                _ => return None,
            }
        }
        let mut out = Vec::new();
        if !members.is_empty() {
            out.push(format!("Literal[{}]", members.join(", ")));
        }
        if null {
            out.push("None".into());
        }
        Some(out.join(" | "))
    }

    fn of_type(
        &mut self,
        root: &Value,
        map: &Map<String, Value>,
        kind: &str,
        hint: &str,
        depth: usize,
    ) -> String {
        match kind {
            "string" => "str".into(),
            "integer" => "int".into(),
            "number" => "float".into(),
            "boolean" => "bool".into(),
            "null" => "None".into(),
            "array" => match map.get("items") {
                Some(items) => {
                    let item = self.annotation(root, items, &format!("{hint}Item"), depth + 1);
                    format!("list[{item}]")
                }
                None => "list[Any]".into(),
            },
            "object" => {
                let has_fields = map
                    .get("properties")
                    .and_then(Value::as_object)
                    .is_some_and(|p| !p.is_empty());
                if has_fields && self.defs.len() < self.limits.typed_dicts {
                    let name = self.fresh_name(hint);
                    return self.typed_dict(root, map, name, depth);
                }
                match map.get("additionalProperties") {
                    Some(values @ Value::Object(_)) => {
                        let value =
                            self.annotation(root, values, &format!("{hint}Value"), depth + 1);
                        format!("dict[str, {value}]")
                    }
                    _ => "dict[str, Any]".into(),
                }
            }
            _ => "Any".into(),
        }
    }

    /// A `$ref` into `root`, followed once: later uses reuse its annotation.
    fn reference(&mut self, root: &Value, reference: &str, depth: usize) -> String {
        let Some(pointer) = reference.strip_prefix('#') else {
            return "Any".into();
        };
        if let Some(known) = self.refs.get(pointer) {
            return known.clone();
        }
        let Some(target) = root.pointer(pointer) else {
            return "Any".into();
        };
        if !self.in_progress.insert(pointer.to_string()) {
            return "Any".into(); // a cycle through types that are not TypedDicts
        }
        let last = pointer.rsplit('/').next().unwrap_or("");
        let hint = format!("{}{}", self.prefix, camel(last, "Ref"));
        let annotation = match target.as_object() {
            Some(map)
                if map.get("type").is_none_or(|t| t == "object")
                    && map
                        .get("properties")
                        .and_then(Value::as_object)
                        .is_some_and(|p| !p.is_empty())
                    && self.defs.len() < self.limits.typed_dicts =>
            {
                let name = self.fresh_name(&hint);
                self.refs.insert(pointer.to_string(), format!("\"{name}\""));
                self.typed_dict(root, map, name, depth + 1)
            }
            _ => self.annotation(root, target, &hint, depth + 1),
        };
        self.in_progress.remove(pointer);
        self.refs.insert(pointer.to_string(), annotation.clone());
        annotation
    }

    /// An object's properties as a `TypedDict` called `name`, defined in [`Types::defs`]:
    /// required fields first, optional ones `NotRequired`, at most `fields` of them; the
    /// class form when every key is a plain name, else the functional form.
    pub(super) fn typed_dict(
        &mut self,
        root: &Value,
        map: &Map<String, Value>,
        name: String,
        depth: usize,
    ) -> String {
        let empty = Map::new();
        let properties = map
            .get("properties")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        let required = required(map);
        let mut fields: Vec<(&String, &Value)> = properties
            .iter()
            .filter(|(key, _)| key.len() <= MAX_FIELD_NAME_BYTES)
            .collect();
        fields.sort_by_key(|(key, _)| !required.contains(key.as_str()));
        let more = properties.len() - fields.len().min(self.limits.fields);
        fields.truncate(self.limits.fields);
        let class_form = fields.iter().all(|(key, _)| is_plain_name(key));
        let mut lines = Vec::new();
        for (key, schema) in fields {
            let hint = format!("{name}{}", camel(key, "Field"));
            let mut annotation = self.annotation(root, schema, &hint, depth + 1);
            if !required.contains(key.as_str()) {
                annotation = format!("NotRequired[{annotation}]");
            }
            let field = if class_form {
                format!("    {key}: {annotation}")
            } else {
                format!("    {}: {annotation},", Value::String(key.clone()))
            };
            let note = schema.get("description").and_then(Value::as_str);
            lines.push(match note.map(|n| comment(n, MAX_COMMENT_BYTES)) {
                Some(note) if self.detail == Detail::Full && !note.is_empty() => {
                    format!("{field}  # {note}")
                }
                _ => field,
            });
        }
        if more > 0 {
            lines.push(format!("    # ... and {more} more fields"));
        }
        let body = lines.join("\n");
        let definition = if class_form {
            let body = if body.is_empty() {
                "    pass".into()
            } else {
                body
            };
            format!("class {name}(TypedDict):\n{body}")
        } else {
            format!("{name} = TypedDict(\"{name}\", {{\n{body}\n}})")
        };
        self.defs.push(definition);
        name
    }
}

/// The names in an object schema's `required`.
pub(super) fn required(map: &Map<String, Value>) -> HashSet<&str> {
    map.get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// `members` as one annotation: duplicates dropped, `None` last, `Any` when one is.
pub(super) fn union(members: Vec<String>) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut none = false;
    for member in members {
        for part in split_union(&member) {
            if part == "Any" {
                return "Any".into();
            }
            if part == "None" {
                none = true;
            } else if !out.iter().any(|m| *m == part) {
                out.push(part.to_string());
            }
        }
    }
    if none {
        out.push("None".into());
    }
    if out.is_empty() || out.len() > MAX_UNION {
        return "Any".into();
    }
    out.join(" | ")
}

/// The top-level members of a union annotation (splitting at ` | ` outside brackets).
fn split_union(annotation: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start, mut quoted) = (0usize, 0usize, false);
    let bytes = annotation.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if quoted => i += 1,
            b'"' => quoted = !quoted,
            b'[' if !quoted => depth += 1,
            b']' if !quoted => depth = depth.saturating_sub(1),
            b'|' if !quoted && depth == 0 && i > 0 => {
                parts.push(annotation[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    parts.push(annotation[start..].trim());
    parts
}
