//! The runner's side: the lock that makes one runner per key ([`Runner::claim`]), the
//! socket it serves until idle ([`Runner::serve`]), and each connection's exchange.

use super::wire::{self, Answer, Request, GO, TAKEN};
use super::{Error, Key};
use nix::fcntl::{Flock, FlockArg};
use sandpy::settings::Resolved;
use sandpy::{OutputSink, RunOptions, Sandbox, Stream};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How long a runner waits for a client's request and its go-ahead.
const REQUEST_WAIT: Duration = Duration::from_secs(10);

/// A runner that holds its key: the lock that makes it the only one, and its socket.
pub(crate) struct Runner {
    key: Key,
    socket: PathBuf,
    lock_path: PathBuf,
    _lock: Flock<File>,
}

impl Runner {
    /// Take `key`'s lock: `None` when another runner holds it. Call before loading the
    /// sandbox, so that runners started at once by several commands load it only once.
    pub(crate) fn claim(key: Key) -> Result<Option<Runner>, Error> {
        Runner::claim_in(&super::socket_folder()?, key)
    }

    /// [`Runner::claim`] with the socket in `folder`.
    fn claim_in(folder: &Path, key: Key) -> Result<Option<Runner>, Error> {
        let socket = key.socket_in(folder)?;
        let lock_path = socket.with_extension("lock");
        let io = |source| Error::Io {
            path: lock_path.clone(),
            source,
        };
        // The lock file goes with its runner (removed while still locked); a runner that
        // locked a file just removed holds nothing, and tries again.
        for _ in 0..8 {
            let file = OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .mode(0o600)
                .open(&lock_path)
                .map_err(io)?;
            let lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(lock) => lock,
                Err((_, nix::errno::Errno::EWOULDBLOCK)) => return Ok(None),
                Err((_, errno)) => return Err(io(errno.into())),
            };
            let locked = lock.metadata().map_err(io)?;
            match std::fs::metadata(&lock_path) {
                Ok(now) if now.ino() == locked.ino() && now.dev() == locked.dev() => {
                    return Ok(Some(Runner {
                        key,
                        socket,
                        lock_path,
                        _lock: lock,
                    }));
                }
                _ => continue,
            }
        }
        Ok(None)
    }

    /// Serve runs with `sandbox` and the command's `resolved` settings until no run has
    /// come or been going for `idle`; then remove the socket and the lock file.
    pub(crate) async fn serve(
        self,
        sandbox: Sandbox,
        resolved: Resolved,
        idle: Duration,
    ) -> Result<(), Error> {
        let io = |source| Error::Io {
            path: self.socket.clone(),
            source,
        };
        // A socket left by a runner that died: this one holds the lock now.
        match std::fs::remove_file(&self.socket) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(e)),
            _ => {}
        }
        let listener = tokio::net::UnixListener::bind(&self.socket).map_err(io)?;
        let uid = nix::unistd::getuid().as_raw();
        let shared = Arc::new((sandbox, resolved, self.key.clone()));
        let room = Arc::new(Semaphore::new(wire::MAX_FRAME_BYTES as usize));
        let running = Arc::new(AtomicUsize::new(0));
        loop {
            let accepted = tokio::time::timeout(idle, listener.accept()).await;
            let stream = match accepted {
                Err(_) if running.load(Ordering::SeqCst) == 0 => break,
                Err(_) => continue,
                Ok(Err(e)) => {
                    tracing::warn!("warm runner: cannot accept a client: {e}");
                    continue;
                }
                Ok(Ok((stream, _))) => stream,
            };
            match stream.peer_cred() {
                Ok(peer) if peer.uid() == uid => {}
                _ => continue,
            }
            let (shared, room) = (shared.clone(), room.clone());
            let running = running.clone();
            running.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let (sandbox, resolved, key) = &*shared;
                if let Err(e) = serve_one(stream, sandbox, resolved, key, room).await {
                    tracing::debug!("warm runner: a client's run ended early: {e}");
                }
                running.fetch_sub(1, Ordering::SeqCst);
            });
        }
        drop(listener);
        let _ = std::fs::remove_file(&self.socket);
        let _ = std::fs::remove_file(&self.lock_path);
        Ok(())
    }
}

