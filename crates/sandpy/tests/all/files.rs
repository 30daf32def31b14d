//! Files: the private scratch folder, input files, `/output` files, read-only mounts, and
//! the quotas and caps the host enforces on them, each tried by attack.

use crate::{block_on, run_ok, run_with, sandbox};
use sandpy::files::{InputFile, Mount};
use sandpy::sessions::{SessionLimits, Sessions};
use sandpy::{Limits, RunOptions, Status};
use serde_json::json;
use std::path::Path;
use std::time::Duration;

fn input(path: &str, content: &[u8]) -> InputFile {
    InputFile {
        path: path.into(),
        content: content.to_vec(),
    }
}

fn with_limits(f: impl FnOnce(&mut Limits)) -> RunOptions {
    let mut limits = Limits::default();
    f(&mut limits);
    RunOptions::with_limits(limits)
}

/// A host folder with a file, and a link in it that points out of it.
fn host_folder() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("data.csv"), "a,b\n1,2\n").expect("write");
    std::fs::create_dir(dir.path().join("sub")).expect("mkdir");
    std::fs::write(dir.path().join("sub/notes.txt"), "notes").expect("write");
    std::os::unix::fs::symlink("/etc/passwd", dir.path().join("passwd")).expect("symlink");
    std::os::unix::fs::symlink("../../../../../../etc/hostname", dir.path().join("sub/up"))
        .expect("symlink");
    dir
}

/// `Config::leave_instances_to_exit` (one-shot processes) keeps each run's instance and
/// folders, not torn down after the run; they go with the sandbox all the same.
#[test]
fn files_instances_left_to_exit_keep_their_folders_until_the_sandbox_goes() {
    let base = tempfile::tempdir().expect("temp dir");
    let config = sandpy::Config {
        scratch_dir: Some(base.path().to_path_buf()),
        pooled_instances: None,
        leave_instances_to_exit: true,
        ..crate::config()
    };
    let own = sandpy::Sandbox::new(config).expect("sandbox");
    for _ in 0..2 {
        let e = block_on(own.run("open('kept.txt', 'w').write('x')", &Limits::default()));
        assert_eq!(e.status, Status::Ok, "{e:#?}");
    }
    let kept = std::fs::read_dir(base.path())
        .expect("read")
        .flatten()
        .filter(|e| e.path().join("tmp").join("kept.txt").exists())
        .count();
    assert_eq!(
        kept, 2,
        "both runs' folders are kept while the sandbox lives"
    );
    drop(own);
    let left = std::fs::read_dir(base.path()).expect("read").count();
    assert_eq!(left, 0, "and go with the sandbox");
}

