//! The files runs leave, served back as MCP resources (`resources/list`, `resources/read`,
//! `resource_link` items), over real HTTP with rmcp clients as tenants. Attacks: another
//! tenant (or another MCP session of the same tenant) reading a URI it was not given, URIs
//! that try to climb out (`..`, `%2e%2e`, absolute paths, other schemes), a guest's symlink
//! in `/output`, runs filling the store (bytes, file counts, the server's total). The
//! end-to-end test with the official MCP Python SDK is the CLI's (`sandpy serve`,
//! crates/sandpy-cli/tests/all/resources.rs).

use crate::block_on;
use crate::tenants::{serve, Client};
use base64::Engine;
use rmcp::model::{ErrorCode, ReadResourceRequestParams};
use rmcp::ServiceError;
use serde_json::{json, Value};

/// A program that leaves a text file and a binary one (every byte value) under `/output`.
const TWO_FILES: &str = "import os\n\
os.makedirs('/output/data', exist_ok=True)\n\
open('/output/report.txt', 'w').write('total: 42\\n')\n\
open('/output/data/raw bytes#1.bin', 'wb').write(bytes(range(256)) * 4)\n";

/// A program that leaves a file and links to files outside `/output`, to itself and to the
/// file, in `/output`.
const SYMLINKS: &str = r#"import os
open('/output/real.txt', 'w').write('mine')
made = []
for target in ['/etc/passwd', '/tmp', '../../../../etc/passwd', 'real.txt']:
    name = '/output/link%d' % len(made)
    try:
        os.symlink(target, name)
        made.append(name)
    except OSError as e:
        made.append(type(e).__name__)
made
"#;

/// A program that leaves a small and a large file, and displays a 5,008-byte PNG.
const BIG_PICTURE: &str = r#"open('/output/small.txt', 'w').write('small')
open('/output/large.txt', 'w').write('y' * 4096)
class Picture:
    def _repr_png_(self):
        # A real PNG header (its IHDR checked since issue 60), then padding.
        import struct, zlib
        ihdr = struct.pack('>IIBBBBB', 1, 1, 8, 0, 0, 0, 0)
        head = b'\x89PNG\r\n\x1a\n' + struct.pack('>I', 13) + b'IHDR' + ihdr + struct.pack('>I', zlib.crc32(b'IHDR' + ihdr))
        return head + bytes(5_008 - len(head))
display(Picture())
"#;

/// `tenants` with tokens `token-a` and `token-b`, and these `resources` bounds.
fn config(resources: Value) -> Value {
    json!({
        "tenants": {"agent-a": {"token": "token-a"}, "agent-b": {"token": "token-b"}},
        "resources": resources,
    })
}

/// The URIs of a result's `resource_link` items.
fn links(result: &Value) -> Vec<String> {
    let content = result["content"].as_array().expect("content");
    content
        .iter()
        .filter(|item| item["type"] == "resource_link")
        .map(|item| item["uri"].as_str().expect("uri").to_string())
        .collect()
}

impl Client {
    /// `run_python` with `code`; the whole result.
    async fn run_code(&self, code: &str) -> Value {
        self.result("run_python", json!({"code": code})).await
    }

    /// The URIs `resources/list` lists.
    async fn resource_uris(&self) -> Vec<String> {
        let listed = self.0.list_resources(None).await.expect("resources/list");
        listed.resources.into_iter().map(|r| r.uri).collect()
    }

    /// `resources/read` of `uri`: its one content as JSON, or the protocol error.
    async fn read(&self, uri: &str) -> Result<Value, rmcp::ErrorData> {
        match self
            .0
            .read_resource(ReadResourceRequestParams::new(uri))
            .await
        {
            Ok(result) => {
                assert_eq!(result.contents.len(), 1, "{result:?}");
                Ok(serde_json::to_value(&result.contents[0]).expect("JSON"))
            }
            Err(ServiceError::McpError(error)) => Err(error),
            Err(other) => panic!("{uri}: neither contents nor a protocol error: {other}"),
        }
    }

    /// `uri` is answered exactly as a URI nobody has: `resource not found` (-32002).
    async fn finds_nothing_at(&self, uri: &str) {
        let error = self.read(uri).await.expect_err(uri);
        assert_eq!(
            error.code,
            ErrorCode::RESOURCE_NOT_FOUND,
            "{uri}: {error:?}"
        );
        let shown: String = uri.chars().take(200).collect();
        assert_eq!(
            error.message,
            format!("resource not found: {shown}"),
            "{uri}"
        );
    }
}

