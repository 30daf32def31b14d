//! The warm runner: a background process of the user's that keeps the runtime loaded and
//! runs one-shot commands' programs for them over a Unix socket.
//!
//! A `sandpy run` process that loads the compiled runtime itself spends most of its time
//! on that load and on the first touch of its pages (docs/dev/performance.md, "One-shot
//! runs"); one that hands its run to a warm runner starts like a small program. Every run
//! still gets a fresh instance: the runner holds only the compiled code, as a server does.
//!
//! One runner serves one [`WarmKey`]: the binary, the working folder, the resolved
//! settings and the environment they were read from, so that a run is served as its
//! command would have run it. The socket is in a folder only the user can enter, the
//! runner answers only its own user (peer credentials), and it removes its socket and
//! exits when idle.
//!
//! The exchange, one run per connection: the client sends its [`WarmRequest`] (a frame:
//! 8-byte little-endian length, then JSON); the runner answers one byte if it takes it;
//! the client answers one byte to start it, so that a client that gave up waiting never
//! leaves a run behind that it then runs again itself; the runner sends the run's output
//! as it is written (one frame per write, when the request asks for it) and then the
//! [`Execution`], each a frame.

use base64::Engine;
use nix::fcntl::{Flock, FlockArg};
use sandpy::files::{InputFile, Mount};
use sandpy::settings::Resolved;
use sandpy::{Execution, LimitOverrides, OutputSink, RunOptions, Sandbox, Stream};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Largest request or answer either side reads, and the most that the requests a runner
/// holds at once add up to (a request waits for room before it is read): the run's own
/// limits (output, files, code size) keep real ones far under it.
pub(crate) const MAX_MESSAGE_BYTES: u64 = 1 << 30;
/// How long a client waits for a runner to take its run before running it itself.
const TAKE_WAIT: Duration = Duration::from_secs(2);
/// How long a runner waits for a client's request and its go-ahead.
const REQUEST_WAIT: Duration = Duration::from_secs(10);
const TAKEN: u8 = b'+';
const GO: u8 = b'!';

