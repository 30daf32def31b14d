//! The stubs of a table of schemas, as a model reads them, and that they are Python.

use super::*;
use serde_json::json;
use std::io::Write;

/// Fails unless every text, after [`STUB_IMPORTS`], parses as Python (the host's
/// `python3`, its `ast` module) and ends with a `def`: what the guest reads back.
pub(super) fn assert_python(texts: &[String]) {
    let script = "import ast, json, sys\n\
        bad = []\n\
        for i, text in enumerate(json.load(sys.stdin)):\n\
        \x20   try:\n\
        \x20       body = ast.parse(text).body\n\
        \x20       if not isinstance(body[-1], ast.FunctionDef): bad.append((i, 'no def last'))\n\
        \x20   except SyntaxError as e:\n\
        \x20       bad.append((i, str(e)))\n\
        print(json.dumps(bad))\n";
    let mut child = std::process::Command::new("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    let files: Vec<String> = texts
        .iter()
        .map(|t| format!("{STUB_IMPORTS}\n{t}"))
        .collect();
    let input = serde_json::to_vec(&files).expect("json");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(&input)
        .expect("write");
    let out = child.wait_with_output().expect("python3 ran");
    let bad: Vec<(usize, String)> = serde_json::from_slice(&out.stdout).expect("python3's answer");
    if let Some((i, why)) = bad.first() {
        panic!("stub {i} is not Python ({why}):\n{}", files[*i]);
    }
}

fn tool(name: &str, description: &str, input: Value) -> ToolInfo {
    ToolInfo {
        name: name.into(),
        description: description.into(),
        input_schema: input,
    }
}

fn full(tool: &ToolInfo, output: Option<Value>) -> String {
    stub(
        tool,
        output.as_ref(),
        Detail::Full,
        &SignatureLimits::default(),
    )
}

#[test]
fn a_table_of_schemas_as_stubs() {
    let many: serde_json::Map<String, Value> = (0..30)
        .map(|i| (format!("a{i:02}"), json!({"type": "integer"})))
        .collect();
    let cases: Vec<(ToolInfo, Option<Value>, &str)> = vec![
        (
            tool(
                "mcp__everything__get-sum",
                "Returns the sum of two numbers",
                json!({"type": "object", "properties": {
                    "a": {"type": "number", "description": "First number"},
                    "b": {"type": "number", "description": "Second number"}},
                    "required": ["a", "b"]}),
            ),
            None,
            r#"# tools.everything.get_sum
def get_sum(*, a: float, b: float) -> Any:
    """Returns the sum of two numbers

    Args:
        a: First number
        b: Second number""""#,
        ),
        (
            tool(
                "mcp__everything__get-structured-content",
                "Returns structured content.\nSecond line.",
                json!({"type": "object", "properties": {
                    "location": {"enum": ["New York", "Chicago"], "description": "Choose city"}},
                    "required": ["location"]}),
            ),
            Some(json!({"type": "object", "properties": {
                "temperature": {"type": "number", "description": "Temperature in celsius"},
                "conditions": {"type": "string"},
                "hourly": {"type": "array", "items": {"type": "object", "properties": {
                    "hour": {"type": "integer"}, "rain": {"type": ["number", "null"]}},
                    "required": ["hour"]}}},
                "required": ["temperature", "conditions"]})),
            r#"# tools.everything.get_structured_content
class GetStructuredContentResultHourlyItem(TypedDict):
    hour: int
    rain: NotRequired[float | None]
class GetStructuredContentResult(TypedDict):
    conditions: str
    temperature: float  # Temperature in celsius
    hourly: NotRequired[list[GetStructuredContentResultHourlyItem]]
def get_structured_content(*, location: Literal["New York", "Chicago"]) -> GetStructuredContentResult:
    """Returns structured content.
    Second line.

    Args:
        location: Choose city""""#,
        ),
        (
            tool(
                "mcp__fs__search",
                "",
                json!({"type": "object", "properties": {
                    "path": {"type": "string"},
                    "limit": {"type": "integer", "default": 10},
                    "mode": {"const": "fast"},
                    "tags": {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "integer"}]}},
                    "meta": {"type": "object", "additionalProperties": {"type": "boolean"}},
                    "filter": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": null},
                    "depth": {"type": "number", "nullable": true},
                    "sort": {"enum": ["asc", "desc", null]},
                    "big": {"type": "string", "default": "x".repeat(200)}},
                    "required": ["path"], "additionalProperties": false}),
            ),
            Some(
                json!({"type": "object", "properties": {"files": {"type": "array", "items": {"type": "string"}}}}),
            ),
            r#"# tools.fs.search
class SearchResult(TypedDict):
    files: NotRequired[list[str]]
def search(
    *,
    path: str,
    big: str = ...,
    depth: float | None = None,
    filter: str | None = None,
    limit: int = 10,
    meta: dict[str, bool] | None = None,
    mode: Literal["fast"] | None = None,
    sort: Literal["asc", "desc"] | None = None,
    tags: list[str | int] | None = None,
) -> SearchResult: ..."#,
        ),
        (
            tool(
                "mcp__web__fetch",
                "Fetch a page.",
                json!({"type": "object", "properties": {
                    "url": {"type": "string"}, "max-bytes": {"type": "integer"}, "class": {"type": "string"}},
                    "required": ["url"]}),
            ),
            None,
            r#"# tools.web.fetch
FetchArguments = TypedDict("FetchArguments", {
    "url": str,
    "class": NotRequired[str],
    "max-bytes": NotRequired[int],
})
def fetch(arguments: FetchArguments, /) -> Any:
    """Fetch a page.

    Takes its arguments as one dict: some of their names are not Python names.""""#,
        ),
        (
            tool(
                "mcp__tree__walk",
                "",
                json!({"type": "object", "properties": {
                    "root": {"$ref": "#/$defs/node"}, "loop": {"$ref": "#/$defs/a"}},
                    "required": ["root"],
                    "$defs": {
                        "node": {"type": "object", "properties": {
                            "name": {"type": "string"},
                            "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}},
                        "a": {"anyOf": [{"$ref": "#/$defs/b"}, {"type": "string"}]},
                        "b": {"$ref": "#/$defs/a"}}}),
            ),
            None,
            r#"# tools.tree.walk
class WalkNode(TypedDict):
    children: NotRequired[list["WalkNode"]]
    name: NotRequired[str]
def walk(*, root: WalkNode, loop: Any = None) -> Any: ..."#,
        ),
        (
            tool("mcp__class__x", "", json!({})),
            None,
            r#"# call_mcp_tool("mcp__class__x", {...}) (not in `tools`)
def x() -> Any: ..."#,
        ),
        (
            tool("mcp__s___private", "", json!({})),
            None,
            r#"# call_mcp_tool("mcp__s___private", {...}) (not in `tools`)
def tool_private() -> Any: ..."#,
        ),
        (
            tool(
                "local_tool",
                "",
                json!({"type": "object", "additionalProperties": true}),
            ),
            None,
            r#"# call_mcp_tool("local_tool", {...}) (not in `tools`)
def local_tool(**more: Any) -> Any: ..."#,
        ),
        (
            tool(
                "mcp__s__wide",
                "",
                json!({"type": "object", "properties": many, "required": ["a05"]}),
            ),
            None,
            r#"# tools.s.wide
def wide(
    *,
    a05: int,
    a00: int | None = None,
    a01: int | None = None,
    a02: int | None = None,
    a03: int | None = None,
    a04: int | None = None,
    a06: int | None = None,
    a07: int | None = None,
    a08: int | None = None,
    a09: int | None = None,
    a10: int | None = None,
    a11: int | None = None,
    a12: int | None = None,
    a13: int | None = None,
    a14: int | None = None,
    a15: int | None = None,
    a16: int | None = None,
    a17: int | None = None,
    a18: int | None = None,
    a19: int | None = None,
    a20: int | None = None,
    a21: int | None = None,
    a22: int | None = None,
    a23: int | None = None,
    # ... and 6 more arguments
    **more: Any,
) -> Any: ..."#,
        ),
        (
            tool(
                "mcp__s__quote",
                "Ends in \"\"\" and \\ and a quote\"",
                json!({"type": "object", "properties": {"q": {"type": "string", "description": "say \"\"\"\nhi"}}}),
            ),
            None,
            r##"# tools.s.quote
def quote(*, q: str | None = None) -> Any:
    """Ends in \"\"" and \\ and a quote"

    Args:
        q: say \"\"\"""""##,
        ),
    ];
    let mut texts = Vec::new();
    let mut wrong = Vec::new();
    for (tool, output, expected) in cases {
        let text = full(&tool, output);
        if text != expected {
            wrong.push(format!("{}:\n{text}", tool.name));
        }
        texts.push(text);
    }
    assert_python(&texts);
    assert!(wrong.is_empty(), "stubs differ:\n\n{}", wrong.join("\n\n"));
}

