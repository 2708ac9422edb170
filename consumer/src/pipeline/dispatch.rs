//! The dispatcher: admits each fetched message, queues it by priority, applies the
//! type and global limits, and sends batches to the service's `GrantBatch`.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use prost::Message as _;
use proto::v1::RewardEvent;
use tokio::sync::mpsc;

use reward_runtime::clock::now_ms;

use crate::limits::Verdict;

use super::handler::{Pipeline, SIDE_TASKS};
use super::item::{Item, Park, Ready};

/// How often the dispatcher looks at held messages when nothing else arrives.
const HELD_POLL: Duration = Duration::from_millis(2);

/// Longest a message waits in a batch that is neither full nor alone.
const LINGER: Duration = Duration::from_millis(20);

/// An event dated ahead of the skew the service allows is released this long after it
/// is within it, so a service whose clock runs a little behind the consumer's still
/// takes it.
const SKEW_MARGIN_MS: i64 = 15_000;

/// Side tasks (running or waiting for a permit) past which no new record is admitted.
const SIDE_BACKLOG: u64 = 4 * SIDE_TASKS as u64;
use proto::reasons::DeadLetterReason;

impl Pipeline {
    /// Handles every item received until the sender is dropped, then waits for the
    /// batches and side tasks in flight.
    pub async fn run(self, mut rx: mpsc::Receiver<Item>) {
        let mut queues: BTreeMap<std::cmp::Reverse<u8>, VecDeque<Ready>> = BTreeMap::new();
        // Per type: messages over the type's rate, waiting for its next credit.
        let mut held: BTreeMap<String, VecDeque<Ready>> = BTreeMap::new();
        let mut batch: Vec<Ready> = Vec::new();
        let mut batch_started = Instant::now();
        let mut open = true;
        loop {
            // Take everything already waiting, without blocking.
            self.take_waiting(&mut rx, &mut open, &mut queues);
            if !open && queues.is_empty() {
                // Closing: what waits for its type's rate is parked, not waited for.
                self.park_held(&mut held).await;
            }
            let next = self.next_ready(&mut queues, &mut held).await;
            let Some(ready) = next else {
                // Nothing ready: send what we have, then wait for more (or, with
                // messages held, for their types' next credits).
                if !batch.is_empty() {
                    self.flush(std::mem::take(&mut batch)).await;
                }
                if !open {
                    break;
                }
                self.wait_for_item(&mut rx, held.is_empty(), &mut queues, &mut open)
                    .await;
                continue;
            };
            let priority = self.inner.limits.priority(&ready.event.reward_type);
            self.take_global_credit(&mut batch, priority).await;
            if batch.is_empty() {
                batch_started = Instant::now();
            }
            batch.push(ready);
            if batch.len() >= self.inner.cfg.batch || batch_started.elapsed() >= LINGER {
                self.flush(std::mem::take(&mut batch)).await;
            }
        }
        self.drain().await;
    }

    /// Admits every item already waiting in `rx`, without blocking; `open` turns false
    /// when the sender is gone.
    fn take_waiting(
        &self,
        rx: &mut mpsc::Receiver<Item>,
        open: &mut bool,
        queues: &mut BTreeMap<std::cmp::Reverse<u8>, VecDeque<Ready>>,
    ) {
        while *open && self.may_admit(queues) {
            match rx.try_recv() {
                Ok(item) => self.admit(item, queues),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => *open = false,
            }
        }
    }

    /// Whether to take another record from the source now: not while `window` events
    /// already wait in the priority queues, nor while side tasks (parks, dead letters)
    /// pile up past [`SIDE_BACKLOG`]. A compound record turns into up to
    /// `proto::pack::MAX_EVENTS` events at once; this keeps a run of them (or of
    /// hostile records full of invalid entries) from growing memory without bound: the
    /// source's channel fills and its fetching waits.
    fn may_admit(&self, queues: &BTreeMap<std::cmp::Reverse<u8>, VecDeque<Ready>>) -> bool {
        let queued: usize = queues.values().map(VecDeque::len).sum();
        queued < self.inner.cfg.window.max(1)
            && self.inner.side_pending.load(Ordering::Acquire) < SIDE_BACKLOG
    }

