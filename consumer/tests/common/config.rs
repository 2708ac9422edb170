//! The configs the service, the consumer and the test's producers share: the `[sdk]`
//! section over the test's topics, and the consumer's whole config.

use std::path::Path;

use reward_consumer::config::ConsumerConfig;
use reward_stack::env::{QueueSpec, SdkSection};

use super::{CREDENTIAL, dead_topic, events_topic, failures_topic, special_topic, stack};

/// The `[sdk]` section both the service and the consumer use: queues `massive`
/// (events), `dead` and `failures`, all on Kafka, and `special` on RocketMQ (nothing
/// is routed there: the RocketMQ test names it).
pub fn sdk_section(tag: &str, dir: &Path, who: &str) -> String {
    let s = stack();
    let topics = [
        events_topic(tag),
        special_topic(tag),
        dead_topic(tag),
        failures_topic(tag),
    ];
    let queue = |i: usize, name, producer| QueueSpec {
        name,
        topic: &topics[i],
        primary: producer,
        backup: producer,
        ratio: 100,
    };
    SdkSection {
        env: &s,
        keys_file: &dir.join("keys"),
        ttl_secs: 3600,
        store_prefix: &format!("tok-{tag}"),
        store_timeout_ms: Some(10_000),
        rocketmq_group: &format!("p-{tag}"),
        queues: &[
            queue(0, "massive", "kafka"),
            queue(1, "special", "rocketmq"),
            queue(2, "dead", "kafka"),
            queue(3, "failures", "kafka"),
        ],
        types: &[
            ("cash", None),
            ("coin", None),
            ("coupon", None),
            ("flaky", None),
            ("broken", None),
        ],
        spool: &dir.join(format!("spool-{who}")),
    }
    .toml()
}

/// The consumer's config text: group `g-{tag}` on the events topic, the service at
/// `grpc`, limits changed live through the Redis hash `cfg-{tag}`; `pipeline` and
/// `limits` are extra TOML lines of those sections.
pub fn consumer_text(tag: &str, dir: &Path, grpc: &str, pipeline: &str, limits: &str) -> String {
    let s = stack();
    format!(
        r#"
        [source]
        kind = "kafka"
        brokers = "{kafka}"
        group = "g-{tag}"
        topics = ["{ev}"]
        [pipeline]
        commit_interval_ms = 200
        backoff_initial_ms = 20
        backoff_max_ms = 100
        limited_delay_ms = 300
        fused_delay_ms = 300
        {pipeline}
        [service]
        grpc = "{grpc}"
        [delay]
        key_prefix = "delay-{tag}"
        shards = 4
        poll_ms = 50
        lease_ms = 5000
        [limits]
        {limits}
        [fleet]
        key_prefix = "fleet-{tag}"
        [dynamic]
        redis_key = "cfg-{tag}"
        poll_ms = 200
        {sdk}
        "#,
        kafka = s.kafka_brokers,
        ev = events_topic(tag),
        sdk = sdk_section(tag, dir, &format!("consumer-{:04x}", rand::random::<u16>())),
    )
}

pub fn consumer_config(text: &str) -> ConsumerConfig {
    let env = vec![("REWARD_SERVICE_TOKEN".to_string(), CREDENTIAL.to_string())];
    ConsumerConfig::from_toml_str(text, &env).unwrap_or_else(|e| panic!("consumer config: {e}"))
}
