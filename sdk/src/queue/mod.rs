//! The virtual queue: named queues over a primary and a backup broker, with async
//! batching, failover, a retry loop and the durable spool.
//!
//! # Path of one event
//! ```text
//! send_reward ─▶ buffer (bounded, per queue) ─▶ dispatcher: batch on size or linger
//!     ─▶ first producer (uid bucket < ratio ? primary : backup) ─ failed ─▶ the other
//!     ─ failed ─▶ failure channel ─▶ retry loop (backoff, alternating producers)
//!     ─ both producers failing longer than spool.after_ms, or closing ─▶ spool
//! spool ─ a producer answers again ─▶ replay ─▶ broker ─▶ segment deleted
//! ```
//! An event is *settled* when a broker acknowledged it or the spool synced it; the
//! SDK counts accepted-but-unsettled events, and [`crate::Sdk::close`] waits for that
//! count to reach zero.
//!
//! # Bounds
//! - the buffer holds at most `batch.buffer` events per queue; a full buffer makes
//!   `send_reward` wait up to `batch.enqueue_wait_ms`, then fail with back-pressure;
//! - the retry backlog is capped at `batch.buffer` events per SDK: past it, failed
//!   events go straight to the spool instead of piling up in memory;
//! - the spool is capped at `spool.max_bytes`; only if the spool cannot take an event
//!   is it logged (base64) as the last resort, and counted.
//!
//! # Ratio
//! The user's bucket is `uid % 100` when the user id is a number, else a CRC-32 of it
//! modulo 100: stable, so a user always starts on the same broker for a given ratio.

pub mod producer;

#[cfg(feature = "rocketmq")]
pub use producer::rocketmq_runtime;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use base64::Engine as _;
use bytes::Bytes;
use prost::Message as _;
use tokio::sync::{Notify, Semaphore, mpsc, oneshot};

use crate::config::{BatchConfig, QueueConfig, RetryConfig, Routing, SpoolConfig};
use crate::spool::{Replay, Spool, SpoolError};
pub use producer::{OutMsg, ProduceError, Producer};

/// The bucket (0..100) a user id falls in for ratio routing.
pub fn bucket(user_id: &str) -> u8 {
    let n = match user_id.parse::<u64>() {
        Ok(n) => n,
        Err(_) => u64::from(crc32fast::hash(user_id.as_bytes())),
    };
    u8::try_from(n % 100).unwrap_or(0)
}

/// An accepted event on its way.
#[derive(Debug, Clone)]
pub struct Envelope {
    /// The virtual queue.
    pub queue: Arc<str>,
    /// Trade number (partition key).
    pub key: String,
    /// The user's ratio bucket.
    pub bucket: u8,
    /// The encoded event.
    pub payload: Bytes,
    attempt: u32,
    notice: Option<Notice>,
}

/// How an accepted event settled (see [`crate::Sdk::enqueue_confirmed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// A broker acknowledged it.
    Delivered,
    /// Both brokers failed; it is in the spool file (synced) and will be replayed.
    Spooled,
    /// Neither a broker nor the spool took it; it was only logged (base64).
    Logged,
}

/// One waiter's side of a settlement; shared by the envelope's clones, fired once.
type Notice = Arc<Mutex<Option<oneshot::Sender<Settled>>>>;

impl Envelope {
    /// A new envelope for `queue`.
    pub fn new(queue: Arc<str>, key: String, bucket: u8, payload: Bytes) -> Self {
        Self {
            queue,
            key,
            bucket,
            payload,
            attempt: 0,
            notice: None,
        }
    }

    /// The same envelope, telling the returned receiver how it settled.
    pub(crate) fn with_notice(mut self) -> (Self, oneshot::Receiver<Settled>) {
        let (tx, rx) = oneshot::channel();
        self.notice = Some(Arc::new(Mutex::new(Some(tx))));
        (self, rx)
    }

    fn notify(&self, how: Settled) {
        if let Some(n) = &self.notice
            && let Ok(mut n) = n.lock()
            && let Some(tx) = n.take()
        {
            let _ = tx.send(how);
        }
    }
}

/// Counts since start; read them with [`QueueStats::snapshot`].
#[derive(Debug, Default)]
pub struct QueueStats {
    accepted: AtomicU64,
    delivered: AtomicU64,
    failovers: AtomicU64,
    retries: AtomicU64,
    spooled: AtomicU64,
    replayed: AtomicU64,
    logged: AtomicU64,
    per_producer: Mutex<BTreeMap<String, u64>>,
}

