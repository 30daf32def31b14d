//! Showing results (issue 43): figures, tables and `display()` come back as rich outputs,
//! through the MCP server (the official Python SDK as the client) and `sandpy run --json`,
//! in the native tier with matplotlib and in the WebAssembly tier; and their bounds.

use super::{mcp_client, sandpy};
use base64::Engine;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The packages of the figures venv, pinned: the native test venv's and matplotlib.
const PACKAGES: [&str; 3] = ["numpy==2.4.6", "pandas==3.1.1", "matplotlib==3.11.2"];

/// A venv with numpy, pandas and matplotlib, made once under `target/` (apart from the
/// native tests' own venv, which other tests use as it is).
fn figures_venv() -> &'static PathBuf {
    static VENV: OnceLock<PathBuf> = OnceLock::new();
    VENV.get_or_init(|| super::native::built_venv("native-figures-venv", &PACKAGES))
}

fn config(dir: &Path) -> String {
    let file = json!({"sandpy": {"tier": "native", "native": {"venv": figures_venv()}}});
    let path = dir.join("figures.json");
    std::fs::write(&path, file.to_string()).expect("config");
    path.display().to_string()
}

/// What people write: a plot shown, then a table as the final value.
const PLOT_AND_TABLE: &str = "import matplotlib.pyplot as plt\n\
    import pandas as pd\n\
    plt.plot([1, 4, 9])\n\
    plt.title('squares')\n\
    plt.show()\n\
    print('Chart displayed.')\n\
    pd.DataFrame({'city': ['Lyon', 'Oslo'], 'rain_mm': [831, 763]})";

/// The width and height of a base64 PNG, after checking its signature and header.
fn png_size(base64_png: &str) -> (u32, u32) {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(base64_png)
        .expect("base64");
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    assert_eq!(&bytes[12..16], b"IHDR");
    let be = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    (be(16), be(20))
}

fn assert_a_chart(base64_png: &str) {
    let (width, height) = png_size(base64_png);
    assert!(
        (300..2000).contains(&width) && (200..2000).contains(&height),
        "{width}x{height}"
    );
}

/// The `image` content items of a tool result.
fn images(answer: &Value) -> Vec<&Value> {
    let content = answer["content"].as_array().expect("content");
    content.iter().filter(|c| c["type"] == "image").collect()
}

