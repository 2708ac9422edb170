//! The token store's background writer: the writer task that sends explicit pipelines
//! of write scripts ([`super::life`]), and what settles each answer (retries with
//! backoff, give-ups).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fred::prelude::*;
use reward_runtime::script::Script;
use tokio::sync::{Notify, Semaphore, mpsc, oneshot};

use super::{Held, StoreError, StoreStats, Submitted};
use crate::config::StoreConfig;

/// Most writes in one [`WRITE_MANY_LUA`](super::life::WRITE_MANY_LUA) call (Redis runs a script to its end before
/// anything else, so a call stays well under a millisecond).
pub(super) const WRITES_PER_CALL: usize = 128;

/// First retry delay of a failed write; doubles per attempt up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(100);
/// Longest delay between two attempts of a write.
const RETRY_MAX: Duration = Duration::from_secs(2);

/// One token write: queued, in flight, or waiting for its retry.
pub(super) struct Write {
    /// The due index entry written before the token: shard key, member, time (ms).
    pub(super) due: (String, String, f64),
    pub(super) key: String,
    pub(super) field: String,
    pub(super) value: String,
    pub(super) done: Reply,
    /// Its place, given back when the write is dropped (answered or given up).
    pub(super) _held: Held,
    /// Attempts made so far.
    pub(super) attempts: u32,
    /// When the first attempt was made (retries stop `retry_for_ms` after it).
    pub(super) first: Instant,
}

/// Who hears a write's outcome.
pub(super) enum Reply {
    /// A caller waiting for it (batched mode's first attempt).
    Wait(oneshot::Sender<Result<Submitted, StoreError>>),
    /// Nobody: the writer counts it, and retries it while Redis fails.
    Background,
}

/// What the writer task and every held place share.
pub(super) struct Shared {
    pub(super) stats: StoreStats,
    /// Told when the last pending write is answered.
    pub(super) drained: Notify,
    /// `max_pending` places.
    pub(super) room: Arc<Semaphore>,
    pub(super) cfg: Arc<StoreConfig>,
    /// The writer's queue, for retries (weak: the store's handles own the queue).
    pub(super) requeue: mpsc::WeakUnboundedSender<Write>,
    /// When the last give-up was logged (ms since `started`): one line a second at most.
    pub(super) logged_ms: AtomicU64,
    pub(super) started: Instant,
    /// `reward_sdk_token_writes_pending`, moved with `stats.pending` (added to, never
    /// set: several stores in one process share the series, and each adds its own).
    pub(super) pending_gauge: metrics::Gauge,
}

impl Shared {
    /// Whether a warning may be logged now (at most one a second).
    fn may_log(&self) -> bool {
        let now = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let last = self.logged_ms.load(Ordering::Relaxed);
        (last == 0 || now.saturating_sub(last) >= 1_000)
            && self
                .logged_ms
                .compare_exchange(last, now.max(1), Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// A caller's write whose first attempt has not been settled; dropped unsettled (the
/// caller gave up mid-attempt), it goes to the background as a retry.
pub(super) struct Unsettled<'a> {
    pub(super) shared: &'a Arc<Shared>,
    pub(super) write: Option<Write>,
}

impl Drop for Unsettled<'_> {
    fn drop(&mut self) {
        if let Some(mut w) = self.write.take() {
            w.attempts += 1;
            let sent = match self.shared.requeue.upgrade() {
                Some(tx) => tx.send(w).is_ok(),
                None => false,
            };
            if !sent {
                give_up(self.shared, 1, &StoreError::Closed);
            }
        }
    }
}

/// What a write's answer means, counted; retries a Redis failure unless a waiting
/// caller in strict mode takes the error. `caller` is true for a caller's own first
/// attempt (it hears cap refusals and, in strict mode, failures).
pub(super) fn settle(
    shared: &Arc<Shared>,
    mut w: Write,
    reply: Result<i64, fred::error::Error>,
    caller: bool,
) -> Result<Submitted, StoreError> {
    let cfg = &shared.cfg;
    let permanent = matches!(&reply, Err(e) if !transient(e));
    match outcome(reply, cfg.max_tokens_per_user, &shared.stats) {
        Ok(()) => Ok(Submitted::Stored),
        Err(e @ StoreError::CapReached { .. }) => {
            if !caller {
                // Nobody to refuse: the reward went on without its token.
                shared.stats.unstored.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("reward_sdk_token_write_failures_total").increment(1);
            }
            Err(e)
        }
        // A waiting caller hears a strict-mode failure, and a refusal of the command
        // itself (sending it again cannot help): its reward is refused, so nothing is
        // counted as unstored.
        Err(e) if caller && (cfg.strict || permanent) => Err(e),
        Err(e) => {
            // A caller's own first attempt is always retried once more, however long
            // it took: only the background gives up.
            let retry_for = Duration::from_millis(cfg.retry_for_ms);
            if !caller && (permanent || w.first.elapsed() >= retry_for) {
                give_up(shared, 1, &e);
                return Err(e);
            }
            w.done = Reply::Background;
            w.attempts += 1;
            let delay = backoff(w.attempts);
            let shared = shared.clone();
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let sent = match shared.requeue.upgrade() {
                    Some(tx) => tx.send(w).is_ok(),
                    None => false,
                };
                if !sent {
                    give_up(&shared, 1, &StoreError::Closed);
                }
            });
            Ok(Submitted::Retrying)
        }
    }
}