/// A copy of the counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Events accepted into the buffers.
    pub accepted: u64,
    /// Events a broker acknowledged (replays included).
    pub delivered: u64,
    /// Events that went to their second producer after the first failed.
    pub failovers: u64,
    /// Events handed to the retry loop.
    pub retries: u64,
    /// Events written to the spool.
    pub spooled: u64,
    /// Spooled events later delivered.
    pub replayed: u64,
    /// Events only logged (the spool failed too).
    pub logged: u64,
    /// Accepted and not yet delivered or spooled.
    pub unsettled: u64,
    /// Deliveries per producer name.
    pub per_producer: BTreeMap<String, u64>,
}

impl QueueStats {
    fn snapshot(&self, unsettled: u64) -> StatsSnapshot {
        StatsSnapshot {
            accepted: self.accepted.load(Ordering::Relaxed),
            delivered: self.delivered.load(Ordering::Relaxed),
            failovers: self.failovers.load(Ordering::Relaxed),
            retries: self.retries.load(Ordering::Relaxed),
            spooled: self.spooled.load(Ordering::Relaxed),
            replayed: self.replayed.load(Ordering::Relaxed),
            logged: self.logged.load(Ordering::Relaxed),
            unsettled,
            per_producer: self
                .per_producer
                .lock()
                .map(|m| m.clone())
                .unwrap_or_default(),
        }
    }
}

#[derive(Debug, Default)]
struct Health {
    /// Milliseconds since the SDK started at which the current run of failures
    /// began; -1 while the producer is healthy.
    failing_since: AtomicI64,
}

enum SpoolCmd {
    Append(Envelope),
    Take(oneshot::Sender<Result<Replay, SpoolError>>),
    Ack(Replay, oneshot::Sender<Result<(), SpoolError>>),
    Release(Replay),
    Sync(oneshot::Sender<()>),
}

/// Everything the queue tasks share.
pub(crate) struct Engine {
    routing: Arc<ArcSwap<Routing>>,
    producers: BTreeMap<String, Arc<dyn Producer>>,
    health: BTreeMap<String, Health>,
    batch: BatchConfig,
    retry: RetryConfig,
    spool_cfg: SpoolConfig,
    started: Instant,
    unsettled: AtomicU64,
    settled: Notify,
    retry_backlog: AtomicU64,
    closing: AtomicBool,
    stats: QueueStats,
    spool_tx: mpsc::UnboundedSender<SpoolCmd>,
    spool_bytes: Arc<AtomicU64>,
    senders: Mutex<HashMap<String, mpsc::Sender<Envelope>>>,
    dispatchers: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    spool_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("producers", &self.producers.keys().collect::<Vec<_>>())
            .field("unsettled", &self.unsettled.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// What `close` left behind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloseReport {
    /// Counters at the end.
    pub stats: StatsSnapshot,
    /// Events neither delivered nor spooled when the deadline passed (0 on a clean close).
    pub left: u64,
    /// Bytes in the spool, waiting for the next start.
    pub spool_bytes: u64,
    /// Token writes Redis had not answered when the deadline passed (queued, in
    /// flight or waiting for a retry). Their rewards are unaffected; the tokens may be
    /// missing from the store.
    pub tokens_left: u64,
    /// Token writes given up since start (see [`crate::Sdk::token_write_failures`]).
    pub tokens_unstored: u64,
}

/// Why an event was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnqueueError {
    /// The queue's buffer stayed full for the whole wait.
    #[error("queue {queue} is full ({capacity} events) for {waited:?}")]
    Backpressure {
        /// The queue.
        queue: String,
        /// Its capacity.
        capacity: usize,
        /// How long the call waited.
        waited: Duration,
    },
    /// `close` has begun.
    #[error("the SDK is closing")]
    Closed,
    /// The routing names a queue that has no buffer (it appeared after start-up).
    #[error("queue {0} was not configured at start-up")]
    UnknownQueue(String),
}

/// A reserved place in a queue's buffer: fill it or drop it.
#[derive(Debug)]
pub struct Slot {
    permit: mpsc::OwnedPermit<Envelope>,
}

