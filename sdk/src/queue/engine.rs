//! The engine every queue task shares: it starts the dispatchers, the spool thread and
//! the replay loop, reserves buffer room, takes events in, counts the unsettled ones
//! and closes.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use reward_runtime::counters::{Counted, Timing};
use tokio::sync::{Notify, mpsc, oneshot};

use super::dispatch::dispatch;
use super::spool_worker::{SpoolCmd, replay_loop, spool_thread};
use super::{CloseReport, EnqueueError, Envelope, Producer, QueueStats, Slot, StatsSnapshot};
use crate::config::{BatchConfig, QueueConfig, RetryConfig, Routing, SpoolConfig};
use crate::spool::{Spool, SpoolError};

/// One producer's state: its run of failures and its metric handles (registered on
/// first use and kept: never looked up by name per batch).
#[derive(Debug)]
pub(super) struct Health {
    /// Milliseconds since the SDK started at which the current run of failures
    /// began; -1 while the producer is healthy.
    pub(super) failing_since: AtomicI64,
    /// Events it delivered (`reward_sdk_sent_total{producer}`; the stats read it).
    pub(super) sent: Counted,
    /// Events that failed over from it to their second producer.
    pub(super) failovers_from: Counted,
    /// Its batch send times.
    pub(super) send_seconds: Timing,
}

impl Health {
    fn new(producer: &str) -> Self {
        Self {
            failing_since: AtomicI64::new(-1),
            sent: Counted::with_label("reward_sdk_sent_total", "producer", producer),
            failovers_from: Counted::with_label("reward_sdk_failovers_total", "from", producer),
            send_seconds: Timing::with_label("reward_sdk_send_seconds", "producer", producer),
        }
    }
}

/// Everything the queue tasks share.
pub(crate) struct Engine {
    routing: Arc<ArcSwap<Routing>>,
    pub(super) producers: BTreeMap<String, Arc<dyn Producer>>,
    pub(super) health: BTreeMap<String, Health>,
    pub(super) batch: BatchConfig,
    pub(super) retry: RetryConfig,
    pub(super) spool_cfg: SpoolConfig,
    started: Instant,
    unsettled: AtomicU64,
    settled: Notify,
    pub(super) retry_backlog: AtomicU64,
    pub(super) closing: AtomicBool,
    pub(super) stats: QueueStats,
    pub(super) spool_tx: mpsc::UnboundedSender<SpoolCmd>,
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
            .map(|k| (k.clone(), Health::new(k)))
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
            stats: QueueStats::new(),
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

    pub(super) fn elapsed_ms(&self) -> i64 {
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

    pub(super) fn settle(&self, n: u64) {
        if n == 0 {
            return;
        }
        let before = self.unsettled.fetch_sub(n, Ordering::AcqRel);
        if before <= n {
            self.settled.notify_waiters();
        }
    }

    pub(crate) fn stats(&self) -> StatsSnapshot {
        let per_producer = self
            .health
            .iter()
            .filter(|(_, h)| h.sent.get() > 0)
            .map(|(name, h)| (name.clone(), h.sent.get()))
            .collect();
        self.stats
            .snapshot(self.unsettled.load(Ordering::Acquire), per_producer)
    }

    pub(crate) fn spool_bytes(&self) -> u64 {
        self.spool_bytes.load(Ordering::Relaxed)
    }

    pub(super) fn queue_config(&self, queue: &str) -> Option<QueueConfig> {
        let routing = self.routing.load();
        routing
            .queues
            .get(queue)
            .or_else(|| routing.queues.get(&routing.default_queue))
            .cloned()
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