#[test]
fn scratch_is_the_working_directory_private_to_each_run_and_removed_after() {
    let base = tempfile::tempdir().expect("temp dir");
    // A folder left by a process that died (no such pid), and one of a live process.
    let stale = base.path().join("run-999999999-abc");
    let live = base.path().join(format!("run-{}-kept", std::process::id()));
    for dir in [&stale, &live] {
        std::fs::create_dir_all(dir.join("tmp")).expect("mkdir");
    }
    let config = sandpy::Config {
        scratch_dir: Some(base.path().to_path_buf()),
        ..crate::config()
    };
    let own = sandpy::Sandbox::new(config).expect("sandbox");
    assert!(
        !stale.exists() && live.exists(),
        "folders of dead processes are swept when a sandbox starts"
    );
    std::fs::remove_dir_all(&live).expect("cleanup");
    let code = "import os, tempfile\nseen = sorted(os.listdir('.'))\nopen('a.txt', 'w').write('x')\nos.makedirs('d/e')\n\
                with tempfile.NamedTemporaryFile(delete=False) as f: f.write(b'y')\n\
                [os.getcwd(), seen, os.path.dirname(f.name), sorted(os.listdir('/tmp'))]";
    for _ in 0..2 {
        let e = block_on(own.run(code, &Limits::default()));
        assert_eq!(e.status, Status::Ok, "{e:#?}");
        let value = e.return_value.expect("value");
        assert_eq!(value[0], json!("/tmp"));
        assert_eq!(
            value[1],
            json!([]),
            "a run never sees an earlier run's files"
        );
        assert_eq!(value[2], json!("/tmp"));
        assert_eq!(value[3].as_array().map(Vec::len), Some(3));
    }
    // What stays while the sandbox lives is the guest's `/` (empty folders, read-only) and
    // the empty folders of the instance made for the next run. A run's own folder goes
    // with its instance, which a run that was alone leaves to the disposal thread as it
    // answers: gone soon after.
    let holds_anything = |folder: &std::path::Path| {
        ["tmp", "output"]
            .iter()
            .any(|sub| match std::fs::read_dir(folder.join(sub)) {
                Ok(mut entries) => entries.next().is_some(),
                // A folder being made (the next run's instance, made ahead while the test
                // looks) or being removed has no `tmp/` for a moment: it holds nothing.
                Err(e) => e.kind() != std::io::ErrorKind::NotFound,
            })
    };
    let run_folders = || -> Vec<_> {
        std::fs::read_dir(base.path())
            .expect("read")
            .flatten()
            .filter(|e| holds_anything(&e.path()))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| !name.contains("-root-"))
            .collect()
    };
    // One look decides: a second look could catch the next instance's folder being made.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut left = run_folders();
    while !left.is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
        left = run_folders();
    }
    assert_eq!(left, Vec::<String>::new(), "run folders are removed");
    drop(own);
    let left = std::fs::read_dir(base.path()).expect("read").count();
    assert_eq!(left, 0, "and the root with the sandbox");
}

#[test]
fn a_reused_scratch_folder_shows_nothing_of_the_run_before() {
    // One run at a time, so each run gets the folder the run before left (if empty).
    let base = tempfile::tempdir().expect("temp dir");
    let config = sandpy::Config {
        scratch_dir: Some(base.path().to_path_buf()),
        max_concurrent_runs: Some(1),
        ..crate::config()
    };
    let own = sandpy::Sandbox::new(config).expect("sandbox");
    let run = |code: &str| {
        let e = block_on(own.run(code, &Limits::default()));
        assert_eq!(e.status, Status::Ok, "{e:#?}");
        e.return_value
    };
    let look = "import os, time\nt, o = os.stat('/tmp'), os.stat('/output')\n\
                [os.listdir('/tmp'), os.listdir('/output'), t.st_size == o.st_size, round(time.time() - t.st_mtime, 1) < 2.5]";
    // One file made and removed, then a pause: the folder is empty and reused, and its
    // modification time must not tell when the last run touched it.
    run("import os, time\nopen('x', 'w').close()\nos.remove('x')\nopen('/output/y', 'w').close()\nos.remove('/output/y')\ntime.sleep(4)");
    assert_eq!(run(look), Some(json!([[], [], true, true])));
    // Thousands of entries made and removed grow the folder itself: its size would tell.
    run("import os\nfor i in range(3000): open(f'file-{i:05}', 'w').close()\nfor i in range(3000): os.remove(f'file-{i:05}')");
    assert_eq!(run(look), Some(json!([[], [], true, true])));
    let folders = |kind: &str| {
        let names = std::fs::read_dir(base.path()).expect("read").flatten();
        let names = names.map(|e| e.file_name().to_string_lossy().into_owned());
        names.filter(|name| name.contains(kind)).count()
    };
    assert_eq!(folders("-root-"), 1, "the guest's `/`, made once");
    assert_eq!(folders(""), 2, "and one idle folder kept for the next run");
    drop(own);
    assert_eq!(folders(""), 0, "both are removed with the sandbox");
}

