//! Argument checks against a tool's `inputSchema`: an upstream tool's before a call leaves
//! the sandbox, and sandpy's own tools' before they run.
//!
//! An upstream's schema is untrusted input. [`vet`] bounds what the hub keeps of it (size,
//! depth) when it lists the tool; [`ArgumentSchema::compile`] runs only on the tool's first
//! call (so 10,000 listed tools cost no validators until they are used), and refuses to
//! build a validator whose `$ref`s could loop on one value: jsonschema follows such a loop
//! without end, synchronously, where no timeout can stop it.

use serde_json::{Map, Value};
use std::collections::HashMap;

/// The largest `inputSchema` the hub keeps, serialised.
pub(crate) const MAX_SCHEMA_BYTES: usize = 256 * 1024;

/// The deepest nesting of objects and arrays an `inputSchema` may have.
pub(crate) const MAX_SCHEMA_DEPTH: usize = 64;

/// Why an upstream tool's schema is not kept (the tool is then skipped).
pub(crate) fn vet(schema: &Value) -> Result<(), String> {
    let bytes = json_len(schema);
    if bytes > MAX_SCHEMA_BYTES {
        return Err(format!(
            "its inputSchema is {bytes} bytes, over the limit of {MAX_SCHEMA_BYTES} bytes"
        ));
    }
    if depth(schema) > MAX_SCHEMA_DEPTH || holds_depth_marker(schema) {
        return Err(format!(
            "its inputSchema is nested more than {MAX_SCHEMA_DEPTH} levels deep"
        ));
    }
    Ok(())
}

