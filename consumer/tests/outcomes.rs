//! Every way a message can end, against the real stack and a reward service
//! in-process: credited once, a poison payload dead-lettered with its raw bytes, a
//! permanent failure on the failure topic (written by the service), a reward failing
//! 17 times dead-lettered with retry count 16, a conflicting duplicate on the failure
//! topic, a rate-limited type parked and then credited; the consumer goes on through
//! all of it and commits everything.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_outcome_is_settled_and_the_partition_moves_on() {
    let Setup {
        tag,
        dir,
        svc,
        grpc,
    } = setup("o").await;

    // 300 cash (one user each of 30), 1 poison, 1 broken (permanent), 1 flaky (fails
    // every time) and 40 coin at 20/s (most of them parked at least once).
    let mut events = Vec::new();
    for i in 0..300 {
        events.push(event(&format!("c{i}"), &format!("u{}", i % 30), "cash", 1));
    }
    events.push(event("b1", "ub", "broken", 7));
    events.push(event("f1", "uf", "flaky", 9));
    for i in 0..40 {
        events.push(event(&format!("n{i}"), "un", "coin", 1));
    }
    publish(
        &tag,
        &dir,
        "massive",
        &events,
        &[b"\xff\xfe not protobuf \x00\x01"],
    )
    .await;

    let text = consumer_text(
        &tag,
        &dir,
        &grpc,
        "batch = 64",
        "[limits.types.cash]\nrate = 100000\npriority = 9\n[limits.types.coin]\nrate = 20\nburst = 1\n",
    );
    let consumer = reward_consumer::start(&consumer_config(&text))
        .await
        .unwrap();
    let total = events.len() as u64 + 2;

    let redis = redis().await;
    let ledger = ledger(&tag).await;
    wait_for(180, "300 cash and 40 coin credited", || async {
        let mut cash = 0;
        for u in 0..30 {
            cash += credited(&redis, &tag, &format!("u{u}")).await;
        }
        cash == 300 && ledger.balance("un", "coin").await.unwrap() == 40
    })
    .await;
    // Then a second use of a credited trade number with another amount: a conflict.
    publish(
        &tag,
        &dir,
        "massive",
        &[event("c0", "u0", "cash", 999)],
        &[],
    )
    .await;
    wait_for(120, "the flaky reward dead-lettered", || async {
        let s = consumer.stats();
        s.dead_lettered >= 2 && s.failure_topic >= 1
    })
    .await;

    let stats = consumer.stats();
    let report = consumer.shutdown().await;
    assert_eq!(report.unsettled, 0, "{report:?}");
    assert_eq!(report.sdk_left, 0, "{report:?}");
    assert!(report.closed, "consumer close hung");

    // Exactly once: balances equal the distinct credited trade numbers.
    for u in 0..30 {
        let user = format!("u{u}");
        assert_eq!(ledger.balance(&user, "cash").await.unwrap(), 10, "{user}");
        assert_eq!(credited(&redis, &tag, &user).await, 10, "{user}");
    }
    assert_eq!(ledger.balance("ub", "broken").await.unwrap(), 0);
    assert!(
        report.stats.consumed >= total,
        "consumed {} of {total}",
        report.stats.consumed
    );
    assert!(
        stats.requeued_limited > 0,
        "coin was never over its rate: {stats:?}"
    );
    assert_eq!(report.stats.decode_errors, 1);
    assert_eq!(report.stats.failed_permanent, 1, "{:?}", report.stats);
    assert_eq!(report.stats.last_resort, 0);
    // 16 retries of the flaky reward, none counted for the limited coins.
    assert_eq!(report.stats.requeued_failed, 16, "{:?}", report.stats);

    let dead = dead_letters(&dead_topic(&tag), 2).await;
    assert_eq!(dead.len(), 2, "{dead:?}");
    let poison = dead.iter().find(|d| d.reason == "decode").unwrap();
    assert!(poison.event.is_none());
    assert_eq!(poison.raw, b"\xff\xfe not protobuf \x00\x01");
    assert_eq!(poison.source_topic, events_topic(&tag));
    let flaky = dead.iter().find(|d| d.reason == "max_retries").unwrap();
    let ev = flaky.event.as_ref().unwrap();
    assert_eq!((ev.trade_no.as_str(), ev.retry_count), ("f1", 16));
    assert_eq!(flaky.error_code, "UNAVAILABLE");

    let failures = dead_letters(&failures_topic(&tag), 2).await;
    let reasons: Vec<(&str, &str)> = failures
        .iter()
        .map(|d| {
            (
                d.event.as_ref().map_or("", |e| e.trade_no.as_str()),
                d.reason.as_str(),
            )
        })
        .collect();
    assert_eq!(failures.len(), 2, "{reasons:?}");
    assert!(reasons.contains(&("b1", "permanent")), "{reasons:?}");
    assert!(reasons.contains(&("c0", "conflict")), "{reasons:?}");

    // The SDK packed the bulk into compound records and sent the lone conflicting
    // event as an old single-event record; the consumer read both kinds.
    let topic = events_topic(&tag);
    let kafka = stack().kafka_brokers;
    let rb = tokio::task::spawn_blocking(move || {
        reward_testkit::readback::read_kafka(&kafka, &topic, usize::MAX, Duration::from_secs(20))
    })
    .await
    .unwrap()
    .unwrap();
    assert!(
        rb.packs > 0,
        "no compound record on the topic: {} records",
        rb.records
    );
    assert!(rb.records > rb.packs, "no single-event record on the topic");
    assert!(
        rb.messages > rb.records,
        "{} events in {} records",
        rb.messages,
        rb.records
    );
    assert!((0..300).all(|i| rb.seen.contains_key(&format!("c{i}"))));

    // Every message's offset was committed: a new member of the group reads nothing.
    let again = consumer_text(&tag, &dir, &grpc, "", "");
    let second = reward_consumer::start(&consumer_config(&again))
        .await
        .unwrap();
    wait_for(120, "the new member holding both partitions", || async {
        second.assigned() == 2
    })
    .await;
    // Time is the subject: nothing is read within 8 s of holding the partitions.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let r2 = second.shutdown().await;
    assert_eq!(
        r2.stats.consumed, 0,
        "re-read after a full commit: {:?}",
        r2.stats
    );
    svc.shutdown().await;
}
