//! What the queue's `close` reports.

use super::stats::StatsSnapshot;

/// What `close` left behind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloseReport {
    /// Counters at the end.
    pub stats: StatsSnapshot,
    /// Events neither delivered nor spooled when the deadline passed (0 on a clean close).
    pub left: u64,
    /// Bytes in the spool, waiting for the next start.
    pub spool_bytes: u64,
    /// Token writes Redis had not answered when the deadline passed (queued, in
    /// flight or waiting for a retry). Their rewards are unaffected; the tokens may be
    /// missing from the store.
    pub tokens_left: u64,
    /// Token writes given up since start (see [`crate::Sdk::token_write_failures`]).
    pub tokens_unstored: u64,
}
