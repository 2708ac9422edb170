//! Why the consumer could not start.

use crate::pipeline::PipelineError;

/// Why the consumer could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The SDK (Redis, brokers, spool).
    #[error("sdk: {0}")]
    Sdk(#[from] sdk::StartError),
    /// The delay queue's Redis.
    #[error("delay queue: {0}")]
    Redis(#[from] fred::error::Error),
    /// The Kafka consumer.
    #[error("kafka: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    /// The RocketMQ consumer.
    #[error("rocketmq: {0}")]
    RocketMq(String),
    /// The service endpoint.
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
}
