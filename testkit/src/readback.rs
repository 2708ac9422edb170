//! Reading back what reached the brokers, for tests: "every accepted reward is on a
//! broker, and how often".
//!
//! Both readers unpack compound records (`proto::pack`), decode every event as a `RewardEvent` and return the trade numbers
//! with how often each was seen, so a caller can assert "every one at least once" and
//! count duplicates. A message that is not a `RewardEvent` is counted separately,
//! never dropped silently.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use prost::Message as _;
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message as _;
use rdkafka::{Offset, TopicPartitionList};
use reward_runtime::teardown::drop_within;
use reward_stack::topics::{RETRY_FOR, RETRY_PAUSE, retry_kafka};
use rocketmq_client_rust::DefaultLitePullConsumer;
use rocketmq_model::common::consumer::consume_from_where::ConsumeFromWhere;

/// What a topic held.
#[derive(Debug, Default, Clone)]
pub struct ReadBack {
    /// Trade number → times seen.
    pub seen: HashMap<String, u32>,
    /// Messages that did not decode as a `RewardEvent`.
    pub undecodable: u64,
    /// Messages (events) read: a compound record's events count one each.
    pub messages: u64,
    /// Broker records read.
    pub records: u64,
    /// Of them, compound records (several events each).
    pub packs: u64,
    /// Every payload, in the order read (dead-letter topics hold other messages than
    /// `RewardEvent`; their readers decode these).
    pub payloads: Vec<Vec<u8>>,
}

impl ReadBack {
    /// One broker record: a compound record counts each of its events (a record that
    /// starts like a pack and does not read as one is one undecodable message).
    fn add(&mut self, payload: Option<&[u8]>) {
        self.records += 1;
        let Some(payload) = payload else {
            // A record without a payload is nothing the SDK writes.
            self.messages += 1;
            self.payloads.push(Vec::new());
            self.undecodable += 1;
            return;
        };
        if proto::pack::is_pack(payload) {
            self.packs += 1;
        }
        let raw = bytes::Bytes::copy_from_slice(payload);
        match proto::pack::unpack(raw.clone()) {
            Ok(events) => {
                for e in events {
                    self.add_event(&e.payload);
                }
            }
            Err(_) => {
                self.messages += 1;
                self.payloads.push(raw.to_vec());
                self.undecodable += 1;
            }
        }
    }

    fn add_event(&mut self, payload: &[u8]) {
        self.messages += 1;
        self.payloads.push(payload.to_vec());
        match proto::v1::RewardEvent::decode(payload) {
            Ok(e) => *self.seen.entry(e.trade_no).or_default() += 1,
            _ => self.undecodable += 1,
        }
    }

    /// Adds another read-back's counts.
    pub fn merge(&mut self, other: ReadBack) {
        self.messages += other.messages;
        self.records += other.records;
        self.packs += other.packs;
        self.undecodable += other.undecodable;
        self.payloads.extend(other.payloads);
        for (k, n) in other.seen {
            *self.seen.entry(k).or_default() += n;
        }
    }

    /// Messages beyond the first of each trade number.
    pub fn duplicates(&self) -> u64 {
        self.seen
            .values()
            .map(|n| u64::from(n.saturating_sub(1)))
            .sum()
    }
}

/// Reads a Kafka topic from the start until every partition is read up to the high
/// watermark it had when the read began, or `want` distinct trade numbers were seen,
/// or nothing new arrived for `idle` (then it returns what it has; the caller's
/// counts decide). Ending on the watermarks, not on a quiet spell, matters on a loaded
/// machine: a broker's first fetch of a large topic can take longer than any idle
/// guess, and a read that gave up early looked like lost messages.
///
/// It assigns every partition itself and never joins its (throwaway) group: a
/// read-back commits nothing, and closing a group member can hang inside librdkafka's
/// destroy (docs/stack.md). The consumer is closed with
/// [`drop_within`], so a stuck close is an error, never a hang.
pub fn read_kafka(
    brokers: &str,
    topic: &str,
    want: usize,
    idle: Duration,
) -> Result<ReadBack, String> {
    // librdkafka wants a group id even for assign(); it is never joined (no
    // subscribe) and nothing is committed to it.
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", format!("readback-{}", rand::random::<u64>()))
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .create()
        .map_err(|e| format!("kafka consumer: {e}"))?;
    // A broker busy with another writer can let one metadata or offsets request time
    // out (CI saw it); retrying for a minute tells "slow" from "gone".
    let meta = retry_kafka(|| consumer.fetch_metadata(Some(topic), Duration::from_secs(10)))
        .map_err(|e| format!("metadata of {topic}: {e}"))?;
    let mut tpl = TopicPartitionList::new();
    for t in meta.topics().iter().filter(|t| t.name() == topic) {
        for p in t.partitions() {
            tpl.add_partition_offset(topic, p.id(), Offset::Beginning)
                .map_err(|e| format!("assign {topic}: {e}"))?;
        }
    }
    if tpl.count() == 0 {
        return Err(format!("topic {topic} has no partitions"));
    }
    // Partition -> high watermark, for the partitions that hold anything.
    let mut behind = std::collections::BTreeMap::new();
    for p in tpl.elements() {
        let (low, high) = retry_kafka(|| {
            consumer.fetch_watermarks(topic, p.partition(), Duration::from_secs(10))
        })
        .map_err(|e| format!("watermarks of {topic}/{}: {e}", p.partition()))?;
        if high > low {
            behind.insert(p.partition(), high);
        }
    }
    consumer
        .assign(&tpl)
        .map_err(|e| format!("assign {topic}: {e}"))?;
    // No partition list may outlive the consumer (see `reward_stack::topics::committed_offsets`).
    drop(tpl);
    let mut out = ReadBack::default();
    let mut last_new = Instant::now();
    let mut result = Ok(());
    while !behind.is_empty() && out.seen.len() < want && last_new.elapsed() < idle {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                out.add(m.payload());
                last_new = Instant::now();
                if behind
                    .get(&m.partition())
                    .is_some_and(|high| m.offset() + 1 >= *high)
                {
                    behind.remove(&m.partition());
                }
            }
            Some(Err(e)) => {
                result = Err(format!("read {topic}: {e}"));
                break;
            }
            None => {}
        }
    }
    if !drop_within(consumer, Duration::from_secs(30)) {
        return Err(format!(
            "closing the read-back consumer of {topic} hung in librdkafka"
        ));
    }
    result.map(|()| out)
}

