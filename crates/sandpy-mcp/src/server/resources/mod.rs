//! The files runs leave, kept for the client that ran them to read back as MCP resources
//! (`resources/list`, `resources/read`; `resource_link` items in the run's result).
//!
//! A run's `/output` files (and images of its rich outputs too big to send inline) are kept
//! in memory under a run id of 128 random bits, as `sandpy://runs/<run-id>/files/<path>`
//! and `sandpy://runs/<run-id>/outputs/<n>.<ext>`. Everything kept belongs to an [`Owner`]:
//! the tenant that ran the code and the MCP session it came through. A read names a URI
//! and is answered only from its owner's runs, by the URI exactly as it was handed out:
//! nothing is ever looked up on a filesystem, so a path in a URI (`..`, `%2e%2e`, an
//! absolute path, a link) names nothing, and a URI of someone else's run is answered as
//! one that never existed ([`NotFound`]).
//!
//! Bounds ([`sandpy::settings::ResourceLimits`]), each checked before anything is kept: a session's bytes
//! and files (its oldest runs go to make room; a run bigger than a whole session's room is
//! not kept), the server's bytes (a run that would go past them is not kept: a client
//! never loses its files to make room for another's), and a time to live. A session's
//! runs go when it ends ([`ResourceStore::forget_connection`]).
//!
//! The bytes are those of the [`sandpy::Execution`], which the host read without following
//! links (both tiers); names are UTF-8 paths relative to `/output`, percent-encoded in the
//! URI.
//!
//! Its parts: [`store`] keeps the runs within the bounds; [`uri`] makes and reads the URIs
//! (run ids, percent-encoding); [`mcp`] answers `resources/list` and `resources/read` and
//! shows a kept file as MCP does.

mod mcp;
mod store;
mod uri;

pub(crate) use mcp::{list, read};
use std::sync::Arc;
pub(crate) use store::ResourceStore;

/// Who kept a run's files, and alone may read them: the tenant that ran the code and the
/// MCP session (connection) it came through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Owner {
    /// The tenant's id (`local`, `client-<n>`, `tenant:<name>`, `oauth:<claim>`).
    pub(crate) tenant: Arc<str>,
    /// The handler's connection number (one per MCP session; `u64::MAX` for stdio).
    pub(crate) connection: u64,
}

/// One thing a run left, to be kept.
pub(crate) struct Leftover {
    /// Where it is in the run: a `/output` file by its path, or a rich output by number.
    pub(crate) kind: LeftoverKind,
    /// Its mime type.
    pub(crate) mime_type: String,
    /// Its bytes.
    pub(crate) content: Arc<Vec<u8>>,
}

/// Where a [`Leftover`] comes from.
pub(crate) enum LeftoverKind {
    /// A file, by its path relative to `/output`.
    File(String),
    /// The `n`th rich output (from 1), with the extension of its format.
    Output(usize, &'static str),
}

/// A kept file as a client sees it: the URI to read it by and what it is.
#[derive(Debug, Clone)]
pub(crate) struct Resource {
    /// `sandpy://runs/<run-id>/...`.
    pub(crate) uri: String,
    /// Its name: the path under `/output`, or `output <n>`.
    pub(crate) name: String,
    /// Its mime type.
    pub(crate) mime_type: String,
    /// Its bytes.
    pub(crate) content: Arc<Vec<u8>>,
}

impl Resource {
    /// Its size in bytes.
    pub(crate) fn size(&self) -> u64 {
        self.content.len() as u64
    }
}

/// Why a run's files were not kept; the message says which bound and its key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum NotKept {
    /// Keeping is off (`sandpy.resources.session_mb` is 0).
    #[error("keeping files is off on this server (sandpy.resources.session_mb is 0)")]
    Off,
    /// The run's files alone are more than one session may keep.
    #[error("the run's files ({bytes} bytes, {files} files) are more than one MCP session may keep ({max_bytes} bytes, {max_files} files: sandpy.resources.session_mb, session_files)")]
    OverSession {
        /// The run's bytes.
        bytes: u64,
        /// The run's files.
        files: usize,
        /// The session's byte bound.
        max_bytes: u64,
        /// The session's file bound.
        max_files: usize,
    },
    /// The server keeps as much as it may, for its clients together.
    #[error("the server keeps as many files as it may for all its clients ({max_bytes} bytes: sandpy.resources.total_mb); read or let go of earlier ones (they expire, and go when their MCP session ends)")]
    ServerFull {
        /// The server's byte bound.
        max_bytes: u64,
    },
    /// No random run id could be made.
    #[error("no random run id could be made: {0}")]
    NoRandomness(getrandom::Error),
}

/// A URI that names nothing the caller may read: missing, expired, someone else's or
/// malformed alike, so that an answer never tells whether another's run exists.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("resource not found: {uri}")]
pub(crate) struct NotFound {
    /// The URI asked for, cut to 200 bytes.
    pub(crate) uri: String,
}
