//! Kafka probe: produce N messages, consume them in a consumer group with committed
//! offsets, stop the consumer half-way, start a new member of the same group, and check
//! that it resumes from the committed offsets.
//!
//! The consumer stores an offset only after "handling" its message
//! (`enable.auto.offset.store=false`) and commits what is stored: the at-least-once
//! discipline the pipeline's consumers use. A restart may therefore redeliver what was
//! handled after the last commit (bounded by the commit interval) but never skips.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{CommitMode, Consumer, ConsumerContext, StreamConsumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};

use reward_baseline::unique_name;
use reward_stack::env::{Server, StackEnv, check_reachable};

use super::{ProbeReport, SmokeError};

/// Commit (asynchronously) every this many handled messages, and synchronously when
/// the consumer stops. Also the bound on redeliveries after a crash.
pub const COMMIT_EVERY: u64 = 500;
const PARTITIONS: i32 = 3;
const RECV_TIMEOUT: Duration = Duration::from_secs(30);

/// What the probe does, beyond the stack's addresses.
#[derive(Debug, Clone, Default)]
pub struct KafkaProbeOptions {
    /// Messages to produce and consume.
    pub messages: u64,
    /// librdkafka debug contexts (its `debug` setting, e.g. `cgrp,broker,fetch`) for
    /// the probe's consumers; their log lines go to `tracing` under the target
    /// `librdkafka` (show them with `RUST_LOG=librdkafka=debug`).
    pub debug: Option<String>,
    /// An existing, empty topic to use instead of creating one (for brokers without
    /// the CreateTopics API, such as librdkafka's mock cluster).
    pub topic: Option<String>,
}

fn client_config(env: &StackEnv) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &env.kafka_brokers)
        .set("socket.timeout.ms", "10000")
        .set("log_level", "3");
    c
}

/// Hands librdkafka's log lines to `tracing` (target `librdkafka`), so they land in
/// the load tester's log with everything else. rdkafka's default context writes them
/// to the `log` crate, which this binary does not collect.
struct TracingContext;

impl ClientContext for TracingContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => {
                tracing::error!(target: "librdkafka", "{facility}: {message}");
            }
            RDKafkaLogLevel::Warning => {
                tracing::warn!(target: "librdkafka", "{facility}: {message}")
            }
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                tracing::info!(target: "librdkafka", "{facility}: {message}");
            }
            RDKafkaLogLevel::Debug => {
                tracing::debug!(target: "librdkafka", "{facility}: {message}")
            }
        }
    }
}

impl ConsumerContext for TracingContext {}

/// Creates `topic` with `partitions` partitions (the stack's Kafka creates no topic on produce).
pub async fn create_topic(env: &StackEnv, topic: &str, partitions: i32) -> Result<(), SmokeError> {
    let admin: AdminClient<DefaultClientContext> = client_config(env).create()?;
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let results = admin
        .create_topics(
            &[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))],
            &opts,
        )
        .await?;
    for r in results {
        match r {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((_, code)) => return Err(SmokeError::Kafka(KafkaError::AdminOp(code))),
        }
    }
    Ok(())
}

/// How long closing a consumer may take before the probe gives up on it.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs the probe with `messages` messages over 3 partitions.
pub async fn probe(env: &StackEnv, messages: u64) -> Result<ProbeReport, SmokeError> {
    probe_with(
        env,
        &KafkaProbeOptions {
            messages,
            ..KafkaProbeOptions::default()
        },
    )
    .await
}

