//! Errors of the sandbox itself (not of the Python program, see [`Status`](crate::Status)).

use std::path::PathBuf;

/// The sandbox could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The wasmtime engine rejected its configuration.
    #[error("cannot configure the WebAssembly engine: {0}")]
    Engine(String),
    /// The embedded guest component did not compile to native code.
    #[error("cannot compile the Python runtime: {0}")]
    Compile(String),
    /// The compiled runtime could not be linked with the host functions.
    #[error("cannot link the Python runtime: {0}")]
    Link(String),
    /// The compiled-code cache folder could not be used.
    #[error("cannot use the cache at `{path}`: {source}")]
    Cache {
        /// The cache file or folder.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// A runtime file given in [`Config::runtime`](crate::Config::runtime) is unusable.
    #[error("cannot load the runtime `{path}`: {message}")]
    Runtime {
        /// The component file.
        path: PathBuf,
        /// What failed.
        message: String,
    },
    /// Installing packages or building a runtime with them failed.
    #[error("{0}")]
    Packages(String),
}
