//! Smoke probes: prove each server of the local stack works for real, with counts.
//!
//! Each probe writes N items through the real client library and reads every one
//! back, then checks exact counts: nothing lost, nothing invented, and (for Kafka) a
//! consumer-group restart that resumes from the committed offset. They back both the
//! per-server tests (`bench/tests/smoke_*.rs`) and `reward-bench smoke`.
//!
//! - [`redis`], [`kafka`], [`rocketmq`]: one probe per server;
//! - [`ProbeReport`]: what a probe measured; [`SmokeError`]: why it failed.

mod error;
pub mod kafka;
pub mod redis;
mod report;
pub mod rocketmq;

pub use self::error::SmokeError;
pub use self::report::ProbeReport;
