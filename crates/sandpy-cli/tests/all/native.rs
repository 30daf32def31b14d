//! The native tier (`--tier native`): real CPython with numpy and pandas, confined by the
//! kernel. What it runs, its limits, and the attack suite, one test per boundary; then
//! each confinement layer switched off alone (debug builds only) to show that its own
//! attack then gets through, so that a change that removes a layer fails a test.

use super::{mcp_python, sandpy};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The packages of the tests' native venv, pinned.
const PACKAGES: [&str; 2] = ["numpy==2.4.6", "pandas==3.1.1"];

/// A venv with numpy and pandas, made once under `target/` by `sandpy build --native`.
pub(super) fn native_venv() -> &'static PathBuf {
    static VENV: OnceLock<PathBuf> = OnceLock::new();
    VENV.get_or_init(|| {
        let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/native-test-venv");
        let marker = venv.join(".installed");
        let wanted = PACKAGES.join(" ");
        if std::fs::read_to_string(&marker).ok().as_deref() != Some(wanted.as_str()) {
            let _ = std::fs::remove_dir_all(&venv);
            let mut build = sandpy();
            build.args(["build", "--native", "--output"]).arg(&venv);
            for package in PACKAGES {
                build.args(["--with", package]);
            }
            let out = build.output().expect("sandpy build --native");
            assert!(
                out.status.success(),
                "sandpy build --native: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            std::fs::write(&marker, wanted).expect("marker");
        }
        venv
    })
}

/// A config file in `dir` for the native tier with the test venv and `extra` keys of
/// the `sandpy` section.
pub(super) fn native_config(dir: &Path, preimport: &[&str], extra: Value) -> String {
    let mut sandpy = json!({
        "tier": "native",
        "native": {"venv": native_venv(), "preimport": preimport},
    });
    if let (Some(section), Value::Object(extra)) = (sandpy.as_object_mut(), extra) {
        section.extend(extra);
    }
    let path = dir.join("native.json");
    std::fs::write(&path, json!({ "sandpy": sandpy }).to_string()).expect("config");
    path.display().to_string()
}

/// The names of the files an execution (as `sandpy run --json` prints it) brought back.
pub(super) fn output_names(execution: &Value) -> Vec<&str> {
    execution["files"]
        .as_array()
        .unwrap_or_else(|| panic!("no files: {execution}"))
        .iter()
        .filter_map(|f| f["name"].as_str())
        .collect()
}

/// Run `code` in the native tier with `args` and `layers_off`: exit code and execution.
pub(super) fn native_run(
    config: &str,
    code: &str,
    args: &[&str],
    layers_off: &str,
) -> (i32, Value) {
    let out = sandpy()
        .args(["run", "--json", "--config", config])
        .args(args)
        .args(["-c", code])
        .env("SANDPY_TEST_NATIVE_LAYERS_OFF", layers_off)
        .output()
        .expect("sandpy");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let execution = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not one JSON object ({e}):\n{stdout}\n{stderr}"));
    (out.status.code().unwrap_or(-1), execution)
}

/// A prelude for attack programs: `attempt(name, f)` records whether `f()` was allowed
/// or blocked (with the exception), and the program's value is the record.
const ATTEMPT: &str = r#"
import ctypes, errno, json, os, socket, subprocess, sys
found = {}
def attempt(name, f):
    try:
        found[name] = ["allowed", repr(f())[:200]]
    except BaseException as e:
        found[name] = ["blocked", f"{type(e).__name__}: {e}"[:200]]
libc = ctypes.CDLL(None, use_errno=True)
def raw(number, *args):
    result = libc.syscall(number, *args)
    if result == -1:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return result
"#;

/// What the attack prelude imports: pre-imported by the zygote, because with the run's
/// own root switched off the runs cannot read a Python installed under a private folder.
const ATTACK_MODULES: &[&str] = &["ctypes", "errno", "json", "socket", "subprocess"];

pub(super) fn attacks(
    config: &str,
    body: &str,
    layers_off: &str,
) -> serde_json::Map<String, Value> {
    let code = format!("{ATTEMPT}\n{body}\nfound");
    let (exit, execution) = native_run(config, &code, &[], layers_off);
    assert_eq!(exit, 0, "{execution}");
    execution["return_value"]
        .as_object()
        .cloned()
        .unwrap_or_else(|| panic!("no record: {execution}"))
}

fn assert_blocked(found: &serde_json::Map<String, Value>, names: &[&str]) {
    for name in names {
        assert_eq!(
            found[*name][0], "blocked",
            "{name} got through: {}",
            found[*name]
        );
    }
}

