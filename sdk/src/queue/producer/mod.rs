//! The two broker producers behind one trait.
//!
//! A [`Producer`] sends a batch of events to a topic and answers per event, so a batch
//! that partly failed is retried only for the part that failed.
//!
//! Each broker's producer is behind its cargo feature (`kafka`, `rocketmq`, both on by
//! default), so a service that uses one broker builds one client library.
//!
//! - [`KafkaProducer`] (rdkafka, [`kafka`]): an idempotent producer (no duplicates from its own
//!   retries), keyed by trade number so one reward always lands in one partition;
//!   librdkafka batches again below us (`linger.ms`), and every message of a batch is
//!   handed to it before the first delivery report is awaited.
//! - [`RocketMqProducer`] (rocketmq-client-rust, [`rocketmq`]): one `send_batch` per batch, which the
//!   broker stores all-or-nothing; each message carries the trade number as its key.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;

#[cfg(feature = "kafka")]
pub mod kafka;
#[cfg(feature = "rocketmq")]
pub mod rocketmq;

#[cfg(feature = "kafka")]
pub use kafka::{KafkaProducer, kafka_client_config};
#[cfg(feature = "rocketmq")]
pub use rocketmq::{RocketMqProducer, rocketmq_runtime};

/// A boxed future, for the trait's object safety.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One event on its way to a broker.
#[derive(Debug, Clone)]
pub struct OutMsg {
    /// Partition / sharding key: the trade number.
    pub key: String,
    /// The encoded `RewardEvent`.
    pub payload: Bytes,
}

/// Why a send failed. Every failure is retryable from the SDK's point of view: the
/// event goes to the other broker, then to the retry loop, then to the spool.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{producer}: {reason}")]
pub struct ProduceError {
    /// The producer's name.
    pub producer: String,
    /// What the client library said.
    pub reason: String,
}

/// A broker producer.
pub trait Producer: Send + Sync + fmt::Debug {
    /// Its name in the configuration.
    fn name(&self) -> &str;
    /// Sends `msgs` to `topic`; one result per message, in order.
    fn send_batch<'a>(
        &'a self,
        topic: &'a str,
        msgs: &'a [OutMsg],
    ) -> BoxFuture<'a, Vec<Result<(), ProduceError>>>;
    /// Flushes and stops.
    fn close(&self) -> BoxFuture<'_, ()>;
}
