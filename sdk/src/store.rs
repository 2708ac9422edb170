//! The token store: every token the SDK mints, kept in Redis so the wallet can list
//! and validate what a user won even if the client lost it.
//!
//! # Layout
//! One hash per user and activity: key `{prefix}:{{user}}:{activity}`, field = trade
//! number, value = the sealed token. The hash tag is the user id, so in a Redis
//! Cluster all of one user's tokens (across activities) live in one slot and the
//! wallet page reads them from one node. The hash's TTL is refreshed on every write.
//!
//! # Writes
//! A write is one `EVALSHA` of a small script that refuses a new field once the hash
//! holds `max_tokens_per_user` (re-writing an existing trade number is always allowed:
//! the same reward issued twice is one token). How writes travel is
//! [`crate::config::WriteMode`]:
//! - **direct** (default): the caller sends its script call on the next pooled
//!   connection and awaits the reply. fred pipelines concurrent commands on a
//!   connection by itself, so many callers still share round trips, and a write takes
//!   no extra task hop. Measured (BENCHMARKS.md): median `send_reward` ≈0.4 ms against
//!   ≈0.9 ms for batched, same throughput;
//! - **batched**: one writer task gathers every caller's write and sends explicit
//!   pipelines of up to `pipeline_max` scripts, at most `pool_size` at once; each
//!   write then passes through two more tasks (writer, pipeline) before its reply;
//! - **deferred**: the write goes to the same writer task, and the caller does not
//!   wait for its reply ([`TokenStore::put_deferred`]). `send_reward` then costs no
//!   Redis round trip at all: its latency is the SDK's own CPU work (validation, the
//!   mint, two channel sends), a few microseconds, whatever Redis and the machine are
//!   doing. The price, chosen knowingly by whoever sets the mode: the answer comes
//!   after the call has returned, so a failed write or one refused by the cap cannot
//!   fail the reward; both are counted ([`StoreStats::deferred_failed`], the SDK's
//!   `token_write_failures`) and the reward goes on without a listed token, exactly
//!   as a failed write does outside strict mode (the brief's own behaviour: the
//!   source design never retried token writes either). The cap then bounds the
//!   hash's size rather than refusing rewards. A deferred write is in memory until
//!   Redis answers (usually well under a millisecond); `close` waits for them, but a
//!   crash loses the unanswered ones, which is the same as a failed write. A wallet
//!   that checks the token in the moment before its write lands is told `UNKNOWN`
//!   (the reward service never credits an unknown token from the wallet: its event
//!   is still on the way), and `LEGAL` once it has. Strict mode and deferred writes
//!   contradict each other, so the config refuses the pair.
//!
//! In every mode a reply of `NOSCRIPT` (Redis restarted and lost its script cache) loads
//! the script again and sends once more; the script is idempotent per field.
//!
//! Whether a failed write fails the reward is the caller's choice
//! ([`crate::config::StoreConfig::strict`]); this module reports every outcome.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fred::prelude::*;
use fred::types::{ClusterHash, CustomCommand};
use tokio::sync::{Notify, Semaphore, mpsc, oneshot};

use crate::config::{StoreConfig, WriteMode};

/// The cap-checking write. KEYS[1] hash; ARGV: field, value, cap, ttl seconds.
/// Returns 1 when stored (new or replaced), 0 when the cap refused it.
const WRITE_LUA: &str = r"
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[4])
return 1
";

/// Token store failures.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// Redis refused, timed out or is unreachable.
    #[error("token store: {0}")]
    Redis(String),
    /// The user already holds the most tokens allowed in this activity.
    #[error("user already holds {cap} tokens in this activity")]
    CapReached {
        /// The cap.
        cap: u32,
    },
    /// The store is shutting down.
    #[error("token store closed")]
    Closed,
}

impl From<fred::error::Error> for StoreError {
    fn from(e: fred::error::Error) -> Self {
        StoreError::Redis(e.to_string())
    }
}

struct Write {
    key: String,
    field: String,
    value: String,
    done: Reply,
}

/// Who hears a write's outcome.
enum Reply {
    /// A caller waiting for it.
    Wait(oneshot::Sender<Result<(), StoreError>>),
    /// Nobody: the writer counts it ([`TokenStore::put_deferred`]).
    Deferred,
}