/// Why a run could not be handed to a warm runner, or its answer not read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum WarmError {
    /// No runner answered for this key (none running, or it did not take the run): the
    /// caller runs the program itself.
    #[error("no warm runner took the run")]
    NotTaken(#[source] std::io::Error),
    /// The socket folder is not this user's alone (another user owns it, can write in it,
    /// or put a link in its place): another user could answer for a runner.
    #[error(transparent)]
    UnsafeFolder(#[from] sandpy::files::FolderError),
    /// The request would be larger than [`MAX_MESSAGE_BYTES`]: run it in the process.
    #[error("the run's request is {bytes} bytes, over the warm runner's {MAX_MESSAGE_BYTES}")]
    TooLarge {
        /// Its size.
        bytes: u64,
    },
    /// The runner took the run and then its answer was lost (it ended, or answered
    /// something unreadable): the run may have happened.
    #[error("the warm runner took the run, then its answer was lost")]
    Lost(#[source] std::io::Error),
    /// The folder, the lock or the socket could not be set up.
    #[error("cannot set up the warm runner at `{path}`")]
    Io {
        /// What was being set up.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
}

/// Variables of sandpy's that do not change how a run is served.
const NOT_SETTINGS: [&str; 4] = [
    "SANDPY_LOG",
    "SANDPY_WARM",
    "SANDPY_COLD",
    "SANDPY_WARM_IDLE_SECS",
];

/// Which runner may serve a run: equal keys mean equal binaries, working folders,
/// settings and environments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct WarmKey(String);

impl WarmKey {
    /// The key of a command run in this process with `resolved`.
    pub(crate) fn of(resolved: &Resolved) -> Result<WarmKey, WarmError> {
        let mut hash = Sha256::new();
        let exe = std::env::current_exe().map_err(|source| WarmError::Io {
            path: "/proc/self/exe".into(),
            source,
        })?;
        hash.update(identity(&exe).as_bytes());
        let cwd = std::env::current_dir().map_err(|source| WarmError::Io {
            path: ".".into(),
            source,
        })?;
        hash.update(cwd.as_os_str().as_encoded_bytes());
        // Resolved settings hold only ordered maps: their debug form is stable. It never
        // shows a secret's value, which the network's fingerprint covers.
        hash.update(format!("\0{resolved:?}\0").as_bytes());
        if let Some(network) = &resolved.settings.network {
            hash.update(network.fingerprint());
        }
        let mut vars: Vec<_> = std::env::vars_os()
            .filter(|(name, _)| {
                let name = name.to_string_lossy();
                (name.starts_with("SANDPY_") && !NOT_SETTINGS.contains(&&*name))
                    || ["HOME", "XDG_CACHE_HOME", "TMPDIR", "PATH"].contains(&&*name)
            })
            .collect();
        vars.sort();
        for (name, value) in vars {
            hash.update(name.as_encoded_bytes());
            hash.update(b"=");
            hash.update(value.as_encoded_bytes());
            hash.update(b"\0");
        }
        let runtime = resolved
            .settings
            .runtime
            .clone()
            .or_else(|| std::env::var_os("SANDPY_RUNTIME").map(PathBuf::from));
        if let Some(runtime) = runtime {
            hash.update(identity(&runtime).as_bytes());
        }
        let digest = hash.finalize();
        Ok(WarmKey(
            digest[..16].iter().map(|b| format!("{b:02x}")).collect(),
        ))
    }

    /// The key's text, as `sandpy` passes it to the runner it starts.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    fn socket(&self) -> Result<PathBuf, WarmError> {
        self.socket_in(socket_folder()?)
    }

    fn socket_in(&self, folder: PathBuf) -> Result<PathBuf, WarmError> {
        let path = folder.join(format!("{}.sock", self.0));
        // A socket's path holds at most 107 bytes (`sun_path`): refused here, not by
        // every runner started for it after loading its sandbox.
        if path.as_os_str().len() > 107 {
            return Err(WarmError::Io {
                path,
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "longer than a socket's path may be",
                ),
            });
        }
        Ok(path)
    }
}

/// A file's path, size and modification time: it changed when any of them did.
fn identity(path: &Path) -> String {
    let (size, modified) = std::fs::metadata(path)
        .map(|m| {
            let modified = m
                .modified()
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .unwrap_or_default();
            (m.len(), modified.as_nanos())
        })
        .unwrap_or_default();
    format!("{}\0{size}\0{modified}\0", path.display())
}

/// The user's folder for runner sockets: `$XDG_RUNTIME_DIR/sandpy`, else
/// `/tmp/sandpy-<uid>`; created `0700`, and refused unless it is a real folder of this
/// user that no one else can enter (another user could otherwise answer for a runner).
pub(crate) fn socket_folder() -> Result<PathBuf, WarmError> {
    checked_folder(socket_folder_path())
}

/// Where [`socket_folder`] is, whether or not it exists.
fn socket_folder_path() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        Some(base) if base.is_absolute() => base.join("sandpy"),
        _ => PathBuf::from(format!("/tmp/sandpy-{}", nix::unistd::getuid().as_raw())),
    }
}

/// `path`, if it is a real folder of this user's that no one else can enter (made `0700`
/// if missing; the rule of sandpy's scratch and cache folders, with which it may share
/// `/tmp/sandpy-<uid>`).
fn checked_folder(path: PathBuf) -> Result<PathBuf, WarmError> {
    sandpy::files::private_folder(&path)?;
    Ok(path)
}

/// One run as a command hands it over: the parts of [`RunOptions`] that are per run (the
/// rest comes from the runner's settings, equal to the command's by the key).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct WarmRequest {
    /// The runner this request is for.
    pub(crate) key: WarmKey,
    /// The program.
    pub(crate) code: String,
    /// A function of the program to call (`sandpy call`), instead of running it.
    pub(crate) call: Option<WarmCall>,
    /// [`RunOptions::filename`].
    pub(crate) filename: Option<String>,
    /// [`RunOptions::stdin`], base64 (empty: none).
    pub(crate) stdin_base64: String,
    /// [`RunOptions::limit_overrides`].
    pub(crate) limit_overrides: LimitOverrides,
    /// [`RunOptions::allowed_tools`].
    pub(crate) allowed_tools: Option<Vec<String>>,
    /// [`RunOptions::files`].
    pub(crate) files: Vec<InputFile>,
    /// [`RunOptions::mounts`].
    pub(crate) mounts: Vec<Mount>,
    /// Whether the runner sends the run's output as it is written (for a command that
    /// prints it so), besides the execution that holds it.
    #[serde(default)]
    pub(crate) stream_output: bool,
}

