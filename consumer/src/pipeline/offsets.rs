//! The per-partition windows of in-flight offsets: which offsets a source fetched,
//! which are settled, and what may be committed.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

use super::part::PartKey;
use crate::tracker::{Generation, TrackError, Window};

/// Where a message's offset is marked done.
#[derive(Debug, Clone)]
pub struct Ack {
    /// Its partition.
    pub part: PartKey,
    /// The assignment it was fetched in (0: untracked, the mark is a no-op).
    pub generation: Generation,
    /// Its offset.
    pub offset: i64,
    /// Told once the message is settled (sources whose client keeps the offsets,
    /// RocketMQ's push consumer, wait on it).
    pub signal: Option<std::sync::mpsc::Sender<()>>,
    /// For the events of one compound record: how many of them are not settled yet,
    /// shared by their acks. The record's offset is marked (and its source told) when
    /// the last one settles. `None` for a record that carried one event.
    pub parts: Option<Arc<AtomicUsize>>,
}

impl Ack {
    /// One of `n` events of a compound record: the same place, sharing one count.
    pub fn shared(&self, parts: &Arc<AtomicUsize>) -> Ack {
        Ack {
            parts: Some(parts.clone()),
            ..self.clone()
        }
    }

    /// Settles one event; true when that settled the whole record.
    pub fn settle_part(&self) -> bool {
        self.parts
            .as_ref()
            .is_none_or(|p| p.fetch_sub(1, Ordering::AcqRel) == 1)
    }
}

/// The windows of every partition this consumer holds.
#[derive(Debug)]
pub struct Offsets {
    windows: Mutex<HashMap<PartKey, Window>>,
    room: Notify,
    next_generation: AtomicU64,
    capacity: usize,
    /// Lag in time (and RocketMQ's in records), fed by the sources and settlements.
    pub lag: super::lag::Lag,
}