#[test]
fn input_files_arrive_by_content_and_bad_paths_are_refused() {
    let options = RunOptions {
        files: vec![
            input("data.csv", b"a,b\n1,2\n"),
            input("/tmp/in/raw.bin", &[0, 159, 255]),
            input("./x//y.txt", b"y"),
        ],
        ..RunOptions::default()
    };
    let e = run_with(
        "import csv\n[list(csv.DictReader(open('data.csv'))), list(open('/tmp/in/raw.bin', 'rb').read()), open('x/y.txt').read()]",
        &options,
    );
    assert_eq!(e.status, Status::Ok, "{e:#?}");
    assert_eq!(
        e.return_value,
        Some(json!([[{"a": "1", "b": "2"}], [0, 159, 255], "y"]))
    );
    for (path, expected) in [
        ("../escape", "`..`"),
        ("/etc/cron.d/x", "under /tmp"),
        ("/tmp/", "names no file"),
    ] {
        let options = RunOptions {
            files: vec![input(path, b"x")],
            ..RunOptions::default()
        };
        let e = run_with("1", &options);
        assert_eq!(e.status, Status::InvalidInput, "{path}: {e:#?}");
        assert!(
            e.error.as_ref().unwrap().message.contains(expected),
            "{path}: {e:#?}"
        );
    }
    let too_big = RunOptions {
        files: vec![input("big", &vec![1; 2 << 20])],
        ..with_limits(|l| l.disk_bytes = 1 << 20)
    };
    let e = run_with("1", &too_big);
    assert_eq!(e.status, Status::InvalidInput);
    assert!(e.error.unwrap().message.contains("over the disk quota"));
}

#[test]
fn output_files_come_back_with_name_size_and_type_even_when_the_run_fails() {
    let e = run_with(
        "import os, json\nopen('/output/report.csv', 'w').write('a,b\\n1,2\\n')\nos.makedirs('/output/charts')\n\
         open('/output/charts/plot.png', 'wb').write(b'\\x89PNG\\r\\n\\x1a\\n' + bytes(range(256)))\n\
         os.symlink('../../../../../../etc/passwd', '/output/leak')\nopen('/tmp/not-returned.txt', 'w').write('scratch')\n\
         raise ValueError('after writing')",
        &RunOptions::default(),
    );
    assert_eq!(e.status, Status::Error, "{e:#?}");
    let names: Vec<_> = e
        .files
        .iter()
        .map(|f| (f.name.as_str(), f.size, f.mime_type.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            ("charts/plot.png", 264, "image/png"),
            ("report.csv", 8, "text/csv")
        ],
        "links are never followed"
    );
    assert_eq!(e.files[1].text(), Some("a,b\n1,2\n"));
    assert_eq!(&e.files[0].content[..4], b"\x89PNG");
    let json = serde_json::to_value(&e).expect("serialises");
    assert_eq!(json["files"][1]["content_base64"], json!("YSxiCjEsMgo="));
    let back: sandpy::Execution = serde_json::from_value(json).expect("deserialises");
    assert_eq!(back.files, e.files);
}

#[test]
fn disk_quota_refuses_writes_past_it_and_ends_the_run_disk_limit() {
    let options = with_limits(|l| l.disk_bytes = 1 << 20);
    // An uncaught refusal ends the run with the typed status.
    let e = run_with(
        "with open('big', 'wb') as f:\n    for _ in range(100):\n        f.write(b'x' * 65536)",
        &options,
    );
    assert_eq!(e.status, Status::DiskLimit, "{e:#?}");
    let error = e.error.expect("error");
    assert!(
        error
            .message
            .contains("disk quota of 1048576 bytes under /tmp"),
        "{error:?}"
    );
    assert!(
        error.traceback.unwrap().contains("f.write"),
        "the traceback shows where"
    );
    // Positioned writes and truncation fail with ENOSPC, which the program can handle;
    // a sparse file counts at its full size; deleting gives room back.
    let e = run_with(
        "import os, errno\nfd = os.open('f', os.O_WRONLY | os.O_CREAT)\nout = []\n\
         for attempt in (lambda: os.pwrite(fd, b'x' * (2 << 20), 0), lambda: os.ftruncate(fd, 10 ** 12),\n\
                         lambda: os.pwrite(fd, b'x', 10 ** 12)):\n\
         \x20   try:\n        attempt(); out.append('written')\n    except OSError as e:\n        out.append(errno.errorcode[e.errno])\n\
         os.pwrite(fd, b'x' * 700_000, 0)\nos.close(fd)\nos.remove('f')\nopen('g', 'wb').write(b'y' * 700_000)\nout",
        &options,
    );
    assert_eq!(e.status, Status::Ok, "{e:#?}");
    assert_eq!(e.return_value, Some(json!(["ENOSPC", "ENOSPC", "ENOSPC"])));
}

