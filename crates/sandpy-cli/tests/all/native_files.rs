//! The native tier's filesystem boundary: host files out of a run's reach, and the files
//! a timed-out run returns read without following its links.

use super::native::{assert_blocked, attacks, native_config, native_run, output_names};
use serde_json::json;

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
    // own /tmp (for packages that keep a config or a cache there, such as matplotlib), and
    // matplotlib's backend, sandpy's own (figures become outputs, docs/guide/showing-results.md).
    assert_eq!(
        found["env"],
        json!({"HOME": "/tmp", "XDG_CONFIG_HOME": "/tmp/.config", "XDG_CACHE_HOME": "/tmp/.cache",
               "MPLCONFIGDIR": "/tmp/.config/matplotlib", "MPLBACKEND": "module://sandpy_guest.display"}),
        "{}",
        found["env"]
    );
}
