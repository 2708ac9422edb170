//! The token store: every token the SDK mints, kept in Redis so the wallet can list
//! and validate what a user won even if the client lost it.
//!
//! # Layout
//! One hash per user and activity: key `{prefix}:{{user}}:{activity}`, field = trade
//! number, value = the sealed token while its reward waits for its credit, `!` and the
//! token once credited ([`life`] has the states and why one field holds them). The hash tag is the user id, so in a Redis
//! Cluster all of one user's tokens (across activities) live in one slot and the
//! wallet page reads them from one node. Every write that adds a token re-arms the
//! hash's TTL (once per hash per batch of writes; a retried write that only replaces
//! its token does not), so every token lives in the store `ttl_secs` after its write:
//! the sweeper finds a reward's token here, so the hash must not expire under it.
//!
//! # Due index
//! Before its token, each write puts an entry in a *due index*: sorted sets
//! `{prefix}:{{due.N}}` (`store.due_shards` of them, N = crc32(user) mod shards, each
//! its own hash tag), member `user|activity|trade`, score the write's time (`ZADD NX`,
//! so a retry keeps the first time). The credit's token move removes the entry; what
//! stays is a reward not credited yet, oldest first. The reward service's sweeper
//! (`reward_service::sweeper`) grants those that waited past a grace period, which is
//! how a reward whose event died with its process (or was lost by a queue) is still
//! credited: the token store, not the message, is the record of what was won. The entry
//! goes first and the token only after Redis acknowledged it, so a token is never
//! stored without one; an entry without a token (the process died in between) is
//! counted by the sweeper as a write that never landed. The shard count is recorded at
//! the store's first use (`{prefix}:due-shards`) and a store started with another
//! count refuses to start ([`StoreError::DueShards`]); if the pin itself is gone, the
//! index's own keys and entries decide before a new pin is written ([`layout`]). Cost: one `ZADD` per due shard
//! per pipeline of writes (all of the pipeline's entries for that shard in it; a
//! pipeline sent before the tokens' scripts: one more round trip per batch of writes;
//! in direct mode on a cluster one more round trip per call) and a batched `ZREM` per
//! credit batch. On a single Redis a direct write is one call: the script adds the
//! entry, then writes the token, atomically ([`life::indexed_write_lua`]); a cluster
//! keeps the due shards and the users' hashes in different slots, which one script may
//! not touch together.
//!
//! # Writes
//! A write is one `EVALSHA` of a small script that refuses a new field once the hash
//! holds `max_tokens_per_user` (re-writing an existing trade number is always allowed:
//! the same reward issued twice is one token, which is also what makes a retried
//! write harmless), and writes nothing pending when the reward is already credited
//! (its field says so, [`life::Field`]): a write that lands late must not list a
//! credited reward as pending again. How writes travel is [`crate::config::WriteMode`]:
//! - **direct** (default): the caller sends its index entry and its script call (one
//!   call on a single Redis, two on a cluster) on the next pooled connection and awaits
//!   the replies. On a single Redis, writes that wait together (every one of
//!   `pool_size` call slots busy) go as one call, each decided and answered as alone
//!   (`combine`: a script call's own cost is most of a write's). The cap refuses the reward (`TooManyTokens`), and so
//!   does a refusal of the command itself. A Redis failure is tried again by the
//!   caller (20 ms doubling to 200 ms apart) until `write_wait_ms` has passed, then
//!   the reward is refused: a call that answers has its token stored, so a process
//!   that dies loses no reward it showed. With `strict`, the first failure refuses.
//!   Its cost is the round trips in the call (BENCHMARKS.md, `reward-bench send`);
//! - **batched**: as direct, but the call goes through the writer task's explicit
//!   pipelines (two more task hops per write), and a failed first attempt is retried
//!   in the background while the call answers ([`Submitted::Retrying`]);
//! - **deferred** (opt-in, loses rewards): the write goes to one writer task, which
//!   sends explicit pipelines of up to `pipeline_max` scripts, at most `pool_size` at
//!   once, and the caller does not wait for the reply ([`TokenStore::submit`] answers
//!   [`Submitted::Deferred`]). `send_reward` then holds no Redis round trip (call p99
//!   at half load ≈20 µs against ≈1.7 ms direct). What it gives up: a process that
//!   dies takes its unsent writes with it, rewards its users were shown that nothing
//!   records and nobody credits (118 of about 101 000 when an SDK host was killed
//!   mid-rain, docs/chaos.md); the per-user cap can no longer refuse the reward (a
//!   capped write is counted in [`StoreStats::unstored`] instead); and a wallet that
//!   checks the token before its write lands is told `UNKNOWN`, then `LEGAL`. Its
//!   throughput figure is not the SDK's: what Redis can store is.
//!
//! # When Redis is slow or failing: retries and back-pressure
//! A write that fails or times out is not dropped. It is retried in the background
//! with capped exponential backoff (100 ms doubling to 2 s, with jitter) until it is
//! stored, the cap refuses it, Redis refuses the command itself (a key of another
//! type: that fails the same way every time), or `retry_for_ms` has passed since its
//! first attempt (then it is given up: counted in [`StoreStats::unstored`], the
//! `reward_sdk_token_write_failures_total` counter, and a log line at most once a
//! second). Given up means "not confirmed": an attempt that timed out may still be in
//! a socket and run when Redis recovers, so a given-up token can appear later.
//! A timed-out write may have landed; sending it again is harmless (same field, same
//! value). In batched mode the first attempt is the caller's, and a failure hands the
//! write to the same retry path ([`Submitted::Retrying`]) unless `strict` is on, in
//! which case the reward is refused; direct mode keeps the retries in the call
//! (above).
//!
//! Every write not yet answered (queued, in flight, waiting for its retry) holds one
//! of `max_pending` places ([`TokenStore::hold`]). When all are taken the writer has
//! fallen behind Redis, and a new write waits for a place at most the caller's wait
//! (`send_reward`: `batch.enqueue_wait_ms`), then is refused with
//! [`StoreError::Backlog`], which `send_reward` answers as `Backpressure`: the
//! activity service is told to slow down instead of being handed rewards whose tokens
//! would never be stored. The bound also caps the memory the backlog takes
//! (`max_pending` × about 500 bytes).
//!
//! Unanswered writes live in memory: `close` waits for them (its report counts what is
//! left, `tokens_left`), and a crash loses them, exactly as a failed write. In every
//! mode a reply of `NOSCRIPT` (Redis restarted, or a cluster node that never saw the
//! script or was just promoted) sends the call once more with the script's body.

