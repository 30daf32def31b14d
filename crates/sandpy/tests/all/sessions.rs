//! Sessions: shared state, call order, poisoning, reset, close, TTL and limits; tenants.

use crate::{block_on, sandbox};
use sandpy::sessions::{SessionError, SessionLimits, Sessions, Tenant, TenantQuota};
use sandpy::{Limits, RunOptions, Status};
use serde_json::json;
use std::time::Duration;

fn opts() -> RunOptions {
    RunOptions::default()
}

#[test]
fn runs_in_a_session_share_globals_imports_and_functions() {
    let sessions = Sessions::new(sandbox(), SessionLimits::default());
    block_on(async {
        let e = sessions.run("a", "import json\ncount = 1\ndef bump():\n    global count\n    count += 1\n    return count", &opts()).await;
        assert_eq!(e.status, Status::Ok, "{e:#?}");
        assert_eq!(
            sessions.run("a", "bump()", &opts()).await.return_value,
            Some(json!(2))
        );
        assert_eq!(
            sessions
                .run("a", "json.dumps({'c': bump()})", &opts())
                .await
                .return_value,
            Some(json!("{\"c\": 3}"))
        );
        let other = sessions.run("b", "'count' in globals()", &opts()).await;
        assert_eq!(
            other.return_value,
            Some(json!(false)),
            "sessions do not see each other"
        );
        let fresh = sandbox()
            .run("'count' in globals()", &Limits::default())
            .await;
        assert_eq!(
            fresh.return_value,
            Some(json!(false)),
            "runs without a session stay fresh"
        );
        let e = sessions
            .run("a", "print('only this run')\nbump()", &opts())
            .await;
        assert_eq!(
            (e.stdout.as_str(), e.return_value),
            ("only this run\n", Some(json!(4))),
            "output is per run"
        );
        let e = sessions
            .run(
                "a",
                "def broken():\n    raise ValueError('x')\nbroken()",
                &opts(),
            )
            .await;
        assert!(
            e.error.unwrap().traceback.unwrap().contains("<cell 5>"),
            "tracebacks name the cell"
        );
        assert_eq!(
            sessions.run("a", "bump()", &opts()).await.return_value,
            Some(json!(5)),
            "an exception does not poison"
        );
    });
}

#[test]
fn runs_of_one_session_go_one_at_a_time_in_call_order() {
    let sessions = std::sync::Arc::new(Sessions::new(sandbox(), SessionLimits::default()));
    let values = block_on(async {
        sessions.run("s", "log = []", &opts()).await;
        let mut tasks = Vec::new();
        for i in 0..5 {
            let sessions = sessions.clone();
            tasks.push(tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(15 * i)).await;
                sessions
                    .run(
                        "s",
                        &format!("import time\ntime.sleep(0.05)\nlog.append({i})"),
                        &opts(),
                    )
                    .await
            }));
        }
        for task in tasks {
            task.await.expect("task");
        }
        sessions.run("s", "log", &opts()).await.return_value
    });
    assert_eq!(values, Some(json!([0, 1, 2, 3, 4])));
}

#[test]
fn a_limit_poisons_the_session_until_reset() {
    let sessions = Sessions::new(
        sandbox(),
        SessionLimits {
            memory_bytes: 96 << 20,
            ..SessionLimits::default()
        },
    );
    block_on(async {
        sessions.run("t", "x = 1", &opts()).await;
        let short = RunOptions::with_limits(Limits {
            timeout: Duration::from_millis(200),
            ..Limits::default()
        });
        assert_eq!(
            sessions.run("t", "while True: pass", &short).await.status,
            Status::Timeout
        );
        let e = sessions.run("t", "x", &opts()).await;
        assert_eq!(e.status, Status::SessionPoisoned);
        assert!(e.error.unwrap().message.contains("reset or close it"));
        assert!(sessions
            .list()
            .await
            .iter()
            .any(|s| s.id == "t" && s.poisoned));
        assert!(sessions.reset("t").await);
        let e = sessions.run("t", "'x' in globals()", &opts()).await;
        assert_eq!(
            e.return_value,
            Some(json!(false)),
            "a reset session starts fresh"
        );

        let e = sessions
            .run("m", "b = bytearray(200 * 2**20)", &opts())
            .await;
        assert_eq!(
            e.status,
            Status::MemoryLimit,
            "the session's own memory cap holds"
        );
        assert_eq!(
            sessions.run("m", "1", &opts()).await.status,
            Status::SessionPoisoned
        );
        assert!(!sessions.reset("nope").await);
    });
}

