//! The same pipeline behind the RocketMQ push consumer: every event on a RocketMQ
//! topic credited exactly once, a poison message dead-lettered, a clean stop.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rocketmq_source_credits_everything_once() {
    let Setup {
        tag,
        dir,
        svc,
        grpc,
    } = setup("r").await;
    const USERS: i64 = 20;
    const PER_USER: i64 = 50;
    let mut events = Vec::new();
    for i in 0..USERS * PER_USER {
        events.push(event(
            &format!("r{i}"),
            &format!("u{}", i % USERS),
            "coin",
            1,
        ));
    }
    publish(
        &tag,
        &dir,
        "special",
        &events,
        &[b"\x08\x96\x01 not an event \xff"],
    )
    .await;

    let s = stack();
    let text = consumer_text(
        &tag,
        &dir,
        &grpc,
        "",
        "[limits.types.coin]\nrate = 100000\n",
    );
    // The same config with the RocketMQ source instead of the Kafka one.
    let start = text.find("[source]").unwrap();
    let end = text.find("[pipeline]").unwrap();
    let text = format!(
        "{}[source]\nkind = \"rocketmq\"\nnamesrv = \"{}\"\ngroup = \"g-{tag}\"\ntopics = [\"{}\"]\n{}",
        &text[..start],
        s.rocketmq_namesrv,
        special_topic(&tag),
        &text[end..]
    );
    let consumer = reward_consumer::start(&consumer_config(&text))
        .await
        .unwrap();
    let redis = redis().await;
    wait_for(240, "every coin credited", || async {
        let mut n = 0;
        for u in 0..USERS {
            n += credited(&redis, &tag, &format!("u{u}")).await;
        }
        n == USERS * PER_USER
    })
    .await;
    wait_for(60, "the poison message dead-lettered", || async {
        consumer.stats().dead_lettered == 1
    })
    .await;
    // Lag: every queue it read from is caught up, in records (from the max offset
    // the broker sends with each pull) and in time.
    wait_for(30, "the lag figures settle at 0", || async {
        let lag = consumer.lag();
        let ours: Vec<_> = lag
            .iter()
            .filter(|(p, _)| *p.0 == *special_topic(&tag))
            .collect();
        !ours.is_empty()
            && ours
                .iter()
                .all(|(_, f)| f.records == Some(0) && f.seconds == 0.0)
    })
    .await;
    assert!(
        consumer.assigned() >= 1,
        "the queues it read from count as held"
    );
    let report = consumer.shutdown().await;
    assert_eq!(report.unsettled, 0, "{report:?}");
    assert_eq!(report.sdk_left, 0, "{report:?}");
    let ledger = ledger(&tag).await;
    for u in 0..USERS {
        let user = format!("u{u}");
        assert_eq!(
            ledger.balance(&user, "coin").await.unwrap(),
            PER_USER,
            "{user}"
        );
    }
    assert_eq!(report.stats.decode_errors, 1);
    assert_eq!(report.stats.last_resort, 0);
    let dead = dead_letters(&dead_topic(&tag), 1).await;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].reason, "decode");
    assert_eq!(dead[0].source_topic, special_topic(&tag));
    assert_eq!(dead[0].raw, b"\x08\x96\x01 not an event \xff");
    svc.shutdown().await;
}
