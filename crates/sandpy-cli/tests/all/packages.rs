//! `sandpy build`: pure-Python packages from PyPI, bundled into a runtime or installed
//! into a folder to mount; compiled packages refused by name. Needs PyPI.

use crate::run;

/// A pure-Python package outside the curated set.
const USE_TOOLZ: &str = "import toolz\nprint(toolz.frequencies('abca'))";
const TOOLZ_OUTPUT: &str = "{'a': 2, 'b': 1, 'c': 1}\n";

#[test]
fn a_package_folder_mounted_at_packages_imports_and_works() {
    let dir = tempfile::tempdir().expect("tempdir");
    let folder = dir.path().join("pkgs");
    let (status, _, stderr) = run(&[
        "build",
        "--with",
        "toolz==1.0.0",
        "--folder",
        folder.to_str().unwrap(),
    ]);
    assert_eq!(status, 0, "{stderr}");
    assert!(stderr.contains("toolz 1.0.0"), "{stderr}");
    let mount = format!("{}:/packages", folder.display());
    let (status, stdout, stderr) = run(&["run", "--mount", &mount, "-c", USE_TOOLZ]);
    assert_eq!((status, stdout.as_str()), (0, TOOLZ_OUTPUT), "{stderr}");
    let (status, _, stderr) = run(&["run", "-c", "import toolz"]);
    assert_eq!(status, 1, "the built-in runtime does not have it: {stderr}");
    let (_, stdout, _) = run(&[
        "run",
        "--mount",
        &mount,
        "-c",
        "open('/packages/toolz/x.py', 'w')",
    ]);
    assert!(stdout.is_empty(), "the folder is read-only");
}

#[test]
fn a_package_with_compiled_extensions_is_refused_by_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let folder = dir.path().join("pkgs");
    let (status, _, stderr) = run(&[
        "build",
        "--with",
        "ujson==6.1.0",
        "--folder",
        folder.to_str().unwrap(),
    ]);
    assert_eq!(status, 2, "{stderr}");
    assert!(
        stderr.contains("compiled extension") && stderr.contains("ujson 6.1.0"),
        "{stderr}"
    );
}

#[test]
fn a_built_runtime_has_the_package_in_its_snapshot() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The config lists the packages and names the runtime file; `sandpy build` makes it.
    let config = dir.path().join("sandpy.json");
    std::fs::write(
        &config,
        r#"{"sandpy": {"packages": ["toolz==1.0.0"], "runtime": "with-toolz.wasm"}}"#,
    )
    .expect("config");
    let runtime = dir.path().join("with-toolz.wasm");
    let (status, _, stderr) = run(&["build", "--config", config.to_str().unwrap()]);
    assert_eq!(status, 0, "{stderr}");
    assert!(
        stderr.contains("\"toolz\"") && stderr.contains("\"yaml\""),
        "the curated set is kept: {stderr}"
    );
    let (status, stdout, stderr) =
        run(&["run", "--config", config.to_str().unwrap(), "-c", USE_TOOLZ]);
    assert_eq!((status, stdout.as_str()), (0, TOOLZ_OUTPUT), "{stderr}");
    // Built with the built-in runtime's C stack (the vendored componentize-py): recursion
    // through C functions goes as deep (1 MiB, PyPI's componentize-py, ended at ~2,300).
    let deep = format!(
        "{USE_TOOLZ}\nimport sys, functools\nsys.setrecursionlimit(100000)\n\
         @functools.lru_cache(maxsize=None)\ndef f(n):\n    return 0 if n == 0 else f(n - 1) + 1\n\
         print(f(8000))"
    );
    let (status, stdout, stderr) =
        run(&["run", "--runtime", runtime.to_str().unwrap(), "-c", &deep]);
    assert_eq!(
        (status, stdout.as_str()),
        (0, format!("{TOOLZ_OUTPUT}8000\n").as_str()),
        "{stderr}"
    );
    let (status, _, stderr) = run(&["run", "--runtime", "/nonexistent.wasm", "-c", "1"]);
    assert_eq!(status, 2);
    assert!(
        stderr.contains("cannot load the runtime `/nonexistent.wasm`"),
        "{stderr}"
    );
}
