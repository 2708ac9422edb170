//! SDK configuration: one TOML document, overridable from the environment, checked
//! completely at start-up.
//!
//! The document has a static part (connections, token store, batching, spool; read
//! once) and a dynamic part (`[queues]`, `[types]`, `default_queue`: ratios, routing and
//! topics) that [`crate::dynamic`] may replace while the process runs. Both parts are
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

/// Where the token store lives and how it behaves.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// `redis://host:port` (a cluster URL works too: keys carry hash tags).
    pub redis_url: String,
    /// Prefix of every key the store writes.
    pub key_prefix: String,
    /// TTL of a user's token hash, refreshed on every write.
    pub ttl_secs: u64,
    /// Most tokens one user may hold in one activity (the brief: 500 in fireworks).
    pub max_tokens_per_user: u32,
    /// When true (direct and batched modes only), a failed first token write fails the
    /// reward; when false, the write is retried in the background and the reward goes
    /// on (see [`crate::store`]).
    pub strict: bool,
    /// How token writes reach Redis (see [`WriteMode`]).
    pub write_mode: WriteMode,
    /// Most writes in one pipeline round trip (batched and deferred modes).
    pub pipeline_max: usize,
    /// Redis connections in the pool.
    pub pool_size: usize,
    /// Timeout of one store round trip.
    pub timeout_ms: u64,
    /// Most token writes not yet answered by Redis (queued, in flight, waiting for a
    /// retry). Past it `send_reward` waits `batch.enqueue_wait_ms` for one to finish,
    /// then refuses with `Backpressure` (see [`crate::store`]).
    pub max_pending: usize,
    /// How long a failed token write is retried before it is given up, counted as
    /// unstored, from its first attempt.
    pub retry_for_ms: u64,
}

/// How the token store sends its writes. All run the same cap-checking script; direct
/// and batched differ in how many task hops a write takes, deferred in whether
/// `send_reward` waits for the answer at all (see [`crate::store`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WriteMode {
    /// Each `send_reward` sends its script call itself, on a pooled connection, and
    /// waits for it; fred already pipelines concurrent commands on one connection.
    /// The per-user cap can refuse the reward (`TooManyTokens`), and `strict` can fail
    /// it when Redis does. Half the median latency of `Batched` in the paced benchmark
    /// (≈0.4 ms against ≈0.9 ms) at the same throughput.
    Direct,
    /// One writer task gathers every caller's write and sends explicit pipelines of up
    /// to `pipeline_max`, at most `pool_size` at once.
    Batched,
    /// The default. As batched, but `send_reward` returns without waiting for Redis:
    /// no round trip in the call. A failed write is retried in the background; a
    /// capped one is counted and the reward goes on; not allowed with `strict`.
    #[default]
    Deferred,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            redis_url: "redis://127.0.0.1:16379".into(),
            key_prefix: "rt".into(),
            ttl_secs: 7 * 24 * 3600,
            max_tokens_per_user: 500,
            strict: false,
            write_mode: WriteMode::Deferred,
            pipeline_max: 512,
            pool_size: 4,
            timeout_ms: 2_000,
            max_pending: 65_536,
            retry_for_ms: 60_000,
        }
    }
}

/// Token keys and lifetime. Keys themselves never appear in the config: only where
/// to read them.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TokenConfig {
    /// A key file (`id:base64key` lines); when absent, `REWARD_TOKEN_KEYS` /
    /// `REWARD_TOKEN_KEYS_FILE` from the environment.
    pub keys_file: Option<PathBuf>,
    /// How long a token stays valid.
    pub ttl_secs: u64,
}

impl Default for TokenConfig {
    fn default() -> Self {
        Self {
            keys_file: None,
            ttl_secs: 7 * 24 * 3600,
        }
    }
}

