//! A reward service's config on the stack (free ports, fresh key prefixes, topics
//! named by a tag), its credentials, and its topics on both brokers.

use reward_stack::env::{QueueSpec, SdkSection};

use super::{CREDENTIAL, WALLET_CREDENTIAL};

/// The stack's addresses (Redis, Kafka, RocketMQ name server); panics (never skips)
/// when one is down.
pub fn stack() -> (String, String, String) {
    let s = reward_testkit::stack();
    (s.redis_url, s.kafka_brokers, s.rocketmq_namesrv)
}

/// A service config on free ports, under fresh key prefixes and topics named with
/// `tag`: queues `massive` (types cash, coin) and `failures`, both Kafka first with
/// RocketMQ as backup; cash and coin credited by the ledger, `gem` routed but with no
/// downstream; budget `cny/rain` = `budget`. The key ring goes to a file in `dir`.
pub fn service_config(
    tag: &str,
    dir: &std::path::Path,
    budget: i64,
    extra: &str,
) -> reward_service::config::ServiceConfig {
    let text = service_toml(tag, dir, budget, extra);
    reward_service::config::ServiceConfig::from_toml_str(&text, &service_env())
        .unwrap_or_else(|e| panic!("test config: {e}"))
}

/// The test credentials, as a service's environment.
pub fn service_env() -> Vec<(String, String)> {
    vec![
        ("REWARD_SERVICE_TOKEN".to_string(), CREDENTIAL.to_string()),
        (
            "REWARD_WALLET_TOKEN".to_string(),
            WALLET_CREDENTIAL.to_string(),
        ),
        (
            "REWARD_ADMIN_TOKEN".to_string(),
            reward_testkit::ADMIN_CREDENTIAL.to_string(),
        ),
    ]
}

/// The text of [`service_config`] (its key ring written to `dir/keys`).
pub fn service_toml(tag: &str, dir: &std::path::Path, budget: i64, extra: &str) -> String {
    let stack = reward_testkit::stack();
    std::fs::create_dir_all(dir).unwrap();
    let keys = dir.join("keys");
    std::fs::write(&keys, sdk::token::KeyRing::random(2).to_text().as_bytes()).unwrap();
    let text = format!(
        r#"
        [server]
        grpc_addr = "127.0.0.1:0"
        http_addr = "127.0.0.1:0"
        max_body_bytes = 16384
        max_tokens_per_request = 10
        max_batch = 100
        shutdown_grace_ms = 5000
        [claims]
        key_prefix = "svc-{tag}"
        shards = 4
        lease_ms = 15000
        retention_secs = 3600
        [budgets]
        "cny/rain" = {budget}
        [downstreams.cash]
        kind = "ledger"
        [downstreams.coin]
        kind = "ledger"
        [ledger]
        key_prefix = "ledger-{tag}"
        [failures]
        archive = "{archive}"
        queue = "failures"
        {extra}
        {sdk}
        "#,
        archive = dir.join("failures.jsonl").display(),
        sdk = SdkSection {
            env: &stack,
            keys_file: &keys,
            ttl_secs: 3600,
            store_prefix: &format!("tok-{tag}"),
            store_timeout_ms: Some(10_000),
            rocketmq_group: &format!("svc-test-{tag}"),
            queues: &[
                QueueSpec {
                    name: "massive",
                    topic: &format!("massive-{tag}"),
                    primary: "kafka",
                    backup: "rocketmq",
                    ratio: 100,
                },
                QueueSpec {
                    name: "failures",
                    topic: &format!("failures-{tag}"),
                    primary: "kafka",
                    backup: "rocketmq",
                    ratio: 100,
                },
            ],
            types: &[("cash", None), ("coin", None), ("gem", None)],
            spool: &dir.join("spool"),
        }
        .toml(),
    );
    text
}

/// Creates the two topics of `service_config(tag, ..)` on both brokers.
pub async fn create_topics(tag: &str) {
    let (_, kafka, namesrv) = stack();
    let t = [format!("massive-{tag}"), format!("failures-{tag}")];
    let t: Vec<&str> = t.iter().map(String::as_str).collect();
    reward_stack::topics::create_kafka_topics(&kafka, &t, 2)
        .await
        .unwrap();
    reward_stack::topics::create_rocketmq_topics(&namesrv, &t)
        .await
        .unwrap();
}