#[test]
fn empty_files_and_folders_count_against_the_quota() {
    let options = with_limits(|l| l.disk_bytes = 64 << 10);
    let e = run_with(
        "import os\nmade = 0\ntry:\n    while made < 100_000:\n        open(f'f{made}', 'w').close(); made += 1\nexcept OSError:\n    pass\n\
         dirs = 0\ntry:\n    while dirs < 100_000:\n        os.mkdir(f'd{dirs}'); dirs += 1\nexcept OSError:\n    pass\n[made, dirs]",
        &options,
    );
    assert_eq!(e.status, Status::Ok, "{e:#?}");
    let value = e.return_value.expect("value");
    let (made, dirs) = (value[0].as_u64().unwrap(), value[1].as_u64().unwrap());
    assert!(
        (100..=128).contains(&made),
        "64 KiB / 512 bytes per entry: {made}"
    );
    assert_eq!(dirs, 0, "the quota is full");
    let e = run_with(
        "import itertools\nfor i in itertools.count():\n    open(f'f{i}', 'w').close()",
        &options,
    );
    assert_eq!(e.status, Status::DiskLimit, "{e:#?}");
    assert!(e
        .error
        .unwrap()
        .message
        .contains("disk quota of 65536 bytes under /tmp"));
}

#[test]
fn output_quota_caps_what_a_run_returns_and_files_cannot_move_between_quotas() {
    let options = with_limits(|l| l.output_files_bytes = 100_000);
    let e = run_with(
        "open('/output/a.bin', 'wb').write(b'x' * 200_000)",
        &options,
    );
    assert_eq!(e.status, Status::DiskLimit, "{e:#?}");
    assert!(e.error.unwrap().message.contains("under /output"));
    assert!(
        e.files.iter().map(|f| f.size).sum::<u64>() <= 100_000,
        "what came back fits the cap"
    );
    let e = run_with(
        "import os, errno, shutil\nopen('big', 'wb').write(b'x' * 200_000)\nopen('small', 'wb').write(b'x' * 1000)\n\
         try:\n    os.rename('big', '/output/big'); moved = 'moved'\nexcept OSError as e:\n    moved = errno.errorcode[e.errno]\n\
         try:\n    os.link('big', '/output/big'); linked = 'linked'\nexcept OSError as e:\n    linked = errno.errorcode[e.errno]\n\
         shutil.move('small', '/output/small')\n[moved, linked, os.path.exists('small')]",
        &options,
    );
    assert_eq!(e.status, Status::Ok, "{e:#?}");
    assert_eq!(
        e.return_value,
        Some(json!(["EXDEV", "EXDEV", false])),
        "shutil.move copies across"
    );
    assert_eq!(
        e.files.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(),
        ["small"]
    );
}

#[test]
fn open_files_are_capped_so_the_host_keeps_its_descriptors() {
    let e = run_with(
        "import errno\nopen('f', 'w').close()\nfiles = []\ntry:\n    for _ in range(5000):\n        files.append(open('f'))\n\
         except OSError as e:\n    failure = errno.errorcode[e.errno]\n[len(files), failure]",
        &RunOptions::default(),
    );
    assert_eq!(e.status, Status::Ok, "{e:#?}");
    let value = e.return_value.expect("value");
    assert!(value[0].as_u64().unwrap() < 256, "{value}");
    assert_eq!(value[1], json!("ENOMEM"));
    // Not caught, the refusal ends the run with the typed status naming the cap.
    let e = run_with(
        "open('f', 'w').close()
files = [open('f') for _ in range(5000)]",
        &RunOptions::default(),
    );
    assert_eq!(e.status, Status::DiskLimit, "{e:#?}");
    assert!(e
        .error
        .unwrap()
        .message
        .contains("more than 256 files open at once"));
}