/// Whether a failed attempt may succeed if sent again: a timeout, a dropped
/// connection, a busy, loading or failing-over server. A refusal of the command itself
/// (wrong type under the key, a malformed argument) fails the same way every time.
pub(super) fn transient(e: &fred::error::Error) -> bool {
    use fred::error::ErrorKind as K;
    !matches!(
        e.kind(),
        K::InvalidArgument | K::InvalidCommand | K::Parse | K::Url | K::Config
    )
}

/// Counts `n` writes as never to be stored, with one log line.
fn give_up(shared: &Shared, n: u64, e: &StoreError) {
    shared.stats.unstored.fetch_add(n, Ordering::Relaxed);
    metrics::counter!("reward_sdk_token_write_failures_total").increment(n);
    if !shared.may_log() {
        return;
    }
    tracing::warn!(
        writes = n,
        error = %e,
        retry_for_ms = shared.cfg.retry_for_ms,
        total_given_up = shared.stats.unstored.load(Ordering::Relaxed),
        "token writes given up (Redis refused the command, or retry_for_ms passed); their rewards went on without a stored token"
    );
}

/// The delay before attempt `attempts` (2 or more): 100 ms doubling to 2 s, then a
/// random 50-100 % of it so a fleet of SDKs does not retry in step.
fn backoff(attempts: u32) -> Duration {
    let exp = attempts.saturating_sub(2).min(8);
    let full = RETRY_FIRST.saturating_mul(1 << exp).min(RETRY_MAX);
    full.mul_f64(rand::random_range(0.5..=1.0))
}

/// The writer task: gathers writes into pipelines of up to `pipeline_max`, at most
/// `pool_size` in flight.
pub(super) async fn run(
    pool: Pool,
    script: Script,
    mut rx: mpsc::UnboundedReceiver<Write>,
    shared: Arc<Shared>,
) {
    let cfg = shared.cfg.clone();
    let lanes = Arc::new(Semaphore::new(cfg.pool_size));
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
        // At most pool_size pipelines in flight; the next batch gathers meanwhile.
        let Ok(permit) = lanes.clone().acquire_owned().await else {
            break;
        };
        let client = pool.next().clone();
        let (script, shared) = (script.clone(), shared.clone());
        tokio::spawn(async move {
            send_pipeline(&client, &script, batch, &shared).await;
            drop(permit);
        });
    }
}

async fn send_pipeline(client: &Client, script: &Script, batch: Vec<Write>, shared: &Arc<Shared>) {
    let stats = &shared.stats;
    let (cap, ttl) = (
        shared.cfg.max_tokens_per_user,
        i64::try_from(shared.cfg.ttl_secs).unwrap_or(i64::MAX),
    );
    stats.pipelines.fetch_add(1, Ordering::Relaxed);
    let retries = batch.iter().filter(|w| w.attempts > 1).count() as u64;
    if retries > 0 {
        stats.retried.fetch_add(retries, Ordering::Relaxed);
        metrics::counter!("reward_sdk_token_write_retries_total").increment(retries);
    }
    let indexed = index_pipeline(client, &batch).await;
    let results = run_pipeline(client, script, &batch, indexed, cap, ttl).await;
    let (mut retrying, mut first_error) = (0_u64, None);
    for (mut w, r) in batch.into_iter().zip(results) {
        let done = std::mem::replace(&mut w.done, Reply::Background);
        let caller = matches!(done, Reply::Wait(_));
        if let Err(e) = &r {
            first_error.get_or_insert_with(|| e.to_string());
        }
        let result = settle(shared, w, r, caller);
        if matches!(result, Ok(Submitted::Retrying)) {
            retrying += 1;
        }
        if let Reply::Wait(tx) = done
            && let Err(Err(e)) = tx.send(result)
            && !matches!(e, StoreError::CapReached { .. })
        {
            // The caller gave up waiting and will never hear this failure: its reward
            // went on (the event guard sent it), so the token is counted as unstored.
            give_up(shared, 1, &e);
        }
    }
    if retrying > 0
        && let Some(e) = first_error
        && shared.may_log()
    {
        // One line per pipeline, not per token: a Redis outage must not flood the log.
        tracing::warn!(retrying, error = %e, "token writes failed; retrying in the background");
    }
}

