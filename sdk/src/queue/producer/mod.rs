//! The two broker producers behind one trait.
//!
//! A [`Producer`] sends a batch of broker records to a topic and answers per record, so
//! a batch that partly failed is retried only for the part that failed. The dispatcher
//! packs events into records first ([`pack`]) and spreads each record's answer back to
//! its events ([`spread`]).
//!
//! Each broker's producer is behind its cargo feature (`kafka`, `rocketmq`, both on by
//! default), so a service that uses one broker builds one client library.
//! `fake` (tests, or the `test-fakes` feature) is an in-memory stand-in for either.
//!
//! - [`KafkaProducer`] (rdkafka, [`kafka`]): an idempotent producer (no duplicates from its own
//!   retries), each record keyed by its (first) event's key;
//!   librdkafka batches again below us (`linger.ms`), and every message of a batch is
//!   handed to it before the first delivery report is awaited.
//! - [`RocketMqProducer`] (rocketmq-client-rust, [`rocketmq`]): one `send_batch` per batch, which the
//!   broker stores all-or-nothing; each message carries the trade number as its key.

#[cfg(any(test, feature = "test-fakes"))]
pub mod fake;
#[cfg(feature = "kafka")]
pub mod kafka;
#[cfg(feature = "rocketmq")]
pub mod rocketmq;

mod error;
mod interface;
mod packing;
mod record;

pub use error::ProduceError;
pub use interface::{BoxFuture, Producer};
#[cfg(feature = "kafka")]
pub use kafka::{KafkaProducer, kafka_client_config};
pub use packing::{PACK_MAX_BYTES, pack, spread};
pub use record::OutMsg;
#[cfg(feature = "rocketmq")]
pub use rocketmq::{RocketMqProducer, rocketmq_runtime};
