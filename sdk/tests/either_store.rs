//! With `store.answer_from_queue`, `send_reward` answers once either store holds the
//! reward: a Redis that hangs
//! (SIGSTOP, a private `redis-server`) does not refuse users while a broker
//! acknowledges their events, and their tokens land when Redis returns; with the
//! brokers down too, the host's spool holds them. While Redis answers, the per-user
//! cap still refuses. Needs the local stack's brokers (`ops/stack up`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{stack, started, temp_dir, topics, unique};
use reward_stack::topics::{create_kafka_topics, create_rocketmq_topics};
use reward_testkit::private_redis::PrivateRedis;
use sdk::config::SdkConfig;
use sdk::request::{RedEnvelopeRain, User};
use sdk::store::TokenStore;
use sdk::token::KeyRing;
use sdk::{HeldBy, IssuedToken, Sdk, SendError, Stored};

/// Sends one reward to each of `users` users at once; every answer.
async fn send_each(sdk: &Sdk, activity: &str, users: u32) -> Vec<Result<IssuedToken, SendError>> {
    let rain = RedEnvelopeRain::new(activity, "cash");
    let calls: Vec<_> = (0..users)
        .map(|u| {
            let (sdk, req) = (sdk.clone(), rain.grab(&User::new(format!("u{u}")), 1, 1));
            tokio::spawn(async move { sdk.send_reward(req).await })
        })
        .collect();
    let mut answers = Vec::new();
    for c in calls {
        answers.push(c.await.unwrap());
    }
    answers
}