/// A broker connection; one producer may back several virtual queues.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum ProducerConfig {
    /// A Kafka-protocol cluster through rdkafka.
    Kafka {
        /// `host:port,...`
        brokers: String,
        /// librdkafka settings added to ours (e.g. `"linger.ms" = "10"`).
        #[serde(default)]
        settings: BTreeMap<String, String>,
    },
    /// A RocketMQ cluster through rocketmq-client-rust.
    Rocketmq {
        /// Name server `host:port`.
        namesrv: String,
        /// Producer group.
        #[serde(default = "default_group")]
        group: String,
    },
}

/// Why this build cannot run a producer of `p`'s kind (its broker feature is off), or
/// `None` when it can.
pub fn not_built(p: &ProducerConfig) -> Option<&'static str> {
    match p {
        ProducerConfig::Kafka { .. } if !cfg!(feature = "kafka") => {
            Some("kind kafka needs the SDK built with its `kafka` feature")
        }
        ProducerConfig::Rocketmq { .. } if !cfg!(feature = "rocketmq") => {
            Some("kind rocketmq needs the SDK built with its `rocketmq` feature")
        }
        _ => None,
    }
}

fn default_group() -> String {
    "reward-sdk".into()
}

/// Upper bound of [`BatchConfig::in_flight_batches`] (a semaphore's permits are
/// counted in a `u32`, and more than this is a typo, not a tuning).
pub const MAX_IN_FLIGHT_BATCHES: usize = 65_536;

/// Highest `store.max_pending`: a million unanswered writes is ~500 MB of tokens.
pub const MAX_PENDING_WRITES: usize = 1 << 20;

/// Async batching of events towards the brokers.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BatchConfig {
    /// Events per broker request (the brief: 100 gives 100x fewer requests).
    pub max_events: usize,
    /// Longest an event waits for its batch to fill.
    pub linger_ms: u64,
    /// Batches per virtual queue on their way to a broker at once (sent, delivery not
    /// yet confirmed). A batch is confirmed only when every event in it is
    /// acknowledged, so this window and the broker's acknowledgement latency bound a
    /// queue's rate; events in flight stay in memory for retry, at most
    /// `in_flight_batches * max_events` of them. It must cover the producer's linger
    /// plus the broker's acknowledgement time: with librdkafka's 20 ms linger, 8
    /// batches of 100 held `send_reward` to 0.49-0.50x a raw producer on the local
    /// stack and 64 gave 0.70-0.76x (BENCHMARKS.md).
    pub in_flight_batches: usize,
    /// Events buffered per virtual queue before `send_reward` pushes back.
    pub buffer: usize,
    /// How long `send_reward` waits for buffer room before it returns
    /// [`crate::SendError::Backpressure`].
    pub enqueue_wait_ms: u64,
    /// Timeout of one broker send.
    pub send_timeout_ms: u64,
}

impl Default for BatchConfig {
    fn default() -> Self {
        Self {
            max_events: 100,
            linger_ms: 5,
            in_flight_batches: 64,
            buffer: 100_000,
            enqueue_wait_ms: 20,
            send_timeout_ms: 5_000,
        }
    }
}

/// Re-sending what failed.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryConfig {
    /// First backoff.
    pub backoff_initial_ms: u64,
    /// Backoff ceiling.
    pub backoff_max_ms: u64,
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self {
            backoff_initial_ms: 50,
            backoff_max_ms: 2_000,
        }
    }
}

/// The durable spool.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SpoolConfig {
    /// Directory (one SDK instance per directory).
    pub dir: PathBuf,
    /// Both producers of a queue failing for this long sends its events to the spool.
    pub after_ms: u64,
    /// Bound on the spool's size.
    pub max_bytes: u64,
    /// Longest a spooled event waits for its batch's fsync.
    pub sync_ms: u64,
    /// How often a non-empty spool tries a replay.
    pub replay_every_ms: u64,
}

impl Default for SpoolConfig {
    fn default() -> Self {
        Self {
            dir: std::env::temp_dir().join("reward-sdk-spool"),
            after_ms: 2_000,
            max_bytes: 1 << 30,
            sync_ms: 20,
            replay_every_ms: 1_000,
        }
    }
}

