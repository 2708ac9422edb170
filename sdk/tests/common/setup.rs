//! SDKs on the stack: a config with three queues over Kafka and RocketMQ, their
//! topics, and an SDK started on them.

use std::path::Path;

use sdk::Sdk;
use sdk::config::SdkConfig;
use sdk::token::KeyRing;

use super::Stack;

/// Three queues over Kafka (`k`) and RocketMQ (`r`): massive (k first for half the
/// users), special (r first), express (k only first). Topics get `tag` in their names.
pub fn config(
    s: &Stack,
    kafka: &str,
    namesrv: &str,
    tag: &str,
    spool: &Path,
    store_extra: &str,
    extra: &str,
) -> SdkConfig {
    let text = format!(
        r#"
        default_queue = "massive"
        [store]
        redis_url = "{redis}"
        key_prefix = "rt-{tag}"
        # Generous: these tests share 2 cores with the brokers and builds.
        timeout_ms = 10000
        {store_extra}
        [producers.k]
        kind = "kafka"
        brokers = "{kafka}"
        [producers.r]
        kind = "rocketmq"
        namesrv = "{namesrv}"
        group = "sdk-test-{tag}"
        [queues.massive]
        topic = "massive-{tag}"
        primary = "k"
        backup = "r"
        ratio = 50
        [queues.special]
        topic = "special-{tag}"
        primary = "r"
        backup = "k"
        ratio = 100
        [queues.express]
        topic = "express-{tag}"
        primary = "k"
        backup = "r"
        ratio = 100
        [types.cash]
        [types.coupon]
        queue = "special"
        [types.coin]
        queue = "express"
        max_amount = 1000
        [spool]
        dir = "{spool}"
        {extra}
        "#,
        redis = s.redis_url,
        spool = spool.display(),
    );
    SdkConfig::from_toml_str(&text).unwrap_or_else(|e| panic!("test config: {e}"))
}

pub fn topics(tag: &str) -> Vec<String> {
    ["massive", "special", "express"]
        .iter()
        .map(|q| format!("{q}-{tag}"))
        .collect()
}

/// An SDK on the stack's Kafka and RocketMQ with [`config`]'s queues, started with a
/// fresh random key.
pub async fn started(s: &Stack, tag: &str, spool: &Path, store_extra: &str, extra: &str) -> Sdk {
    let cfg = config(
        s,
        &s.kafka_brokers,
        &s.rocketmq_namesrv,
        tag,
        spool,
        store_extra,
        extra,
    );
    Sdk::builder(cfg)
        .key_ring(KeyRing::random(1))
        .start()
        .await
        .unwrap_or_else(|e| panic!("sdk start: {e}"))
}
