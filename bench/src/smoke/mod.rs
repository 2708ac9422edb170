//! Smoke probes: prove each server of the local stack works for real, with counts.
//!
//! Each probe writes N items through the real client library and reads every one
//! back, then checks exact counts: nothing lost, nothing invented, and (for Kafka) a
//! consumer-group restart that resumes from the committed offset. They back both the
//! per-server tests (`bench/tests/smoke_*.rs`) and `reward-bench smoke`, the README's
//! main job at this stage of the project.

pub mod kafka;
pub mod redis;
pub mod rocketmq;

use std::time::Duration;

use reward_tools::stack::{Server, StackError};

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

/// What one probe measured.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeReport {
    /// Which server.
    pub server: Server,
    /// Items written.
    pub written: u64,
    /// Distinct items read back.
    pub read_back: u64,
    /// Items delivered more than once (Kafka's consumer restart may redeliver).
    pub duplicates: u64,
    /// Time spent writing.
    pub write_time: Duration,
    /// Time spent reading.
    pub read_time: Duration,
    /// Free-form detail (consumer mode, partitions, ...).
    pub detail: String,
}

impl ProbeReport {
    /// Items written per second.
    pub fn write_rate(&self) -> f64 {
        rate(self.written, self.write_time)
    }

    /// Items read per second.
    pub fn read_rate(&self) -> f64 {
        rate(self.read_back + self.duplicates, self.read_time)
    }
}

/// `n` per second over `d` (0 for an empty interval).
pub(crate) fn rate(n: u64, d: Duration) -> f64 {
    let secs = d.as_secs_f64();
    if secs > 0.0 { n as f64 / secs } else { 0.0 }
}

/// A name no earlier run used, so concurrent and repeated runs never share state.
pub fn unique_name(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("{prefix}-{nanos:x}-{:04x}", rand::random::<u16>())
}
