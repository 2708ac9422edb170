//! Zero trust on the topic, against the real stack: a record a foreign Kafka client
//! writes into the consumer's topic (no proof), or an event whose proof was made for
//! another user, amount, activity or trade number, or under a key the service does
//! not hold, is never credited: each is dead-lettered `unproven` with its error code.
//! An SDK's signed event is credited once. An expired event is refused `expired`, one
//! dated an hour and more ahead is dead-lettered `invalid`, not parked; a malformed
//! record near the size limit is dead-lettered with its raw bytes cut to 512 KiB. With
//! a rollout window open, an unsigned event is credited, a forged one still is not.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use prost::Message as _;
use proto::v1::RewardEvent;
use rdkafka::producer::{FutureProducer, FutureRecord};

/// Writes events into `topic` with a plain Kafka client, exactly as given: what a
/// stranger with write access to the topic can do.
async fn foreign(topic: &str, events: &[RewardEvent]) {
    let records: Vec<(String, Vec<u8>)> = events
        .iter()
        .map(|e| (e.trade_no.clone(), e.encode_to_vec()))
        .collect();
    foreign_raw(topic, &records).await;
}

/// Writes records (key, payload) into `topic` with a plain Kafka client.
async fn foreign_raw(topic: &str, records: &[(String, Vec<u8>)]) {
    let mut cfg = rdkafka::ClientConfig::new();
    cfg.set("bootstrap.servers", stack().kafka_brokers);
    let producer: FutureProducer = cfg.create().unwrap();
    for (key, payload) in records {
        producer
            .send(
                FutureRecord::to(topic).key(key).payload(payload),
                Duration::from_secs(30),
            )
            .await
            .unwrap();
    }
}

