//! SDK configuration: one TOML document, overridable from the environment, checked
//! completely at start-up.
//!
//! The document has a static part (connections, token store, batching, spool; read
//! once) and a dynamic part (`[queues]`, `[types]`, `default_queue`: ratios, routing and
//! topics) that [`reward_runtime::dynamic`] may replace while the process runs. Both parts are
//! validated by the same code, so a bad runtime change is refused exactly as a bad file
//! at start-up would be.
//!
//! # Environment overrides
//! `REWARD_SDK__<PATH>=<value>` sets the key at `PATH` (sections separated by `__`,
//! matched case-insensitively against the file's keys; a key not in the file is
//! added in lower case). Values parse as TOML scalars when they can (`100`, `true`,
//! `2.5`), else as strings:
//!
//! ```text
//! REWARD_SDK__STORE__REDIS_URL=redis://127.0.0.1:16379
//! REWARD_SDK__QUEUES__MASSIVE__RATIO=80
//! ```
//!
//! # Example
//! ```
//! let cfg = sdk::config::SdkConfig::from_toml_str(r#"
//!     default_queue = "massive"
//!     [store]
//!     redis_url = "redis://127.0.0.1:16379"
//!     [producers.kafka]
//!     kind = "kafka"
//!     brokers = "127.0.0.1:19092"
//!     [producers.rocketmq]
//!     kind = "rocketmq"
//!     namesrv = "127.0.0.1:9876"
//!     [queues.massive]
//!     topic = "reward-massive"
//!     primary = "kafka"
//!     backup = "rocketmq"
//!     ratio = 80
//!     [types.cash]
//!     max_amount = 20000
//! "#).unwrap();
//! assert_eq!(cfg.routing.queue_for("cash").map(|q| q.ratio), Some(80));
//! assert!(cfg.routing.queue_for("coin").is_none()); // unknown type
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::request::Limits;

mod routing;
mod sections;

pub use routing::Routing;
pub use sections::{
    BatchConfig, DynamicConfig, MAX_IN_FLIGHT_BATCHES, MAX_PENDING_WRITES, ProducerConfig,
    QueueConfig, RetryConfig, SpoolConfig, StoreConfig, TokenConfig, TypeConfig, WriteMode,
    client_settings, not_built,
};

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Not TOML, or a key of the wrong type or unknown.
    #[error("config: {0}")]
    Parse(String),
    /// Parsed, but inconsistent.
    #[error("config: {0}")]
    Invalid(String),
}

fn invalid(msg: impl Into<String>) -> ConfigError {
    ConfigError::Invalid(msg.into())
}

/// The whole SDK configuration, validated.
#[derive(Debug, Clone)]
pub struct SdkConfig {
    /// Token store.
    pub store: StoreConfig,
    /// Token keys and lifetime.
    pub token: TokenConfig,
    /// Broker connections by name.
    pub producers: BTreeMap<String, ProducerConfig>,
    /// Batching.
    pub batch: BatchConfig,
    /// Retry.
    pub retry: RetryConfig,
    /// Spool.
    pub spool: SpoolConfig,
    /// Dynamic source.
    pub dynamic: DynamicConfig,
    /// Request limits.
    pub limits: Limits,
    /// The routing at start-up.
    pub routing: Routing,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(default)]
    store: StoreConfig,
    #[serde(default)]
    token: TokenConfig,
    #[serde(default)]
    producers: BTreeMap<String, ProducerConfig>,
    #[serde(default)]
    batch: BatchConfig,
    #[serde(default)]
    retry: RetryConfig,
    #[serde(default)]
    spool: SpoolConfig,
    #[serde(default)]
    dynamic: DynamicConfig,
    #[serde(default)]
    limits: RawLimits,
    // The dynamic part, read by `Routing::from_table`.
    #[serde(default)]
    #[allow(dead_code)]
    queues: toml::Table,
    #[serde(default)]
    #[allow(dead_code)]
    types: toml::Table,
    #[serde(default)]
    #[allow(dead_code)]
    default_queue: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    max_id_len: Option<usize>,
    max_trade_no_len: Option<usize>,
    max_amount: Option<i64>,
    max_extension_fields: Option<usize>,
    max_extension_len: Option<usize>,
    max_description_len: Option<usize>,
}