impl Engine {
    /// Starts the dispatchers, the spool thread and the replay loop.
    pub(crate) fn start(
        routing: Arc<ArcSwap<Routing>>,
        producers: BTreeMap<String, Arc<dyn Producer>>,
        batch: BatchConfig,
        retry: RetryConfig,
        spool_cfg: SpoolConfig,
    ) -> Result<Arc<Self>, SpoolError> {
        let spool = Spool::open(&spool_cfg.dir, spool_cfg.max_bytes)?;
        let spool_bytes = Arc::new(AtomicU64::new(spool.bytes()));
        let (spool_tx, spool_rx) = mpsc::unbounded_channel();
        let health = producers
            .keys()
            .map(|k| {
                let h = Health::default();
                h.failing_since.store(-1, Ordering::Relaxed);
                (k.clone(), h)
            })
            .collect();
        let queues: Vec<String> = routing.load().queues.keys().cloned().collect();
        let engine = Arc::new(Self {
            routing,
            producers,
            health,
            batch,
            retry,
            spool_cfg,
            started: Instant::now(),
            unsettled: AtomicU64::new(0),
            settled: Notify::new(),
            retry_backlog: AtomicU64::new(0),
            closing: AtomicBool::new(false),
            stats: QueueStats::default(),
            spool_tx,
            spool_bytes: spool_bytes.clone(),
            senders: Mutex::new(HashMap::new()),
            dispatchers: Mutex::new(Vec::new()),
            spool_thread: Mutex::new(None),
        });
        let weak = Arc::downgrade(&engine);
        let sync_every = Duration::from_millis(engine.spool_cfg.sync_ms.max(1));
        let handle = std::thread::Builder::new()
            .name("reward-sdk-spool".into())
            .spawn(move || spool_thread(spool, spool_rx, weak, spool_bytes, sync_every))
            .map_err(|e| SpoolError::Io {
                path: engine.spool_cfg.dir.clone(),
                source: e,
            })?;
        if let Ok(mut t) = engine.spool_thread.lock() {
            *t = Some(handle);
        }
        let mut senders = HashMap::new();
        let mut tasks = Vec::new();
        for q in queues {
            let (tx, rx) = mpsc::channel(engine.batch.buffer);
            senders.insert(q.clone(), tx);
            tasks.push(tokio::spawn(dispatch(engine.clone(), q, rx)));
        }
        if let Ok(mut s) = engine.senders.lock() {
            *s = senders;
        }
        if let Ok(mut d) = engine.dispatchers.lock() {
            d.extend(tasks);
        }
        tokio::spawn(replay_loop(Arc::downgrade(&engine)));
        Ok(engine)
    }

    fn elapsed_ms(&self) -> i64 {
        i64::try_from(self.started.elapsed().as_millis()).unwrap_or(i64::MAX)
    }

    /// Reserves buffer room in `queue`, waiting at most `enqueue_wait_ms`.
    pub(crate) async fn reserve(&self, queue: &str) -> Result<Slot, EnqueueError> {
        if self.closing.load(Ordering::Acquire) {
            return Err(EnqueueError::Closed);
        }
        let tx = self
            .senders
            .lock()
            .ok()
            .and_then(|s| s.get(queue).cloned())
            .ok_or_else(|| {
                if self.closing.load(Ordering::Acquire) {
                    EnqueueError::Closed
                } else {
                    EnqueueError::UnknownQueue(queue.to_string())
                }
            })?;
        let wait = Duration::from_millis(self.batch.enqueue_wait_ms);
        match tokio::time::timeout(wait, tx.reserve_owned()).await {
            Ok(Ok(permit)) => Ok(Slot { permit }),
            Ok(Err(_)) => Err(EnqueueError::Closed),
            Err(_) => {
                metrics::counter!("reward_sdk_backpressure_total", "queue" => queue.to_string())
                    .increment(1);
                Err(EnqueueError::Backpressure {
                    queue: queue.to_string(),
                    capacity: self.batch.buffer,
                    waited: wait,
                })
            }
        }
    }

    /// Puts an event into a reserved slot: from here on it is the engine's to settle.
    pub(crate) fn commit(&self, slot: Slot, env: Envelope) {
        self.unsettled.fetch_add(1, Ordering::AcqRel);
        self.stats.accepted.fetch_add(1, Ordering::Relaxed);
        slot.permit.send(env);
    }

    fn settle(&self, n: u64) {
        if n == 0 {
            return;
        }
        let before = self.unsettled.fetch_sub(n, Ordering::AcqRel);
        if before <= n {
            self.settled.notify_waiters();
        }
    }

