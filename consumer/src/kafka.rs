//! The Kafka source: a consumer group whose offsets move only through the windows.
//!
//! - `enable.auto.commit=false` and `enable.auto.offset.store=false`: librdkafka
//!   never commits on its own; the commit timer writes each partition's finished
//!   prefix ([`Offsets::advance_all`]) every `commit_interval_ms`.
//! - Revocation (rebalance): before the partitions go, their finished prefixes are
//!   committed synchronously and their windows dropped; the new owner starts at the
//!   first unfinished offset, so work still in flight here may be done twice (the
//!   reward service's idempotency makes that harmless) but nothing is skipped.
//! - Shutdown: fetching stops, in-flight work gets the grace period, the positions are
//!   committed synchronously, then the consumer leaves the group.
//! - `fetch.wait.max.ms=50` unless the config's `settings` say otherwise: librdkafka's
//!   default (500 ms) lets the broker hold a fetch that long when little is waiting,
//!   and at event traffic below saturation that wait is most of a reward's time from
//!   send to credit. The price, at saturation: more, smaller fetches cost the broker CPU,
//!   and `reward-bench consumer` credits somewhat fewer rewards/s than with 500
//!   (figures for both: docs/findings/benchmarks-history.md). A consumer meant only
//!   to drain a backlog fast can set `settings = { "fetch.wait.max.ms" = "500" }`.
//! - `fetch.max.bytes=1048576` (librdkafka's default is 50 MB) unless `settings`
//!   say otherwise: librdkafka keeps one fetch in flight per broker, and an answer of
//!   tens of MB on a deep backlog leaves the consumer idle while the broker builds and
//!   sends it. With 1 MB, answers arrive steadily and the consumer credits one while
//!   the broker reads the next (docs/findings/benchmarks-history.md); 1 MB is still
//!   ~20 000 of these events a fetch. Smaller answers (`message.max.bytes` must come
//!   down with them) cost more requests, which a broker pays for one by one.
//! - Every `TopicPartitionList` this module builds is dropped before the consumer
//!   (docs/stack.md: a list kept past the consumer pins librdkafka's broker threads
//!   and hangs its close).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer,
};
use rdkafka::error::KafkaResult;
use rdkafka::{ClientConfig, ClientContext, Message, Offset, TopicPartitionList};
use tokio::sync::{mpsc, watch};

use crate::pipeline::{Ack, Item, Offsets, PartKey};
use crate::source::Source;

/// How often the lag against the brokers' high watermarks is measured (one
/// watermark request per partition held).
const LAG_EVERY: Duration = Duration::from_secs(5);

/// Measures `reward_consumer_lag_records` per partition: the broker's high watermark
/// minus the first offset not finished here (records fetched and in flight count as
/// lag until done, like records not fetched yet). A compound record carries many
/// events, so this counts records; the events they hold are known only once read. On
/// a blocking thread (librdkafka's watermark call waits on the network), 2 s per
/// partition at most; a partition whose watermark did not answer keeps its last value.
fn measure_lag(
    consumer: std::sync::Weak<StreamConsumer<Ctx>>,
    guard: Arc<std::sync::Mutex<bool>>,
    offsets: Arc<Offsets>,
) -> tokio::task::JoinHandle<()> {
    tokio::task::spawn_blocking(move || {
        for (part, generation, from) in offsets.waiting_from() {
            let (topic, partition) = (&part.0, part.1);
            // One partition at a time under the guard: a close waits 2 s at most.
            let closing = guard
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let Some(consumer) = consumer.upgrade().filter(|_| !*closing) else {
                return;
            };
            match consumer.fetch_watermarks(topic, partition, Duration::from_secs(2)) {
                Ok((_low, high)) => offsets.set_lag(&part, generation, high.saturating_sub(from)),
                Err(e) => {
                    tracing::debug!(%topic, partition, error = %e, "lag: no high watermark");
                }
            }
        }
    })
}