#[test]
fn a_runs_files_are_listed_and_read_back_by_its_tenant_and_session_only() {
    block_on(async {
        let served = serve(config(json!({})), None).await;
        let a = Client::connect(&served.url, Some("token-a")).await;
        let b = Client::connect(&served.url, Some("token-b")).await;
        let result = a.run_code(TWO_FILES).await;
        assert_eq!(result["isError"], false, "{result}");
        let uris = links(&result);
        assert_eq!(uris.len(), 2, "{result}");
        let (binary, text) = (&uris[0], &uris[1]);
        let run = &binary["sandpy://runs/".len()..][..32];
        assert!(run.bytes().all(|b| b.is_ascii_hexdigit()), "{binary}");
        assert_eq!(
            binary,
            &format!("sandpy://runs/{run}/files/data/raw%20bytes%231.bin")
        );
        assert_eq!(text, &format!("sandpy://runs/{run}/files/report.txt"));
        let described = &result["structuredContent"]["resources"];
        assert_eq!(described[1]["uri"], text.as_str(), "{described}");
        assert_eq!(described[0]["size"], 1024, "{described}");
        assert_eq!(a.resource_uris().await, uris);

        let read = a.read(text).await.expect("A reads its text file");
        assert_eq!(read["text"], "total: 42\n", "{read}");
        assert_eq!(read["mimeType"], "text/plain", "{read}");
        let read = a.read(binary).await.expect("A reads its binary file");
        let blob = read["blob"].as_str().expect("blob");
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(blob)
            .expect("base64");
        assert_eq!(bytes, (0..=255u8).collect::<Vec<u8>>().repeat(4));

        // Another tenant, holding the exact URI while A is connected: as if it never was.
        assert_eq!(b.resource_uris().await, Vec::<String>::new());
        for uri in &uris {
            b.finds_nothing_at(uri).await;
        }
        // A's own tenant through another MCP session: the files are the session's.
        let a_again = Client::connect(&served.url, Some("token-a")).await;
        a_again.finds_nothing_at(text).await;
        assert_eq!(a_again.resource_uris().await, Vec::<String>::new());
        // Refusing them took nothing from A.
        assert_eq!(
            a.read(text).await.expect("still A's")["text"],
            "total: 42\n"
        );
        a_again.close().await;
        a.still_served().await;
        b.still_served().await;
    });
}

#[test]
fn resource_uris_that_climb_out_or_name_other_schemes_find_nothing() {
    block_on(async {
        let served = serve(config(json!({})), None).await;
        let a = Client::connect(&served.url, Some("token-a")).await;
        let result = a.run_code(TWO_FILES).await;
        let text = links(&result)[1].clone();
        let base = text.trim_end_matches("/files/report.txt");
        for uri in [
            format!("{base}/files/../files/report.txt"),
            format!("{base}/files/%2e%2e/files/report.txt"),
            format!("{base}/files/%2E%2E/%2E%2E/%2E%2E/etc/passwd"),
            format!("{base}/files/./report.txt"),
            format!("{base}/files//report.txt"),
            format!("{base}/files/data%2Fraw%20bytes%231.bin"),
            format!("{base}/files/data/raw bytes#1.bin"),
            format!("{base}/files/%2Fetc%2Fpasswd"),
            format!("{base}/files/report.txt/"),
            format!("{base}/../../etc/passwd"),
            "sandpy://runs/../../../etc/passwd".to_string(),
            "sandpy://runs/%2e%2e/%2e%2e/etc/passwd".to_string(),
            "file:///output/report.txt".to_string(),
            "file:///etc/passwd".to_string(),
            "/etc/passwd".to_string(),
            "../../etc/passwd".to_string(),
            format!("{}{}", text, "/".repeat(20_000)),
        ] {
            a.finds_nothing_at(&uri).await;
        }
        assert_eq!(
            a.read(&text).await.expect("the real one")["text"],
            "total: 42\n"
        );
        a.still_served().await;
    });
}

#[test]
fn a_symlink_the_guest_leaves_in_output_is_neither_followed_nor_served() {
    block_on(async {
        let served = serve(config(json!({})), None).await;
        let a = Client::connect(&served.url, Some("token-a")).await;
        let result = a.run_code(SYMLINKS).await;
        // The WebAssembly tier refuses absolute targets and makes relative ones: the links
        // out of `/output` and to the file are there for the host to meet.
        let made = &result["structuredContent"]["return_value"];
        assert_eq!(made[2], "/output/link2", "{result}");
        assert_eq!(made[3], "/output/link3", "{result}");
        let uris = links(&result);
        assert_eq!(uris.len(), 1, "{result}");
        assert!(uris[0].ends_with("/files/real.txt"), "{uris:?}");
        assert_eq!(a.resource_uris().await, uris);
        let base = uris[0].trim_end_matches("real.txt");
        for n in 0..4 {
            a.finds_nothing_at(&format!("{base}link{n}")).await;
        }
        a.still_served().await;
    });
}