#[test]
fn native_runs_numpy_and_pandas_with_the_same_face_as_the_wasm_tier() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = native_config(dir.path(), &["numpy", "pandas"], json!({}));
    let code = "import numpy as np, pandas as pd, sys, random\n\
                df = pd.DataFrame({'a': np.arange(10), 'b': np.arange(10) ** 2})\n\
                print(df.b.sum())\n\
                open('/output/table.csv', 'w').write(df.to_csv(index=False))\n\
                open('/tmp/scratch.txt', 'w').write('scratch')\n\
                {'python': sys.version_info[:2], 'mean': float(df.a.mean()), \
                 'seeds': [np.random.randint(1 << 30), random.getrandbits(30)]}";
    let (exit, first) = native_run(&config, code, &[], "");
    assert_eq!(exit, 0, "{first}");
    assert_eq!(first["status"], "ok");
    assert_eq!(first["stdout"], "285\n");
    assert_eq!(first["return_value"]["mean"], 4.5);
    assert_eq!(first["files"][0]["name"], "table.csv");
    assert_eq!(first["files"][0]["mime_type"], "text/csv");
    assert!(
        first["memory_peak_bytes"].as_u64().unwrap_or(0) > 0,
        "{first}"
    );
    // Every run is reseeded: a fork must not repeat its siblings' random numbers.
    let (_, second) = native_run(&config, code, &[], "");
    assert_ne!(
        first["return_value"]["seeds"],
        second["return_value"]["seeds"]
    );

    // An exception: the same status, error and traceback shape as the WebAssembly tier.
    let (exit, failed) = native_run(&config, "import json\njson.loads('{')", &[], "");
    let (_, wasm) = {
        let out = sandpy()
            .args([
                "run",
                "--json",
                "--tier",
                "wasm",
                "-c",
                "import json\njson.loads('{')",
            ])
            .output()
            .expect("sandpy");
        (
            0,
            serde_json::from_slice::<Value>(&out.stdout).expect("json"),
        )
    };
    assert_eq!(exit, 1, "{failed}");
    assert_eq!(failed["status"], "error");
    assert_eq!(failed["error"]["type"], wasm["error"]["type"]);
    assert_eq!(failed["error"]["message"], wasm["error"]["message"]);
    let traceback = failed["error"]["traceback"].as_str().unwrap_or_default();
    assert!(
        traceback.contains("File \"<string>\", line 2"),
        "{traceback}"
    );
    assert!(!traceback.contains("sandpy_guest"), "{traceback}");

    // Input files and read-only mounts, as in the WebAssembly tier.
    let reference = dir.path().join("ref");
    std::fs::create_dir(&reference).expect("ref");
    std::fs::write(reference.join("a.csv"), "a,b\n1,2\n3,4\n").expect("a.csv");
    let input = dir.path().join("in.csv");
    std::fs::write(&input, "y\n5\n6\n").expect("in.csv");
    let (input, mount) = (
        input.display().to_string(),
        format!("{}:/ref", reference.display()),
    );
    let code = "import pandas as pd\n\
                try:\n\
                \x20   open('/ref/new', 'w')\n\
                except OSError as e:\n\
                \x20   refused = e.errno\n\
                [int(pd.read_csv('/ref/a.csv').b.sum()), int(pd.read_csv('in.csv').y.sum()), refused]";
    let (_, read) = native_run(&config, code, &["--file", &input, "--mount", &mount], "");
    assert_eq!(read["return_value"], json!([6, 11, 30]), "{read}");

    // A policy is enforced the same way.
    let (_, refused) = native_run(&config, "import subprocess", &["--policy", "strict"], "");
    assert_eq!(refused["status"], "policy_violation", "{refused}");
}