#[test]
fn close_ttl_and_the_session_limit() {
    let limits = SessionLimits {
        idle_ttl: Duration::from_secs(1),
        max_sessions: 2,
        ..SessionLimits::default()
    };
    let sessions = Sessions::new(sandbox(), limits);
    block_on(async {
        sessions.run("one", "v = 1", &opts()).await;
        sessions.run("two", "v = 2", &opts()).await;
        let e = sessions.run("three", "v = 3", &opts()).await;
        assert_eq!(e.status, Status::Busy);
        assert!(e.error.unwrap().message.contains("session limit (2)"));
        assert!(sessions.close("two"));
        assert!(!sessions.close("two"));
        assert_eq!(
            sessions
                .run("three", "v = 3\nv", &opts())
                .await
                .return_value,
            Some(json!(3))
        );
        let ids: Vec<String> = sessions.list().await.into_iter().map(|s| s.id).collect();
        assert_eq!(ids, ["one", "three"]);
        tokio::time::sleep(Duration::from_millis(1300)).await;
        assert!(sessions.list().await.is_empty(), "idle sessions expire");
        let e = sessions.run("one", "'v' in globals()", &opts()).await;
        assert_eq!(
            e.return_value,
            Some(json!(false)),
            "an expired id starts fresh"
        );
    });
}

#[test]
fn a_tenant_reaches_only_its_own_sessions_and_caps_are_its_own() {
    let limits = SessionLimits {
        max_sessions: 3,
        memory_bytes: 64 << 20,
        ..SessionLimits::default()
    };
    let sessions = Sessions::new(sandbox(), limits);
    let quota = TenantQuota {
        max_sessions: 2,
        memory_bytes: 1 << 30,
    };
    let (a, b) = (Tenant::new("a", quota), Tenant::new("b", quota));
    block_on(async {
        let (mine, theirs) = (sessions.of(&a), sessions.of(&b));
        mine.run("main", "secret = 'a'", &opts()).await;
        let e = theirs.run("main", "'secret' in globals()", &opts()).await;
        assert_eq!(e.return_value, Some(json!(false)), "the same id, b's own");
        mine.run("only-a", "1", &opts()).await;
        let busy = mine.run("third", "1", &opts()).await;
        assert_eq!(busy.status, Status::Busy);
        assert_eq!(
            busy.error.expect("error").message,
            "this client's session limit (2) is reached; close a session or wait for one to expire"
        );
        let missing = SessionError::NotFound("only-a".into());
        assert_eq!(theirs.snapshot("only-a").await, Err(missing.clone()));
        assert_eq!(theirs.fork("only-a", "x", &opts()).await, Err(missing));
        assert!(!theirs.reset("only-a").await && !theirs.close("only-a"));
        let ids: Vec<String> = theirs.list().await.into_iter().map(|s| s.id).collect();
        assert_eq!(ids, ["main"]);
        let server = theirs.run("second", "1", &opts()).await;
        assert_eq!(
            server.error.expect("error").message,
            "the server's session limit (3) is reached; close a session or wait for one to expire"
        );
        assert_eq!(sessions.close_tenant("a"), 2, "a's two sessions");
        assert_eq!(sessions.close_tenant("a"), 0, "none left");
        assert_eq!(theirs.run("second", "1", &opts()).await.status, Status::Ok);
        assert_eq!(
            mine.run("main", "'secret' in globals()", &opts())
                .await
                .return_value,
            Some(json!(false)),
            "closed with its tenant"
        );
    });
}