    pub(crate) fn stats(&self) -> StatsSnapshot {
        self.stats.snapshot(self.unsettled.load(Ordering::Acquire))
    }

    pub(crate) fn spool_bytes(&self) -> u64 {
        self.spool_bytes.load(Ordering::Relaxed)
    }

    fn queue_config(&self, queue: &str) -> Option<QueueConfig> {
        let routing = self.routing.load();
        routing
            .queues
            .get(queue)
            .or_else(|| routing.queues.get(&routing.default_queue))
            .cloned()
    }

    fn mark(&self, producer: &str, ok: bool) {
        let Some(h) = self.health.get(producer) else {
            return;
        };
        if ok {
            h.failing_since.store(-1, Ordering::Relaxed);
        } else {
            let _ = h.failing_since.compare_exchange(
                -1,
                self.elapsed_ms(),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }

    /// How long a producer has been failing (zero when healthy).
    fn failing_for(&self, producer: &str) -> Duration {
        let since = self
            .health
            .get(producer)
            .map_or(-1, |h| h.failing_since.load(Ordering::Relaxed));
        if since < 0 {
            return Duration::ZERO;
        }
        Duration::from_millis(u64::try_from(self.elapsed_ms() - since).unwrap_or(0))
    }

    /// Sends `envs` through one producer; returns those that failed.
    async fn attempt(&self, producer: &str, topic: &str, envs: Vec<Envelope>) -> Vec<Envelope> {
        let Some(p) = self.producers.get(producer) else {
            return envs;
        };
        let msgs: Vec<OutMsg> = envs
            .iter()
            .map(|e| OutMsg {
                key: e.key.clone(),
                payload: e.payload.clone(),
            })
            .collect();
        let start = Instant::now();
        let results = p.send_batch(topic, &msgs).await;
        metrics::histogram!("reward_sdk_send_seconds", "producer" => producer.to_string())
            .record(start.elapsed().as_secs_f64());
        let mut failed = Vec::new();
        let mut ok = 0u64;
        let mut last_err = None;
        for (env, r) in envs
            .into_iter()
            .zip(results.into_iter().map(Some).chain(std::iter::repeat(None)))
        {
            match r {
                Some(Ok(())) => {
                    ok += 1;
                    env.notify(Settled::Delivered);
                }
                Some(Err(e)) => {
                    last_err = Some(e);
                    failed.push(env);
                }
                None => failed.push(env),
            }
        }
        self.mark(producer, failed.is_empty());
        if !failed.is_empty()
            && let Some(e) = last_err
        {
            tracing::debug!(producer, topic, failed = failed.len(), error = %e, "send failed");
        }
        if ok > 0 {
            self.stats.delivered.fetch_add(ok, Ordering::Relaxed);
            if let Ok(mut m) = self.stats.per_producer.lock() {
                *m.entry(producer.to_string()).or_default() += ok;
            }
            metrics::counter!("reward_sdk_sent_total", "producer" => producer.to_string())
                .increment(ok);
            self.settle(ok);
        }
        failed
    }

    /// Failed twice (or more): retry later, or spool.
    fn to_retry(self: &Arc<Self>, envs: Vec<Envelope>, q: &QueueConfig) {
        if envs.is_empty() {
            return;
        }
        let window = Duration::from_millis(self.spool_cfg.after_ms);
        let both_down =
            self.failing_for(&q.primary) >= window && self.failing_for(&q.backup) >= window;
        let backlog = self.retry_backlog.load(Ordering::Relaxed);
        if self.closing.load(Ordering::Acquire)
            || both_down
            || backlog + envs.len() as u64 > self.batch.buffer as u64
        {
            self.spool(envs);
            return;
        }
        let n = envs.len() as u64;
        self.retry_backlog.fetch_add(n, Ordering::Relaxed);
        self.stats.retries.fetch_add(n, Ordering::Relaxed);
        metrics::counter!("reward_sdk_retries_total").increment(n);
        let engine = self.clone();
        let q = q.clone();
        tokio::spawn(async move {
            let attempt = envs.iter().map(|e| e.attempt).max().unwrap_or(0) + 1;
            let shift = attempt.saturating_sub(1).min(20);
            let backoff = engine
                .retry
                .backoff_initial_ms
                .saturating_mul(1 << shift)
                .min(engine.retry.backoff_max_ms);
            tokio::time::sleep(Duration::from_millis(backoff)).await;
            engine.retry_backlog.fetch_sub(n, Ordering::Relaxed);
            let mut envs = envs;
            for e in &mut envs {
                e.attempt = attempt;
            }
            // Alternate: odd attempts start on the backup side of the user's first choice.
            let (first, second): (Vec<_>, Vec<_>) = envs
                .into_iter()
                .partition(|e| (e.bucket < q.ratio) == (attempt % 2 == 0));
            let mut failed = Vec::new();
            if !first.is_empty() {
                failed.extend(engine.attempt(&q.primary, &q.topic, first).await);
            }
            if !second.is_empty() {
                failed.extend(engine.attempt(&q.backup, &q.topic, second).await);
            }
            engine.to_retry(failed, &q);
        });
    }

    fn spool(&self, envs: Vec<Envelope>) {
        for e in envs {
            if let Err(mpsc::error::SendError(SpoolCmd::Append(e))) =
                self.spool_tx.send(SpoolCmd::Append(e))
            {
                self.last_resort(&e, "spool thread gone");
                self.settle(1);
            }
        }
    }

    fn last_resort(&self, e: &Envelope, why: &str) {
        e.notify(Settled::Logged);
        self.stats.logged.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("reward_sdk_logged_total").increment(1);
        tracing::error!(
            queue = %e.queue,
            trade_no = %e.key,
            event_b64 = %base64::engine::general_purpose::STANDARD.encode(&e.payload),
            reason = why,
            "event could be neither sent nor spooled; logged for manual replay"
        );
    }

    /// Stops accepting, then waits until every accepted event is delivered or spooled,
    /// or `deadline` passes.
    pub(crate) async fn close(self: &Arc<Self>, deadline: Duration) -> CloseReport {
        let until = tokio::time::Instant::now() + deadline;
        self.closing.store(true, Ordering::Release);
        // Closing the buffers lets the dispatchers drain and stop.
        if let Ok(mut s) = self.senders.lock() {
            s.clear();
        }
        let tasks: Vec<_> = self
            .dispatchers
            .lock()
            .map(|mut d| d.drain(..).collect())
            .unwrap_or_default();
        for t in tasks {
            let _ = tokio::time::timeout_at(until, t).await;
        }
        loop {
            let notified = self.settled.notified();
            if self.unsettled.load(Ordering::Acquire) == 0 {
                break;
            }
            if tokio::time::timeout_at(until, notified).await.is_err() {
                break;
            }
        }
        let (tx, rx) = oneshot::channel();
        if self.spool_tx.send(SpoolCmd::Sync(tx)).is_ok() {
            let _ = tokio::time::timeout_at(until, rx).await;
        }
        for p in self.producers.values() {
            let _ = tokio::time::timeout_at(until, p.close()).await;
        }
        let stats = self.stats();
        CloseReport {
            left: stats.unsettled,
            stats,
            spool_bytes: self.spool_bytes(),
            tokens_left: 0,
            tokens_unstored: 0,
        }
    }
}

/// One queue's dispatcher: batches on size or linger, routes, sends.
async fn dispatch(engine: Arc<Engine>, queue: String, mut rx: mpsc::Receiver<Envelope>) {
    // Validated to 1..=MAX_IN_FLIGHT_BATCHES, so the u32 conversion holds.
    let window = engine.batch.in_flight_batches;
    let lanes = Arc::new(Semaphore::new(window));
    let linger = Duration::from_millis(engine.batch.linger_ms);
    let max = engine.batch.max_events;
    let gauge = metrics::gauge!("reward_sdk_buffer_events", "queue" => queue.clone());
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        let until = tokio::time::Instant::now() + linger;
        while batch.len() < max {
            match rx.try_recv() {
                Ok(e) => batch.push(e),
                Err(mpsc::error::TryRecvError::Disconnected) => break,
                Err(mpsc::error::TryRecvError::Empty) => {
                    match tokio::time::timeout_at(until, rx.recv()).await {
                        Ok(Some(e)) => batch.push(e),
                        _ => break,
                    }
                }
            }
        }
        gauge.set(rx.len() as f64);
        let Ok(permit) = lanes.clone().acquire_owned().await else {
            break;
        };
        let engine = engine.clone();
        let queue = queue.clone();
        tokio::spawn(async move {
            send_routed(&engine, &queue, batch).await;
            drop(permit);
        });
    }
    // Wait for the batches still on their way.
    let _ = lanes
        .acquire_many(u32::try_from(window).unwrap_or(u32::MAX))
        .await;
}

async fn send_routed(engine: &Arc<Engine>, queue: &str, batch: Vec<Envelope>) {
    let Some(q) = engine.queue_config(queue) else {
        // No queue at all in the routing (cannot pass validation); keep the events.
        engine.spool(batch);
        return;
    };
    let (to_primary, to_backup): (Vec<_>, Vec<_>) =
        batch.into_iter().partition(|e| e.bucket < q.ratio);
    let (a, b) = tokio::join!(
        failover(engine, &q, &q.primary, &q.backup, to_primary),
        failover(engine, &q, &q.backup, &q.primary, to_backup),
    );
    engine.to_retry(a.into_iter().chain(b).collect(), &q);
}

async fn failover(
    engine: &Arc<Engine>,
    q: &QueueConfig,
    first: &str,
    second: &str,
    envs: Vec<Envelope>,
) -> Vec<Envelope> {
    if envs.is_empty() {
        return envs;
    }
    let failed = engine.attempt(first, &q.topic, envs).await;
    if failed.is_empty() {
        return failed;
    }
    engine
        .stats
        .failovers
        .fetch_add(failed.len() as u64, Ordering::Relaxed);
    metrics::counter!("reward_sdk_failovers_total", "from" => first.to_string())
        .increment(failed.len() as u64);
    engine.attempt(second, &q.topic, failed).await
}

/// Owns the spool file: appends and syncs in batches, serves replays.
fn spool_thread(
    mut spool: Spool,
    mut rx: mpsc::UnboundedReceiver<SpoolCmd>,
    engine: std::sync::Weak<Engine>,
    bytes: Arc<AtomicU64>,
    sync_every: Duration,
) {
    let mut pending: Vec<Envelope> = Vec::new();
    let settle = |pending: &mut Vec<Envelope>, spool: &mut Spool| {
        if pending.is_empty() {
            return;
        }
        let Some(engine) = engine.upgrade() else {
            return;
        };
        let synced = spool.sync();
        let n = pending.len() as u64;
        if let Err(e) = synced {
            for p in pending.iter() {
                engine.last_resort(p, &e.to_string());
            }
        } else {
            for p in pending.iter() {
                p.notify(Settled::Spooled);
            }
            engine.stats.spooled.fetch_add(n, Ordering::Relaxed);
            metrics::counter!("reward_sdk_spooled_total").increment(n);
        }
        pending.clear();
        engine.settle(n);
    };
    while let Some(cmd) = rx.blocking_recv() {
        let mut cmds = vec![cmd];
        // Gather what arrived meanwhile, up to one sync period.
        let until = Instant::now() + sync_every;
        while Instant::now() < until {
            match rx.try_recv() {
                Ok(c) => cmds.push(c),
                Err(_) => {
                    if cmds.iter().any(|c| !matches!(c, SpoolCmd::Append(_))) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(1).min(sync_every));
                    if rx.is_empty() {
                        break;
                    }
                }
            }
        }
        for cmd in cmds {
            match cmd {
                SpoolCmd::Append(e) => match spool.append_keyed(&e.queue, &e.key, &e.payload) {
                    Ok(()) => pending.push(e),
                    Err(err) => {
                        if let Some(engine) = engine.upgrade() {
                            engine.last_resort(&e, &err.to_string());
                            engine.settle(1);
                        }
                    }
                },
                SpoolCmd::Take(reply) => {
                    settle(&mut pending, &mut spool);
                    let _ = reply.send(spool.take());
                }
                SpoolCmd::Ack(replay, reply) => {
                    let _ = reply.send(spool.ack(&replay));
                }
                SpoolCmd::Release(replay) => spool.release(&replay),
                SpoolCmd::Sync(reply) => {
                    settle(&mut pending, &mut spool);
                    let _ = reply.send(());
                }
            }
        }
        settle(&mut pending, &mut spool);
        bytes.store(spool.bytes(), Ordering::Relaxed);
        metrics::gauge!("reward_sdk_spool_bytes").set(spool.bytes() as f64);
    }
    let _ = spool.sync();
}

