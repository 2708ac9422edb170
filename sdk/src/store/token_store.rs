//! The token store's handle: where a write starts, in the configured mode, and the
//! reads of a user's tokens.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use fred::prelude::*;
use reward_runtime::script::Script;
use tokio::sync::{mpsc, oneshot};

use super::answer::{Submitted, outcome, transient};
use super::combine::Combiner;
use super::error::StoreError;
use super::keys;
use super::life;
use super::pending::{Held, Reply, Shared, Write};
use super::retry::{Unsettled, settle};
use super::start::{Loaded, start};
use super::stats::StoreStats;
use super::writer;
use crate::config::{StoreConfig, WriteMode};

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

/// A handle to the token store; cheap to clone.
///
/// # Writes
/// A write is one `EVALSHA` of a small script that refuses a new field once the hash
/// holds `max_tokens_per_user` (re-writing an existing trade number is always allowed:
/// the same reward issued twice is one token, which is also what makes a retried write
/// harmless), and writes nothing pending when the reward is already credited (its field
/// says so, [`super::life::Field`]): a write that lands late must not list a credited
/// reward as pending again. How writes travel is [`crate::config::WriteMode`]:
/// - **direct** (default): the caller sends its index entry and its script call (one
///   call on a single Redis, two on a cluster) on the next pooled connection and awaits
///   the replies. On a single Redis, writes that wait together (every one of
///   `pool_size` call slots busy) go as one call, each decided and answered as alone (a
///   script call's own cost is most of a write's). The cap refuses the reward
///   (`TooManyTokens`), and so does a refusal of the command itself. A Redis failure is
///   tried again by the caller (20 ms doubling to 200 ms apart) until `write_wait_ms`
///   has passed, then the reward is refused. With `store.answer_from_queue`,
///   `send_reward` races this write against
///   the reward's event once the write has had `queue_after_ms` (`crate::HeldBy`): a
///   caller that stops waiting because a broker took the event drops its write, which
///   goes on in the background (below) until it lands. A call that answers has its
///   token stored or its event held, so a process that dies loses no reward it
///   showed. With `strict`, the first failure refuses. Its cost is the round trips in the call (BENCHMARKS.md, `reward-bench
///   send`);
/// - **batched**: as direct, but the call goes through the writer task's explicit
///   pipelines (two more task hops per write), and a failed first attempt is retried in
///   the background while the call answers ([`Submitted::Retrying`]);
/// - **deferred** (opt-in, loses rewards): the write goes to one writer task, which
///   sends explicit pipelines of up to `pipeline_max` scripts, at most `pool_size` at
///   once, and the caller does not wait for the reply ([`TokenStore::submit`] answers
///   [`Submitted::Deferred`]). `send_reward` then holds no Redis round trip. What it
///   gives up: a process that dies takes its unsent writes with it, rewards its users
///   were shown that nothing records and nobody credits (docs/chaos.md); the per-user
///   cap can no longer refuse the reward (a capped write is counted in
///   [`StoreStats::unstored`] instead); and a wallet that checks the token before its
///   write lands is told `UNKNOWN`, then `LEGAL`. Its throughput figure is not the
///   SDK's: what Redis can store is.
///
/// # When Redis is slow or failing: retries and back-pressure
/// A write that fails or times out is not dropped. It is retried in the background with
/// capped exponential backoff (100 ms doubling to 2 s, with jitter) until it is stored,
/// the cap refuses it, Redis refuses the command itself (a key of another type: that
/// fails the same way every time), or `retry_for_ms` has passed since its first attempt
/// (then it is given up: counted in [`StoreStats::unstored`], the
/// `reward_sdk_token_write_failures_total` counter, and a log line at most once a
/// second). Given up means "not confirmed": an attempt that timed out may still be in a
/// socket and run when Redis recovers, so a given-up token can appear later. A
/// timed-out write may have landed; sending it again is harmless (same field, same
/// value). In batched mode the first attempt is the caller's, and a failure hands the
/// write to the same retry path ([`Submitted::Retrying`]) unless `strict` is on, in
/// which case the reward is refused; direct mode keeps the retries in the call (above).
///
/// Every write not yet answered (queued, in flight, waiting for its retry) holds one of
/// `max_pending` places ([`TokenStore::hold`]). When all are taken the writer has
/// fallen behind Redis, and a new write waits for a place at most the caller's wait
/// (`send_reward`: `batch.enqueue_wait_ms`), then is refused with
/// [`StoreError::Backlog`], which `send_reward` answers as `Backpressure`: the activity
/// service is told to slow down instead of being handed rewards whose tokens would
/// never be stored. The bound also caps the memory the backlog takes.
///
/// Unanswered writes live in memory: `close` waits for them (its report counts what is
/// left, `tokens_left`), and a crash loses them, exactly as a failed write. In every
/// mode a reply of `NOSCRIPT` (Redis restarted, or a cluster node that never saw the
/// script or was just promoted) sends the call once more with the script's body.
#[derive(Clone)]
pub struct TokenStore {
    script: Script,
    /// On a single Redis (not a cluster): direct writes, each with its due entry in
    /// the same call, and those waiting together sent as one call ([`super::combine`]).
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
    /// Connects to Redis, loads the scripts and starts the writer task.
    pub async fn connect(cfg: StoreConfig) -> Result<Self, StoreError> {
        let (pool, Loaded { one, many, indexed }) = start(&cfg).await?;
        let cfg = Arc::new(cfg);
        // Unbounded: the places (`max_pending`) bound what it can hold.
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared::new(cfg.clone(), tx.downgrade()));
        // The writer runs in every mode: retries go through it.
        tokio::spawn(writer::run(pool.clone(), many, rx, shared.clone()));
        let ttl = i64::try_from(cfg.ttl_secs).unwrap_or(i64::MAX);
        let combiner = indexed.map(|(one, many)| {
            Arc::new(Combiner::new(
                one,
                many,
                cfg.pool_size,
                cfg.max_tokens_per_user,
                ttl,
            ))
        });
        Ok(Self {
            script: one,
            combiner,
            pool,
            cfg,
            tx,
            shared,
        })
    }

    /// The hash key of a user's tokens in an activity.
    pub fn key(&self, user_id: &str, activity_id: &str) -> String {
        keys::token_key(&self.cfg.key_prefix, user_id, activity_id)
    }

    /// Shards of the due index.
    pub fn due_shards(&self) -> u32 {
        self.cfg.due_shards.max(1)
    }

    /// The due index shard of a user's rewards.
    pub fn due_shard(&self, user_id: &str) -> u32 {
        keys::due_shard_of(user_id, self.due_shards())
    }

    /// The sorted set of one due index shard (its own hash tag, so one slot).
    pub fn due_key(&self, shard: u32) -> String {
        keys::due_key(&self.cfg.key_prefix, shard)
    }

    /// A reward's member in the due index: `user|activity|trade` (ids never hold `|`).
    pub fn due_member(&self, user_id: &str, activity_id: &str, trade_no: &str) -> String {
        keys::due_member(user_id, activity_id, trade_no)
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

    /// Counts one reward that went on without its token (its caller's write was
    /// refused after its event had gone): as unstored, like a write given up.
    pub(crate) fn went_on_unstored(&self, e: &StoreError) {
        super::retry::give_up(&self.shared, 1, e);
    }

    /// Takes a place for one write, waiting at most `wait` for one to free up;
    /// [`StoreError::Backlog`] when none did (the writer is behind Redis).
    pub async fn hold(&self, wait: Duration) -> Result<Held, StoreError> {
        self.shared.hold(wait).await
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
        self.submit_with(held, user_id, activity_id, trade_no, sealed, false)
            .await
    }

    /// As [`TokenStore::submit`], for a direct write that races its reward's event
    /// (`send_reward`, `crate::HeldBy`): when its wait passes it is not given up but
    /// handed to the background, and answers [`Submitted::Retrying`]; the event may
    /// hold the reward meanwhile, and the token must land whenever Redis answers.
    pub async fn submit_racing(
        &self,
        held: Held,
        user_id: &str,
        activity_id: &str,
        trade_no: &str,
        sealed: String,
    ) -> Result<Submitted, StoreError> {
        self.submit_with(held, user_id, activity_id, trade_no, sealed, true)
            .await
    }

    async fn submit_with(
        &self,
        held: Held,
        user_id: &str,
        activity_id: &str,
        trade_no: &str,
        sealed: String,
        hand_over: bool,
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
                                && transient(&e)
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
                        Err(e) if !self.cfg.strict && transient(&e) => {
                            self.shared.stats.failed.fetch_add(1, Ordering::Relaxed);
                            if hand_over {
                                // The guard hands the write to the background.
                                return Ok(Submitted::Retrying);
                            }
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
        self.shared.flush(deadline).await
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
