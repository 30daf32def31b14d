//! Files the client can fetch (issue 43): what a run leaves in `/output` is served back as
//! MCP resources of the caller's MCP session, driven by the official MCP Python SDK against
//! `sandpy serve --http` with two tenants connected at once. The attacks on the store
//! (traversal, bounds, symlinks, other sessions) are sandpy-mcp's `resources` tests.

use crate::mcp_client_with;
use crate::serve::http_server;
use base64::Engine;
use serde_json::{json, Value};

/// A program that leaves a binary file and a text file with an odd name in `/output`.
const PROGRAM: &str = "open('/output/data.bin', 'wb').write(bytes(range(256)) * 3)\n\
open('/output/my report (v2).csv', 'w').write('a,b\\n1,2\\n')";

#[test]
fn a_file_a_run_writes_is_listed_and_read_back_by_its_tenant_and_refused_to_another() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("sandpy.mcp.json");
    let tenants = json!({"mcpServers": {}, "sandpy": {"tenants": {
        "agent-a": {"token": "token-a"}, "agent-b": {"token": "token-b"}}}});
    std::fs::write(&config, tenants.to_string()).expect("config");
    let config = config.display().to_string();
    let (_server, url) = http_server(&["--config", &config]);
    let requests = json!([
        {"method": "call_tool", "name": "run_python", "arguments": {"code": PROGRAM}},
        {"method": "list_resources"},
        {"method": "read_resource", "link": 0},
        {"method": "read_resource", "link": 1},
        // The other tenant, connected at the same time, with the exact URIs.
        {"method": "read_resource", "link": 1, "client": "second"},
        {"method": "read_resource", "link": 0, "client": "second"},
        {"method": "list_resources", "client": "second"},
        // Paths that climb out name nothing.
        {"method": "read_resource", "uri": "sandpy://runs/../../../etc/passwd"},
        {"method": "read_resource", "uri": "file:///etc/passwd"},
        {"method": "read_resource", "link": 1},
    ]);
    let env = [("MCP_CLIENT_SECOND_TOKEN", "token-b")];
    let (out, status, stderr) = mcp_client_with(&["http", &url, "token-a"], &requests, &env);
    assert_eq!(status, 0, "{out}\n{stderr}");

    let ran = &out[0];
    assert_eq!(ran["isError"], false, "{ran}");
    let links: Vec<&Value> = (ran["content"].as_array().expect("content").iter())
        .filter(|item| item["type"] == "resource_link")
        .collect();
    assert_eq!(links.len(), 2, "{ran}");
    let (binary, text) = (links[0], links[1]);
    let uri = |item: &Value| item["uri"].as_str().expect("uri").to_string();
    assert!(uri(binary).starts_with("sandpy://runs/"), "{binary}");
    assert!(uri(binary).ends_with("/files/data.bin"), "{binary}");
    assert!(
        uri(text).ends_with("/files/my%20report%20%28v2%29.csv"),
        "{text}"
    );
    assert_eq!(text["name"], "my report (v2).csv", "{text}");
    assert_eq!(text["mimeType"], "text/csv", "{text}");
    assert_eq!(binary["size"], 768, "{binary}");

    let listed: Vec<String> = (out[1]["resources"].as_array().expect("resources").iter())
        .map(uri)
        .collect();
    assert_eq!(listed, [uri(binary), uri(text)], "{}", out[1]);

    let blob = out[2]["contents"][0]["blob"].as_str().expect("blob");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(blob)
        .expect("base64");
    assert_eq!(bytes, (0..=255u8).collect::<Vec<u8>>().repeat(3));
    assert_eq!(out[3]["contents"][0]["text"], "a,b\n1,2\n", "{}", out[3]);
    assert_eq!(out[3]["contents"][0]["uri"], uri(text).as_str());

    for (i, asked) in [(4, uri(text)), (5, uri(binary))] {
        let refused = &out[i];
        assert_eq!(refused["code"], -32002, "{refused}");
        let message = format!("MCPError: resource not found: {asked}");
        assert_eq!(refused["error"], message.as_str(), "{refused}");
    }
    assert_eq!(out[6]["resources"], json!([]), "{}", out[6]);
    for i in [7, 8] {
        assert_eq!(out[i]["code"], -32002, "{}", out[i]);
    }
    assert_eq!(
        out[9]["contents"][0]["text"], "a,b\n1,2\n",
        "the refusals took nothing from its owner"
    );
}

/// A program that displays a 10,008-byte PNG (a figure too big to send inline at 4 KiB)
/// and leaves a small file.
const BIG_FIGURE: &str = r#"class Figure:
    def _repr_png_(self):
        # A real PNG header (its IHDR checked since issue 60), then padding.
        import struct, zlib
        ihdr = struct.pack('>IIBBBBB', 1, 1, 8, 0, 0, 0, 0)
        head = b'\x89PNG\r\n\x1a\n' + struct.pack('>I', 13) + b'IHDR' + ihdr + struct.pack('>I', zlib.crc32(b'IHDR' + ihdr))
        return head + bytes(10_008 - len(head))