mod combine;
pub mod layout;
pub mod life;
mod writer;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fred::prelude::*;
use reward_runtime::script::Script;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, oneshot};

use reward_runtime::keyspace::LayoutProof;

use self::combine::Combiner;
use self::life::{INDEXED_WRITE_MANY_LUA, WRITE_LUA, WRITE_MANY_LUA, indexed_write_lua};
use self::writer::{Reply, Shared, Unsettled, Write, outcome, settle};
use crate::config::{StoreConfig, WriteMode};

/// How often the store's start asks Redis before it gives up: a store that starts
/// beside a busy Redis (a loaded machine, an AOF rewrite's fork, a Redis still loading
/// its AOF) waits a little rather than failing its service's start on one slow
/// answer. What may succeed if sent again is what a token write retries too
/// (`writer::transient`). A layout that refuses is an
/// answer and is never asked again.
const START_ATTEMPTS: u32 = 3;
/// The pause before the second attempt (twice that before the third).
const START_PAUSE: Duration = Duration::from_millis(500);

/// The least time a direct-mode attempt is given, however little of the caller's
/// wait is left: a write that just missed its wait still gets a round trip's chance.
const MIN_ATTEMPT: Duration = Duration::from_millis(20);

/// The pause before a direct-mode caller's attempt `attempt + 1`: 20 ms doubling to
/// 200 ms.
fn caller_pause(attempt: u32) -> Duration {
    Duration::from_millis(
        20u64
            .saturating_mul(1 << attempt.saturating_sub(1).min(4))
            .min(200),
    )
}

