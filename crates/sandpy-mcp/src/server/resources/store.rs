//! The kept runs of every client and the bounds they are kept within ([`ResourceLimits`]):
//! a session's bytes and files, its tenant's bytes over all the tenant's sessions (the
//! oldest runs go to make room in both), the server's bytes (a run that would pass them
//! is refused), and a time to live; each checked before anything is kept. A tenant's
//! share is below the server's bytes, so one tenant cannot fill the store for the others.

use super::uri::{self, cut};
use super::{Leftover, NotFound, NotKept, Owner, Resource};
use sandpy::settings::ResourceLimits;
use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Instant;

/// The kept runs of every client, oldest first, within [`ResourceLimits`].
pub(crate) struct ResourceStore {
    limits: ResourceLimits,
    runs: Mutex<Runs>,
}

/// The runs kept, and their bytes together.
#[derive(Default)]
struct Runs {
    /// Oldest first.
    runs: VecDeque<RunFiles>,
    /// Bytes of every run's resources.
    bytes: u64,
}

struct RunFiles {
    /// 32 lowercase hex digits.
    id: String,
    owner: Owner,
    at: Instant,
    resources: Vec<Resource>,
    bytes: u64,
}

impl ResourceStore {
    /// An empty store within `limits`.
    pub(crate) fn new(limits: ResourceLimits) -> ResourceStore {
        ResourceStore {
            limits,
            runs: Mutex::new(Runs::default()),
        }
    }

