//! The two broker producers behind one trait.
//!
//! A [`Producer`] sends a batch of events to a topic and answers per event, so a batch
//! that partly failed is retried only for the part that failed.
//!
//! - [`KafkaProducer`] (rdkafka): an idempotent producer (no duplicates from its own
//!   retries), keyed by trade number so one reward always lands in one partition;
//!   librdkafka batches again below us (`linger.ms`), and every message of a batch is
//!   handed to it before the first delivery report is awaited.
//! - [`RocketMqProducer`] (rocketmq-client-rust): one `send_batch` per batch, which the
//!   broker stores all-or-nothing; each message carries the trade number as its key.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rdkafka::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer as _};
use rocketmq_client_rust::{ClientRuntime, DefaultMQProducer};
use rocketmq_model::common::message::message_single::Message;
use tokio::sync::RwLock;

/// A boxed future, for the trait's object safety.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One event on its way to a broker.
#[derive(Debug, Clone)]
pub struct OutMsg {
    /// Partition / sharding key: the trade number.
    pub key: String,
    /// The encoded `RewardEvent`.
    pub payload: Bytes,
}

/// Why a send failed. Every failure is retryable from the SDK's point of view: the
/// event goes to the other broker, then to the retry loop, then to the spool.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{producer}: {reason}")]
pub struct ProduceError {
    /// The producer's name.
    pub producer: String,
    /// What the client library said.
    pub reason: String,
}

/// A broker producer.
pub trait Producer: Send + Sync + fmt::Debug {
    /// Its name in the configuration.
    fn name(&self) -> &str;
    /// Sends `msgs` to `topic`; one result per message, in order.
    fn send_batch<'a>(
        &'a self,
        topic: &'a str,
        msgs: &'a [OutMsg],
    ) -> BoxFuture<'a, Vec<Result<(), ProduceError>>>;
    /// Flushes and stops.
    fn close(&self) -> BoxFuture<'_, ()>;
}

/// rdkafka's future producer.
pub struct KafkaProducer {
    name: String,
    inner: FutureProducer,
    timeout: Duration,
}

impl fmt::Debug for KafkaProducer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaProducer")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// The librdkafka settings the SDK's Kafka producer runs with: idempotent, `acks=all`,
/// a 20 ms linger, a large local queue, `timeout` as the delivery timeout; `extra`
/// (the producer's `settings` table) overrides any of them. Public so a baseline (the
/// load tester's raw-rdkafka run) can use exactly the same settings.
pub fn kafka_client_config(
    brokers: &str,
    extra: &std::collections::BTreeMap<String, String>,
    timeout: Duration,
) -> ClientConfig {
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", brokers)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        // 20 ms, not librdkafka's 5: `send_reward` never waits for the broker, so a
        // longer linger costs the user nothing, and it makes produce requests larger
        // and fewer. Against the stack's tansu, which commits SQLite per request,
        // 2 ms held `send_reward` to 0.54-0.59x a raw producer and 20 ms gave
        // 0.70-0.76x (both sides on these settings; BENCHMARKS.md).
        .set("linger.ms", "20")
        .set("batch.num.messages", "10000")
        .set("queue.buffering.max.messages", "1000000")
        .set("queue.buffering.max.kbytes", "1048576")
        .set("message.timeout.ms", timeout.as_millis().to_string())
        .set("socket.keepalive.enable", "true");
    for (k, v) in extra {
        cfg.set(k, v);
    }
    cfg
}

impl KafkaProducer {
    /// A producer with [`kafka_client_config`]'s settings.
    pub fn new(
        name: &str,
        brokers: &str,
        extra: &std::collections::BTreeMap<String, String>,
        timeout: Duration,
    ) -> Result<Self, ProduceError> {
        let inner: FutureProducer = kafka_client_config(brokers, extra, timeout)
            .create()
            .map_err(|e| ProduceError {
                producer: name.to_string(),
                reason: format!("create: {e}"),
            })?;
        Ok(Self {
            name: name.to_string(),
            inner,
            timeout,
        })
    }

