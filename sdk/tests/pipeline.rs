//! The SDK against the real stack: every accepted reward on a broker and in Redis,
//! failover, draining close, bad requests leaving nothing behind.

// Test code: a failed unwrap is a failed test, which is what we want (helpers too,
// which clippy's allow-unwrap-in-tests does not cover).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use common::{config, stack, started, temp_dir, topics, unique};
use rdkafka::mocking::MockCluster;
use reward_stack::topics::{create_kafka_topics, create_rocketmq_topics};
use reward_testkit::readback::{ReadBack, read_kafka, read_rocketmq};
use sdk::request::{RedEnvelopeRain, RequestError, RewardRequest, User};
use sdk::token::KeyRing;
use sdk::{IssuedToken, Sdk, SendError};

async fn create_topics(s: &common::Stack, tag: &str) {
    let t = topics(tag);
    let t: Vec<&str> = t.iter().map(String::as_str).collect();
    create_kafka_topics(&s.kafka_brokers, &t, 3).await.unwrap();
    create_rocketmq_topics(&s.rocketmq_namesrv, &t)
        .await
        .unwrap();
}

/// Sends `reqs` with `concurrency` callers, each a closed loop that, told to slow down
/// (`Backpressure`: the queue or the token writer is behind), waits a millisecond and
/// sends the same request again, as an activity service should; returns what was
/// issued.
async fn send_all(
    sdk: &Sdk,
    reqs: Vec<RewardRequest>,
    concurrency: usize,
) -> Vec<(RewardRequest, IssuedToken)> {
    let reqs = Arc::new(reqs);
    let mut tasks = Vec::new();
    for w in 0..concurrency {
        let (sdk, reqs) = (sdk.clone(), reqs.clone());
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            for r in reqs.iter().skip(w).step_by(concurrency) {
                let issued = loop {
                    match sdk.send_reward(r.clone()).await {
                        Ok(t) => break t,
                        Err(SendError::Backpressure(_)) => {
                            // Time is the subject: the caller's pause before sending again.
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        }
                        Err(e) => panic!("send {}: {e}", r.trade_no),
                    }
                };
                out.push((r.clone(), issued));
            }
            out
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all
}

/// `n` rewards over three types (so three queues), users "1000".. with 100 each.
fn rewards(activity: &str, n: u64) -> Vec<RewardRequest> {
    let types = ["cash", "coupon", "coin"];
    (0..n)
        .map(|i| {
            let user = User::new((1000 + i / 100).to_string()).app("wallet");
            let mut r = RedEnvelopeRain::new(activity, types[(i % 3) as usize]).grab(
                &user,
                i % 100,
                1 + (i % 500) as i64,
            );
            r.extension.insert("i".into(), i.to_string());
            r
        })
        .collect()
}

async fn read_everything(s: &common::Stack, tag: &str, want: usize) -> ReadBack {
    let mut all = ReadBack::default();
    for t in topics(tag) {
        let (kafka, t2) = (s.kafka_brokers.clone(), t.clone());
        let k = tokio::task::spawn_blocking(move || {
            read_kafka(&kafka, &t2, want, Duration::from_secs(60))
        })
        .await
        .unwrap()
        .unwrap();
        all.merge(k);
        all.merge(
            read_rocketmq(&s.rocketmq_namesrv, &t, want, Duration::from_secs(60))
                .await
                .unwrap(),
        );
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hundred_thousand_rewards_reach_a_broker_and_the_store() {
    let s = stack();
    let tag = unique("e2e");
    create_topics(&s, &tag).await;
    let spool = temp_dir("spool-e2e");
    let cfg = config(
        &s,
        &s.kafka_brokers,
        &s.rocketmq_namesrv,
        &tag,
        &spool,
        "",
        "",
    );
    let sdk = Sdk::builder(cfg)
        .key_ring(KeyRing::random(2))
        .start()
        .await
        .unwrap();
    let n = 100_000u64;
    let activity = unique("act");
    let started = std::time::Instant::now();
    let issued = send_all(&sdk, rewards(&activity, n), 64).await;
    eprintln!("[e2e] {n} sent in {:?}", started.elapsed());
    let report = sdk.close(Duration::from_secs(60)).await;
    eprintln!("[e2e] closed at {:?}: {report:?}", started.elapsed());
    assert_eq!(report.left, 0, "{report:?}");
    assert_eq!(report.stats.accepted, n);
    assert_eq!(report.stats.delivered, n, "{report:?}");
    // On a contended machine both brokers can miss a deadline at once; such events go
    // to the spool and must all have been replayed before close returned.
    assert_eq!(report.stats.spooled, report.stats.replayed, "{report:?}");
    assert_eq!(report.spool_bytes, 0, "{report:?}");
    // Both producer kinds carried traffic.
    assert!(
        report.stats.per_producer.get("k").copied().unwrap_or(0) > 0,
        "{report:?}"
    );
    assert!(
        report.stats.per_producer.get("r").copied().unwrap_or(0) > 0,
        "{report:?}"
    );

    // Every reward is on a broker (at least once).
    let back = read_everything(&s, &tag, n as usize).await;
    eprintln!(
        "[e2e] read back {} at {:?}",
        back.seen.len(),
        started.elapsed()
    );
    assert_eq!(back.undecodable, 0);
    let missing: Vec<_> = issued
        .iter()
        .filter(|(r, _)| !back.seen.contains_key(&r.trade_no))
        .take(5)
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {n} not on any broker, e.g. {:?}",
        issued
            .iter()
            .filter(|(r, _)| !back.seen.contains_key(&r.trade_no))
            .count(),
        missing.iter().map(|m| &m.0.trade_no).collect::<Vec<_>>()
    );
    assert_eq!(back.seen.len() as u64, n);

    // Every token is in Redis, and opens to the request's fields.
    let mut by_user: HashMap<String, Vec<&(RewardRequest, IssuedToken)>> = HashMap::new();
    for item in &issued {
        by_user
            .entry(item.0.user.user_id.clone())
            .or_default()
            .push(item);
    }
    let mut checked = 0;
    for (user, items) in by_user {
        let stored = sdk.store().list(&user, &activity).await.unwrap();
        assert_eq!(stored.len(), items.len(), "user {user}");
        for (req, tok) in items {
            assert_eq!(stored.get(&req.trade_no), Some(&tok.token));
            let opened = sdk.codec().open(&tok.token, &user, &activity).unwrap();
            assert_eq!(
                (
                    opened.trade_no.as_str(),
                    opened.reward_type.as_str(),
                    opened.amount,
                    opened.app_id.as_str()
                ),
                (
                    req.trade_no.as_str(),
                    req.reward_type.as_str(),
                    req.amount,
                    "wallet"
                )
            );
            checked += 1;
        }
    }
    assert_eq!(checked, n);
    eprintln!("[e2e] tokens checked at {:?}", started.elapsed());
    std::fs::remove_dir_all(&spool).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn primary_down_fails_over_to_backup_and_ratio_returns() {
    let s = stack();
    let tag = unique("fo");
    // The Kafka side is librdkafka's mock cluster, so it can fail on cue.
    let mock = MockCluster::new(1).unwrap();
    for t in topics(&tag) {
        mock.create_topic(&t, 3, 1).unwrap();
    }
    let t = topics(&tag);
    let tr: Vec<&str> = t.iter().map(String::as_str).collect();
    create_rocketmq_topics(&s.rocketmq_namesrv, &tr)
        .await
        .unwrap();
    let spool = temp_dir("spool-fo");
    let cfg = config(
        &s,
        &mock.bootstrap_servers(),
        &s.rocketmq_namesrv,
        &tag,
        &spool,
        "",
        "after_ms = 60000\n[batch]\nsend_timeout_ms = 1500",
    );
    let sdk = Sdk::builder(cfg)
        .key_ring(KeyRing::random(1))
        .start()
        .await
        .unwrap();
    let activity = unique("act");
    // Only cash: queue massive, k primary for users with bucket < 50.
    let cash = |from: u64, n: u64| -> Vec<RewardRequest> {
        (from..from + n)
            .map(|i| RedEnvelopeRain::new(&activity, "cash").grab(&User::new(i.to_string()), 1, 5))
            .collect()
    };

    // Phase 1, broker down: every reward goes to RocketMQ.
    mock.broker_down(1).unwrap();
    send_all(&sdk, cash(0, 2_000), 16).await;
    wait_settled(&sdk).await;
    let st = sdk.stats();
    assert_eq!(st.delivered, 2_000, "{st:?}");
    assert_eq!(st.per_producer.get("r").copied(), Some(2_000), "{st:?}");
    // Half the users start on k and fail over once each; a send that then also timed
    // out on r (a loaded machine) goes through the retry loop, which may fail over once
    // more per retry.
    assert!(
        st.failovers >= 1_000 && st.failovers <= 1_000 + st.retries,
        "half the users start on k: {st:?}"
    );
    assert_eq!(st.spooled, 0);

    // Phase 2, broker back: once the SDK's Kafka producer delivers to it again, traffic
    // follows the ratio again, exactly by bucket. The probes are coins on the express
    // queue (k first for every user, its own topic): one delivered on k says so. The
    // phase's counts below are taken from after the probes.
    mock.broker_up(1).unwrap();
    let on = |st: &sdk::queue::StatsSnapshot, p: &str| st.per_producer.get(p).copied().unwrap_or(0);
    let mut round = 0;
    let mut probes = 0u64;
    reward_testkit::eventually(
        Duration::from_secs(60),
        "the SDK's Kafka producer delivering to the mock broker again",
        async || {
            round += 1;
            let before = on(&sdk.stats(), "k");
            let probe = RedEnvelopeRain::new(&activity, "coin").grab(&User::new("probe"), round, 1);
            sdk.send_reward(probe).await.map_err(|e| e.to_string())?;
            probes += 1;
            wait_settled(&sdk).await;
            let st = sdk.stats();
            if on(&st, "k") > before {
                Ok(())
            } else {
                Err(format!("probe {round} was not delivered on k: {st:?}"))
            }
        },
    )
    .await;
    let base = sdk.stats();
    // Every probe accepted was delivered once, and nothing else since phase 1.
    assert_eq!(base.delivered, st.delivered + probes, "{base:?}");
    send_all(&sdk, cash(10_000, 2_000), 16).await;
    wait_settled(&sdk).await;
    let st2 = sdk.stats();
    assert_eq!(st2.delivered - base.delivered, 2_000, "{st2:?}");
    assert_eq!(st2.delivered, 4_000 + probes, "{st2:?}");
    // Every first attempt follows the bucket again: 1 000 start on k, 1 000 on r. On a
    // loaded machine a RocketMQ send may time out (1.5 s here) and fail over to k, so
    // k may carry more than 1 000, but never more than the phase's failovers explain.
    let on_k = on(&st2, "k") - on(&base, "k");
    let on_r = on(&st2, "r") - on(&base, "r");
    let phase2_failovers = st2.failovers - base.failovers;
    assert!(on_k >= 1_000 && on_k <= 1_000 + phase2_failovers, "{st2:?}");
    assert_eq!(on_k + on_r, 2_000, "{st2:?}");
    let report = sdk.close(Duration::from_secs(30)).await;
    assert_eq!(report.left, 0);

    // None lost: RocketMQ has phase 1 and the r-first half of phase 2, the mock
    // cluster the k-first half (plus any that failed over to it). A send that timed out
    // may still have been stored, so a broker can hold more than it acknowledged: read
    // each one to its end (its offsets when the read begins), not to the acknowledged
    // count.
    let topic = format!("massive-{tag}");
    let mut back = read_rocketmq(&s.rocketmq_namesrv, &topic, 4_000, Duration::from_secs(60))
        .await
        .unwrap();
    let (bootstrap, t) = (mock.bootstrap_servers(), topic.clone());
    back.merge(
        tokio::task::spawn_blocking(move || {
            read_kafka(&bootstrap, &t, 4_000, Duration::from_secs(60))
        })
        .await
        .unwrap()
        .unwrap(),
    );
    let all: Vec<String> = cash(0, 2_000)
        .into_iter()
        .chain(cash(10_000, 2_000))
        .map(|r| r.trade_no)
        .collect();
    let missing = all.iter().filter(|t| !back.seen.contains_key(*t)).count();
    assert_eq!(missing, 0, "{missing} of 4 000 on neither broker");
    std::fs::remove_dir_all(&spool).ok();
}

async fn wait_settled(sdk: &Sdk) {
    reward_testkit::eventually(
        Duration::from_secs(60),
        "every accepted event settled",
        async || {
            let st = sdk.stats();
            if st.unsettled == 0 {
                Ok(())
            } else {
                Err(format!("{st:?}"))
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_drains_everything_accepted() {
    let s = stack();
    let tag = unique("close");
    create_topics(&s, &tag).await;
    let spool = temp_dir("spool-close");
    // A long linger: without a draining close, events would still sit in the buffers.
    let sdk = started(
        &s,
        &tag,
        &spool,
        "",
        "[batch]\nlinger_ms = 2000\nmax_events = 1000",
    )
    .await;
    let issued = send_all(&sdk, rewards(&unique("act"), 3_000), 8).await;
    let report = sdk.close(Duration::from_secs(30)).await;
    assert_eq!(report.left, 0, "{report:?}");
    assert_eq!(
        report.stats.delivered + report.stats.spooled,
        3_000,
        "{report:?}"
    );
    assert!(matches!(
        sdk.send_reward(rewards("late", 1).remove(0)).await,
        Err(SendError::Closed)
    ));
    let back = read_everything(&s, &tag, 3_000).await;
    let want: HashSet<_> = issued.iter().map(|(r, _)| r.trade_no.clone()).collect();
    // Everything delivered is on a broker; what could not be delivered went to the
    // spool, and what is still there (not yet replayed) is all that is missing.
    let missing = want.iter().filter(|t| !back.seen.contains_key(*t)).count() as u64;
    assert_eq!(
        missing,
        report.stats.spooled - report.stats.replayed,
        "{report:?}"
    );
    std::fs::remove_dir_all(&spool).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_typed_errors_and_leave_nothing() {
    let s = stack();
    let tag = unique("bad");
    create_topics(&s, &tag).await;
    let spool = temp_dir("spool-bad");
    // Direct mode: the call waits for its write, so the cap can refuse the reward.
    // The cap refuses only a write that answers before the event goes
    // (`queue_after_ms`): a head start no busy machine's Redis outlasts.
    let sdk = started(
        &s,
        &tag,
        &spool,
        "max_tokens_per_user = 2\nwrite_mode = \"direct\"\nqueue_after_ms = 5000\nwrite_wait_ms = 30000",
        "",
    )
    .await;
    let activity = unique("act");
    let rain = RedEnvelopeRain::new(&activity, "cash");
    let u = User::new("77");
    type Expect = fn(&SendError) -> bool;
    let cases: Vec<(RewardRequest, Expect)> = vec![
        (
            RewardRequest {
                reward_type: "gold".into(),
                ..rain.grab(&u, 1, 5)
            },
            |e: &SendError| matches!(e, SendError::Invalid(RequestError::UnknownRewardType(_))),
        ),
        (rain.grab(&u, 1, 0), |e: &SendError| {
            matches!(e, SendError::Invalid(RequestError::NonPositiveAmount(0)))
        }),
        (
            RewardRequest {
                reward_type: "coin".into(),
                ..rain.grab(&u, 1, 1001)
            },
            |e: &SendError| {
                matches!(
                    e,
                    SendError::Invalid(RequestError::AmountTooLarge { max: 1000, .. })
                )
            },
        ),
        (rain.grab(&User::new(""), 1, 5), |e: &SendError| {
            matches!(
                e,
                SendError::Invalid(RequestError::EmptyId { field: "user_id" })
            )
        }),
        (
            RewardRequest {
                trade_no: "x y".into(),
                ..rain.grab(&u, 1, 5)
            },
            |e: &SendError| matches!(e, SendError::Invalid(RequestError::MalformedTradeNo { .. })),
        ),
    ];
    for (req, expect) in cases {
        let e = sdk
            .send_reward(req.clone())
            .await
            .expect_err("bad request accepted");
        assert!(expect(&e), "{}: {e:?}", req.trade_no);
    }
    assert!(sdk.store().list("77", &activity).await.unwrap().is_empty());
    assert!(sdk.store().list("", &activity).await.unwrap().is_empty());
    assert_eq!(sdk.stats().accepted, 0);

    // The per-user cap: two tokens fit, the third is refused and leaves nothing.
    sdk.send_reward(rain.grab(&u, 1, 5)).await.unwrap();
    sdk.send_reward(rain.grab(&u, 2, 5)).await.unwrap();
    // The same reward again is the same token slot, not a third token.
    sdk.send_reward(rain.grab(&u, 2, 5)).await.unwrap();
    let e = sdk.send_reward(rain.grab(&u, 3, 5)).await.unwrap_err();
    assert!(matches!(e, SendError::TooManyTokens { cap: 2 }), "{e:?}");
    assert_eq!(sdk.store().list("77", &activity).await.unwrap().len(), 2);
    assert_eq!(sdk.stats().accepted, 3);
    let report = sdk.close(Duration::from_secs(30)).await;
    assert_eq!(report.left, 0);
    std::fs::remove_dir_all(&spool).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deferred_writes_return_at_once_and_close_waits_for_them() {
    let s = stack();
    let tag = unique("deferred");
    create_topics(&s, &tag).await;
    let spool = temp_dir("spool-deferred");
    let sdk = started(
        &s,
        &tag,
        &spool,
        "write_mode = \"deferred\"\nmax_tokens_per_user = 100",
        "",
    )
    .await;
    let activity = unique("act");
    let issued = send_all(&sdk, rewards(&activity, 2_000), 8).await;
    assert!(
        issued
            .iter()
            .all(|(_, t)| t.stored == sdk::Stored::Deferred)
    );
    // Over the cap: the reward is not refused (it was answered before Redis was),
    // its event goes, and the refusal is counted. The cap counts writes in the order
    // they land, so the 2 000 land first.
    assert_eq!(sdk.store().flush(Duration::from_secs(30)).await, 0);
    let rain = RedEnvelopeRain::new(&activity, "cash");
    let over = sdk
        .send_reward(rain.grab(&User::new("1000"), 9_999, 5))
        .await
        .unwrap();
    assert_eq!(over.stored, sdk::Stored::Deferred);
    let report = sdk.close(Duration::from_secs(30)).await;
    assert_eq!((report.left, report.tokens_left), (0, 0), "{report:?}");
    assert_eq!(report.stats.accepted, 2_001, "{report:?}");
    assert_eq!(sdk.token_write_failures(), 1);
    // Every accepted token is in Redis, and opens to its request.
    let mut by_user: HashMap<String, HashMap<String, String>> = HashMap::new();
    for (req, t) in &issued {
        let held = match by_user.get(&req.user.user_id) {
            Some(h) => h,
            None => {
                let h = sdk
                    .store()
                    .list(&req.user.user_id, &activity)
                    .await
                    .unwrap();
                by_user.entry(req.user.user_id.clone()).or_insert(h)
            }
        };
        assert_eq!(held.get(&req.trade_no), Some(&t.token), "{}", req.trade_no);
    }
    assert_eq!(by_user["1000"].len(), 100, "the cap bounds the hash");
    assert!(!by_user["1000"].contains_key(&over.trade_no));
    // Every event, the over-cap reward's included, was settled on a broker or the spool
    // (reading them all back is the 100 k test's job).
    assert_eq!(
        report.stats.delivered + report.stats.spooled,
        2_001,
        "{report:?}"
    );
    std::fs::remove_dir_all(&spool).ok();
}