/// Replays the spool whenever it holds data and the engine is not closing.
async fn replay_loop(engine: std::sync::Weak<Engine>) {
    loop {
        let every = match engine.upgrade() {
            Some(e) => Duration::from_millis(e.spool_cfg.replay_every_ms.max(10)),
            None => return,
        };
        tokio::time::sleep(every).await;
        let Some(engine) = engine.upgrade() else {
            return;
        };
        if engine.closing.load(Ordering::Acquire) {
            return;
        }
        if engine.spool_bytes() == 0 {
            continue;
        }
        if let Err(e) = replay_once(&engine).await {
            tracing::warn!(error = %e, "spool replay failed; will try again");
        }
    }
}

/// Replays the spool one segment at a time, oldest first, until it is empty or a
/// segment fails. A delivered segment is deleted before the next is read, so a
/// failure repeats only the segment it happened in (at least once), and memory holds
/// one segment at most.
async fn replay_once(engine: &Arc<Engine>) -> Result<(), String> {
    loop {
        if engine.closing.load(Ordering::Acquire) {
            return Ok(());
        }
        let (tx, rx) = oneshot::channel();
        engine
            .spool_tx
            .send(SpoolCmd::Take(tx))
            .map_err(|_| "spool thread gone".to_string())?;
        let replay = rx
            .await
            .map_err(|_| "spool thread gone".to_string())?
            .map_err(|e| e.to_string())?;
        if replay.is_empty() {
            return Ok(());
        }
        if replay.torn > 0 {
            tracing::warn!(
                bytes = replay.torn,
                "spool held a torn tail (crash mid-write); skipped"
            );
            metrics::counter!("reward_sdk_spool_torn_bytes_total").increment(replay.torn);
        }
        match replay_segment(engine, &replay).await {
            Ok(delivered) => {
                let (tx, rx) = oneshot::channel();
                engine
                    .spool_tx
                    .send(SpoolCmd::Ack(replay, tx))
                    .map_err(|_| "spool thread gone".to_string())?;
                rx.await
                    .map_err(|_| "spool thread gone".to_string())?
                    .map_err(|e| e.to_string())?;
                engine
                    .stats
                    .replayed
                    .fetch_add(delivered, Ordering::Relaxed);
                engine
                    .stats
                    .delivered
                    .fetch_add(delivered, Ordering::Relaxed);
                metrics::counter!("reward_sdk_replayed_total").increment(delivered);
            }
            Err(delivered) => {
                // Some records may have gone out before the failure: they go again
                // with the segment (at least once).
                let _ = engine.spool_tx.send(SpoolCmd::Release(replay));
                return Err(format!(
                    "no producer took a spooled batch ({delivered} of the segment went \
                     out, the segment will repeat)"
                ));
            }
        }
    }
}

