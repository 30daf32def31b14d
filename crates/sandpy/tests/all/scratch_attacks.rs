//! The folders sandpy keeps on the host (the scratch base behind every run's `/tmp`,
//! `/output` and `/`, and the compiled-code cache), attacked by another local user: one
//! who makes the folder first, opens it to everyone, or puts a link in its place. A
//! kept run folder swapped for a link to `/` once gave root's runs the host's files.
//!
//! CI runs as root; the other user is `nobody`, acting through `setpriv`.

use sandpy::{Config, Error, Sandbox};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

/// `command` run as the user `nobody` (65534), as another user of the machine would.
fn as_nobody(command: &[&str]) {
    let status = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .args(command)
        .status()
        .expect("setpriv");
    assert!(status.success(), "as nobody: {command:?}");
}

/// A folder like `/tmp`: everyone may make entries in it, only their own removed.
fn shared_tmp() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().expect("temp dir");
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    tmp
}

fn sandbox_error(config: Config) -> String {
    match Sandbox::new(config) {
        Ok(_) => panic!("a sandbox on a folder another user controls"),
        Err(error @ Error::Folder(_)) => error.to_string(),
        Err(other) => panic!("not the folder's error: {other:?}"),
    }
}

fn scratch(path: &Path) -> Config {
    Config {
        scratch_dir: Some(path.to_path_buf()),
        runtime_on_first_use: true,
        ..crate::config()
    }
}

#[test]
fn scratch_base_made_first_by_another_user_is_refused() {
    let tmp = shared_tmp();
    let base = tmp.path().join("sandpy");
    as_nobody(&["mkdir", "-m", "0777", base.to_str().expect("utf-8")]);
    let error = sandbox_error(scratch(&base));
    assert!(error.contains("belongs to user 65534"), "{error}");
    assert!(
        std::fs::read_dir(&base).expect("read").next().is_none(),
        "nothing was made in it"
    );
}

#[test]
fn scratch_base_replaced_by_a_link_to_the_root_is_refused() {
    let tmp = shared_tmp();
    let base = tmp.path().join("sandpy");
    as_nobody(&["ln", "-s", "/", base.to_str().expect("utf-8")]);
    let error = sandbox_error(scratch(&base));
    assert!(error.contains("is a link made by user 65534"), "{error}");
}

#[test]
fn scratch_base_of_ours_that_others_can_write_in_is_refused_and_a_readable_one_closed() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let base = tmp.path().join("sandpy");
    std::fs::create_dir(&base).expect("mkdir");
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let error = sandbox_error(scratch(&base));
    assert!(
        error.contains("can be written by other users (mode 777)"),
        "{error}"
    );
    // As an older sandpy left it: this user's, readable by all. Closed, then used.
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let sandbox = Sandbox::new(scratch(&base)).expect("a sandbox");
    let mode = std::fs::metadata(&base).expect("meta").permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    drop(sandbox);
}

#[test]
fn scratch_base_by_default_is_this_users_own_not_one_shared_name() {
    let base = Config::default().resolved_scratch_dir();
    if std::env::var_os("SANDPY_SCRATCH_DIR").is_none() {
        let uid = std::process::Command::new("id")
            .arg("-u")
            .output()
            .expect("id");
        let uid = String::from_utf8_lossy(&uid.stdout).trim().to_string();
        assert_eq!(
            base.file_name().and_then(|n| n.to_str()),
            Some(format!("sandpy-{uid}").as_str()),
            "{}",
            base.display()
        );
    }
}

#[test]
fn cache_folder_another_user_can_write_in_is_never_loaded_from() {
    let tmp = shared_tmp();
    let cache = tmp.path().join("cache");
    as_nobody(&["mkdir", "-m", "0777", cache.to_str().expect("utf-8")]);
    let scratch_base = tempfile::tempdir().expect("temp dir");
    // The runtime loads as the sandbox starts: from this cache, or not at all.
    let config = Config {
        cache_dir: Some(cache.clone()),
        runtime_on_first_use: false,
        ..scratch(scratch_base.path())
    };
    let error = sandbox_error(config);
    assert!(error.contains("belongs to user 65534"), "{error}");
}
