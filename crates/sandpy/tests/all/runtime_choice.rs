//! The runtime is chosen in `Config::guest` (and a runtime file beside it): without a guest,
//! setting up a sandbox or building a runtime is a typed error, never a panic.

use sandpy::{Config, Error, Sandbox};

#[test]
fn a_sandbox_without_a_guest_is_refused_with_no_guest() {
    for runtime_on_first_use in [false, true] {
        let config = Config {
            runtime_on_first_use,
            ..Config::default()
        };
        match Sandbox::new(config) {
            Err(Error::NoGuest) => {}
            Err(other) => panic!("expected NoGuest, got {other}"),
            Ok(_) => panic!("a sandbox without a guest was made"),
        }
    }
    let message = Error::NoGuest.to_string();
    assert!(message.contains("sandpy_guest::GUEST"), "{message}");
}

#[test]
fn a_runtime_file_without_a_guest_is_refused_with_no_guest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("runtime.wasm");
    std::fs::write(&file, sandpy_guest::GUEST.component).expect("write");
    let config = Config {
        runtime: Some(file),
        ..Config::default()
    };
    assert!(matches!(Sandbox::new(config), Err(Error::NoGuest)));
}

#[test]
fn building_a_runtime_without_a_guest_is_refused_before_pip() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = Config {
        cache_dir: Some(dir.path().join("cache")),
        ..Config::default()
    };
    let output = dir.path().join("runtime.wasm");
    let built = sandpy::packages::build_runtime(&["six==1.17.0".into()], &output, &config);
    assert!(matches!(built, Err(Error::NoGuest)), "{built:?}");
    assert!(
        !dir.path().join("cache").exists(),
        "no pip toolchain was made"
    );
    assert!(!output.exists());
}