    /// Parks every held message for `limited_delay_ms` (used when closing).
    async fn park_held(&self, held: &mut BTreeMap<String, VecDeque<Ready>>) {
        for (_, q) in std::mem::take(held) {
            for ready in q {
                self.park_later(ready, Park::Limited, None).await;
            }
        }
    }

    /// The next message to batch: a held one whose type has a credit now, else the
    /// first queued one (highest priority first) that passes its type's limit.
    async fn next_ready(
        &self,
        queues: &mut BTreeMap<std::cmp::Reverse<u8>, VecDeque<Ready>>,
        held: &mut BTreeMap<String, VecDeque<Ready>>,
    ) -> Option<Ready> {
        // A held message whose type has a credit now goes first; then new ones.
        // Held messages go first, unless a higher-priority type is queued.
        let top = queues.keys().next().map(|p| p.0);
        let mut next = self.release_held(held, top).await;
        while next.is_none() {
            let Some(ready) = queues.iter_mut().find_map(|(_, q)| q.pop_front()) else {
                break;
            };
            next = self.type_gate(ready, held).await;
        }
        queues.retain(|_, q| !q.is_empty());
        next
    }

    /// Waits for the next item and admits it: without limit when nothing is held,
    /// else at most `HELD_POLL`; `open` turns false when the sender is gone.
    async fn wait_for_item(
        &self,
        rx: &mut mpsc::Receiver<Item>,
        held_is_empty: bool,
        queues: &mut BTreeMap<std::cmp::Reverse<u8>, VecDeque<Ready>>,
        open: &mut bool,
    ) {
        if self.inner.side_pending.load(Ordering::Acquire) >= SIDE_BACKLOG {
            // Side tasks are behind: let them catch up before taking more.
            tokio::time::sleep(HELD_POLL).await;
            return;
        }
        let recv = if held_is_empty {
            rx.recv().await.map(Some)
        } else {
            match tokio::time::timeout(HELD_POLL, rx.recv()).await {
                Ok(r) => r.map(Some),
                Err(_) => Some(None),
            }
        };
        match recv {
            Some(Some(item)) => self.admit(item, queues),
            Some(None) => {}
            None => *open = false,
        }
    }

    /// Takes one credit of the global limit. When it has to wait, the batch so far is
    /// sent first and the wait is counted.
    async fn take_global_credit(&self, batch: &mut Vec<Ready>, priority: u8) {
        if !self.inner.limits.try_global(priority) {
            // About to wait: send what we have first, so a binding limit paces
            // credits one by one instead of in batch-sized lumps.
            if !batch.is_empty() {
                self.flush(std::mem::take(batch)).await;
            }
            self.inner.stats.limiter_wait();
            self.inner.limits.global(priority).await;
        }
    }

    /// Waits for every batch, then every side task (batches start side tasks).
    async fn drain(&self) {
        let n = u32::try_from(self.inner.cfg.concurrency.max(1)).unwrap_or(u32::MAX);
        let _ = self.inner.batches.acquire_many(n).await;
        loop {
            let done = self.inner.side_done.notified();
            if self.inner.side_pending.load(Ordering::Acquire) == 0 {
                break;
            }
            done.await;
        }
    }

    /// The next message allowed by its type's limit: a held one whose type has a
    /// credit now (highest priority first, none below `above`), else none. Held messages of a type that
    /// became fused are parked.
    async fn release_held(
        &self,
        held: &mut BTreeMap<String, VecDeque<Ready>>,
        above: Option<u8>,
    ) -> Option<Ready> {
        let limits = &self.inner.limits;
        // A type fused meanwhile gives its held messages to the delay queue at once,
        // whatever its priority, so they do not sit in the window while it is fused.
        let fused: Vec<String> = held
            .keys()
            .filter(|t| limits.is_fused(t))
            .cloned()
            .collect();
        for t in fused {
            for ready in held.remove(&t).unwrap_or_default() {
                self.park_later(ready, Park::Fused, None).await;
            }
        }
        let mut order: Vec<(u8, String)> = held
            .keys()
            .map(|t| (limits.priority(t), t.clone()))
            .filter(|(p, _)| above.is_none_or(|a| *p >= a))
            .collect();
        order.sort_by_key(|o| std::cmp::Reverse(o.0));
        let mut out = None;
        for (_, t) in order {
            match limits.check(&t) {
                Verdict::Pass => {
                    out = held.get_mut(&t).and_then(VecDeque::pop_front);
                }
                Verdict::Fused => {
                    for ready in held.remove(&t).unwrap_or_default() {
                        self.park_later(ready, Park::Fused, None).await;
                    }
                }
                Verdict::Limited => {}
            }
            if out.is_some() {
                break;
            }
        }
        held.retain(|_, q| !q.is_empty());
        out
    }

