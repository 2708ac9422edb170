//! The queue's engine: it starts the dispatchers, the spool thread and the replay loop
//! over the state they share ([`super::shared`]), reserves buffer room, takes events
//! in and closes.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::{Notify, mpsc, oneshot};

use super::dispatch::dispatch;
use super::envelope::Envelope;
use super::error::EnqueueError;
use super::producer::Producer;
use super::report::CloseReport;
use super::shared::{Health, Shared, SpoolCmd};
use super::spool_worker::{replay_loop, spool_thread};
use super::stats::{QueueStats, StatsSnapshot};
use crate::config::{BatchConfig, RetryConfig, Routing, SpoolConfig};
use crate::spool::{Spool, SpoolError};

/// A reserved place in a queue's buffer: fill it or drop it.
#[derive(Debug)]
pub struct Slot {
    permit: mpsc::OwnedPermit<Envelope>,
}

/// The queue: takes events in and closes; its tasks share [`Shared`].
pub(crate) struct Engine {
    shared: Arc<Shared>,
    senders: Mutex<HashMap<String, mpsc::Sender<Envelope>>>,
    dispatchers: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Held, never joined: the spool thread ends when its channel closes.
    _spool_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("shared", &self.shared)
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
        let shared = Arc::new(Shared {
            routing,
            producers,
            health,
            batch,
            retry,
            spool_cfg,
            started: tokio::time::Instant::now(),
            unsettled: AtomicU64::new(0),
            settled: Notify::new(),
            retry_backlog: AtomicU64::new(0),
            found_down: Mutex::new(BTreeMap::new()),
            closing: AtomicBool::new(false),
            stats: QueueStats::new(),
            spool_tx,
            spool_bytes: spool_bytes.clone(),
            buffer_gauge: {
                let g = metrics::gauge!("reward_sdk_buffer_events");
                g.increment(0.0);
                g
            },
        });
        let weak = Arc::downgrade(&shared);
        let sync_every = Duration::from_millis(shared.spool_cfg.sync_ms.max(1));
        let handle = std::thread::Builder::new()
            .name("reward-sdk-spool".into())
            .spawn(move || spool_thread(spool, spool_rx, weak, spool_bytes, sync_every))
            .map_err(|e| SpoolError::Io {
                path: shared.spool_cfg.dir.clone(),
                source: e,
            })?;
        let mut senders = HashMap::new();
        let mut tasks = Vec::new();
        for q in queues {
            let (tx, rx) = mpsc::channel(shared.batch.buffer);
            senders.insert(q.clone(), tx);
            tasks.push(tokio::spawn(dispatch(shared.clone(), q, rx)));
        }
        tokio::spawn(replay_loop(Arc::downgrade(&shared)));
        Ok(Arc::new(Self {
            shared,
            senders: Mutex::new(senders),
            dispatchers: Mutex::new(tasks),
            _spool_thread: Mutex::new(Some(handle)),
        }))
    }

    /// Reserves buffer room in `queue`, waiting at most `enqueue_wait_ms`.
    pub(crate) async fn reserve(&self, queue: &str) -> Result<Slot, EnqueueError> {
        let shared = &self.shared;
        if shared.closing.load(Ordering::Acquire) {
            return Err(EnqueueError::Closed);
        }
        let tx = self
            .senders
            .lock()
            .ok()
            .and_then(|s| s.get(queue).cloned())
            .ok_or_else(|| {
                if shared.closing.load(Ordering::Acquire) {
                    EnqueueError::Closed
                } else {
                    EnqueueError::UnknownQueue(queue.to_string())
                }
            })?;
        let wait = Duration::from_millis(shared.batch.enqueue_wait_ms);
        match tokio::time::timeout(wait, tx.reserve_owned()).await {
            Ok(Ok(permit)) => Ok(Slot { permit }),
            Ok(Err(_)) => Err(EnqueueError::Closed),
            Err(_) => {
                metrics::counter!("reward_sdk_backpressure_total", "queue" => queue.to_string())
                    .increment(1);
                Err(EnqueueError::Backpressure {
                    queue: queue.to_string(),
                    capacity: shared.batch.buffer,
                    waited: wait,
                })
            }
        }
    }

    /// Puts an event into a reserved slot: from here on it is the engine's to settle.
    pub(crate) fn commit(&self, slot: Slot, env: Envelope) {
        self.shared.unsettled.fetch_add(1, Ordering::AcqRel);
        self.shared.buffer_gauge.increment(1.0);
        self.shared.stats.accepted.fetch_add(1, Ordering::Relaxed);
        slot.permit.send(env);
    }

    pub(crate) fn stats(&self) -> StatsSnapshot {
        self.shared.stats()
    }

    pub(crate) fn spool_bytes(&self) -> u64 {
        self.shared.spool_bytes()
    }

    /// Stops accepting, then waits until every accepted event is delivered or spooled,
    /// or `deadline` passes.
    pub(crate) async fn close(self: &Arc<Self>, deadline: Duration) -> CloseReport {
        let until = tokio::time::Instant::now() + deadline;
        let shared = &self.shared;
        shared.closing.store(true, Ordering::Release);
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
            let notified = shared.settled.notified();
            if shared.unsettled.load(Ordering::Acquire) == 0 {
                break;
            }
            if tokio::time::timeout_at(until, notified).await.is_err() {
                break;
            }
        }
        let (tx, rx) = oneshot::channel();
        if shared.spool_tx.send(SpoolCmd::Sync(tx)).is_ok() {
            let _ = tokio::time::timeout_at(until, rx).await;
        }
        for p in shared.producers.values() {
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
