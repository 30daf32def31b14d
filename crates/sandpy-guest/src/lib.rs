//! sandpy's built-in guest: the WebAssembly component that CPython 3.14 runs in, made from
//! `guest/` by this crate's build script (the vendored componentize-py, ~1 minute), and what
//! `sandpy build` needs to make others like it.
//!
//! The `sandpy` library embeds no guest, so that it compiles while this one is made; its
//! front ends give it this one in [`sandpy::Config::guest`]:
//!
//! ```no_run
//! # async fn demo() -> Result<(), sandpy::Error> {
//! let config = sandpy::Config {
//!     guest: Some(sandpy_guest::GUEST),
//!     ..sandpy::Config::default()
//! };
//! let sandbox = sandpy::Sandbox::new(config)?;
//! let execution = sandbox.run("print(6 * 7)", &sandpy::Limits::default()).await;
//! assert_eq!(execution.stdout, "42\n");
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

use std::path::Path;

include!("../componentize.rs");
include!(concat!(env!("OUT_DIR"), "/c_stack.rs"));
include!(concat!(env!("OUT_DIR"), "/guest_files.rs"));

/// The guest component built from `guest/` (or `SANDPY_COMPONENT`, see build.rs), with
/// its C stack and sources, and componentize-py to build runtimes with more packages.
pub static GUEST: sandpy::Guest = sandpy::Guest {
    component: include_bytes!(env!("SANDPY_COMPONENT_PATH")),
    sha256: env!("SANDPY_COMPONENT_SHA256"),
    c_stack_bytes: C_STACK_BYTES,
    sources: GUEST_FILES,
    componentize,
};

/// [`sandpy::Guest::componentize`]: the guest's sources in `sources` and the packages in
/// `site`, pre-initialised into `output` with this guest's C stack.
fn componentize(sources: &Path, site: &Path, output: &Path) -> Result<(), sandpy::Cause> {
    let stack_bytes = u32::try_from(C_STACK_BYTES).unwrap_or(u32::MAX);
    componentize_guest(sources, site, output, stack_bytes).map_err(sandpy::Cause::from)
}
