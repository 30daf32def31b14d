//! `sandpy build`: pure-Python packages from PyPI, bundled into a runtime or installed
//! into a folder to mount; compiled packages refused by name. Needs PyPI.

use crate::sandpy;

fn run(args: &[&str]) -> (i32, String, String) {
    let out = sandpy().args(args).output().expect("sandpy");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

const USE_TABULATE: &str = "import tabulate\nprint(tabulate.tabulate([[1, 'a']], headers=['n', 's'], tablefmt='plain'))";

#[test]
fn a_package_folder_mounted_at_packages_imports_and_works() {
    let dir = tempfile::tempdir().expect("tempdir");
    let folder = dir.path().join("pkgs");
    let (status, _, stderr) = run(&["build", "--with", "tabulate==0.9.0", "--folder", folder.to_str().unwrap()]);
    assert_eq!(status, 0, "{stderr}");
    assert!(stderr.contains("tabulate 0.9.0"), "{stderr}");
    let mount = format!("{}:/packages", folder.display());
    let (status, stdout, stderr) = run(&["run", "--mount", &mount, "-c", USE_TABULATE]);
    assert_eq!((status, stdout.as_str()), (0, "  n  s\n  1  a\n"), "{stderr}");
    let (status, _, stderr) = run(&["run", "-c", "import tabulate"]);
    assert_eq!(status, 1, "the built-in runtime does not have it: {stderr}");
    let (_, stdout, _) = run(&["run", "--mount", &mount, "-c", "open('/packages/tabulate/x.py', 'w')"]);
    assert!(stdout.is_empty(), "the folder is read-only");
}

#[test]
fn a_package_with_compiled_extensions_is_refused_by_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let folder = dir.path().join("pkgs");
    let (status, _, stderr) = run(&["build", "--with", "ujson==6.1.0", "--folder", folder.to_str().unwrap()]);
    assert_eq!(status, 2, "{stderr}");
    assert!(stderr.contains("compiled extension") && stderr.contains("ujson 6.1.0"), "{stderr}");
}

#[test]
fn a_built_runtime_has_the_package_in_its_snapshot() {
    let dir = tempfile::tempdir().expect("tempdir");
    let runtime = dir.path().join("with-tabulate.wasm");
    let (status, _, stderr) = run(&["build", "--with", "tabulate==0.9.0", "-o", runtime.to_str().unwrap()]);
    assert_eq!(status, 0, "{stderr}");
    assert!(stderr.contains("[\"tabulate\"]"), "{stderr}");
    let (status, stdout, stderr) = run(&["run", "--runtime", runtime.to_str().unwrap(), "-c", USE_TABULATE]);
    assert_eq!((status, stdout.as_str()), (0, "  n  s\n  1  a\n"), "{stderr}");
    let (status, _, stderr) = run(&["run", "--runtime", "/nonexistent.wasm", "-c", "1"]);
    assert_eq!(status, 2);
    assert!(stderr.contains("cannot load the runtime `/nonexistent.wasm`"), "{stderr}");
}