#[test]
fn mcp_shows_a_figure_as_an_image_and_a_table_as_html() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path());
    let run = |arguments: Value| json!({"method": "call_tool", "name": "run_python", "arguments": arguments});
    let cell_one = "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])";
    let cell_two = "plt.bar(['a', 'b'], [3, 5])";
    let target = [
        "stdio",
        env!("CARGO_BIN_EXE_sandpy"),
        "serve",
        "--config",
        &config,
    ];
    let (out, status, stderr) = mcp_client(
        &target,
        &json!([
            run(json!({"code": PLOT_AND_TABLE})),
            run(json!({"code": cell_one, "session_id": "s"})),
            run(json!({"code": cell_two, "session_id": "s"})),
        ]),
    );
    assert_eq!(status, 0, "{out}\n{stderr}");
    let answers = out.as_array().expect("answers");

    // The figure `plt.show()` showed: an ImageContent the SDK parsed, a PNG that decodes.
    let first = &answers[0];
    assert_eq!(first["structuredContent"]["status"], "ok", "{first}");
    let shown = images(first);
    assert_eq!(shown.len(), 1, "{first}");
    assert_eq!(shown[0]["mimeType"], "image/png");
    assert_a_chart(shown[0]["data"].as_str().expect("data"));
    // The table: its HTML as text that names its type, with its cells.
    let texts: Vec<&str> = first["content"]
        .as_array()
        .expect("content")
        .iter()
        .filter_map(|c| c["text"].as_str())
        .collect();
    let html = texts
        .iter()
        .find(|t| t.contains("(text/html)"))
        .unwrap_or_else(|| panic!("no HTML item: {texts:?}"));
    for cell in ["<table", "Lyon", "Oslo", "831", "rain_mm"] {
        assert!(html.contains(cell), "{cell} not in {html}");
    }
    // The bundles in structuredContent, in order, without the image's bytes.
    let outputs = first["structuredContent"]["outputs"]
        .as_array()
        .expect("outputs");
    assert_eq!(outputs.len(), 2, "{outputs:?}");
    assert_eq!(outputs[0]["kind"], "display");
    assert_eq!(
        outputs[0]["data"]["text/plain"],
        "<Figure size 640x480 with 1 Axes>"
    );
    assert_eq!(outputs[1]["kind"], "result");
    assert!(outputs[1]["data"]["text/html"]
        .as_str()
        .is_some_and(|h| h.contains("Lyon")));
    assert_eq!(first["structuredContent"]["stdout"], "Chart displayed.\n");

    // A session: the figure open at the end of cell 1 is its own; cell 2 starts with none,
    // so its chart has only the bars (one Axes, and no line from cell 1).
    for (answer, plain) in [(&answers[1], "Line2D"), (&answers[2], "BarContainer")] {
        assert_eq!(answer["structuredContent"]["status"], "ok", "{answer}");
        let shown = images(answer);
        assert_eq!(shown.len(), 1, "{answer}");
        assert_a_chart(shown[0]["data"].as_str().expect("data"));
        let structured = &answer["structuredContent"];
        let outputs = structured["outputs"].as_array().expect("outputs");
        // The final value's text is its return value, not sent twice.
        assert_eq!(outputs[0], json!({"kind": "result", "data": {}}));
        assert!(structured["return_value"]
            .as_str()
            .is_some_and(|t| t.contains(plain)));
        assert_eq!(
            outputs[1]["data"]["text/plain"],
            "<Figure size 640x480 with 1 Axes>"
        );
    }
    let one = images(&answers[1])[0]["data"].as_str().expect("data");
    let two = images(&answers[2])[0]["data"].as_str().expect("data");
    assert_ne!(one, two, "cell 2 showed cell 1's figure");
}

/// `sandpy run` with `args` and `code`: the execution it printed.
fn run_json(args: &[&str], code: &str) -> Value {
    let out = sandpy()
        .args(["run", "--json"])
        .args(args)
        .args(["-c", code])
        .output()
        .expect("sandpy");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn run_json_holds_the_figure_and_the_table() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path());
    let execution = run_json(&["--config", &config], PLOT_AND_TABLE);
    assert_eq!(execution["status"], "ok", "{execution}");
    let outputs = execution["outputs"].as_array().expect("outputs");
    assert_eq!(outputs.len(), 2, "{outputs:?}");
    assert_a_chart(outputs[0]["data"]["image/png"].as_str().expect("png"));
    assert!(outputs[1]["data"]["text/html"]
        .as_str()
        .is_some_and(|h| h.contains("<td>Oslo</td>") || h.contains(">Oslo<")));
    // A run that fails after drawing still shows what it drew.
    let failed = run_json(
        &["--config", &config],
        "import matplotlib.pyplot as plt\nplt.plot([1, 2])\n1 / 0",
    );
    assert_eq!(failed["status"], "error", "{failed}");
    assert_a_chart(
        failed["outputs"][0]["data"]["image/png"]
            .as_str()
            .expect("png"),
    );
    // Its traceback has the user's frames only: none of the venv's (host paths).
    let traceback = failed["error"]["traceback"].as_str().expect("traceback");
    assert!(traceback.contains("line 3, in <module>"), "{traceback}");
    let deep = run_json(
        &["--config", &config],
        "import pandas as pd\npd.DataFrame({'a': [1]}).loc['missing']",
    );
    let traceback = deep["error"]["traceback"].as_str().expect("traceback");
    assert!(traceback.contains("line 2, in <module>"), "{traceback}");
    assert!(traceback.contains("KeyError"), "{traceback}");
    for host in [
        "site-packages",
        "native-figures-venv",
        "/work/",
        "sandpy_guest",
    ] {
        assert!(!traceback.contains(host), "{host} in {traceback}");
    }
    // A run with no figure and no value has no outputs.
    let plain = run_json(
        &["--config", &config],
        "import matplotlib.pyplot as plt\nx = 1",
    );
    assert_eq!(plain["status"], "ok", "{plain}");
    assert!(plain.get("outputs").is_none(), "{plain}");
}

