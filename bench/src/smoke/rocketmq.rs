//! RocketMQ probe: batch-send N messages, consume them all, check every index.
//!
//! Two consumer types are offered because rocketmq-client-rust 1.0.0's push consumer
//! with default settings overran its runtime's blocking lanes under load (hundreds of
//! `runtime.capacity.exhausted` failures for 20 k messages, see `docs/rocketmq.md`):
//! - [`ConsumerKind::LitePull`]: the application polls batches; nothing runs inside
//!   the client's executor, so nothing can be refused there.
//! - [`ConsumerKind::Push`]: the classic listener, with the consume threads and batch
//!   size exposed so the settings can be measured.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rocketmq_client_rust::{
    ClientRuntime, ConsumeConcurrentlyContext, ConsumeConcurrentlyStatus, DefaultLitePullConsumer,
    DefaultMQProducer, DefaultMQPushConsumer, MQPushConsumer, MessageListenerConcurrently,
};
use rocketmq_model::common::consumer::consume_from_where::ConsumeFromWhere;
use rocketmq_model::common::message::message_ext::MessageExt;
use rocketmq_model::common::message::message_single::Message;
use tokio::sync::mpsc;

use reward_baseline::unique_name;
use reward_stack::env::{Server, StackEnv, check_reachable};

use super::{ProbeReport, SmokeError};

/// How the probe consumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ConsumerKind {
    /// `DefaultLitePullConsumer`: poll batches from the application.
    LitePull,
    /// `DefaultMQPushConsumer` with a concurrent listener.
    Push,
}

/// The probe's knobs.
#[derive(Debug, Clone)]
pub struct ProbeOptions {
    /// Messages to send and consume.
    pub messages: u64,
    /// Messages per `send_batch` call.
    pub send_batch: usize,
    /// Consumer type.
    pub consumer: ConsumerKind,
    /// Messages per pull request (`None`: the client library's default).
    pub pull_batch: Option<u32>,
    /// Push only: messages handed to one listener call (`None`: library default).
    pub consume_batch: Option<u32>,
    /// Push only: consume threads, min = max (`None`: library default).
    pub consume_threads: Option<u32>,
    /// How long consuming every message may take.
    pub consume_timeout: Duration,
}

impl ProbeOptions {
    /// The settings the smoke test and `reward-bench smoke` use for `messages` messages.
    pub fn new(messages: u64) -> Self {
        Self {
            messages,
            send_batch: 100,
            consumer: ConsumerKind::Push,
            pull_batch: Some(256),
            consume_batch: Some(32),
            consume_threads: Some(4),
            consume_timeout: Duration::from_secs(120),
        }
    }
}

fn client_error(step: &str, e: impl std::fmt::Display) -> SmokeError {
    SmokeError::RocketMq(format!("{step}: {e}"))
}

/// A client runtime for one producer or consumer, on the SDK's process-wide owner.
pub fn client_runtime(scope: &'static str) -> Result<Arc<ClientRuntime>, SmokeError> {
    sdk::queue::rocketmq_runtime(scope).map_err(SmokeError::RocketMq)
}

/// Runs the probe.
pub async fn probe(env: &StackEnv, opts: &ProbeOptions) -> Result<ProbeReport, SmokeError> {
    check_reachable(
        Server::RocketMqNameServer,
        &env.rocketmq_namesrv,
        Duration::from_secs(2),
    )
    .await?;
    let topic = unique_name("smoke");
    let mut producer = DefaultMQProducer::builder(client_runtime("smoke-producer")?)
        .producer_group(unique_name("smoke-producer"))
        .name_server_addr(env.rocketmq_namesrv.clone())
        .send_msg_timeout(5_000)
        .build();
    producer
        .start()
        .await
        .map_err(|e| client_error("start producer", e))?;
    let result = run(env, opts, &topic, &producer).await;
    producer.shutdown().await;
    result
}

