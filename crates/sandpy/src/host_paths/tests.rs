//! The checks of host paths, one by one, and every check against another user (played by
//! `nobody` through `setpriv`; CI runs as root).

use super::*;

#[test]
fn a_missing_folder_is_made_private_and_a_readable_one_of_ours_is_closed() {
    let base = tempfile::tempdir().expect("temp dir");
    let made = base.path().join("a/b");
    ensure(&made, Use::Private).expect("made");
    let mode = |p: &Path| std::fs::metadata(p).expect("meta").mode() & 0o777;
    assert_eq!(mode(&made), 0o700);
    let open = base.path().join("open");
    std::fs::create_dir(&open).expect("mkdir");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    ensure(&open, Use::Private).expect("closed");
    assert_eq!(mode(&open), 0o700);
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    ensure(&open, Use::Trusted).expect("a cache may be read by others");
    assert_eq!(mode(&open), 0o755, "and is left as it is");
}

#[test]
fn a_folder_others_can_write_in_or_a_link_is_refused() {
    let base = tempfile::tempdir().expect("temp dir");
    let shared = base.path().join("shared");
    std::fs::create_dir(&shared).expect("mkdir");
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    for purpose in [Use::Private, Use::Trusted] {
        let error = ensure(&shared, purpose).expect_err("refused");
        assert!(
            matches!(error, FolderError::OpenToOthers { mode: 0o1777, .. }),
            "{error:?}"
        );
    }
    let link = base.path().join("link");
    std::os::unix::fs::symlink("/", &link).expect("symlink");
    let error = ensure(&link, Use::Private).expect_err("refused");
    assert!(matches!(error, FolderError::NotAFolder { .. }), "{error:?}");
    assert!(error.to_string().contains("link"), "{error}");
}

#[test]
fn a_folder_on_the_way_that_others_can_write_in_is_refused_unless_sticky() {
    let base = tempfile::tempdir().expect("temp dir");
    let open = base.path().join("open");
    std::fs::create_dir(&open).expect("mkdir");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let inside = open.join("cache");
    for check in [
        ensure(&inside, Use::Trusted).map(drop),
        trusted_file(&inside.join("file")).map(drop),
        input(&inside).map(drop),
    ] {
        let error = check.expect_err("refused");
        assert!(
            matches!(&error, FolderError::OpenToOthers { path, mode: 0o777 } if *path == open),
            "{error:?}"
        );
    }
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    ensure(&inside, Use::Trusted).expect("a sticky folder on the way is fine");
}

#[test]
fn our_links_on_the_way_are_followed_and_checked_where_they_lead() {
    let base = tempfile::tempdir().expect("temp dir");
    let real = base.path().join("real");
    ensure(&real.join("cache"), Use::Trusted).expect("made");
    let link = base.path().join("via");
    std::os::unix::fs::symlink(&real, &link).expect("symlink");
    ensure(&link.join("cache"), Use::Trusted).expect("our link is followed");
    assert_eq!(
        input(&link.join("cache/x")).expect("resolved"),
        real.join("cache/x")
    );
    // Where it leads is judged too.
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let error = ensure(&link.join("cache"), Use::Trusted).expect_err("refused");
    assert!(
        matches!(&error, FolderError::OpenToOthers { path, .. } if *path == real),
        "{error:?}"
    );
    let looped = base.path().join("loop");
    std::os::unix::fs::symlink(&looped, &looped).expect("symlink");
    let error = input(&looped.join("x")).expect_err("refused");
    assert!(
        matches!(error, FolderError::TooManyLinks { .. }),
        "{error:?}"
    );
}

/// `command` run as the user `nobody` (65534), as another user of the machine would.
fn as_nobody(command: &[&str]) {
    let status = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .args(command)
        .status()
        .expect("setpriv");
    assert!(status.success(), "as nobody: {command:?}");
}

/// Every check, against every way another user gets to its path first (the path,
/// a folder above it, a link in its place or on the way): each refused, naming them.
#[test]
fn every_check_refuses_what_another_user_made_first() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: the other user is played through setpriv, which needs root");
        return;
    }
    type Check = fn(&Path) -> Result<(), FolderError>;
    let checks: [(&str, bool, Check); 7] = [
        ("private folder", false, |p| ensure(p, Use::Private)),
        ("trusted folder", false, |p| ensure(p, Use::Trusted)),
        ("existing folder", false, |p| {
            existing_folder(p, Use::Trusted)
        }),
        ("trusted tree", false, trusted_tree),
        ("input folder", false, |p| input(p).map(drop)),
        ("trusted file", true, |p| trusted_file(p).map(drop)),
        ("input file", true, |p| input(p).map(drop)),
    ];
    let shared = tempfile::tempdir().expect("temp dir");
    std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o1777))
        .expect("chmod");
    let own = tempfile::tempdir().expect("root's");
    std::fs::write(own.path().join("file"), "x").expect("root's file");
    let text = |p: &Path| p.to_str().expect("utf-8").to_string();
    for (i, (name, is_file, check)) in checks.into_iter().enumerate() {
        let make = |path: &Path| {
            if is_file {
                as_nobody(&["touch", &text(path)]);
            } else {
                as_nobody(&["mkdir", &text(path)]);
            }
        };
        let itself = shared.path().join(format!("{i}-itself"));
        make(&itself);
        let parent = shared.path().join(format!("{i}-parent"));
        as_nobody(&["mkdir", &text(&parent)]);
        make(&parent.join("inside"));
        let link = shared.path().join(format!("{i}-link"));
        let to = if is_file {
            own.path().join("file")
        } else {
            own.path().to_path_buf()
        };
        as_nobody(&["ln", "-s", &text(&to), &text(&link)]);
        let via = shared.path().join(format!("{i}-via"));
        as_nobody(&["ln", "-s", &text(own.path()), &text(&via)]);
        let through_link = via.join(if is_file { "file" } else { "." });
        for path in [itself, parent.join("inside"), link, through_link] {
            match check(&path) {
                Err(
                    FolderError::NotOwned { owner: 65534, .. }
                    | FolderError::ForeignLink { owner: 65534, .. },
                ) => {}
                other => panic!("{name} at {}: {other:?}", path.display()),
            }
        }
    }
}

#[test]
fn a_trusted_file_is_a_regular_file_no_one_else_can_write() {
    let base = tempfile::tempdir().expect("temp dir");
    let file = base.path().join("config.json");
    std::fs::write(&file, "{}").expect("write");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    trusted_file(&file).expect("ours");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let error = trusted_file(&file).expect_err("refused");
    assert!(
        matches!(error, FolderError::OpenToOthers { .. }),
        "{error:?}"
    );
    let link = base.path().join("link.json");
    std::os::unix::fs::symlink(&file, &link).expect("symlink");
    let error = trusted_file(&link).expect_err("refused");
    assert!(
        matches!(error, FolderError::OpenToOthers { .. }),
        "{error:?}"
    );
    let error = trusted_file(base.path()).expect_err("a folder");
    assert!(matches!(error, FolderError::NotAFile { .. }), "{error:?}");
}
