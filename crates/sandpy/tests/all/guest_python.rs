//! The guest package's own Python tests (`guest/tests/test_*.py`), run inside the sandbox
//! with the runner `guest/tests/runner.py` appended (it is not built into the guest).

use std::path::Path;

#[test]
fn guest_package_tests_pass_inside_the_sandbox() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../guest/tests");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("guest/tests")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .collect();
    files.retain(|p| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("test_") && n.ends_with(".py"))
    });
    files.sort();
    assert!(!files.is_empty());
    let runner = std::fs::read_to_string(dir.join("runner.py")).expect("guest/tests/runner.py");
    for file in files {
        let code = std::fs::read_to_string(&file).expect("read")
            + "\n"
            + &runner
            + "\nrun_tests(globals())\n";
        let options = sandpy::RunOptions {
            filename: Some(file.display().to_string()),
            ..Default::default()
        };
        let e = crate::run_with(&code, &options);
        assert_eq!(
            e.status,
            sandpy::Status::Ok,
            "{}:\n{}",
            file.display(),
            e.stderr
        );
        assert!(e.return_value.unwrap()["passed"].as_u64().unwrap() > 0);
    }
}

#[test]
fn the_guest_test_runner_is_not_built_into_the_guest() {
    let e = crate::run("import sandpy_guest.testing");
    assert_eq!(e.status, sandpy::Status::Error, "{e:?}");
    assert_eq!(e.error.unwrap().kind, "ModuleNotFoundError");
}
