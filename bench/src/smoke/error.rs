//! Why a probe failed.

use std::time::Duration;

use reward_stack::env::{Server, StackError};

/// Why a probe failed.
#[derive(Debug, thiserror::Error)]
pub enum SmokeError {
    /// The server does not answer at all.
    #[error(transparent)]
    Stack(#[from] StackError),
    /// Redis answered with an error.
    #[error("Redis: {0}")]
    Redis(#[from] fred::error::Error),
    /// librdkafka reported an error.
    #[error("Kafka: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    /// The RocketMQ client reported an error.
    #[error("RocketMQ: {0}")]
    RocketMq(String),
    /// The server worked but the data came back wrong: the probe's real finding.
    #[error("{server}: {what}")]
    Mismatch {
        /// Which server.
        server: Server,
        /// What differed.
        what: String,
    },
    /// A step did not finish in time.
    #[error("{server}: {step} did not finish within {after:?}")]
    Timeout {
        /// Which server.
        server: Server,
        /// The step.
        step: &'static str,
        /// The limit.
        after: Duration,
    },
}
