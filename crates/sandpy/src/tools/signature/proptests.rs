//! Generated schemas, names and descriptions, hostile ones among them: every stub is
//! Python (the host's `python3` parses it) and within its byte limit.

use super::tests::assert_python;
use super::*;
use proptest::prelude::*;
use serde_json::{json, Map};

/// Text an upstream might send: plain words, Python keywords, quotes and backslashes,
/// line breaks of every kind, NUL, non-ASCII.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z_][a-z0-9_]{0,8}",
        Just("class".to_string()),
        Just("a-b".to_string()),
        Just(String::new()),
        Just("\"\"\"".to_string()),
        Just("x\\".to_string()),
        Just("\"".to_string()),
        Just("é\u{2028}\u{85}\r\n\0".to_string()),
        Just("9lives".to_string()),
        Just("more".to_string()),
        Just("arguments".to_string()),
        Just("TypedDict".to_string()),
        "\\PC{0,12}",
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (-1e9f64..1e9).prop_map(Value::from),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 12, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(text(), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn schema() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        prop_oneof![
            Just("string"),
            Just("integer"),
            Just("number"),
            Just("boolean"),
            Just("null"),
            Just("object"),
            Just("array"),
            Just("made-up"),
        ]
        .prop_map(|t| json!({"type": t})),
        prop::collection::vec(json_value(), 0..20).prop_map(|v| json!({"enum": v})),
        json_value().prop_map(|v| json!({"const": v})),
        prop_oneof![
            Just("#/$defs/a"),
            Just("#/$defs/b"),
            Just("#"),
            Just("#/nowhere")
        ]
        .prop_map(|r| json!({"$ref": r})),
        Just(json!({})),
        Just(json!(true)),
    ];
    leaf.prop_recursive(5, 64, 6, |inner| {
        prop_oneof![
            (
                prop::collection::btree_map(text(), inner.clone(), 0..8),
                prop::collection::vec(text(), 0..4),
            )
                .prop_map(|(p, r)| {
                    let p: Map<String, Value> = p.into_iter().collect();
                    json!({"type": "object", "properties": p, "required": r})
                }),
            inner
                .clone()
                .prop_map(|i| json!({"type": "array", "items": i})),
            inner
                .clone()
                .prop_map(|i| json!({"type": "object", "additionalProperties": i})),
            prop::collection::vec(inner.clone(), 0..10).prop_map(|v| json!({"anyOf": v})),
            (inner.clone(), text(), json_value()).prop_map(|(i, d, default)| {
                let mut i = i;
                if let Value::Object(map) = &mut i {
                    map.insert("description".into(), Value::String(d));
                    map.insert("default".into(), default);
                    map.insert("nullable".into(), Value::Bool(true));
                }
                i
            }),
        ]
    })
}

/// A tool's input schema: an object with properties and `$defs` that may refer to each
/// other and to the root.
fn input_schema() -> impl Strategy<Value = Value> {
    (
        prop::collection::btree_map(text(), schema(), 0..30),
        prop::collection::vec(text(), 0..6),
        schema(),
        schema(),
        prop::option::of(schema()),
    )
        .prop_map(|(properties, required, a, b, extra)| {
            let properties: Map<String, Value> = properties.into_iter().collect();
            let mut root = json!({"type": "object", "properties": properties,
                "required": required, "$defs": {"a": a, "b": b}});
            if let Some(extra) = extra {
                root["additionalProperties"] = extra;
            }
            root
        })
}

fn tool_info() -> impl Strategy<Value = (ToolInfo, Option<Value>)> {
    (
        text(),
        text(),
        text(),
        input_schema(),
        prop::option::of(input_schema()),
    )
        .prop_map(|(server, name, description, input, output)| {
            let info = ToolInfo {
                name: format!("mcp__{server}__{name}"),
                description: description.repeat(50),
                input_schema: input,
            };
            (info, output)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn every_stub_is_python_within_its_cap(
        tools in prop::collection::vec(tool_info(), 24),
        bytes in prop_oneof![Just(6000usize), 200usize..2000],
    ) {
        let limits = SignatureLimits { bytes, ..SignatureLimits::default() };
        let mut texts = Vec::new();
        for (tool, output) in &tools {
            for detail in [Detail::Full, Detail::Brief, Detail::Bare] {
                let text = stub(tool, output.as_ref(), detail, &limits);
                prop_assert!(text.len() <= bytes, "{} bytes over {bytes}:\n{text}", text.len());
                texts.push(text);
            }
        }
        let lookup = |i: usize| tools.get(i).cloned();
        let block = stubs(tools.len(), &lookup, 4 * bytes, &limits);
        prop_assert!(block.len() <= 4 * bytes);
        if let Some(rest) = block.strip_prefix(STUB_IMPORTS) {
            texts.push(format!("{rest}\ndef last(): ..."));
        }
        assert_python(&texts);
    }
}
