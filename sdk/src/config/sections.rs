//! The sections of the SDK configuration: token store, token keys, broker
//! connections, batching, retry, spool, dynamic source, and the per-queue and
//! per-type entries of the routing.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

/// Where the token store lives and how it behaves.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// `redis://host:port` (a cluster URL works too: keys carry hash tags).
    pub redis_url: String,
    /// Prefix of every key the store writes.
    pub key_prefix: String,
    /// TTL of a user's token hash, re-armed by every write that adds a token.
    pub ttl_secs: u64,
    /// Most tokens one user may hold in one activity (500 in a fireworks show,
    /// docs/design.md), waiting for their credit (a credited token frees its place).
    pub max_tokens_per_user: u32,
    /// When true (direct and batched modes only), a failed first token write fails the
    /// reward at once. When false: in direct mode the caller tries again until
    /// `write_wait_ms` has passed and then the reward is refused (an answered call's
    /// token is always stored); in batched mode the write is retried in the background
    /// and the reward goes on (see [`crate::store`]).
    pub strict: bool,
    /// Direct mode: how long a `send_reward` keeps trying its token write (its first
    /// attempt and retries 20 ms doubling to 200 ms apart) while Redis fails, before
    /// the reward is refused, ms. Each attempt may take up to `timeout_ms`.
    pub write_wait_ms: u64,
    /// Direct mode, not strict (default on): a reward may be answered from the queue
    /// when Redis is slow or down ([`crate::HeldBy::Queue`]). A token write
    /// Redis has not answered within `queue_after_ms` sends the reward's event at
    /// once, and the call answers as soon as either store holds the reward, within
    /// `write_wait_ms` from its start: a broker's acknowledgement within
    /// `batch.send_timeout_ms` per producer tried, or, once both of the queue's
    /// producers are known down (`spool.after_ms`), the spool's next sync (every
    /// `spool.sync_ms`, plus the batch's linger and the fsync). A call neither store
    /// holds by then is refused in doubt with its event on its way
    /// ([`crate::SendError::InDoubt`]): it will most likely be credited. Off, a call
    /// answers only once Redis holds its token, and Redis down refuses every call.
    pub answer_from_queue: bool,
    /// With `answer_from_queue`: how long a token write has to decide the call alone
    /// (stored, or refused by the cap or by Redis refusing the command) before the
    /// reward's event goes too, ms. The per-user cap refuses only rewards whose write
    /// answers in this time.
    pub queue_after_ms: u64,
    /// How token writes reach Redis (see [`WriteMode`]).
    pub write_mode: WriteMode,
    /// Most writes in one pipeline round trip (batched and deferred modes).
    pub pipeline_max: usize,
    /// Redis connections in the pool; also how many direct-mode write calls are in
    /// flight at once (writes that arrive while all are busy share the next call).
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
    /// Shards of the due index (see [`crate::store`], "Due index"). Fixed at the
    /// store's first use: a store indexed with another count refuses to start.
    pub due_shards: u32,
}

/// How the token store sends its writes. All run the same cap-checking script; direct
/// and batched differ in how many task hops a write takes, deferred in whether
/// `send_reward` waits for the answer at all (see [`crate::store`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WriteMode {
    /// The default. Each `send_reward` sends its script call itself, on a pooled
    /// connection, and waits for it; fred already pipelines concurrent commands on one
    /// connection. The per-user cap can refuse the reward (`TooManyTokens`); a call
    /// answers only once its token and its due-index entry are stored or (with
    /// `answer_from_queue`, when Redis has not answered within `queue_after_ms`) a
    /// broker or the spool holds its event
    /// ([`crate::HeldBy`]), so a process that dies loses no reward it showed; a reward
    /// neither holds within `write_wait_ms` (with `strict`: a failed first write) is
    /// refused. Lower latency
    /// than `Batched` in the paced benchmark at the same throughput
    /// (docs/findings/benchmarks-history.md).
    #[default]
    Direct,
    /// One writer task gathers every caller's write and sends explicit pipelines of up
    /// to `pipeline_max`, at most `pool_size` at once.
    Batched,
    /// Opt-in, and it loses rewards: as batched, but `send_reward` returns without
    /// waiting for Redis (no round trip in the call). A process that dies takes the
    /// writes it had not sent yet with it, rewards its users were shown and that are
    /// never credited (118 of about 101 000 when an SDK host is killed mid-rain,
    /// docs/chaos.md). A failed write is retried in the background; a capped one is
    /// counted and the reward goes on; not allowed with `strict`.
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
            write_wait_ms: 1_000,
            answer_from_queue: true,
            queue_after_ms: 20,
            write_mode: WriteMode::Direct,
            pipeline_max: 512,
            pool_size: 4,
            timeout_ms: 2_000,
            max_pending: 65_536,
            retry_for_ms: 60_000,
            due_shards: 64,
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
        /// librdkafka settings added to ours (e.g. `"linger.ms" = "10"`). A number or
        /// a boolean is taken as its text (`"linger.ms" = 10`), so an environment
        /// override (`REWARD_SDK__PRODUCERS__K__SETTINGS__ENABLE.IDEMPOTENCE=false`)
        /// sets one too.
        #[serde(default, deserialize_with = "client_settings")]
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

/// A client's settings table: every value a string, or a number or boolean taken as
/// its text; a table or an array is refused (no client setting is one).
pub fn client_settings<'de, D>(de: D) -> Result<BTreeMap<String, String>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let raw = BTreeMap::<String, toml::Value>::deserialize(de)?;
    raw.into_iter()
        .map(|(k, v)| {
            let text = match v {
                toml::Value::String(s) => s,
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Float(f) => f.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                other => {
                    return Err(serde::de::Error::custom(format!(
                        "setting {k:?}: expected a string, number or boolean, not {}",
                        other.type_str()
                    )));
                }
            };
            Ok((k, text))
        })
        .collect()
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
    /// Events per broker request (100 as in docs/design.md: a hundred times fewer
    /// requests than one event each).
    pub max_events: usize,
    /// Longest an event waits for its batch to fill.
    pub linger_ms: u64,
    /// Batches per virtual queue on their way to a broker at once (sent, delivery not
    /// yet confirmed). A batch is confirmed only when every event in it is
    /// acknowledged, so this window and the broker's acknowledgement latency bound a
    /// queue's rate; events in flight stay in memory for retry, at most
    /// `in_flight_batches * max_events` of them. It must cover the producer's linger
    /// plus the broker's acknowledgement time: with librdkafka's 20 ms linger and
    /// batches of 100, a window of 8 holds `send_reward` far below a raw producer on
    /// the local stack and 64 does not (docs/findings/benchmarks-history.md).
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
    /// Both producers of a queue failing for this long sends its events to the spool:
    /// those that failed on both, and then its new events at once, without a send,
    /// within `replay_every_ms` of a batch finding both down (past it, one batch per
    /// period tries them again, as the spool's replays do).
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
    /// Events per broker record (1..=1 000): the events of one send are packed into
    /// compound records of up to this many ([`proto::pack`]); 1 writes one record
    /// per event, the format readers from before packs expect. Every reader of the
    /// topic must unpack (the consumer and the test read-backs do).
    #[serde(default = "pack_events")]
    pub pack_events: usize,
}

fn hundred() -> u8 {
    100
}

/// The default events per record: the source design's 100 messages per send, now
/// in one record rather than 100.
fn pack_events() -> usize {
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