/// Sends one segment's records in batches, each to its queue's primary then backup;
/// `Ok(records)` when every batch was acknowledged, `Err(sent so far)` otherwise.
async fn replay_segment(engine: &Arc<Engine>, replay: &crate::spool::Replay) -> Result<u64, u64> {
    let mut delivered = 0u64;
    for chunk in replay.records.chunks(engine.batch.max_events.max(1)) {
        let mut by_queue: BTreeMap<&str, Vec<OutMsg>> = BTreeMap::new();
        for r in chunk {
            // The key it was sent with; a record of the older layout has none, and
            // then its event's trade number is the key.
            let key = r.key.clone().unwrap_or_else(|| {
                proto::v1::RewardEvent::decode(r.payload.as_slice())
                    .map(|e| e.trade_no)
                    .unwrap_or_default()
            });
            by_queue.entry(r.queue.as_str()).or_default().push(OutMsg {
                key,
                payload: Bytes::from(r.payload.clone()),
            });
        }
        for (queue, msgs) in by_queue {
            // A queue removed from the config since falls back to the default queue
            // (queue_config); None only if that is gone too.
            let Some(q) = engine.queue_config(queue) else {
                return Err(delivered);
            };
            let mut sent = false;
            for p in [&q.primary, &q.backup] {
                let Some(producer) = engine.producers.get(p) else {
                    continue;
                };
                let results = producer.send_batch(&q.topic, &msgs).await;
                let ok = results.len() == msgs.len() && results.iter().all(Result::is_ok);
                engine.mark(p, ok);
                if ok {
                    sent = true;
                    break;
                }
            }
            if !sent {
                return Err(delivered);
            }
            delivered += msgs.len() as u64;
        }
    }
    Ok(delivered)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_ids_bucket_by_modulo_others_stably() {
        assert_eq!(bucket("1234"), 34);
        assert_eq!(bucket("99"), 99);
        assert_eq!(bucket("u42"), bucket("u42"));
        assert!(bucket("u42") < 100);
    }
}
