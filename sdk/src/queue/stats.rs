//! The queue's counts since start, and a copy of them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use reward_runtime::counters::Counted;

/// Counts since start; read them with [`QueueStats::snapshot`]. Those with a
/// Prometheus counter of their own are [`Counted`]: the number read here and the
/// metric move in one step. Per-producer counts live with each producer's health.
#[derive(Debug)]
pub struct QueueStats {
    pub(super) accepted: AtomicU64,
    pub(super) delivered: AtomicU64,
    pub(super) records: AtomicU64,
    pub(super) failovers: AtomicU64,
    pub(super) retries: Counted,
    pub(super) spooled: Counted,
    pub(super) replayed: Counted,
    pub(super) logged: Counted,
}

/// A copy of the counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Events accepted into the buffers.
    pub accepted: u64,
    /// Events a broker acknowledged (replays included).
    pub delivered: u64,
    /// Broker records acknowledged (replays included): a compound record holds many
    /// events ([`proto::pack`]).
    pub records: u64,
    /// Events that went to their second producer after the first failed.
    pub failovers: u64,
    /// Events handed to the retry loop.
    pub retries: u64,
    /// Events written to the spool.
    pub spooled: u64,
    /// Spooled events later delivered.
    pub replayed: u64,
    /// Events only logged (the spool failed too).
    pub logged: u64,
    /// Accepted and not yet delivered or spooled.
    pub unsettled: u64,
    /// Deliveries per producer name.
    pub per_producer: BTreeMap<String, u64>,
}

impl QueueStats {
    pub(super) fn new() -> Self {
        Self {
            accepted: AtomicU64::new(0),
            delivered: AtomicU64::new(0),
            records: AtomicU64::new(0),
            failovers: AtomicU64::new(0),
            retries: Counted::new("reward_sdk_retries_total", &[]),
            spooled: Counted::new("reward_sdk_spooled_total", &[]),
            replayed: Counted::new("reward_sdk_replayed_total", &[]),
            logged: Counted::new("reward_sdk_logged_total", &[]),
        }
    }

    pub(super) fn snapshot(
        &self,
        unsettled: u64,
        per_producer: BTreeMap<String, u64>,
    ) -> StatsSnapshot {
        StatsSnapshot {
            accepted: self.accepted.load(Ordering::Relaxed),
            delivered: self.delivered.load(Ordering::Relaxed),
            records: self.records.load(Ordering::Relaxed),
            failovers: self.failovers.load(Ordering::Relaxed),
            retries: self.retries.get(),
            spooled: self.spooled.get(),
            replayed: self.replayed.get(),
            logged: self.logged.get(),
            unsettled,
            per_producer,
        }
    }
}
