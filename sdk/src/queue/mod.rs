//! The virtual queue: named queues over a primary and a backup broker, with async
//! batching, failover, a retry loop and the durable spool.
//!
//! # Path of one event
//! ```text
//! send_reward ─▶ buffer (bounded, per queue) ─▶ dispatcher: batch on size or linger
//!     ─▶ first producer (uid bucket < ratio ? primary : backup) ─ failed ─▶ the other
//!     ─ failed ─▶ failure channel ─▶ retry loop (backoff, alternating producers)
//!     ─ both producers failing longer than spool.after_ms, or closing ─▶ spool
//! spool ─ a producer answers again ─▶ replay ─▶ broker ─▶ segment deleted
//! ```
//! Each send packs the batch's events into compound broker records of up to the
//! queue's `pack_events` ([`producer::pack`], [`proto::pack`]); a record's answer is its
//! events' answer, and what failed goes on event by event (the other producer, the
//! retry loop and the spool repack it). A spooled event is kept alone, so the spool's
//! format does not change with packing.
//!
//! An event is *settled* when a broker acknowledged it or the spool synced it; the
//! SDK counts accepted-but-unsettled events, and [`crate::Sdk::close`] waits for that
//! count to reach zero.
//!
//! # Bounds
//! - the buffer holds at most `batch.buffer` events per queue; a full buffer makes
//!   `send_reward` wait up to `batch.enqueue_wait_ms`, then fail with back-pressure;
//! - the retry backlog is capped at `batch.buffer` events per SDK: past it, failed
//!   events go straight to the spool instead of piling up in memory;
//! - the spool is capped at `spool.max_bytes`; only if the spool cannot take an event
//!   is it logged (base64) as the last resort, and counted.
//!
//! # Ratio
//! The user's bucket is `uid % 100` when the user id is a number, else a CRC-32 of it
//! modulo 100: stable, so a user always starts on the same broker for a given ratio.

pub mod producer;

#[cfg(feature = "rocketmq")]
pub use producer::rocketmq_runtime;

mod dispatch;
mod engine;
mod envelope;
mod shared;
mod spool_worker;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use reward_runtime::counters::Counted;
use tokio::sync::mpsc;

pub(crate) use engine::Engine;
pub use envelope::{Envelope, Settled};
pub use producer::{OutMsg, ProduceError, Producer};

/// The bucket (0..100) a user id falls in for ratio routing.
pub fn bucket(user_id: &str) -> u8 {
    let n = match user_id.parse::<u64>() {
        Ok(n) => n,
        Err(_) => u64::from(crc32fast::hash(user_id.as_bytes())),
    };
    u8::try_from(n % 100).unwrap_or(0)
}

/// Counts since start; read them with [`QueueStats::snapshot`]. Those with a
/// Prometheus counter of their own are [`Counted`]: the number read here and the
/// metric move in one step. Per-producer counts live with each producer's health.
#[derive(Debug)]
pub struct QueueStats {
    accepted: AtomicU64,
    delivered: AtomicU64,
    records: AtomicU64,
    failovers: AtomicU64,
    retries: Counted,
    spooled: Counted,
    replayed: Counted,
    logged: Counted,
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
    fn new() -> Self {
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

    fn snapshot(&self, unsettled: u64, per_producer: BTreeMap<String, u64>) -> StatsSnapshot {
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

/// Why an event was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnqueueError {
    /// The queue's buffer stayed full for the whole wait.
    #[error("queue {queue} is full ({capacity} events) for {waited:?}")]
    Backpressure {
        /// The queue.
        queue: String,
        /// Its capacity.
        capacity: usize,
        /// How long the call waited.
        waited: Duration,
    },
    /// `close` has begun.
    #[error("the SDK is closing")]
    Closed,
    /// The routing names a queue that has no buffer (it appeared after start-up).
    #[error("queue {0} was not configured at start-up")]
    UnknownQueue(String),
}

/// A reserved place in a queue's buffer: fill it or drop it.
#[derive(Debug)]
pub struct Slot {
    permit: mpsc::OwnedPermit<Envelope>,
}

#[cfg(test)]
mod tests;
