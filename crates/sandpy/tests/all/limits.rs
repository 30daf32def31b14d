//! Every limit holds, ends with its own status, and leaves the host fine.

use crate::{assert_host_fine, block_on, run_with, sandbox};
use sandpy::{Limits, RunOptions, Status};
use std::time::{Duration, Instant};

fn with(limits: Limits) -> RunOptions {
    RunOptions::with_limits(limits)
}

fn short(ms: u64) -> RunOptions {
    with(Limits {
        timeout: Duration::from_millis(ms),
        ..Limits::default()
    })
}

#[test]
fn timeout_stops_busy_loops_sleeps_and_regexes() {
    for code in [
        "while True: pass",
        "import time\ntime.sleep(30)",
        "import re\nre.match(r'(a+)+$', 'a' * 40 + 'b')",
        "x = 0\nwhile True:\n    x = (x * 31 + 7) % 1000003",
    ] {
        let started = Instant::now();
        let e = run_with(code, &short(300));
        let took = started.elapsed();
        assert_eq!(e.status, Status::Timeout, "{code}: {e:?}");
        assert_eq!(e.error.as_ref().unwrap().kind, "Timeout");
        assert!(
            took < Duration::from_secs(3),
            "{code} stopped after {took:?}"
        );
    }
    assert_host_fine();
}

#[test]
fn output_before_a_timeout_is_kept() {
    let e = run_with("print('started')\nwhile True: pass", &short(1500));
    assert_eq!(e.status, Status::Timeout);
    assert_eq!(e.stdout, "started\n");
}

#[test]
fn memory_cap_is_memory_limit() {
    let e = run_with("x = bytearray(512 * 1024 * 1024)", &RunOptions::default());
    assert_eq!(e.status, Status::MemoryLimit, "{e:?}");
    assert!(e.memory_peak_bytes <= 256 << 20);
    let e = run_with(
        "xs = []\nwhile True:\n    xs.append('x' * 1_000_000)",
        &RunOptions::default(),
    );
    assert_eq!(e.status, Status::MemoryLimit, "{e:?}");
    let small = with(Limits {
        memory_bytes: 64 << 20,
        ..Limits::default()
    });
    let e = run_with("x = bytearray(100 * 1024 * 1024)", &small);
    assert_eq!(e.status, Status::MemoryLimit);
    assert_host_fine();
}

#[test]
fn caught_memory_error_is_the_programs_business() {
    let e = run_with(
        "try:\n    x = bytearray(10**9)\nexcept MemoryError:\n    print('recovered')",
        &RunOptions::default(),
    );
    assert_eq!(e.status, Status::Ok);
    assert_eq!(e.stdout, "recovered\n");
}

#[test]
fn output_cap_truncates_with_a_marker() {
    let limits = Limits {
        output_bytes: 1000,
        ..Limits::default()
    };
    let e = run_with(
        "while True:\n    print('flood' * 10)",
        &with(limits.clone()),
    );
    assert_eq!(e.status, Status::OutputLimit);
    assert!(e.output_truncated);
    assert!(e
        .stdout
        .ends_with("[sandpy: output truncated: limit reached]\n"));
    assert!(e.stdout.len() < 1100, "{} bytes kept", e.stdout.len());
    let e = run_with(
        "import os\nwhile True:\n    os.write(2, b'x' * 4096)",
        &with(limits.clone()),
    );
    assert_eq!(e.status, Status::OutputLimit);
    let e = run_with("'y' * 5000", &with(limits.clone()));
    assert_eq!(e.status, Status::OutputLimit, "a return value counts too");
    let e = run_with(
        "raise ValueError('z' * 200_000)",
        &with(Limits {
            output_bytes: 100_000,
            ..limits
        }),
    );
    assert_eq!(
        e.status,
        Status::OutputLimit,
        "a huge exception message meets the cap as its traceback is printed"
    );
    assert_host_fine();
}

