//! Instances made ahead for fresh runs, several at once (one per run that may execute at
//! once, at most four): attacked for what an instance made ahead could hold of earlier
//! runs while runs go concurrently, and counted, since each one waiting holds memory.

use crate::attacks::{LEAVE_EVERYTHING, LOOK_FOR_LEFTOVERS};
use sandpy::{Limits, Sandbox, Status};
use serde_json::json;
use std::time::{Duration, Instant};

/// A sandbox with `runs` run slots and `slots` pool slots.
fn sandbox(runs: usize, slots: u32) -> Sandbox {
    let config = sandpy::Config {
        pooled_instances: Some(slots),
        max_concurrent_runs: Some(runs),
        ..crate::config()
    };
    Sandbox::new(config).expect("the runtime loads")
}

/// Waits (up to 2 s) until `sandbox` has `wanted` instances made ahead waiting; the count
/// last seen.
fn wait_for_waiting(sandbox: &Sandbox, wanted: usize) -> usize {
    let started = Instant::now();
    loop {
        let waiting = sandbox.instances_made_ahead_waiting();
        if waiting >= wanted || started.elapsed() > Duration::from_secs(2) {
            return waiting;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Lone runs (one that was alone refills the instances made ahead, unless the runs before
/// left no core spare: then the next one does) until `wanted` wait; the count last seen.
fn refilled(sandbox: &Sandbox, wanted: usize) -> usize {
    refilled_for(sandbox, wanted, &Limits::default())
}

/// [`refilled`] by runs under `limits` (instances made ahead have their memory cap).
fn refilled_for(sandbox: &Sandbox, wanted: usize, limits: &Limits) -> usize {
    for _ in 0..20 {
        let e = crate::block_on(sandbox.run("0", limits));
        assert_eq!(e.status, Status::Ok, "{e:#?}");
        if wait_for_waiting(sandbox, wanted) >= wanted {
            break;
        }
    }
    sandbox.instances_made_ahead_waiting()
}

/// `n` runs of `code` at once on `sandbox`, their executions in order.
fn at_once(sandbox: &Sandbox, codes: &[&str]) -> Vec<sandpy::Execution> {
    crate::block_on(async {
        let runs = codes.iter().map(|code| {
            let sandbox = sandbox.clone();
            let code = code.to_string();
            tokio::spawn(async move { sandbox.run(&code, &Limits::default()).await })
        });
        let mut executions = Vec::new();
        for run in runs.collect::<Vec<_>>() {
            executions.push(run.await.expect("the run's task"));
        }
        executions
    })
}

#[test]
fn memory_and_files_of_earlier_and_concurrent_runs_are_not_seen_by_runs_on_several_instances_made_ahead(
) {
    // Two run slots and four pool slots: two runs execute while two instances made ahead
    // wait, so every slot is reused by runs and by instances made ahead in turn. Each
    // round, two runs at once dirty memory, module state and files (or one dirties while
    // the other looks), then two at once look for what any earlier or concurrent run
    // left. Between rounds, lone runs have both instances made ahead ready again.
    let sandbox = sandbox(2, 4);
    for round in 0..12 {
        let dirtying = if round % 2 == 0 {
            [LEAVE_EVERYTHING, LEAVE_EVERYTHING]
        } else {
            [LEAVE_EVERYTHING, LOOK_FOR_LEFTOVERS]
        };
        for e in at_once(&sandbox, &dirtying) {
            assert_eq!(e.status, Status::Ok, "round {round}: {e:#?}");
            if let Some(found) = e.return_value.filter(|v| v.is_array()) {
                assert_eq!(
                    found,
                    json!([[], [], []]),
                    "round {round}: a concurrent run's state leaked"
                );
            }
        }
        assert_eq!(refilled(&sandbox, 2), 2, "round {round}: two made ahead");
        for e in at_once(&sandbox, &[LOOK_FOR_LEFTOVERS, LOOK_FOR_LEFTOVERS]) {
            assert_eq!(
                e.return_value,
                Some(json!([[], [], []])),
                "round {round}: an earlier run's state leaked: {e:#?}"
            );
        }
        assert_eq!(refilled(&sandbox, 2), 2, "round {round}: two made ahead");
    }
    let taken = sandbox.runs_on_instances_made_ahead();
    assert!(
        taken >= 40,
        "only {taken} of 48 runs took an instance made ahead"
    );
}

#[test]
fn memory_held_by_instances_made_ahead_is_capped_at_four_whatever_the_runs_at_once() {
    // Sixteen run slots: one instance made ahead per run slot would be sixteen, each with
    // its pool slot's pages; at most four wait. Runs of another memory cap replace them,
    // never add to them.
    let sandbox = sandbox(16, 64);
    let many = vec!["sum(range(1000))"; 32];
    for e in at_once(&sandbox, &many) {
        assert_eq!(e.status, Status::Ok, "{e:#?}");
    }
    assert_eq!(refilled(&sandbox, 4), 4, "four made ahead");
    let other_cap = Limits {
        memory_bytes: 64 << 20,
        ..Limits::default()
    };
    assert_eq!(
        refilled_for(&sandbox, 4, &other_cap),
        4,
        "four of the new shape"
    );
    let e = crate::block_on(sandbox.run("1", &Limits::default()));
    assert_eq!(e.status, Status::Ok, "{e:#?}");
    for e in at_once(&sandbox, &many) {
        assert_eq!(e.status, Status::Ok, "{e:#?}");
    }
    std::thread::sleep(Duration::from_millis(500));
    let waiting = sandbox.instances_made_ahead_waiting();
    assert!(waiting <= 4, "{waiting} instances made ahead wait");
}

#[test]
fn without_a_pool_slot_to_spare_no_instance_is_made_ahead() {
    // As many pool slots as run slots: an instance made ahead could leave a run without a
    // slot, so none is made, and concurrent runs all get one.
    let sandbox = sandbox(2, 2);
    for _ in 0..5 {
        for e in at_once(&sandbox, &["1", "2"]) {
            assert_eq!(e.status, Status::Ok, "{e:#?}");
        }
    }
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(sandbox.instances_made_ahead_waiting(), 0);
    assert_eq!(sandbox.runs_on_instances_made_ahead(), 0);
}
