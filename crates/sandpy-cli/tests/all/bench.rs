//! `sandpy bench` hands its arguments to the `sandpy-bench` program beside the binary, and
//! says how to build it when it is not there.

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output};
use std::time::Duration;

/// A copy of this build's `sandpy` alone in a folder of its own.
fn lone_sandpy() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let sandpy = dir.path().join("sandpy");
    std::fs::copy(env!("CARGO_BIN_EXE_sandpy"), &sandpy).expect("copy sandpy");
    (dir, sandpy)
}

/// The output of `command`, whose program this test wrote: its exec is retried while it
/// fails with "Text file busy" (another test's child, forked while the file was being
/// written, holds it open for writing until that child execs).
fn output_once_written(command: &mut Command) -> Output {
    for _ in 0..100 {
        match command.output() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                std::thread::sleep(Duration::from_millis(20));
            }
            result => return result.expect("run"),
        }
    }
    panic!("{command:?} stayed busy for 2 s");
}

#[test]
fn without_the_bench_program_beside_it_the_error_says_how_to_build_it() {
    let (dir, sandpy) = lone_sandpy();
    let out = output_once_written(Command::new(&sandpy).args(["bench", "--only", "hello"]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let missing = dir.path().join("sandpy-bench");
    assert!(
        stderr.contains(&format!(
            "error: the benchmarks are the `sandpy-bench` program, and there is none at `{}`",
            missing.display()
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("hint: build it beside this binary: `cargo build --release -p sandpy-cli -p sandpy-bench`"),
        "{stderr}"
    );
}

#[test]
fn the_bench_program_gets_every_argument_the_sandpy_binary_and_its_exit_code() {
    let (dir, sandpy) = lone_sandpy();
    // A stand-in for `sandpy-bench` that shows what it was given.
    let stand_in = dir.path().join("sandpy-bench");
    std::fs::write(
        &stand_in,
        "#!/bin/sh\nprintf '%s|' \"$@\"\necho\necho \"$SANDPY_BENCH_SANDPY\"\nexit 7\n",
    )
    .expect("stand-in");
    std::fs::set_permissions(&stand_in, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    // Once it has run here, no writer of it is left for `sandpy`'s own exec of it to meet.
    output_once_written(&mut Command::new(&stand_in));
    let out = output_once_written(Command::new(&sandpy).args([
        "bench",
        "--help",
        "--only",
        "tls",
        "-x",
        "two words",
    ]));
    assert_eq!(out.status.code(), Some(7));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout,
        format!("--help|--only|tls|-x|two words|\n{}\n", sandpy.display())
    );
}