#[test]
fn code_size_cap_is_invalid_input() {
    let limits = Limits {
        code_bytes: 100,
        ..Limits::default()
    };
    let e = run_with(&"x = 1\n".repeat(50), &with(limits));
    assert_eq!(e.status, Status::InvalidInput);
    assert!(e
        .error
        .unwrap()
        .message
        .contains("over the limit of 100 bytes"));
}

#[test]
fn deep_recursion_is_recursion_error_or_stack_overflow_never_a_crash() {
    let e = run_with("def f(n): return f(n + 1)\nf(0)", &RunOptions::default());
    assert_eq!(e.status, Status::Error);
    assert_eq!(e.error.unwrap().kind, "RecursionError");
    let e = run_with(
        "import sys\nsys.setrecursionlimit(10**7)\ndef f(n): return f(n + 1)\nf(0)",
        &RunOptions::default(),
    );
    assert_eq!(e.status, Status::StackOverflow, "{e:?}");
    assert_eq!(e.error.unwrap().kind, "StackOverflow");
    let e = run_with(
        "import json\njson.loads('[' * 200000 + ']' * 200000)",
        &RunOptions::default(),
    );
    assert_eq!(e.status, Status::StackOverflow, "{e:?}");
    assert_host_fine();
}

#[test]
fn many_runs_at_once_are_independent() {
    let results = block_on(async {
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..16 {
            tasks.spawn(async move {
                let code = format!("import time\ntime.sleep(0.05)\nvalue = {i}\nvalue * 2");
                (i, sandbox().run(&code, &Limits::default()).await)
            });
        }
        let mut out = Vec::new();
        while let Some(done) = tasks.join_next().await {
            out.push(done.expect("task"));
        }
        out
    });
    assert_eq!(results.len(), 16);
    for (i, e) in results {
        assert_eq!(e.return_value, Some(serde_json::json!(i * 2)));
    }
}

#[test]
fn a_full_queue_answers_busy_at_once() {
    let config = sandpy::Config {
        max_concurrent_runs: Some(1),
        max_queued_runs: 1,
        ..crate::config()
    };
    let sandbox = sandpy::Sandbox::new(config).expect("sandbox");
    let statuses = block_on(async {
        let mut tasks = Vec::new();
        for i in 0..3 {
            let sandbox = sandbox.clone();
            tasks.push(tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(20 * i)).await; // arrive in order
                let started = Instant::now();
                let e = sandbox
                    .run("import time\ntime.sleep(0.4)", &Limits::default())
                    .await;
                (e.status, started.elapsed())
            }));
        }
        let mut out = Vec::new();
        for task in tasks {
            out.push(task.await.expect("task"));
        }
        out
    });
    assert_eq!(statuses[0].0, Status::Ok);
    assert_eq!(statuses[1].0, Status::Ok, "the second waited in line");
    assert!(
        statuses[1].1 >= Duration::from_millis(300),
        "and ran after the first: {:?}",
        statuses[1].1
    );
    assert_eq!(
        statuses[2].0,
        Status::Busy,
        "the third found the queue full"
    );
    assert!(
        statuses[2].1 < Duration::from_millis(250),
        "and was told at once: {:?}",
        statuses[2].1
    );
    let e = block_on(sandbox.run("1", &Limits::default()));
    assert_eq!(e.status, Status::Ok, "and the sandbox is fine afterwards");
}

