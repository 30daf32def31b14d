//! Sessions: one interpreter's state kept across runs ([`Session`]), and a set of them by
//! owner and id for servers ([`Sessions`]), with the caps the set and each owner meet.
//!
//! - `session`: one session, its cells, journal, snapshots and errors.
//! - `registry`: [`Sessions`] by [`Tenant`] and id, with the idle reaper.
//! - `limits`: [`SessionLimits`], [`TenantQuota`] and the [`SessionCap`] a refusal names.

mod limits;
mod registry;
mod session;

pub use limits::{SessionCap, SessionLimits, TenantQuota};
pub use registry::{Sessions, Tenant, TenantSessions};
pub use session::{Cell, Session, SessionError, SessionInfo, SessionSnapshot};
