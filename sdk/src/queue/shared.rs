//! What the queue's tasks share: the producers and their health, the settings, the
//! counts of events not yet settled, the spool thread's channel. The engine
//! ([`super::engine`]) owns it and starts the workers; the workers (the dispatchers,
//! the spool thread, the replay loop) each hold an `Arc` (or a `Weak`) of it and
//! nothing of the engine, so the imports run engine -> workers -> shared.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use base64::Engine as _;
use reward_runtime::counters::{Counted, Timing};
use tokio::sync::{Notify, mpsc, oneshot};

use super::envelope::{Envelope, Settled};
use super::producer::Producer;
use super::stats::{QueueStats, StatsSnapshot};
use crate::config::{BatchConfig, QueueConfig, RetryConfig, Routing, SpoolConfig};
use crate::spool::{Replay, SpoolError};

/// What the spool thread is asked to do.
pub(super) enum SpoolCmd {
    Append(Envelope),
    Take(oneshot::Sender<Result<Replay, SpoolError>>),
    Ack(Replay, oneshot::Sender<Result<(), SpoolError>>),
    Release(Replay),
    Sync(oneshot::Sender<()>),
}

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
    pub(super) fn new(producer: &str) -> Self {
        Self {
            failing_since: AtomicI64::new(-1),
            sent: Counted::with_label("reward_sdk_sent_total", "producer", producer),
            failovers_from: Counted::with_label("reward_sdk_failovers_total", "from", producer),
            send_seconds: Timing::with_label("reward_sdk_send_seconds", "producer", producer),
        }
    }
}

/// The state every queue task shares.
pub(super) struct Shared {
    pub(super) routing: Arc<ArcSwap<Routing>>,
    pub(super) producers: BTreeMap<String, Arc<dyn Producer>>,
    pub(super) health: BTreeMap<String, Health>,
    pub(super) batch: BatchConfig,
    pub(super) retry: RetryConfig,
    pub(super) spool_cfg: SpoolConfig,
    /// The origin of [`Health::failing_since`]. Tokio's clock, like the backoffs and
    /// the replay period it is compared with: the same instant as `std`'s in a running
    /// service, and it moves with them when a test pauses time.
    pub(super) started: tokio::time::Instant,
    pub(super) unsettled: AtomicU64,
    pub(super) settled: Notify,
    pub(super) retry_backlog: AtomicU64,
    /// Per topic: when a batch last found both of its producers down (its events
    /// failed on both and went to the spool) or last went to try them while they
    /// were, in milliseconds since the SDK started ([`Shared::elapsed_ms`]).
    pub(super) found_down: std::sync::Mutex<BTreeMap<String, i64>>,
    pub(super) closing: AtomicBool,
    pub(super) stats: QueueStats,
    pub(super) spool_tx: mpsc::UnboundedSender<SpoolCmd>,
    pub(super) spool_bytes: Arc<AtomicU64>,
    /// `reward_sdk_buffer_events`, moved with `unsettled` (added to, never set: several
    /// engines in one process share the series, and each adds its own).
    pub(super) buffer_gauge: metrics::Gauge,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("producers", &self.producers.keys().collect::<Vec<_>>())
            .field("unsettled", &self.unsettled.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Drop for Shared {
    /// Events an engine still held when it went (a close that ran out of time) leave
    /// the process's `reward_sdk_buffer_events` with it, so a process that starts
    /// SDKs again does not carry a phantom backlog.
    fn drop(&mut self) {
        let left = self.unsettled.load(Ordering::Acquire);
        if left > 0 {
            self.buffer_gauge.decrement(left as f64);
        }
    }
}

impl Shared {
    pub(super) fn elapsed_ms(&self) -> i64 {
        i64::try_from(self.started.elapsed().as_millis()).unwrap_or(i64::MAX)
    }

    /// `n` events left the engine's hands (delivered, spooled or logged).
    pub(super) fn settle(&self, n: u64) {
        if n == 0 {
            return;
        }
        self.buffer_gauge.decrement(n as f64);
        let before = self.unsettled.fetch_sub(n, Ordering::AcqRel);
        if before <= n {
            self.settled.notify_waiters();
        }
    }

    pub(super) fn stats(&self) -> StatsSnapshot {
        let per_producer = self
            .health
            .iter()
            .filter(|(_, h)| h.sent.get() > 0)
            .map(|(name, h)| (name.clone(), h.sent.get()))
            .collect();
        self.stats
            .snapshot(self.unsettled.load(Ordering::Acquire), per_producer)
    }

    pub(super) fn spool_bytes(&self) -> u64 {
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

    /// Records a producer's answer: healthy again, or failing since now.
    pub(super) fn mark(&self, producer: &str, ok: bool) {
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

    /// Notes that a batch of `q`'s topic found both of its producers down.
    pub(super) fn found_down(&self, q: &QueueConfig) {
        let now = self.elapsed_ms();
        let mut seen = self.found_down.lock().unwrap_or_else(|e| e.into_inner());
        seen.insert(q.topic.clone(), now);
    }

    /// Whether a batch of `q`'s topic goes straight to the spool: both producers have
    /// been failing for `spool.after_ms` and a batch of this topic found them down
    /// within the last replay period (`spool.replay_every_ms`). Past that period one
    /// batch tries them again (the probe; the others keep to the spool for another
    /// period), so a broker's return is noticed by the spool's replay or by a probe.
    /// Kept per topic: a topic whose records fail on both (deleted, refused) does
    /// not send another topic on the same brokers to the spool.
    pub(super) fn spool_at_once(&self, q: &QueueConfig) -> bool {
        if !self.both_down(q) {
            return false;
        }
        let now = self.elapsed_ms();
        let period = i64::try_from(self.spool_cfg.replay_every_ms.max(10)).unwrap_or(i64::MAX);
        let mut seen = self.found_down.lock().unwrap_or_else(|e| e.into_inner());
        match seen.get_mut(&q.topic) {
            Some(at) if now.saturating_sub(*at) < period => true,
            Some(at) => {
                *at = now;
                false
            }
            None => false,
        }
    }

    /// Whether both of a queue's producers have been failing for the spool window
    /// (`spool.after_ms`).
    pub(super) fn both_down(&self, q: &QueueConfig) -> bool {
        let window = Duration::from_millis(self.spool_cfg.after_ms);
        self.failing_for(&q.primary) >= window && self.failing_for(&q.backup) >= window
    }

    /// How long a producer has been failing (zero when healthy).
    pub(super) fn failing_for(&self, producer: &str) -> Duration {
        let since = self
            .health
            .get(producer)
            .map_or(-1, |h| h.failing_since.load(Ordering::Relaxed));
        if since < 0 {
            return Duration::ZERO;
        }
        Duration::from_millis(u64::try_from(self.elapsed_ms() - since).unwrap_or(0))
    }

    pub(super) fn spool(&self, envs: Vec<Envelope>) {
        for e in envs {
            if let Err(mpsc::error::SendError(SpoolCmd::Append(e))) =
                self.spool_tx.send(SpoolCmd::Append(e))
            {
                self.last_resort(&e, "spool thread gone");
                self.settle(1);
            }
        }
    }

    pub(super) fn last_resort(&self, e: &Envelope, why: &str) {
        e.notify(Settled::Logged);
        self.stats.logged.inc();
        tracing::error!(
            queue = %e.queue,
            trade_no = %e.key,
            event_b64 = %base64::engine::general_purpose::STANDARD.encode(&e.payload),
            reason = why,
            "event could be neither sent nor spooled; logged for manual replay"
        );
    }
}
