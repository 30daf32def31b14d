//! The warm runner: a background process of the user's that keeps the runtime loaded and
//! runs one-shot commands' programs for them over a Unix socket.
//!
//! A `sandpy run` process that loads the compiled runtime itself spends most of its time
//! on that load and on the first touch of its pages (docs/dev/performance.md, "One-shot
//! runs"); one that hands its run to a warm runner starts like a small program. Every run
//! still gets a fresh instance: the runner holds only the compiled code, as a server does.
//!
//! One runner serves one [`Key`] (`key.rs`): the binary, the working folder, the resolved
//! settings and the environment they were read from, so that a run is served as its
//! command would have run it. The socket is in a folder only the user can enter
//! ([`socket_folder`]), the runner answers only its own user (peer credentials), and it
//! removes its socket and exits when idle.
//!
//! The exchange (`wire.rs`), one run per connection: the client (`client.rs`) sends its
//! [`Request`] as a frame (8-byte little-endian length, then JSON); the runner
//! (`server.rs`) answers one byte if it takes it; the client answers one byte to start
//! it, so that a client that gave up waiting never leaves a run behind that it then runs
//! again itself; the runner sends the run's output as it is written (one frame per write,
//! when the request asks for it) and then the [`sandpy::Execution`], each a frame.

mod client;
mod key;
mod server;
mod wire;

pub(crate) use client::{run, served, start, Usage};
pub(crate) use key::Key;
pub(crate) use server::{close_inherited_files, Runner};
pub(crate) use wire::{Call, Request, MAX_FRAME_BYTES};

use std::path::{Path, PathBuf};

/// Why a run could not be handed to a warm runner, or its answer not read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum Error {
    /// No runner answered for this key (none running, or it did not take the run): the
    /// caller runs the program itself.
    #[error("no warm runner took the run")]
    NotTaken(#[source] std::io::Error),
    /// The socket folder is not this user's alone (another user owns it, can write in it,
    /// or put a link in its place): another user could answer for a runner.
    #[error(transparent)]
    UnsafeFolder(#[from] sandpy::files::FolderError),
    /// The request would be larger than [`MAX_FRAME_BYTES`]: run it in the process.
    #[error("the run's request is {bytes} bytes, over the warm runner's {MAX_FRAME_BYTES}")]
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

/// The user's folder for runner sockets: `$XDG_RUNTIME_DIR/sandpy`, else
/// `/tmp/sandpy-<uid>`; created `0700`, and refused unless it is a real folder of this
/// user that no one else can enter (another user could otherwise answer for a runner).
fn socket_folder() -> Result<PathBuf, Error> {
    let path = socket_folder_path();
    checked_folder(&path)?;
    Ok(path)
}

/// Where [`socket_folder`] is, whether or not it exists.
fn socket_folder_path() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        Some(base) if base.is_absolute() => base.join("sandpy"),
        _ => PathBuf::from(format!("/tmp/sandpy-{}", nix::unistd::getuid().as_raw())),
    }
}

/// Refuse `path` unless it is a real folder of this user's that no one else can enter
/// (made `0700` if missing; the rule of sandpy's scratch and cache folders, with which it
/// may share `/tmp/sandpy-<uid>`).
fn checked_folder(path: &Path) -> Result<(), Error> {
    sandpy::files::private_folder(path)?;
    Ok(())
}
