//! One second of the run: the timeline's row.

use std::collections::BTreeMap;

use serde::Serialize;

/// One second of the run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Second {
    /// Seconds since sending began.
    pub t: u64,
    /// Requests the schedule asked for.
    pub scheduled: u64,
    /// Accepted by the SDK.
    pub sent: u64,
    /// Refused by the SDK (any reason).
    pub refused: u64,
    /// Shed by the load tester (too many in flight).
    pub shed: u64,
    /// Send latency from intended start, µs: p50.
    pub send_p50_us: u64,
    /// … p99.
    pub send_p99_us: u64,
    /// The generator's start lag p99 of this second's arrivals, µs.
    pub start_lag_p99_us: u64,
    /// Rewards sent in this second whose token is not in the store at the end.
    pub tokens_missing: u64,
    /// Credits made in this second, per type (filled after reconciliation).
    pub credited: BTreeMap<String, u64>,
    /// End-to-end p50 of the credits of this second, ms.
    pub e2e_p50_ms: u64,
    /// … p99.
    pub e2e_p99_ms: u64,
    /// SDK counters (cumulative).
    pub sdk_failovers: u64,
    /// Spooled so far.
    pub sdk_spooled: u64,
    /// Event send retries so far.
    pub sdk_retries: u64,
    /// Stored tokens the reward service's sweeper granted so far (summed over the
    /// instances, scraped every second).
    pub swept: u64,
    /// Delivered to a broker so far.
    pub sdk_delivered: u64,
    /// Consumers' counters (cumulative, summed over members).
    pub consumed: u64,
    /// Requeued because the downstream failed.
    pub requeued_failed: u64,
    /// Requeued because the type was over its rate.
    pub requeued_limited: u64,
    /// Requeued because the type was fused.
    pub requeued_fused: u64,
    /// Limiter waits.
    pub limiter_waits: u64,
    /// Dead-lettered.
    pub dead_lettered: u64,
    /// Delivered to a broker and not yet consumed (an estimate: delivered − consumed).
    pub backlog: u64,
}
