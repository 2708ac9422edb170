//! The consumer's configuration: one TOML file (`--config`), overridable per key by
//! `REWARD_CONSUMER__SECTION__KEY=value` environment variables, validated at start-up.
//!
//! ```toml
//! [source]                    # or kind = "rocketmq" with namesrv, group, topics,
//! kind = "kafka"              # consume_threads (4), consume_batch (32), pull_batch (256)
//! brokers = "127.0.0.1:19092"
//! group = "reward-consumer"
//! topics = ["reward-massive"]
//! settings = { "session.timeout.ms" = "30000" }   # any librdkafka property
//!
//! [pipeline]
//! window = 4096               # in-flight offsets per partition before fetching pauses
//! commit_interval_ms = 1000
//! batch = 200                 # events per GrantBatch call
//! concurrency = 8             # GrantBatch calls in flight
//! max_retries = 16            # failures before the dead-letter topic
//! backoff_initial_ms = 500    # delay before retry 1; doubles per retry
//! backoff_max_ms = 60000
//! hold_ms = 1000              # a type's rate worth of messages may wait in memory
//! limited_delay_ms = 1000     # past that, an over-rate message comes back after this
//! shutdown_grace_ms = 10000   # in-flight work gets this long on SIGTERM
//! dead_letter_queue = "dead"  # SDK virtual queues of the dead-letter and failure topics
//! failure_queue = "failures"
//!
//! [service]
//! grpc = "http://127.0.0.1:50051"   # several instances: "http://a:50051,http://b:50051"
//! timeout_ms = 10000
//!
//! [delay]
//! key_prefix = "rc-delay"
//! shards = 8
//! poll_ms = 100
//!
//! [fleet]                     # crate::fleet: the instances sharing one set of rates
//! key_prefix = "rc-fleet"     # the same for every consumer in front of the same downstreams
//! lease_ms = 100              # how often an instance leases permits from Redis
//! live_ttl_ms = 2000          # an instance silent this long no longer counts as live
//!
//! [limits]                    # crate::limits; changed live through [dynamic]
//! [dynamic]                   # sdk::config::DynamicConfig: file and/or Redis hash
//! redis_key = "reward:config"
//!
//! [sdk]                       # the SDK's own config: Redis and the virtual queues the
//! # ...                       # requeues and dead letters go through
//! ```
//!
//! The reward service's bearer credential comes from `REWARD_SERVICE_TOKEN` or the file
//! named by `REWARD_SERVICE_TOKEN_FILE`, never from the file, and is never logged.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use reward_runtime::credential::Credential;
use serde::Deserialize;

use crate::fleet::FleetConfig;
use crate::limits::{LimitsConfig, LimitsError};

/// Prefix of the environment overrides.
pub const ENV_PREFIX: &str = "REWARD_CONSUMER__";

