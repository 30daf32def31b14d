//! The host-path boundary, attacked by another local user: every folder or file sandpy
//! loads code, data or configuration from, or writes a run's files into, with the path
//! itself, a folder above it, or a link on the way made first by `nobody` (65534, acting
//! through `setpriv`) in a shared sticky folder like `/tmp`. Each is refused with an error
//! that names that user, and nothing planted runs or is written through. The cases are
//! data: every consumer ([`Target`]) against every way to plant ([`Plant`]).
//!
//! CI runs as root, the user whose sandpy another user would most like to run their code.

use crate::native::native_config;
use crate::sandpy;
use serde_json::json;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
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

/// Whether this process may play the other user (setpriv needs root, as CI has); says so
/// when it may not.
fn other_user_can_be_played() -> bool {
    let root = nix::unistd::geteuid().is_root();
    if !root {
        eprintln!("skipped: the other user is played through setpriv, which needs root");
    }
    root
}

/// A folder like `/tmp`: everyone may make entries in it, only their own removed.
fn shared_tmp() -> tempfile::TempDir {
    let shared = tempfile::tempdir().expect("temp dir");
    std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o1777))
        .expect("chmod");
    shared
}

fn text(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// What sandpy is pointed at.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Target {
    /// The cache of compiled runtimes (`SANDPY_CACHE_DIR`), loaded as native code.
    Cache,
    /// The same cache as the native tier's guest files, imported by the zygote.
    NativeGuest,
    /// The same cache as the home of `sandpy build`'s toolchain, whose pip runs.
    Toolchain,
    /// The scratch base behind every run's `/tmp` and `/output`.
    Scratch,
    /// A config file, whose servers' commands run.
    Config,
    /// A program file.
    Program,
    /// An input file (`--file`).
    Input,
    /// A read-only mount (`--mount`).
    Mount,
    /// Where a run's files are written (`--output-dir`).
    OutputDir,
    /// The native tier's venv, whose `bin/python` is run to probe it.
    NativeVenv,
    /// Where `sandpy build --native` makes a venv.
    BuildOutput,
}

/// How the other user gets there first.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Plant {
    /// Makes the folder or file itself.
    Itself,
    /// Makes a folder the path lies in.
    Parent,
    /// Puts a link in the path's place, to a folder or file of root's.
    Link,
}

const TARGETS: [Target; 11] = [
    Target::Cache,
    Target::NativeGuest,
    Target::Toolchain,
    Target::Scratch,
    Target::Config,
    Target::Program,
    Target::Input,
    Target::Mount,
    Target::OutputDir,
    Target::NativeVenv,
    Target::BuildOutput,
];

impl Target {
    /// Whether the path is a file (else a folder).
    fn is_file(self) -> bool {
        matches!(self, Target::Config | Target::Program | Target::Input)
    }

    /// The `sandpy` command that uses `path`, with root's own folder `work` for what else
    /// it needs (the native tier's config, a folder to install into).
    fn command(self, path: &Path, work: &Path) -> Command {
        let mut command = sandpy();
        let print = ["-c", "print(1)"];
        match self {
            Target::Cache => {
                command.env("SANDPY_CACHE_DIR", path).arg("run").args(print);
            }
            Target::NativeGuest => {
                let config = native_config(work, &[], json!({}));
                command
                    .env("SANDPY_CACHE_DIR", path)
                    .args(["run", "--config", &config])
                    .args(print);
            }
            Target::Toolchain => {
                command
                    .env("SANDPY_CACHE_DIR", path)
                    .args(["build", "--with", "toolz", "--folder"])
                    .arg(work.join("packages"));
            }
            Target::Scratch => {
                command
                    .env("SANDPY_SCRATCH_DIR", path)
                    .arg("run")
                    .args(print);
            }
            Target::Config => {
                command.args(["run", "--config", text(path)]).args(print);
            }
            Target::Program => {
                command.args(["run", text(path)]);
            }
            Target::Input => {
                command.args(["run", "--file", text(path)]).args(print);
            }
            Target::Mount => {
                let mount = format!("{}:/data", text(path));
                command.args(["run", "--mount", &mount]).args(print);
            }
            Target::NativeVenv => {
                let config = work.join("venv.json");
                let body = json!({"sandpy": {"tier": "native", "native": {"venv": path}}});
                std::fs::write(&config, body.to_string()).expect("config");
                command.args(["run", "--config", text(&config)]).args(print);
            }
            Target::BuildOutput => {
                command.args(["build", "--native", "--with", "six", "--output", text(path)]);
            }
            Target::OutputDir => {
                command
                    .args(["run", "--output-dir", text(path), "-c"])
                    .arg("open('/output/written.txt', 'w').write('from the run')");
            }
        }
        command
    }
}

/// Plant `target`'s path as `plant` under `shared` (sticky, open to all); returns the path
/// sandpy is given. `own` is a folder of root's that a link may lead to.
fn plant(target: Target, how: Plant, shared: &Path, own: &Path) -> PathBuf {
    let name = format!("{target:?}-{how:?}").to_lowercase();
    let make = |path: &Path| {
        if target.is_file() {
            // A config whose server would write a marker, a program that would print.
            let content = "{\"mcpServers\": {}}";
            as_nobody(&[
                "sh",
                "-c",
                &format!("printf '%s' '{content}' > {}", text(path)),
            ]);
        } else {
            as_nobody(&["mkdir", text(path)]);
        }
    };
    match how {
        Plant::Itself => {
            let path = shared.join(name);
            make(&path);
            path
        }
        Plant::Parent => {
            let parent = shared.join(name);
            as_nobody(&["mkdir", text(&parent)]);
            let path = parent.join("inside");
            make(&path);
            path
        }
        Plant::Link => {
            let path = shared.join(name);
            let to = if target.is_file() {
                let file = own.join(format!("{target:?}.file"));
                std::fs::write(&file, "{\"mcpServers\": {}}").expect("root's file");
                file
            } else {
                let folder = own.join(format!("{target:?}.folder"));
                std::fs::create_dir(&folder).expect("root's folder");
                folder
            };
            as_nobody(&["ln", "-s", text(&to), text(&path)]);
            path
        }
    }
}