    fn err(&self, reason: impl fmt::Display) -> ProduceError {
        ProduceError {
            producer: self.name.clone(),
            reason: reason.to_string(),
        }
    }
}

impl Producer for KafkaProducer {
    fn name(&self) -> &str {
        &self.name
    }

    fn send_batch<'a>(
        &'a self,
        topic: &'a str,
        msgs: &'a [OutMsg],
    ) -> BoxFuture<'a, Vec<Result<(), ProduceError>>> {
        Box::pin(async move {
            let mut pending = Vec::with_capacity(msgs.len());
            for m in msgs {
                let record = FutureRecord::to(topic)
                    .key(m.key.as_bytes())
                    .payload(m.payload.as_ref());
                pending.push(match self.inner.send_result(record) {
                    Ok(fut) => Ok(fut),
                    Err((e, _)) => Err(self.err(e)),
                });
            }
            let mut out = Vec::with_capacity(msgs.len());
            for p in pending {
                out.push(match p {
                    Ok(fut) => match tokio::time::timeout(self.timeout * 2, fut).await {
                        Ok(Ok(Ok(_))) => Ok(()),
                        Ok(Ok(Err((e, _)))) => Err(self.err(e)),
                        Ok(Err(_)) => Err(self.err("delivery report dropped")),
                        Err(_) => Err(self.err("no delivery report in time")),
                    },
                    Err(e) => Err(e),
                });
            }
            out
        })
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let producer = self.inner.clone();
            let timeout = self.timeout;
            // flush blocks the thread: keep it off the async workers.
            let _ = tokio::task::spawn_blocking(move || producer.flush(timeout)).await;
        })
    }
}

/// rocketmq-client-rust's producer.
pub struct RocketMqProducer {
    name: String,
    inner: RwLock<DefaultMQProducer>,
    timeout_ms: u64,
}

impl fmt::Debug for RocketMqProducer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RocketMqProducer")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl RocketMqProducer {
    /// Starts a producer in `group` against the name server `namesrv`.
    pub async fn start(
        name: &str,
        runtime: Arc<ClientRuntime>,
        namesrv: &str,
        group: &str,
        timeout: Duration,
    ) -> Result<Self, ProduceError> {
        let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        let mut inner = DefaultMQProducer::builder(runtime)
            .producer_group(group.to_string())
            .name_server_addr(namesrv.to_string())
            .send_msg_timeout(u32::try_from(timeout_ms).unwrap_or(u32::MAX))
            .retry_times_when_send_failed(1)
            .build();
        inner.start().await.map_err(|e| ProduceError {
            producer: name.to_string(),
            reason: format!("start: {e}"),
        })?;
        Ok(Self {
            name: name.to_string(),
            inner: RwLock::new(inner),
            timeout_ms,
        })
    }
}

impl Producer for RocketMqProducer {
    fn name(&self) -> &str {
        &self.name
    }

    fn send_batch<'a>(
        &'a self,
        topic: &'a str,
        msgs: &'a [OutMsg],
    ) -> BoxFuture<'a, Vec<Result<(), ProduceError>>> {
        Box::pin(async move {
            let fail = |reason: String| {
                let e = ProduceError {
                    producer: self.name.clone(),
                    reason,
                };
                msgs.iter().map(|_| Err(e.clone())).collect::<Vec<_>>()
            };
            let mut batch = Vec::with_capacity(msgs.len());
            for m in msgs {
                match Message::builder()
                    .topic(topic)
                    .key(m.key.clone())
                    .body_slice(m.payload.as_ref())
                    .build()
                {
                    Ok(msg) => batch.push(msg),
                    Err(e) => return fail(format!("build message: {e}")),
                }
            }
            let producer = self.inner.read().await;
            match producer
                .send_batch_with_timeout(batch, self.timeout_ms)
                .await
            {
                Ok(_) => msgs.iter().map(|_| Ok(())).collect(),
                Err(e) => fail(format!("send_batch: {e}")),
            }
        })
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.inner.write().await.shutdown().await;
        })
    }
}
