//! The handler every source feeds: decode → limits → `GrantBatch` → settle each
//! message (done, parked for a retry, dead letter, failure topic) → mark its offset.
//!
//! # Flow
//! A source ([`crate::kafka`]) tracks each fetched offset in its partition's window
//! ([`Offsets`]) and sends the message here. The dispatcher keeps one queue per
//! priority and always takes from the highest non-empty one:
//! 1. a payload that does not decode goes to the dead-letter topic with its raw bytes;
//!    an event with ids the service cannot key (`proto::ids`) or a reward type the
//!    SDK's routing does not declare goes to the failure topic (reasons `invalid`,
//!    `unknown_type`), so per-type state and metric labels never grow with what a
//!    payload carries;
//! 2. an event whose `not_before_ms` is still ahead is parked until then;
//! 3. the type check ([`Limits::check`]): over the type's rate → held in memory in
//!    the type's own line (up to `hold_ms` worth of its rate) and released as its
//!    credits come, or, past that, parked for `limited_delay_ms`; fused → parked (the
//!    mover leaves a fused type's backlog alone). Neither counts as a failure, and a
//!    held type never stops the dispatcher: other types pass it. The hold exists
//!    because arrivals come in lumps (a fetch, a mover tick): with park-at-once
//!    alone, a type whose messages arrive every 250 ms with a burst of 5 got 20/s of
//!    its 200/s (measured);
//! 4. the global limit: the dispatcher waits for one credit. This is the only wait, and
//!    because the next message is picked by priority after each credit, cash goes
//!    first when the global rate binds;
//! 5. the message joins the current batch; a batch is sent when it is full, when no
//!    other message is ready (natural batching: no added latency at low load), when
//!    the global limit is about to make the dispatcher wait, or when its first
//!    message has waited 20 ms. So a binding limit meters credits out smoothly rather
//!    than in batch-sized lumps. Up to `concurrency` batches are in flight.
//!
//! # Settling a result
//! | outcome | what happens |
//! |---|---|
//! | GRANTED, DUPLICATE | done |
//! | FAILED_RETRYABLE, RETRY_LATER, no answer | `retry_count + 1`, parked for the backoff (or the service's `retry_after_ms`, if longer); past `max_retries` → dead letter `max_retries` |
//! | FAILED_PERMANENT | done: the service already wrote it to the failure topic (once, by the claim's owner) |
//! | CONFLICT, INVALID, BUDGET_EXHAUSTED | failure topic, reason = the outcome |
//!
//! A message's offset is marked done only after its fate is durable: Redis has the
//! parked copy, or the SDK reports the dead letter on a broker or in its spool. When
//! Redis refuses a park, the event goes straight back to the virtual queue (every
//! queue is tried); when nothing takes a dead letter, its base64 is logged and
//! counted: the last resort. Either way the offset is then marked, so one message
//! never blocks its partition.
//!
//! # Requeue key
//! The mover hands a parked event back to the virtual queue under the partition key
//! `{trade_no}{retry_count}`: a retry lands on another partition than the attempt
//! that failed, so one bad partition (or a consumer stuck on it) does not hold the
//! message's every attempt.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use base64::Engine as _;
use bytes::Bytes;
use prost::Message as _;
use proto::v1::reward_service_client::RewardServiceClient;
use proto::v1::{DeadLetter, GrantBatchRequest, GrantOutcome, GrantResult, RewardEvent};
use sdk::Sdk;
use sdk::queue::Settled;
use tokio::sync::{Notify, Semaphore, mpsc, watch};
use tonic::transport::Channel;

use reward_runtime::clock::now_ms;
use reward_runtime::credential::Credential;

use crate::config::PipelineConfig;
use crate::delay::DelayQueue;
use crate::limits::{Limits, Verdict};
use crate::tracker::{Generation, TrackError, Window};

/// A partition: topic and number.
pub type PartKey = (Arc<str>, i32);

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
}

/// The windows of every partition this consumer holds.
#[derive(Debug)]
pub struct Offsets {
    windows: Mutex<HashMap<PartKey, Window>>,
    room: Notify,
    next_generation: AtomicU64,
    capacity: usize,
}