/// Why the configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read, is not TOML, has a field of the wrong type or
    /// name, or an override does not fit it.
    #[error(transparent)]
    Document(#[from] reward_runtime::env::DocumentError),
    /// A value out of range.
    #[error("invalid: {0}")]
    Invalid(String),
    /// The `[sdk]` section.
    #[error("[sdk]: {0}")]
    Sdk(#[from] sdk::config::ConfigError),
    /// The `[limits]` section.
    #[error(transparent)]
    Limits(#[from] LimitsError),
    /// The service credential is missing or unusable.
    #[error("credential: {0}")]
    Credential(String),
}

/// Where messages come from.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum SourceConfig {
    /// A Kafka consumer group.
    Kafka {
        /// Bootstrap servers.
        brokers: String,
        /// Consumer group id.
        group: String,
        /// Topics to subscribe to.
        topics: Vec<String>,
        /// Extra librdkafka properties (a number or boolean is taken as its text, so
        /// `REWARD_CONSUMER__SOURCE__SETTINGS__FETCH.WAIT.MAX.MS=500` works too).
        #[serde(default, deserialize_with = "sdk::config::client_settings")]
        settings: BTreeMap<String, String>,
    },
    /// A RocketMQ push consumer group (settings: docs/rocketmq.md).
    Rocketmq {
        /// Name server `host:port`.
        namesrv: String,
        /// Consumer group.
        group: String,
        /// Topics to subscribe to.
        topics: Vec<String>,
        /// Consume threads.
        #[serde(default = "four")]
        consume_threads: u32,
        /// Messages per listener call.
        #[serde(default = "thirty_two")]
        consume_batch: u32,
        /// Messages per pull.
        #[serde(default = "two_five_six")]
        pull_batch: u32,
    },
}

fn four() -> u32 {
    4
}
fn thirty_two() -> u32 {
    32
}
fn two_five_six() -> u32 {
    256
}

/// How messages are handled.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PipelineConfig {
    /// In-flight offsets (broker records) per partition before fetching pauses. A
    /// compound record holds up to the producers' `pack_events` events, so the events
    /// in memory per partition are at most `window` times that.
    pub window: usize,
    /// How often the finished prefix of each partition is committed.
    pub commit_interval_ms: u64,
    /// Events per GrantBatch call.
    pub batch: usize,
    /// GrantBatch calls in flight.
    pub concurrency: usize,
    /// Failures before the dead-letter topic.
    pub max_retries: u32,
    /// Delay before the first retry; doubles with each retry.
    pub backoff_initial_ms: u64,
    /// Longest retry delay.
    pub backoff_max_ms: u64,
    /// How much of a type's rate may wait in memory for its next credits (beyond
    /// that, over-rate messages are parked).
    pub hold_ms: u64,
    /// Delay of a message over its type's rate.
    pub limited_delay_ms: u64,
    /// Delay of a message of a fused type (it stays parked while fused).
    pub fused_delay_ms: u64,
    /// In-flight work gets this long on shutdown.
    pub shutdown_grace_ms: u64,
    /// SDK virtual queue of the dead-letter topic.
    pub dead_letter_queue: String,
    /// SDK virtual queue of the failure topic.
    pub failure_queue: String,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        PipelineConfig {
            window: 4096,
            commit_interval_ms: 1000,
            batch: 200,
            concurrency: 8,
            max_retries: 16,
            backoff_initial_ms: 500,
            backoff_max_ms: 60_000,
            hold_ms: 1000,
            limited_delay_ms: 1000,
            fused_delay_ms: 1000,
            shutdown_grace_ms: 10_000,
            dead_letter_queue: "dead".into(),
            failure_queue: "failures".into(),
        }
    }
}

impl PipelineConfig {
    /// The delay before handling retry number `retry` (1-based).
    pub fn backoff(&self, retry: u32) -> Duration {
        let shift = retry.saturating_sub(1).min(30);
        Duration::from_millis(
            self.backoff_initial_ms
                .saturating_mul(1u64 << shift)
                .min(self.backoff_max_ms),
        )
    }
}

/// Most service endpoints one consumer balances over.
pub const MAX_ENDPOINTS: usize = 64;

impl ServiceLink {
    /// The endpoints `grpc` names (comma-separated, blanks ignored).
    pub fn endpoints(&self) -> Vec<&str> {
        endpoints(&self.grpc)
    }
}

/// The endpoints a `service.grpc` value names (comma-separated, blanks ignored).
pub fn endpoints(grpc: &str) -> Vec<&str> {
    grpc.split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .collect()
}

/// The reward service.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceLink {
    /// gRPC endpoint, `http://host:port`, or several instances' endpoints separated by
    /// commas: calls are balanced over them (see [`crate::pipeline`]).
    pub grpc: String,
    /// Deadline of one GrantBatch call.
    #[serde(default = "ten_seconds")]
    pub timeout_ms: u64,
}

fn ten_seconds() -> u64 {
    10_000
}