impl SdkConfig {
    /// Reads a file, applies `REWARD_SDK__*` overrides, validates.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_toml_str_with_env(&text)
    }

    /// Parses a TOML document, applies this process's `REWARD_SDK__*` overrides,
    /// validates: what [`SdkConfig::load`] does with a file's text, for a process that
    /// writes its SDK's document itself (the load tester, an SDK host) and must still
    /// take the overrides an operator gives every SDK, e.g. a producer's settings:
    /// `REWARD_SDK__PRODUCERS__KAFKA__SETTINGS__ENABLE.IDEMPOTENCE=false`.
    pub fn from_toml_str_with_env(text: &str) -> Result<Self, ConfigError> {
        let mut doc: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| ConfigError::Parse(e.to_string()))?;
        apply_env(&mut doc, std::env::vars())?;
        Self::from_table(&doc)
    }

    /// Parses and validates a TOML document (no environment overrides).
    pub fn from_toml_str(text: &str) -> Result<Self, ConfigError> {
        let doc: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| ConfigError::Parse(e.to_string()))?;
        Self::from_table(&doc)
    }

    /// Validates a parsed document.
    pub fn from_table(doc: &toml::Table) -> Result<Self, ConfigError> {
        let raw: Raw = toml::Value::Table(doc.clone())
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError::Parse(e.to_string()))?;
        let limits = resolve_limits(raw.limits);
        if limits.max_amount <= 0 {
            return Err(invalid("limits.max_amount must be positive"));
        }
        if let Some((name, value, max)) = limits.above_pipeline() {
            return Err(ConfigError::Invalid(format!(
                "limits.{name} is {value}, above the pipeline's {max} (proto::limits): the \
                 consumer and the reward service would refuse such rewards; it may only be lowered"
            )));
        }
        check_producers(&raw.producers)?;
        check_batch(&raw.batch, &raw.retry)?;
        check_store(&raw.store, &raw.token)?;
        if raw.spool.max_bytes == 0 {
            return Err(invalid("spool.max_bytes must be positive"));
        }
        let routing = Routing::from_table(doc, &raw.producers, limits.max_amount)?;
        Ok(Self {
            store: raw.store,
            token: raw.token,
            producers: raw.producers,
            batch: raw.batch,
            retry: raw.retry,
            spool: raw.spool,
            dynamic: raw.dynamic,
            limits,
            routing,
        })
    }

    /// The batch linger as a duration.
    pub fn linger(&self) -> Duration {
        Duration::from_millis(self.batch.linger_ms)
    }
}

/// `[limits]` with the defaults filled in.
fn resolve_limits(l: RawLimits) -> Limits {
    let d = Limits::default();
    Limits {
        max_id_len: l.max_id_len.unwrap_or(d.max_id_len),
        max_trade_no_len: l.max_trade_no_len.unwrap_or(d.max_trade_no_len),
        max_amount: l.max_amount.unwrap_or(d.max_amount),
        max_extension_fields: l.max_extension_fields.unwrap_or(d.max_extension_fields),
        max_extension_len: l.max_extension_len.unwrap_or(d.max_extension_len),
        max_description_len: l.max_description_len.unwrap_or(d.max_description_len),
    }
}

/// At least one producer, each with an address and built into this binary.
fn check_producers(producers: &BTreeMap<String, ProducerConfig>) -> Result<(), ConfigError> {
    if producers.is_empty() {
        return Err(invalid("no [producers] defined"));
    }
    for (name, p) in producers {
        let addr = match p {
            ProducerConfig::Kafka { brokers, .. } => brokers,
            ProducerConfig::Rocketmq { namesrv, .. } => namesrv,
        };
        if addr.trim().is_empty() {
            return Err(invalid(format!("producer {name}: empty address")));
        }
        if let Some(why) = not_built(p) {
            return Err(invalid(format!("producer {name}: {why}")));
        }
    }
    Ok(())
}