/// A venv, the packages in it and the cache folder (the guest code) under `/tmp` are
/// shown to the run at their own paths inside its private `/tmp`: what the zygote did not
/// import is still found (it was hidden beneath the run's `/tmp`, so the README's test
/// command failed on a checkout under `/tmp`). The host's other `/tmp` files stay out.
#[test]
fn native_venv_and_cache_under_tmp_are_shown_to_runs() {
    let dir = tempfile::Builder::new()
        .prefix("sandpy-native-tmp-")
        .tempdir_in("/tmp")
        .expect("tempdir under /tmp");
    let venv = dir.path().join("venv");
    let made = sandpy()
        .args(["build", "--native", "--output"])
        .arg(&venv)
        .output()
        .expect("sandpy build --native");
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let site = std::fs::read_dir(venv.join("lib"))
        .expect("lib")
        .filter_map(Result::ok)
        .map(|entry| entry.path().join("site-packages"))
        .find(|path| path.is_dir())
        .expect("site-packages");
    // A package whose submodule is imported lazily, after the zygote's fork.
    std::fs::create_dir(site.join("lazy_pkg")).expect("lazy_pkg");
    std::fs::write(site.join("lazy_pkg/__init__.py"), "NAME = 'lazy'\n").expect("init");
    std::fs::write(site.join("lazy_pkg/sub.py"), "VALUE = 42\n").expect("sub");
    std::fs::write(dir.path().join("host-secret.txt"), "secret").expect("secret");
    let config = dir.path().join("native.json");
    let file = json!({"sandpy": {"tier": "native",
        "native": {"venv": venv, "preimport": ["lazy_pkg"]}}});
    std::fs::write(&config, file.to_string()).expect("config");
    let code = format!(
        "import os, lazy_pkg, lazy_pkg.sub\n\
         open('/tmp/mine.txt', 'w').write('x')\n\
         try:\n\
         \x20   open('{venv}/new.txt', 'w')\n\
         \x20   venv_write = 'allowed'\n\
         except OSError as e:\n\
         \x20   venv_write = e.errno\n\
         [lazy_pkg.NAME, lazy_pkg.sub.VALUE, os.path.exists('{secret}'), venv_write]",
        venv = venv.display(),
        secret = dir.path().join("host-secret.txt").display(),
    );
    let out = sandpy()
        .args(["run", "--json", "--config"])
        .arg(&config)
        .args(["-c", &code])
        .env("SANDPY_CACHE_DIR", dir.path().join("cache"))
        .output()
        .expect("sandpy");
    let execution: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    // 30: EROFS, the venv is read-only; the host's file beside it is not there.
    assert_eq!(
        execution["return_value"],
        json!(["lazy", 42, false, 30]),
        "{execution}"
    );
}

#[test]
fn native_limits_end_runs_with_their_statuses() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = native_config(dir.path(), &["numpy"], json!({}));
    let cases: [(&str, &[&str], &str); 7] = [
        ("while True: pass", &["--timeout-ms", "1000"], "timeout"),
        (
            "x = bytearray(4 << 30)",
            &["--memory-mb", "512"],
            "memory_limit",
        ),
        (
            "import numpy as np\nx = np.ones(1 << 30)",
            &["--memory-mb", "512"],
            "memory_limit",
        ),
        (
            "print('x' * 100_000)",
            &["--max-output-bytes", "1000"],
            "output_limit",
        ),
        (
            "open('/tmp/big', 'wb').write(b'x' * (8 << 20))",
            &["--disk-mb", "1"],
            "disk_limit",
        ),
        (
            "open('/output/big', 'wb').write(b'x' * (8 << 20))",
            &["--output-files-mb", "1"],
            "disk_limit",
        ),
        ("import sys\nsys.exit(3)", &[], "error"),
    ];
    for (code, args, status) in cases {
        let (_, execution) = native_run(&config, code, args, "");
        assert_eq!(execution["status"], status, "{code}: {execution}");
    }
    // The run's channel to the host (descriptor 3): a message without end is cut at the
    // host's limit, not held whole; bytes that are no message end the run as its error.
    let (_, flood) = native_run(
        &config,
        "import os\nwhile True: os.write(3, b'x' * 65536)",
        &[],
        "",
    );
    assert_eq!(flood["status"], "output_limit", "{flood}");
    let (_, garbage) = native_run(
        &config,
        "import os\nos.write(3, b'{nonsense\\n')\nimport time\ntime.sleep(5)",
        &[],
        "",
    );
    assert_eq!(garbage["status"], "error", "{garbage}");
    assert_eq!(garbage["error"]["type"], "ChannelError", "{garbage}");

    // The deadline holds while the run waits in a blocking call too.
    let (_, slept) = native_run(
        &config,
        "import time\ntime.sleep(60)",
        &["--timeout-ms", "500"],
        "",
    );
    assert_eq!(slept["status"], "timeout", "{slept}");
    assert!(
        slept["duration_ms"].as_f64().unwrap_or(1e9) < 5_000.0,
        "{slept}"
    );
    // stdin reaches the program.
    let input = dir.path().join("input.txt");
    std::fs::write(&input, "line one\n").expect("input");
    let input = input.display().to_string();
    let (_, read) = native_run(
        &config,
        "import sys\nsys.stdin.read()",
        &["--input", &input],
        "",
    );
    assert_eq!(read["return_value"], "line one\n", "{read}");
}