    /// Applies the type limit to a new message: `Some` if it may go on now; otherwise
    /// it is held (its type has room to hold it) or parked.
    async fn type_gate(
        &self,
        ready: Ready,
        held: &mut BTreeMap<String, VecDeque<Ready>>,
    ) -> Option<Ready> {
        let t = ready.event.reward_type.clone();
        let waiting = held.get(&t).is_some_and(|q| !q.is_empty());
        let verdict = if waiting {
            // Others of this type are already waiting: keep their order.
            if self.inner.limits.is_fused(&t) {
                Verdict::Fused
            } else {
                Verdict::Limited
            }
        } else {
            self.inner.limits.check(&t)
        };
        match verdict {
            Verdict::Pass => Some(ready),
            Verdict::Fused => {
                self.park_later(ready, Park::Fused, None).await;
                None
            }
            Verdict::Limited => {
                let room = self.hold_room(&t);
                let q = held.entry(t).or_default();
                if q.len() < room {
                    q.push_back(ready);
                } else {
                    self.park_later(ready, Park::Limited, None).await;
                }
                None
            }
        }
    }

    /// How many messages of a type may wait in memory for its rate (`hold_ms` worth).
    fn hold_room(&self, reward_type: &str) -> usize {
        let rate = self.inner.limits.limit_of(reward_type).rate;
        let n = rate * self.inner.cfg.hold_ms as f64 / 1000.0;
        (n.ceil() as usize).clamp(1, self.inner.cfg.window)
    }

    /// Unpacks a fetched record into its events ([`proto::pack`]; an old
    /// single-event record is one event) and admits each.
    fn admit(&self, item: Item, queues: &mut BTreeMap<std::cmp::Reverse<u8>, VecDeque<Ready>>) {
        let in_flight = &self.inner.in_flight_events;
        if !proto::pack::is_pack(&item.raw) {
            in_flight.increment(1.0);
            return self.admit_event(item, queues);
        }
        match proto::pack::unpack(item.raw.clone()) {
            Ok(events) => {
                // Each event settles (and calls `done`) on its own.
                in_flight.increment(events.len() as f64);
                let parts = Arc::new(AtomicUsize::new(events.len()));
                for e in events {
                    let ack = item.ack.shared(&parts);
                    self.admit_event(
                        Item {
                            raw: e.payload,
                            ack,
                        },
                        queues,
                    );
                }
            }
            Err(e) => {
                // The whole record, raw, to the dead-letter topic: nothing in it can
                // be trusted to be an event boundary. It settles once.
                in_flight.increment(1.0);
                self.inner.stats.consumed();
                self.inner.stats.decode_error();
                let me = self.clone();
                let why = format!("compound record: {e}");
                self.side(async move {
                    me.dead_letter(None, item, DeadLetterReason::Decode, &why)
                        .await;
                });
            }
        }
    }