/// The Redis delay queue.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DelayConfig {
    /// Key prefix of the sorted sets.
    pub key_prefix: String,
    /// Sorted sets per reward type.
    pub shards: u32,
    /// How often due messages are moved back to the queue.
    pub poll_ms: u64,
    /// How long a mover holds claimed messages before another may take them.
    pub lease_ms: u64,
}

impl Default for DelayConfig {
    fn default() -> Self {
        DelayConfig {
            key_prefix: "rc-delay".into(),
            shards: 8,
            poll_ms: 100,
            lease_ms: 30_000,
        }
    }
}

/// The whole configuration.
#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    /// Where messages come from.
    pub source: SourceConfig,
    /// How they are handled.
    pub pipeline: PipelineConfig,
    /// The reward service.
    pub service: ServiceLink,
    /// The delay queue.
    pub delay: DelayConfig,
    /// Where the fleet's instances lease their permits.
    pub fleet: FleetConfig,
    /// Limits at start-up.
    pub limits: LimitsConfig,
    /// Where limit changes come from.
    pub dynamic: sdk::config::DynamicConfig,
    /// The SDK (requeues, dead letters).
    pub sdk: sdk::config::SdkConfig,
    /// The reward service's credential (`REWARD_SERVICE_TOKEN[_FILE]`).
    pub credential: Credential,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    source: SourceConfig,
    #[serde(default)]
    pipeline: PipelineConfig,
    service: ServiceLink,
    #[serde(default)]
    delay: DelayConfig,
    #[serde(default)]
    fleet: FleetConfig,
    #[serde(default)]
    limits: Option<toml::Table>,
    #[serde(default)]
    dynamic: sdk::config::DynamicConfig,
    sdk: toml::Table,
}

impl ConsumerConfig {
    /// Reads `path` with the process environment's overrides and credential.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        reward_runtime::env::load(path, Self::from_toml_str)
    }

    /// Parses a document; `env` supplies overrides and the credential.
    pub fn from_toml_str(text: &str, env: &[(String, String)]) -> Result<Self, ConfigError> {
        let raw: Raw = reward_runtime::env::service_raw(text, env, ENV_PREFIX)?;
        let sdk = sdk::config::SdkConfig::from_table(&raw.sdk)?;
        let mut limits_doc = toml::Table::new();
        if let Some(l) = &raw.limits {
            limits_doc.insert("limits".into(), toml::Value::Table(l.clone()));
        }
        let limits = LimitsConfig::from_document(&limits_doc)?;
        check(&raw, &sdk)?;
        Ok(ConsumerConfig {
            source: raw.source,
            pipeline: raw.pipeline,
            service: raw.service,
            delay: raw.delay,
            fleet: raw.fleet,
            limits,
            dynamic: raw.dynamic,
            sdk,
            credential: Credential::from_env(env, "REWARD_SERVICE_TOKEN")
                .map_err(|e| ConfigError::Credential(e.to_string()))?,
        })
    }
}