/// A run ended at its deadline returns the files it left under `/output`, as in the
/// WebAssembly tier. They are read by the zygote from the run's root while the run is
/// stopped, so the run's links are the attack: one to a host file outside the run's
/// root and one swapped in for a folder must never be followed (the zygote's root is the
/// host's), and a FIFO must not block the zygote.
#[test]
fn filesystem_boundary_timed_out_runs_return_their_files_never_a_linked_host_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let secret = dir.path().join("secret.txt");
    std::fs::write(&secret, "host secret").expect("secret");
    let config = native_config(dir.path(), &[], json!({}));
    let code = format!(
        "import os\n\
         open('/output/report.txt', 'w').write('partial')\n\
         os.makedirs('/output/charts')\n\
         open('/output/charts/a.csv', 'w').write('x,y')\n\
         os.symlink({secret:?}, '/output/secret.txt')\n\
         os.symlink('{host}', '/output/host')\n\
         try: os.mkfifo('/output/pipe')\n\
         except OSError: pass\n\
         while True: pass",
        secret = secret.display().to_string(),
        host = dir.path().display(),
    );
    let (_, execution) = native_run(&config, &code, &["--timeout-ms", "1000"], "");
    assert_eq!(execution["status"], "timeout", "{execution}");
    let names = output_names(&execution);
    assert_eq!(names, ["charts/a.csv", "report.txt"], "{execution}");
    assert_eq!(execution["files"][1]["content_base64"], "cGFydGlhbA==");
    assert!(
        !execution.to_string().contains("aG9zdCBzZWNyZXQ"),
        "{execution}"
    );
}

/// `sandpy run --tier native` never loads the WebAssembly runtime it does not use: on a
/// cold cache nothing is compiled (the cache folder gets no `.cwasm`, where loading the
/// runtime would write one).
#[test]
fn a_native_run_does_not_load_the_webassembly_runtime() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = dir.path().join("cache");
    let config = native_config(dir.path(), &[], json!({}));
    let compiled = || {
        std::fs::read_dir(&cache)
            .map(|entries| {
                entries
                    .flatten()
                    .filter(|e| e.file_name().to_string_lossy().ends_with(".cwasm"))
                    .count()
            })
            .unwrap_or(0)
    };
    let native = sandpy()
        .args([
            "run", "--json", "--config", &config, "--tier", "native", "-c", "6 * 7",
        ])
        .env("SANDPY_CACHE_DIR", &cache)
        .output()
        .expect("sandpy");
    let stdout = String::from_utf8_lossy(&native.stdout);
    assert!(stdout.contains("\"return_value\":42"), "{stdout}");
    assert_eq!(
        compiled(),
        0,
        "the native run compiled the WebAssembly runtime"
    );
}

#[test]
fn filesystem_boundary_host_files_are_out_of_reach() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = native_config(dir.path(), &[], json!({}));
    let marker = std::env::temp_dir().join(format!("sandpy-native-marker-{}", std::process::id()));
    std::fs::write(&marker, "host secret").expect("marker");
    let body = format!(
        r#"
attempt("read_passwd", lambda: open("/etc/passwd").read())
attempt("read_proc_environ", lambda: open("/proc/1/environ").read())
attempt("read_host_tmp", lambda: open({marker:?}).read())
attempt("read_config", lambda: open({config:?}).read())
attempt("write_usr", lambda: open("/usr/evil", "w"))
attempt("write_root", lambda: open("/evil", "w"))
attempt("write_python", lambda: open(sys.prefix + "/evil", "w"))
attempt("mkdir_root", lambda: os.mkdir("/evil"))
attempt("link_to_root", lambda: (os.symlink("/", "/tmp/up"), open("/tmp/up/etc/passwd").read()))
attempt("dev_shm", lambda: open("/dev/shm/x", "w"))
attempt("block_device", lambda: open("/dev/vda", "rb"))
attempt("list_root", lambda: os.listdir("/"))
found["visible"] = [n for n in ["etc", "home", "proc", "sys", "var", "run", "boot", "usr", "tmp", "output"]
                    if os.path.exists("/" + n)]
found["env"] = dict(os.environ)
"#,
        marker = marker.display().to_string(),
    );
    let found = attacks(&config, &body, "");
    let _ = std::fs::remove_file(&marker);
    assert_blocked(
        &found,
        &[
            "read_passwd",
            "read_proc_environ",
            "read_host_tmp",
            "read_config",
            "write_usr",
            "write_root",
            "write_python",
            "mkdir_root",
            "link_to_root",
            "dev_shm",
            "block_device",
        ],
    );
    // `/` lists as in the WebAssembly tier, and shows only the run's own root.
    let listed: Vec<&str> = found["list_root"][1]
        .as_str()
        .unwrap_or_default()
        .split('\'')
        .filter(|name| name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .filter(|name| !name.is_empty())
        .collect();
    assert_eq!(found["list_root"][0], "allowed", "{}", found["list_root"]);
    for name in ["tmp", "output", "usr", "dev"] {
        assert!(listed.contains(&name), "{name} not in {listed:?}");
    }
    for name in ["proc", "sys", "run", "boot"] {
        assert!(!listed.contains(&name), "{name} in {listed:?}");
    }
    // The run's root holds the system's libraries (and /etc/ld.so.cache), /tmp, /output
    // and four devices: no /home, /proc, /sys, /var, /run or /boot.
    assert_eq!(
        found["visible"],
        json!(["etc", "usr", "tmp", "output"]),
        "{}",
        found["visible"]
    );
    // The host's environment does not reach the run: only the home sandpy gives it in its
    // own /tmp (for packages that keep a config or a cache there, such as matplotlib).
    assert_eq!(
        found["env"],
        json!({"HOME": "/tmp", "XDG_CONFIG_HOME": "/tmp/.config", "XDG_CACHE_HOME": "/tmp/.cache",
               "MPLCONFIGDIR": "/tmp/.config/matplotlib"}),
        "{}",
        found["env"]
    );
}

