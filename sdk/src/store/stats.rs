//! The token store's counts since start.

use std::sync::atomic::AtomicU64;

/// Counts since start.
#[derive(Debug, Default)]
pub struct StoreStats {
    /// Tokens written.
    pub written: AtomicU64,
    /// Writes refused by the cap.
    pub capped: AtomicU64,
    /// Attempts that failed in Redis (a write retried until it lands counts each).
    pub failed: AtomicU64,
    /// Attempts that were retries of a failed one.
    pub retried: AtomicU64,
    /// Writes that will never be stored although their reward went on: given up after
    /// `retry_for_ms`, or refused by the cap with nobody waiting (deferred mode).
    pub unstored: AtomicU64,
    /// Pipelines sent.
    pub pipelines: AtomicU64,
    /// Script calls that carried direct-mode writes: on a single Redis, fewer than the
    /// writes when writes waited together for a call slot.
    pub direct_calls: AtomicU64,
    /// Writes not yet answered (queued, in flight, waiting for a retry).
    pub pending: AtomicU64,
}
