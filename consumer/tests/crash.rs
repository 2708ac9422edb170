//! `kill -9` of the consumer binary with thousands of messages fetched but not
//! settled: after a restart every reward is credited exactly once, none lost.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::*;
use rdkafka::ClientConfig;
use rdkafka::consumer::BaseConsumer;

const USERS: usize = 50;
const PER_USER: i64 = 100;

fn spawn(config: &std::path::Path, log: &std::path::Path) -> tokio::process::Child {
    let log = std::fs::File::create(log).unwrap();
    tokio::process::Command::new(env!("CARGO_BIN_EXE_reward-consumer"))
        .arg("--config")
        .arg(config)
        .env("REWARD_SERVICE_TOKEN", CREDENTIAL)
        .env("RUST_LOG", "warn,reward_consumer=info")
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

async fn total_credited(redis: &fred::prelude::Client, tag: &str) -> i64 {
    let mut n = 0;
    for u in 0..USERS {
        n += credited(redis, tag, &format!("u{u}")).await;
    }
    n
}

/// What the group has committed on the events topic, summed over partitions.
fn committed(tag: &str) -> i64 {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", stack().kafka)
        .set("group.id", format!("g-{tag}"))
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let offsets =
        sdk::readback::committed_offsets(&consumer, &events_topic(tag), Duration::from_secs(10))
            .unwrap();
    assert!(sdk::readback::drop_within(
        consumer,
        Duration::from_secs(30)
    ));
    offsets.values().sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_with_work_in_flight_loses_and_doubles_nothing() {
    let tag = tag("k");
    let dir = dir(&tag);
    create_topics(&tag).await;
    let svc = service(&tag, &dir).await;
    let grpc = format!("http://{}", svc.grpc_addr);
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
    let producer = producer(&tag, &dir).await;
    produce(&producer, &events, &[]).await;
    producer.close(Duration::from_secs(30)).await;

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
    let mut child = spawn(&slow, &dir.join("first.log"));
    let redis = redis().await;
    wait_for(120, "the first run credits 500", || async {
        total_credited(&redis, &tag).await >= 500
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    child.kill().await.unwrap(); // SIGKILL
    let at_kill = total_credited(&redis, &tag).await;
    let committed_at_kill = tokio::task::spawn_blocking({
        let tag = tag.clone();
        move || committed(&tag)
    })
    .await
    .unwrap();
    assert!(
        total - committed_at_kill >= 1000,
        "only {} messages were uncommitted at the kill",
        total - committed_at_kill
    );
    assert!(
        committed_at_kill <= at_kill,
        "committed {committed_at_kill} past the {at_kill} credited"
    );
    assert!(at_kill < total, "everything was credited before the kill");

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
    let end = tokio::task::spawn_blocking({
        let tag = tag.clone();
        move || committed(&tag)
    })
    .await
    .unwrap();
    assert_eq!(end, total, "the clean stop committed everything");
    svc.shutdown().await;
}