#[test]
fn mounts_are_read_only_and_cannot_be_escaped() {
    let dir = host_folder();
    let meta = |name: &str| std::fs::metadata(dir.path().join(name)).expect("metadata");
    let before = meta("data.csv");
    let options = RunOptions {
        mounts: vec![Mount {
            host: dir.path().into(),
            guest: "/data".into(),
        }],
        ..RunOptions::default()
    };
    let e = run_with(
        "import os\nos.chmod('/data/data.csv', 0o777)  # WASI has no modes: a no-op\ndef refused(f):\n    try:\n        f()\n    except OSError:\n        return True\n    return False\n\
         readable = [open('/data/data.csv').read(), open('/data/sub/notes.txt').read(), sorted(os.listdir('/data'))]\n\
         attempts = [lambda: open('/data/data.csv', 'a').write('x'), lambda: open('/data/new', 'w'), lambda: os.remove('/data/data.csv'),\n\
         \x20   lambda: os.rename('/data/data.csv', '/data/moved'), lambda: os.mkdir('/data/d'), lambda: os.utime('/data/data.csv', (0, 0)),\n\
         \x20   lambda: os.symlink('x', '/data/l'), lambda: os.truncate('/data/data.csv', 0), lambda: os.rename('/data/data.csv', '/tmp/stolen'),\n\
         \x20   lambda: open('/data/passwd').read(), lambda: open('/data/sub/up').read(), lambda: open('/data/../etc/passwd').read(),\n\
         \x20   lambda: open('/data/sub/../../etc/passwd').read(), lambda: os.listdir('/data/..')]\n\
         [readable, [refused(a) for a in attempts]]",
        &options,
    );
    assert_eq!(e.status, Status::Ok, "{e:#?}");
    let value = e.return_value.expect("value");
    assert_eq!(
        value[0],
        json!(["a,b\n1,2\n", "notes", ["data.csv", "passwd", "sub"]])
    );
    assert!(
        value[1]
            .as_array()
            .unwrap()
            .iter()
            .all(|v| v == &json!(true)),
        "an attempt crossed: {value}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("data.csv")).unwrap(),
        "a,b\n1,2\n"
    );
    assert!(!dir.path().join("new").exists() && !dir.path().join("d").exists());
    let after = meta("data.csv");
    assert_eq!(
        (after.permissions(), after.modified().ok()),
        (before.permissions(), before.modified().ok())
    );
}

#[test]
fn bad_mounts_are_refused_before_running() {
    let dir = host_folder();
    for (guest, host, expected) in [
        ("/tmp/data", dir.path(), "overlaps /tmp"),
        ("/output", dir.path(), "overlaps /output"),
        ("data", dir.path(), "must be absolute"),
        ("/", dir.path(), "must not be `/`"),
        ("/d", Path::new("/nonexistent/folder"), "cannot open"),
        ("/d", &dir.path().join("data.csv"), "not a folder"),
    ] {
        let options = RunOptions {
            mounts: vec![Mount {
                host: host.into(),
                guest: guest.into(),
            }],
            ..RunOptions::default()
        };
        let e = run_with("1", &options);
        assert_eq!(e.status, Status::InvalidInput, "{guest}: {e:#?}");
        assert!(
            e.error.as_ref().unwrap().message.contains(expected),
            "{guest}: {e:#?}"
        );
    }
}