/// Serialised size of `value`, without building the text. (Through `Value`'s `Display`,
/// whose serialiser is compiled in serde_json: a generic `to_writer` made here would be as
/// slow as this crate's debug build, ~600 ms for 15 MiB.)
pub(crate) fn json_len(value: &Value) -> usize {
    struct Count(usize);
    impl std::fmt::Write for Count {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            self.0 += s.len();
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing to a sink that never fails cannot fail.
    let _ = std::fmt::write(&mut count, format_args!("{value}"));
    count.0
}

fn depth(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// Whether `value` holds a subtree the stdio reader cut for its depth.
pub(crate) fn holds_depth_marker(value: &Value) -> bool {
    match value {
        Value::String(s) => s == super::bounded::DEPTH_MARKER,
        Value::Array(items) => items.iter().any(holds_depth_marker),
        Value::Object(map) => map.values().any(holds_depth_marker),
        _ => false,
    }
}

/// A compiled `inputSchema`; a schema that does not compile, or whose `$ref`s could loop,
/// checks nothing (the upstream server still validates), and says so in the log.
pub struct ArgumentSchema(Option<jsonschema::Validator>);

impl ArgumentSchema {
    /// Compile a schema the caller vouches for (a host tool's, given in code): an error
    /// says why it cannot check arguments (it does not compile, or its `$ref`s could loop)
    /// where [`ArgumentSchema::compile`] only logs it.
    pub fn strict(schema: &Value) -> Result<ArgumentSchema, String> {
        refs_terminate(schema)?;
        jsonschema::validator_for(schema)
            .map(|validator| ArgumentSchema(Some(validator)))
            .map_err(|e| format!("it does not compile: {e}"))
    }

    /// Compile `schema` for `tool`.
    pub fn compile(tool: &str, schema: &Value) -> ArgumentSchema {
        if let Err(why) = refs_terminate(schema) {
            tracing::warn!("inputSchema of {tool}: {why}; its arguments are not checked");
            return ArgumentSchema(None);
        }
        match jsonschema::validator_for(schema) {
            Ok(validator) => ArgumentSchema(Some(validator)),
            Err(e) => {
                tracing::warn!(
                    "inputSchema of {tool} does not compile ({e}); its arguments are not checked"
                );
                ArgumentSchema(None)
            }
        }
    }

    /// `Ok` when `arguments` fit; else every violation: the first on the message's first
    /// line (which argument, and why), with how many more there are, then one per line.
    pub fn check(&self, tool: &str, arguments: &Value) -> Result<(), String> {
        let Some(validator) = &self.0 else {
            return Ok(());
        };
        let violations: Vec<String> = validator
            .iter_errors(arguments)
            .map(|e| {
                let at = e.instance_path.to_string();
                if at.is_empty() {
                    e.to_string()
                } else {
                    format!("at {at}: {e}")
                }
            })
            .collect();
        let Some((first, rest)) = violations.split_first() else {
            return Ok(());
        };
        let mut message = format!("arguments of {tool} do not match its inputSchema: {first}");
        if !rest.is_empty() {
            message.push_str(&format!(" (and {} more below)", rest.len()));
        }
        for violation in rest {
            message.push_str(&format!("\n- {violation}"));
        }
        Err(message)
    }
}

/// Subschemas applied to the same value as the schema at `node` (so a loop among them
/// never moves on to a smaller value): `$ref`, `allOf`/`anyOf`/`oneOf`, `not`,
/// `if`/`then`/`else`, `dependentSchemas`. Errors on references this check cannot follow.
fn same_value_edges(
    root: &Value,
    node: &Map<String, Value>,
    at: &str,
) -> Result<Vec<String>, String> {
    let mut edges = Vec::new();
    for key in ["$dynamicRef", "$recursiveRef"] {
        if node.contains_key(key) {
            return Err(format!("it uses {key} at {at:?}"));
        }
    }
    if at.is_empty() {
        // `$id` at the root names the document; below it, it would start a new base.
    } else if node.get("$id").is_some_and(Value::is_string) {
        return Err(format!("it sets $id at {at:?}"));
    }
    if let Some(reference) = node.get("$ref").and_then(Value::as_str) {
        let Some(pointer) = reference.strip_prefix('#') else {
            return Err(format!("it refers outside itself ($ref {reference:?})"));
        };
        if root.pointer(pointer).is_none() {
            return Err(format!("$ref {reference:?} points nowhere"));
        }
        edges.push(pointer.to_string());
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(items)) = node.get(key) {
            edges.extend((0..items.len()).map(|i| format!("{at}/{key}/{i}")));
        }
    }
    for key in ["not", "if", "then", "else"] {
        if node.get(key).is_some_and(Value::is_object) {
            edges.push(format!("{at}/{key}"));
        }
    }
    if let Some(Value::Object(map)) = node.get("dependentSchemas") {
        edges.extend(
            map.keys()
                .map(|k| format!("{at}/dependentSchemas/{}", escape(k))),
        );
    }
    Ok(edges)
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Every object in `value` with its JSON pointer.
fn objects<'a>(value: &'a Value, at: String, out: &mut Vec<(String, &'a Map<String, Value>)>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                objects(child, format!("{at}/{}", escape(key)), out);
            }
            out.push((at, map));
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                objects(child, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

/// `Ok` when no chain of same-value subschemas (through `$ref`s) leads back to where it
/// started: the schema's checks then end on any value.
fn refs_terminate(root: &Value) -> Result<(), String> {
    let mut nodes = Vec::new();
    objects(root, String::new(), &mut nodes);
    let mut edges: HashMap<&str, Vec<String>> = HashMap::with_capacity(nodes.len());
    for (at, node) in &nodes {
        edges.insert(at.as_str(), same_value_edges(root, node, at)?);
    }
    // Iterative depth-first search: 1 = on the current path, 2 = done.
    let mut state: HashMap<String, u8> = HashMap::new();
    for (start, _) in &nodes {
        if state.contains_key(start) {
            continue;
        }
        let mut path: Vec<(String, usize)> = vec![(start.clone(), 0)];
        state.insert(start.clone(), 1);
        while let Some((at, next)) = path.last_mut() {
            let out = edges
                .get(at.as_str())
                .map(Vec::as_slice)
                .unwrap_or_default();
            if let Some(to) = out.get(*next) {
                *next += 1;
                match state.get(to) {
                    Some(1) => {
                        let from = path.iter().position(|(p, _)| p == to).unwrap_or(0);
                        let mut cycle: Vec<String> =
                            path[from..].iter().map(|(p, _)| format!("#{p}")).collect();
                        cycle.push(format!("#{to}"));
                        return Err(format!("its $refs loop ({})", cycle.join(" -> ")));
                    }
                    Some(_) => {}
                    None => {
                        state.insert(to.clone(), 1);
                        path.push((to.clone(), 0));
                    }
                }
            } else {
                state.insert(at.clone(), 2);
                path.pop();
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lists_every_violation() {
        let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "required": ["a", "b"]});
        let s = ArgumentSchema::compile("t", &schema);
        assert!(s.check("t", &json!({"a": 1, "b": "x"})).is_ok());
        let e = s.check("t", &json!({"a": "one"})).unwrap_err();
        assert!(
            e.contains("at /a") && e.contains("\"b\" is a required property"),
            "{e}"
        );
        assert_eq!(e.lines().count(), 2, "{e}");
    }

    #[test]
    fn a_ref_cycle_on_one_value_is_found_and_a_recursive_tree_is_not() {
        let cycle = json!({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"});
        let e = refs_terminate(&cycle).unwrap_err();
        assert_eq!(e, "its $refs loop (#/$defs/a -> #/$defs/b -> #/$defs/a)");
        let through_all_of =
            json!({"$defs": {"a": {"allOf": [{"$ref": "#"}]}}, "$ref": "#/$defs/a"});
        assert!(refs_terminate(&through_all_of).is_err());
        let tree = json!({"$defs": {"node": {"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}}, "$ref": "#/$defs/node"});
        assert_eq!(refs_terminate(&tree), Ok(()));
        let s = ArgumentSchema::compile("t", &tree);
        assert!(s
            .check("t", &json!({"children": [{"children": 1}]}))
            .is_err());
        // A schema whose refs loop checks nothing rather than looping.
        assert!(ArgumentSchema::compile("t", &cycle)
            .check("t", &json!({}))
            .is_ok());
        assert!(refs_terminate(&json!({"$ref": "https://example.com/s.json"})).is_err());
    }

    #[test]
    fn vet_bounds_size_and_depth() {
        assert_eq!(vet(&json!({"type": "object"})), Ok(()));
        let mut deep = json!({});
        for _ in 0..100 {
            deep = json!({"properties": {"x": deep}});
        }
        assert_eq!(
            vet(&deep).unwrap_err(),
            "its inputSchema is nested more than 64 levels deep"
        );
        let big = json!({"description": "x".repeat(MAX_SCHEMA_BYTES)});
        assert!(vet(&big)
            .unwrap_err()
            .contains("over the limit of 262144 bytes"));
    }
}
