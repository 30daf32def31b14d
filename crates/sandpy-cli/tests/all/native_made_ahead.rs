//! Processes made ahead of their runs (`crates/sandpy/src/native/made_ahead.rs`): a run
//! that takes one sees nothing of the last run, a run of another shape does not take
//! one, one that died is replaced by a fresh process, a burst of runs leaves none but
//! those made ahead, and none outlives its sandbox.
//! These drive the library itself (its zygote is the `sandpy` binary), so that the test
//! can wait between runs and see the zygote's processes.

use super::native::native_venv;
use sandpy::{Limits, RunOptions, Sandbox, Status, Tier};
use serde_json::Value;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One of these tests at a time: each finds its zygote among this process's children.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// How long the tests leave a process made ahead waiting before the run that takes it:
/// its age then tells it from a process cloned for its run (a few milliseconds old).
const WAIT: Duration = Duration::from_millis(600);

/// A program's value with the age of its process in seconds (`/output` is mounted as
/// the process is confined, before any task came) and its scratch folder's size.
const AGE: &str = "import os, time\n\
    st = os.statvfs('/tmp')\n\
    found['age'] = time.time() - os.stat('/output').st_mtime\n\
    found['tmp_bytes'] = st.f_blocks * st.f_frsize\n";

fn sandbox() -> Sandbox {
    Sandbox::new(sandpy::Config {
        native: Some(sandpy::native::NativeConfig {
            venv: Some(native_venv().clone()),
            launcher: vec![
                env!("CARGO_BIN_EXE_sandpy").into(),
                sandpy::native::ZYGOTE_ARG.into(),
            ],
            ..Default::default()
        }),
        guest: Some(sandpy_guest::GUEST),
        ..sandpy::Config::default()
    })
    .expect("sandbox")
}

fn options(disk_bytes: u64) -> RunOptions {
    RunOptions {
        tier: Tier::Native,
        limits: Limits {
            disk_bytes,
            ..Limits::default()
        },
        ..RunOptions::default()
    }
}

/// Run `code` (which fills the dict `found`) and return `found`.
fn found(rt: &tokio::runtime::Runtime, sandbox: &Sandbox, code: &str, disk: u64) -> Value {
    let code = format!("found = {{}}\n{code}\nfound");
    let execution = rt.block_on(sandbox.run_with(&code, &options(disk)));
    assert_eq!(execution.status, Status::Ok, "{execution:?}");
    // Nothing printed: not even by the warm-up of a process made ahead.
    assert_eq!(execution.stdout, "", "{execution:?}");
    execution.return_value.expect("a value")
}

fn age(found: &Value) -> f64 {
    found["age"].as_f64().expect("age")
}

/// The parent pid of process `pid`, if it is there.
fn parent(pid: &str) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, after) = stat.rsplit_once(')')?;
    let mut fields = after.split_whitespace();
    let state = fields.next()?;
    if state == "Z" {
        return None;
    }
    fields.next()?.parse().ok()
}

/// The live children of process `of`.
fn children(of: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.bytes().all(|b| b.is_ascii_digit()) && parent(&name) == Some(of) {
            found.extend(name.parse::<u32>().ok());
        }
    }
    found
}

/// This process's zygote (the tests hold [`ONE_AT_A_TIME`]).
fn zygote() -> u32 {
    let zygotes: Vec<u32> = children(std::process::id())
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
                String::from_utf8_lossy(&cmdline).contains(sandpy::native::ZYGOTE_ARG)
            })
        })
        .collect();
    assert_eq!(zygotes.len(), 1, "zygotes: {zygotes:?}");
    zygotes[0]
}

