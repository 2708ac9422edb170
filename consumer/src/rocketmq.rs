//! The RocketMQ source: a push consumer whose listener hands each message to the same
//! pipeline as Kafka's and returns only once every message of its call is settled.
//!
//! The push consumer keeps its own window per queue (its process queue) and commits
//! the lowest offset still being consumed, the same rule as [`crate::tracker`]; so
//! here the pipeline's acknowledgement is what completes a listener call, and the
//! client's offset store does the rest. A listener call therefore returns
//! `ConsumeSuccess` only after every message in it was credited, parked (Redis has
//! it), or dead-lettered (a broker or the SDK's spool has it): a crash before that
//! re-delivers the call's messages.
//!
//! Settings follow `docs/rocketmq.md`: the library's defaults did not keep up, 4
//! consume threads with 32 messages per call and 256 per pull did (39 k msg/s in a
//! release build). A listener call blocks one consume thread while its messages are
//! in the pipeline, so `consume_threads × consume_batch` is this source's window.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rocketmq_client_rust::{
    ConsumeConcurrentlyContext, ConsumeConcurrentlyStatus, DefaultMQPushConsumer, MQPushConsumer,
    MessageListenerConcurrently,
};
use rocketmq_model::common::consumer::consume_from_where::ConsumeFromWhere;
use rocketmq_model::common::message::message_ext::MessageExt;
use tokio::sync::mpsc;

use crate::pipeline::{Ack, Item, Offsets};
use crate::source::Source;

/// How long a listener call waits for its messages before it gives them back to the
/// broker (`ReconsumeLater`); only a stuck pipeline gets there.
const SETTLE_WAIT: Duration = Duration::from_secs(300);

/// How often the lag gauges are set.
const LAG_EVERY: Duration = Duration::from_secs(5);

struct Listener {
    tx: mpsc::UnboundedSender<Item>,
    offsets: Arc<Offsets>,
}

/// The queue's max offset the broker sent with the pull that brought `m`.
fn max_offset(m: &MessageExt) -> Option<i64> {
    m.properties()
        .iter()
        .find(|(k, _)| k.as_str() == "MAX_OFFSET")
        .and_then(|(_, v)| v.as_str().parse().ok())
}

impl MessageListenerConcurrently for Listener {
    fn consume_message(
        &self,
        msgs: &[&MessageExt],
        _context: &ConsumeConcurrentlyContext,
    ) -> rocketmq_client_rust::ClientResult<ConsumeConcurrentlyStatus> {
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let mut sent = 0usize;
        for m in msgs {
            let topic: Arc<str> = Arc::from(m.topic().as_str());
            let part = (topic, m.queue_id());
            self.offsets.lag.fetched(
                &part,
                m.queue_offset(),
                Some(m.store_timestamp()),
                max_offset(m),
            );
            let item = Item {
                raw: m.body().unwrap_or_else(Bytes::new),
                ack: Ack {
                    part,
                    generation: 0,
                    offset: m.queue_offset(),
                    signal: Some(done_tx.clone()),
                    parts: None,
                },
            };
            if self.tx.send(item).is_err() {
                // The pipeline is gone (shutting down): let the broker re-deliver.
                return Ok(ConsumeConcurrentlyStatus::ReconsumeLater);
            }
            sent += 1;
        }
        drop(done_tx);
        for _ in 0..sent {
            if done_rx.recv_timeout(SETTLE_WAIT).is_err() {
                metrics::counter!("reward_consumer_rocketmq_reconsume_total").increment(1);
                tracing::warn!(
                    "a listener call's messages were not settled in time; the broker re-delivers them"
                );
                return Ok(ConsumeConcurrentlyStatus::ReconsumeLater);
            }
        }
        Ok(ConsumeConcurrentlyStatus::ConsumeSuccess)
    }
}

/// Push consumer settings.
#[derive(Debug, Clone)]
pub struct RocketMqSettings {
    /// Name server `host:port`.
    pub namesrv: String,
    /// Consumer group.
    pub group: String,
    /// Topics to subscribe to.
    pub topics: Vec<String>,
    /// Consume threads.
    pub consume_threads: u32,
    /// Messages per listener call.
    pub consume_batch: u32,
    /// Messages per pull.
    pub pull_batch: u32,
}

/// A started push consumer.
pub struct RocketMqSource {
    consumer: Option<DefaultMQPushConsumer>,
    /// What the listener sends; drained into the pipeline by `feed`.
    rx: mpsc::UnboundedReceiver<Item>,
    /// The lag gauges' bookkeeping (the client keeps the offsets themselves).
    offsets: Arc<Offsets>,
}

impl std::fmt::Debug for RocketMqSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocketMqSource").finish_non_exhaustive()
    }
}

impl RocketMqSource {
    /// Subscribes and starts; messages wait for [`Source::feed`] from here on.
    /// The listener runs on the client's threads and cannot await a bounded channel,
    /// so it sends into an unbounded one; the client's own flow control (threads x
    /// batch, each call waiting for its messages) bounds it.
    pub async fn start(s: &RocketMqSettings, offsets: Arc<Offsets>) -> Result<Self, String> {
        let (tx, rx) = mpsc::unbounded_channel();
        let rt = sdk::queue::rocketmq_runtime("reward-consumer")?;
        let mut consumer = DefaultMQPushConsumer::builder(rt)
            .consumer_group(s.group.clone())
            .name_server_addr(s.namesrv.clone())
            .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
            .consume_thread_min(s.consume_threads)
            .consume_thread_max(s.consume_threads)
            .consume_message_batch_max_size(s.consume_batch)
            .pull_batch_size(s.pull_batch)
            .build();
        for t in &s.topics {
            consumer
                .subscribe(t.as_str(), "*")
                .await
                .map_err(|e| format!("subscribe {t}: {e}"))?;
        }
        consumer.register_message_listener_concurrently(Listener {
            tx,
            offsets: offsets.clone(),
        });
        consumer
            .start()
            .await
            .map_err(|e| format!("start push consumer (name server {}): {e}", s.namesrv))?;
        Ok(RocketMqSource {
            consumer: Some(consumer),
            rx,
            offsets,
        })
    }
}

impl Source for RocketMqSource {
    /// Forwards the listener's messages until `stop`; then shuts the push consumer
    /// down while still forwarding, since its listener calls in flight need the
    /// pipeline to settle their messages before they return.
    async fn feed(&mut self, tx: mpsc::Sender<Item>, mut stop: tokio::sync::watch::Receiver<bool>) {
        let Some(mut consumer) = self.consumer.take() else {
            return;
        };
        let offsets = self.offsets.clone();
        let reporter = tokio::spawn(async move {
            let mut tick = tokio::time::interval(LAG_EVERY);
            loop {
                tick.tick().await;
                offsets.lag.report();
            }
        });
        let closing = tokio::spawn(async move {
            let _ = stop.wait_for(|s| *s).await;
            consumer.shutdown().await;
            // Dropping the consumer drops the listener and its sender.
        });
        while let Some(item) = self.rx.recv().await {
            if tx.send(item).await.is_err() {
                break;
            }
        }
        let _ = closing.await;
        reporter.abort();
    }

    async fn finish(self) -> bool {
        true
    }
}