#[test]
fn a_run_on_an_instance_made_ahead_has_its_own_limits() {
    // While a run that is alone executes, the next run's instance is made with its memory
    // cap and disk quotas (its shape). The next run of that shape takes it and sets its
    // own output cap and time limit; a run of another shape makes its own instance.
    let sandbox = crate::sandbox_with_two_run_slots();
    // Runs `code` until one took an instance made ahead (each run has the next one's
    // made), asserting `status` of every run; returns the last run's execution.
    let on_instance_made_ahead = |code: &str, limits: &Limits, status: Status| {
        for attempt in 0..40 {
            std::thread::sleep(Duration::from_millis(25));
            let before = sandbox.runs_on_instances_made_ahead();
            let e = block_on(sandbox.run(code, limits));
            assert_eq!(e.status, status, "attempt {attempt}: {e:?}");
            if sandbox.runs_on_instances_made_ahead() > before {
                return e;
            }
        }
        panic!("no run of {code:?} took an instance made ahead");
    };
    let e = on_instance_made_ahead("print('first')", &Limits::default(), Status::Ok);
    assert_eq!(e.stdout, "first\n");

    let small_output = Limits {
        output_bytes: 1000,
        ..Limits::default()
    };
    on_instance_made_ahead("print('x' * 5000)", &small_output, Status::OutputLimit);
    on_instance_made_ahead("while True: pass", &short(300).limits, Status::Timeout);

    // Another memory cap: the instance made ahead does not have it, so the run makes its
    // own; then runs of that cap take theirs.
    let small_memory = Limits {
        memory_bytes: 64 << 20,
        ..Limits::default()
    };
    let big = "x = bytearray(100 * 1024 * 1024)\nprint('fits')";
    let before = sandbox.runs_on_instances_made_ahead();
    let own = block_on(sandbox.run(big, &small_memory));
    assert_eq!(sandbox.runs_on_instances_made_ahead(), before);
    let ahead = on_instance_made_ahead(big, &small_memory, Status::MemoryLimit);
    for e in [own, ahead] {
        assert_eq!(e.status, Status::MemoryLimit, "{e:?}");
        let message = &e.error.as_ref().expect("an error").message;
        assert!(message.contains(&(64u64 << 20).to_string()), "{message}");
    }
    let before = sandbox.runs_on_instances_made_ahead();
    let e = block_on(sandbox.run(big, &Limits::default()));
    assert_eq!(e.stdout, "fits\n", "{e:?}");
    assert_eq!(
        sandbox.runs_on_instances_made_ahead(),
        before,
        "a run of the default cap took the instance made for 64 MiB"
    );
}

#[test]
fn a_session_started_on_an_instance_made_ahead_has_the_sessions_memory_cap() {
    // Sessions' instances made ahead have the memory cap of the sessions that asked for
    // them: a session of another cap makes its own, and its cap holds.
    let sandbox = crate::sandbox_with_two_run_slots();
    let with_cap = |mib: usize| {
        let limits = sandpy::sessions::SessionLimits {
            memory_bytes: mib << 20,
            ..sandpy::sessions::SessionLimits::default()
        };
        sandpy::sessions::Sessions::new(&sandbox, limits)
    };
    let (small, large) = (with_cap(64), with_cap(256));
    let big = "x = bytearray(100 * 1024 * 1024)\nprint('fits')";
    let options = RunOptions::default();
    block_on(async {
        // A first session of the small cap has the next one's instance made.
        let e = small.run("s0", "1", &options).await;
        assert_eq!(e.status, Status::Ok, "{e:?}");
        let mut took = false;
        for attempt in 1..40 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let before = sandbox.runs_on_instances_made_ahead();
            let e = small.run(&format!("s{attempt}"), big, &options).await;
            assert_eq!(e.status, Status::MemoryLimit, "attempt {attempt}: {e:?}");
            let message = &e.error.as_ref().expect("an error").message;
            assert!(message.contains(&(64u64 << 20).to_string()), "{message}");
            if sandbox.runs_on_instances_made_ahead() > before {
                took = true;
                break;
            }
        }
        assert!(
            took,
            "no session of 64 MiB started on an instance made ahead"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        let before = sandbox.runs_on_instances_made_ahead();
        let e = large.run("l0", big, &options).await;
        assert_eq!(e.stdout, "fits\n", "{e:?}");
        assert_eq!(
            sandbox.runs_on_instances_made_ahead(),
            before,
            "a session of 256 MiB took the instance made for 64 MiB"
        );
    });
}