/// Hooks the windows into librdkafka's rebalance callbacks.
#[derive(Debug)]
pub struct Ctx {
    offsets: Arc<Offsets>,
}

impl ClientContext for Ctx {}

fn parts(tpl: &TopicPartitionList) -> Vec<PartKey> {
    tpl.elements()
        .iter()
        .map(|e| (Arc::from(e.topic()), e.partition()))
        .collect()
}

fn commit_list(offsets: &[(PartKey, i64)]) -> TopicPartitionList {
    let mut tpl = TopicPartitionList::new();
    for ((topic, partition), offset) in offsets {
        if let Err(e) = tpl.add_partition_offset(topic, *partition, Offset::Offset(*offset)) {
            tracing::warn!(topic = %topic, partition, error = %e, "bad commit offset");
        }
    }
    tpl
}

impl ConsumerContext for Ctx {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            let commits = self.offsets.revoke(&parts(tpl));
            if !commits.is_empty() {
                let list = commit_list(&commits);
                if let Err(e) = consumer.commit(&list, CommitMode::Sync) {
                    tracing::warn!(error = %e, "commit on revocation failed; the next owner re-reads from the last commit");
                }
            }
            tracing::info!(partitions = tpl.count(), "partitions revoked");
        }
    }

    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            self.offsets.assign(&parts(tpl));
            tracing::info!(partitions = tpl.count(), "partitions assigned");
        }
    }

    fn commit_callback(&self, result: KafkaResult<()>, _offsets: &TopicPartitionList) {
        if let Err(e) = result {
            metrics::counter!("reward_consumer_commit_errors_total").increment(1);
            tracing::warn!(error = %e, "offset commit failed; the next commit covers it");
        }
    }
}

/// A subscribed consumer group member.
pub struct KafkaSource {
    consumer: Arc<StreamConsumer<Ctx>>,
    offsets: Arc<Offsets>,
    commit_every: Duration,
    /// Held by a lag measurement while it uses the consumer, and by `close`: the
    /// consumer is never closed under a measurement, nor measured once closing
    /// (the flag inside).
    lag_guard: Arc<std::sync::Mutex<bool>>,
}

impl std::fmt::Debug for KafkaSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSource").finish_non_exhaustive()
    }
}

/// The fetch settings the source starts from (its config's `settings` override them),
/// public so a benchmark's bare consumer can run with the same ones. Why each: the
/// module doc.
pub const FETCH_DEFAULTS: &[(&str, &str)] =
    &[("fetch.wait.max.ms", "50"), ("fetch.max.bytes", "1048576")];

impl KafkaSource {
    /// Joins `group` on `brokers` and subscribes to `topics`.
    pub fn subscribe(
        brokers: &str,
        group: &str,
        topics: &[String],
        settings: &BTreeMap<String, String>,
        offsets: Arc<Offsets>,
        commit_every: Duration,
    ) -> KafkaResult<Self> {
        let mut cfg = ClientConfig::new();
        cfg.set("bootstrap.servers", brokers)
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest");
        for (k, v) in FETCH_DEFAULTS {
            cfg.set(*k, *v);
        }
        for (k, v) in settings {
            cfg.set(k, v);
        }
        // These two are the tracker's contract; a setting may not turn them back on.
        cfg.set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false");
        let consumer: StreamConsumer<Ctx> = cfg.create_with_context(Ctx {
            offsets: offsets.clone(),
        })?;
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        consumer.subscribe(&names)?;
        Ok(KafkaSource {
            consumer: Arc::new(consumer),
            offsets,
            commit_every,
            lag_guard: Arc::default(),
        })
    }