/// Records the due index's shard count at the store's first use and refuses another
/// one later: entries under a different count would sit in shards no sweeper reads.
/// The outer error is Redis not answering (asked again at start, [`START_ATTEMPTS`]);
/// the inner one is the store's answer (a layout that refuses), never asked again.
async fn check_due_shards(
    client: &Client,
    cfg: &StoreConfig,
) -> Result<Result<(), StoreError>, fred::error::Error> {
    let key = format!("{}:due-shards", cfg.key_prefix);
    let pinned: Option<String> = client.get(&key).await?;
    if pinned.is_none() {
        // No pin: a fresh store, or one whose pin was lost. The index itself decides.
        let (prefix, shards) = (cfg.key_prefix.as_str(), cfg.due_shards);
        match layout::prove(client, prefix, shards).await? {
            LayoutProof::Empty => {}
            LayoutProof::Agrees { samples, complete } => {
                tracing::warn!(
                    prefix,
                    shards,
                    entries = samples,
                    complete,
                    "due index shard pin was missing; the index agrees with store.due_shards, pin restored"
                );
            }
            LayoutProof::Differs { key, why } => {
                return Ok(Err(StoreError::DueLayoutDiffers {
                    prefix: prefix.to_string(),
                    configured: shards,
                    key,
                    why,
                }));
            }
            LayoutProof::Unproven { keys, samples } => {
                return Ok(Err(StoreError::DueLayoutUnproven {
                    prefix: prefix.to_string(),
                    configured: shards,
                    keys,
                    samples,
                }));
            }
        }
    }
    let _: Option<String> = client
        .set(
            &key,
            cfg.due_shards.to_string(),
            None,
            Some(SetOptions::NX),
            false,
        )
        .await?;
    let stored: Option<String> = client.get(&key).await?;
    Ok(match stored.as_deref().map(str::parse::<u32>) {
        Some(Ok(n)) if n == cfg.due_shards => Ok(()),
        Some(Ok(n)) => Err(StoreError::DueShards {
            configured: cfg.due_shards,
            stored: n,
        }),
        _ => Err(StoreError::Redis(format!(
            "{key} holds no shard count; it is not this store's"
        ))),
    })
}

/// A due index member's user, activity and trade number (`None` when it is not one).
pub fn parse_due_member(member: &str) -> Option<(&str, &str, &str)> {
    let mut parts = member.splitn(3, '|');
    let (user, activity, trade) = (parts.next()?, parts.next()?, parts.next()?);
    (!user.is_empty() && !activity.is_empty() && !trade.is_empty())
        .then_some((user, activity, trade))
}

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
    /// Every place for an unanswered write stayed taken for the whole wait: the
    /// writer is behind Redis (see "retries and back-pressure" in the module doc).
    #[error("token writer is behind: {pending} writes not yet stored, none answered in {waited:?}")]
    Backlog {
        /// Writes not yet answered (`store.max_pending`).
        pending: u64,
        /// How long the call waited for a place.
        waited: Duration,
    },
    /// The store is shutting down.
    #[error("token store closed")]
    Closed,
    /// `store.due_shards` differs from the count the store was first used with.
    #[error(
        "store.due_shards is {configured}, but this store's due index has {stored} shards (fixed at first use; set it back to {stored})"
    )]
    DueShards {
        /// The configured count.
        configured: u32,
        /// The count recorded in Redis.
        stored: u32,
    },
    /// The due index's pin (`{prefix}:due-shards`) is gone and the index itself proves
    /// another count.
    #[error(
        "store.due_shards is {configured} but the due index under prefix {prefix:?} lost its shard pin ({prefix}:due-shards) and its data proves another count ({key}: {why}). Set store.due_shards to the index's own count"
    )]
    DueLayoutDiffers {
        /// The token store's key prefix.
        prefix: String,
        /// The configured count.
        configured: u32,
        /// The key that proves it.
        key: String,
        /// How.
        why: String,
    },
    /// The pin is gone and the index's keys could not prove the configured count
    /// (the index is read whole, so only a future proof that reads less answers this).
    #[error(
        "the due index under prefix {prefix:?} lost its shard pin ({prefix}:due-shards), and its keys ({keys} keys, {samples} entries read) could not prove store.due_shards = {configured}. Run `reward-ctl layout due --prefix {prefix} --shards {configured}`: it reads the whole index and restores the pin only if the data agrees"
    )]
    DueLayoutUnproven {
        /// The token store's key prefix.
        prefix: String,
        /// The configured count.
        configured: u32,
        /// Index keys seen.
        keys: u64,
        /// Entries sampled, all agreeing.
        samples: u64,
    },
}

impl From<fred::error::Error> for StoreError {
    fn from(e: fred::error::Error) -> Self {
        StoreError::Redis(e.to_string())
    }
}

