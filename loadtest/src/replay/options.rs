//! What a replay runs: the profile, the parts and how many of each, the faults, and
//! the limits of the load tester itself.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::faults::Fault;
use crate::profile::Plan;

/// Requests in flight above which new arrivals are shed (counted).
pub const MAX_IN_FLIGHT: u64 = 100_000;

/// What to run.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// The fitted profile.
    pub plan: Plan,
    /// Where run directories go.
    pub out: PathBuf,
    /// Reward service instances (the consumers balance over them).
    pub services: u32,
    /// SDK host processes (0: the SDK runs in this process; see [`super::hosts`]).
    pub sdk_hosts: u32,
    /// Kafka consumer group members.
    pub kafka_consumers: u32,
    /// RocketMQ consumer group members.
    pub rocketmq_consumers: u32,
    /// Per-type consumer rate overrides.
    pub limits: BTreeMap<String, f64>,
    /// Faults to inject.
    pub faults: Vec<Fault>,
    /// Give up draining after this long without progress.
    pub drain_secs: u64,
    /// Show a progress bar.
    pub progress: bool,
    /// Partitions per Kafka topic.
    pub partitions: i32,
    /// The `ops/stack` script (fault drills).
    pub stack_script: PathBuf,
    /// After the run, measure the parts' ceilings on the same stack (a bare rdkafka
    /// producer, `redis-benchmark` of the claim script) for the report.
    pub ceilings: bool,
    /// After the run, drive this many rewards through each stage alone and add each
    /// stage's Redis work per reward to the cost lines ([`crate::stages`]).
    pub stages: Option<u64>,
    /// Requests in flight past which arrivals are shed (and the run stops, invalid).
    pub max_in_flight: u64,
    /// This process's metrics recorder (`--metrics-addr`), scraped at the end into
    /// the run directory beside the children's.
    pub metrics: Option<reward_runtime::admin::PrometheusHandle>,
    /// Where this process serves its metrics, if it does (`--metrics-addr`, or a
    /// loopback port when the stack runs Prometheus): listed for Prometheus.
    pub metrics_served: Option<std::net::SocketAddr>,
}