    /// Decodes one event and queues it by priority (or settles it at once).
    fn admit_event(
        &self,
        item: Item,
        queues: &mut BTreeMap<std::cmp::Reverse<u8>, VecDeque<Ready>>,
    ) {
        let stats = &self.inner.stats;
        stats.consumed();
        let event = match RewardEvent::decode(item.raw.as_ref()) {
            Ok(e) => e,
            Err(e) => {
                stats.decode_error();
                let me = self.clone();
                let why = e.to_string();
                self.side(async move {
                    me.dead_letter(None, item, DeadLetterReason::Decode, &why)
                        .await;
                });
                return;
            }
        };
        // Ids the service could never key, or a reward type the SDK's routing does not
        // declare, settle now: every per-type structure (limits, held lines, delay
        // queues, metric labels) stays bounded by the declared types, whatever a
        // hostile payload carries.
        let unknown_type = !self
            .inner
            .sdk
            .routing()
            .types
            .contains_key(&event.reward_type);
        // Over a limit of the pipeline (`proto::limits`): the service would refuse it
        // (an oversized one would fail its whole batch), and a `not_before_ms` far
        // ahead would park it in Redis for as long as a stranger likes; one without a
        // creation time, or dated ahead, would slip past the service's age checks.
        let now = now_ms();
        // Dated ahead of this clock by more than the skew the service allows, but
        // within the hour a park may last: the SDK host's clock runs ahead. The event
        // waits in the delay queue until it is within the skew (the service would
        // refuse it now), rather than being dead-lettered.
        let created = proto::limits::check_created(&event, now);
        let skewed_until = match created {
            Err(proto::limits::LimitError {
                problem: proto::limits::Problem::TooFarAhead { ahead_ms, .. },
                ..
            }) if ahead_ms <= proto::limits::MAX_NOT_BEFORE_AHEAD_MS => Some(
                event
                    .created_at_ms
                    .saturating_sub(proto::limits::MAX_CREATED_AHEAD_MS)
                    .saturating_add(SKEW_MARGIN_MS),
            ),
            _ => None,
        };
        let over = proto::limits::check_event(&event)
            .and_then(|()| proto::limits::check_not_before(&event, now))
            .and_then(|()| {
                if skewed_until.is_some() {
                    Ok(())
                } else {
                    created
                }
            });
        if let Err(e) = over {
            let me = self.clone();
            let why = e.to_string();
            self.side(async move {
                me.dead_letter(Some(event), item, DeadLetterReason::Invalid, &why)
                    .await;
            });
            return;
        }
        if unknown_type {
            let me = self.clone();
            self.side(async move {
                me.dead_letter(
                    Some(event),
                    item,
                    DeadLetterReason::UnknownType,
                    "UNKNOWN_TYPE",
                )
                .await;
            });
            return;
        }
        let due = event.not_before_ms.max(skewed_until.unwrap_or(0));
        if due > now_ms() + 50 {
            let me = self.clone();
            self.side(async move {
                me.park(Ready { item, event }, Park::Early, due).await;
            });
            return;
        }
        let p = self.inner.limits.priority(&event.reward_type);
        queues
            .entry(std::cmp::Reverse(p))
            .or_default()
            .push_back(Ready { item, event });
    }

    /// Runs a side task (park, dead letter), at most `SIDE_TASKS` at once.
    pub(super) fn side(&self, f: impl std::future::Future<Output = ()> + Send + 'static) {
        self.side_with(None, f);
    }

    /// As `side`, with a permit already taken (or to be taken in the task).
    pub(super) fn side_with(
        &self,
        permit: Option<tokio::sync::OwnedSemaphorePermit>,
        f: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        self.inner.side_pending.fetch_add(1, Ordering::AcqRel);
        let me = self.clone();
        tokio::spawn(async move {
            let _permit = match permit {
                Some(p) => Some(p),
                None => me.inner.side.clone().acquire_owned().await.ok(),
            };
            f.await;
            if me.inner.side_pending.fetch_sub(1, Ordering::AcqRel) == 1 {
                me.inner.side_done.notify_waiters();
            }
        });
    }

    /// Sends a batch once a slot is free.
    async fn flush(&self, batch: Vec<Ready>) {
        let permit = self.inner.batches.clone().acquire_owned().await;
        let me = self.clone();
        tokio::spawn(async move {
            let _permit = permit;
            me.grant(batch).await;
        });
    }

    /// One GrantBatch call (retried, [`super::grant::grant_answers`]) and the settling
    /// of its results.
    async fn grant(&self, batch: Vec<Ready>) {
        let events: Vec<&RewardEvent> = batch.iter().map(|r| &r.event).collect();
        let inner = &self.inner;
        let answers = super::grant::grant_answers(
            inner.client.as_ref(),
            &events,
            &inner.auth,
            inner.timeout,
            &inner.stats,
        )
        .await;
        for (ready, r) in batch.into_iter().zip(answers) {
            self.settle(ready, r).await;
        }
    }
}