/// What became of a write handed to [`TokenStore::submit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Submitted {
    /// Redis confirmed it.
    Stored,
    /// The first attempt failed (batched mode); it is being retried in the background.
    Retrying,
    /// Handed to the writer without waiting (deferred mode).
    Deferred,
}

/// One place among `store.max_pending` for a write not yet answered; given back when
/// the write is answered or given up (dropped).
#[derive(Debug)]
pub struct Held {
    _permit: OwnedSemaphorePermit,
    shared: Arc<Shared>,
}

/// The process's `reward_sdk_token_writes_pending`, registered (at 0 when no store
/// has a write pending yet).
fn pending_gauge() -> metrics::Gauge {
    let g = metrics::gauge!("reward_sdk_token_writes_pending");
    g.increment(0.0);
    g
}

impl Drop for Held {
    fn drop(&mut self) {
        let stats = &self.shared.stats;
        self.shared.pending_gauge.decrement(1.0);
        if stats.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.shared.drained.notify_waiters();
        }
    }
}

/// Counts since start.
#[derive(Debug, Default)]
pub struct StoreStats {
    /// Tokens written.
    pub written: AtomicU64,
    /// Writes refused by the cap.
    pub capped: AtomicU64,
    /// Attempts that failed in Redis (a write retried until it lands counts each).
    pub failed: AtomicU64,
    /// Attempts that were retries of a failed one.
    pub retried: AtomicU64,
    /// Writes that will never be stored although their reward went on: given up after
    /// `retry_for_ms`, or refused by the cap with nobody waiting (deferred mode).
    pub unstored: AtomicU64,
    /// Pipelines sent.
    pub pipelines: AtomicU64,
    /// Script calls that carried direct-mode writes: on a single Redis, fewer than the
    /// writes when writes waited together for a call slot.
    pub direct_calls: AtomicU64,
    /// Writes not yet answered (queued, in flight, waiting for a retry).
    pub pending: AtomicU64,
}

/// A handle to the token store; cheap to clone.
#[derive(Clone)]
pub struct TokenStore {
    script: Script,
    /// On a single Redis (not a cluster): direct writes, each with its due entry in
    /// the same call, and those waiting together sent as one call ([`combine`]).
    combiner: Option<Arc<Combiner>>,
    pool: Pool,
    cfg: Arc<StoreConfig>,
    /// The writer task's queue (batched and deferred writes, retries).
    tx: mpsc::UnboundedSender<Write>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for TokenStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenStore")
            .field("key_prefix", &self.cfg.key_prefix)
            .field("stats", &self.shared.stats)
            .finish_non_exhaustive()
    }
}

