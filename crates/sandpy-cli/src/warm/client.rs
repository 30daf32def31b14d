//! A command's side: whether its run goes to a runner ([`Usage`]), handing it over
//! ([`run`]), and starting a runner for the next run ([`start`]).

use super::wire::{self, Answer, Call, Request, GO, TAKEN};
use super::{Error, Key};
use sandpy::settings::Resolved;
use sandpy::{Execution, OutputSink, RunOptions, Status};
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// How long a client waits for a runner to take its run before running it itself.
const TAKE_WAIT: Duration = Duration::from_secs(2);

/// What a run served by a runner logs at debug level (`SANDPY_LOG=sandpy=debug`).
const SERVED: &str = "served by the warm runner";

/// How a command uses the warm runner of its settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Usage {
    /// Never: the run is this process's (`--cold`, or what a runner cannot do for it).
    Never,
    /// When one is up (the default); none is started.
    IfUp,
    /// When one is up; else one is started for the next run (`--warm`).
    Start,
}

/// The execution of `code` (or `call` of it) with `options`, from the runner of the
/// settings' key (its output given to `options.on_output` as it is written); `None` when
/// the run is for this process (no usable runner: with [`Usage::Start`] one is started
/// with the settings `flags` for the next run). A runner lost during the run gives an
/// `internal_error`: the run may have had effects, so it is not run again here.
pub(crate) fn served(
    usage: Usage,
    resolved: &Resolved,
    flags: &[OsString],
    code: &str,
    call: Option<Call>,
    options: &RunOptions,
) -> Option<Execution> {
    if usage == Usage::Never {
        return None;
    }
    let key = match Key::of(resolved) {
        Ok(key) => key,
        Err(e) => {
            tracing::debug!("not using a warm runner: {:#}", anyhow::Error::from(e));
            return None;
        }
    };
    let request = Request::new(key, code, call, options);
    match run(&request, options.on_output.as_ref()) {
        Ok(execution) => {
            tracing::debug!("{SERVED}");
            Some(execution)
        }
        Err(Error::Lost(why)) => {
            let message = format!("the warm runner took the run, then its answer was lost: {why}");
            Some(Execution::refused(Status::InternalError, message))
        }
        Err(Error::NotTaken(why)) if usage == Usage::Start => {
            tracing::debug!("no warm runner took the run ({why}); starting one");
            if let Err(e) = start(&request.key, flags, None) {
                tracing::debug!("cannot start a warm runner: {e}");
            }
            None
        }
        Err(other) => {
            tracing::debug!("not using a warm runner: {:#}", anyhow::Error::from(other));
            None
        }
    }
}

/// Start `sandpy warm-runner` for `key` with the settings `flags` in the background
/// (leaving after `idle` without runs, else as `$SANDPY_WARM_IDLE_SECS` says): its own
/// process group (a terminal's Ctrl-C is for the command), no standard streams.
pub(crate) fn start(key: &Key, flags: &[OsString], idle: Option<Duration>) -> std::io::Result<()> {
    use std::os::unix::process::CommandExt;
    let mut command = Command::new(std::env::current_exe()?);
    if let Some(idle) = idle {
        command.env("SANDPY_WARM_IDLE_SECS", idle.as_secs().to_string());
    }
    command
        .args(["warm-runner", "--key", key.as_str()])
        .args(flags)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    // Not waited for: the runner outlives this command.
    command.spawn().map(drop)
}

/// Hand `request` to its key's runner and wait for the run's [`Execution`], giving its
/// output to `on_output` as it comes when the request streams it.
/// [`Error::NotTaken`] (and every error but [`Error::Lost`]) means the run did not
/// happen there: run it here. Nothing is created when no runner is up.
pub(crate) fn run(request: &Request, on_output: Option<&OutputSink>) -> Result<Execution, Error> {
    run_in(&super::socket_folder_path(), request, on_output)
}

