//! The consumer: the valve between the queue and the reward service.

// rocketmq-client-rust's push consumer futures nest deeper than the default limit
// when proving `Send` (as in the load tester).
#![recursion_limit = "256"]
//!
//! One process per topic group, any number of instances. It reads reward events from a
//! Kafka consumer group, holds each reward type to its downstream's rate, credits them
//! through the reward service's `GrantBatch`, and parks what must come back later in a
//! Redis delay queue. Nothing is committed before it is settled, so a crash (even
//! `kill -9`) re-delivers in-flight messages and the reward service's idempotency
//! keeps each credit single.
//!
//! - [`tracker`]: the per-partition window of in-flight offsets (what may be committed);
//! - [`limits`]: the global and per-type rate limits, fuses and priorities, changed live;
//! - [`fleet`]: leases those limits' permits from Redis, so a rate holds for the whole
//!   fleet of consumer instances;
//! - [`delay`]: the Redis delay queue for requeued messages;
//! - [`pipeline`]: decode → limits → GrantBatch → settle; the mover;
//! - [`kafka`], [`rocketmq`]: the two sources, one pipeline; [`config`]: the TOML
//!   configuration.
//!
//! [`start`] wires them together; [`Running::shutdown`] stops them in order.

pub mod config;
pub mod delay;
mod error;
pub mod fleet;
pub mod kafka;
pub mod limits;
pub mod pipeline;
pub mod rocketmq;
mod source;
pub mod tracker;

pub use crate::error::StartError;
pub use crate::source::Source;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use crate::config::{ConsumerConfig, SourceConfig};
use crate::delay::DelayQueue;
use crate::kafka::KafkaSource;
use crate::limits::Limits;
use crate::pipeline::{Offsets, Pipeline, Stats, StatsSnapshot};

/// A running consumer.
#[derive(Debug)]
pub struct Running {
    stop: watch::Sender<bool>,
    fetch: tokio::task::JoinHandle<AnySource>,
    handler: tokio::task::JoinHandle<()>,
    mover: tokio::task::JoinHandle<()>,
    leases: tokio::task::JoinHandle<()>,
    /// Stops the lease task, after the pipeline drained (draining needs permits).
    lease_stop: watch::Sender<bool>,
    watcher: Option<tokio::task::JoinHandle<()>>,
    sdk: sdk::Sdk,
    stats: Arc<Stats>,
    offsets: Arc<Offsets>,
    limits: Limits,
    delay: Arc<DelayQueue>,
    grace: Duration,
}

/// Either source, as configured.
#[derive(Debug)]
enum AnySource {
    Kafka(KafkaSource),
    RocketMq(Box<rocketmq::RocketMqSource>),
}

impl Source for AnySource {
    async fn feed(&mut self, tx: mpsc::Sender<pipeline::Item>, stop: watch::Receiver<bool>) {
        match self {
            AnySource::Kafka(s) => s.feed(tx, stop).await,
            AnySource::RocketMq(s) => s.feed(tx, stop).await,
        }
    }

    async fn finish(self) -> bool {
        match self {
            AnySource::Kafka(s) => s.finish().await,
            AnySource::RocketMq(s) => (*s).finish().await,
        }
    }
}

/// What a shutdown left behind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Counters at the end.
    pub stats: StatsSnapshot,
    /// Messages still unsettled when the grace period ran out (re-delivered to the
    /// next owner, since their offsets were not committed).
    pub unsettled: usize,
    /// Requeues and dead letters the SDK could not put on a broker or in its spool.
    pub sdk_left: u64,
    /// Whether the source closed cleanly (Kafka: within its deadline).
    pub closed: bool,
}

/// Starts the SDK, the delay queue, the limits (and their watcher), the pipeline, the
/// mover and the source.
pub async fn start(cfg: &ConsumerConfig) -> Result<Running, StartError> {
    let sdk = sdk::Sdk::builder(cfg.sdk.clone())
        .watch(true)
        .start()
        .await?;
    let delay = Arc::new(
        DelayQueue::connect(
            &cfg.sdk.store.redis_url,
            &cfg.delay.key_prefix,
            cfg.delay.shards,
            cfg.delay.lease_ms,
        )
        .await?,
    );
    let limits = Limits::new(cfg.limits.clone());
    let watcher = watch_limits(cfg, &sdk, &limits);
    let leaser = fleet::Leaser::load(
        sdk.store().pool().next(),
        cfg.fleet.clone(),
        fleet::instance_name(),
    )
    .await?;
    // Checks need leased permits from here on; the first lease follows at once.
    limits.lease_on();
    let offsets = Arc::new(Offsets::new(cfg.pipeline.window));
    let pipeline = Pipeline::new(
        cfg.pipeline.clone(),
        limits.clone(),
        delay.clone(),
        sdk.clone(),
        &cfg.service.grpc,
        &cfg.credential,
        Duration::from_millis(cfg.service.timeout_ms),
        offsets.clone(),
    )?;
    let stats = pipeline.stats();
    let (stop, stop_rx) = watch::channel(false);
    // Bounded by the windows already; the channel only smooths hand-over.
    let (tx, rx) = mpsc::channel(cfg.pipeline.window.max(1024));
    let mut source = open_source(cfg, &offsets).await?;
    let fetch = {
        let stop_rx = stop_rx.clone();
        tokio::spawn(async move {
            source.feed(tx, stop_rx).await;
            source
        })
    };
    let (lease_stop, lease_stop_rx) = watch::channel(false);
    let leases = tokio::spawn(fleet::run(
        fleet::RedisLeases::new(leaser, sdk.store().pool().clone()),
        Duration::from_millis(cfg.fleet.lease_ms),
        limits.clone(),
        lease_stop_rx,
    ));
    let handler = tokio::spawn(pipeline.run(rx));
    let mover = tokio::spawn(pipeline::mover(
        delay.clone(),
        sdk.clone(),
        limits.clone(),
        cfg.pipeline.clone(),
        Duration::from_millis(cfg.delay.poll_ms),
        stats.clone(),
        stop_rx.clone(),
    ));
    Ok(Running {
        stop,
        fetch,
        handler,
        mover,
        leases,
        lease_stop,
        watcher,
        sdk,
        stats,
        offsets,
        limits,
        delay,
        grace: Duration::from_millis(cfg.pipeline.shutdown_grace_ms),
    })
}