#[test]
fn session_files_persist_outputs_come_per_run_and_restore_recreates_inputs() {
    let sessions = Sessions::new(sandbox(), SessionLimits::default());
    block_on(async {
        let first = RunOptions {
            files: vec![input("in.txt", b"hello")],
            ..RunOptions::default()
        };
        let e = sessions.run("f", "open('notes.txt', 'w').write(open('in.txt').read().upper())\nopen('/output/1.txt', 'w').write('one')", &first).await;
        assert_eq!(e.status, Status::Ok, "{e:#?}");
        assert_eq!(e.files.len(), 1);
        let e = sessions
            .run(
                "f",
                "open('/output/2.txt', 'w').write('two')\nopen('notes.txt').read()",
                &RunOptions::default(),
            )
            .await;
        assert_eq!(
            e.return_value,
            Some(json!("HELLO")),
            "scratch files stay between runs"
        );
        assert_eq!(
            e.files.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(),
            ["2.txt"],
            "each run returns its own outputs"
        );
        let dir = host_folder();
        let mounted = RunOptions {
            mounts: vec![Mount {
                host: dir.path().into(),
                guest: "/data".into(),
            }],
            ..RunOptions::default()
        };
        let e = sessions.run("f", "1", &mounted).await;
        assert_eq!(
            e.status,
            Status::InvalidInput,
            "mounts are fixed by the first run"
        );
        let snapshot = sessions.snapshot("f").await.expect("snapshot");
        sessions
            .restore("g", &snapshot, &RunOptions::default())
            .await
            .expect("restore");
        let e = sessions
            .run("g", "open('notes.txt').read()", &RunOptions::default())
            .await;
        assert_eq!(
            e.return_value,
            Some(json!("HELLO")),
            "replay wrote the input again"
        );
    });
}

#[test]
fn a_plain_run_still_works_after_the_file_attacks() {
    run_ok("open('x', 'w').write('fine')");
}

#[test]
fn the_root_lists_the_folders_and_linux_path_idioms_work() {
    // Lines models write constantly: they failed with `FileNotFoundError: '/'` when the
    // guest had no `/`.
    let dir = host_folder();
    let options = RunOptions {
        mounts: vec![Mount {
            host: dir.path().into(),
            guest: "/mnt/data".into(),
        }],
        ..RunOptions::default()
    };
    let e = run_with(
        "import os\nfrom pathlib import Path\n\
         os.makedirs('/output', exist_ok=True)\nos.makedirs('/output/charts/2024', exist_ok=True)\n\
         Path('/output/report/x.txt').parent.mkdir(parents=True, exist_ok=True)\n\
         Path('/output/report/x.txt').write_text('hi')\nos.makedirs('/tmp', exist_ok=True)\n\
         try:\n    os.makedirs('/results')\n    top = 'made'\nexcept OSError as e:\n    top = type(e).__name__\n\
         [os.path.exists('/'), os.path.isdir('/'), sorted(os.listdir('/')), os.listdir('/mnt'), top,\n\
          sorted(str(p) for p in Path('/output').rglob('*'))]",
        &options,
    );
    assert_eq!(e.status, Status::Ok, "{e:#?}");
    assert_eq!(
        e.return_value,
        Some(json!([
            true,
            true,
            ["mnt", "output", "tmp"],
            ["data"],
            "PermissionError",
            [
                "/output/charts",
                "/output/charts/2024",
                "/output/report",
                "/output/report/x.txt"
            ]
        ]))
    );
    assert_eq!(
        e.files.len(),
        1,
        "the file written through the idiom comes back"
    );
}

#[test]
fn time_limit_writing_input_files_counts_against_the_run() {
    let files: Vec<InputFile> = (0..20_000)
        .map(|i| input(&format!("d{}/f{i}.txt", i % 100), b"x"))
        .collect();
    let options = RunOptions {
        files,
        ..with_limits(|l| {
            l.timeout = Duration::from_millis(20);
            l.disk_bytes = 1 << 30;
        })
    };
    let e = run_with("print('never')", &options);
    assert_eq!(e.status, Status::Timeout, "{e:#?}");
    let message = e.error.expect("an error").message;
    assert!(message.contains("input files"), "{message}");
    assert!(
        !message.contains("(20000 of 20000 written)"),
        "stopped at the limit, not after every file: {message}"
    );
    assert!(e.stdout.is_empty());
}
