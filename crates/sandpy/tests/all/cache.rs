//! The compiled-runtime cache: a bad entry is rebuilt, never fatal, and old entries of
//! other runtimes are pruned.

use sandpy::{Config, Limits, Sandbox, Status};

#[test]
fn a_corrupt_cache_entry_is_rebuilt_and_old_entries_pruned() {
    let current = crate::sandbox().cache_file().expect("the runtime loads");
    let dir = tempfile::tempdir().expect("tempdir");
    let name = current.file_name().expect("a file name");
    std::fs::write(
        dir.path().join(name),
        b"\x7fELF this is not a compiled component",
    )
    .expect("corrupt copy");
    // Five other (older) builds, each with both engine variants (code with and without
    // interruption checks): all but the newest three builds get pruned. The current
    // build's other variant is kept however old.
    let name_str = name.to_str().expect("utf-8 name");
    let (build, _) = name_str.rsplit_once('-').expect("build-variant");
    let sibling = format!("{build}-ffffffffffffffff.cwasm");
    let mut old = vec![(sibling.clone(), 100)];
    for i in 0..5u64 {
        for variant in ["0000000000000000", "1111111111111111"] {
            old.push((
                format!("python-{i:016x}-wasmtime48.0.8-{variant}.cwasm"),
                i + 1,
            ));
        }
    }
    for (entry, hours) in old {
        let file = std::fs::File::create(dir.path().join(entry)).expect("stale entry");
        let age = std::time::Duration::from_secs(3600 * hours);
        file.set_modified(std::time::SystemTime::now() - age)
            .expect("mtime");
    }
    let messages = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = messages.clone();
    let config = Config {
        cache_dir: Some(dir.path().to_path_buf()),
        progress: Some(std::sync::Arc::new(move |m: &str| {
            seen.lock().expect("lock").push(m.to_string())
        })),
        ..crate::config()
    };
    let sandbox = Sandbox::new(config).expect("a corrupt entry is rebuilt, not fatal");
    let e = crate::block_on(sandbox.run("1 + 1", &Limits::default()));
    assert_eq!(
        (e.status, e.return_value),
        (Status::Ok, Some(serde_json::json!(2)))
    );
    assert!(
        messages
            .lock()
            .expect("lock")
            .iter()
            .any(|m| m.contains("compiling")),
        "a progress message was shown"
    );
    let rebuilt: Vec<_> = std::fs::read_dir(dir.path())
        .expect("dir")
        .filter_map(|e| e.ok())
        .collect();
    let size = std::fs::metadata(dir.path().join(name))
        .expect("the entry")
        .len();
    assert!(
        size > 1_000_000,
        "the corrupt entry was rewritten ({size} bytes)"
    );
    let mut names: Vec<String> = rebuilt
        .iter()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(names.contains(&sibling), "{names:?}");
    let stale: Vec<&String> = names
        .iter()
        .filter(|n| n.starts_with("python-000000000000000"))
        .collect();
    assert_eq!(
        stale.len(),
        6,
        "both entries of the three newest other builds are kept: {names:?}"
    );
    assert!(
        stale
            .iter()
            .all(|n| !n.starts_with("python-0000000000000003")
                && !n.starts_with("python-0000000000000004")),
        "{names:?}"
    );
}