/// `[batch]` and `[retry]` bounds.
fn check_batch(b: &BatchConfig, retry: &RetryConfig) -> Result<(), ConfigError> {
    if b.max_events == 0 || b.buffer == 0 || b.buffer < b.max_events {
        return Err(invalid(
            "batch: max_events and buffer must be positive, buffer >= max_events",
        ));
    }
    if b.send_timeout_ms == 0 {
        return Err(invalid("batch.send_timeout_ms must be positive"));
    }
    if b.in_flight_batches == 0 || b.in_flight_batches > MAX_IN_FLIGHT_BATCHES {
        return Err(invalid(format!(
            "batch.in_flight_batches must be 1..={MAX_IN_FLIGHT_BATCHES}"
        )));
    }
    if retry.backoff_initial_ms == 0 || retry.backoff_max_ms < retry.backoff_initial_ms {
        return Err(invalid("retry: 0 < backoff_initial_ms <= backoff_max_ms"));
    }
    Ok(())
}

/// `[store]` bounds, and the token lifetime.
fn check_store(store: &StoreConfig, token: &TokenConfig) -> Result<(), ConfigError> {
    if store.max_tokens_per_user == 0
        || store.pipeline_max == 0
        || store.pool_size == 0
        || store.max_pending == 0
        || store.retry_for_ms == 0
    {
        return Err(invalid(
            "store: max_tokens_per_user, pipeline_max, pool_size, max_pending and retry_for_ms must be positive",
        ));
    }
    if store.due_shards == 0 || store.due_shards > 4096 {
        return Err(invalid("store.due_shards must be 1..=4096"));
    }
    if store.max_pending > MAX_PENDING_WRITES {
        return Err(invalid(format!(
            "store.max_pending is at most {MAX_PENDING_WRITES} (each unanswered write is held in memory)"
        )));
    }
    if store.retry_for_ms < 2 * store.timeout_ms {
        return Err(invalid(
            "store.retry_for_ms must be at least twice store.timeout_ms (time for a retry after a timed-out attempt)",
        ));
    }
    if store.retry_for_ms / 1000 >= store.ttl_secs {
        return Err(invalid(
            "store.retry_for_ms must be shorter than store.ttl_secs (a write retried past the hash's lifetime would store an expired list)",
        ));
    }
    if store.strict && store.write_mode == WriteMode::Deferred {
        return Err(invalid(
            "store: strict = true needs each write's answer, which write_mode = \"deferred\" does not wait for; set write_mode = \"direct\" (the default)",
        ));
    }
    if store.answer_from_queue
        && store.write_mode == WriteMode::Direct
        && !store.strict
        && store.queue_after_ms >= store.write_wait_ms
    {
        return Err(invalid(format!(
            "store.queue_after_ms ({}) must be below store.write_wait_ms ({}): the token write's head start before the event goes is part of the call's wait (or set answer_from_queue = false)",
            store.queue_after_ms, store.write_wait_ms
        )));
    }
    if store.ttl_secs == 0 || token.ttl_secs == 0 {
        return Err(invalid(
            "store.ttl_secs and token.ttl_secs must be positive",
        ));
    }
    Ok(())
}

/// Applies `REWARD_SDK__A__B=value` overrides to `doc` (see [`reward_runtime::env`]).
pub fn apply_env(
    doc: &mut toml::Table,
    vars: impl IntoIterator<Item = (String, String)>,
) -> Result<(), ConfigError> {
    let vars: Vec<(String, String)> = vars.into_iter().collect();
    reward_runtime::env::overlay(doc, &vars, reward_runtime::env::SDK_PREFIX)
        .map_err(|e| ConfigError::Parse(e.to_string()))
}

#[cfg(test)]
mod tests;