#[test]
fn a_session_over_its_bytes_loses_its_oldest_runs_and_a_run_over_all_is_refused() {
    block_on(async {
        let bounds = json!({"session_mb": 1, "total_mb": 1, "session_files": 10, "inline_kb": 64});
        let served = serve(config(bounds), None).await;
        let a = Client::connect(&served.url, Some("token-a")).await;
        let write = |name: &str, kib: usize| {
            format!("open('/output/{name}', 'wb').write(b'\\xff' * {kib} * 1024)")
        };
        let first = links(&a.run_code(&write("first.bin", 600)).await);
        let second = links(&a.run_code(&write("second.bin", 600)).await);
        assert_eq!(a.resource_uris().await, second, "the oldest run went");
        a.finds_nothing_at(&first[0]).await;
        assert_eq!(
            a.read(&second[0]).await.expect("kept")["blob"]
                .as_str()
                .map(str::len),
            Some(819_200)
        );

        // Over a whole session: not kept (said so), the file inline as before.
        let big = a.run_code(&write("big.bin", 1100)).await;
        assert_eq!(links(&big), Vec::<String>::new(), "{big}");
        let why = big["structuredContent"]["resources_not_kept"]
            .as_str()
            .expect("why");
        assert!(why.contains("sandpy.resources.session_mb"), "{why}");
        let inline = &big["content"].as_array().expect("content")[2];
        assert_eq!(inline["resource"]["uri"], "file:///output/big.bin", "{big}");
        assert_eq!(
            a.resource_uris().await,
            second,
            "nothing of A's was let go for it"
        );

        // Too many files for a session: refused before anything is kept.
        let many = a
            .run_code("for i in range(11): open('/output/f%d.txt' % i, 'w').write('x')")
            .await;
        let why = many["structuredContent"]["resources_not_kept"]
            .as_str()
            .expect("why");
        assert!(
            why.contains("11 files") && why.contains("session_files"),
            "{why}"
        );

        // The server's total: B cannot take what A holds, and is told why.
        let b = Client::connect(&served.url, Some("token-b")).await;
        let full = b.run_code(&write("b.bin", 600)).await;
        assert_eq!(links(&full), Vec::<String>::new(), "{full}");
        let why = full["structuredContent"]["resources_not_kept"].as_str();
        assert!(
            why.is_some_and(|w| w.contains("sandpy.resources.total_mb")),
            "{full}"
        );
        assert_eq!(a.resource_uris().await, second, "A keeps its files");
        a.still_served().await;
        b.still_served().await;
    });
}

#[test]
fn big_images_are_links_small_files_come_inline_too_and_files_expire() {
    block_on(async {
        let bounds = json!({"inline_kb": 1, "ttl_ms": 1500});
        let served = serve(config(bounds), None).await;
        let a = Client::connect(&served.url, Some("token-a")).await;
        let result = a.run_code(BIG_PICTURE).await;
        let content = result["content"].as_array().expect("content");
        let kinds: Vec<(&str, &str)> = content[1..]
            .iter()
            .map(|item| {
                let kind = item["type"].as_str().expect("type");
                let at = item["uri"].as_str().or(item["resource"]["uri"].as_str());
                (kind, at.map_or("", |uri| &uri[uri.len().min(47)..]))
            })
            .collect();
        assert_eq!(
            kinds,
            [
                ("resource_link", "outputs/1.png"),
                ("resource", "files/small.txt"),
                ("resource_link", "files/large.txt"),
                ("resource_link", "files/small.txt"),
            ],
            "{result}"
        );
        let png = links(&result)[0].clone();
        let read = a.read(&png).await.expect("the figure");
        assert_eq!(read["mimeType"], "image/png");
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(read["blob"].as_str().expect("blob"))
            .expect("base64");
        assert_eq!(bytes.len(), 5008);
        tokio::time::sleep(std::time::Duration::from_millis(1700)).await;
        a.finds_nothing_at(&png).await;
        assert_eq!(a.resource_uris().await, Vec::<String>::new(), "expired");
        a.still_served().await;
    });
}
