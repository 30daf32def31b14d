//! Errors of the sandbox itself (not of the Python program, see [`Status`](crate::Status)).

use std::path::PathBuf;

/// What went wrong underneath: kept whole so that callers can print the chain.
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The sandbox could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The wasmtime engine rejected its configuration.
    #[error("cannot configure the WebAssembly engine")]
    Engine(#[source] Cause),
    /// No guest component was given ([`Config::guest`](crate::Config::guest)): this crate
    /// embeds none; the `sandpy-guest` crate has the built-in one.
    #[error(
        "no guest component: set `Config::guest` (the built-in one is `sandpy_guest::GUEST`, \
         from the `sandpy-guest` crate)"
    )]
    NoGuest,
    /// The guest component did not compile to native code.
    #[error("cannot compile the Python runtime")]
    Compile(#[source] Cause),
    /// The compiled runtime could not be linked with the host functions.
    #[error("cannot link the Python runtime")]
    Link(#[source] Cause),
    /// The compiled-code cache folder could not be used.
    #[error("cannot use the cache at `{path}`")]
    Cache {
        /// The cache file or folder.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// A runtime file given in [`Config::runtime`](crate::Config::runtime) is unusable.
    #[error("cannot load the runtime `{path}`")]
    Runtime {
        /// The component file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// A folder sandpy keeps for itself (the scratch base, the cache) is not this user's
    /// alone: another user could change what runs see or what the host loads.
    #[error(transparent)]
    Folder(#[from] crate::host_paths::FolderError),
    /// Installing packages or building a runtime with them failed.
    #[error(transparent)]
    Packages(#[from] crate::packages::PackageError),
}

impl Error {
    /// A wasmtime failure as a [`Cause`], its context chain kept.
    pub(crate) fn cause(error: wasmtime::Error) -> Cause {
        error.into_boxed_dyn_error()
    }
}

/// `error` and its causes on one line, for a message a person reads.
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