impl Offsets {
    /// Windows of `capacity` offsets each.
    pub fn new(capacity: usize) -> Self {
        Offsets {
            windows: Mutex::new(HashMap::new()),
            room: Notify::new(),
            next_generation: AtomicU64::new(1),
            capacity,
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
            if let Some(mut win) = w.remove(p)
                && let Some(pos) = win.position()
            {
                win.advance();
                out.push((p.clone(), pos));
            }
        }
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

    /// Partitions (queues) this member holds a window for.
    pub fn assigned(&self) -> usize {
        self.lock().len()
    }

    /// Reports window occupancy and commit lag per partition as gauges.
    pub fn report(&self) {
        for ((topic, partition), win) in self.lock().iter() {
            let (t, p) = (topic.to_string(), partition.to_string());
            metrics::gauge!("reward_consumer_window_occupancy_messages", "topic" => t.clone(), "partition" => p.clone())
                .set(win.len() as f64);
            metrics::gauge!("reward_consumer_commit_lag_messages", "topic" => t, "partition" => p)
                .set(win.commit_lag() as f64);
        }
    }
}

/// Counts since start.
#[derive(Debug, Default)]
pub struct Stats {
    /// Messages taken from the source.
    pub consumed: AtomicU64,
    /// Credited by this consumer's calls.
    pub granted: AtomicU64,
    /// Already credited earlier (a redelivery).
    pub duplicates: AtomicU64,
    /// Parked after a retryable failure.
    pub requeued_failed: AtomicU64,
    /// Parked: over the type's rate.
    pub requeued_limited: AtomicU64,
    /// Parked: the type is fused.
    pub requeued_fused: AtomicU64,
    /// Parked: not due yet.
    pub requeued_early: AtomicU64,
    /// Sent back to the virtual queue at once because Redis refused the park.
    pub requeued_direct: AtomicU64,
    /// Dead letters written (decode errors and exhausted retries).
    pub dead_lettered: AtomicU64,
    /// Written to the failure topic by this consumer.
    pub failure_topic: AtomicU64,
    /// Failed for good (the service wrote the failure topic).
    pub failed_permanent: AtomicU64,
    /// Payloads that did not decode.
    pub decode_errors: AtomicU64,
    /// Only logged: nothing took them.
    pub last_resort: AtomicU64,
    /// Times the dispatcher waited for the global limit.
    pub limiter_waits: AtomicU64,
    /// Parked messages moved back to the virtual queue.
    pub moved: AtomicU64,
    /// GrantBatch calls that failed at the transport.
    pub service_errors: AtomicU64,
}

/// A copy of [`Stats`].
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[allow(missing_docs)]
pub struct StatsSnapshot {
    pub consumed: u64,
    pub granted: u64,
    pub duplicates: u64,
    pub requeued_failed: u64,
    pub requeued_limited: u64,
    pub requeued_fused: u64,
    pub requeued_early: u64,
    pub requeued_direct: u64,
    pub dead_lettered: u64,
    pub failure_topic: u64,
    pub failed_permanent: u64,
    pub decode_errors: u64,
    pub last_resort: u64,
    pub limiter_waits: u64,
    pub moved: u64,
    pub service_errors: u64,
}

impl Stats {
    /// The counts now.
    pub fn snapshot(&self) -> StatsSnapshot {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StatsSnapshot {
            consumed: g(&self.consumed),
            granted: g(&self.granted),
            duplicates: g(&self.duplicates),
            requeued_failed: g(&self.requeued_failed),
            requeued_limited: g(&self.requeued_limited),
            requeued_fused: g(&self.requeued_fused),
            requeued_early: g(&self.requeued_early),
            requeued_direct: g(&self.requeued_direct),
            dead_lettered: g(&self.dead_lettered),
            failure_topic: g(&self.failure_topic),
            failed_permanent: g(&self.failed_permanent),
            decode_errors: g(&self.decode_errors),
            last_resort: g(&self.last_resort),
            limiter_waits: g(&self.limiter_waits),
            moved: g(&self.moved),
            service_errors: g(&self.service_errors),
        }
    }
}

fn bump(counter: &AtomicU64, name: &'static str, reason: &'static str) {
    counter.fetch_add(1, Ordering::Relaxed);
    metrics::counter!(name, "reason" => reason).increment(1);
}

/// A fetched message.
#[derive(Debug)]
pub struct Item {
    /// The payload as fetched.
    pub raw: Bytes,
    /// Where to mark it done.
    pub ack: Ack,
}

struct Ready {
    item: Item,
    event: RewardEvent,
}

/// Why a message is parked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Park {
    Failed,
    Limited,
    Fused,
    Early,
}