    /// Fetches until `stop` turns true, tracking each offset and handing the message
    /// to `tx`; commits on a timer meanwhile. Returns when fetching has stopped (the
    /// caller drains the pipeline, then calls [`KafkaSource::close`]).
    pub async fn run(&self, tx: mpsc::Sender<Item>, mut stop: watch::Receiver<bool>) {
        let commit_every = self.commit_every;
        let committer = {
            let consumer = self.consumer.clone();
            let offsets = self.offsets.clone();
            let lag_guard = self.lag_guard.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(commit_every);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                let mut lag_measured = tokio::time::Instant::now();
                let mut lag_task: Option<tokio::task::JoinHandle<()>> = None;
                loop {
                    tick.tick().await;
                    offsets.report();
                    if lag_measured.elapsed() >= LAG_EVERY
                        && lag_task
                            .as_ref()
                            .is_none_or(tokio::task::JoinHandle::is_finished)
                    {
                        lag_measured = tokio::time::Instant::now();
                        lag_task = Some(measure_lag(
                            Arc::downgrade(&consumer),
                            lag_guard.clone(),
                            offsets.clone(),
                        ));
                    }
                    let commits = offsets.advance_all();
                    if commits.is_empty() {
                        continue;
                    }
                    let list = commit_list(&commits);
                    if let Err(e) = consumer.commit(&list, CommitMode::Async) {
                        metrics::counter!("reward_consumer_commit_errors_total").increment(1);
                        tracing::warn!(error = %e, "offset commit failed; the next commit covers it");
                    }
                }
            })
        };
        let stopped = stop.wait_for(|s| *s);
        tokio::pin!(stopped);
        let mut topic: Arc<str> = Arc::from("");
        loop {
            let msg = tokio::select! {
                _ = &mut stopped => break,
                m = self.consumer.recv() => m,
            };
            let (part, offset, raw, stored_ms) = match msg {
                Ok(m) => {
                    // One shared name per topic, not an allocation per message.
                    if &*topic != m.topic() {
                        topic = Arc::from(m.topic());
                    }
                    (
                        (topic.clone(), m.partition()),
                        m.offset(),
                        Bytes::copy_from_slice(m.payload().unwrap_or_default()),
                        m.timestamp().to_millis(),
                    )
                }
                Err(e) => {
                    metrics::counter!("reward_consumer_fetch_errors_total").increment(1);
                    tracing::warn!(error = %e, "fetch error");
                    continue;
                }
            };
            let generation = tokio::select! {
                _ = &mut stopped => break,
                g = self.offsets.track(&part, offset) => g,
            };
            // Before the pipeline has it, so its settlement finds it.
            self.offsets.lag.fetched(&part, offset, stored_ms, None);
            let item = Item {
                raw,
                ack: Ack {
                    part,
                    generation,
                    offset,
                    signal: None,
                    parts: None,
                },
            };
            if tx.send(item).await.is_err() {
                break;
            }
        }
        committer.abort();
    }

    /// Commits the final positions synchronously and leaves the group; the consumer
    /// is dropped on a helper thread so a stuck librdkafka close cannot hang the
    /// process past `deadline`.
    pub fn close(self, deadline: Duration) -> bool {
        // Waits out a lag measurement (2 s a partition at most) and stops the next.
        if let Ok(mut closing) = self.lag_guard.lock() {
            *closing = true;
        }
        let positions = self.offsets.positions();
        if !positions.is_empty() {
            let list = commit_list(&positions);
            if let Err(e) = self.consumer.commit(&list, CommitMode::Sync) {
                tracing::warn!(error = %e, "final commit failed; the next owner re-reads from the last commit");
            }
        }
        self.consumer.unsubscribe();
        reward_runtime::teardown::drop_within(self.consumer, deadline)
    }
}

impl Source for KafkaSource {
    async fn feed(&mut self, tx: mpsc::Sender<Item>, stop: watch::Receiver<bool>) {
        self.run(tx, stop).await;
    }

    async fn finish(self) -> bool {
        tokio::task::spawn_blocking(move || self.close(Duration::from_secs(10)))
            .await
            .unwrap_or(false)
    }
}
