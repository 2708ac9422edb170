//! `kill -9` of the consumer binary with thousands of messages fetched but not
//! settled: after a restart every reward is credited exactly once, none lost.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

const USERS: usize = 50;
const PER_USER: i64 = 100;

fn spawn(config: &std::path::Path, log: &std::path::Path) -> tokio::process::Child {
    let log = std::fs::File::create(log).unwrap();
    tokio::process::Command::new(env!("CARGO_BIN_EXE_reward-consumer"))
        .arg("--config")
        .arg(config)
        .args(["--progress-secs", "1"])
        .env("REWARD_SERVICE_TOKEN", CREDENTIAL)
        .env("RUST_LOG", "warn,reward_consumer=info")
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// Events fetched and not yet granted, by the last progress line of the log:
/// `consumed` counts events (a compound record's one each), `granted` the credits.
/// (Its `in_flight` counts broker records, and the SDK packs up to 100 events in one.)
fn in_flight(log: &std::path::Path) -> u64 {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let Some(line) = text.lines().rfind(|l| l.contains(" consumed=")) else {
        return 0;
    };
    let field = |name: &str| -> u64 {
        line.split(&format!(" {name}="))
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    field("consumed").saturating_sub(field("granted"))
}

async fn total_credited(redis: &fred::prelude::Client, tag: &str) -> i64 {
    let mut n = 0;
    for u in 0..USERS {
        n += credited(redis, tag, &format!("u{u}")).await;
    }
    n
}

/// (committed, high watermark) of the group on the events topic, summed over partitions.
fn committed(tag: &str) -> (i64, i64) {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", stack().kafka_brokers)
        .set("group.id", format!("g-{tag}"))
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    // Ask for the topic's two partitions by name (this member has no assignment).
    let mut ask = TopicPartitionList::new();
    for p in 0..2 {
        ask.add_partition(&events_topic(tag), p);
    }
    let list = consumer
        .committed_offsets(ask, Duration::from_secs(10))
        .unwrap();
    let sum = list
        .elements()
        .iter()
        .map(|e| match e.offset() {
            Offset::Offset(o) => o,
            _ => 0,
        })
        .sum();
    // No list filled by librdkafka may outlive the consumer (docs/stack.md).
    drop(list);
    let mut high = 0;
    for p in 0..2 {
        high += consumer
            .fetch_watermarks(&events_topic(tag), p, Duration::from_secs(10))
            .unwrap()
            .1;
    }
    assert!(reward_runtime::teardown::drop_within(
        consumer,
        Duration::from_secs(30)
    ));
    (sum, high)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_with_work_in_flight_loses_and_doubles_nothing() {
    let Setup {
        tag,
        dir,
        svc,
        grpc,
    } = setup("k").await;
    let total = USERS as i64 * PER_USER;
    let mut events = Vec::new();
    for i in 0..total {
        events.push(event(
            &format!("t{i}"),
            &format!("u{}", i % USERS as i64),
            "cash",
            1,
        ));
    }
    publish(&tag, &dir, "massive", &events, &[]).await;

    // First run: the global limit (300/s) keeps most fetched messages waiting.
    let slow = dir.join("slow.toml");
    std::fs::write(
        &slow,
        consumer_text(
            &tag,
            &dir,
            &grpc,
            "",
            "global = 300\n[limits.types.cash]\nrate = 100000\n",
        ),
    )
    .unwrap();
    let first_log = dir.join("first.log");
    let mut child = spawn(&slow, &first_log);
    let redis = redis().await;
    // Kill once the consumer reports at least 1000 events fetched and not granted.
    wait_for(120, "1000 events in flight", || async {
        in_flight(&first_log) >= 1000
    })
    .await;
    child.kill().await.unwrap(); // SIGKILL
    let at_kill = total_credited(&redis, &tag).await;
    let (committed_at_kill, high) = tokio::task::spawn_blocking({
        let tag = tag.clone();
        move || committed(&tag)
    })
    .await
    .unwrap();
    assert!(at_kill < total, "everything was credited before the kill");
    assert!(
        committed_at_kill < high,
        "everything was committed before the kill ({committed_at_kill} of {high})"
    );

    // Second run, no global limit: everything uncommitted is re-read and credited.
    let open = dir.join("open.toml");
    std::fs::write(
        &open,
        consumer_text(
            &tag,
            &dir,
            &grpc,
            "",
            "[limits.types.cash]\nrate = 100000\n",
        ),
    )
    .unwrap();
    let mut child = spawn(&open, &dir.join("second.log"));
    wait_for(180, "every reward credited after the restart", || async {
        total_credited(&redis, &tag).await == total
    })
    .await;
    let ledger = ledger(&tag).await;
    for u in 0..USERS {
        let user = format!("u{u}");
        assert_eq!(
            ledger.balance(&user, "cash").await.unwrap(),
            PER_USER,
            "{user}"
        );
        assert_eq!(credited(&redis, &tag, &user).await, PER_USER, "{user}");
    }
    // A clean stop: SIGTERM, exit 0, everything committed.
    let pid = child.id().unwrap();
    std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .expect("consumer did not stop on SIGTERM")
        .unwrap();
    assert!(
        status.success(),
        "exit {status}: {}",
        std::fs::read_to_string(dir.join("second.log")).unwrap_or_default()
    );
    let (end, high) = tokio::task::spawn_blocking({
        let tag = tag.clone();
        move || committed(&tag)
    })
    .await
    .unwrap();
    assert_eq!(
        end,
        high,
        "the clean stop committed everything: {}",
        std::fs::read_to_string(dir.join("second.log")).unwrap_or_default()
    );
    svc.shutdown().await;
}
