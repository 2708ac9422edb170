//! What the test reads back: the ledger's credits (through the ledger or Redis), the
//! dead letters on a topic.

use std::collections::HashMap;
use std::time::Duration;

use fred::prelude::*;
use prost::Message as _;
use proto::v1::DeadLetter;
use reward_service::downstream::Ledger;

use super::stack;

pub async fn ledger(tag: &str) -> Ledger {
    Ledger::connect(
        &stack().redis_url,
        &format!("ledger-{tag}"),
        &HashMap::new(),
    )
    .await
    .unwrap()
}

pub async fn redis() -> Client {
    let c = Builder::from_config(Config::from_url(&stack().redis_url).unwrap())
        .build()
        .unwrap();
    c.init().await.unwrap();
    c
}

/// How many distinct trade numbers the ledger credited to `user`.
pub async fn credited(redis: &Client, tag: &str, user: &str) -> i64 {
    redis
        .hlen(format!("ledger-{tag}:ledger:{{{user}}}:credited"))
        .await
        .unwrap()
}

/// The dead letters on a topic, read back from the start.
pub async fn dead_letters(topic: &str, want: usize) -> Vec<DeadLetter> {
    let kafka = stack().kafka_brokers;
    let topic = topic.to_string();
    let rb = tokio::task::spawn_blocking(move || {
        reward_testkit::readback::read_kafka(&kafka, &topic, usize::MAX, Duration::from_secs(20))
    })
    .await
    .unwrap()
    .unwrap();
    let letters: Vec<DeadLetter> = rb
        .payloads
        .iter()
        .map(|p| DeadLetter::decode(p.as_slice()).unwrap())
        .collect();
    assert!(
        letters.len() >= want,
        "{} of {want} dead letters",
        letters.len()
    );
    letters
}