/// Counts since start.
#[derive(Debug, Default)]
pub struct StoreStats {
    /// Tokens written.
    pub written: AtomicU64,
    /// Writes refused by the cap.
    pub capped: AtomicU64,
    /// Writes that failed in Redis.
    pub failed: AtomicU64,
    /// Pipelines sent.
    pub pipelines: AtomicU64,
    /// Deferred writes handed over and not yet answered by Redis.
    pub deferred_pending: AtomicU64,
    /// Deferred writes that failed or that the cap refused (their rewards went on).
    pub deferred_failed: AtomicU64,
}

/// A handle to the token store; cheap to clone.
#[derive(Clone)]
pub struct TokenStore {
    sha: Arc<String>,
    pool: Pool,
    cfg: Arc<StoreConfig>,
    /// The writer task's queue (batched and deferred writes).
    tx: mpsc::Sender<Write>,
    stats: Arc<StoreStats>,
    /// Told when the last pending deferred write is answered.
    drained: Arc<Notify>,
}

impl std::fmt::Debug for TokenStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenStore")
            .field("key_prefix", &self.cfg.key_prefix)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl TokenStore {
    /// Connects to Redis, loads the script and starts the writer task.
    pub async fn connect(cfg: StoreConfig) -> Result<Self, StoreError> {
        let config = Config::from_url(&cfg.redis_url)?;
        let timeout = Duration::from_millis(cfg.timeout_ms);
        let pool = Builder::from_config(config)
            .with_connection_config(|c| {
                c.connection_timeout = timeout;
                c.internal_command_timeout = timeout;
            })
            .with_performance_config(|p| {
                p.default_command_timeout = timeout;
            })
            .set_policy(ReconnectPolicy::new_exponential(0, 100, 2_000, 2))
            .build_pool(cfg.pool_size)?;
        pool.init().await?;
        let sha: String = pool.next().script_load(WRITE_LUA).await?;
        let cfg = Arc::new(cfg);
        let stats = Arc::new(StoreStats::default());
        let sha = Arc::new(sha);
        // The writer runs in every mode: direct mode's `put` does not use it, but
        // `put_deferred` does.
        let drained = Arc::new(Notify::new());
        let (tx, rx) = mpsc::channel(cfg.pipeline_max * cfg.pool_size * 4);
        tokio::spawn(writer(
            pool.clone(),
            cfg.clone(),
            sha.clone(),
            rx,
            Counts {
                stats: stats.clone(),
                drained: drained.clone(),
            },
        ));
        Ok(Self {
            sha,
            pool,
            cfg,
            tx,
            stats,
            drained,
        })
    }

    /// The hash key of a user's tokens in an activity.
    pub fn key(&self, user_id: &str, activity_id: &str) -> String {
        format!("{}:{{{user_id}}}:{activity_id}", self.cfg.key_prefix)
    }

    /// Counts since start.
    pub fn stats(&self) -> &StoreStats {
        &self.stats
    }

    /// Stores a sealed token and waits for Redis's answer (in deferred mode too).
    pub async fn put(
        &self,
        user_id: &str,
        activity_id: &str,
        trade_no: &str,
        sealed: &str,
    ) -> Result<(), StoreError> {
        let key = self.key(user_id, activity_id);
        if self.cfg.write_mode == WriteMode::Direct {
            // Direct: no channel, no owned copies of the field and the token.
            return self.put_direct(&key, trade_no, sealed).await;
        }
        let (done, rx) = oneshot::channel();
        let w = Write {
            key,
            field: trade_no.to_string(),
            value: sealed.to_string(),
            done: Reply::Wait(done),
        };
        self.tx.send(w).await.map_err(|_| StoreError::Closed)?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Hands a sealed token to the writer task and returns without waiting for Redis
    /// (see "deferred" in the module doc). Waits only while the writer's queue is full,
    /// which Redis's own timeout bounds. The outcome is counted in [`StoreStats`]: a
    /// failure or a cap refusal in `deferred_failed`, and is logged.
    pub async fn put_deferred(
        &self,
        user_id: &str,
        activity_id: &str,
        trade_no: &str,
        sealed: String,
    ) -> Result<(), StoreError> {
        // Room first, then count, then hand over with no await in between: a caller
        // that gives up (its future dropped) while waiting for room leaves neither a
        // write nor a count behind.
        let permit = self.tx.reserve().await.map_err(|_| StoreError::Closed)?;
        self.stats.deferred_pending.fetch_add(1, Ordering::AcqRel);
        permit.send(Write {
            key: self.key(user_id, activity_id),
            field: trade_no.to_string(),
            value: sealed,
            done: Reply::Deferred,
        });
        Ok(())
    }

    /// Waits until Redis has answered every deferred write, or `deadline` passes;
    /// returns how many are still unanswered (0 on a clean flush).
    pub async fn flush(&self, deadline: Duration) -> u64 {
        let until = tokio::time::Instant::now() + deadline;
        loop {
            let notified = self.drained.notified();
            tokio::pin!(notified);
            // Registered before the check, so an answer in between is not missed.
            notified.as_mut().enable();
            let left = self.stats.deferred_pending.load(Ordering::Acquire);
            if left == 0 {
                return 0;
            }
            if tokio::time::timeout_at(until, notified).await.is_err() {
                return self.stats.deferred_pending.load(Ordering::Acquire);
            }
        }
    }

    async fn put_direct(&self, key: &str, field: &str, value: &str) -> Result<(), StoreError> {
        let client = self.pool.next();
        let cap = self.cfg.max_tokens_per_user;
        let ttl = i64::try_from(self.cfg.ttl_secs).unwrap_or(i64::MAX);
        let args = || -> Vec<Value> {
            vec![
                Value::from(field),
                Value::from(value),
                Value::from(i64::from(cap)),
                Value::from(ttl),
            ]
        };
        let mut r: Result<i64, fred::error::Error> =
            client.evalsha(self.sha.as_str(), key, args()).await;
        if matches!(&r, Err(e) if e.details().starts_with("NOSCRIPT")) {
            r = match client.script_load::<String, _>(WRITE_LUA).await {
                Ok(_) => client.evalsha(self.sha.as_str(), key, args()).await,
                Err(e) => Err(e),
            };
        }
        outcome(r, cap, &self.stats)
    }

    /// Every token of a user in an activity: trade number → sealed token.
    pub async fn list(
        &self,
        user_id: &str,
        activity_id: &str,
    ) -> Result<HashMap<String, String>, StoreError> {
        Ok(self
            .pool
            .next()
            .hgetall(self.key(user_id, activity_id))
            .await?)
    }

    /// The sealed token stored under a trade number, if any.
    pub async fn get(
        &self,
        user_id: &str,
        activity_id: &str,
        trade_no: &str,
    ) -> Result<Option<String>, StoreError> {
        Ok(self
            .pool
            .next()
            .hget(self.key(user_id, activity_id), trade_no)
            .await?)
    }

    /// Removes a token (once its reward is credited); true if it was there.
    pub async fn remove(
        &self,
        user_id: &str,
        activity_id: &str,
        trade_no: &str,
    ) -> Result<bool, StoreError> {
        let n: i64 = self
            .pool
            .next()
            .hdel(self.key(user_id, activity_id), trade_no)
            .await?;
        Ok(n > 0)
    }

    /// The Redis pool (for callers that share the connection).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }
}

/// The writer task's counters and the flush signal.
#[derive(Clone)]
struct Counts {
    stats: Arc<StoreStats>,
    drained: Arc<Notify>,
}

async fn writer(
    pool: Pool,
    cfg: Arc<StoreConfig>,
    sha: Arc<String>,
    mut rx: mpsc::Receiver<Write>,
    counts: Counts,
) {
    let lanes = Arc::new(Semaphore::new(cfg.pool_size));
    let ttl = i64::try_from(cfg.ttl_secs).unwrap_or(i64::MAX);
    loop {
        let Some(first) = rx.recv().await else {
            break;
        };
        let mut batch = vec![first];
        while batch.len() < cfg.pipeline_max {
            match rx.try_recv() {
                Ok(w) => batch.push(w),
                Err(_) => break,
            }
        }
        // Once a batch, not once a write: the backlog Redis has not answered yet.
        metrics::gauge!("reward_sdk_token_writes_pending")
            .set(counts.stats.deferred_pending.load(Ordering::Relaxed) as f64);
        // At most pool_size pipelines in flight; the next batch gathers meanwhile.
        let Ok(permit) = lanes.clone().acquire_owned().await else {
            break;
        };
        let client = pool.next().clone();
        let (sha, counts, cap) = (sha.clone(), counts.clone(), cfg.max_tokens_per_user);
        tokio::spawn(async move {
            send_pipeline(&client, &sha, batch, cap, ttl, &counts).await;
            drop(permit);
        });
    }
}

async fn send_pipeline(
    client: &Client,
    sha: &str,
    batch: Vec<Write>,
    cap: u32,
    ttl: i64,
    counts: &Counts,
) {
    let stats = &*counts.stats;
    stats.pipelines.fetch_add(1, Ordering::Relaxed);
    let mut results = run_pipeline(client, sha, &batch, cap, ttl).await;
    let noscript = results
        .iter()
        .any(|r| matches!(r, Err(e) if e.details().starts_with("NOSCRIPT")));
    if noscript {
        // Redis restarted and lost its script cache: load again, send again (the
        // script is idempotent per field).
        match client.script_load::<String, _>(WRITE_LUA).await {
            Ok(_) => results = run_pipeline(client, sha, &batch, cap, ttl).await,
            Err(e) => results = batch.iter().map(|_| Err(e.clone())).collect(),
        }
    }
    let (mut answered, mut failed, mut first_error) = (0_u64, 0_u64, None);
    for (w, r) in batch.into_iter().zip(results) {
        let result = outcome(r, cap, stats);
        match w.done {
            // The caller may have given up waiting; nothing to do then.
            Reply::Wait(tx) => {
                let _ = tx.send(result);
            }
            Reply::Deferred => {
                answered += 1;
                if let Err(e) = result {
                    failed += 1;
                    first_error.get_or_insert(e);
                }
            }
        }
    }
    if failed > 0 {
        stats.deferred_failed.fetch_add(failed, Ordering::Relaxed);
        metrics::counter!("reward_sdk_token_write_failures_total").increment(failed);
        if let Some(e) = first_error {
            // One line per pipeline, not per token: a Redis outage must not flood the log.
            tracing::warn!(failed, error = %e, "deferred token writes not stored; their rewards go on");
        }
    }
    if answered > 0 && stats.deferred_pending.fetch_sub(answered, Ordering::AcqRel) == answered {
        counts.drained.notify_waiters();
    }
}

/// What one script call's reply means for the caller, counted.
fn outcome(
    reply: Result<i64, fred::error::Error>,
    cap: u32,
    stats: &StoreStats,
) -> Result<(), StoreError> {
    match reply {
        Ok(1) => {
            stats.written.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
        Ok(_) => {
            stats.capped.fetch_add(1, Ordering::Relaxed);
            Err(StoreError::CapReached { cap })
        }
        Err(e) => {
            stats.failed.fetch_add(1, Ordering::Relaxed);
            Err(StoreError::from(e))
        }
    }
}

async fn run_pipeline(
    client: &Client,
    sha: &str,
    batch: &[Write],
    cap: u32,
    ttl: i64,
) -> Vec<Result<i64, fred::error::Error>> {
    let calls = batch
        .iter()
        .map(|w| {
            vec![
                Value::from(1_i64),
                Value::from(w.key.as_str()),
                Value::from(w.field.as_str()),
                Value::from(w.value.as_str()),
                Value::from(i64::from(cap)),
                Value::from(ttl),
            ]
        })
        .collect();
    evalsha_pipeline(client, sha, calls).await
}

/// Sends one `EVALSHA` of the loaded script `sha` per call, all in one pipeline (one
/// write and one read on the connection), and answers each call's reply in order.
/// Each call is `numkeys, keys..., args...`. A connection-level failure answers every
/// call with that error. A `NOSCRIPT` reply is the caller's to handle (load the
/// script, send those calls again). Shared with the reward service's ledger.
pub async fn evalsha_pipeline<R: FromValue>(
    client: &Client,
    sha: &str,
    calls: Vec<Vec<Value>>,
) -> Vec<Result<R, fred::error::Error>> {
    let n = calls.len();
    let every = |e: fred::error::Error| (0..n).map(|_| Err(e.clone())).collect();
    let pipe = client.pipeline();
    for call in calls {
        let mut args = Vec::with_capacity(call.len() + 1);
        args.push(Value::from(sha));
        args.extend(call);
        // fred's pipelines have no Lua interface, so EVALSHA goes as a custom command;
        // in a cluster it is routed by its key (argument 2: sha, numkeys, key, ...).
        let queued: Result<(), _> = pipe
            .custom(
                CustomCommand::new_static("EVALSHA", ClusterHash::Offset(2), false),
                args,
            )
            .await;
        if let Err(e) = queued {
            // Nothing was sent yet: every call gets the error.
            return every(e);
        }
    }
    let results = pipe.try_all::<R>().await;
    if results.len() == n {
        results
    } else {
        // A connection-level failure answers once for the whole pipeline.
        let e = results
            .into_iter()
            .find_map(Result::err)
            .unwrap_or_else(|| {
                fred::error::Error::new(
                    fred::error::ErrorKind::Protocol,
                    "pipeline answered a different number of replies",
                )
            });
        every(e)
    }
}
