//! The Kafka producer (feature `kafka`): rdkafka's future producer, idempotent, each
//! record keyed by its (first) event's key.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer as _};

use super::error::ProduceError;
use super::interface::{BoxFuture, Producer};
use super::record::OutMsg;

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
    extra: &BTreeMap<String, String>,
    timeout: Duration,
) -> ClientConfig {
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", brokers)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        // 20 ms, not librdkafka's 5: `send_reward` never waits for the broker, so a
        // longer linger costs the user nothing, and it makes produce requests larger
        // and fewer: a broker pays per request as well as per byte (see
        // docs/findings/benchmarks-history.md).
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
        extra: &BTreeMap<String, String>,
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