    /// The bounds it keeps within.
    pub(crate) fn limits(&self) -> &ResourceLimits {
        &self.limits
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Runs> {
        // A panic while holding the lock leaves consistent data: every change is one step.
        self.runs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keep `leftovers` of one run for `owner` under a new run id; the resources as a
    /// client reads them, in the order given. Bounds are checked before anything is kept:
    /// the owner's oldest runs go to make room in its session, its tenant's oldest ones
    /// (of any of its sessions) to make room in the tenant's share; the run is refused
    /// when it alone is over a session's bounds, or when the server's bytes would be passed.
    pub(crate) fn keep(
        &self,
        owner: &Owner,
        leftovers: Vec<Leftover>,
    ) -> Result<Vec<Resource>, NotKept> {
        let limits = &self.limits;
        if limits.session_bytes == 0 {
            return Err(NotKept::Off);
        }
        let bytes: u64 = leftovers.iter().map(|l| l.content.len() as u64).sum();
        let files = leftovers.len();
        if bytes > limits.session_bytes || files > limits.session_files {
            return Err(NotKept::OverSession {
                bytes,
                files,
                max_bytes: limits.session_bytes,
                max_files: limits.session_files,
            });
        }
        let id = uri::run_id().map_err(NotKept::NoRandomness)?;
        let resources: Vec<Resource> = leftovers
            .into_iter()
            .map(|leftover| uri::resource(&id, leftover))
            .collect();
        let mut kept = self.lock();
        kept.expire(limits);
        // Room in the owner's session, then in its tenant's share: which of their oldest
        // runs go, and what they free; nothing goes unless the run is then kept.
        let (mut held, mut count) = kept.held_by(owner);
        let (mut leaving, mut freed) = (Vec::new(), 0);
        for (i, run) in kept.runs.iter().enumerate() {
            if held + bytes <= limits.session_bytes && count + files <= limits.session_files {
                break;
            }
            if &run.owner == owner {
                (held, count) = (held - run.bytes, count - run.resources.len());
                leaving.push(i);
                freed += run.bytes;
            }
        }
        let mut tenant_held = kept.held_by_tenant(&owner.tenant) - freed;
        for (i, run) in kept.runs.iter().enumerate() {
            if tenant_held + bytes <= limits.tenant_bytes {
                break;
            }
            if run.owner.tenant == owner.tenant && !leaving.contains(&i) {
                tenant_held -= run.bytes;
                leaving.push(i);
                freed += run.bytes;
            }
        }
        if kept.bytes - freed + bytes > limits.total_bytes {
            return Err(NotKept::ServerFull {
                max_bytes: limits.total_bytes,
            });
        }
        leaving.sort_unstable();
        for i in leaving.into_iter().rev() {
            if let Some(run) = kept.runs.remove(i) {
                kept.bytes -= run.bytes;
            }
        }
        kept.bytes += bytes;
        kept.runs.push_back(RunFiles {
            id,
            owner: owner.clone(),
            at: Instant::now(),
            resources: resources.clone(),
            bytes,
        });
        Ok(resources)
    }

    /// `owner`'s resources, oldest run first.
    pub(crate) fn list(&self, owner: &Owner) -> Vec<Resource> {
        let mut kept = self.lock();
        kept.expire(&self.limits);
        let runs = kept.runs.iter().filter(|run| &run.owner == owner);
        runs.flat_map(|run| run.resources.iter().cloned()).collect()
    }

    /// The resource at `uri`, if `owner` kept it and it has not gone.
    pub(crate) fn read(&self, owner: &Owner, uri: &str) -> Result<Resource, NotFound> {
        let not_found = || NotFound { uri: cut(uri, 200) };
        let Some(id) = uri::run_id_of(uri) else {
            return Err(not_found());
        };
        let mut kept = self.lock();
        kept.expire(&self.limits);
        let run = kept
            .runs
            .iter()
            .find(|run| run.id == id && &run.owner == owner);
        let found = run.and_then(|run| run.resources.iter().find(|r| r.uri == uri));
        found.cloned().ok_or_else(not_found)
    }

    /// Let go of every run kept through MCP session `connection` (it ended); how many.
    pub(crate) fn forget_connection(&self, connection: u64) -> usize {
        let mut kept = self.lock();
        let before = kept.runs.len();
        kept.runs.retain(|run| run.owner.connection != connection);
        kept.bytes = kept.runs.iter().map(|run| run.bytes).sum();
        before - kept.runs.len()
    }
}

impl Runs {
    /// Drop the runs kept longer than the time to live.
    fn expire(&mut self, limits: &ResourceLimits) {
        while let Some(run) = self.runs.front() {
            if run.at.elapsed() <= limits.ttl {
                break;
            }
            self.bytes -= run.bytes;
            self.runs.pop_front();
        }
    }

    /// Bytes and files `owner` holds.
    fn held_by(&self, owner: &Owner) -> (u64, usize) {
        let runs = self.runs.iter().filter(|run| &run.owner == owner);
        runs.fold((0, 0), |(bytes, files), run| {
            (bytes + run.bytes, files + run.resources.len())
        })
    }

    /// Bytes `tenant` holds, over all its MCP sessions.
    fn held_by_tenant(&self, tenant: &str) -> u64 {
        let runs = self.runs.iter().filter(|run| &*run.owner.tenant == tenant);
        runs.map(|run| run.bytes).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::super::uri::PREFIX;
    use super::super::LeftoverKind;
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    fn owner(tenant: &str, connection: u64) -> Owner {
        Owner {
            tenant: Arc::from(tenant),
            connection,
        }
    }

    fn file(path: &str, bytes: usize) -> Leftover {
        Leftover {
            kind: LeftoverKind::File(path.into()),
            mime_type: "application/octet-stream".into(),
            content: Arc::new(vec![7u8; bytes]),
        }
    }

    fn store(session_bytes: u64, session_files: usize, total_bytes: u64) -> ResourceStore {
        ResourceStore::new(ResourceLimits {
            session_bytes,
            session_files,
            total_bytes,
            tenant_bytes: total_bytes,
            ..ResourceLimits::default()
        })
    }

    #[test]
    fn uris_name_the_run_and_encode_odd_names() {
        let store = store(1000, 10, 1000);
        let a = owner("local", 0);
        let kept = store
            .keep(&a, vec![file("charts/a b#?%é.csv", 3), file("..", 1)])
            .expect("kept");
        let id = &kept[0].uri[PREFIX.len()..PREFIX.len() + 32];
        assert!(id
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_eq!(
            kept[0].uri,
            format!("{PREFIX}{id}/files/charts/a%20b%23%3F%25%C3%A9.csv")
        );
        assert_eq!(kept[0].name, "charts/a b#?%é.csv");
        assert_eq!(store.read(&a, &kept[0].uri).expect("read").size(), 3);
        let other = store.keep(&a, vec![file("x", 1)]).expect("kept");
        assert_ne!(
            other[0].uri[..PREFIX.len() + 32],
            kept[0].uri[..PREFIX.len() + 32]
        );
    }

    #[test]
    fn path_traversal_in_a_uri_names_nothing() {
        let store = store(1000, 10, 1000);
        let a = owner("local", 0);
        let kept = store.keep(&a, vec![file("data/x.txt", 3)]).expect("kept");
        let base = &kept[0].uri[..PREFIX.len() + 32];
        for uri in [
            format!("{base}/files/data/../data/x.txt"),
            format!("{base}/files/data/%2e%2e/data/x.txt"),
            format!("{base}/files/data/./x.txt"),
            format!("{base}/files//data/x.txt"),
            format!("{base}/files/data%2Fx.txt"),
            format!("{base}/files/%2Fetc%2Fpasswd"),
            format!("{base}/../{}", &base[PREFIX.len()..]),
            "sandpy://runs/../../etc/passwd".to_string(),
            "file:///output/data/x.txt".to_string(),
            "/etc/passwd".to_string(),
            String::new(),
            format!("{base}/files/data/x.txt\0"),
            kept[0].uri.to_uppercase(),
        ] {
            assert_eq!(
                store.read(&a, &uri).map(|r| r.uri),
                Err(NotFound {
                    uri: cut(&uri, 200)
                }),
                "{uri}"
            );
        }
        assert!(store.read(&a, &kept[0].uri).is_ok(), "the real one reads");
    }

    #[test]
    fn another_owner_is_answered_as_for_a_uri_nobody_has() {
        let store = store(1000, 10, 1000);
        let (a, b, a_elsewhere) = (
            owner("tenant:a", 1),
            owner("tenant:b", 1),
            owner("tenant:a", 2),
        );
        let kept = store.keep(&a, vec![file("secret.txt", 3)]).expect("kept");
        let missing = kept[0].uri.replace("secret", "nothing");
        for who in [&b, &a_elsewhere] {
            let refused = store.read(who, &kept[0].uri).unwrap_err();
            let absent = store.read(who, &missing).unwrap_err();
            assert_eq!(
                refused.to_string().replace("secret", "nothing"),
                absent.to_string()
            );
            assert!(store.list(who).is_empty());
        }
        assert_eq!(store.list(&a).len(), 1);
    }

    #[test]
    fn a_session_over_its_bytes_or_files_loses_its_oldest_runs_first() {
        let store = store(10, 3, 100);
        let (a, b) = (owner("a", 1), owner("b", 2));
        let first = store.keep(&a, vec![file("1", 4)]).expect("kept");
        store.keep(&b, vec![file("b", 9)]).expect("kept");
        let second = store.keep(&a, vec![file("2", 4)]).expect("kept");
        let third = store.keep(&a, vec![file("3", 4)]).expect("kept");
        assert!(store.read(&a, &first[0].uri).is_err(), "the oldest went");
        assert!(store.read(&a, &second[0].uri).is_ok());
        assert!(store.read(&a, &third[0].uri).is_ok());
        assert_eq!(store.list(&b).len(), 1, "another's runs are untouched");
        store
            .keep(&a, vec![file("4", 1), file("5", 1)])
            .expect("kept");
        let names: Vec<String> = store.list(&a).into_iter().map(|r| r.name).collect();
        assert_eq!(names, ["3", "4", "5"], "three files at most");
    }

    #[test]
    fn a_run_over_a_session_or_the_server_is_refused_before_it_is_kept() {
        let store = store(10, 2, 15);
        let (a, b) = (owner("a", 1), owner("b", 2));
        assert_eq!(
            store.keep(&a, vec![file("big", 11)]).unwrap_err(),
            NotKept::OverSession {
                bytes: 11,
                files: 1,
                max_bytes: 10,
                max_files: 2
            }
        );
        let many = vec![file("1", 1), file("2", 1), file("3", 1)];
        assert!(matches!(
            store.keep(&a, many),
            Err(NotKept::OverSession { files: 3, .. })
        ));
        store.keep(&a, vec![file("a", 10)]).expect("kept");
        assert_eq!(
            store.keep(&b, vec![file("b", 6)]).unwrap_err(),
            NotKept::ServerFull { max_bytes: 15 }
        );
        assert!(store.list(&b).is_empty());
        assert_eq!(
            store.list(&a).len(),
            1,
            "a client never loses files to another's"
        );
        store.keep(&b, vec![file("b", 4)]).expect("kept");
        assert_eq!(
            store.keep(&b, vec![file("b2", 7)]).unwrap_err(),
            NotKept::ServerFull { max_bytes: 15 },
            "no room in the server's bytes even with B's oldest run gone"
        );
        let names: Vec<String> = store.list(&b).into_iter().map(|r| r.name).collect();
        assert_eq!(names, ["b"], "a refused run takes nothing of its owner's");
        assert_eq!(store.forget_connection(1), 1);
        store
            .keep(&b, vec![file("b2", 7)])
            .expect("room once A's session ended");
        let names: Vec<String> = store.list(&b).into_iter().map(|r| r.name).collect();
        assert_eq!(names, ["b2"], "B's oldest went for it");
    }

    #[test]
    fn runs_expire_and_keeping_can_be_off() {
        let store = ResourceStore::new(ResourceLimits {
            ttl: Duration::from_millis(30),
            ..ResourceLimits::default()
        });
        let a = owner("a", 1);
        let kept = store.keep(&a, vec![file("x", 1)]).expect("kept");
        std::thread::sleep(Duration::from_millis(60));
        assert!(store.read(&a, &kept[0].uri).is_err());
        assert!(store.list(&a).is_empty());
        let off = store_off();
        assert_eq!(off.keep(&a, vec![file("x", 1)]).unwrap_err(), NotKept::Off);
    }

    #[test]
    fn a_tenant_at_its_share_loses_its_own_oldest_files_not_anothers() {
        let store = ResourceStore::new(ResourceLimits {
            session_bytes: 10,
            session_files: 10,
            total_bytes: 20,
            tenant_bytes: 10,
            ..ResourceLimits::default()
        });
        let (a1, a2, b) = (owner("a", 1), owner("a", 2), owner("b", 3));
        store.keep(&a1, vec![file("a1", 6)]).expect("kept");
        store.keep(&a2, vec![file("a2", 6)]).expect("kept");
        let names: Vec<String> = store.list(&a1).into_iter().map(|r| r.name).collect();
        assert!(
            names.is_empty(),
            "A's oldest run went for its newest: {names:?}"
        );
        assert_eq!(store.list(&a2).len(), 1);
        store
            .keep(&a1, vec![file("a3", 4)])
            .expect("kept within A's share");
        store
            .keep(&b, vec![file("b", 10)])
            .expect("B keeps a whole session's worth beside A at its share");
        assert_eq!(store.list(&b).len(), 1);
    }

    fn store_off() -> ResourceStore {
        store(0, 10, 10)
    }
}