/// The checks a parsed document must pass beyond its types.
fn check(raw: &Raw, sdk: &sdk::config::SdkConfig) -> Result<(), ConfigError> {
    let p = &raw.pipeline;
    for (name, v) in [
        ("pipeline.window", p.window as u64),
        ("pipeline.commit_interval_ms", p.commit_interval_ms),
        ("pipeline.batch", p.batch as u64),
        ("pipeline.concurrency", p.concurrency as u64),
        ("pipeline.backoff_initial_ms", p.backoff_initial_ms),
        ("pipeline.shutdown_grace_ms", p.shutdown_grace_ms),
        ("service.timeout_ms", raw.service.timeout_ms),
        ("delay.shards", u64::from(raw.delay.shards)),
        ("delay.poll_ms", raw.delay.poll_ms),
        ("delay.lease_ms", raw.delay.lease_ms),
    ] {
        if v == 0 {
            return Err(ConfigError::Invalid(format!("{name} must be positive")));
        }
    }
    // A park longer than the furthest `not_before_ms` any consumer takes off a topic
    // would come back (when the delay queue fails and the event is requeued at once)
    // as an event every consumer refuses.
    let max_delay = u64::try_from(proto::limits::MAX_NOT_BEFORE_AHEAD_MS).unwrap_or(u64::MAX);
    for (name, v) in [
        ("pipeline.backoff_initial_ms", p.backoff_initial_ms),
        ("pipeline.backoff_max_ms", p.backoff_max_ms),
        ("pipeline.limited_delay_ms", p.limited_delay_ms),
        ("pipeline.fused_delay_ms", p.fused_delay_ms),
    ] {
        if v > max_delay {
            return Err(ConfigError::Invalid(format!(
                "{name} is {v}; at most {max_delay} (an hour: proto::limits::MAX_NOT_BEFORE_AHEAD_MS)"
            )));
        }
    }
    for q in [&p.dead_letter_queue, &p.failure_queue] {
        if !sdk.routing.queues.contains_key(q) {
            return Err(ConfigError::Invalid(format!(
                "queue {q:?} (pipeline) is not a queue of [sdk.queues]"
            )));
        }
    }
    if raw.delay.key_prefix.is_empty() || raw.delay.key_prefix.contains(['{', '}']) {
        return Err(ConfigError::Invalid(
            "delay.key_prefix must be set, without braces".into(),
        ));
    }
    if let Some(problem) = raw.fleet.problem() {
        return Err(ConfigError::Invalid(problem));
    }
    let endpoints = raw.service.endpoints();
    if endpoints.is_empty() || endpoints.len() > MAX_ENDPOINTS {
        return Err(ConfigError::Invalid(format!(
            "service.grpc must name 1 to {MAX_ENDPOINTS} endpoints"
        )));
    }
    for e in endpoints {
        if !e.starts_with("http://") && !e.starts_with("https://") {
            return Err(ConfigError::Invalid(format!(
                "service.grpc {e:?} must be an http:// or https:// URL"
            )));
        }
    }
    let (topics, group) = match &raw.source {
        SourceConfig::Kafka { topics, group, .. } => (topics, group),
        SourceConfig::Rocketmq {
            topics,
            group,
            consume_threads,
            consume_batch,
            pull_batch,
            ..
        } => {
            if *consume_threads == 0 || *consume_batch == 0 || *pull_batch == 0 {
                return Err(ConfigError::Invalid(
                    "source.consume_threads, consume_batch and pull_batch must be positive".into(),
                ));
            }
            (topics, group)
        }
    };
    if topics.is_empty() || group.is_empty() {
        return Err(ConfigError::Invalid(
            "source.topics and source.group must be set".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) const DOC: &str = r#"
        [source]
        kind = "kafka"
        brokers = "127.0.0.1:19092"
        group = "g"
        topics = ["reward-massive"]
        [service]
        grpc = "http://127.0.0.1:50051"
        [limits.types.coupon]
        rate = 2000
        [sdk]
        default_queue = "massive"
        [sdk.producers.k]
        kind = "kafka"
        brokers = "127.0.0.1:19092"
        [sdk.queues.massive]
        topic = "m"
        primary = "k"
        backup = "k"
        [sdk.queues.dead]
        topic = "d"
        primary = "k"
        backup = "k"
        [sdk.queues.failures]
        topic = "f"
        primary = "k"
        backup = "k"
        [sdk.types.cash]
    "#;

    fn env() -> Vec<(String, String)> {
        vec![(
            "REWARD_SERVICE_TOKEN".into(),
            "test-credential-0123456789".into(),
        )]
    }

    #[test]
    fn source_settings_take_an_environment_override_as_text() {
        let mut e = env();
        e.push((
            "REWARD_CONSUMER__SOURCE__SETTINGS__FETCH.WAIT.MAX.MS".into(),
            "500".into(),
        ));
        e.push((
            "REWARD_CONSUMER__SOURCE__SETTINGS__ENABLE.AUTO.COMMIT".into(),
            "false".into(),
        ));
        let c = ConsumerConfig::from_toml_str(DOC, &e).unwrap();
        let SourceConfig::Kafka { settings, .. } = &c.source else {
            panic!("the source is not kafka");
        };
        assert_eq!(settings["fetch.wait.max.ms"], "500");
        assert_eq!(settings["enable.auto.commit"], "false");
    }

    #[test]
    fn parses_with_overrides_and_checks() {
        let mut e = env();
        e.push(("REWARD_CONSUMER__PIPELINE__BATCH".into(), "50".into()));
        let c = ConsumerConfig::from_toml_str(DOC, &e).unwrap();
        assert_eq!(c.pipeline.batch, 50);
        assert_eq!(c.limits.types["coupon"].rate, 2000.0);
        assert_eq!(c.pipeline.backoff(1), Duration::from_millis(500));
        assert_eq!(c.pipeline.backoff(3), Duration::from_millis(2000));
        assert_eq!(c.pipeline.backoff(40), Duration::from_millis(60_000));
        assert!(
            !format!("{c:?}").contains("0123456789"),
            "credential in Debug"
        );
    }

    #[test]
    fn several_service_endpoints_are_read_in_order() {
        let doc = DOC.replace(
            "grpc = \"http://127.0.0.1:50051\"",
            "grpc = \"http://127.0.0.1:50051, http://127.0.0.1:50052\"",
        );
        let c = ConsumerConfig::from_toml_str(&doc, &env()).unwrap();
        assert_eq!(
            c.service.endpoints(),
            ["http://127.0.0.1:50051", "http://127.0.0.1:50052"]
        );
    }

    #[test]
    fn the_local_stack_sample_parses() {
        // Tests run in the package's folder (a path compiled in could name another
        // checkout that shared the target directory).
        let text = std::fs::read_to_string("../ops/consumer.toml").unwrap();
        let c = ConsumerConfig::from_toml_str(&text, &env()).unwrap();
        assert_eq!(c.limits.effective_global(), 402_000.0);
        assert_eq!(c.limits.types["cash"].priority, 10);
    }

    #[test]
    fn refuses_bad_values_and_missing_credential() {
        let bad = [
            DOC.replace("batch = 50", "")
                .replace("[service]", "[pipeline]\nwindow = 0\n[service]"),
            DOC.replace("http://127", "tcp://127"),
            DOC.replace("topics = [\"reward-massive\"]", "topics = []"),
            DOC.replace("[sdk.queues.dead]", "[sdk.queues.dead2]"),
            DOC.replace("rate = 2000", "rate = -1"),
            DOC.replace("[service]", "[service]\nport = 5"),
            // Several service endpoints: each must be a URL; none is refused.
            DOC.replace(
                "grpc = \"http://127.0.0.1:50051\"",
                "grpc = \"http://127.0.0.1:50051,tcp://127.0.0.1:50052\"",
            ),
            DOC.replace("grpc = \"http://127.0.0.1:50051\"", "grpc = \" , \""),
            // The fleet's key prefix is a hash tag: no braces.
            DOC.replace("[service]", "[fleet]\nkey_prefix = \"a{b}\"\n[service]"),
            DOC.replace("[service]", "[fleet]\nlease_ms = 0\n[service]"),
        ];
        for doc in bad {
            assert!(
                ConsumerConfig::from_toml_str(&doc, &env()).is_err(),
                "{doc}"
            );
        }
        let e = ConsumerConfig::from_toml_str(DOC, &[]).unwrap_err();
        assert!(matches!(e, ConfigError::Credential(_)), "{e}");
        let short = vec![("REWARD_SERVICE_TOKEN".into(), "short".into())];
        assert!(ConsumerConfig::from_toml_str(DOC, &short).is_err());
    }
}