/// The handler: owns the service client, the limits, the delay queue and the SDK.
#[derive(Debug, Clone)]
pub struct Pipeline {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    cfg: PipelineConfig,
    limits: Limits,
    delay: Arc<DelayQueue>,
    sdk: Sdk,
    client: RewardServiceClient<Channel>,
    auth: tonic::metadata::MetadataValue<tonic::metadata::Ascii>,
    timeout: Duration,
    offsets: Arc<Offsets>,
    stats: Arc<Stats>,
    batches: Arc<Semaphore>,
    side: Arc<Semaphore>,
    /// Side tasks spawned and not finished (the final drain waits for zero).
    side_pending: AtomicU64,
    side_done: Notify,
}

/// Why the pipeline could not start.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// The service URL.
    #[error("service endpoint: {0}")]
    Endpoint(String),
}

/// How often the dispatcher looks at held messages when nothing else arrives.
const HELD_POLL: Duration = Duration::from_millis(2);

/// Longest a message waits in a batch that is neither full nor alone.
const LINGER: Duration = Duration::from_millis(20);

/// Side tasks (parks, dead letters) in flight at once.
const SIDE_TASKS: usize = 512;

impl Pipeline {
    /// A handler calling the service at `grpc` (lazily connected).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        cfg: PipelineConfig,
        limits: Limits,
        delay: Arc<DelayQueue>,
        sdk: Sdk,
        grpc: &str,
        credential: &Credential,
        timeout: Duration,
        offsets: Arc<Offsets>,
    ) -> Result<Self, PipelineError> {
        let channel = tonic::transport::Endpoint::from_shared(grpc.to_string())
            .map_err(|e| PipelineError::Endpoint(format!("{grpc}: {e}")))?
            .tcp_nodelay(true)
            .connect_timeout(Duration::from_secs(5))
            .connect_lazy();
        let client = RewardServiceClient::new(channel)
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20);
        let auth = credential
            .header()
            .parse()
            .map_err(|_| PipelineError::Endpoint("credential is not a valid header".into()))?;
        let batches = Arc::new(Semaphore::new(cfg.concurrency.max(1)));
        Ok(Pipeline {
            inner: Arc::new(Inner {
                cfg,
                limits,
                delay,
                sdk,
                client,
                auth,
                timeout,
                offsets,
                stats: Arc::new(Stats::default()),
                batches,
                side: Arc::new(Semaphore::new(SIDE_TASKS)),
                side_pending: AtomicU64::new(0),
                side_done: Notify::new(),
            }),
        })
    }

    /// A message is settled: its offset may be committed, its source told.
    fn done(&self, ack: &Ack) {
        self.inner.offsets.complete(ack);
        if let Some(s) = &ack.signal {
            let _ = s.send(());
        }
    }

    /// The counters.
    pub fn stats(&self) -> Arc<Stats> {
        self.inner.stats.clone()
    }

    /// The live limits.
    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

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
            while open {
                match rx.try_recv() {
                    Ok(item) => self.admit(item, &mut queues),
                    Err(mpsc::error::TryRecvError::Empty) => break,
                    Err(mpsc::error::TryRecvError::Disconnected) => open = false,
                }
            }
            if !open && queues.is_empty() {
                // Closing: what waits for its type's rate is parked, not waited for.
                for (_, q) in std::mem::take(&mut held) {
                    for ready in q {
                        self.park_later(ready, Park::Limited, None).await;
                    }
                }
            }
            // A held message whose type has a credit now goes first; then new ones.
            // Held messages go first, unless a higher-priority type is queued.
            let top = queues.keys().next().map(|p| p.0);
            let mut next = self.release_held(&mut held, top).await;
            while next.is_none() {
                let Some(ready) = queues.iter_mut().find_map(|(_, q)| q.pop_front()) else {
                    break;
                };
                next = self.type_gate(ready, &mut held).await;
            }
            queues.retain(|_, q| !q.is_empty());
            let Some(ready) = next else {
                // Nothing ready: send what we have, then wait for more (or, with
                // messages held, for their types' next credits).
                if !batch.is_empty() {
                    self.flush(std::mem::take(&mut batch)).await;
                }
                if !open {
                    break;
                }
                let recv = if held.is_empty() {
                    rx.recv().await.map(Some)
                } else {
                    match tokio::time::timeout(HELD_POLL, rx.recv()).await {
                        Ok(r) => r.map(Some),
                        Err(_) => Some(None),
                    }
                };
                match recv {
                    Some(Some(item)) => self.admit(item, &mut queues),
                    Some(None) => {}
                    None => open = false,
                }
                continue;
            };
            if !self.inner.limits.try_global() {
                // About to wait: send what we have first, so a binding limit paces
                // credits one by one instead of in batch-sized lumps.
                if !batch.is_empty() {
                    self.flush(std::mem::take(&mut batch)).await;
                }
                self.inner
                    .stats
                    .limiter_waits
                    .fetch_add(1, Ordering::Relaxed);
                metrics::counter!("reward_consumer_limiter_waits_total").increment(1);
                self.inner.limits.global().await;
            }
            if batch.is_empty() {
                batch_started = Instant::now();
            }
            batch.push(ready);
            if batch.len() >= self.inner.cfg.batch || batch_started.elapsed() >= LINGER {
                self.flush(std::mem::take(&mut batch)).await;
            }
        }
        // Wait for every batch, then every side task (batches start side tasks).
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

    /// Decodes an item and queues it by priority (or settles it at once).
    fn admit(&self, item: Item, queues: &mut BTreeMap<std::cmp::Reverse<u8>, VecDeque<Ready>>) {
        let stats = &self.inner.stats;
        stats.consumed.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("reward_consumer_consumed_total").increment(1);
        let event = match RewardEvent::decode(item.raw.as_ref()) {
            Ok(e) => e,
            Err(e) => {
                bump(
                    &stats.decode_errors,
                    "reward_consumer_decode_errors_total",
                    "decode",
                );
                let me = self.clone();
                let why = e.to_string();
                self.side(async move {
                    me.dead_letter(None, item, "decode", &why).await;
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
        if let Err((field, problem)) = proto::ids::check_event(&event) {
            let me = self.clone();
            let why = format!("{field} {problem}");
            self.side(async move {
                me.dead_letter(Some(event), item, "invalid", &why).await;
            });
            return;
        }
        if unknown_type {
            let me = self.clone();
            self.side(async move {
                me.dead_letter(Some(event), item, "unknown_type", "UNKNOWN_TYPE")
                    .await;
            });
            return;
        }
        if event.not_before_ms > now_ms() + 50 {
            let me = self.clone();
            let due = event.not_before_ms;
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
    fn side(&self, f: impl std::future::Future<Output = ()> + Send + 'static) {
        self.side_with(None, f);
    }

    /// As `side`, with a permit already taken (or to be taken in the task).
    fn side_with(
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

    async fn park_later(&self, ready: Ready, why: Park, after: Option<Duration>) {
        let cfg = &self.inner.cfg;
        let delay = after.unwrap_or(match why {
            Park::Limited => Duration::from_millis(cfg.limited_delay_ms),
            _ => Duration::from_millis(cfg.fused_delay_ms),
        });
        let due = now_ms().saturating_add(i64::try_from(delay.as_millis()).unwrap_or(i64::MAX));
        // Waiting for a side permit here is the dispatcher's back-pressure when Redis
        // is slow; the task itself runs concurrently.
        let permit = self.inner.side.clone().acquire_owned().await.ok();
        let me = self.clone();
        self.side_with(permit, async move {
            me.park(ready, why, due).await;
        });
    }

    /// Parks a message until `due`, then marks it done.
    async fn park(&self, mut ready: Ready, why: Park, due: i64) {
        let stats = &self.inner.stats;
        ready.event.not_before_ms = due;
        let encoded = Bytes::from(ready.event.encode_to_vec());
        let parked = self
            .inner
            .delay
            .park(
                &ready.event.reward_type,
                &ready.event.trade_no,
                encoded.clone(),
                due,
            )
            .await;
        match parked {
            Ok(()) => {
                let (c, r) = match why {
                    Park::Failed => (&stats.requeued_failed, "failed"),
                    Park::Limited => (&stats.requeued_limited, "limited"),
                    Park::Fused => (&stats.requeued_fused, "fused"),
                    Park::Early => (&stats.requeued_early, "early"),
                };
                bump(c, "reward_consumer_requeued_total", r);
            }
            Err(e) => {
                tracing::warn!(error = %e, trade_no = %ready.event.trade_no,
                    "delay queue refused a park; requeueing at once");
                self.requeue_now(&ready.event, encoded).await;
            }
        }
        self.done(&ready.item.ack);
    }

    /// Hands an event straight back to the virtual queue (every queue is tried);
    /// the last resort is the log.
    async fn requeue_now(&self, event: &RewardEvent, encoded: Bytes) {
        let key = requeue_key(event);
        let user = event.user.as_ref().map_or("", |u| u.user_id.as_str());
        if let Some(Settled::Delivered | Settled::Spooled) = queue_anywhere(
            &self.inner.sdk,
            &self.inner.cfg,
            event,
            user,
            &key,
            &encoded,
        )
        .await
        {
            bump(
                &self.inner.stats.requeued_direct,
                "reward_consumer_requeued_total",
                "direct",
            );
            return;
        }
        self.last_resort(&event.trade_no, &encoded, "requeue");
    }

    fn last_resort(&self, trade_no: &str, payload: &[u8], what: &'static str) {
        bump(
            &self.inner.stats.last_resort,
            "reward_consumer_last_resort_total",
            what,
        );
        tracing::error!(
            trade_no,
            what,
            payload_b64 = %base64::engine::general_purpose::STANDARD.encode(payload),
            "no queue took this message; logged for manual replay"
        );
    }

    /// Writes a dead letter (or failure record) and marks the message done.
    async fn dead_letter(&self, event: Option<RewardEvent>, item: Item, reason: &str, code: &str) {
        let (queue, other, counter, name) = if reason == "decode" || reason == "max_retries" {
            (
                &self.inner.cfg.dead_letter_queue,
                &self.inner.cfg.failure_queue,
                &self.inner.stats.dead_lettered,
                "reward_consumer_dead_lettered_total",
            )
        } else {
            (
                &self.inner.cfg.failure_queue,
                &self.inner.cfg.dead_letter_queue,
                &self.inner.stats.failure_topic,
                "reward_consumer_failure_topic_total",
            )
        };
        let trade_no = event.as_ref().map(|e| e.trade_no.clone());
        let user = event
            .as_ref()
            .and_then(|e| e.user.as_ref())
            .map(|u| u.user_id.clone())
            .unwrap_or_default();
        let key = trade_no.clone().unwrap_or_else(|| {
            format!(
                "{}:{}:{}",
                item.ack.part.0, item.ack.part.1, item.ack.offset
            )
        });
        let letter = DeadLetter {
            event,
            raw: item.raw.to_vec(),
            reason: reason.to_string(),
            error_code: code.to_string(),
            source_topic: item.ack.part.0.to_string(),
            dead_at_ms: now_ms(),
        };
        let payload = Bytes::from(letter.encode_to_vec());
        let mut settled = false;
        for q in [queue, other] {
            match self
                .inner
                .sdk
                .enqueue_confirmed(Some(q), None, &user, key.clone(), payload.clone())
                .await
            {
                Ok((_, rx)) => {
                    // Logged by the SDK already if neither broker nor spool took it.
                    settled = matches!(rx.await, Ok(Settled::Delivered | Settled::Spooled));
                    if !settled {
                        bump(
                            &self.inner.stats.last_resort,
                            "reward_consumer_last_resort_total",
                            "dead_letter",
                        );
                        settled = true;
                    }
                    break;
                }
                Err(e) => {
                    tracing::warn!(queue = %q, error = %e, "dead-letter queue refused; trying the other");
                }
            }
        }
        if settled {
            counter.fetch_add(1, Ordering::Relaxed);
            metrics::counter!(name, "reason" => reason.to_string()).increment(1);
        } else {
            self.last_resort(trade_no.as_deref().unwrap_or(""), &payload, "dead_letter");
        }
        self.done(&item.ack);
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

    /// One GrantBatch call and the settling of its results.
    async fn grant(&self, batch: Vec<Ready>) {
        let mut answer = None;
        for attempt in 0..GRANT_ATTEMPTS {
            // The events are copied into each attempt's request (once, normally).
            let mut req = tonic::Request::new(GrantBatchRequest {
                events: batch.iter().map(|r| r.event.clone()).collect(),
            });
            req.metadata_mut()
                .insert("authorization", self.inner.auth.clone());
            req.set_timeout(self.inner.timeout);
            let mut client = self.inner.client.clone();
            match client.grant_batch(req).await {
                Ok(resp) => {
                    answer = Some(resp.into_inner().results);
                    break;
                }
                Err(status) => {
                    self.inner
                        .stats
                        .service_errors
                        .fetch_add(1, Ordering::Relaxed);
                    metrics::counter!("reward_consumer_service_errors_total").increment(1);
                    tracing::warn!(code = ?status.code(), message = status.message(), attempt,
                        "GrantBatch failed");
                    if matches!(
                        status.code(),
                        tonic::Code::InvalidArgument | tonic::Code::Unauthenticated
                    ) {
                        break;
                    }
                    if attempt + 1 < GRANT_ATTEMPTS {
                        tokio::time::sleep(grant_backoff(attempt)).await;
                    }
                }
            }
        }
        let mut results = answer.unwrap_or_default().into_iter();
        for ready in batch {
            let r = results
                .next()
                .filter(|r| r.trade_no == ready.event.trade_no);
            self.settle(ready, r).await;
        }
    }

    async fn settle(&self, ready: Ready, result: Option<GrantResult>) {
        let stats = &self.inner.stats;
        let Some(r) = result else {
            return self
                .retry(ready, "SERVICE_UNAVAILABLE", Duration::ZERO)
                .await;
        };
        let outcome = GrantOutcome::try_from(r.outcome).unwrap_or(GrantOutcome::Unspecified);
        match outcome {
            GrantOutcome::Granted | GrantOutcome::Accepted => {
                stats.granted.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("reward_consumer_granted_total",
                    "type" => ready.event.reward_type.clone())
                .increment(1);
                self.done(&ready.item.ack);
            }
            GrantOutcome::Duplicate => {
                stats.duplicates.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("reward_consumer_duplicates_total").increment(1);
                self.done(&ready.item.ack);
            }
            // Held for an operator by the service (its record lists it): retrying
            // would only be answered the same.
            GrantOutcome::InDoubt => {
                stats.failed_permanent.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("reward_consumer_in_doubt_total").increment(1);
                tracing::warn!(trade_no = %ready.event.trade_no, "grant held in doubt for an operator");
                self.done(&ready.item.ack);
            }
            GrantOutcome::FailedPermanent => {
                stats.failed_permanent.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("reward_consumer_failed_permanent_total").increment(1);
                self.done(&ready.item.ack);
            }
            GrantOutcome::Conflict | GrantOutcome::Invalid | GrantOutcome::BudgetExhausted => {
                let reason = outcome.as_str_name().to_ascii_lowercase();
                let me = self.clone();
                let Ready { item, event } = ready;
                self.side(async move {
                    me.dead_letter(Some(event), item, &reason, &r.error_code)
                        .await;
                });
            }
            GrantOutcome::FailedRetryable
            | GrantOutcome::RetryLater
            | GrantOutcome::Unspecified => {
                let after = Duration::from_millis(u64::try_from(r.retry_after_ms).unwrap_or(0));
                let code = if r.error_code.is_empty() {
                    outcome.as_str_name().to_string()
                } else {
                    r.error_code
                };
                self.retry(ready, &code, after).await;
            }
        }
    }

    /// A failure a retry can fix: park with `retry_count + 1`, or dead-letter past the
    /// maximum.
    async fn retry(&self, ready: Ready, code: &str, after: Duration) {
        let next = ready.event.retry_count.saturating_add(1);
        if next > self.inner.cfg.max_retries {
            let me = self.clone();
            let code = code.to_string();
            let Ready { item, event } = ready;
            self.side(async move {
                me.dead_letter(Some(event), item, "max_retries", &code)
                    .await;
            });
            return;
        }
        let mut ready = ready;
        ready.event.retry_count = next;
        let delay = self.inner.cfg.backoff(next).max(after);
        self.park_later(ready, Park::Failed, Some(delay)).await;
    }
}

/// How often one GrantBatch is sent before its events are parked for a retry.
const GRANT_ATTEMPTS: u32 = 3;

/// The wait before GrantBatch attempt `attempt + 1`: 500 ms times the attempt number,
/// with ±50 % jitter so many consumers that failed together do not come back together.
fn grant_backoff(attempt: u32) -> Duration {
    let base = 500 * u64::from(attempt + 1);
    Duration::from_millis(base / 2 + rand::random_range(0..=base))
}

/// The partition key of a requeued event: `{trade_no}{retry_count}`.
pub fn requeue_key(event: &RewardEvent) -> String {
    format!("{}{}", event.trade_no, event.retry_count)
}

/// Queues an encoded event: its type's queue first, then every other queue but the
/// dead-letter and failure ones; answers how it settled (`None`: no queue took it).
pub async fn queue_anywhere(
    sdk: &Sdk,
    cfg: &PipelineConfig,
    event: &RewardEvent,
    user: &str,
    key: &str,
    encoded: &Bytes,
) -> Option<Settled> {
    let routing = sdk.routing();
    let first = routing
        .route(&event.reward_type)
        .map_or(routing.default_queue.clone(), |(q, _)| q.to_string());
    let mut order = vec![first.clone()];
    order.extend(
        routing
            .queues
            .keys()
            .filter(|q| **q != first && **q != cfg.dead_letter_queue && **q != cfg.failure_queue)
            .cloned(),
    );
    for q in order {
        match sdk
            .enqueue_confirmed(Some(&q), None, user, key.to_string(), encoded.clone())
            .await
        {
            Ok((_, rx)) => match rx.await {
                Ok(s @ (Settled::Delivered | Settled::Spooled)) => return Some(s),
                _ => continue,
            },
            Err(e) => {
                tracing::warn!(queue = %q, error = %e, "queue refused a requeue; trying the next");
            }
        }
    }
    None
}

/// Move batches waiting for their settlement at once.
const MOVES_IN_FLIGHT: usize = 64;

/// Moves due parked messages back to the virtual queue until `stop` turns true.
/// Fused types are skipped; a rate-limited type is released at about twice its rate
/// per mover, so the backlog comes back as fast as it can be credited, not faster.
/// Each tick claims and hands over; waiting for the brokers' acknowledgements (and
/// the removal that follows) runs beside the next ticks.
pub async fn mover(
    delay: Arc<DelayQueue>,
    sdk: Sdk,
    limits: Limits,
    cfg: PipelineConfig,
    poll: Duration,
    stats: Arc<Stats>,
    mut stop: watch::Receiver<bool>,
) {
    let moves = Arc::new(Semaphore::new(MOVES_IN_FLIGHT));
    let mut tick = tokio::time::interval(poll);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = Instant::now();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|s| *s) => break,
        }
        // The allowance follows the time really passed (a slow tick releases more).
        let elapsed = last.elapsed().clamp(poll, Duration::from_secs(1));
        last = Instant::now();
        let types = match delay.types().await {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(error = %e, "delay queue unreadable");
                continue;
            }
        };
        for t in types {
            if limits.is_fused(&t) {
                continue;
            }
            let allowance = limits.limit_of(&t).rate * elapsed.as_secs_f64() * 2.0;
            let per_shard = (allowance / f64::from(delay.shards()))
                .ceil()
                .clamp(1.0, 1000.0) as usize;
            for shard in 0..delay.shards() {
                let Ok(permit) = moves.clone().acquire_owned().await else {
                    return;
                };
                match hand_over(&delay, &sdk, &cfg, &t, shard, per_shard).await {
                    Ok(Some(handed)) => {
                        let (delay, stats, t) = (delay.clone(), stats.clone(), t.clone());
                        tokio::spawn(async move {
                            let _permit = permit;
                            if let Err(e) = handed.settle(&delay, &t, shard, &stats).await {
                                tracing::warn!(reward_type = %t, shard, error = %e,
                                    "removing moved messages failed; they come back after the lease");
                            }
                        });
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(reward_type = %t, shard, error = %e, "moving parked messages failed");
                    }
                }
            }
        }
    }
    // Let the hand-overs in flight finish their removals.
    let _ = moves
        .acquire_many(u32::try_from(MOVES_IN_FLIGHT).unwrap_or(u32::MAX))
        .await;
}

/// Members handed to the SDK, waiting for their settlement.
struct Handed {
    pending: Vec<(Bytes, tokio::sync::oneshot::Receiver<Settled>)>,
    done: Vec<Bytes>,
}

impl Handed {
    /// Waits for the brokers (or the spool), then removes what is safe to forget.
    async fn settle(
        mut self,
        delay: &DelayQueue,
        reward_type: &str,
        shard: u32,
        stats: &Stats,
    ) -> Result<(), fred::error::Error> {
        for (m, rx) in self.pending {
            if let Ok(Settled::Delivered | Settled::Spooled) = rx.await {
                self.done.push(m);
            }
        }
        let n = self.done.len() as u64;
        delay.remove(reward_type, shard, self.done).await?;
        stats.moved.fetch_add(n, Ordering::Relaxed);
        metrics::counter!("reward_consumer_moved_total").increment(n);
        Ok(())
    }
}

/// Claims a shard's due members and hands them to the virtual queue.
async fn hand_over(
    delay: &DelayQueue,
    sdk: &Sdk,
    cfg: &PipelineConfig,
    reward_type: &str,
    shard: u32,
    max: usize,
) -> Result<Option<Handed>, fred::error::Error> {
    let members = delay.claim_due(reward_type, shard, now_ms(), max).await?;
    if members.is_empty() {
        return Ok(None);
    }
    let mut handed = Handed {
        pending: Vec::with_capacity(members.len()),
        done: Vec::new(),
    };
    for m in members {
        let event = match RewardEvent::decode(m.as_ref()) {
            Ok(e) => e,
            Err(e) => {
                // Only this crate writes these sets; a member that does not decode is
                // logged in full and removed rather than retried forever.
                tracing::error!(error = %e, member_b64 = %base64::engine::general_purpose::STANDARD.encode(&m),
                    "undecodable member in the delay queue; removed");
                handed.done.push(m);
                continue;
            }
        };
        let user = event.user.as_ref().map_or("", |u| u.user_id.as_str());
        let key = requeue_key(&event);
        let first = sdk
            .enqueue_confirmed(None, Some(&event.reward_type), user, key.clone(), m.clone())
            .await;
        match first {
            Ok((_, rx)) => handed.pending.push((m, rx)),
            // The routed queue refused (closing, full): try the others, waiting.
            Err(_) => {
                if queue_anywhere(sdk, cfg, &event, user, &key, &m)
                    .await
                    .is_some()
                {
                    handed.done.push(m);
                }
            }
        }
    }
    Ok(Some(handed))
}

#[cfg(test)]
mod tests {
    #[test]
    fn grant_retries_wait_with_jitter_within_bounds() {
        for attempt in 0..super::GRANT_ATTEMPTS {
            let base = 500 * u64::from(attempt + 1);
            let waits: Vec<u128> = (0..200)
                .map(|_| super::grant_backoff(attempt).as_millis())
                .collect();
            let (lo, hi) = (u128::from(base / 2), u128::from(base * 3 / 2));
            assert!(waits.iter().all(|w| (lo..=hi).contains(w)), "{waits:?}");
            assert!(waits.iter().any(|w| *w != waits[0]), "no jitter");
        }
    }
}
