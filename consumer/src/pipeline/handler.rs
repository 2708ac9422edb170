//! The handler every source feeds, and what its clones share.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use proto::v1::reward_service_client::RewardServiceClient;
use sdk::Sdk;
use tokio::sync::{Notify, Semaphore};

use reward_runtime::credential::Credential;

use super::error::PipelineError;
use super::grant::{GrantClient, TonicGrant};
use super::offsets::{Ack, Offsets};
use super::stats::Stats;
use crate::config::PipelineConfig;
use crate::delay::DelayQueue;
use crate::limits::Limits;

/// The handler: owns the service client, the limits, the delay queue and the SDK.
///
/// # Flow
/// A source ([`crate::kafka`]) tracks each fetched offset in its partition's window
/// ([`Offsets`]) and sends the message here. The dispatcher keeps one queue per
/// priority and always takes from the highest non-empty one:
/// 0. a compound record ([`proto::pack`]) is unpacked into its events, which go on
///    alone from here, each settled on its own (a failed one parked or dead-lettered
///    alone; a requeue is a new event under its own key); the record's offset is
///    marked when the last of them is settled ([`Ack::parts`]). A record that starts
///    like a pack and does not read as one goes to the dead-letter topic whole;
/// 1. a payload that does not decode goes to the dead-letter topic with its raw bytes;
///    an event with ids the service cannot key (`proto::ids`) or a reward type the
///    SDK's routing does not declare goes to the failure topic (reasons `invalid`,
///    `unknown_type`), so per-type state and metric labels never grow with what a
///    payload carries;
/// 2. an event whose `not_before_ms` is still ahead is parked until then;
/// 3. the type check ([`Limits::check`]): over the type's rate → held in memory in
///    the type's own line (up to `hold_ms` worth of its rate) and released as its
///    credits come, or, past that, parked for `limited_delay_ms`; fused → parked (the
///    mover leaves a fused type's backlog alone). Neither counts as a failure, and a
///    held type never stops the dispatcher: other types pass it. The hold exists
///    because arrivals come in lumps (a fetch, a mover tick): with park-at-once
///    alone, a type whose messages arrive in small, spaced bursts gets a small
///    fraction of its rate (docs/findings/benchmarks-history.md);
/// 4. the global limit: the dispatcher waits for one credit. This is the only wait, and
///    because the next message is picked by priority after each credit, cash goes
///    first when the global rate binds;
/// 5. the message joins the current batch; a batch is sent when it is full, when no
///    other message is ready (natural batching: no added latency at low load), when
///    the global limit is about to make the dispatcher wait, or when its first
///    message has waited 20 ms. So a binding limit meters credits out smoothly rather
///    than in batch-sized lumps. Up to `concurrency` batches are in flight.
///
/// # Settling a result
/// | outcome | what happens |
/// |---|---|
/// | GRANTED, DUPLICATE | done |
/// | FAILED_RETRYABLE, RETRY_LATER, no answer | `retry_count + 1`, parked for the backoff (or the service's `retry_after_ms`, if longer); past `max_retries` → dead letter `max_retries` |
/// | FAILED_PERMANENT | done: the service already wrote it to the failure topic (once, by the claim's owner) |
/// | CONFLICT, INVALID, BUDGET_EXHAUSTED | failure topic, reason = the outcome |
///
/// A message's offset is marked done only after its fate is durable: Redis has the
/// parked copy, or the SDK reports the dead letter on a broker or in its spool. When
/// Redis refuses a park, the event goes straight back to the virtual queue (every
/// queue is tried); when nothing takes a dead letter, its base64 is logged and
/// counted: the last resort. Either way the offset is then marked, so one message
/// never blocks its partition.
///
/// # Requeue key
/// The mover hands a parked event back to the virtual queue under the partition key
/// `{trade_no}{retry_count}`: a retry lands on another partition than the attempt
/// that failed, so one bad partition (or a consumer stuck on it) does not hold the
/// message's every attempt.
#[derive(Debug, Clone)]
pub struct Pipeline {
    pub(super) inner: Arc<Inner>,
}

/// What every clone of a [`Pipeline`] shares.
#[derive(Debug)]
pub(super) struct Inner {
    pub(super) cfg: PipelineConfig,
    pub(super) limits: Limits,
    pub(super) delay: Arc<DelayQueue>,
    pub(super) sdk: Sdk,
    pub(super) client: Arc<dyn GrantClient>,
    pub(super) auth: tonic::metadata::MetadataValue<tonic::metadata::Ascii>,
    pub(super) timeout: Duration,
    pub(super) offsets: Arc<Offsets>,
    pub(super) stats: Arc<Stats>,
    pub(super) batches: Arc<Semaphore>,
    pub(super) side: Arc<Semaphore>,
    /// Side tasks spawned and not finished (the final drain waits for zero).
    pub(super) side_pending: AtomicU64,
    pub(super) side_done: Notify,
    /// `reward_consumer_in_flight_events`: events read and not yet settled (each
    /// event of a compound record counts; a record that does not unpack counts once).
    /// Added to on admission, taken from on every settle, so it is exact and falls to
    /// 0 when the work is done.
    pub(super) in_flight_events: metrics::Gauge,
}

/// Side tasks (parks, dead letters) in flight at once.
pub(super) const SIDE_TASKS: usize = 512;

impl Pipeline {
    /// A handler calling the service at `grpc` (lazily connected): one endpoint, or
    /// several separated by commas, balanced.
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
        let endpoints = crate::config::endpoints(grpc)
            .into_iter()
            .map(|e| {
                tonic::transport::Endpoint::from_shared(e.to_string())
                    .map(|ep| ep.tcp_nodelay(true).connect_timeout(Duration::from_secs(5)))
                    .map_err(|err| PipelineError::Endpoint(format!("{e}: {err}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let channel = match endpoints.as_slice() {
            [] => return Err(PipelineError::Endpoint("no service endpoint".into())),
            [one] => one.connect_lazy(),
            // Several service instances: each call goes to a ready one (power of two
            // choices); an instance that stops answering is skipped until it connects
            // again. A call that failed on a dying instance is retried like any failed
            // call, and the claims' leases keep its grants single (docs/cluster.md).
            many => tonic::transport::Channel::balance_list(many.iter().cloned()),
        };
        let client: Arc<dyn GrantClient> = Arc::new(TonicGrant(
            RewardServiceClient::new(channel)
                .max_decoding_message_size(64 << 20)
                .max_encoding_message_size(64 << 20),
        ));
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
                stats: Arc::new(Stats::new()),
                batches,
                side: Arc::new(Semaphore::new(SIDE_TASKS)),
                side_pending: AtomicU64::new(0),
                side_done: Notify::new(),
                in_flight_events: {
                    let g = metrics::gauge!("reward_consumer_in_flight_events");
                    g.increment(0.0);
                    g
                },
            }),
        })
    }

    /// A message is settled: its offset may be committed, its source told (for an
    /// event of a compound record, once all of the record's events are settled).
    pub(super) fn done(&self, ack: &Ack) {
        self.inner.in_flight_events.decrement(1.0);
        if !ack.settle_part() {
            return;
        }
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
}