/// One frame of a runner's answer.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Answer {
    /// A write of the program's, as it happened (requests with `stream_output`).
    Output {
        /// Written to stderr (else stdout).
        stderr: bool,
        /// What was written, base64.
        base64: String,
    },
    /// The run's end.
    Done(Box<Execution>),
}

impl Answer {
    fn output(stream: Stream, bytes: &[u8]) -> Answer {
        Answer::Output {
            stderr: stream == Stream::Stderr,
            base64: BASE64.encode(bytes),
        }
    }
}

/// How the wire carries bytes.
const BASE64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

impl WarmRequest {
    /// The request for `code` (or `call` of it) with the per-run part of `options`.
    pub(crate) fn new(
        key: WarmKey,
        code: &str,
        call: Option<WarmCall>,
        options: &RunOptions,
    ) -> WarmRequest {
        WarmRequest {
            key,
            code: code.to_string(),
            call,
            filename: options.filename.clone(),
            stdin_base64: options
                .stdin
                .as_deref()
                .map(|stdin| BASE64.encode(stdin))
                .unwrap_or_default(),
            limit_overrides: options.limit_overrides.clone(),
            allowed_tools: options.allowed_tools.clone(),
            files: options.files.clone(),
            mounts: options.mounts.clone(),
            stream_output: options.on_output.is_some(),
        }
    }
}

/// A function call a request asks for, as [`Sandbox::call_function`] takes it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct WarmCall {
    /// The function's name.
    pub(crate) function: String,
    /// Its JSON arguments: a list (positional) or an object (keywords).
    pub(crate) arguments: serde_json::Value,
}

/// Hand `request` to its key's runner and wait for the run's [`Execution`], giving its
/// output to `on_output` as it comes when the request streams it.
/// [`WarmError::NotTaken`] (and every error but [`WarmError::Lost`]) means the run did not
/// happen there: run it here. Nothing is created when no runner is up.
pub(crate) fn run_warm(
    request: &WarmRequest,
    on_output: Option<&OutputSink>,
) -> Result<Execution, WarmError> {
    let body = serde_json::to_vec(request).map_err(|e| WarmError::NotTaken(e.into()))?;
    let bytes = body.len() as u64;
    if bytes > MAX_MESSAGE_BYTES {
        return Err(WarmError::TooLarge { bytes });
    }
    let folder = socket_folder_path();
    // A path no socket can have is refused before looking for a runner at it.
    let socket = request.key.socket_in(folder.clone())?;
    if !folder.exists() {
        let none = std::io::Error::new(std::io::ErrorKind::NotFound, "no runner folder");
        return Err(WarmError::NotTaken(none));
    }
    checked_folder(folder)?;
    let mut stream = UnixStream::connect(socket).map_err(WarmError::NotTaken)?;
    let mut offer = || -> std::io::Result<()> {
        stream.set_read_timeout(Some(TAKE_WAIT))?;
        stream.write_all(&bytes.to_le_bytes())?;
        stream.write_all(&body)?;
        let mut taken = [0u8];
        stream.read_exact(&mut taken)?;
        if taken[0] != TAKEN {
            return Err(std::io::ErrorKind::InvalidData.into());
        }
        stream.write_all(&[GO])
    };
    offer().map_err(WarmError::NotTaken)?;
    let mut answer = || -> std::io::Result<Execution> {
        stream.set_read_timeout(None)?;
        loop {
            let mut length = [0u8; 8];
            stream.read_exact(&mut length)?;
            let length = u64::from_le_bytes(length);
            if length > MAX_MESSAGE_BYTES {
                return Err(std::io::ErrorKind::InvalidData.into());
            }
            let mut body = Vec::new();
            (&mut stream).take(length).read_to_end(&mut body)?;
            match serde_json::from_slice(&body)? {
                Answer::Done(execution) => return Ok(*execution),
                Answer::Output { stderr, base64 } => {
                    let bytes = BASE64.decode(base64).map_err(std::io::Error::other)?;
                    let stream = if stderr {
                        Stream::Stderr
                    } else {
                        Stream::Stdout
                    };
                    if let Some(sink) = on_output {
                        sink(stream, &bytes);
                    }
                }
            }
        }
    };
    answer().map_err(WarmError::Lost)
}