/// The zygote's children once there are `count` (runs end a moment after they
/// answered), or what there is after 10 s.
fn zygote_children(zygote: u32, count: usize) -> Vec<u32> {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let found = children(zygote);
        if found.len() == count || Instant::now() > until {
            return found;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// What a run that took a process made ahead found (the `looking` program of
/// [`a_process_made_ahead_holds_nothing_of_the_last_run`]): the process was made ahead,
/// and holds nothing the last run left, nor anything of its own warm-up (`_warm_up`).
fn assert_holds_nothing(seen: &Value) {
    assert!(age(seen) > 0.4, "not made ahead: {seen}");
    assert!(
        !seen["tmp"].to_string().contains("left"),
        "the last run's scratch files: {seen}"
    );
    assert_eq!(seen["output"], serde_json::json!([]), "{seen}");
    assert_eq!(seen["env"], Value::Null, "{seen}");
    for leak in ["builtin", "module", "global"] {
        assert_eq!(seen[leak], false, "{leak}: {seen}");
    }
    assert_eq!(seen["threads"], serde_json::json!(["MainThread"]), "{seen}");
    assert_eq!(seen["warm_up"], serde_json::json!([]), "{seen}");
}

#[test]
fn a_process_made_ahead_holds_nothing_of_the_last_run() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (rt, sandbox) = (runtime(), sandbox());
    let disk = Limits::default().disk_bytes;
    // The last run leaves what it can: files in its scratch folder and /output, its
    // environment, globals, a module, a builtin, a thread still running, a seeded random.
    let leaving = "import builtins, os, random, sys, threading, time\n\
        os.makedirs('/tmp/left', exist_ok=True)\n\
        open('/tmp/left/secret.txt', 'w').write('secret')\n\
        open('/output/secret.txt', 'w').write('secret')\n\
        os.environ['LEFT_SECRET'] = 'secret'\n\
        builtins.left_secret = 'secret'\n\
        sys.modules['left_secret'] = type(sys)('left_secret')\n\
        left_global = 'secret'\n\
        random.seed(1)\n\
        found['random'] = random.random()\n\
        random.seed(1)\n\
        threading.Thread(target=time.sleep, args=(60,), name='left-thread').start()\n\
        os.chdir('/tmp/left')\n";
    let left = found(&rt, &sandbox, leaving, disk);
    std::thread::sleep(WAIT);
    let looking = "import builtins, os, random, sys, threading\n\
        found['tmp'] = sorted(os.listdir('/tmp'))\n\
        found['output'] = sorted(os.listdir('/output'))\n\
        found['env'] = os.environ.get('LEFT_SECRET')\n\
        found['builtin'] = hasattr(builtins, 'left_secret')\n\
        found['module'] = 'left_secret' in sys.modules\n\
        found['global'] = 'left_global' in globals()\n\
        found['threads'] = [t.name for t in threading.enumerate()]\n\
        found['cwd'] = os.getcwd()\n\
        found['random'] = random.random()\n\
        import linecache\n\
        found['warm_up'] = [k for k in linecache.cache if 'warm-up' in k] + [k for k in ('words',) if k in globals()]\n";
    // Two processes wait ready (one made as the last run started, one once it answered):
    // runs back to back take both, and neither holds anything of the last run, nor of
    // the run just before it.
    let mut randoms = vec![left["random"].clone()];
    for _ in 0..2 {
        let seen = found(&rt, &sandbox, &format!("{looking}{AGE}"), disk);
        assert_holds_nothing(&seen);
        assert_eq!(seen["cwd"], "/tmp", "{seen}");
        assert!(
            !randoms.contains(&seen["random"]),
            "another run's random state: {seen}"
        );
        randoms.push(seen["random"].clone());
    }

    // The same for a session's first cell, after another session's cells.
    let sessions =
        sandpy::sessions::Sessions::new(&sandbox, sandpy::sessions::SessionLimits::default());
    let cell = |id: &str, code: &str| {
        let code = format!("found = {{}}\n{code}\nfound");
        let execution = rt.block_on(sessions.run(id, &code, &options(disk)));
        assert_eq!(execution.status, Status::Ok, "{execution:?}");
        execution.return_value.expect("a value")
    };
    cell("first", leaving);
    cell("first", "kept = 1");
    std::thread::sleep(WAIT);
    let seen = cell("second", &format!("{looking}{AGE}"));
    assert_holds_nothing(&seen);
    // The first session still has its own state.
    let kept = cell("first", "found['kept'] = kept");
    assert_eq!(kept["kept"], 1, "{kept}");
}

#[test]
fn a_run_of_another_shape_does_not_take_a_process_made_ahead() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (rt, sandbox) = (runtime(), sandbox());
    let (small, large) = (8 << 20, 16 << 20);
    found(&rt, &sandbox, AGE, small);
    std::thread::sleep(WAIT);
    // Made ahead for an 8 MiB scratch folder: a run with 16 MiB gets a process of its own.
    let other = found(&rt, &sandbox, AGE, large);
    assert!(age(&other) < 0.3, "took another shape's process: {other}");
    assert_eq!(other["tmp_bytes"], large, "{other}");
    std::thread::sleep(WAIT);
    // Its own shape's is taken, with its own limits.
    let same = found(&rt, &sandbox, AGE, large);
    assert!(age(&same) > 0.4, "not made ahead: {same}");
    assert_eq!(same["tmp_bytes"], large, "{same}");
    // Two processes wait per shape, and at most four in all: a third shape pushes out
    // the oldest.
    found(&rt, &sandbox, AGE, 4 << 20);
    let zygote = zygote();
    let waiting = zygote_children(zygote, 4);
    assert_eq!(waiting.len(), 4, "made ahead: {waiting:?}");
    std::thread::sleep(Duration::from_millis(300));
    let waiting = children(zygote);
    assert_eq!(waiting.len(), 4, "made ahead: {waiting:?}");
}

