//! Writes not yet answered: each holds one of `store.max_pending` places ([`Held`])
//! while it is queued, in flight or waiting for its retry, and what the writer task
//! and every place share.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, oneshot};

use super::answer::Submitted;
use super::error::StoreError;
use super::stats::StoreStats;
use crate::config::StoreConfig;

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
    drained: Notify,
    /// `max_pending` places.
    room: Arc<Semaphore>,
    pub(super) cfg: Arc<StoreConfig>,
    /// The writer's queue, for retries (weak: the store's handles own the queue).
    pub(super) requeue: mpsc::WeakUnboundedSender<Write>,
    /// When the last give-up was logged (ms since `started`): one line a second at most.
    logged_ms: AtomicU64,
    started: Instant,
    /// `reward_sdk_token_writes_pending`, moved with `stats.pending` (added to, never
    /// set: several stores in one process share the series, and each adds its own).
    pending_gauge: metrics::Gauge,
}

impl Shared {
    /// What a new store's writes share: `cfg.max_pending` places, retries sent back
    /// through `requeue`.
    pub(super) fn new(cfg: Arc<StoreConfig>, requeue: mpsc::WeakUnboundedSender<Write>) -> Self {
        Self {
            stats: StoreStats::default(),
            drained: Notify::new(),
            room: Arc::new(Semaphore::new(cfg.max_pending)),
            cfg,
            requeue,
            logged_ms: AtomicU64::new(0),
            started: Instant::now(),
            pending_gauge: pending_gauge(),
        }
    }

    /// Takes a place for one write, waiting at most `wait` for one to free up;
    /// [`StoreError::Backlog`] when none did (the writer is behind Redis).
    pub(super) async fn hold(self: &Arc<Self>, wait: Duration) -> Result<Held, StoreError> {
        let room = &self.room;
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
                            pending: self.stats.pending.load(Ordering::Acquire),
                            waited: wait,
                        });
                    }
                }
            }
        };
        self.stats.pending.fetch_add(1, Ordering::AcqRel);
        self.pending_gauge.increment(1.0);
        Ok(Held {
            _permit: permit,
            shared: self.clone(),
        })
    }

    /// Waits until Redis has answered every write taken so far (retries included), or
    /// `deadline` passes; returns how many are still unanswered (0 on a clean flush).
    pub(super) async fn flush(&self, deadline: Duration) -> u64 {
        let until = tokio::time::Instant::now() + deadline;
        loop {
            let notified = self.drained.notified();
            tokio::pin!(notified);
            // Registered before the check, so an answer in between is not missed.
            notified.as_mut().enable();
            let left = self.stats.pending.load(Ordering::Acquire);
            if left == 0 {
                return 0;
            }
            if tokio::time::timeout_at(until, notified).await.is_err() {
                return self.stats.pending.load(Ordering::Acquire);
            }
        }
    }

    /// Whether a warning may be logged now (at most one a second).
    pub(super) fn may_log(&self) -> bool {
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
