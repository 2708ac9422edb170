//! A test's names (its tag, directory and topics) and its topics on the brokers.

use std::path::PathBuf;

use super::stack;

pub fn tag(prefix: &str) -> String {
    reward_testkit::unique(prefix)
}

pub fn dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("consumer-{tag}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

pub fn events_topic(tag: &str) -> String {
    format!("ev-{tag}")
}
pub fn dead_topic(tag: &str) -> String {
    format!("dead-{tag}")
}
pub fn failures_topic(tag: &str) -> String {
    format!("fail-{tag}")
}
/// The `special` queue's topic, on RocketMQ.
pub fn special_topic(tag: &str) -> String {
    format!("sp-{tag}")
}

pub async fn create_topics(tag: &str) {
    let s = stack();
    let t = [events_topic(tag), dead_topic(tag), failures_topic(tag)];
    let t: Vec<&str> = t.iter().map(String::as_str).collect();
    reward_stack::topics::create_kafka_topics(&s.kafka_brokers, &t, 2)
        .await
        .unwrap();
    reward_stack::topics::create_rocketmq_topics(&s.rocketmq_namesrv, &[&special_topic(tag)])
        .await
        .unwrap();
}