/// The consumer's config for a test, with batches of 16 and default limits.
fn consumer(
    tag: &str,
    dir: &std::path::Path,
    grpc: &str,
) -> reward_consumer::config::ConsumerConfig {
    consumer_config(&consumer_text(
        tag,
        dir,
        grpc,
        "batch = 16",
        "[limits.types.cash]\nrate = 100000\n",
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_events_a_key_holder_issued_are_credited() {
    let Setup {
        tag,
        dir,
        svc,
        grpc,
    } = setup("zt").await;
    let proofs = svc.service().sdk().codec().proofs();
    let now = reward_runtime::clock::now_ms();
    let sign = |mut e: RewardEvent| {
        e.expires_at_ms = now + 3_600_000;
        proofs.sign(&mut e);
        e
    };
    // The SDK's own event, signed: credited once.
    let genuine = event("zt-genuine", "alice", "cash", 5);
    publish(&tag, &dir, "massive", std::slice::from_ref(&genuine), &[]).await;
    // A stranger's records, straight into the topic with another Kafka client.
    let signed_genuine = sign(genuine.clone());
    let unsigned = event("zt-forger", "forger", "cash", 777);
    let other_user = RewardEvent {
        user: event("x", "forger", "cash", 1).user,
        ..signed_genuine.clone()
    };
    let other_amount = RewardEvent {
        amount: 5_000,
        ..signed_genuine.clone()
    };
    let other_activity = RewardEvent {
        activity_id: "other".into(),
        trade_no: "zt-activity".into(),
        ..signed_genuine.clone()
    };
    let other_trade = RewardEvent {
        trade_no: "zt-copied".into(),
        ..signed_genuine.clone()
    };
    let mut unknown_key = event("zt-unknown-key", "forger", "cash", 9);
    sdk::token::proof::EventProofs::new(&sdk::token::KeyRing::random(4)).sign(&mut unknown_key);
    let mut stranger_key = event("zt-stranger", "forger", "cash", 9);
    sdk::token::proof::EventProofs::new(&sdk::token::KeyRing::random(1)).sign(&mut stranger_key);
    // Signed, but past its expiry; signed, but a day ahead.
    let mut expired = event("zt-expired", "bob", "cash", 3);
    expired.expires_at_ms = now - 1;
    proofs.sign(&mut expired);
    let ahead = RewardEvent {
        not_before_ms: now + 24 * 3_600_000,
        ..sign(event("zt-ahead", "bob", "cash", 4))
    };
    let refused = [
        (unsigned.clone(), "PROOF_MISSING"),
        (other_user, "PROOF_FORGED"),
        (other_amount, "PROOF_FORGED"),
        (other_activity, "PROOF_FORGED"),
        (other_trade, "PROOF_FORGED"),
        (unknown_key, "PROOF_UNKNOWN_KEY"),
        (stranger_key, "PROOF_FORGED"),
    ];
    // Signed, dated 5 min 5 s ahead of this clock (an SDK host whose clock runs
    // ahead): it waits in the delay queue until well within the service's 5-minute
    // skew (~20 s), then is credited. Dated two hours ahead, or not dated: invalid.
    let skewed = sign(RewardEvent {
        created_at_ms: now + 305_000,
        ..event("zt-skewed", "carol", "cash", 6)
    });
    let created_far = sign(RewardEvent {
        created_at_ms: now + 2 * 3_600_000,
        ..event("zt-created-ahead", "bob", "cash", 2)
    });
    let created_unset = sign(RewardEvent {
        created_at_ms: 0,
        ..event("zt-created-unset", "bob", "cash", 2)
    });
    let mut strangers: Vec<RewardEvent> = refused.iter().map(|(e, _)| e.clone()).collect();
    strangers.push(expired);
    strangers.push(ahead);
    strangers.push(skewed);
    strangers.push(created_far);
    strangers.push(created_unset);
    // A replay of the genuine record itself moves nothing either (a duplicate).
    strangers.push(signed_genuine);
    foreign(&events_topic(&tag), &strangers).await;
    // A record of 600 KiB that starts like a compound record and is not one: its dead
    // letter keeps the first 512 KiB, so the letter still fits where it came from.
    let mut junk = vec![0x87, b'R', b'P', 1];
    junk.resize(600 << 10, 0xee);
    foreign_raw(&events_topic(&tag), &[("junk".into(), junk.clone())]).await;

    let consumer = reward_consumer::start(&consumer(&tag, &dir, &grpc))
        .await
        .unwrap();
    let redis = redis().await;
    wait_for(180, "every record settled", || async {
        let s = consumer.stats();
        s.granted + s.duplicates >= 3 && s.dead_lettered + s.failure_topic >= 12
    })
    .await;
    let report = consumer.shutdown().await;
    assert_eq!(report.unsettled, 0, "{report:?}");
    let ledger = ledger(&tag).await;
    assert_eq!(ledger.balance("alice", "cash").await.unwrap(), 5);
    assert_eq!(credited(&redis, &tag, "alice").await, 1, "credited once");
    assert_eq!(ledger.balance("forger", "cash").await.unwrap(), 0);
    assert_eq!(ledger.balance("bob", "cash").await.unwrap(), 0);
    assert_eq!(
        ledger.balance("carol", "cash").await.unwrap(),
        6,
        "the skewed event"
    );
    assert_eq!(
        svc.service()
            .granter()
            .claims()
            .spent("cny/rain")
            .await
            .unwrap(),
        5 + 6,
        "no budget taken by anything refused"
    );

    let dead = dead_letters(&dead_topic(&tag), refused.len() + 1).await;
    let (decode, dead): (Vec<_>, Vec<_>) = dead.into_iter().partition(|d| d.reason == "decode");
    assert_eq!(decode.len(), 1, "{decode:?}");
    assert_eq!(decode[0].raw, junk[..512 << 10], "the first 512 KiB");
    assert!(
        decode[0]
            .error_code
            .contains("cut to its first 524288 of 614400 bytes"),
        "{}",
        decode[0].error_code
    );
    let mut got: Vec<(String, String, String)> = dead
        .iter()
        .map(|d| {
            let e = d.event.as_ref().unwrap();
            (e.trade_no.clone(), d.reason.clone(), d.error_code.clone())
        })
        .collect();
    got.sort();
    let mut want: Vec<(String, String, String)> = refused
        .iter()
        .map(|(e, code)| (e.trade_no.clone(), "unproven".to_string(), code.to_string()))
        .collect();
    want.sort();
    assert_eq!(got, want);
    // The raw record is kept for whoever looks into where it came from.
    let forger = dead
        .iter()
        .find(|d| d.event.as_ref().unwrap().trade_no == "zt-forger")
        .unwrap();
    assert_eq!(forger.raw, unsigned.encode_to_vec());
    let failures = dead_letters(&failures_topic(&tag), 4).await;
    let mut got: Vec<(String, String)> = failures
        .iter()
        .map(|d| (d.event.as_ref().unwrap().trade_no.clone(), d.reason.clone()))
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            ("zt-ahead".to_string(), "invalid".to_string()),
            ("zt-created-ahead".to_string(), "invalid".to_string()),
            ("zt-created-unset".to_string(), "invalid".to_string()),
            ("zt-expired".to_string(), "expired".to_string())
        ]
    );
    svc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_rollout_window_credits_unsigned_events_but_never_forged_ones() {
    let until = reward_runtime::clock::format_utc(reward_runtime::clock::now_ms() + 3_600_000);
    let Setup {
        tag,
        dir,
        svc,
        grpc,
    } = setup_with(
        "zw",
        &format!("[events]\nunproven = \"accept\"\naccept_unproven_until = \"{until}\"\n"),
    )
    .await;
    let old_sdk = event("zw-old", "carol", "cash", 6);
    let mut forged = event("zw-forged", "carol", "cash", 600);
    sdk::token::proof::EventProofs::new(&sdk::token::KeyRing::random(1)).sign(&mut forged);
    foreign(&events_topic(&tag), &[old_sdk, forged]).await;
    let consumer = reward_consumer::start(&consumer(&tag, &dir, &grpc))
        .await
        .unwrap();
    wait_for(120, "both settled", || async {
        let s = consumer.stats();
        s.granted >= 1 && s.dead_lettered >= 1
    })
    .await;
    let report = consumer.shutdown().await;
    assert_eq!(report.unsettled, 0, "{report:?}");
    assert_eq!(
        ledger(&tag).await.balance("carol", "cash").await.unwrap(),
        6
    );
    let dead = dead_letters(&dead_topic(&tag), 1).await;
    assert_eq!(dead.len(), 1);
    assert_eq!(
        (dead[0].reason.as_str(), dead[0].error_code.as_str()),
        ("unproven", "PROOF_FORGED")
    );
    svc.shutdown().await;
}