/// One connection: receive the request, run it (stopped when the client leaves), answer.
async fn serve_one(
    mut stream: UnixStream,
    sandbox: &Sandbox,
    resolved: &Resolved,
    key: &Key,
    room: Arc<Semaphore>,
) -> std::io::Result<()> {
    let (request, _room) = receive(&mut stream, key, room, REQUEST_WAIT).await?;
    // The run's writes, as they happen, for the client (bounded by the run's output cap).
    let (writes, mut written) = tokio::sync::mpsc::unbounded_channel::<(Stream, Vec<u8>)>();
    let on_output: Option<OutputSink> = request.stream_output.then(|| {
        Arc::new(move |stream, bytes: &[u8]| {
            let _ = writes.send((stream, bytes.to_vec()));
        }) as OutputSink
    });
    let stdin = request
        .stdin()
        .map_err(|_| invalid("stdin is not base64"))?;
    let options = RunOptions {
        on_output,
        limit_overrides: request.limit_overrides,
        stdin,
        filename: request.filename,
        allowed_tools: request.allowed_tools,
        files: request.files,
        mounts: request.mounts,
        ..resolved.run_options()
    };
    let run = async {
        match &request.call {
            Some(call) => {
                sandbox
                    .call_function(&request.code, &call.function, &call.arguments, &options)
                    .await
            }
            None => sandbox.run_with(&request.code, &options).await,
        }
    };
    // A command that ended (Ctrl-C, killed) closes its end: its run stops there, as it
    // would have with the command's process, instead of running on to its time limit.
    let (mut reader, mut writer) = stream.split();
    let mut extra = [0u8; 1];
    tokio::pin!(run);
    let execution = loop {
        tokio::select! {
            execution = &mut run => break execution,
            Some((which, bytes)) = written.recv() => {
                send(&mut writer, &Answer::output(which, &bytes)).await?;
            }
            _ = reader.read(&mut extra) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::ConnectionAborted,
                    "the command left during its run",
                ));
            }
        }
    };
    // What the run wrote last, then its end.
    while let Ok((which, bytes)) = written.try_recv() {
        send(&mut writer, &Answer::output(which, &bytes)).await?;
    }
    send(&mut writer, &Answer::Done(Box::new(execution))).await?;
    writer.flush().await
}

/// Read a request for `key` within `wait` (bounded, and held only with `room` for it
/// among the requests held at once), take it, and wait for the go-ahead.
async fn receive(
    stream: &mut UnixStream,
    key: &Key,
    room: Arc<Semaphore>,
    wait: Duration,
) -> std::io::Result<(Request, OwnedSemaphorePermit)> {
    tokio::time::timeout(wait, async {
        let length = wire::read_length_async(stream).await?;
        let held = u32::try_from(length).map_err(|_| invalid("request over the size limit"))?;
        let room = room
            .acquire_many_owned(held)
            .await
            .map_err(|_| invalid("the runner is closing"))?;
        let body = wire::read_body_async(stream, length).await?;
        let request: Request = serde_json::from_slice(&body)?;
        if request.key != *key {
            return Err(invalid("request for another runner"));
        }
        stream.write_all(&[TAKEN]).await?;
        if stream.read_u8().await? != GO {
            return Err(invalid("no go-ahead"));
        }
        Ok((request, room))
    })
    .await
    .map_err(|_| invalid("request too slow"))?
}

/// One answer, as a frame of JSON.
async fn send(
    writer: &mut (impl tokio::io::AsyncWrite + Unpin),
    answer: &Answer,
) -> std::io::Result<()> {
    let body = serde_json::to_vec(answer)?;
    Ok(wire::write_async(writer, &body).await?)
}

fn invalid(why: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, why.to_string())
}