/// Reads a RocketMQ topic from the first offset until every queue is read up to the
/// max offset it had when the read began, or `want` distinct trade numbers were seen,
/// or nothing new arrived for `idle` (then it returns what it has; the caller's counts
/// decide). As with [`read_kafka`], ending on the queues' offsets rather than on a
/// quiet spell is what makes the read complete on a loaded machine: the consumer's
/// first rebalance and its pulls can stall for many seconds there, so a read that ends
/// on a few quiet seconds misses rewards that are on the topic.
pub async fn read_rocketmq(
    namesrv: &str,
    topic: &str,
    want: usize,
    idle: Duration,
) -> Result<ReadBack, String> {
    let rt = sdk::queue::rocketmq_runtime("reward-readback")?;
    let consumer = DefaultLitePullConsumer::builder(rt)
        .consumer_group(format!("readback-{}", rand::random::<u64>()))
        .name_server_addr(namesrv.to_string())
        .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
        .pull_batch_size(256)
        .auto_commit(true)
        .build()
        .map_err(|e| format!("lite pull consumer: {e}"))?;
    consumer
        .subscribe(topic)
        .await
        .map_err(|e| format!("subscribe {topic}: {e}"))?;
    consumer
        .start()
        .await
        .map_err(|e| format!("start consumer: {e}"))?;
    let result = read_rocketmq_until_end(&consumer, topic, want, idle).await;
    consumer.shutdown().await;
    result
}

/// Runs a RocketMQ client request again while it fails, for [`RETRY_FOR`]; returns the
/// first success or the last error.
async fn retry_rocketmq<T, E, F, Fut>(mut request: F) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let deadline = Instant::now() + RETRY_FOR;
    loop {
        match request().await {
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            other => return other,
        }
    }
}

async fn read_rocketmq_until_end(
    consumer: &DefaultLitePullConsumer,
    topic: &str,
    want: usize,
    idle: Duration,
) -> Result<ReadBack, String> {
    // (broker, queue) -> max offset, for the queues that hold anything.
    let mut behind = std::collections::BTreeMap::new();
    // These admin requests can fail on a busy broker (a dropped connection, say); each
    // is retried for up to a minute before the read gives up.
    let queues = retry_rocketmq(|| consumer.fetch_message_queues(topic))
        .await
        .map_err(|e| format!("queues of {topic}: {e}"))?;
    for mq in &queues {
        let high = retry_rocketmq(|| consumer.max_offset(mq))
            .await
            .map_err(|e| format!("max offset of {topic}/{}: {e}", mq.queue_id()))?;
        let low = retry_rocketmq(|| consumer.min_offset(mq))
            .await
            .map_err(|e| format!("min offset of {topic}/{}: {e}", mq.queue_id()))?;
        if high > low {
            behind.insert((mq.broker_name().to_string(), mq.queue_id()), high);
        }
    }
    let mut out = ReadBack::default();
    let mut last_new = Instant::now();
    while !behind.is_empty() && out.seen.len() < want && last_new.elapsed() < idle {
        let batch = consumer.poll_with_timeout(300).await;
        if !batch.is_empty() {
            last_new = Instant::now();
        }
        for m in &batch {
            out.add(m.body().as_deref());
            let queue = (m.broker_name().to_string(), m.queue_id());
            if behind
                .get(&queue)
                .is_some_and(|high| m.queue_offset() + 1 >= *high)
            {
                behind.remove(&queue);
            }
        }
    }
    Ok(out)
}
