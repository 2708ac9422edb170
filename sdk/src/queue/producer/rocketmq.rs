//! The RocketMQ producer (feature `rocketmq`): rocketmq-client-rust's producer, one
//! all-or-nothing `send_batch` per batch; and the process-wide runtime its clients
//! run on.

use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use rocketmq_client_rust::{ClientRuntime, DefaultMQProducer};
use rocketmq_model::common::message::message_single::Message;
use rocketmq_model::result::SendStatus;
use tokio::sync::RwLock;

use super::error::ProduceError;
use super::interface::{BoxFuture, Producer};
use super::record::OutMsg;

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
                Ok(result) => match acknowledged(result.send_status) {
                    Ok(()) => msgs.iter().map(|_| Ok(())).collect(),
                    Err(reason) => fail(reason),
                },
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

/// Whether a broker's answer acknowledges a batch as stored: only `SEND_OK` does. The
/// others (the disk flush or the replica did not finish in time, no replica available)
/// mean the broker holds the batch in memory at best, which a crash can lose; the
/// batch is then treated as not sent and goes to the next producer or the spool. A
/// batch the broker did keep is then delivered twice, which the consumers' claims
/// (one credit per trade number) make harmless.
fn acknowledged(status: SendStatus) -> Result<(), String> {
    match status {
        SendStatus::SendOk => Ok(()),
        other => Err(format!(
            "send_batch: the broker answered {other:?}, not stored to its strongest acknowledgement"
        )),
    }
}

/// The process-wide runtime that rocketmq-client-rust's clients run on.
static ROCKETMQ_OWNER: OnceLock<Mutex<Option<rocketmq_runtime::RuntimeOwner>>> = OnceLock::new();

/// A RocketMQ client runtime for one producer or consumer. The library runs its
/// clients on a runtime it owns; it is made once per process and never dropped
/// (dropping a runtime from async code would panic).
pub fn rocketmq_runtime(
    scope: &'static str,
) -> Result<Arc<rocketmq_client_rust::ClientRuntime>, String> {
    let cell = ROCKETMQ_OWNER.get_or_init(|| Mutex::new(None));
    let mut guard = cell
        .lock()
        .map_err(|_| "runtime owner lock poisoned".to_string())?;
    if guard.is_none() {
        let parallelism = std::thread::available_parallelism().map_or(2, usize::from);
        let config =
            rocketmq_runtime::RuntimeConfig::for_parallelism("rocketmq-client", parallelism);
        let owner = rocketmq_runtime::RuntimeOwner::plan(config)
            .map_err(|e| format!("plan client runtime: {e}"))?
            .build()
            .map_err(|e| format!("build client runtime: {e}"))?;
        *guard = Some(owner);
    }
    let owner = guard
        .as_ref()
        .ok_or_else(|| "runtime owner missing".to_string())?;
    rocketmq_client_rust::ClientRuntime::try_new(
        owner.root_context().component(scope),
        rocketmq_client_rust::ClientRuntimeConfig::default(),
        rocketmq_client_rust::TelemetryHandle::noop(),
    )
    .map_err(|e| format!("create client runtime: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_send_ok_acknowledges_a_batch() {
        assert_eq!(acknowledged(SendStatus::SendOk), Ok(()));
        for status in [
            SendStatus::FlushDiskTimeout,
            SendStatus::FlushSlaveTimeout,
            SendStatus::SlaveNotAvailable,
        ] {
            let reason = acknowledged(status).unwrap_err();
            assert!(reason.contains(&format!("{status:?}")), "{reason}");
        }
    }
}
