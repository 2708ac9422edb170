//! Topics on the stack's brokers: creating them (the stack's Kafka creates none on
//! produce, as production clusters that refuse auto-creation do; the RocketMQ name
//! server must route a topic before a producer may use it) and reading a Kafka
//! group's committed offsets. Every request that can time out on a busy broker
//! is retried for [`RETRY_FOR`] before it fails, which tells "slow" from "gone".

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::Offset;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{Consumer, ConsumerContext};
use rdkafka::error::{KafkaResult, RDKafkaErrorCode};
use rocketmq_client_rust::DefaultMQProducer;
use rocketmq_model::common::topic::TopicValidator;

/// Creates Kafka topics (the stack's Kafka creates none on produce); existing ones are fine.
pub async fn create_kafka_topics(
    brokers: &str,
    topics: &[&str],
    partitions: i32,
) -> Result<(), String> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .map_err(|e| format!("kafka admin: {e}"))?;
    let new: Vec<NewTopic<'_>> = topics
        .iter()
        .map(|t| NewTopic::new(t, partitions, TopicReplication::Fixed(1)))
        .collect();
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let results = admin
        .create_topics(&new, &opts)
        .await
        .map_err(|e| format!("create topics: {e}"))?;
    for r in results {
        match r {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((t, code)) => return Err(format!("create topic {t}: {code}")),
        }
    }
    Ok(())
}

/// Creates RocketMQ topics (4 queues each) on the brokers that route the auto-create
/// template topic and waits until the name server routes to each. A create that
/// failed or timed out is sent again (the broker's create is an update: idempotent)
/// until the topic is routed or 15 s have passed; the error then names what the last
/// create said.
pub async fn create_rocketmq_topics(namesrv: &str, topics: &[&str]) -> Result<(), String> {
    let rt = sdk::queue::rocketmq_runtime("reward-topic-admin")?;
    let mut producer = DefaultMQProducer::builder(rt)
        .producer_group(format!("reward-admin-{}", rand::random::<u32>()))
        .name_server_addr(namesrv.to_string())
        .build();
    producer.start().await.map_err(|e| format!("start: {e}"))?;
    let mut result = Ok(());
    for topic in topics {
        let deadline = Instant::now() + Duration::from_secs(15);
        let mut routed = false;
        let mut created = false;
        let mut last = String::from("no queues");
        while Instant::now() < deadline {
            if !created {
                match producer
                    .create_topic(
                        TopicValidator::AUTO_CREATE_TOPIC_KEY_TOPIC,
                        topic,
                        4,
                        HashMap::new(),
                    )
                    .await
                {
                    Ok(()) => {
                        created = true;
                        last = String::from("no queues");
                    }
                    Err(e) => last = format!("create: {e}"),
                }
            }
            match producer.fetch_publish_message_queues(topic).await {
                Ok(q) if !q.is_empty() => {
                    routed = true;
                    break;
                }
                Ok(_) => {}
                Err(e) if created => last = format!("route: {e}"),
                Err(_) => {}
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        if !routed {
            result = Err(format!(
                "RocketMQ topic {topic} not routed after 15 s: {last}"
            ));
            break;
        }
    }
    producer.shutdown().await;
    result
}

/// The offsets `consumer`'s group has committed for `topic`, by partition (partitions
/// with no commit are left out).
///
/// Returned as a plain map on purpose. A `TopicPartitionList` that librdkafka filled
/// in (as `committed()` does) holds a reference to each partition's internal state,
/// which in turn pins the partition leader's broker thread; while such a list is
/// alive, dropping the consumer blocks forever in `rd_kafka_destroy`, waiting for that
/// thread. rdkafka's types let the list outlive the consumer, so the list never
/// leaves this function. (docs/stack.md, "A Kafka consumer's close never returns".)
pub fn committed_offsets<C: Consumer<Cx>, Cx: ConsumerContext>(
    consumer: &C,
    topic: &str,
    timeout: Duration,
) -> KafkaResult<std::collections::BTreeMap<i32, i64>> {
    let list = retry_kafka(|| consumer.committed(timeout))?;
    let offsets = list
        .elements_for_topic(topic)
        .iter()
        .filter_map(|e| match e.offset() {
            Offset::Offset(o) => Some((e.partition(), o)),
            _ => None,
        })
        .collect();
    drop(list);
    Ok(offsets)
}

/// How long an admin request or a read-back retries a failed metadata or offsets request, and the pause
/// between tries: long enough to tell a busy broker from a gone one.
pub const RETRY_FOR: Duration = Duration::from_secs(60);
pub const RETRY_PAUSE: Duration = Duration::from_millis(500);

/// Runs a (blocking) librdkafka request again while it times out, for [`RETRY_FOR`];
/// any other error, or the last timeout, is returned.
pub fn retry_kafka<T>(mut request: impl FnMut() -> KafkaResult<T>) -> KafkaResult<T> {
    let deadline = Instant::now() + RETRY_FOR;
    loop {
        match request() {
            Err(e)
                if e.rdkafka_error_code() == Some(RDKafkaErrorCode::OperationTimedOut)
                    && Instant::now() < deadline =>
            {
                std::thread::sleep(RETRY_PAUSE);
            }
            other => return other,
        }
    }
}