async fn run(
    env: &StackEnv,
    opts: &ProbeOptions,
    topic: &str,
    producer: &DefaultMQProducer,
) -> Result<ProbeReport, SmokeError> {
    ensure_topic(env, topic).await?;

    let start = Instant::now();
    let mut sent = 0u64;
    while sent < opts.messages {
        let end = (sent + opts.send_batch as u64).min(opts.messages);
        let batch = (sent..end)
            .map(|i| {
                Message::builder()
                    .topic(topic)
                    .key(i.to_string())
                    .body_slice(i.to_string().as_bytes())
                    .build()
                    .map_err(|e| client_error("build message", e))
            })
            .collect::<Result<Vec<_>, _>>()?;
        producer
            .send_batch_with_timeout(batch, 10_000)
            .await
            .map_err(|e| client_error("send_batch", e))?;
        sent = end;
    }
    let write_time = start.elapsed();

    let (tx, rx) = mpsc::unbounded_channel();
    let start = Instant::now();
    let detail = match opts.consumer {
        ConsumerKind::LitePull => consume_lite_pull(env, opts, topic, tx, rx).await?,
        ConsumerKind::Push => consume_push(env, opts, topic, tx, rx).await?,
    };
    let read_time = start.elapsed();
    let (seen, duplicates, detail) = detail;
    let missing = (0..opts.messages).filter(|i| !seen.contains(i)).count();
    if missing != 0 {
        return Err(SmokeError::Mismatch {
            server: Server::RocketMqBroker,
            what: format!("{missing} of {} messages never arrived", opts.messages),
        });
    }
    Ok(ProbeReport {
        server: Server::RocketMqBroker,
        written: opts.messages,
        read_back: seen.len() as u64,
        duplicates,
        write_time,
        read_time,
        detail,
    })
}

/// Creates the topic and waits until the name server routes to it. A broker that is
/// down shows up here, named.
async fn ensure_topic(env: &StackEnv, topic: &str) -> Result<(), SmokeError> {
    reward_stack::topics::create_rocketmq_topics(&env.rocketmq_namesrv, &[topic])
        .await
        .map_err(|reason| {
            SmokeError::Stack(reward_stack::env::StackError::Unreachable {
                server: Server::RocketMqBroker,
                // The broker's own address comes from the name server's routes; what
                // we know is which name server was asked.
                addr: format!("the route from name server {}", env.rocketmq_namesrv),
                reason,
            })
        })
}

type Consumed = (HashSet<u64>, u64, String);

fn index_of(msg: &MessageExt) -> Option<u64> {
    let body = msg.body()?;
    std::str::from_utf8(&body).ok()?.parse().ok()
}

async fn collect(
    opts: &ProbeOptions,
    mut rx: mpsc::UnboundedReceiver<Option<u64>>,
) -> Result<(HashSet<u64>, u64), SmokeError> {
    let mut seen = HashSet::new();
    let mut duplicates = 0;
    let deadline = tokio::time::Instant::now() + opts.consume_timeout;
    while (seen.len() as u64) < opts.messages {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(Some(i))) => {
                if !seen.insert(i) {
                    duplicates += 1;
                }
            }
            Ok(Some(None)) => {
                return Err(SmokeError::Mismatch {
                    server: Server::RocketMqBroker,
                    what: "a consumed body is not a message index".into(),
                });
            }
            Ok(None) | Err(_) => {
                return Err(SmokeError::Mismatch {
                    server: Server::RocketMqBroker,
                    what: format!(
                        "consumed {} of {} messages within {:?}",
                        seen.len(),
                        opts.messages,
                        opts.consume_timeout
                    ),
                });
            }
        }
    }
    Ok((seen, duplicates))
}