#[test]
fn a_stub_over_its_cap_is_made_with_less_detail() {
    let info = tool(
        "mcp__s__t",
        &"A long description. ".repeat(100),
        json!({"type": "object", "properties": {"x": {"enum": ["a".repeat(70), "b".repeat(70)]}}}),
    );
    let limits = |bytes| SignatureLimits {
        bytes,
        ..SignatureLimits::default()
    };
    let brief = stub(&info, None, Detail::Full, &limits(1200));
    let docstring = brief.split("\"\"\"").nth(1).expect("a docstring");
    assert!(
        docstring.starts_with("A long description.")
            && docstring.ends_with("...")
            && docstring.len() <= 200,
        "{brief}"
    );
    let bare = stub(&info, None, Detail::Full, &limits(400));
    assert!(
        bare.contains("x: Literal[\"aaa") && bare.ends_with(") -> Any: ..."),
        "{bare}"
    );
    let plain = stub(&info, None, Detail::Full, &limits(200));
    assert_eq!(plain, "# tools.s.t\ndef t(*, x: Any = None) -> Any: ...");
    let fallback = stub(&info, None, Detail::Full, &limits(40));
    assert_eq!(fallback, "def tool(**kwargs: Any) -> Any: ...");
    // Below the smallest stub, that stub (a cap that small is a mistake).
    assert_eq!(stub(&info, None, Detail::Full, &limits(10)), fallback);
    assert_python(&[brief, bare, plain, fallback]);
}

