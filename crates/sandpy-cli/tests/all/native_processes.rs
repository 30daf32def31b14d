//! The native tier's process boundary: no new program, process or privilege; nothing left
//! behind after runs, timeouts and crashes; no signal reaching outside a run.

use super::native::{assert_blocked, attacks, named_processes_once, native_config, native_run};
use super::sandpy;
use serde_json::{json, Value};
use std::process::Command;

#[test]
fn process_boundary_no_new_program_process_or_privilege() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = native_config(dir.path(), &[], json!({}));
    let body = r#"
import resource, threading
attempt("subprocess", lambda: subprocess.run(["/usr/bin/true"]))
attempt("fork", lambda: os.fork())
attempt("execv", lambda: os.execv("/usr/bin/true", ["true"]))
def memfd_exec():
    fd = os.memfd_create("x")
    os.write(fd, open("/usr/bin/true", "rb").read())
    os.execve(fd, ["true"], {})
attempt("memfd_fexecve", memfd_exec)
attempt("ptrace_parent", lambda: raw(101, 16, os.getppid(), 0, 0))
attempt("process_vm_readv", lambda: raw(310, 1, 0, 0, 0, 0, 0))
attempt("raise_address_space", lambda: resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY)))
attempt("raise_open_files", lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (1 << 20, 1 << 20)))
attempt("setuid_root_host", lambda: os.setuid(1))
def threads():
    started = []
    for _ in range(10_000):
        t = threading.Thread(target=lambda: __import__("time").sleep(5), daemon=True)
        t.start()
        started.append(t)
    return len(started)
attempt("ten_thousand_threads", threads)
found["pid"] = os.getpid()
"#;
    let found = attacks(&config, body, "");
    assert_blocked(
        &found,
        &[
            "subprocess",
            "fork",
            "execv",
            "memfd_fexecve",
            "ptrace_parent",
            "process_vm_readv",
            "raise_address_space",
            "raise_open_files",
            "setuid_root_host",
            "ten_thousand_threads",
        ],
    );
    // The program is pid 1 of its own pid namespace: no other process is there to see.
    assert_eq!(found["pid"], 1, "{found:?}");
}

#[test]
fn no_process_or_mount_is_left_after_runs_timeouts_and_crashes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = native_config(dir.path(), &[], json!({}));
    let mounts_before = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    // Each program names itself (and its threads) so that the test can look for them.
    let name = format!("sbxl{}", std::process::id());
    let prelude = format!(
        "import ctypes, os, threading, time\nctypes.CDLL(None).prctl(15, {name:?}.encode(), 0, 0, 0)\n"
    );
    let programs: [(&str, &[&str]); 4] = [
        ("print('ok')", &[]),
        (
            "threading.Thread(target=time.sleep, args=(60,)).start()\nwhile True: pass",
            &["--timeout-ms", "500"],
        ),
        ("os.kill(os.getpid(), 11)", &[]),
        (
            "os.setsid()\nthreading.Thread(target=time.sleep, args=(60,)).start()\nos._exit(0)",
            &[],
        ),
    ];
    for (code, args) in programs {
        let (_, execution) = native_run(&config, &format!("{prelude}{code}"), args, "");
        assert_ne!(execution["status"], "internal_error", "{execution}");
    }
    assert_eq!(
        named_processes_once(&name, false),
        Vec::<String>::new(),
        "processes left behind"
    );
    let mounts_after = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    assert_eq!(mounts_before.lines().count(), mounts_after.lines().count());
    // The zygote leaves with its host: no zygote (nor supervisor) outlives its `sandpy`
    // process for long. Other tests' may be between the two moments, so an orphan counts
    // only if it is still there two seconds later.
    let orphans = || -> Vec<String> {
        // By name `sandpy`: the layer test's daemon renames itself.
        let out = Command::new("pgrep")
            .args(["-P", "1", "-x", "sandpy"])
            .output()
            .expect("pgrep");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|cmdline| cmdline.contains("__sandpy-native-zygote"))
            })
            .map(|pid| {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                format!("{pid}@{}", stat.split_whitespace().nth(21).unwrap_or(""))
            })
            .collect()
    };
    let first = orphans();
    std::thread::sleep(std::time::Duration::from_secs(2));
    let lasting: Vec<String> = orphans()
        .into_iter()
        .filter(|o| first.contains(o))
        .collect();
    assert_eq!(
        lasting,
        Vec::<String>::new(),
        "orphaned zygotes or supervisors"
    );
}

#[test]
fn a_signal_from_a_run_reaches_nothing_outside_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = native_config(dir.path(), &[], json!({}));
    let lines = dir.path().join("lines.jsonl");
    std::fs::write(
        &lines,
        "{\"which\": 0}\n{\"which\": 1}\n{\"which\": 2}\n{\"which\": 3}\n",
    )
    .expect("lines");
    let program = dir.path().join("kill.py");
    std::fs::write(
        &program,
        "import os, signal\n\
         def main(which):\n\
         \x20   if which == 0:\n\
         \x20       os.kill(0, signal.SIGKILL)\n\
         \x20   elif which == 1:\n\
         \x20       os.kill(-1, signal.SIGKILL)\n\
         \x20   elif which == 2:\n\
         \x20       os.kill(os.getppid(), signal.SIGKILL)\n\
         \x20   return 'alive'\n",
    )
    .expect("program");
    let out = sandpy()
        .args(["call", "--config", &config, "--args-file"])
        .arg(&lines)
        .arg(&program)
        .arg("main")
        .output()
        .expect("sandpy call");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let answers: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    assert_eq!(
        answers.len(),
        4,
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Every line after a kill still ran: the zygote and the host were out of reach.
    assert_eq!(answers[3]["result"], "alive", "{stdout}");
}