#[test]
fn network_boundary_no_socket_reaches_the_host() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = native_config(dir.path(), &[], json!({}));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("addr").port();
    let unix_path = dir.path().join("host.sock");
    let _unix = std::os::unix::net::UnixListener::bind(&unix_path).expect("unix listener");
    let body = format!(
        r#"
attempt("tcp_loopback", lambda: socket.create_connection(("127.0.0.1", {port}), timeout=2))
attempt("udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("127.0.0.1", {port})))
attempt("unix_path", lambda: socket.socket(socket.AF_UNIX).connect({unix:?}))
attempt("unix_abstract", lambda: socket.socket(socket.AF_UNIX).connect("\0sandpy-test"))
attempt("netlink", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0))
attempt("raw_socket", lambda: raw(41, 2, 3, 1))
attempt("socketpair_is_local", lambda: (lambda pair: pair[0].send(b"ok"))(socket.socketpair()))
"#,
        unix = unix_path.display().to_string(),
    );
    let found = attacks(&config, &body, "");
    assert_blocked(
        &found,
        &[
            "tcp_loopback",
            "udp",
            "unix_path",
            "unix_abstract",
            "netlink",
            "raw_socket",
        ],
    );
    assert_eq!(found["socketpair_is_local"][0], "allowed", "{found:?}");
    assert!(
        listener.accept().is_err(),
        "the run reached the host's loopback listener"
    );
}

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