/// What one script call's reply means for the caller, counted.
pub(super) fn outcome(
    reply: Result<i64, fred::error::Error>,
    cap: u32,
    stats: &StoreStats,
) -> Result<(), StoreError> {
    match reply {
        // 2: already credited, nothing to store; the reward's token has done its job.
        Ok(1 | 2) => {
            stats.written.fetch_add(1, Ordering::Relaxed);
            crate::calls::TOKENS_STORED.inc();
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

/// Writes every write's due index entry (`ZADD NX`: a retry keeps the first time), in
/// one pipeline sent before the tokens' scripts, one `ZADD` per due shard (all of a
/// batch's entries for that shard in it); one answer per write, its shard's.
async fn index_pipeline(client: &Client, batch: &[Write]) -> Vec<Result<(), fred::error::Error>> {
    // Shard key -> the writes for it, in batch order.
    let mut shards: std::collections::BTreeMap<&str, Vec<usize>> =
        std::collections::BTreeMap::new();
    for (i, w) in batch.iter().enumerate() {
        shards.entry(w.due.0.as_str()).or_default().push(i);
    }
    let pipe = client.pipeline();
    for (shard, writes) in &shards {
        let entries: Vec<(f64, &str)> = writes
            .iter()
            .map(|&i| (batch[i].due.2, batch[i].due.1.as_str()))
            .collect();
        let queued: Result<(), _> = pipe
            .zadd(*shard, Some(SetOptions::NX), None, false, false, entries)
            .await;
        if let Err(e) = queued {
            return batch.iter().map(|_| Err(e.clone())).collect();
        }
    }
    let replies = pipe.try_all::<i64>().await;
    if replies.len() != shards.len() {
        let e = replies
            .into_iter()
            .find_map(Result::err)
            .unwrap_or_else(|| {
                fred::error::Error::new(
                    fred::error::ErrorKind::Protocol,
                    "index pipeline answered a different number of replies",
                )
            });
        return batch.iter().map(|_| Err(e.clone())).collect();
    }
    let mut out: Vec<Result<(), fred::error::Error>> = batch.iter().map(|_| Ok(())).collect();
    for ((_, writes), reply) in shards.iter().zip(replies) {
        if let Err(e) = reply {
            for &i in writes {
                out[i] = Err(e.clone());
            }
        }
    }
    out
}

/// The token scripts of the writes whose index entry landed (the others answer their
/// index error and are retried whole): [`WRITE_MANY_LUA`](super::life::WRITE_MANY_LUA) calls of up to
/// [`WRITES_PER_CALL`] writes, grouped by their hash's slot on a Redis Cluster (a
/// script's keys must share one slot there), all in one pipeline.
async fn run_pipeline(
    client: &Client,
    script: &Script,
    batch: &[Write],
    indexed: Vec<Result<(), fred::error::Error>>,
    cap: u32,
    ttl: i64,
) -> Vec<Result<i64, fred::error::Error>> {
    let chunks = reward_runtime::redis::slot_chunks(
        client.is_clustered(),
        (0..indexed.len()).filter(|&i| indexed[i].is_ok()),
        |i| batch[i].key.as_str(),
        WRITES_PER_CALL,
    );
    let calls = chunks
        .iter()
        .map(|chunk| {
            let mut call = Vec::with_capacity(1 + chunk.len() * 3 + 2);
            call.push(Value::from(chunk.len() as i64));
            for &i in chunk {
                call.push(Value::from(batch[i].key.as_str()));
            }
            call.push(Value::from(i64::from(cap)));
            call.push(Value::from(ttl));
            for &i in chunk {
                call.push(Value::from(batch[i].field.as_str()));
                call.push(Value::from(batch[i].value.as_str()));
            }
            call
        })
        .collect::<Vec<_>>();
    let replies = script.eval_pipeline::<Value>(client, &calls).await;
    let mut out: Vec<Result<i64, fred::error::Error>> = indexed
        .into_iter()
        .map(|ix| {
            ix.and_then(|()| {
                Err(fred::error::Error::new(
                    fred::error::ErrorKind::Protocol,
                    "a token write got no answer",
                ))
            })
        })
        .collect();
    for (chunk, reply) in chunks.iter().zip(replies) {
        match reply {
            Ok(Value::Array(items)) if items.len() == chunk.len() => {
                for (&i, item) in chunk.iter().zip(items) {
                    out[i] = write_reply(item);
                }
            }
            Ok(other) => {
                let e = fred::error::Error::new(
                    fred::error::ErrorKind::Protocol,
                    format!("a write script call answered {other:?}"),
                );
                for &i in chunk {
                    out[i] = Err(e.clone());
                }
            }
            Err(e) => {
                for &i in chunk {
                    out[i] = Err(e.clone());
                }
            }
        }
    }
    out
}

/// One write's reply in a [`WRITE_MANY_LUA`](super::life::WRITE_MANY_LUA) answer: its code, or the text of the
/// command Redis refused for it. A key of another type (`WRONGTYPE`) fails the same way
/// every time it is sent, so it is not retried (the kind a refused single script call
/// gets); anything else Redis can refuse mid-script (out of memory, a replica that
/// became read-only in a failover) passes, so it is retried like a lost connection.
pub(super) fn write_reply(item: Value) -> Result<i64, fred::error::Error> {
    match item {
        Value::Integer(n) => Ok(n),
        other => {
            let text = other.as_string().unwrap_or_else(|| format!("{other:?}"));
            let kind = if text.starts_with("WRONGTYPE") {
                fred::error::ErrorKind::InvalidArgument
            } else {
                fred::error::ErrorKind::Unknown
            };
            Err(fred::error::Error::new(kind, text))
        }
    }
}