/// Close every file descriptor above stderr: a runner started by a command must not keep
/// its parent's pipes open (a caller waiting for their end would wait for the runner).
pub(crate) fn close_inherited_files() {
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let fds: Vec<i32> = entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&fd| fd > 2)
        .collect();
    for fd in fds {
        // Called at the start of the runner, before it opens anything it owns: the
        // descriptors are inherited ones (and the listing's own, already closed).
        let _ = nix::unistd::close(fd);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One runner per key: a second claim gets nothing while the first holds the lock,
    /// and gets the key once the first has let go.
    #[test]
    fn a_key_has_one_runner_at_a_time() {
        let temp = tempfile::tempdir().expect("a temp folder");
        let key = Key::from_text("k");
        let first = Runner::claim_in(temp.path(), key.clone()).expect("claim");
        let first = first.expect("the first claim holds the key");
        assert!(Runner::claim_in(temp.path(), key.clone())
            .expect("claim")
            .is_none());
        let other = Runner::claim_in(temp.path(), Key::from_text("other")).expect("claim");
        assert!(other.is_some(), "another key has its own runner");
        drop(first);
        assert!(Runner::claim_in(temp.path(), key).expect("claim").is_some());
    }

    fn request(key: &str) -> Vec<u8> {
        let request = Request::new(Key::from_text(key), "pass", None, &RunOptions::default());
        serde_json::to_vec(&request).expect("json")
    }

    fn room() -> Arc<Semaphore> {
        Arc::new(Semaphore::new(wire::MAX_FRAME_BYTES as usize))
    }

    #[tokio::test]
    async fn a_request_is_taken_then_run_on_the_go_ahead() {
        let (mut server, mut client) = UnixStream::pair().expect("a socket pair");
        let body = request("k");
        let sent = body.len();
        let client = tokio::spawn(async move {
            wire::write_async(&mut client, &body).await.expect("send");
            assert_eq!(client.read_u8().await.expect("answer"), TAKEN);
            client.write_all(&[GO]).await.expect("go");
            client
        });
        let received = receive(&mut server, &Key::from_text("k"), room(), REQUEST_WAIT).await;
        let (request, held) = received.expect("received");
        assert_eq!(request.code, "pass");
        assert_eq!(
            held.num_permits(),
            sent,
            "room held for the request while it runs"
        );
        client.await.expect("the client");
    }

    /// What a runner refuses, each before it takes the run: a request over the bound
    /// (its body never read), one cut short, one for another key, one that never comes,
    /// and a taken one without the go-ahead.
    #[tokio::test]
    async fn a_runner_refuses_what_is_not_a_whole_request_for_its_key() {
        let wait = Duration::from_millis(300);
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            (
                "over the bound",
                {
                    let mut bytes = (wire::MAX_FRAME_BYTES + 1).to_le_bytes().to_vec();
                    bytes.extend(request("k"));
                    bytes
                },
                "a frame of",
            ),
            (
                "cut short",
                {
                    let body = request("k");
                    let mut bytes = (body.len() as u64).to_le_bytes().to_vec();
                    bytes.extend(&body[..body.len() / 2]);
                    bytes
                },
                "ended after",
            ),
            (
                "another key",
                {
                    let body = request("other");
                    let mut bytes = (body.len() as u64).to_le_bytes().to_vec();
                    bytes.extend(body);
                    bytes
                },
                "another runner",
            ),
            ("nothing", Vec::new(), "too slow"),
            (
                "no go-ahead",
                {
                    let body = request("k");
                    let mut bytes = (body.len() as u64).to_le_bytes().to_vec();
                    bytes.extend(body);
                    bytes.push(b'?');
                    bytes
                },
                "no go-ahead",
            ),
        ];
        for (what, bytes, expected) in cases {
            let (mut server, mut client) = UnixStream::pair().expect("a socket pair");
            client.write_all(&bytes).await.expect("send");
            if what == "cut short" {
                client.shutdown().await.expect("close the client's end");
            }
            let refused = receive(&mut server, &Key::from_text("k"), room(), wait).await;
            let error = refused.err().unwrap_or_else(|| panic!("{what}: received"));
            assert!(error.to_string().contains(expected), "{what}: {error}");
            if what == "over the bound" {
                let mut unread = vec![0u8; bytes.len()];
                let n = server.read(&mut unread).await.expect("the rest");
                assert_eq!(n, bytes.len() - 8, "{what}: the body was left unread");
            }
            drop(client);
        }
    }
}