#[test]
fn a_run_with_mounts_sees_its_folder_as_it_is_now_never_a_process_made_before() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (rt, sandbox) = (runtime(), sandbox());
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let read = |expected: &str| {
        let options = RunOptions {
            mounts: vec![sandpy::files::Mount {
                host: data.clone(),
                guest: "/data".into(),
            }],
            ..options(Limits::default().disk_bytes)
        };
        let code = format!("found = {{}}\n{AGE}\nfound['data'] = open('/data/x').read()\nfound");
        let execution = rt.block_on(sandbox.run_with(&code, &options));
        assert_eq!(execution.status, Status::Ok, "{execution:?}");
        let found = execution.return_value.expect("a value");
        assert_eq!(found["data"], expected, "{found}");
        assert!(age(&found) < 0.3, "made before the run: {found}");
    };
    std::fs::create_dir(&data).expect("mkdir");
    std::fs::write(data.join("x"), "first").expect("write");
    read("first");
    std::thread::sleep(WAIT);
    // The folder replaced between the runs: the next run reads the new one.
    std::fs::remove_dir_all(&data).expect("rm");
    std::fs::create_dir(&data).expect("mkdir");
    std::fs::write(data.join("x"), "second").expect("write");
    read("second");
}

#[test]
fn a_process_made_ahead_that_died_is_replaced_by_a_fresh_one() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (rt, sandbox) = (runtime(), sandbox());
    let disk = Limits::default().disk_bytes;
    for settle in [Duration::from_millis(200), Duration::ZERO] {
        found(&rt, &sandbox, AGE, disk);
        std::thread::sleep(WAIT);
        let zygote = zygote();
        let waiting = zygote_children(zygote, 2);
        assert_eq!(waiting.len(), 2, "made ahead: {waiting:?}");
        for pid in &waiting {
            // SAFETY: SIGKILL to a process the zygote made ahead.
            assert_eq!(unsafe { libc::kill(*pid as i32, libc::SIGKILL) }, 0);
        }
        // Either the zygote has reported its end already, or it does as the run asks
        // to start it.
        std::thread::sleep(settle);
        eprintln!("killed {waiting:?}, then {settle:?} before the next run");
        let next = found(&rt, &sandbox, AGE, disk);
        assert!(age(&next) < 0.3, "took the dead process: {next}");
    }
}

#[test]
fn processes_made_ahead_end_with_their_sandbox() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (rt, sandbox) = (runtime(), sandbox());
    found(&rt, &sandbox, AGE, 8 << 20);
    found(&rt, &sandbox, AGE, 16 << 20);
    let zygote = zygote();
    let mut left = zygote_children(zygote, 4);
    assert_eq!(left.len(), 4, "made ahead: {left:?}");
    left.push(zygote);
    drop(sandbox);
    let until = Instant::now() + Duration::from_secs(10);
    let alive = || -> Vec<u32> {
        left.iter()
            .copied()
            .filter(|pid| parent(&pid.to_string()).is_some())
            .collect()
    };
    while !alive().is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(alive(), Vec::<u32>::new(), "processes left behind");
}

/// Every child of process `of`, zombies (ended, not reaped) included.
fn children_and_zombies(of: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{name}/stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, after)| after.split_whitespace().nth(1))
            .and_then(|ppid| ppid.parse::<u32>().ok());
        if ppid == Some(of) {
            found.extend(name.parse::<u32>().ok());
        }
    }
    found
}

#[test]
fn a_burst_of_runs_leaves_no_process_behind() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (rt, sandbox) = (runtime(), sandbox());
    let disk = Limits::default().disk_bytes;
    found(&rt, &sandbox, AGE, disk);
    let zygote = zygote();
    // Four at once, some taking processes made ahead, some cloned for them, some made
    // ahead as they started and taken by the next before they were ready.
    rt.block_on(async {
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..4 {
            let sandbox = sandbox.clone();
            tasks.spawn(async move {
                for _ in 0..6 {
                    let execution = sandbox.run_with("print('x')", &options(disk)).await;
                    assert_eq!(execution.status, Status::Ok, "{execution:?}");
                }
            });
        }
        while let Some(joined) = tasks.join_next().await {
            joined.expect("a run task");
        }
    });
    // Then only the processes made ahead for the next runs are left: each run's process
    // was ended and reaped (no zombie either).
    let until = Instant::now() + Duration::from_secs(10);
    let mut left = children_and_zombies(zygote);
    while left.len() != 2 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
        left = children_and_zombies(zygote);
    }
    assert_eq!(left.len(), 2, "the zygote's children: {left:?}");
    std::thread::sleep(Duration::from_millis(300));
    let left = children_and_zombies(zygote);
    assert_eq!(left.len(), 2, "the zygote's children: {left:?}");
}