display(Figure())
open('/output/note.txt', 'w').write('see the figure')
"#;

#[test]
fn over_stdio_a_figure_past_the_inline_size_is_a_link_the_client_reads_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("sandpy.mcp.json");
    let small = json!({"mcpServers": {}, "sandpy": {"resources": {"inline_kb": 4}}});
    std::fs::write(&config, small.to_string()).expect("config");
    let config = config.display().to_string();
    let requests = json!([
        {"method": "call_tool", "name": "run_python", "arguments": {"code": BIG_FIGURE}},
        {"method": "read_resource", "link": 0},
        {"method": "read_resource", "link": 1},
        {"method": "list_resources"},
    ]);
    let binary = env!("CARGO_BIN_EXE_sandpy");
    let target = ["stdio", binary, "serve", "--config", &config];
    let (out, status, stderr) = mcp_client_with(&target, &requests, &[]);
    assert_eq!(status, 0, "{out}\n{stderr}");
    let content = out[0]["content"].as_array().expect("content");
    let kinds: Vec<&str> = content
        .iter()
        .map(|c| c["type"].as_str().unwrap_or("?"))
        .collect();
    // The summary, the figure as a link (no image inline), the note inline, then its link.
    assert_eq!(
        kinds,
        ["text", "resource_link", "resource", "resource_link"],
        "{}",
        out[0]
    );
    let figure = &content[1];
    assert!(
        figure["uri"]
            .as_str()
            .is_some_and(|u| u.ends_with("/outputs/1.png")),
        "{figure}"
    );
    assert_eq!(figure["mimeType"], "image/png");
    assert_eq!(figure["size"], 10_008);
    let blob = out[1]["contents"][0]["blob"].as_str().expect("blob");
    let png = base64::engine::general_purpose::STANDARD
        .decode(blob)
        .expect("base64");
    assert_eq!(png.len(), 10_008);
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
    assert_eq!(
        out[2]["contents"][0]["text"], "see the figure",
        "{}",
        out[2]
    );
    assert_eq!(
        out[3]["resources"].as_array().map(Vec::len),
        Some(2),
        "{}",
        out[3]
    );
}

/// A client on a protocol version without `resource_link` (2024-11-05), over stdio with
/// raw JSON-RPC lines: every file comes inline, under its `sandpy://` URI, which it can
/// still list and read.
#[test]
fn a_client_older_than_resource_links_gets_files_inline_under_uris_it_can_read() {
    use std::io::{BufRead, Write};
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("sandpy.mcp.json");
    std::fs::write(&config, r#"{"mcpServers": {}}"#).expect("config");
    let mut server = crate::sandpy()
        .args(["serve", "--config"])
        .arg(&config)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("sandpy serve");
    let mut stdin = server.stdin.take().expect("stdin");
    let stdout = std::io::BufReader::new(server.stdout.take().expect("stdout"));
    let _stop = crate::serve::Server(server);
    let (lines, answers) = std::sync::mpsc::channel::<Value>();
    std::thread::spawn(move || {
        for line in stdout.lines().map_while(Result::ok) {
            if let Ok(message) = serde_json::from_str::<Value>(&line) {
                let _ = lines.send(message);
            }
        }
    });
    let mut ask = |message: Value| -> Value {
        writeln!(stdin, "{message}").expect("send");
        let Some(id) = message.get("id").cloned() else {
            return Value::Null;
        };
        loop {
            let answer = answers
                .recv_timeout(std::time::Duration::from_secs(60))
                .expect("an answer within 60 s");
            if answer["id"] == id {
                return answer;
            }
        }
    };
    let init = ask(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2024-11-05", "capabilities": {},
        "clientInfo": {"name": "old", "version": "0"}}}),
    );
    assert_eq!(init["result"]["protocolVersion"], "2024-11-05", "{init}");
    ask(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let code = "open('/output/big.txt', 'w').write('z' * 2_000_000)";
    let ran = ask(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "run_python", "arguments": {"code": code}}}));
    let content = ran["result"]["content"].as_array().expect("content");
    assert_eq!(content.len(), 2, "the summary and the file, no link: {ran}");
    let inline = &content[1]["resource"];
    let uri = inline["uri"].as_str().expect("uri").to_string();
    assert!(
        uri.starts_with("sandpy://runs/") && uri.ends_with("/files/big.txt"),
        "{uri}"
    );
    assert_eq!(
        inline["text"].as_str().map(str::len),
        Some(2_000_000),
        "over inline_kb, still inline"
    );
    let listed = ask(json!({"jsonrpc": "2.0", "id": 3, "method": "resources/list"}));
    assert_eq!(
        listed["result"]["resources"][0]["uri"],
        uri.as_str(),
        "{listed}"
    );
    let read = ask(
        json!({"jsonrpc": "2.0", "id": 4, "method": "resources/read",
        "params": {"uri": uri}}),
    );
    let text = read["result"]["contents"][0]["text"].as_str().map(str::len);
    assert_eq!(text, Some(2_000_000));
}