/// The pids of processes named `name` (their `comm`, which a run may set for itself).
fn named_processes(name: &str) -> Vec<String> {
    let out = Command::new("pgrep")
        .args(["-x", name])
        .output()
        .expect("pgrep");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// [`named_processes`] once some are there (`present`) or none are, or after 10 s: killed
/// processes take a moment to go, and new ones to take their name, on a busy machine.
fn named_processes_once(name: &str, present: bool) -> Vec<String> {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let found = named_processes(name);
        if found.is_empty() != present || std::time::Instant::now() > until {
            return found;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
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

#[test]
fn tools_reach_upstream_servers_from_the_native_tier() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = native_config(dir.path(), &[], json!({}));
    let mut file: Value =
        serde_json::from_str(&std::fs::read_to_string(&config).expect("config")).expect("json");
    file["mcpServers"] = json!({"report": {
        "command": mcp_python(),
        "args": [PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/report_server.py"), "x"],
    }});
    std::fs::write(&config, file.to_string()).expect("config");
    let code = "import asyncio, json\n\
                a = call_mcp_tool('mcp__report__started')\n\
                b = tools.report.started()\n\
                async def both():\n\
                \x20   return await asyncio.gather(tools.report.started(), tools.report.started())\n\
                c = asyncio.run(both())\n\
                names = [t['name'] for t in discover_mcp_tools()]\n\
                try:\n\
                \x20   call_mcp_tool('mcp__report__missing')\n\
                except ToolError as e:\n\
                \x20   missing = str(e)\n\
                {'a': a, 'same': a == b == c[0] == c[1], 'names': names, 'missing': missing}";
    let (exit, execution) = native_run(&config, code, &[], "");
    assert_eq!(exit, 0, "{execution}");
    let value = &execution["return_value"];
    assert_eq!(value["a"]["argv"], json!(["x"]), "{execution}");
    assert_eq!(value["same"], true, "{execution}");
    assert_eq!(
        value["names"],
        json!(["mcp__report__started"]),
        "{execution}"
    );
    assert!(value["missing"]
        .as_str()
        .unwrap_or_default()
        .contains("missing"));
    assert_eq!(execution["tool_calls"], 5, "{execution}");
    // The call cap (set in the config) ends the run with its own status.
    let capped_config = native_config(dir.path(), &[], json!({"limits": {"max_tool_calls": 2}}));
    let mut file: Value =
        serde_json::from_str(&std::fs::read_to_string(&capped_config).expect("config"))
            .expect("json");
    file["mcpServers"] = json!({"report": {
        "command": mcp_python(),
        "args": [PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/report_server.py")],
    }});
    std::fs::write(&capped_config, file.to_string()).expect("config");
    let (_, capped) = native_run(
        &capped_config,
        "for _ in range(5): call_mcp_tool('mcp__report__started')",
        &[],
        "",
    );
    assert_eq!(capped["status"], "tool_call_limit", "{capped}");
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

#[test]
fn run_python_chooses_its_tier_only_where_the_operator_allows_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let version = "import sys\nsys.version_info[:2]";
    let requests = json!([
        {"method": "call_tool", "name": "run_python", "arguments": {"code": version}},
        {"method": "call_tool", "name": "run_python", "arguments": {"code": version, "tier": "native"}},
        {"method": "call_tool", "name": "run_python",
         "arguments": {"code": "import numpy\nint(numpy.arange(4).sum())", "tier": "native"}},
    ]);
    let serve = |config: &str| {
        super::mcp_client(
            &[
                "stdio",
                env!("CARGO_BIN_EXE_sandpy"),
                "serve",
                "--config",
                config,
            ],
            &requests,
        )
    };
    for per_run in [true, false] {
        let config = dir.path().join(format!("per-run-{per_run}.json"));
        let file = json!({"sandpy": {"native": {"venv": native_venv(), "per_run": per_run}}});
        std::fs::write(&config, file.to_string()).expect("config");
        let (out, status, _) = serve(&config.display().to_string());
        assert_eq!(status, 0, "{out}");
        // The config's tier (here the default, wasm) when the request names none.
        let first = &out[0]["structuredContent"]["return_value"];
        assert_eq!(first, &json!([3, 14]), "{out}");
        if per_run {
            let native = &out[1]["structuredContent"]["return_value"];
            assert!(native[1].as_u64().is_some_and(|minor| minor < 14), "{out}");
            assert_eq!(out[2]["structuredContent"]["return_value"], 6, "{out}");
        } else {
            // Without `per_run`, a request cannot pick the native tier.
            let refused = out[1].to_string();
            assert!(refused.contains("sandpy.native.per_run"), "{out}");
        }
    }
}

/// Programs of the language tests (`crates/sandpy/tests/all/language.rs`), run in both
/// tiers here and as session cells in `native_sessions.rs`.
pub(super) const COMPAT_PROGRAMS: [&str; 6] = [
    "from dataclasses import dataclass\n\
     @dataclass\n\
     class Point:\n\
     \x20   x: int\n\
     \x20   y: int\n\
     def squares(n):\n\
     \x20   for i in range(n):\n\
     \x20       yield i * i\n\
     def describe(v):\n\
     \x20   match v:\n\
     \x20       case Point(x=0, y=0): return 'origin'\n\
     \x20       case [a, b]: return f'pair {a} {b}'\n\
     \x20       case _: return 'other'\n\
     print(list(squares(4)), describe(Point(0, 0)), describe([1, 2]))\n\
     {'p': repr(Point(1, 2)), 's': sum(squares(10))}",
    "import json, re, datetime, decimal, fractions, statistics, itertools, collections, hashlib, base64\n\
     from decimal import Decimal\n\
     [json.loads(json.dumps({'a': [1, 2.5, None]})), re.findall(r'(\\d+)-(\\w+)', '1-a 22-bb'),\n\
     str(datetime.date(2024, 2, 28) + datetime.timedelta(days=1)), str(Decimal('0.1') + Decimal('0.2')),\n\
     str(fractions.Fraction(1, 3) * 3), statistics.median([5, 1, 3]), list(itertools.accumulate([1, 2, 3])),\n\
     collections.Counter('abca').most_common(1), hashlib.sha256(b'x').hexdigest()[:8], base64.b64encode(b'hi').decode()]",
    "import asyncio\n\
     async def twice(x):\n\
     \x20   await asyncio.sleep(0.01)\n\
     \x20   return 2 * x\n\
     async def main():\n\
     \x20   return await asyncio.gather(twice(1), twice(2), twice(3))\n\
     print(asyncio.run(main()))",
    "import asyncio\n\
     x = await asyncio.gather(*(asyncio.sleep(0.01, result=i) for i in range(3)))\n\
     x",
    "import json\njson.loads('{')",
    "import sys\nprint('to stderr', file=sys.stderr)\ntry:\n    raise KeyError('k')\nexcept KeyError as e:\n    caught = repr(e)\ncaught",
];

/// Programs of the language tests (`crates/sandpy/tests/all/language.rs`) print and return
/// the same in both tiers.
#[test]
fn compat_programs_answer_alike_in_both_tiers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = native_config(dir.path(), &[], json!({}));
    for code in COMPAT_PROGRAMS {
        let (_, native) = native_run(&config, code, &[], "");
        let out = sandpy()
            .args(["run", "--json", "--tier", "wasm", "-c", code])
            .output()
            .expect("sandpy");
        let wasm: Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_alike(code, &native, &wasm);
    }
}

/// The two tiers' executions of `code` say the same: tracebacks through the stdlib name
/// its files, which differ between the two Pythons; everything else must not.
pub(super) fn assert_alike(code: &str, native: &Value, wasm: &Value) {
    for field in [
        "/status",
        "/stdout",
        "/return_value",
        "/error/type",
        "/error/message",
    ] {
        assert_eq!(
            native.pointer(field),
            wasm.pointer(field),
            "{field} differs for:\n{code}\n{native}\n{wasm}"
        );
    }
    if native["status"] == "ok" {
        assert_eq!(native["stderr"], wasm["stderr"], "{code}");
    }
}

/// `sandpy run --warm` on the native tier: the runner keeps its zygote, so a run skips
/// the zygote's start (numpy and pandas imported), and the zygote leaves with the runner.
#[test]
fn native_warm_runs_keep_the_zygote_and_it_leaves_with_the_runner() {
    let warm = crate::warm::Warm::new();
    let config = native_config(warm.cwd.path(), &["numpy", "pandas"], json!({}));
    let program = "import pandas as pd\nint(pd.Series([1, 2]).sum())";
    let out = warm.served("run", &["--config", &config, "--json", "-c", program]);
    let execution: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(execution["return_value"], 3, "{execution}");
    let runners = crate::warm::runner_pids(warm.xdg.path());
    let zygotes: Vec<i32> = runners
        .iter()
        .flat_map(|&runner| children(runner))
        .collect();
    assert!(!zygotes.is_empty(), "the runner {runners:?} has no zygote");
    crate::warm::kill_runners(warm.xdg.path());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while zygotes.iter().any(|&pid| is_alive(pid)) {
        assert!(
            std::time::Instant::now() < deadline,
            "zygotes {zygotes:?} outlived their runner"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// The processes whose parent is `parent`.
fn children(parent: i32) -> Vec<i32> {
    let parent = Some(parent.to_string());
    let pids = crate::warm::pids().into_iter();
    pids.filter(|&pid| crate::warm::stat_field(pid, 1) == parent)
        .collect()
}

/// Whether `pid` runs (a zombie, waiting for a parent that may never reap it, does not).
fn is_alive(pid: i32) -> bool {
    crate::warm::stat_field(pid, 0).is_some_and(|state| state != "Z")
}

/// The network tests' real HTTP server (`crates/sandpy/tests/fixtures/http_server.py`),
/// logging each request to `log`, and its port.
fn http_server(log: &Path) -> (std::process::Child, u16) {
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../sandpy/tests/fixtures/http_server.py");
    let mut server = Command::new("python3")
        .arg(script)
        .arg(log)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 starts the test server");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(server.stdout.take().expect("stdout")),
        &mut line,
    )
    .expect("port");
    let port = line.trim().parse().expect("the server prints its port");
    (server, port)
}

/// The network by allowlist in the native tier: the run keeps its empty network
/// namespace (a socket of its own reaches nothing), and `urllib.request` goes through the
/// host with the WebAssembly tier's rules: allowed host, refused host, secret put in by
/// the host and scrubbed from the echo (the WebAssembly tier's suite is
/// `crates/sandpy/tests/all/network.rs`).
#[test]
fn network_boundary_native_runs_reach_allowed_hosts_through_the_host_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("requests.jsonl");
    let (mut server, port) = http_server(&log);
    let network = json!({"network": {
        "allow": [format!("127.0.0.1:{port}"), format!("127.0.0.2:{port}")],
        // Secrets go over https only, to the ports their entries name, unless the entry
        // says `allow_http` (the test server is plain http).
        "secrets": {"API_TOKEN": {"env": "SANDPY_TEST_SECRET",
                                  "hosts": [format!("127.0.0.1:{port}")], "allow_http": true}},
    }});
    let config = native_config(dir.path(), &["json", "socket", "urllib.request"], network);
    let code = format!(
        r#"
import json, os, socket, urllib.request
seen = []
token = os.environ["API_TOKEN"]
request = urllib.request.Request("http://127.0.0.1:{port}/echo",
                                 headers={{"Authorization": "Bearer " + token}})
with urllib.request.urlopen(request) as r:
    seen.append(json.load(r)["headers"]["Authorization"])
for attempt in (lambda: urllib.request.urlopen("http://127.0.0.3:{port}/echo"),
                lambda: socket.create_connection(("127.0.0.1", {port}), timeout=2)):
    try:
        attempt()
        seen.append("allowed")
    except OSError as e:
        seen.append(type(e).__name__)
seen
"#
    );
    let out = sandpy()
        .args(["run", "--json", "--config", &config, "-c", &code])
        .env("SANDPY_TEST_SECRET", "native-s3cret-value")
        .output()
        .expect("sandpy");
    let _ = server.kill();
    let _ = server.wait();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("native-s3cret-value"), "{stdout}");
    let execution: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("{e}: {stdout}{}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(
        execution["return_value"],
        json!([
            "Bearer sandpy-secret:API_TOKEN",
            "PermissionError",
            "PermissionError"
        ]),
        "{execution}"
    );
    let received = std::fs::read_to_string(&log).expect("the server's log");
    assert!(
        received.contains("Bearer native-s3cret-value"),
        "{received}"
    );
    assert_eq!(received.lines().count(), 1, "{received}");
    assert_eq!(
        execution["requests"].as_array().map(Vec::len),
        Some(2),
        "{execution}"
    );
}

/// The WebAssembly tier's network attacks (`crates/sandpy/tests/all/network.rs`), in the
/// native tier, in one run: addresses by other spellings, the metadata address, a redirect
/// to a host not on the list, a name that resolves to 127.0.0.1 (no entry names that
/// address), a response over the run's bytes in, and one that trickles past the request
/// timeout.
#[test]
fn network_boundary_native_runs_meet_the_same_rules_as_webassembly_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("requests.jsonl");
    let (mut server, port) = http_server(&log);
    let network = json!({"network": {
        "allow": [format!("127.0.0.2:{port}"), format!("localhost:{port}")],
        "limits": {"max_bytes_in": 1_048_576, "request_timeout_ms": 2000},
    }});
    let config = native_config(dir.path(), &["urllib.request"], network);
    let urls = [
        format!("http://2130706433:{port}/echo"),
        format!("http://[::1]:{port}/echo"),
        format!("http://[::ffff:127.0.0.1]:{port}/echo"),
        "http://169.254.169.254/latest/meta-data/".to_string(),
        format!("http://127.0.0.2:{port}/redirect?to=http://127.0.0.1:{port}/echo"),
        format!("http://localhost:{port}/echo"),
        format!("http://127.0.0.2:{port}/big?n=5000000"),
        format!("http://127.0.0.2:{port}/slow"),
        format!("http://127.0.0.2:{port}/echo"),
    ];
    let code = format!(
        "import urllib.request\nseen = []\nfor url in {urls:?}:\n    try:\n        \
         urllib.request.urlopen(url).read()\n        seen.append('ok')\n    \
         except OSError as e:\n        seen.append(type(e).__name__)\nseen"
    );
    let (exit, execution) = native_run(&config, &code, &[], "");
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(exit, 0, "{execution}");
    assert_eq!(
        execution["return_value"],
        json!([
            "PermissionError",
            "PermissionError",
            "PermissionError",
            "PermissionError",
            "PermissionError",
            // A name that resolves to an internal address no entry allows for it: refused
            // by the operator's rules, not a failure to connect.
            "PermissionError",
            "PermissionError",
            "TimeoutError",
            "ok"
        ]),
        "{execution}"
    );
    let received = std::fs::read_to_string(&log).unwrap_or_default();
    let paths: Vec<&str> = received
        .lines()
        .map(|l| {
            l.split("\"path\": \"")
                .nth(1)
                .unwrap_or("")
                .split('"')
                .next()
                .unwrap_or("")
        })
        .collect();
    assert_eq!(
        paths,
        [
            format!("/redirect?to=http://127.0.0.1:{port}/echo").as_str(),
            "/big?n=5000000",
            "/slow",
            "/echo"
        ],
        "nothing refused reached the server"
    );
}
