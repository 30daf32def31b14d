//! `sandpy run --warm`: runs handed to a background runner. Each test has its own socket
//! folder (`$XDG_RUNTIME_DIR`) and a short idle time, so its runners are its own and leave
//! by themselves.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const SERVED: &str = "served by the warm runner";
/// Seconds a test's runner waits for runs before it leaves.
const IDLE_SECS: &str = "10";

pub(crate) struct Warm {
    pub xdg: tempfile::TempDir,
    pub cwd: tempfile::TempDir,
}

impl Warm {
    pub(crate) fn new() -> Warm {
        let xdg = tempfile::tempdir().expect("tempdir");
        std::fs::set_permissions(xdg.path(), std::fs::Permissions::from_mode(0o700))
            .expect("chmod");
        Warm {
            xdg,
            cwd: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn folder(&self) -> PathBuf {
        self.xdg.path().join("sandpy")
    }

    /// `sandpy COMMAND --warm ARGS` with this test's folders.
    fn command(&self, command: &str, args: &[&str]) -> Command {
        let mut sandpy = self.plain(command);
        sandpy.arg("--warm").args(args);
        sandpy
    }

    /// `sandpy COMMAND` with this test's folders, without `--warm`.
    fn plain(&self, command: &str) -> Command {
        let mut sandpy = crate::sandpy();
        sandpy
            .env("XDG_RUNTIME_DIR", self.xdg.path())
            .env("SANDPY_WARM_IDLE_SECS", IDLE_SECS)
            .env("SANDPY_LOG", "sandpy=debug")
            .current_dir(self.cwd.path())
            .arg(command);
        sandpy
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command("run", args)
            .output()
            .expect("sandpy run --warm")
    }

    /// Run `args` until a runner serves it (the first runs start one and run cold).
    fn run_served(&self, args: &[&str]) -> Output {
        self.served("run", args)
    }

    /// Run `sandpy COMMAND --warm ARGS` until a runner serves it.
    pub(crate) fn served(&self, command: &str, args: &[&str]) -> Output {
        self.served_with(command, args, &[])
    }

    /// [`Warm::served`] with these environment variables set.
    fn served_with(&self, command: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let mut sandpy = self.command(command, args);
            sandpy.envs(env.iter().copied());
            let out = sandpy.output().expect("sandpy --warm");
            if stderr(&out).contains(SERVED) {
                return out;
            }
            assert!(
                Instant::now() < deadline,
                "no runner came up: {}",
                stderr(&out)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn sockets(&self) -> Vec<PathBuf> {
        std::fs::read_dir(self.folder())
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|e| e == "sock"))
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into()
}

/// The run's JSON without its timing and memory figures.
fn comparable(out: &Output) -> serde_json::Value {
    let mut value: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let object = value.as_object_mut().expect("object");
    object.remove("duration_ms");
    object.remove("memory_peak_bytes");
    value
}

#[test]
fn warm_runs_answer_as_cold_runs_do() {
    let warm = Warm::new();
    let program = "import sys\nprint('out')\nprint('err', file=sys.stderr)\n6 * 7";
    let cold = crate::sandpy()
        .current_dir(warm.cwd.path())
        .args(["run", "--json", "-c", program])
        .output()
        .expect("sandpy run");
    let served = warm.run_served(&["--json", "-c", program]);
    assert_eq!(comparable(&served), comparable(&cold));
    // Errors keep their status and exit code.
    let failed = warm.run_served(&["-c", "raise ValueError('boom')"]);
    assert_eq!(failed.status.code(), Some(1), "{}", stderr(&failed));
    assert!(
        stderr(&failed).contains("ValueError: boom"),
        "{}",
        stderr(&failed)
    );
}

#[test]
fn warm_calls_answer_as_cold_calls_do() {
    let warm = Warm::new();
    std::fs::write(
        warm.cwd.path().join("f.py"),
        "def f(x, y=1):\n    return {'sum': x + y}\n",
    )
    .expect("write");
    let args = ["f.py", "f", "--args", "[40, 2]", "--json"];
    let cold = crate::sandpy()
        .current_dir(warm.cwd.path())
        .arg("call")
        .args(args)
        .output()
        .expect("sandpy call");
    let served = warm.served("call", &args);
    assert_eq!(comparable(&served), comparable(&cold));
    assert_eq!(
        comparable(&served)["return_value"],
        serde_json::json!({"sum": 42})
    );
}

#[test]
fn warm_runner_runs_share_no_state() {
    let warm = Warm::new();
    let leak = "import builtins, os\nprint(hasattr(builtins, 'leak'), os.listdir('.'))\nbuiltins.leak = 1\nopen('left.txt', 'w').write('x')";
    warm.run_served(&["-c", "1"]);
    for _ in 0..3 {
        let out = warm.run_served(&["-c", leak]);
        assert_eq!(stdout(&out), "False []\n", "{}", stderr(&out));
    }
}

#[test]
fn warm_runner_time_limit_stops_a_busy_loop_and_serves_the_next_run() {
    let warm = Warm::new();
    warm.run_served(&["-c", "1"]);
    let out = warm.run(&["--timeout-ms", "300", "-c", "while True: pass"]);
    assert!(stderr(&out).contains(SERVED), "{}", stderr(&out));
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let next = warm.run(&["-c", "print('next')"]);
    assert!(stderr(&next).contains(SERVED), "{}", stderr(&next));
    assert_eq!(stdout(&next), "next\n");
}

#[test]
fn warm_runner_takes_files_and_stdin_and_returns_outputs() {
    let warm = Warm::new();
    let dir = warm.cwd.path();
    std::fs::write(dir.join("in.txt"), "file-bytes").expect("write");
    std::fs::write(dir.join("stdin.txt"), "stdin-bytes").expect("write");
    let program =
        "import sys\nopen('/output/o.txt', 'w').write(open('in.txt').read() + sys.stdin.read())";
    let out = warm.run_served(&[
        "--file",
        "in.txt",
        "--input",
        "stdin.txt",
        "--output-dir",
        "outs",
        "-c",
        program,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let saved = std::fs::read_to_string(dir.join("outs/o.txt")).expect("output file");
    assert_eq!(saved, "file-bytesstdin-bytes");
}

#[test]
fn warm_runner_keeps_the_policy_and_a_new_setting_gets_its_own_runner() {
    let warm = Warm::new();
    warm.run_served(&["-c", "1"]);
    let first = warm.sockets();
    let out = warm.run_served(&["--policy", "strict", "--json", "-c", "import os"]);
    let execution: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(execution["status"], "policy_violation", "{execution}");
    let now = warm.sockets();
    assert!(
        now.iter().any(|socket| !first.contains(socket)),
        "the strict policy's run went to the first runner: {first:?} {now:?}"
    );
}

/// The network of a warm run is the command's: `--allow-host` reaches the runner, and a
/// secret whose value changed (its variable is no `SANDPY_` one) gets its own runner, so
/// that a run never uses the value another command was started with.
#[test]
fn warm_runner_keeps_the_network_and_a_new_secret_value_gets_its_own_runner() {
    let warm = Warm::new();
    let config = warm.cwd.path().join("net.json");
    let network = r#"{"sandpy": {"network": {"secrets": {"T": {"env": "WARM_TEST_SECRET", "hosts": ["127.0.0.1"]}}}}}"#;
    std::fs::write(&config, network).expect("config");
    let config = config.display().to_string();
    let program = "import urllib.request
try:
    urllib.request.urlopen('http://127.0.0.1:9/')
except OSError as e:
    print(type(e).__name__, e)";
    let args = [
        "--config",
        &config,
        "--allow-host",
        "127.0.0.1:9",
        "-c",
        program,
    ];
    let out = warm.served_with("run", &args, &[("WARM_TEST_SECRET", "one")]);
    assert!(
        stdout(&out).starts_with("ConnectionError sandpy network: cannot connect"),
        "the runner got --allow-host: {}",
        stdout(&out)
    );
    let first = warm.sockets();
    warm.served_with("run", &args, &[("WARM_TEST_SECRET", "two")]);
    let now = warm.sockets();
    assert!(
        now.iter().any(|socket| !first.contains(socket)),
        "the run with another secret value went to the first runner: {first:?} {now:?}"
    );
}

/// Boundary: the runner's socket. A local client that sends an oversized length, a
/// request for another runner, or bytes that are no request gets the connection closed,
/// without an answer, and the runner goes on serving.
#[test]
fn warm_runner_attack_refuses_oversized_foreign_and_garbage_requests() {
    let warm = Warm::new();
    warm.run_served(&["-c", "1"]);
    let socket = warm.sockets().pop().expect("a socket");
    let foreign = serde_json::json!({
        "key": "0".repeat(32), "code": "print(1)", "filename": null,
        "stdin": "", "limit_overrides": {}, "allowed_tools": null, "files": [], "mounts": []
    })
    .to_string();
    let attempts: [(&str, Vec<u8>); 3] = [
        ("an oversized length", (1u64 << 40).to_le_bytes().to_vec()),
        ("another runner's key", framed(foreign.as_bytes())),
        ("garbage", framed(b"\xff not json")),
    ];
    for (what, bytes) in attempts {
        let mut client = UnixStream::connect(&socket).expect("connect");
        client
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        client.write_all(&bytes).expect("write");
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).expect("the runner closes");
        assert!(answer.is_empty(), "{what}: answered {answer:?}");
    }
    let out = warm.run(&["-c", "print('still here')"]);
    assert!(stderr(&out).contains(SERVED), "{}", stderr(&out));
    assert_eq!(stdout(&out), "still here\n");
}

fn framed(body: &[u8]) -> Vec<u8> {
    let mut bytes = (body.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(body);
    bytes
}

/// Boundary: the socket folder. One that others can enter is not used (another user could
/// put a runner of theirs there); the run happens in the process.
#[test]
fn warm_runner_attack_a_folder_others_can_enter_is_not_used() {
    let warm = Warm::new();
    std::fs::create_dir(warm.folder()).expect("mkdir");
    std::fs::set_permissions(warm.folder(), std::fs::Permissions::from_mode(0o777)).expect("chmod");
    for _ in 0..2 {
        let out = warm.run(&["-c", "print('cold')"]);
        assert_eq!(stdout(&out), "cold\n", "{}", stderr(&out));
        assert!(
            stderr(&out).contains("can be written by other users (mode 777)"),
            "{}",
            stderr(&out)
        );
    }
    std::thread::sleep(Duration::from_millis(500));
    assert!(warm.sockets().is_empty(), "a runner used the open folder");
}

/// One runner per key: a second one started for a key that has a runner leaves at once
/// and leaves the first one's socket alone.
#[test]
fn warm_runner_a_second_runner_for_a_key_leaves_the_first_alone() {
    use std::os::unix::fs::MetadataExt;
    let warm = Warm::new();
    warm.run_served(&["-c", "1"]);
    let socket = warm.sockets().pop().expect("a socket");
    let inode = std::fs::metadata(&socket).expect("socket").ino();
    let key = socket
        .file_stem()
        .expect("key")
        .to_string_lossy()
        .to_string();
    let second = crate::sandpy()
        .env("XDG_RUNTIME_DIR", warm.xdg.path())
        .env("SANDPY_WARM_IDLE_SECS", IDLE_SECS)
        .current_dir(warm.cwd.path())
        .args(["warm-runner", "--key", &key])
        .output()
        .expect("sandpy warm-runner");
    assert!(second.status.success(), "{}", stderr(&second));
    let now = std::fs::metadata(&socket).map(|m| m.ino());
    assert_eq!(now.ok(), Some(inode), "the second runner took the socket");
    assert_eq!(runner_pids(warm.xdg.path()).len(), 1);
    let out = warm.run(&["-c", "print('first')"]);
    assert!(stderr(&out).contains(SERVED), "{}", stderr(&out));
}

/// A socket folder whose path leaves no room for a socket's name is refused before any
/// runner is started (each would load its sandbox, then fail to listen).
#[test]
fn warm_runner_is_not_started_where_its_socket_cannot_be() {
    let warm = Warm::new();
    let long = warm.xdg.path().join("x".repeat(100));
    std::fs::create_dir(&long).expect("mkdir");
    std::fs::set_permissions(&long, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    for _ in 0..2 {
        let out = warm
            .command("run", &["-c", "print('cold')"])
            .env("XDG_RUNTIME_DIR", &long)
            .output()
            .expect("sandpy run --warm");
        assert_eq!(stdout(&out), "cold\n", "{}", stderr(&out));
        assert!(
            stderr(&out).contains("longer than a socket's path may be"),
            "{}",
            stderr(&out)
        );
    }
    assert!(runner_pids(&long).is_empty(), "a runner was started");
}

#[test]
fn warm_runner_leaves_when_idle_and_a_killed_one_is_reported_not_rerun() {
    let warm = Warm::new();
    warm.run_served(&["-c", "1"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !warm.sockets().is_empty() {
        assert!(
            Instant::now() < deadline,
            "the runner stayed past its idle time"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Its lock file goes with it: nothing is left in the folder.
    std::thread::sleep(Duration::from_millis(500));
    let left: Vec<_> = std::fs::read_dir(warm.folder())
        .expect("folder")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    // A runner that dies during a run: the command says so and does not run the
    // program a second time itself (the run may have had effects).
    warm.run_served(&["-c", "1"]);
    let program = "import time\nprint('started', flush=True)\ntime.sleep(30)";
    let mut child = warm
        .command("run", &["-c", program])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    // Killed once the run is under way: its first line came through.
    let mut output = child.stdout.take().expect("stdout");
    let mut first = [0u8; 8];
    output
        .read_exact(&mut first)
        .expect("the program's first line");
    assert_eq!(&first, b"started\n");
    kill_runners(warm.xdg.path());
    let mut rest = String::new();
    output
        .read_to_string(&mut rest)
        .expect("the rest of stdout");
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(10), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("the warm runner took the run, then its answer was lost"),
        "{}",
        stderr(&out)
    );
    // Its output came as it was written, once: not again from a run in the command.
    assert_eq!(rest, "", "ran again in the command");
}

/// Kill the runners whose environment names this socket folder.
pub(crate) fn kill_runners(xdg: &Path) {
    for pid in runner_pids(xdg) {
        // SAFETY: kill(2) on a pid just read; at worst it names no process.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
}

/// The runners whose environment names this socket folder.
pub(crate) fn runner_pids(xdg: &Path) -> Vec<i32> {
    let wanted = format!("XDG_RUNTIME_DIR={}", xdg.display());
    let read =
        |pid: i32, file: &str| std::fs::read(format!("/proc/{pid}/{file}")).unwrap_or_default();
    pids()
        .into_iter()
        .filter(|&pid| {
            let is_runner = read(pid, "cmdline")
                .split(|&b| b == 0)
                .any(|arg| arg == b"warm-runner");
            let environ = read(pid, "environ");
            is_runner
                && environ
                    .split(|&b| b == 0)
                    .any(|var| var == wanted.as_bytes())
        })
        .collect()
}

/// Every process's pid.
pub(crate) fn pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|entry| entry.file_name().to_string_lossy().parse().ok())
        .collect()
}

/// Field `index` of `/proc/PID/stat` after the command name (0: state, 1: parent, 11 and
/// 12: user and system CPU time in clock ticks).
pub(crate) fn stat_field(pid: i32, index: usize) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(index).map(str::to_string)
}

/// Seconds of CPU `pid` uses over `window`.
fn cpu_seconds_over(pid: i32, window: Duration) -> f64 {
    let ticks = || -> u64 {
        let field = |index| stat_field(pid, index).and_then(|f| f.parse::<u64>().ok());
        field(11).expect("utime") + field(12).expect("stime")
    };
    let before = ticks();
    std::thread::sleep(window);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (ticks() - before) as f64 / hz
}

/// A command that ends during its run (Ctrl-C, killed) stops the run in the runner, as its
/// own process would have: a busy loop does not run on to its time limit there.
#[test]
fn warm_runner_stops_the_run_of_a_command_that_ended() {
    let warm = Warm::new();
    warm.run_served(&["-c", "1"]);
    let pid = *runner_pids(warm.xdg.path()).first().expect("a runner");
    let mut command = warm.command("run", &["--timeout-ms", "120000", "-c", "while True: pass"]);
    let mut child = command
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    std::thread::sleep(Duration::from_secs(2));
    let busy = cpu_seconds_over(pid, Duration::from_secs(2));
    child.kill().expect("kill");
    child.wait().expect("wait");
    std::thread::sleep(Duration::from_secs(1));
    let after = cpu_seconds_over(pid, Duration::from_secs(2));
    assert!(
        busy > 0.25,
        "the loop did not run in the runner: {busy} s of CPU"
    );
    assert!(
        after < busy / 4.0,
        "the runner ran on: {busy} s of CPU, then {after} s after the command ended"
    );
}

/// Without `--warm` a command uses the runner of its settings when one is up and never
/// starts one; `sandpy warmup --keep` starts it; `--cold` runs in the command's process.
#[test]
fn a_runner_that_is_up_serves_commands_without_the_flag_and_none_is_started_for_them() {
    let warm = Warm::new();
    let program = ["run", "-c", "print('hi')"];
    let cold = warm
        .plain(program[0])
        .args(&program[1..])
        .output()
        .expect("run");
    assert_eq!(stdout(&cold), "hi\n", "{}", stderr(&cold));
    assert!(!stderr(&cold).contains(SERVED), "{}", stderr(&cold));
    // Nothing was started or made for it: not even the socket folder.
    assert!(!warm.folder().exists(), "{:?}", warm.sockets());
    let kept = warm
        .plain("warmup")
        .args(["--keep", "--idle-secs", IDLE_SECS])
        .output()
        .expect("warmup");
    assert!(kept.status.success(), "{}", stderr(&kept));
    assert_eq!(warm.sockets().len(), 1, "{}", stderr(&kept));
    let served = warm
        .plain(program[0])
        .args(&program[1..])
        .output()
        .expect("run");
    assert_eq!(stdout(&served), "hi\n", "{}", stderr(&served));
    assert!(stderr(&served).contains(SERVED), "{}", stderr(&served));
    let call = warm
        .plain("call")
        .args(["-", "f", "--args", "[20]"])
        .stdin(
            std::fs::File::open(write(&warm, "f.py", "def f(x):\n    return x + 1\n"))
                .expect("open"),
        )
        .output()
        .expect("call");
    assert_eq!(stdout(&call), "21\n", "{}", stderr(&call));
    assert!(stderr(&call).contains(SERVED), "{}", stderr(&call));
    let own = warm
        .plain("run")
        .args(["--cold", "-c", "print('hi')"])
        .output()
        .expect("run --cold");
    assert_eq!(stdout(&own), "hi\n", "{}", stderr(&own));
    assert!(!stderr(&own).contains(SERVED), "{}", stderr(&own));
}

/// A served run's output reaches the command's stdout as the program writes it, as a run
/// in the command's own process does, not at the end.
#[test]
fn a_served_run_streams_its_output_as_it_is_written() {
    use std::io::BufRead;
    let warm = Warm::new();
    warm.run_served(&["-c", "1"]);
    let program = "import time\nprint('first', flush=True)\ntime.sleep(2)\nprint('second')";
    let started = Instant::now();
    let mut child = warm
        .plain("run")
        .args(["-c", program])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut lines = std::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    let first = lines.next().expect("a line").expect("text");
    let first_at = started.elapsed();
    let second = lines.next().expect("a line").expect("text");
    let out = child.wait_with_output().expect("wait");
    let ended_at = started.elapsed();
    assert_eq!((first.as_str(), second.as_str()), ("first", "second"));
    assert!(stderr(&out).contains(SERVED), "{}", stderr(&out));
    assert!(
        first_at + Duration::from_secs(1) < ended_at,
        "the first line came at {first_at:?}, the end at {ended_at:?}"
    );
}

/// Write `text` to `name` in the test's working folder.
fn write(warm: &Warm, name: &str, text: &str) -> PathBuf {
    let path = warm.cwd.path().join(name);
    std::fs::write(&path, text).expect("write");
    path
}