/// Where the dynamic part is read from while running.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DynamicConfig {
    /// A TOML file polled for changes.
    pub file: Option<PathBuf>,
    /// A Redis key holding a TOML document (set with `ops/config`).
    pub redis_key: Option<String>,
    /// Poll period.
    pub poll_ms: Option<u64>,
}

/// One virtual queue.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct QueueConfig {
    /// Topic on both brokers.
    pub topic: String,
    /// Producer tried first by users with `uid % 100 < ratio`.
    pub primary: String,
    /// Producer tried first by the others, and second by everyone.
    pub backup: String,
    /// 0..=100.
    #[serde(default = "hundred")]
    pub ratio: u8,
}

fn hundred() -> u8 {
    100
}

/// One reward type.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TypeConfig {
    /// Its virtual queue (default: `default_queue`).
    pub queue: Option<String>,
    /// Its largest amount (default: `limits.max_amount`).
    pub max_amount: Option<i64>,
}

/// The routing view: what may change at runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routing {
    /// Queues by name.
    pub queues: BTreeMap<String, QueueConfig>,
    /// Known reward types.
    pub types: BTreeMap<String, TypeConfig>,
    /// Queue of types that name none.
    pub default_queue: String,
    /// The global amount ceiling (`limits.max_amount`).
    pub max_amount: i64,
}

impl Routing {
    /// The queue name and config of a reward type; `None` for an unknown type.
    pub fn route(&self, reward_type: &str) -> Option<(&str, &QueueConfig)> {
        let t = self.types.get(reward_type)?;
        let name = t.queue.as_deref().unwrap_or(&self.default_queue);
        self.queues
            .get_key_value(name)
            .map(|(k, q)| (k.as_str(), q))
    }

    /// The queue config of a reward type; `None` for an unknown type.
    pub fn queue_for(&self, reward_type: &str) -> Option<&QueueConfig> {
        self.route(reward_type).map(|(_, q)| q)
    }

    /// The largest amount of a known type.
    pub fn max_amount(&self, reward_type: &str) -> Option<i64> {
        let t = self.types.get(reward_type)?;
        Some(t.max_amount.unwrap_or(self.max_amount).min(self.max_amount))
    }