/// [`run`] with the runner's socket in `folder`.
fn run_in(
    folder: &Path,
    request: &Request,
    on_output: Option<&OutputSink>,
) -> Result<Execution, Error> {
    let body = serde_json::to_vec(request).map_err(|e| Error::NotTaken(e.into()))?;
    let bytes = body.len() as u64;
    if bytes > wire::MAX_FRAME_BYTES {
        return Err(Error::TooLarge { bytes });
    }
    // A path no socket can have is refused before looking for a runner at it.
    let socket = request.key.socket_in(folder)?;
    if !folder.exists() {
        let none = std::io::Error::new(std::io::ErrorKind::NotFound, "no runner folder");
        return Err(Error::NotTaken(none));
    }
    super::checked_folder(folder)?;
    let mut stream = UnixStream::connect(socket).map_err(Error::NotTaken)?;
    let mut offer = || -> std::io::Result<()> {
        stream.set_read_timeout(Some(TAKE_WAIT))?;
        wire::write(&mut stream, &body)?;
        let mut taken = [0u8];
        stream.read_exact(&mut taken)?;
        if taken[0] != TAKEN {
            return Err(std::io::ErrorKind::InvalidData.into());
        }
        stream.write_all(&[GO])
    };
    offer().map_err(Error::NotTaken)?;
    let mut answer = || -> std::io::Result<Execution> {
        stream.set_read_timeout(None)?;
        loop {
            let body = wire::read(&mut stream)?;
            match serde_json::from_slice(&body)? {
                Answer::Done(execution) => return Ok(*execution),
                Answer::Output { stderr, base64 } => {
                    let (stream, bytes) =
                        Answer::decode_output(stderr, &base64).map_err(std::io::Error::other)?;
                    if let Some(sink) = on_output {
                        sink(stream, &bytes);
                    }
                }
            }
        }
    };
    answer().map_err(Error::Lost)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandpy::Stream;
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::net::UnixListener;
    use std::sync::{Arc, Mutex};
    use std::thread::JoinHandle;

    /// A private folder in a temp folder, and a request for a key.
    fn setup() -> (tempfile::TempDir, std::path::PathBuf, Request) {
        let temp = tempfile::tempdir().expect("a temp folder");
        let folder = temp.path().join("sockets");
        sandpy::files::private_folder(&folder).expect("a private folder");
        let options = RunOptions {
            on_output: Some(Arc::new(|_, _| {})),
            ..RunOptions::default()
        };
        let request = Request::new(Key::from_text("k"), "print('hi')", None, &options);
        (temp, folder, request)
    }

    /// A runner on `folder`'s socket for `request`, which answers one client with `script`
    /// (given the client's stream once the request is read) and returns what it saw.
    fn runner<T: Send + 'static>(
        folder: &Path,
        request: &Request,
        script: impl FnOnce(&mut UnixStream, Request) -> T + Send + 'static,
    ) -> JoinHandle<T> {
        let listener =
            UnixListener::bind(request.key.socket_in(folder).expect("path")).expect("bind");
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().expect("accept");
            let body = wire::read(&mut stream).expect("a request frame");
            let request = serde_json::from_slice(&body).expect("a request");
            script(&mut stream, request)
        })
    }

    fn take(stream: &mut UnixStream) {
        stream.write_all(&[TAKEN]).expect("take");
        let mut go = [0u8];
        stream.read_exact(&mut go).expect("go");
        assert_eq!(go[0], GO);
    }

    fn answer(stream: &mut UnixStream, answer: &Answer) {
        wire::write(stream, &serde_json::to_vec(answer).expect("json")).expect("answer");
    }

    #[test]
    fn a_run_is_handed_over_and_its_output_comes_as_it_is_written() {
        let (_temp, folder, request) = setup();
        let done = Execution::refused(Status::Error, "raised".into());
        let sent = done.clone();
        let runner = runner(&folder, &request, move |stream, request| {
            take(stream);
            answer(stream, &Answer::output(Stream::Stdout, b"hi\n"));
            answer(stream, &Answer::output(Stream::Stderr, b"\xffwarn"));
            answer(stream, &Answer::Done(Box::new(sent)));
            request
        });
        let written = Arc::new(Mutex::new(Vec::new()));
        let sink: OutputSink = {
            let written = written.clone();
            Arc::new(move |stream, bytes: &[u8]| {
                written.lock().expect("lock").push((stream, bytes.to_vec()));
            })
        };
        let execution = run_in(&folder, &request, Some(&sink)).expect("served");
        assert_eq!(execution, done);
        let seen = runner.join().expect("the runner");
        assert_eq!((seen.key, seen.code.as_str()), (request.key, "print('hi')"));
        assert!(seen.stream_output);
        assert_eq!(
            *written.lock().expect("lock"),
            [
                (Stream::Stdout, b"hi\n".to_vec()),
                (Stream::Stderr, b"\xffwarn".to_vec())
            ]
        );
    }

    #[test]
    fn without_a_runner_the_run_is_not_taken_and_nothing_is_made() {
        let (temp, folder, request) = setup();
        let none = run_in(&folder, &request, None);
        assert!(matches!(none, Err(Error::NotTaken(_))), "{none:?}");
        let missing = temp.path().join("missing");
        let none = run_in(&missing, &request, None);
        assert!(matches!(none, Err(Error::NotTaken(_))), "{none:?}");
        assert!(!missing.exists(), "no folder is made to look for a runner");
    }

    /// A runner that answers anything but its byte for "taken" leaves the run to the
    /// command, which then never says go: the run happens once, in the command.
    #[test]
    fn a_run_the_runner_does_not_take_is_the_commands() {
        let (_temp, folder, request) = setup();
        let runner = runner(&folder, &request, |stream, _| {
            stream.write_all(b"-").expect("refuse");
            let mut rest = Vec::new();
            stream.read_to_end(&mut rest).expect("the client's end");
            rest
        });
        let refused = run_in(&folder, &request, None);
        assert!(matches!(refused, Err(Error::NotTaken(_))), "{refused:?}");
        assert_eq!(runner.join().expect("the runner"), b"", "no go-ahead");
    }

    /// A runner that took the run and ended in the middle of a frame: the run is lost at
    /// once (it may have happened), not waited for.
    #[test]
    fn an_answer_cut_short_is_lost_not_awaited() {
        let (_temp, folder, request) = setup();
        let runner = runner(&folder, &request, |stream, _| {
            take(stream);
            stream.write_all(&100u64.to_le_bytes()).expect("header");
            stream.write_all(b"{\"done\":").expect("part of a body");
        });
        let lost = run_in(&folder, &request, None);
        runner.join().expect("the runner");
        match lost {
            Err(Error::Lost(e)) => assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof),
            other => panic!("expected a lost run: {other:?}"),
        }
    }

    /// A runner that announces an answer over the bound (and would send it) is read no
    /// further: the run is lost, and the client leaves while the runner still holds on.
    #[test]
    fn an_answer_over_the_bound_is_lost_unread() {
        let (_temp, folder, request) = setup();
        let runner = runner(&folder, &request, |stream, _| {
            take(stream);
            stream
                .write_all(&(wire::MAX_FRAME_BYTES + 1).to_le_bytes())
                .expect("header");
            let _ = stream.write_all(&[b' '; 4096]);
            let mut rest = Vec::new();
            let _ = stream.read_to_end(&mut rest);
        });
        let lost = run_in(&folder, &request, None);
        match lost {
            Err(Error::Lost(e)) => assert_eq!(e.kind(), std::io::ErrorKind::InvalidData),
            other => panic!("expected a lost run: {other:?}"),
        }
        runner.join().expect("the runner");
    }

    /// A socket folder another user could write in (so could put a runner of theirs in)
    /// is refused before anything is sent.
    #[test]
    fn a_folder_others_can_write_in_is_refused() {
        let (_temp, folder, request) = setup();
        let listener =
            UnixListener::bind(request.key.socket_in(&folder).expect("path")).expect("bind");
        std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let refused = run_in(&folder, &request, None);
        assert!(
            matches!(refused, Err(Error::UnsafeFolder(_))),
            "{refused:?}"
        );
        listener.set_nonblocking(true).expect("nonblocking");
        assert!(listener.accept().is_err(), "no client came");
    }
}