/// [`probe`] with every option.
pub async fn probe_with(
    env: &StackEnv,
    opts: &KafkaProbeOptions,
) -> Result<ProbeReport, SmokeError> {
    let messages = opts.messages;
    let debug = opts.debug.as_deref();
    check_reachable(
        Server::Kafka,
        env.first_kafka_broker(),
        Duration::from_secs(2),
    )
    .await?;
    let topic = match &opts.topic {
        Some(existing) => existing.clone(),
        None => {
            let topic = unique_name("smoke");
            create_topic(env, &topic, PARTITIONS).await?;
            topic
        }
    };

    let start = Instant::now();
    produce(env, &topic, messages).await?;
    let write_time = start.elapsed();

    let group = unique_name("smoke-group");
    let start = Instant::now();
    let half = messages / 2;
    let first = consume(env, &topic, &group, debug, &HashSet::new(), |seen| {
        seen.len() as u64 >= half
    })
    .await?;
    let committed = first.committed.clone();
    let second = consume(env, &topic, &group, debug, &first.seen, |seen| {
        seen.len() as u64 + first.seen.len() as u64 >= messages
    })
    .await?;
    let read_time = start.elapsed();

    // Resume check: on every partition the new member started exactly at the offset
    // the first member committed (or at the start, when it committed nothing there).
    for (partition, first_offset) in &second.first_offsets {
        let expected = committed.get(partition).copied().unwrap_or(0);
        if *first_offset != expected {
            return Err(SmokeError::Mismatch {
                server: Server::Kafka,
                what: format!(
                    "partition {partition}: the restarted consumer began at offset {first_offset}, \
                     the group had committed {expected}"
                ),
            });
        }
    }
    let all: HashSet<u64> = first.seen.union(&second.seen).copied().collect();
    let missing = (0..messages).filter(|i| !all.contains(i)).count();
    if missing != 0 || all.len() as u64 != messages {
        return Err(SmokeError::Mismatch {
            server: Server::Kafka,
            what: format!(
                "{missing} of {messages} messages never arrived ({} distinct seen)",
                all.len()
            ),
        });
    }
    let duplicates = second.duplicates + first.duplicates;
    Ok(ProbeReport {
        server: Server::Kafka,
        written: messages,
        read_back: all.len() as u64,
        duplicates,
        write_time,
        read_time,
        detail: format!(
            "{PARTITIONS} partitions; consumer stopped after {} messages, committed {:?}; \
             second member resumed there",
            first.seen.len(),
            committed
        ),
    })
}

async fn produce(env: &StackEnv, topic: &str, messages: u64) -> Result<(), SmokeError> {
    let producer: FutureProducer = client_config(env)
        .set("linger.ms", "5")
        .set("acks", "all")
        .set("message.timeout.ms", "30000")
        .create()?;
    let mut pending = VecDeque::new();
    for i in 0..messages {
        let text = i.to_string();
        loop {
            match producer.send_result(FutureRecord::to(topic).key(&text).payload(&text)) {
                Ok(delivery) => {
                    pending.push_back(delivery);
                    break;
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    // librdkafka's queue is full: wait for the oldest delivery, then retry.
                    if let Some(oldest) = pending.pop_front() {
                        check_delivery(oldest.await)?;
                    }
                }
                Err((e, _)) => return Err(e.into()),
            }
        }
    }
    for delivery in pending {
        check_delivery(delivery.await)?;
    }
    Ok(())
}

fn check_delivery<E>(
    result: Result<rdkafka::producer::future_producer::OwnedDeliveryResult, E>,
) -> Result<(), SmokeError> {
    match result {
        Ok(Ok(_)) => Ok(()),
        Ok(Err((e, _))) => Err(e.into()),
        Err(_) => Err(SmokeError::Mismatch {
            server: Server::Kafka,
            what: "the producer dropped a delivery report".into(),
        }),
    }
}

struct Consumed {
    seen: HashSet<u64>,
    duplicates: u64,
    /// Offset of the first message this member received, per partition.
    first_offsets: BTreeMap<i32, i64>,
    /// What the group had committed when this member stopped, per partition.
    committed: BTreeMap<i32, i64>,
}

async fn consume(
    env: &StackEnv,
    topic: &str,
    group: &str,
    debug: Option<&str>,
    earlier: &HashSet<u64>,
    done: impl Fn(&HashSet<u64>) -> bool,
) -> Result<Consumed, SmokeError> {
    let consumer = subscribe(env, topic, group, debug)?;
    let (mut out, next) = receive(&consumer, earlier, done).await?;
    commit_handled(&consumer, topic, &next)?;
    out.committed =
        reward_stack::topics::committed_offsets(&consumer, topic, Duration::from_secs(10))?;
    check_committed(&next, &out.committed)?;
    close(consumer).await?;
    Ok(out)
}

/// A new member of `group` subscribed to `topic`: offsets stored only by hand and
/// committed only by hand, from the start when the group has none.
fn subscribe(
    env: &StackEnv,
    topic: &str,
    group: &str,
    debug: Option<&str>,
) -> Result<StreamConsumer<TracingContext>, SmokeError> {
    let mut config = client_config(env);
    config
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", "10000");
    if let Some(contexts) = debug {
        config.set("debug", contexts).set("log_level", "7");
    }
    let consumer: StreamConsumer<TracingContext> = config.create_with_context(TracingContext)?;
    consumer.subscribe(&[topic])?;
    Ok(consumer)
}