impl Offsets {
    /// Windows of `capacity` offsets each.
    pub fn new(capacity: usize) -> Self {
        Offsets {
            windows: Mutex::new(HashMap::new()),
            room: Notify::new(),
            next_generation: AtomicU64::new(1),
            capacity,
            lag: super::lag::Lag::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PartKey, Window>> {
        // A panic while holding the lock cannot leave a window half-changed in a way
        // that loses a commit (each method changes one window in one step).
        self.windows.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn fresh(&self) -> Window {
        Window::new(
            self.next_generation.fetch_add(1, Ordering::Relaxed),
            self.capacity,
        )
    }

    /// New assignments: each partition starts a new window (and generation).
    pub fn assign(&self, parts: &[PartKey]) {
        let mut w = self.lock();
        for p in parts {
            w.insert(p.clone(), self.fresh());
        }
    }

    /// Revoked partitions: answers the offsets to commit for them; the rest of their
    /// windows is dropped (late completions are ignored by generation).
    pub fn revoke(&self, parts: &[PartKey]) -> Vec<(PartKey, i64)> {
        let mut w = self.lock();
        let mut out = Vec::new();
        for p in parts {
            // Its gauges say 0 from here: this member holds nothing of it (the series
            // stays, so a sum over the members is right).
            let (t, n) = (p.0.to_string(), p.1.to_string());
            metrics::gauge!("reward_consumer_window_occupancy_messages", "topic" => t.clone(), "partition" => n.clone())
                .set(0.0);
            metrics::gauge!("reward_consumer_commit_lag_messages", "topic" => t.clone(), "partition" => n.clone())
                .set(0.0);
            metrics::gauge!("reward_consumer_lag_records", "topic" => t, "partition" => n).set(0.0);
            if let Some(mut win) = w.remove(p)
                && let Some(pos) = win.position()
            {
                win.advance();
                out.push((p.clone(), pos));
            }
        }
        self.lag.forget(parts);
        self.room.notify_one();
        out
    }

    /// Tracks a fetched offset, waiting while its window is full. `Ok(0)`: the offset
    /// is below one already tracked (a redelivery after a seek); handle it, but its
    /// completion marks nothing.
    pub async fn track(&self, part: &PartKey, offset: i64) -> Generation {
        let mut waited = false;
        loop {
            {
                let mut w = self.lock();
                let win = w.entry(part.clone()).or_insert_with(|| self.fresh());
                if win.is_full() {
                    win.compact();
                }
                match win.track(offset) {
                    Ok(()) => return win.generation(),
                    Err(TrackError::NotRising { .. }) => return 0,
                    Err(TrackError::Full(_)) => {}
                }
            }
            if !waited {
                metrics::counter!("reward_consumer_window_full_total").increment(1);
                waited = true;
            }
            let _ = tokio::time::timeout(Duration::from_millis(50), self.room.notified()).await;
        }
    }

    /// Marks an offset done.
    pub fn complete(&self, ack: &Ack) {
        self.lag.settled(&ack.part, ack.offset);
        if ack.generation == 0 {
            return;
        }
        let done = self
            .lock()
            .get_mut(&ack.part)
            .is_some_and(|w| w.complete(ack.generation, ack.offset));
        if done {
            self.room.notify_one();
        }
    }

    /// The offsets to commit now, for every partition whose finished prefix moved.
    pub fn advance_all(&self) -> Vec<(PartKey, i64)> {
        let mut w = self.lock();
        w.iter_mut()
            .filter_map(|(p, win)| win.advance().map(|o| (p.clone(), o)))
            .collect()
    }

    /// The commit position of every partition (for the final commit on shutdown).
    pub fn positions(&self) -> Vec<(PartKey, i64)> {
        let mut w = self.lock();
        w.iter_mut()
            .filter_map(|(p, win)| {
                win.advance();
                win.position().map(|o| (p.clone(), o))
            })
            .collect()
    }

    /// Messages in flight (tracked, not yet popped) over all partitions.
    pub fn in_flight(&self) -> usize {
        self.lock().values().map(Window::unfinished).sum()
    }

    /// Partitions this member holds a window for (Kafka), or, for a source whose
    /// client keeps the offsets (RocketMQ's push consumer, which does not say what it
    /// holds), the queues it read from lately (see [`super::lag`]).
    pub fn assigned(&self) -> usize {
        self.lock().len().max(self.lag.len())
    }

    /// Each partition's first offset not finished here (see
    /// [`Window::waiting_from`]), for the lag against the broker's high watermark.
    pub fn waiting_from(&self) -> Vec<(PartKey, Generation, i64)> {
        self.lock()
            .iter()
            .filter_map(|(p, w)| w.waiting_from().map(|o| (p.clone(), w.generation(), o)))
            .collect()
    }

    /// Sets `reward_consumer_lag_records` of `part` to `lag`, only while this member
    /// still holds the partition in the same assignment (`generation`): under the
    /// windows' lock, which [`Offsets::revoke`] takes to set it to 0, so a measurement
    /// that finishes after a revocation never writes over that 0.
    pub fn set_lag(&self, part: &PartKey, generation: Generation, lag: i64) {
        let w = self.lock();
        if w.get(part)
            .is_some_and(|win| win.generation() == generation)
        {
            metrics::gauge!(
                "reward_consumer_lag_records",
                "topic" => part.0.to_string(),
                "partition" => part.1.to_string()
            )
            .set(lag.max(0) as f64);
        }
    }

    /// Reports window occupancy, commit lag and lag in time per partition as gauges.
    pub fn report(&self) {
        self.lag.report();
        for ((topic, partition), win) in self.lock().iter() {
            let (t, p) = (topic.to_string(), partition.to_string());
            metrics::gauge!("reward_consumer_window_occupancy_messages", "topic" => t.clone(), "partition" => p.clone())
                .set(win.len() as f64);
            metrics::gauge!("reward_consumer_commit_lag_messages", "topic" => t, "partition" => p)
                .set(win.commit_lag() as f64);
        }
    }
}
