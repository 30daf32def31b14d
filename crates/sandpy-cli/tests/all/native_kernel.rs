//! The native tier's kernel interface: the calls its filter refuses, and each confinement
//! layer switched off alone (debug builds only) to show that its own attack then gets
//! through, so that a change that removes a layer fails a test.

use super::native::{
    assert_blocked, attacks, named_processes_once, native_config, native_run, ATTACK_MODULES,
};
use serde_json::json;
use std::process::Command;

#[test]
fn kernel_interface_attacks_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = native_config(dir.path(), &[], json!({}));
    // x86-64 numbers: unshare, mount, bpf, keyctl, io_uring_setup, perf_event_open,
    // userfaultfd, setns, chroot, init_module, add_key, mknod, pivot_root, and getpid
    // through the x32 ABI.
    let body = r#"
calls = {"unshare": (272, 0x10000000), "mount": (165, 0, 0, 0, 0, 0), "bpf": (321, 0, 0, 0),
         "keyctl": (250, 0, 0), "io_uring_setup": (425, 8, 0), "perf_event_open": (298, 0, 0, -1, -1, 0),
         "userfaultfd": (323, 0), "setns": (308, 0, 0), "chroot": (161, 0), "init_module": (175, 0, 0, 0),
         "add_key": (248, 0, 0, 0, 0, 0), "mknod": (133, 0, 0, 0), "pivot_root": (155, 0, 0),
         "x32_getpid": (0x40000000 | 39,)}
for name, args in calls.items():
    attempt(name, lambda args=args: raw(*args))
found["errnos"] = sorted({v[1].split(":")[0] for v in found.values()})
"#;
    if std::env::consts::ARCH != "x86_64" {
        return; // the numbers above are x86-64's
    }
    let found = attacks(&config, body, "");
    let names = [
        "unshare",
        "mount",
        "bpf",
        "keyctl",
        "io_uring_setup",
        "perf_event_open",
        "userfaultfd",
        "setns",
        "chroot",
        "init_module",
        "add_key",
        "mknod",
        "pivot_root",
        "x32_getpid",
    ];
    assert_blocked(&found, &names);
    for name in names {
        let why = found[name][1].as_str().unwrap_or_default();
        assert!(why.contains("Operation not permitted"), "{name}: {why}");
    }
    // A 32-bit system call (`int 0x80`) kills the process: a foreign architecture.
    let int80 = r#"
import ctypes, mmap
code = bytes([0xb8, 20, 0, 0, 0, 0xcd, 0x80, 0xc3])  # mov eax, 20 (getpid); int 0x80; ret
memory = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
memory.write(code)
address = ctypes.addressof(ctypes.c_char.from_buffer(memory))
ctypes.CFUNCTYPE(ctypes.c_int)(address)()
"#;
    let (_, killed) = native_run(&config, int80, &[], "");
    assert_eq!(killed["status"], "error", "{killed}");
    assert_eq!(killed["error"]["type"], "InterpreterCrash", "{killed}");
    assert!(
        killed["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("signal 31"),
        "{killed}"
    );
}

/// Each layer switched off alone (debug builds honour it): its own attack gets through,
/// and with the layer on it is blocked. A change that removes a layer fails here.
#[test]
fn each_layer_stops_its_own_attack() {
    if !cfg!(debug_assertions) {
        return; // release builds ignore the switch
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let config = native_config(dir.path(), ATTACK_MODULES, json!({}));
    let read_passwd = r#"attempt("passwd", lambda: open("/etc/passwd").read())"#;
    // Files: the run's own root and Landlock each keep host files out on their own.
    for layers_off in ["root", "landlock"] {
        let found = attacks(&config, read_passwd, layers_off);
        assert_blocked(&found, &["passwd"]);
    }
    let found = attacks(&config, read_passwd, "root,landlock");
    assert_eq!(found["passwd"][0], "allowed", "{found:?}");

    // seccomp: without it a new program runs.
    let exec = r#"attempt("exec", lambda: subprocess.run(["/usr/bin/true"], check=True))"#;
    assert_blocked(&attacks(&config, exec, ""), &["exec"]);
    let found = attacks(&config, exec, "seccomp");
    assert_eq!(found["exec"][0], "allowed", "{found:?}");

    // The pid namespace: without it a forked daemon outlives the run (seccomp off too,
    // or the fork itself is refused).
    {
        for (layers_off, survives) in [("seccomp", false), ("seccomp,pid_namespace", true)] {
            let name = format!("sbxd{}", std::process::id());
            let daemon = format!(
                r#"
def daemon():
    if os.fork() == 0:
        os.setsid()
        libc.prctl(15, {name:?}.encode(), 0, 0, 0)  # PR_SET_NAME: findable by the test
        import time
        time.sleep(30)
        os._exit(0)
    return "forked"
attempt("daemon", daemon)
"#
            );
            let found = attacks(&config, &daemon, layers_off);
            assert_eq!(found["daemon"][0], "allowed", "{found:?}");
            // A daemon that outlived the run has named itself within a second; one that
            // did not is gone within the poll.
            std::thread::sleep(std::time::Duration::from_secs(1));
            let alive = !named_processes_once(&name, survives).is_empty();
            let _ = Command::new("pkill").args(["-9", "-x", &name]).status();
            assert_eq!(alive, survives, "{layers_off}");
        }
    }
}