#[test]
fn every_host_path_another_user_made_first_is_refused() {
    if !other_user_can_be_played() {
        return;
    }
    let shared = shared_tmp();
    let own = tempfile::tempdir().expect("root's own folder");
    let mut failures = Vec::new();
    for target in TARGETS {
        for how in [Plant::Itself, Plant::Parent, Plant::Link] {
            let path = plant(target, how, shared.path(), own.path());
            let out = target.command(&path, own.path()).output().expect("sandpy");
            let stderr = String::from_utf8_lossy(&out.stderr);
            let refused = !out.status.success() && stderr.contains("65534");
            if !refused {
                failures.push(format!(
                    "{target:?} planted as {how:?} at {}: exit {:?}, stderr: {stderr}",
                    path.display(),
                    out.status.code()
                ));
            }
            // Nothing was written through the other user's link into root's folder.
            if target == Target::OutputDir && how == Plant::Link {
                let through = own.path().join("OutputDir.folder/written.txt");
                assert!(
                    !through.exists(),
                    "the run's file was written through the link"
                );
            }
        }
    }
    assert!(failures.is_empty(), "not refused:\n{}", failures.join("\n"));
}

#[test]
fn without_a_home_the_cache_another_user_made_first_is_refused() {
    if !other_user_can_be_played() {
        return;
    }
    // A container's user with no passwd entry and no HOME: the cache falls back to
    // `$TMPDIR/sandpy-cache-<uid>`, which another user can make first.
    let shared = shared_tmp();
    let uid = 4242;
    let fallback = shared.path().join(format!("sandpy-cache-{uid}"));
    as_nobody(&["mkdir", "-m", "0777", text(&fallback)]);
    let out = Command::new("setpriv")
        .args([
            &format!("--reuid={uid}"),
            &format!("--regid={uid}"),
            "--clear-groups",
            "--",
            env!("CARGO_BIN_EXE_sandpy"),
            "run",
            "-c",
            "print(1)",
        ])
        .env_remove("HOME")
        .env_remove("XDG_CACHE_HOME")
        .env_remove("SANDPY_CACHE_DIR")
        .env("TMPDIR", shared.path())
        .output()
        .expect("setpriv sandpy");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "ran on another user's cache: {stderr}"
    );
    assert!(
        stderr.contains(&format!("`{}` belongs to user 65534", fallback.display())),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_dir(&fallback).expect("read").count(),
        0,
        "nothing was written into it"
    );
}

#[test]
fn native_guest_files_changed_in_the_cache_are_written_again_not_run() {
    let cache = tempfile::tempdir().expect("cache");
    let config = native_config(cache.path(), &[], json!({}));
    let run = || {
        sandpy()
            .env("SANDPY_CACHE_DIR", cache.path())
            .args(["run", "--config", &config, "-c", "print('ran')"])
            .output()
            .expect("sandpy")
    };
    let first = run();
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let guest = std::fs::read_dir(cache.path())
        .expect("cache")
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("native-guest-"))
        })
        .expect("the native guest's folder");
    let marker = cache.path().join("planted-code-ran");
    let module = guest.join("sandpy_native.py");
    let original = std::fs::read_to_string(&module).expect("module");
    std::fs::write(
        &module,
        format!("{original}\nopen({:?}, 'w').write('x')\n", text(&marker)),
    )
    .expect("tamper");
    std::fs::write(guest.join("sitecustomize.py"), "raise SystemExit(3)\n").expect("add");
    let second = run();
    assert!(
        second.status.success(),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    assert!(!marker.exists(), "the changed guest file ran");
    assert_eq!(
        std::fs::read_to_string(&module).expect("module"),
        original,
        "written again"
    );
    assert!(
        !guest.join("sitecustomize.py").exists(),
        "the added file is gone"
    );
}

#[test]
fn output_dir_never_writes_through_another_users_folder_or_link_inside_it() {
    if !other_user_can_be_played() {
        return;
    }
    // Root's output folder, with a folder of the other user's in it and their link there
    // to a file of root's (found in the outside review, docs/dev/attack-round3-host-paths.md).
    let out = tempfile::tempdir().expect("output folder");
    std::fs::set_permissions(out.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let secret = tempfile::NamedTempFile::new().expect("root's file");
    std::fs::write(secret.path(), "root's").expect("write");
    let sub = out.path().join("sub");
    std::fs::create_dir(&sub).expect("mkdir");
    std::os::unix::fs::chown(&sub, Some(65534), Some(65534)).expect("chown");
    as_nobody(&["ln", "-s", text(secret.path()), text(&sub.join("f.txt"))]);
    let run = sandpy()
        .args(["run", "--output-dir", text(out.path()), "-c"])
        .arg("import os; os.makedirs('/output/sub'); open('/output/sub/f.txt', 'w').write('guest')")
        .output()
        .expect("sandpy");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success(), "{stderr}");
    assert!(stderr.contains("belongs to user 65534"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(secret.path()).expect("read"),
        "root's"
    );
}