impl TokenStore {
    /// Connects to Redis, loads the script and starts the writer task.
    pub async fn connect(cfg: StoreConfig) -> Result<Self, StoreError> {
        let timeout = Duration::from_millis(cfg.timeout_ms);
        let mut attempt = 1;
        let (pool, (script, many, combined)) = loop {
            let pool = reward_runtime::redis::builder(&cfg.redis_url, timeout)?
                .build_pool(cfg.pool_size)?;
            match Self::prepare(&pool, &cfg).await {
                Ok(Ok(scripts)) => break (pool, scripts),
                Ok(Err(refused)) => return Err(refused),
                Err(e) if attempt < START_ATTEMPTS && writer::transient(&e) => {
                    tracing::warn!(error = %e, attempt, "token store: Redis did not answer at start; asking again");
                    let _ = pool.quit().await;
                    tokio::time::sleep(START_PAUSE * attempt).await;
                    attempt += 1;
                }
                Err(e) => return Err(e.into()),
            }
        };
        let cfg = Arc::new(cfg);
        // Unbounded: the places (`max_pending`) bound what it can hold.
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            stats: StoreStats::default(),
            drained: Notify::new(),
            room: Arc::new(Semaphore::new(cfg.max_pending)),
            cfg: cfg.clone(),
            requeue: tx.downgrade(),
            logged_ms: AtomicU64::new(0),
            started: Instant::now(),
            pending_gauge: pending_gauge(),
        });
        // The writer runs in every mode: retries go through it.
        tokio::spawn(writer::run(pool.clone(), many, rx, shared.clone()));
        let ttl = i64::try_from(cfg.ttl_secs).unwrap_or(i64::MAX);
        let combiner = combined.map(|(one, many)| {
            Arc::new(Combiner::new(
                one,
                many,
                cfg.pool_size,
                cfg.max_tokens_per_user,
                ttl,
            ))
        });
        Ok(Self {
            script,
            combiner,
            pool,
            cfg,
            tx,
            shared,
        })
    }

    /// The start's round trips: connect, load the scripts, check the due index's
    /// layout. Outer error: Redis did not answer; inner: the layout refused.
    async fn prepare(
        pool: &Pool,
        cfg: &StoreConfig,
    ) -> Result<Result<(Script, Script, Option<(Script, Script)>), StoreError>, fred::error::Error>
    {
        pool.init().await?;
        let script = Script::load(pool.next(), WRITE_LUA).await?;
        let many = Script::load(pool.next(), WRITE_MANY_LUA).await?;
        // A cluster puts the due shard and the user's hashes in different slots, which
        // one script may not touch: there the entry goes first, in its own call, and
        // each direct write is its own call (writes of one slot rarely meet).
        let combined = if pool.next().client_config().server.is_clustered() {
            None
        } else {
            Some((
                Script::load(pool.next(), &indexed_write_lua()).await?,
                Script::load(pool.next(), INDEXED_WRITE_MANY_LUA).await?,
            ))
        };
        Ok(check_due_shards(pool.next(), cfg)
            .await?
            .map(|()| (script, many, combined)))
    }

    /// The hash key of a user's tokens in an activity.
    pub fn key(&self, user_id: &str, activity_id: &str) -> String {
        format!("{}:{{{user_id}}}:{activity_id}", self.cfg.key_prefix)
    }

    /// Shards of the due index.
    pub fn due_shards(&self) -> u32 {
        self.cfg.due_shards.max(1)
    }

    /// The due index shard of a user's rewards.
    pub fn due_shard(&self, user_id: &str) -> u32 {
        crc32fast::hash(user_id.as_bytes()) % self.due_shards()
    }

    /// The sorted set of one due index shard (its own hash tag, so one slot).
    pub fn due_key(&self, shard: u32) -> String {
        format!("{}:{{due.{shard}}}", self.cfg.key_prefix)
    }

    /// A reward's member in the due index: `user|activity|trade` (ids never hold `|`).
    pub fn due_member(&self, user_id: &str, activity_id: &str, trade_no: &str) -> String {
        format!("{user_id}|{activity_id}|{trade_no}")
    }

    /// Shard key, member and time (Unix ms) of a reward's due index entry.
    fn due_entry(&self, user_id: &str, activity_id: &str, trade_no: &str) -> (String, String, f64) {
        (
            self.due_key(self.due_shard(user_id)),
            self.due_member(user_id, activity_id, trade_no),
            reward_runtime::clock::now_ms() as f64,
        )
    }

    /// Counts since start.
    pub fn stats(&self) -> &StoreStats {
        &self.shared.stats
    }

    /// Takes a place for one write, waiting at most `wait` for one to free up;
    /// [`StoreError::Backlog`] when none did (the writer is behind Redis).
    pub async fn hold(&self, wait: Duration) -> Result<Held, StoreError> {
        let room = &self.shared.room;
        let permit = match room.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(tokio::sync::TryAcquireError::Closed) => return Err(StoreError::Closed),
            Err(tokio::sync::TryAcquireError::NoPermits) => {
                match tokio::time::timeout(wait, room.clone().acquire_owned()).await {
                    Ok(Ok(p)) => p,
                    Ok(Err(_)) => return Err(StoreError::Closed),
                    Err(_) => {
                        metrics::counter!("reward_sdk_token_write_backlog_refusals_total")
                            .increment(1);
                        return Err(StoreError::Backlog {
                            pending: self.shared.stats.pending.load(Ordering::Acquire),
                            waited: wait,
                        });
                    }
                }
            }
        };
        self.shared.stats.pending.fetch_add(1, Ordering::AcqRel);
        self.shared.pending_gauge.increment(1.0);
        Ok(Held {
            _permit: permit,
            shared: self.shared.clone(),
        })
    }

    /// Writes a sealed token in the configured mode, holding `held` until Redis has
    /// answered. Deferred: hands it over and answers [`Submitted::Deferred`]. Direct:
    /// tries until stored, a cap refusal, or `write_wait_ms` of Redis failures (then
    /// the failure is returned; with `strict`, the first). Batched: makes the first
    /// attempt and waits for it; a cap refusal is returned; a Redis failure is returned
    /// when `strict` is on, else the write is retried in the background
    /// ([`Submitted::Retrying`]).
    pub async fn submit(
        &self,
        held: Held,
        user_id: &str,
        activity_id: &str,
        trade_no: &str,
        sealed: String,
    ) -> Result<Submitted, StoreError> {
        let mode = self.cfg.write_mode;
        let (done, answer) = match mode {
            WriteMode::Batched => {
                let (tx, rx) = oneshot::channel();
                (Reply::Wait(tx), Some(rx))
            }
            WriteMode::Direct | WriteMode::Deferred => (Reply::Background, None),
        };
        let w = Write {
            due: self.due_entry(user_id, activity_id, trade_no),
            key: self.key(user_id, activity_id),
            field: trade_no.to_string(),
            value: sealed,
            done,
            _held: held,
            attempts: 1,
            first: Instant::now(),
        };
        match (mode, answer) {
            (WriteMode::Direct, _) => {
                // If the caller gives up while an attempt is in flight (its future is
                // dropped), the guard hands the write to the background, which sends
                // it again: it may or may not have landed.
                let mut guard = Unsettled {
                    shared: &self.shared,
                    write: Some(w),
                };
                let wait = Duration::from_millis(self.cfg.write_wait_ms);
                let started = Instant::now();
                let mut attempt = 1u32;
                loop {
                    // An attempt gets at most what is left of the wait (and never
                    // more than `timeout_ms`, fred's own bound): a Redis that hangs
                    // costs the caller `write_wait_ms`, not a round trip's timeout.
                    let left = wait.saturating_sub(started.elapsed()).max(MIN_ATTEMPT);
                    let r = match guard.write.as_ref() {
                        Some(w) => {
                            let put = self.put_direct(&w.due, &w.key, &w.field, &w.value);
                            match tokio::time::timeout(left, put).await {
                                Ok(r) => r,
                                Err(_) => Err(fred::error::Error::new(
                                    fred::error::ErrorKind::Timeout,
                                    "token write: no answer within the caller's wait",
                                )),
                            }
                        }
                        None => return Err(StoreError::Closed),
                    };
                    let pause = caller_pause(attempt);
                    match r {
                        // The caller tries again while its wait lasts: a call answers
                        // only once its token is stored.
                        Err(e)
                            if !self.cfg.strict
                                && writer::transient(&e)
                                && started.elapsed() + pause < wait =>
                        {
                            self.shared.stats.failed.fetch_add(1, Ordering::Relaxed);
                            self.shared.stats.retried.fetch_add(1, Ordering::Relaxed);
                            metrics::counter!("reward_sdk_token_write_retries_total").increment(1);
                            tokio::time::sleep(pause).await;
                            attempt += 1;
                        }
                        // Past the wait the reward is refused; an attempt that timed
                        // out may still land (its due index entry with it), and the
                        // sweeper then credits it like any stored reward.
                        Err(e) if !self.cfg.strict && writer::transient(&e) => {
                            self.shared.stats.failed.fetch_add(1, Ordering::Relaxed);
                            metrics::counter!("reward_sdk_token_writes_refused_total").increment(1);
                            guard.write.take();
                            return Err(StoreError::from(e));
                        }
                        r => {
                            return match guard.write.take() {
                                Some(w) => settle(&self.shared, w, r, true),
                                None => Err(StoreError::Closed),
                            };
                        }
                    }
                }
            }
            (_, Some(rx)) => {
                self.tx.send(w).map_err(|_| StoreError::Closed)?;
                rx.await.map_err(|_| StoreError::Closed)?
            }
            (_, None) => {
                self.tx.send(w).map_err(|_| StoreError::Closed)?;
                Ok(Submitted::Deferred)
            }
        }
    }

    /// Stores a sealed token and waits for Redis's answer: one attempt, no retry, no
    /// place taken (for tools and tests; `send_reward` uses [`TokenStore::submit`]).
    pub async fn put(
        &self,
        user_id: &str,
        activity_id: &str,
        trade_no: &str,
        sealed: &str,
    ) -> Result<(), StoreError> {
        let key = self.key(user_id, activity_id);
        let due = self.due_entry(user_id, activity_id, trade_no);
        let r = self.put_direct(&due, &key, trade_no, sealed).await;
        outcome(r, self.cfg.max_tokens_per_user, &self.shared.stats)
    }

    /// Waits until Redis has answered every write taken so far (retries included), or
    /// `deadline` passes; returns how many are still unanswered (0 on a clean flush).
    pub async fn flush(&self, deadline: Duration) -> u64 {
        let until = tokio::time::Instant::now() + deadline;
        loop {
            let notified = self.shared.drained.notified();
            tokio::pin!(notified);
            // Registered before the check, so an answer in between is not missed.
            notified.as_mut().enable();
            let left = self.shared.stats.pending.load(Ordering::Acquire);
            if left == 0 {
                return 0;
            }
            if tokio::time::timeout_at(until, notified).await.is_err() {
                return self.shared.stats.pending.load(Ordering::Acquire);
            }
        }
    }

    async fn put_direct(
        &self,
        due: &(String, String, f64),
        key: &str,
        field: &str,
        value: &str,
    ) -> Result<i64, fred::error::Error> {
        if let Some(combiner) = &self.combiner {
            // One round trip, the entry and the token in one atomic call (with the
            // writes waiting beside it, when every call slot is busy).
            return combiner
                .attempt(&self.pool, &self.shared.stats, due, key, field, value)
                .await;
        }
        self.shared
            .stats
            .direct_calls
            .fetch_add(1, Ordering::Relaxed);
        let client = self.pool.next();
        let cap = self.cfg.max_tokens_per_user;
        let ttl = i64::try_from(self.cfg.ttl_secs).unwrap_or(i64::MAX);
        // The index entry first: a token is never stored without one (module doc).
        let _: i64 = client
            .zadd(
                due.0.as_str(),
                Some(SetOptions::NX),
                None,
                false,
                false,
                (due.2, due.1.as_str()),
            )
            .await?;
        let args = || -> Vec<Value> {
            vec![
                Value::from(field),
                Value::from(value),
                Value::from(i64::from(cap)),
                Value::from(ttl),
            ]
        };
        self.script
            .eval(client, || (vec![key.to_string()], args()))
            .await
    }

    /// Every pending token of a user in an activity (stored, not yet credited): trade
    /// number → sealed token.
    pub async fn list(
        &self,
        user_id: &str,
        activity_id: &str,
    ) -> Result<HashMap<String, String>, StoreError> {
        let all: HashMap<String, String> = self
            .pool
            .next()
            .hgetall(self.key(user_id, activity_id))
            .await?;
        Ok(all
            .into_iter()
            .filter(|(_, v)| !life::Field::of(v).credited())
            .collect())
    }

    /// The sealed token stored under a trade number while its reward waits for its
    /// credit (`None` once it is credited, or when none is stored).
    pub async fn get(
        &self,
        user_id: &str,
        activity_id: &str,
        trade_no: &str,
    ) -> Result<Option<String>, StoreError> {
        let v: Option<String> = self
            .pool
            .next()
            .hget(self.key(user_id, activity_id), trade_no)
            .await?;
        Ok(v.filter(|v| !life::Field::of(v).credited()))
    }

    /// Removes a trade number's field whatever its state (pending, credited or a
    /// mark); true if it was there. A write of it that lands later stores it pending
    /// again, so this is for tools and tests, never for a reward still in flight.
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

#[cfg(test)]
mod due_tests {
    use super::parse_due_member;
    use proptest::prelude::*;

    #[test]
    fn a_member_splits_into_user_activity_and_trade() {
        assert_eq!(
            parse_due_member("u1|cny|cny:rain:1:u1"),
            Some(("u1", "cny", "cny:rain:1:u1"))
        );
        assert_eq!(parse_due_member("u1|cny"), None);
        assert_eq!(parse_due_member("|cny|t"), None);
        assert_eq!(parse_due_member("u||t"), None);
        assert_eq!(parse_due_member("u|a|"), None);
    }

    proptest! {
        // Members come from Redis: any text is parsed or refused, never a panic, and
        // what parses has three non-empty parts that join back to it.
        #[test]
        fn any_member_text_parses_or_is_refused(text in ".{0,80}") {
            if let Some((u, a, t)) = parse_due_member(&text) {
                prop_assert!(!u.is_empty() && !a.is_empty() && !t.is_empty());
                prop_assert_eq!(format!("{u}|{a}|{t}"), text);
            }
        }
    }
}