/// A runner that holds its key: the lock that makes it the only one, and its socket.
pub(crate) struct WarmRunner {
    key: WarmKey,
    socket: PathBuf,
    lock_path: PathBuf,
    _lock: Flock<File>,
}

impl WarmRunner {
    /// Take `key`'s lock: `None` when another runner holds it. Call before loading the
    /// sandbox, so that runners started at once by several commands load it only once.
    pub(crate) fn claim(key: WarmKey) -> Result<Option<WarmRunner>, WarmError> {
        let socket = key.socket()?;
        let lock_path = socket.with_extension("lock");
        let io = |source| WarmError::Io {
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
                    return Ok(Some(WarmRunner {
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
    ) -> Result<(), WarmError> {
        let io = |source| WarmError::Io {
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
        let shared = std::sync::Arc::new((sandbox, resolved, self.key.clone()));
        let room = std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_MESSAGE_BYTES as usize));
        let running = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        loop {
            let accepted = tokio::time::timeout(idle, listener.accept()).await;
            let stream = match accepted {
                Err(_) if running.load(std::sync::atomic::Ordering::SeqCst) == 0 => break,
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
            running.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                let (sandbox, resolved, key) = &*shared;
                if let Err(e) = serve_one(stream, sandbox, resolved, key, room).await {
                    tracing::debug!("warm runner: a client's run ended early: {e}");
                }
                running.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            });
        }
        drop(listener);
        let _ = std::fs::remove_file(&self.socket);
        let _ = std::fs::remove_file(&self.lock_path);
        Ok(())
    }
}

/// One connection: read the request (bounded, and held only with `room` for it among the
/// requests held at once), take it, wait for the go-ahead, run it (stopped when the client
/// leaves), answer.
async fn serve_one(
    mut stream: tokio::net::UnixStream,
    sandbox: &Sandbox,
    resolved: &Resolved,
    key: &WarmKey,
    room: std::sync::Arc<tokio::sync::Semaphore>,
) -> std::io::Result<()> {
    let invalid = |why: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, why.to_string());
    let (request, _room) = tokio::time::timeout(REQUEST_WAIT, async {
        let length = stream.read_u64_le().await?;
        let held = u32::try_from(length)
            .ok()
            .filter(|&length| u64::from(length) <= MAX_MESSAGE_BYTES)
            .ok_or_else(|| invalid("request over the size limit"))?;
        let room = room
            .acquire_many_owned(held)
            .await
            .map_err(|_| invalid("the runner is closing"))?;
        let mut body = Vec::new();
        (&mut stream).take(length).read_to_end(&mut body).await?;
        if body.len() as u64 != length {
            return Err(invalid("request cut short"));
        }
        let request: WarmRequest = serde_json::from_slice(&body)?;
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
    .map_err(|_| invalid("request too slow"))??;
    // The run's writes, as they happen, for the client (bounded by the run's output cap).
    let (writes, mut written) = tokio::sync::mpsc::unbounded_channel::<(Stream, Vec<u8>)>();
    let on_output: Option<OutputSink> = request.stream_output.then(|| {
        std::sync::Arc::new(move |stream, bytes: &[u8]| {
            let _ = writes.send((stream, bytes.to_vec()));
        }) as OutputSink
    });
    let stdin = BASE64
        .decode(&request.stdin_base64)
        .map_err(|_| invalid("stdin is not base64"))?;
    let options = RunOptions {
        on_output,
        limit_overrides: request.limit_overrides,
        stdin: Some(stdin).filter(|stdin| !stdin.is_empty()),
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
                write_frame(&mut writer, &Answer::output(which, &bytes)).await?;
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
        write_frame(&mut writer, &Answer::output(which, &bytes)).await?;
    }
    write_frame(&mut writer, &Answer::Done(Box::new(execution))).await?;
    writer.flush().await
}

/// One frame: its length, then its JSON.
async fn write_frame(
    writer: &mut (impl tokio::io::AsyncWrite + Unpin),
    answer: &Answer,
) -> std::io::Result<()> {
    let body = serde_json::to_vec(answer)?;
    writer.write_all(&(body.len() as u64).to_le_bytes()).await?;
    writer.write_all(&body).await
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
