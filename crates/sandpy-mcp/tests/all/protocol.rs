//! What `initialize` declares over HTTP (reqwest against `HttpListener`): the protocol
//! versions the server answers with and its capabilities, as docs/guide/service.md says.

use crate::block_on;
use crate::http_limits::serve;
use sandpy_mcp::HttpLimits;
use serde_json::{json, Value};

#[test]
fn initialize_answers_the_versions_and_capabilities_the_guide_names() {
    block_on(async {
        let address = serve(HttpLimits::default()).await;
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::new();
        for (asked, answered) in [
            ("2025-11-25", "2025-11-25"),
            ("2025-06-18", "2025-06-18"),
            ("2025-03-26", "2025-03-26"),
            ("2024-11-05", "2024-11-05"),
            ("1999-01-01", "2025-11-25"),
        ] {
            let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": asked, "capabilities": {},
                           "clientInfo": {"name": "t", "version": "0"}}});
            let response = http
                .post(format!("http://{address}/mcp"))
                .bearer_auth("a")
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .body(initialize.to_string())
                .send()
                .await
                .expect("POST");
            assert_eq!(response.status(), 200, "{asked}");
            let text = response.text().await.expect("body");
            // Answered whole (JSON), or as an SSE stream.
            let result: Value = std::iter::once(text.as_str())
                .chain(text.lines().filter_map(|line| line.strip_prefix("data:")))
                .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
                .find_map(|message| message.get("result").cloned())
                .unwrap_or_else(|| panic!("{asked}: no result in {text}"));
            assert_eq!(result["protocolVersion"], answered, "{asked}: {result}");
            let capabilities = json!({"tools": {}, "resources": {}});
            assert_eq!(result["capabilities"], capabilities, "{result}");
            assert_eq!(result["serverInfo"]["name"], "sandpy", "{result}");
            assert_eq!(
                result["serverInfo"]["version"],
                env!("CARGO_PKG_VERSION"),
                "{result}"
            );
            assert!(result["instructions"].is_string(), "{result}");
        }
    });
}
