//! Where an instance takes its leases: Redis in production ([`super::RedisLeases`]),
//! an in-memory fleet in tests on tokio's paused clock.

use std::future::Future;

use crate::limits::{Grant, Plan};

/// The fleet's buckets, as one instance sees them.
pub trait LeaseStore: Send + Sync + 'static {
    /// Gives back and takes permits for every bucket of `plan` at once, stamps this
    /// instance live, and answers what was granted and how many instances are live.
    /// An error or no answer leaves the instance refilling itself (see
    /// [`super::run`]); a lease whose answer was lost may have taken permits, which
    /// are then lost to the fleet for that period (the rate dips, never rises).
    fn lease(&self, plan: &Plan) -> impl Future<Output = Result<Grant, LeaseError>> + Send;

    /// Leaves the live set (best effort: a missed leave expires with the live TTL).
    fn leave(&self) -> impl Future<Output = ()> + Send;
}

/// Why a lease failed.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// Redis failed or the script answered badly.
    #[error("fleet lease on Redis: {0}")]
    Redis(#[from] fred::error::Error),
    /// The in-memory fleet of tests could not be read.
    #[error("fleet lease store unreadable")]
    Unreadable,
}