#[test]
fn the_servers_session_memory_caps_all_tenants_together() {
    let limits = SessionLimits {
        memory_bytes: 64 << 20,
        total_memory_bytes: Some(128 << 20),
        ..SessionLimits::default()
    };
    let sessions = Sessions::new(sandbox(), limits);
    let (a, b) = (
        Tenant::new("a", TenantQuota::UNLIMITED),
        Tenant::new("b", TenantQuota::UNLIMITED),
    );
    block_on(async {
        assert_eq!(
            sessions.of(&a).run("1", "1", &opts()).await.status,
            Status::Ok
        );
        assert_eq!(
            sessions.of(&b).run("1", "1", &opts()).await.status,
            Status::Ok
        );
        let busy = sessions.of(&a).run("2", "1", &opts()).await;
        assert_eq!(
            busy.error.expect("error").message,
            "the server's session memory (128 MiB, 64 MiB a session) is reached; close a session or wait for one to expire"
        );
    });
}

/// Tools for the journal tests: `mcp__t__next` counts up; `mcp__t__broken` always fails.
struct Counter(std::sync::atomic::AtomicU64);

impl sandpy::tools::ToolHost for Counter {
    fn list_tools(&self) -> Vec<sandpy::tools::ToolInfo> {
        ["next", "broken"]
            .iter()
            .map(|n| sandpy::tools::ToolInfo {
                name: format!("mcp__t__{n}"),
                description: String::new(),
                input_schema: json!({}),
            })
            .collect()
    }

    fn call_tool(&self, name: &str, _: serde_json::Value) -> sandpy::tools::ToolFuture {
        let n = self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let broken = name.ends_with("broken");
        Box::pin(async move {
            if broken {
                Err("down".into())
            } else {
                Ok(json!(n * 100))
            }
        })
    }
}

fn with_counter(start: u64) -> RunOptions {
    RunOptions {
        tools: Some(std::sync::Arc::new(Counter(start.into()))),
        ..RunOptions::default()
    }
}

#[test]
fn save_restore_and_fork_by_journal_without_calling_tools_again() {
    let sessions = Sessions::new(sandbox(), SessionLimits::default());
    block_on(async {
        let options = with_counter(7);
        sessions
            .run("orig", "items = [call_mcp_tool('mcp__t__next')]", &options)
            .await;
        sessions
            .run(
                "orig",
                "items.append(call_mcp_tool('mcp__t__next'))\ndef total():\n    return sum(items)",
                &options,
            )
            .await;
        let e = sessions.run("orig", "try:\n    call_mcp_tool('mcp__t__broken')\nexcept ToolError as e:\n    err = str(e)\nraise KeyError('kept as an error cell')", &options).await;
        assert_eq!(e.status, Status::Error);
        let snapshot = sessions.snapshot("orig").await.expect("snapshot");
        assert_eq!(snapshot.cells.len(), 3);
        let text = serde_json::to_string(&snapshot).expect("json");
        let snapshot: sandpy::sessions::SessionSnapshot =
            serde_json::from_str(&text).expect("round trip");

        // Restored with tools that would answer differently: the journal answers instead.
        sessions
            .restore("copy", &snapshot, &with_counter(1000))
            .await
            .expect("restore");
        let e = sessions
            .run("copy", "[items, total(), err]", &options)
            .await;
        assert_eq!(
            e.return_value,
            Some(json!([[700, 800], 1500, "down"])),
            "{e:#?}"
        );

        sessions
            .fork("orig", "fork", &with_counter(1000))
            .await
            .expect("fork");
        sessions.run("fork", "items.append(1)", &options).await;
        assert_eq!(
            sessions.run("fork", "total()", &options).await.return_value,
            Some(json!(1501))
        );
        assert_eq!(
            sessions.run("orig", "total()", &options).await.return_value,
            Some(json!(1500)),
            "the original goes its own way"
        );
        assert!(sessions
            .fork("orig", "fork", &options)
            .await
            .unwrap_err()
            .to_string()
            .contains("already exists"));
        assert!(sessions
            .fork("nope", "x", &options)
            .await
            .unwrap_err()
            .to_string()
            .contains("no session"));

        let mut diverged = snapshot.clone();
        diverged.cells[1].status = Status::Error;
        let error = sessions
            .restore("bad", &diverged, &options)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("replaying cell 2 ended ok where the journal has error"),
            "{error}"
        );
        let mut other = snapshot.clone();
        other.format = "v0".into();
        assert!(sessions
            .restore("bad2", &other, &options)
            .await
            .unwrap_err()
            .to_string()
            .contains("unknown session format"));
    });
}

