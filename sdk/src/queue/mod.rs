//! The virtual queue: named queues over a primary and a backup broker, with async
//! batching, failover, a retry loop and the durable spool.
//!
//! # Path of one event
//! ```text
//! send_reward ─▶ buffer (bounded, per queue) ─▶ dispatcher: batch on size or linger
//!     ─▶ first producer (uid bucket < ratio ? primary : backup) ─ failed ─▶ the other
//!     ─ failed ─▶ failure channel ─▶ retry loop (backoff, alternating producers)
//!     ─ both producers failing longer than spool.after_ms, or closing ─▶ spool
//! dispatcher ─ both known down (a batch of the topic found them so within
//!     spool.replay_every_ms) ─▶ spool, one batch a period trying them again
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

pub mod producer;

#[cfg(feature = "rocketmq")]
pub use producer::rocketmq_runtime;

mod dispatch;
mod engine;
mod envelope;
mod error;
mod ratio;
mod report;
mod shared;
mod spool_worker;
mod stats;

pub(crate) use engine::Engine;
pub use engine::Slot;
pub use envelope::{Envelope, Settled};
pub use error::EnqueueError;
pub use producer::{OutMsg, ProduceError, Producer};
pub use ratio::bucket;
pub use report::CloseReport;
pub use stats::{QueueStats, StatsSnapshot};

#[cfg(test)]
mod tests;
