//! What the hub's tests share: a config with the fake upstream, and short time limits.

use super::upstream::Timing;
use super::Hub;
use crate::config::ConfigFile;
use std::path::Path;
use std::time::Duration;

/// A hub config with one server, `fake`: `tests/fake_upstream.py` with `args`.
pub(super) fn fake(args: &[&str]) -> ConfigFile {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fake_upstream.py");
    let args: Vec<&str> = std::iter::once(script)
        .chain(args.iter().copied())
        .collect();
    let text = serde_json::json!({"mcpServers": {"fake": {"command": "python3", "args": args}}});
    ConfigFile::parse(&text.to_string(), Path::new("t.json")).expect("valid")
}

pub(super) fn quick() -> Timing {
    Timing {
        first_start: Duration::from_secs(10),
        handshake: Duration::from_secs(10),
        backoff: Duration::from_millis(300),
        max_backoff: Duration::from_secs(10),
        stop_grace: Duration::from_millis(500),
    }
}

pub(super) fn status(hub: &Hub) -> String {
    hub.servers()[0].status.clone()
}