#[test]
fn a_block_of_stubs_keeps_to_its_budget() {
    let tools: Vec<ToolInfo> = (0..500)
        .map(|i| tool(&format!("mcp__s__t{i}"), "Does a thing.\nAt length.", json!({"type": "object", "properties": {"x": {"type": "string", "description": "the x"}}})))
        .collect();
    let limits = SignatureLimits::default();
    let asked = std::cell::Cell::new(0);
    let lookup = |i: usize| {
        asked.set(asked.get() + 1);
        tools.get(i).map(|t| (t.clone(), None))
    };
    let none = |budget| stubs(tools.len(), &lookup, budget, &limits);
    let all = none(100_000);
    assert!(
        all.starts_with(STUB_IMPORTS) && all.contains("    Args:\n        x: the x"),
        "{all}"
    );
    let brief = none(45_000);
    assert!(
        brief.contains("\"\"\"Does a thing.\"\"\"") && !brief.contains("Args:"),
        "{brief}"
    );
    asked.set(0);
    let some = none(1_000);
    assert!(
        asked.get() < 60,
        "{} tools looked up for a few shown",
        asked.get()
    );
    assert!(
        some.len() <= 1_000
            && some.ends_with(
                "more tools: search_tools() and get_tool_schema() give their signatures"
            ),
        "{some}"
    );
    assert_eq!(none(10), "");
}