#[test]
fn host_memory_a_session_journal_past_its_cap_is_dropped_and_save_says_why() {
    let limits = SessionLimits {
        journal_bytes: 64 << 10,
        ..SessionLimits::default()
    };
    let sessions = Sessions::new(sandbox(), limits);
    block_on(async {
        let file = sandpy::files::InputFile {
            path: "data.bin".into(),
            content: vec![b'x'; 20 << 10],
        };
        let with_file = RunOptions {
            files: vec![file],
            ..opts()
        };
        for n in 1..=2 {
            let e = sessions.run("s", &format!("n = {n}"), &with_file).await;
            assert_eq!(e.status, Status::Ok, "{e:#?}");
        }
        let info = &sessions.list().await[0];
        assert!(info.saveable);
        assert!(
            info.journal_bytes > 2 * (20 << 10) && info.journal_bytes < 64 << 10,
            "counted as a save writes it (base64): {info:?}"
        );
        assert!(sessions.snapshot("s").await.is_ok());

        // The third file passes the cap: the run is still run and answered.
        let e = sessions.run("s", "n = 3\nn", &with_file).await;
        assert_eq!((e.status, e.return_value), (Status::Ok, Some(json!(3))));
        let info = &sessions.list().await[0];
        assert_eq!((info.saveable, info.journal_bytes), (false, 0), "{info:?}");
        let refused = sessions.snapshot("s").await.expect_err("nothing to save");
        assert!(
            matches!(refused, sandpy::sessions::SessionError::JournalDropped { cap, run: 3 } if cap == 64 << 10),
            "{refused:?}"
        );
        assert!(
            refused.to_string().contains("journal_mb"),
            "names the setting: {refused}"
        );
        let forked = sessions.fork("s", "f", &opts()).await;
        assert!(matches!(
            forked,
            Err(sandpy::sessions::SessionError::JournalDropped { .. })
        ));

        // The session itself goes on, and later runs do not refill the journal.
        let e = sessions.run("s", "n + 1", &with_file).await;
        assert_eq!(e.return_value, Some(json!(4)));
        assert_eq!(sessions.list().await[0].journal_bytes, 0);

        // A reset starts a new journal.
        sessions.reset("s").await;
        sessions.run("s", "n = 5", &opts()).await;
        let snapshot = sessions.snapshot("s").await.expect("a new journal");
        assert_eq!(snapshot.cells.len(), 1);
    });
}

#[test]
fn a_snapshot_from_another_runtime_or_over_the_cap_is_refused_before_replay() {
    let limits = SessionLimits {
        journal_bytes: 4 << 10,
        ..SessionLimits::default()
    };
    let sessions = Sessions::new(sandbox(), limits);
    block_on(async {
        sessions.run("s", "x = 1", &opts()).await;
        let snapshot = sessions.snapshot("s").await.expect("snapshot");

        let mut other = snapshot.clone();
        other.runtime = "0".repeat(64);
        let refused = sessions.restore("r", &other, &opts()).await;
        assert!(
            matches!(&refused, Err(sandpy::sessions::SessionError::Runtime { found, .. }) if *found == "0".repeat(64)),
            "{refused:?}"
        );

        let mut large = snapshot.clone();
        large.cells[0].code = format!("x = 1  # {}", "y".repeat(8 << 10));
        let refused = sessions.restore("r", &large, &opts()).await;
        assert!(
            matches!(
                refused,
                Err(sandpy::sessions::SessionError::TooLarge { cap: 4096, .. })
            ),
            "{refused:?}"
        );
        assert!(sessions.list().await.iter().all(|s| s.id != "r"));

        sessions
            .restore("r", &snapshot, &opts())
            .await
            .expect("the same runtime restores");
    });
}
