//! Shared set-up for the SDK's tests against the local stack (`ops/stack up`).
#![allow(dead_code)]

use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sdk::Sdk;
use sdk::config::SdkConfig;
use sdk::token::KeyRing;

pub struct Stack {
    pub redis_url: String,
    pub kafka: String,
    pub namesrv: String,
}

fn reachable(what: &str, addr: &str) {
    let ok = addr
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .is_some_and(|a| TcpStream::connect_timeout(&a, Duration::from_secs(2)).is_ok());
    assert!(
        ok,
        "{what} at {addr} is not answering; start the local stack with `ops/stack up` \
         (and `eval \"$(ops/stack env)\"` for non-default ports)"
    );
}

/// The stack's addresses; panics (never skips) if a server is down.
pub fn stack() -> Stack {
    let var = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_string());
    let s = Stack {
        redis_url: var("REDIS_URL", "redis://127.0.0.1:16379"),
        kafka: var("KAFKA_BROKERS", "127.0.0.1:19092"),
        namesrv: var("ROCKETMQ_NAMESRV", "127.0.0.1:9876"),
    };
    reachable("Redis", s.redis_url.trim_start_matches("redis://"));
    reachable(
        "Kafka broker (tansu)",
        s.kafka.split(',').next().unwrap_or_default(),
    );
    reachable("RocketMQ name server", &s.namesrv);
    s
}

pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{:08x}", rand::random::<u32>())
}

pub fn temp_dir(prefix: &str) -> PathBuf {
    let d = std::env::temp_dir().join(unique(prefix));
    let _ = std::fs::remove_dir_all(&d);
    d
}

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
        {kafka_settings}
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
        // The librdkafka mock cluster gets the stack's settings too, so both Kafka
        // paths run one configuration.
        kafka_settings = reward_tools::stack::stack_kafka_settings_toml(),
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
    let cfg = config(s, &s.kafka, &s.namesrv, tag, spool, store_extra, extra);
    Sdk::builder(cfg)
        .key_ring(KeyRing::random(1))
        .start()
        .await
        .unwrap_or_else(|e| panic!("sdk start: {e}"))
}
