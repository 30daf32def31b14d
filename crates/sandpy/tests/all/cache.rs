//! The compiled-runtime cache: a bad entry is rebuilt, never fatal.

use sandpy::{Config, Limits, Sandbox, Status};

#[test]
fn a_corrupt_cache_entry_is_rebuilt() {
    crate::sandbox(); // make sure the shared cache holds a good entry
    let shared = Config::default().resolved_cache_dir();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut copied = 0;
    for entry in std::fs::read_dir(&shared).expect("shared cache").filter_map(|e| e.ok()) {
        if entry.path().extension().is_some_and(|x| x == "cwasm") {
            let target = dir.path().join(entry.file_name());
            std::fs::write(&target, b"\x7fELF this is not a compiled component").expect("corrupt copy");
            copied += 1;
        }
    }
    assert!(copied > 0, "no cache entry in {}", shared.display());
    let messages = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = messages.clone();
    let config = Config {
        cache_dir: Some(dir.path().to_path_buf()),
        progress: Some(std::sync::Arc::new(move |m: &str| seen.lock().expect("lock").push(m.to_string()))),
        ..Config::default()
    };
    let sandbox = Sandbox::new(config).expect("a corrupt entry is rebuilt, not fatal");
    let e = crate::block_on(sandbox.run("1 + 1", &Limits::default()));
    assert_eq!((e.status, e.return_value), (Status::Ok, Some(serde_json::json!(2))));
    assert!(messages.lock().expect("lock").iter().any(|m| m.contains("compiling")), "a progress message was shown");
    let rebuilt: Vec<_> = std::fs::read_dir(dir.path()).expect("dir").filter_map(|e| e.ok()).collect();
    assert!(rebuilt.iter().any(|e| e.metadata().map(|m| m.len() > 1_000_000).unwrap_or(false)), "the entry was rewritten");
}