/// Waits until the store holds a token for each of `users` users in `activity`.
async fn tokens_land(store: &TokenStore, activity: &str, users: u32) {
    reward_testkit::eventually(
        Duration::from_secs(60),
        "every token written once Redis answers again",
        async || {
            let mut missing = 0;
            for u in 0..users {
                if store
                    .list(&format!("u{u}"), activity)
                    .await
                    .map_err(|e| e.to_string())?
                    .is_empty()
                {
                    missing += 1;
                }
            }
            if missing == 0 {
                Ok(())
            } else {
                Err(format!("{missing} of {users} tokens missing"))
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_redis_answers_from_the_queue_and_the_tokens_land_when_it_returns() {
    let redis = PrivateRedis::start();
    let mut s = stack();
    s.redis_url = redis.url.clone();
    let tag = unique("either");
    let t = topics(&tag);
    let t: Vec<&str> = t.iter().map(String::as_str).collect();
    create_kafka_topics(&s.kafka_brokers, &t, 3).await.unwrap();
    create_rocketmq_topics(&s.rocketmq_namesrv, &t)
        .await
        .unwrap();
    let spool = temp_dir("spool-either");
    // A generous call budget: the brokers share 2 cores with other tests; what is
    // proven here is which store answers, not how fast. A token write has 5 s to
    // answer alone (`queue_after_ms`), so while Redis answers it is the store that
    // holds the reward and the cap that refuses, however busy the machine.
    let capped = started(
        &s,
        &tag,
        &spool,
        "write_wait_ms = 30000\nqueue_after_ms = 5000\nmax_tokens_per_user = 2\nanswer_from_queue = true",
        "",
    )
    .await;
    // The default head start (20 ms) for the hang, so it lasts about as long as a
    // broker takes to answer, far below a round trip's 10 s timeout.
    let spool_hung = temp_dir("spool-either-hung");
    let sdk = started(
        &s,
        &tag,
        &spool_hung,
        "write_wait_ms = 30000\nanswer_from_queue = true",
        "",
    )
    .await;

    // Redis answers: the store holds the reward, and the cap refuses the third.
    let rain = RedEnvelopeRain::new("capped", "cash");
    let user = User::new("capped-user");
    for round in 1..=2 {
        let t = capped
            .send_reward(rain.grab(&user, round, 1))
            .await
            .unwrap();
        assert_eq!((t.held_by, t.stored), (HeldBy::Store, Stored::Yes));
    }
    let over = capped.send_reward(rain.grab(&user, 3, 1)).await;
    assert!(
        matches!(over, Err(SendError::TooManyTokens { cap: 2 })),
        "{over:?}"
    );
    let report = capped.close(Duration::from_secs(30)).await;
    assert_eq!((report.left, report.stats.delivered), (0, 2), "{report:?}");

    // Redis hangs: every call is answered from the queue, none refused.
    redis.signal("-STOP");
    let answers = send_each(&sdk, "hung", 40).await;
    let mut trades = HashSet::new();
    for a in &answers {
        let t = a
            .as_ref()
            .unwrap_or_else(|e| panic!("refused while a broker answered: {e}"));
        assert_eq!(
            (t.held_by, t.stored),
            (HeldBy::Queue, Stored::Retrying),
            "{t:?}"
        );
        trades.insert(t.trade_no.clone());
    }
    assert_eq!(trades.len(), 40);

    // Redis returns: the writes go on in the background and land.
    redis.signal("-CONT");
    let store = TokenStore::connect(sdk_store_config(&s, &tag))
        .await
        .unwrap();
    tokens_land(&store, "hung", 40).await;
    // Each write was in flight when the queue answered its call, and finished on its
    // own once Redis answered: none was sent again.
    assert_eq!(sdk.store().stats().retried.load(Ordering::Relaxed), 0);
    let report = sdk.close(Duration::from_secs(30)).await;
    assert_eq!(report.left, 0, "{report:?}");
    assert_eq!(
        report.stats.delivered, 40,
        "every accepted event delivered once: {report:?}"
    );
    assert_eq!(sdk.token_write_failures(), 0);
    std::fs::remove_dir_all(&spool).ok();
    std::fs::remove_dir_all(&spool_hung).ok();
}

/// The store section `started` gave the SDK (its key prefix), to read tokens back.
fn sdk_store_config(s: &common::Stack, tag: &str) -> sdk::config::StoreConfig {
    common::config(
        s,
        &s.kafka_brokers,
        &s.rocketmq_namesrv,
        tag,
        &temp_dir("unused"),
        "",
        "",
    )
    .store
}

/// An SDK answering from either store, its token store `redis` (waiting `write_wait_ms`
/// for a write), both brokers refusing connections (each send timing out after
/// `send_timeout_ms`), its spool at `spool` taking events once both have failed for
/// `spool_after_ms`; and its store section, to read tokens back.
async fn with_brokers_down(
    redis: &PrivateRedis,
    tag: &str,
    write_wait_ms: u64,
    spool: &std::path::Path,
    spool_after_ms: u64,
    send_timeout_ms: u64,
) -> (Sdk, sdk::config::StoreConfig) {
    let text = reward_testkit::sdk_configs::brokers_down(
        &redis.url,
        &unique(tag),
        &format!("write_wait_ms = {write_wait_ms}\nanswer_from_queue = true"),
        spool,
        &format!(
            "after_ms = {spool_after_ms}\n[batch]\nsend_timeout_ms = {send_timeout_ms}\n\
             [retry]\nbackoff_initial_ms = 20\nbackoff_max_ms = 100"
        ),
    );
    let cfg = SdkConfig::from_toml_str(&text).unwrap();
    let store_cfg = cfg.store.clone();
    let sdk = Sdk::builder(cfg)
        .key_ring(KeyRing::random(1))
        .start()
        .await
        .unwrap();
    (sdk, store_cfg)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_and_both_brokers_down_the_spool_holds_the_reward() {
    let redis = PrivateRedis::start();
    let spool = temp_dir("spool-either-down");
    let (sdk, store_cfg) = with_brokers_down(&redis, "rt-down-", 30000, &spool, 300, 500).await;

    redis.signal("-STOP");
    let answers = send_each(&sdk, "down", 20).await;
    for a in &answers {
        let t = a
            .as_ref()
            .unwrap_or_else(|e| panic!("refused while the spool could hold it: {e}"));
        assert_eq!(t.held_by, HeldBy::Spool, "{t:?}");
    }
    assert_eq!(sdk.stats().spooled, 20);

    redis.signal("-CONT");
    let store = TokenStore::connect(store_cfg).await.unwrap();
    tokens_land(&store, "down", 20).await;
    let report = sdk.close(Duration::from_secs(5)).await;
    assert_eq!(report.stats.spooled, 20, "{report:?}");
    std::fs::remove_dir_all(&spool).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_event_is_still_on_its_way_when_its_wait_passes_is_refused_in_doubt() {
    // Redis hangs and both brokers refuse connections: a broker cannot acknowledge an
    // event before its send times out (2 s), and the spool takes one only once both
    // producers have failed for a second, so no store can hold a reward within the
    // call's 300 ms. The event has gone by then: the call says so.
    let redis = PrivateRedis::start();
    let spool = temp_dir("spool-in-doubt");
    let (sdk, store_cfg) = with_brokers_down(&redis, "rt-doubt-", 300, &spool, 1000, 2000).await;

    redis.signal("-STOP");
    let answers = send_each(&sdk, "doubt", 20).await;
    for a in &answers {
        assert!(
            matches!(a, Err(SendError::InDoubt(_))),
            "answered while no store could hold it in time: {a:?}"
        );
    }
    // Each refused call's event is on its way: the queue took all 20.
    assert_eq!(sdk.stats().accepted, 20);

    // Redis returns: the writes land; the events end in the spool, each once.
    redis.signal("-CONT");
    let store = TokenStore::connect(store_cfg).await.unwrap();
    tokens_land(&store, "doubt", 20).await;
    let report = sdk.close(Duration::from_secs(30)).await;
    assert_eq!(report.left, 0, "{report:?}");
    assert_eq!(
        (report.stats.spooled, report.stats.logged),
        (20, 0),
        "{report:?}"
    );
    std::fs::remove_dir_all(&spool).ok();
}