/// Receives and handles messages until `done` says enough were seen: counts those
/// already seen (here or `earlier`) as duplicates, stores each handled offset and
/// commits asynchronously every [`COMMIT_EVERY`]. Returns what was seen and, per
/// partition, the offset after the last handled message.
async fn receive(
    consumer: &StreamConsumer<TracingContext>,
    earlier: &HashSet<u64>,
    done: impl Fn(&HashSet<u64>) -> bool,
) -> Result<(Consumed, BTreeMap<i32, i64>), SmokeError> {
    let mut out = Consumed {
        seen: HashSet::new(),
        duplicates: 0,
        first_offsets: BTreeMap::new(),
        committed: BTreeMap::new(),
    };
    let mut handled = 0u64;
    // Per partition, the offset after the last handled message: what to commit.
    let mut next: BTreeMap<i32, i64> = BTreeMap::new();
    while !done(&out.seen) {
        let msg = tokio::time::timeout(RECV_TIMEOUT, consumer.recv())
            .await
            .map_err(|_| SmokeError::Timeout {
                server: Server::Kafka,
                step: "receiving the next message",
                after: RECV_TIMEOUT,
            })??;
        let index = msg
            .payload()
            .and_then(|p| std::str::from_utf8(p).ok())
            .and_then(|s| s.parse::<u64>().ok())
            .ok_or_else(|| SmokeError::Mismatch {
                server: Server::Kafka,
                what: format!(
                    "partition {} offset {}: payload is not a message index",
                    msg.partition(),
                    msg.offset()
                ),
            })?;
        out.first_offsets
            .entry(msg.partition())
            .or_insert(msg.offset());
        if earlier.contains(&index) || !out.seen.insert(index) {
            out.duplicates += 1;
        }
        // "Handled": now its offset may be stored and committed.
        consumer.store_offset_from_message(&msg)?;
        next.insert(msg.partition(), msg.offset() + 1);
        handled += 1;
        if handled.is_multiple_of(COMMIT_EVERY) {
            consumer.commit_consumer_state(CommitMode::Async)?;
        }
    }
    Ok((out, next))
}

/// Commits, synchronously, the offsets `next` this member handled up to.
fn commit_handled(
    consumer: &StreamConsumer<TracingContext>,
    topic: &str,
    next: &BTreeMap<i32, i64>,
) -> Result<(), SmokeError> {
    // The last commit names its offsets. `commit_consumer_state` would commit "what is
    // stored and not yet committed", and when the member stops right after an
    // asynchronous commit (5 000 is a multiple of COMMIT_EVERY) that is nothing:
    // librdkafka answers NoOffset, or the answer races the async commit still in flight.
    if !next.is_empty() {
        let mut handled_up_to = TopicPartitionList::new();
        for (partition, offset) in next {
            handled_up_to.add_partition_offset(topic, *partition, Offset::Offset(*offset))?;
        }
        consumer.commit(&handled_up_to, CommitMode::Sync)?;
    }
    Ok(())
}

/// Checks that the group's `committed` offsets are the `next` this member handled up
/// to.
fn check_committed(
    next: &BTreeMap<i32, i64>,
    committed: &BTreeMap<i32, i64>,
) -> Result<(), SmokeError> {
    // What the group holds must be what this member handled: a smaller offset would
    // redeliver more than one commit interval, a larger one would skip messages.
    // (Partitions this member never touched keep what an earlier member committed.)
    for (partition, offset) in next {
        if committed.get(partition) != Some(offset) {
            return Err(SmokeError::Mismatch {
                server: Server::Kafka,
                what: format!(
                    "partition {partition}: the group committed {:?} after this member \
                     handled up to offset {offset}",
                    committed.get(partition)
                ),
            });
        }
    }
    Ok(())
}

/// Closes `consumer` off the async workers, within [`CLOSE_TIMEOUT`].
async fn close(consumer: StreamConsumer<TracingContext>) -> Result<(), SmokeError> {
    // Closing the consumer (leave the group, destroy the handle) blocks until every
    // object that references its partitions is gone: that is why the committed
    // offsets (read in `consume`) are copied out of librdkafka's list at once
    // (docs/stack.md, "A Kafka consumer's close never returns"). It still runs off the
    // async workers and with a deadline, so a close that does get stuck is a clear
    // error, never a hung probe.
    let closed = tokio::task::spawn_blocking(move || {
        reward_runtime::teardown::drop_within(consumer, CLOSE_TIMEOUT)
    })
    .await
    .unwrap_or(false);
    if !closed {
        return Err(SmokeError::Timeout {
            server: Server::Kafka,
            step: "closing the consumer (librdkafka destroy)",
            after: CLOSE_TIMEOUT,
        });
    }
    Ok(())
}