#[test]
fn display_is_a_builtin_of_the_webassembly_tier_too() {
    let code = "class Note:\n    def _repr_markdown_(self): return '**bold**'\n    def __repr__(self): return 'Note()'\n\
                display(Note(), {'a': 1})\n'done'";
    let execution = run_json(&[], code);
    assert_eq!(execution["status"], "ok", "{execution}");
    assert_eq!(
        execution["outputs"],
        json!([
            {"kind": "display", "data": {"text/markdown": "**bold**", "text/plain": "Note()"}},
            {"kind": "display", "data": {"text/plain": "{'a': 1}"}},
            {"kind": "result", "data": {"text/plain": "'done'"}},
        ])
    );
    assert_eq!(execution["return_value"], "done");
}

#[test]
fn rich_outputs_are_bounded_in_count_and_bytes() {
    // 1,000 displays: the first 100 kept, the rest counted.
    let many = run_json(&[], "for i in range(1000):\n    display(i)");
    assert_eq!(many["status"], "ok", "{many}");
    assert_eq!(many["outputs"].as_array().map(Vec::len), Some(100));
    assert_eq!(many["outputs"][99]["data"]["text/plain"], "99");
    assert_eq!(many["outputs_dropped"], 900);
    // A 50 MB `_repr_html_` over a 1 MiB budget: left out, and said so; the run is fine.
    let huge = "class Huge:\n    def _repr_html_(self): return '<p>' + 'x' * 50_000_000\n\
                display(Huge())\nprint('after')";
    let cut = run_json(&["--output-files-mb", "1"], huge);
    assert_eq!(cut["status"], "ok", "{cut}");
    assert_eq!(cut["stdout"], "after\n");
    let output = &cut["outputs"][0];
    assert!(output["data"].get("text/html").is_none(), "{output}");
    assert!(output["omitted"]["text/html"]
        .as_str()
        .is_some_and(|why| why.contains("50000003 bytes")));
    // A repr larger than the budget: cut with a marker, within the budget.
    let long = run_json(&["--output-files-mb", "1"], "'y' * 3_000_000");
    let plain = long["outputs"][0]["data"]["text/plain"]
        .as_str()
        .expect("text/plain");
    assert!(plain.len() <= 1 << 20, "{}", plain.len());
    assert!(plain.ends_with("the run's rich-output budget is spent]"));
}

#[test]
fn a_terminal_run_prints_displays_and_saves_what_it_cannot_show() {
    let code = "class Table:\n    def _repr_html_(self): return '<table>7</table>'\n    def __repr__(self): return 'Table(7)'\n\
                print('first')\ndisplay(Table(), 'plain')";
    let (status, stdout, stderr) = super::run(&["run", "-c", code]);
    assert_eq!(status, 0, "{stderr}");
    assert_eq!(stdout, "first\nTable(7)\n'plain'\n");
    assert!(
        stderr.contains(
            "1 output(s) have what a terminal cannot show (text/html); pass --output-dir DIR"
        ),
        "{stderr}"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().display().to_string();
    let (status, _, stderr) = super::run(&["run", "--output-dir", &out, "-c", code]);
    assert_eq!(status, 0, "{stderr}");
    let saved = std::fs::read_to_string(dir.path().join("output-1.html")).expect("output-1.html");
    assert_eq!(saved, "<table>7</table>");
    assert!(
        stderr.contains("output-1.html (16 bytes, text/html)"),
        "{stderr}"
    );
}