    /// Reads the dynamic sections of a TOML document and checks them against the
    /// producers that exist.
    pub fn from_table(
        doc: &toml::Table,
        producers: &BTreeMap<String, ProducerConfig>,
        max_amount: i64,
    ) -> Result<Self, ConfigError> {
        #[derive(Deserialize)]
        struct View {
            #[serde(default)]
            queues: BTreeMap<String, QueueConfig>,
            #[serde(default)]
            types: BTreeMap<String, TypeConfig>,
            #[serde(default)]
            default_queue: Option<String>,
        }
        let view: View = toml::Value::Table(doc.clone())
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError::Parse(e.to_string()))?;
        let default_queue = match view.default_queue {
            Some(q) => q,
            None if view.queues.len() == 1 => {
                view.queues.keys().next().cloned().unwrap_or_default()
            }
            None => {
                return Err(invalid(
                    "default_queue is required when there are several queues",
                ));
            }
        };
        let routing = Routing {
            queues: view.queues,
            types: view.types,
            default_queue,
            max_amount,
        };
        routing.check(producers)?;
        Ok(routing)
    }

    fn check(&self, producers: &BTreeMap<String, ProducerConfig>) -> Result<(), ConfigError> {
        if self.queues.is_empty() {
            return Err(invalid("no [queues] defined"));
        }
        if !self.queues.contains_key(&self.default_queue) {
            return Err(invalid(format!(
                "default_queue {:?} is not a defined queue",
                self.default_queue
            )));
        }
        for (name, q) in &self.queues {
            if name.is_empty() || name.len() > 254 {
                return Err(invalid(format!(
                    "queue name {name:?}: 1..=254 bytes (the spool keeps the name in a byte, 255 marks a keyed record)"
                )));
            }
            if q.ratio > 100 {
                return Err(invalid(format!(
                    "queue {name}: ratio {} is not in 0..=100",
                    q.ratio
                )));
            }
            if q.topic.is_empty()
                || !q
                    .topic
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            {
                return Err(invalid(format!(
                    "queue {name}: topic {:?} must be non-empty [A-Za-z0-9._-]",
                    q.topic
                )));
            }
            for p in [&q.primary, &q.backup] {
                if !producers.contains_key(p) {
                    return Err(invalid(format!("queue {name}: no producer named {p:?}")));
                }
            }
        }
        if self.types.is_empty() {
            return Err(invalid(
                "no [types] defined: every reward type must be declared",
            ));
        }
        for (name, t) in &self.types {
            if let Some(q) = &t.queue
                && !self.queues.contains_key(q)
            {
                return Err(invalid(format!("type {name}: no queue named {q:?}")));
            }
            if let Some(m) = t.max_amount
                && m <= 0
            {
                return Err(invalid(format!(
                    "type {name}: max_amount {m} is not positive"
                )));
            }
        }
        Ok(())
    }
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
        let d = Limits::default();
        let l = raw.limits;
        let limits = Limits {
            max_id_len: l.max_id_len.unwrap_or(d.max_id_len),
            max_trade_no_len: l.max_trade_no_len.unwrap_or(d.max_trade_no_len),
            max_amount: l.max_amount.unwrap_or(d.max_amount),
            max_extension_fields: l.max_extension_fields.unwrap_or(d.max_extension_fields),
            max_extension_len: l.max_extension_len.unwrap_or(d.max_extension_len),
            max_description_len: l.max_description_len.unwrap_or(d.max_description_len),
        };
        if limits.max_amount <= 0 {
            return Err(invalid("limits.max_amount must be positive"));
        }
        if raw.producers.is_empty() {
            return Err(invalid("no [producers] defined"));
        }
        for (name, p) in &raw.producers {
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
        let b = &raw.batch;
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
        if raw.retry.backoff_initial_ms == 0
            || raw.retry.backoff_max_ms < raw.retry.backoff_initial_ms
        {
            return Err(invalid("retry: 0 < backoff_initial_ms <= backoff_max_ms"));
        }
        if raw.store.max_tokens_per_user == 0
            || raw.store.pipeline_max == 0
            || raw.store.pool_size == 0
            || raw.store.max_pending == 0
            || raw.store.retry_for_ms == 0
        {
            return Err(invalid(
                "store: max_tokens_per_user, pipeline_max, pool_size, max_pending and retry_for_ms must be positive",
            ));
        }
        if raw.store.max_pending > MAX_PENDING_WRITES {
            return Err(invalid(format!(
                "store.max_pending is at most {MAX_PENDING_WRITES} (each unanswered write is held in memory)"
            )));
        }
        if raw.store.retry_for_ms < 2 * raw.store.timeout_ms {
            return Err(invalid(
                "store.retry_for_ms must be at least twice store.timeout_ms (time for a retry after a timed-out attempt)",
            ));
        }
        if raw.store.retry_for_ms / 1000 >= raw.store.ttl_secs {
            return Err(invalid(
                "store.retry_for_ms must be shorter than store.ttl_secs (a write retried past the hash's lifetime would store an expired list)",
            ));
        }
        if raw.store.strict && raw.store.write_mode == WriteMode::Deferred {
            return Err(invalid(
                "store: strict = true needs each write's answer, which write_mode = \"deferred\" (the default) does not wait for; set write_mode = \"direct\"",
            ));
        }
        if raw.store.ttl_secs == 0 || raw.token.ttl_secs == 0 {
            return Err(invalid(
                "store.ttl_secs and token.ttl_secs must be positive",
            ));
        }
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
mod tests {
    use super::*;

    const BASE: &str = r#"
        default_queue = "massive"
        [producers.k]
        kind = "kafka"
        brokers = "127.0.0.1:19092"
        [producers.r]
        kind = "rocketmq"
        namesrv = "127.0.0.1:9876"
        [queues.massive]
        topic = "t-massive"
        primary = "k"
        backup = "r"
        ratio = 70
        [queues.special]
        topic = "t-special"
        primary = "r"
        backup = "k"
        [types.cash]
        max_amount = 100
        [types.coupon]
        queue = "special"
    "#;

    fn with(extra: &str) -> Result<SdkConfig, ConfigError> {
        SdkConfig::from_toml_str(&format!("{BASE}\n{extra}"))
    }

    #[test]
    fn routes_types_to_queues() {
        let c = with("").unwrap();
        assert_eq!(c.routing.route("cash").map(|r| r.0), Some("massive"));
        assert_eq!(c.routing.route("coupon").map(|r| r.0), Some("special"));
        assert_eq!(c.routing.queue_for("coupon").map(|q| q.ratio), Some(100));
        assert_eq!(c.routing.route("coin"), None);
        assert_eq!(c.routing.max_amount("cash"), Some(100));
        assert_eq!(c.routing.max_amount("coupon"), Some(1_000_000_000_000));
    }

    #[test]
    fn refuses_inconsistent_documents() {
        let bad = [
            (
                "[queues.x]\ntopic = \"t\"\nprimary = \"nope\"\nbackup = \"k\"",
                "no producer",
            ),
            ("[types.coin]\nqueue = \"nope\"", "no queue named"),
            (
                "[queues.y]\ntopic = \"t y\"\nprimary = \"k\"\nbackup = \"k\"",
                "topic",
            ),
            (
                "[queues.y]\ntopic = \"t\"\nprimary = \"k\"\nbackup = \"k\"\nratio = 101",
                "ratio",
            ),
            ("[batch]\nmax_events = 0", "batch"),
            ("[batch]\nin_flight_batches = 0", "in_flight_batches"),
            ("[batch]\nin_flight_batches = 70000", "in_flight_batches"),
            ("[store]\nmax_tokens_per_user = 0", "store"),
            ("[store]\nmax_pending = 0", "max_pending"),
            ("[store]\nmax_pending = 2000000", "max_pending"),
            ("[store]\nretry_for_ms = 0", "retry_for_ms"),
            (
                "[store]\nttl_secs = 60\nretry_for_ms = 60000",
                "retry_for_ms",
            ),
            ("[store]\nwrite_mode = \"fast\"", "write_mode"),
            ("[store]\nstrict = true", "strict = true needs"),
            ("[types.coin]\nmax_amount = 0", "max_amount"),
        ];
        for (extra, want) in bad {
            let err = with(extra).expect_err(extra).to_string();
            assert!(err.contains(want), "{extra}: {err}");
        }
        // Unknown keys are typos, not silently ignored.
        let err = with("[batch]\nlinger = 5").unwrap_err();
        assert!(matches!(err, ConfigError::Parse(_)), "{err}");
        let err = with("[queues.a]\ntopic = 1").unwrap_err();
        assert!(matches!(err, ConfigError::Parse(_)), "{err}");
    }

    #[test]
    fn env_overrides_reach_nested_keys() {
        let mut doc: toml::Table = BASE.parse().unwrap();
        apply_env(
            &mut doc,
            [
                (
                    "REWARD_SDK__QUEUES__MASSIVE__RATIO".to_string(),
                    "5".to_string(),
                ),
                ("REWARD_SDK__STORE__REDIS_URL".into(), "redis://x:1".into()),
                ("REWARD_SDK__STORE__STRICT".into(), "true".into()),
                ("REWARD_SDK__STORE__WRITE_MODE".into(), "direct".into()),
                ("OTHER".into(), "ignored".into()),
            ],
        )
        .unwrap();
        let c = SdkConfig::from_table(&doc).unwrap();
        assert_eq!(c.routing.queues["massive"].ratio, 5);
        assert_eq!(c.store.redis_url, "redis://x:1");
        assert!(c.store.strict);
        let err = apply_env(
            &mut doc,
            [("REWARD_SDK__QUEUES__MASSIVE__RATIO__X".into(), "1".into())],
        );
        assert!(err.is_err());
    }
}