async fn consume_lite_pull(
    env: &StackEnv,
    opts: &ProbeOptions,
    topic: &str,
    tx: mpsc::UnboundedSender<Option<u64>>,
    rx: mpsc::UnboundedReceiver<Option<u64>>,
) -> Result<Consumed, SmokeError> {
    let mut builder = DefaultLitePullConsumer::builder(client_runtime("smoke-lite-pull")?)
        .consumer_group(unique_name("smoke-lite"))
        .name_server_addr(env.rocketmq_namesrv.clone())
        .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset);
    if let Some(n) = opts.pull_batch {
        builder = builder.pull_batch_size(i32::try_from(n).unwrap_or(i32::MAX));
    }
    let consumer = Arc::new(
        builder
            .poll_timeout_millis(500)
            .auto_commit(true)
            .build()
            .map_err(|e| client_error("build lite pull consumer", e))?,
    );
    consumer
        .subscribe(topic)
        .await
        .map_err(|e| client_error("subscribe", e))?;
    consumer
        .start()
        .await
        .map_err(|e| client_error("start lite pull consumer", e))?;
    let poller = {
        let consumer = consumer.clone();
        tokio::spawn(async move {
            let mut polls = 0u64;
            while !tx.is_closed() {
                let batch = consumer.poll_with_timeout(500).await;
                polls += 1;
                for msg in &batch {
                    if tx.send(index_of(msg)).is_err() {
                        return polls;
                    }
                }
            }
            polls
        })
    };
    let result = collect(opts, rx).await;
    let polls = poller.await.unwrap_or(0);
    consumer.shutdown().await;
    let (seen, dup) = result?;
    Ok((
        seen,
        dup,
        format!(
            "lite pull, pull batch {}, {polls} polls",
            shown(opts.pull_batch)
        ),
    ))
}

fn shown(v: Option<u32>) -> String {
    v.map_or_else(|| "default".to_string(), |n| n.to_string())
}

struct ForwardListener {
    tx: mpsc::UnboundedSender<Option<u64>>,
}

impl MessageListenerConcurrently for ForwardListener {
    fn consume_message(
        &self,
        msgs: &[&MessageExt],
        _context: &ConsumeConcurrentlyContext,
    ) -> rocketmq_client_rust::ClientResult<ConsumeConcurrentlyStatus> {
        for msg in msgs {
            // The receiver is gone only once every message arrived.
            let _ = self.tx.send(index_of(msg));
        }
        Ok(ConsumeConcurrentlyStatus::ConsumeSuccess)
    }
}

async fn consume_push(
    env: &StackEnv,
    opts: &ProbeOptions,
    topic: &str,
    tx: mpsc::UnboundedSender<Option<u64>>,
    rx: mpsc::UnboundedReceiver<Option<u64>>,
) -> Result<Consumed, SmokeError> {
    let mut builder = DefaultMQPushConsumer::builder(client_runtime("smoke-push")?)
        .consumer_group(unique_name("smoke-push"))
        .name_server_addr(env.rocketmq_namesrv.clone())
        .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset);
    if let Some(n) = opts.consume_threads {
        builder = builder.consume_thread_min(n).consume_thread_max(n);
    }
    if let Some(n) = opts.consume_batch {
        builder = builder.consume_message_batch_max_size(n);
    }
    if let Some(n) = opts.pull_batch {
        builder = builder.pull_batch_size(n);
    }
    let mut consumer = builder.build();
    consumer
        .subscribe(topic, "*")
        .await
        .map_err(|e| client_error("subscribe", e))?;
    consumer.register_message_listener_concurrently(ForwardListener { tx });
    consumer
        .start()
        .await
        .map_err(|e| client_error("start push consumer", e))?;
    let result = collect(opts, rx).await;
    consumer.shutdown().await;
    let (seen, dup) = result?;
    Ok((
        seen,
        dup,
        format!(
            "push, {} consume threads, consume batch {}, pull batch {}",
            shown(opts.consume_threads),
            shown(opts.consume_batch),
            shown(opts.pull_batch)
        ),
    ))
}