/// Subscribes to the configured source (a Kafka group or a RocketMQ push consumer).
async fn open_source(
    cfg: &ConsumerConfig,
    offsets: &Arc<Offsets>,
) -> Result<AnySource, StartError> {
    Ok(match &cfg.source {
        SourceConfig::Kafka {
            brokers,
            group,
            topics,
            settings,
        } => AnySource::Kafka(KafkaSource::subscribe(
            brokers,
            group,
            topics,
            settings,
            offsets.clone(),
            Duration::from_millis(cfg.pipeline.commit_interval_ms),
        )?),
        SourceConfig::Rocketmq {
            namesrv,
            group,
            topics,
            consume_threads,
            consume_batch,
            pull_batch,
        } => {
            let settings = rocketmq::RocketMqSettings {
                namesrv: namesrv.clone(),
                group: group.clone(),
                topics: topics.clone(),
                consume_threads: *consume_threads,
                consume_batch: *consume_batch,
                pull_batch: *pull_batch,
            };
            AnySource::RocketMq(Box::new(
                rocketmq::RocketMqSource::start(&settings, offsets.clone())
                    .await
                    .map_err(StartError::RocketMq)?,
            ))
        }
    })
}

/// Polls the shared dynamic document and applies its `[limits]` (start-up limits
/// first, the sources' keys over them).
fn watch_limits(
    cfg: &ConsumerConfig,
    sdk: &sdk::Sdk,
    limits: &Limits,
) -> Option<tokio::task::JoinHandle<()>> {
    let d = &cfg.dynamic;
    if d.file.is_none() && d.redis_key.is_none() {
        return None;
    }
    let sources = reward_runtime::dynamic::Sources {
        base: cfg.limits.as_document(),
        file: d.file.clone(),
        redis: d.redis_key.clone().map(|k| (sdk.store().pool().clone(), k)),
        poll: Duration::from_millis(d.poll_ms.unwrap_or(500)),
    };
    let limits = limits.clone();
    let apply: reward_runtime::dynamic::Apply =
        Arc::new(move |doc: &toml::Table| limits.apply(doc).map_err(|e| e.to_string()));
    Some(sources.watch(vec![apply]))
}

impl Running {
    /// The counters.
    pub fn stats(&self) -> StatsSnapshot {
        self.stats.snapshot()
    }

    /// The live limits (tests and tools change them through the dynamic sources).
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The delay queue.
    pub fn delay(&self) -> &DelayQueue {
        &self.delay
    }

    /// Messages in flight.
    pub fn in_flight(&self) -> usize {
        self.offsets.in_flight()
    }

    /// Partitions (or RocketMQ queues) assigned to this member now.
    pub fn assigned(&self) -> usize {
        self.offsets.assigned()
    }

    /// Each partition's (or queue's) lag now, as the gauges
    /// `reward_consumer_lag_seconds` and (RocketMQ) `reward_consumer_lag_records` say.
    pub fn lag(&self) -> Vec<(pipeline::PartKey, pipeline::lag::PartFigures)> {
        self.offsets.lag.figures(pipeline::lag::now_ms())
    }

    /// Stops fetching, lets in-flight work finish within the grace period, commits,
    /// stops the mover, drains the SDK and leaves the group.
    pub async fn shutdown(self) -> ShutdownReport {
        let _ = self.stop.send(true);
        let source = self.fetch.await.ok();
        // The fetch loop dropped its sender: the handler drains, then returns.
        let drained = tokio::time::timeout(self.grace, self.handler).await.is_ok();
        if !drained {
            tracing::warn!("grace period over with work in flight; it will be re-delivered");
        }
        let _ = self.mover.await;
        let _ = self.lease_stop.send(true);
        let _ = self.leases.await;
        if let Some(w) = self.watcher {
            w.abort();
        }
        let unsettled = self.offsets.in_flight();
        let closed = match source {
            Some(s) => s.finish().await,
            None => false,
        };
        let report = self.sdk.close(self.grace).await;
        ShutdownReport {
            stats: self.stats.snapshot(),
            unsettled,
            sdk_left: report.left,
            closed,
        }
    }
}
