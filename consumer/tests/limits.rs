//! Rate limits against the real stack: coupon held to 200/s (measured from the
//! ledger's credit times: never over rate + burst in any second),
//! changed to 500/s live through the shared dynamic config (in effect within 1 s),
//! fused (no coupon credited while cash flows at its own rate), unfused (every held
//! coupon credited, each exactly once).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use fred::prelude::*;
use reward_testkit::perf_tier;
use reward_testkit::rates::{STAMP_SLACK_SECS, ceiling};

/// The limiter's promise is a ceiling, and it holds on any machine: the credits
/// stamped in the window are at most the rate over the window, plus what the bucket
/// and the instance's leased pool can hold (the burst, or two 100 ms lease periods of
/// the rate if larger, each), plus [`STAMP_SLACK_SECS`] of the rate: the ledger stamps
/// each credit after the gRPC hop, so a stall of the service bunches credits the
/// limiter admitted just before the window into it. Reaching the rate depends on the
/// machine keeping up (debug builds sharing 2 cores with whatever else runs): it is
/// printed here and asserted (-20 %/+5 %, and no 1 s over `rate + burst` plus 25 %)
/// only in the perf tier (`ops/test perf`).
fn within(what: &str, got: &Rate, rate: f64, burst: f64) {
    let secs = got.seconds.len() as f64;
    let credits = got.per_sec * secs;
    let held = burst.max(rate * 0.2);
    let ceiling = ceiling(rate, secs, 2.0 * held);
    eprintln!(
        "{what}: {credits:.0} credits in {secs} s ({:.1}/s, {:+.1} % of {rate}/s; ceiling {ceiling:.0}); peak 1 s {}; per second {:?}",
        got.per_sec,
        (got.per_sec / rate - 1.0) * 100.0,
        got.peak_1s,
        got.seconds
    );
    assert!(
        credits <= ceiling,
        "{what}: {credits:.0} credits in {secs} s, over the ceiling {ceiling:.0} ({rate}/s over {secs} s + {STAMP_SLACK_SECS} s, + 2 x {held:.0} held); per second {:?}",
        got.seconds
    );
    if perf_tier() {
        assert!(
            got.peak_1s as f64 <= (rate + burst) * 1.25,
            "{what}: {} credits in one second, over ({rate}/s + burst {burst}) x 1.25",
            got.peak_1s
        );
        assert!(
            (rate * 0.8..=rate * 1.05).contains(&got.per_sec),
            "{what}: {:.1}/s over the window, want {rate}/s -20 % / +5 %",
            got.per_sec
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn type_rates_change_live_and_a_fuse_holds_only_its_type() {
    let _alone = one_at_a_time().await;
    let Setup {
        tag,
        dir,
        svc,
        grpc,
    } = setup("l").await;

    const COUPONS: i64 = 8000;
    const CASH: i64 = 4000;
    let mut events = Vec::new();
    for i in 0..COUPONS {
        events.push(event(&format!("p{i}"), "cp", "coupon", 1));
    }
    for i in 0..CASH {
        events.push(event(&format!("c{i}"), "cs", "cash", 1));
    }
    publish(&tag, &dir, "massive", &events, &[]).await;

    let text = consumer_text(
        &tag,
        &dir,
        &grpc,
        "",
        "[limits.types.coupon]\nrate = 200\nburst = 20\n[limits.types.cash]\nrate = 100\nburst = 10\npriority = 9\n",
    );
    let consumer = reward_consumer::start(&consumer_config(&text))
        .await
        .unwrap();
    let ledger = ledger(&tag).await;
    let redis = redis().await;
    let set = |k: &'static str, v: &'static str| {
        let redis = redis.clone();
        let key = format!("cfg-{tag}");
        async move {
            let _: i64 = redis.hset(key, (k, v)).await.unwrap();
        }
    };

    // Let the first fetch and the parking settle, then measure 10 s.
    wait_for(60, "coupons flowing", || async {
        ledger.balance("cp", "coupon").await.unwrap() > 200
    })
    .await;
    within(
        "coupon at 200/s",
        &rate(&ledger, "cp", if perf_tier() { 10.0 } else { 5.0 }).await,
        200.0,
        20.0,
    );

    // Live change: in effect within 1 s (the watcher polls every 200 ms here).
    set("limits.types.coupon.rate", "500").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(consumer.limits().limit_of("coupon").rate, 500.0);
    within(
        "coupon at 500/s",
        &rate(&ledger, "cp", 5.0).await,
        500.0,
        20.0,
    );

    // Fuse coupon: none credited while cash keeps its rate.
    set("limits.types.coupon.fused", "true").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(consumer.limits().is_fused("coupon"));
    let held = ledger.balance("cp", "coupon").await.unwrap();
    let cash = rate(&ledger, "cs", 5.0).await;
    assert_eq!(
        ledger.balance("cp", "coupon").await.unwrap(),
        held,
        "coupon credited while fused"
    );
    within("cash while coupon is fused", &cash, 100.0, 10.0);
    assert!(held < COUPONS, "nothing left to hold: {held}");

    // Unfuse, and open cash up: everything held is credited, each exactly once.
    set("limits.types.coupon.fused", "false").await;
    set("limits.types.coupon.rate", "5000").await;
    set("limits.types.cash.rate", "5000").await;
    wait_for(180, "every coupon and cash credited", || async {
        ledger.balance("cp", "coupon").await.unwrap() == COUPONS
            && ledger.balance("cs", "cash").await.unwrap() == CASH
    })
    .await;
    assert_eq!(credited(&redis, &tag, "cp").await, COUPONS);
    assert_eq!(credited(&redis, &tag, "cs").await, CASH);
    let report = consumer.shutdown().await;
    // Over-rate coupons were parked (fused ones too, unless none was waiting in
    // memory when the fuse came: that depends on timing, so it is not asserted).
    assert!(report.stats.requeued_limited > 0, "{:?}", report.stats);
    assert_eq!(report.stats.requeued_failed, 0, "{:?}", report.stats);
    assert_eq!(report.stats.last_resort, 0);
    assert_eq!(report.unsettled, 0);
    svc.shutdown().await;
}

/// When the global rate binds, the higher-priority type goes first: with cash
/// (priority 9) and coupon (priority 1) both waiting and room for 100 credits/s in
/// all, coupons wait until the cash backlog is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_global_limit_serves_higher_priority_first() {
    let _alone = one_at_a_time().await;
    let Setup {
        tag,
        dir,
        svc,
        grpc,
    } = setup("q").await;
    const EACH: i64 = 500;
    let mut events = Vec::new();
    for i in 0..EACH {
        // Coupons first on the topic: priority, not arrival, must decide.
        events.push(event(&format!("p{i}"), "cp", "coupon", 1));
    }
    for i in 0..EACH {
        events.push(event(&format!("c{i}"), "cs", "cash", 1));
    }
    publish(&tag, &dir, "massive", &events, &[]).await;

    let text = consumer_text(
        &tag,
        &dir,
        &grpc,
        "",
        "global = 100\nglobal_burst = 1\n[limits.types.cash]\nrate = 100000\npriority = 9\n[limits.types.coupon]\nrate = 100000\npriority = 1\n",
    );
    let consumer = reward_consumer::start(&consumer_config(&text))
        .await
        .unwrap();
    let ledger = ledger(&tag).await;
    wait_for(60, "200 cash credited", || async {
        ledger.balance("cs", "cash").await.unwrap() >= 200
    })
    .await;
    let coupons = ledger.balance("cp", "coupon").await.unwrap();
    let cash = ledger.balance("cs", "cash").await.unwrap();
    // Before the first fetch brought cash in, a few coupons may have gone.
    assert!(
        coupons * 20 <= cash,
        "coupon {coupons} credited beside cash {cash} while the global limit bound"
    );
    let report = consumer.shutdown().await;
    assert_eq!(report.stats.last_resort, 0);
    svc.shutdown().await;
}

/// The lease script itself, as two instances of one fleet see it: a lower priority
/// gets no global permit while another instance has higher-priority demand recorded,
/// and gets them once that demand has expired; a type's bucket hands out its rate once,
/// whoever asks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_script_serves_higher_priority_across_instances() {
    use reward_consumer::fleet::{FleetConfig, Leaser};
    use reward_consumer::limits::{Ask, Plan};
    let redis = redis().await;
    let cfg = FleetConfig {
        key_prefix: reward_testkit::unique("lease"),
        // Long periods, so the test's own pace cannot matter: demand lives 3 s.
        lease_ms: 1000,
        live_ttl_ms: 5000,
    };
    let a = Leaser::load(&redis, cfg.clone(), "a".into()).await.unwrap();
    let b = Leaser::load(&redis, cfg, "b".into()).await.unwrap();
    let ask = |want: i64| Ask {
        name: String::new(),
        rate: 100.0,
        cap: 20.0,
        give: 0,
        want,
    };
    let plan = |classes: Vec<u8>, want: i64, used: i64| Plan {
        types: vec![Ask {
            name: "coupon".into(),
            ..ask(want)
        }],
        global: ask(want),
        global_used: used,
        classes,
    };
    // A (cash, priority 9) records demand 20; buckets start empty.
    let g = a.lease(&redis, &plan(vec![9], 20, 10)).await.unwrap();
    assert_eq!((g.live, g.global), (1, 0));
    tokio::time::sleep(Duration::from_millis(400)).await;
    // B (coupon, priority 1): ~20 tokens in the bucket, all reserved for A.
    let g = b.lease(&redis, &plan(vec![1], 20, 0)).await.unwrap();
    assert_eq!(g.live, 2);
    assert_eq!(
        g.global, 0,
        "priority 1 took permits reserved for priority 9"
    );
    // The type bucket has no priority: B gets what 400 ms of 100/s filled (cap 20).
    assert!((15..=20).contains(&g.types[0]), "{:?}", g.types);
    // A takes the global permits.
    let g = a.lease(&redis, &plan(vec![9], 20, 0)).await.unwrap();
    assert!((15..=20).contains(&g.global), "{}", g.global);
    // A's demand (used 0: 1 permit) expires 3 lease periods after its last lease.
    tokio::time::sleep(Duration::from_millis(3300)).await;
    let g = b.lease(&redis, &plan(vec![1], 20, 0)).await.unwrap();
    assert_eq!(g.global, 20, "demand expired, the bucket is full (cap 20)");
    // Given back permits return to the bucket, up to its cap.
    let mut back = plan(vec![], 0, 0);
    back.global.give = 20;
    let g = b.lease(&redis, &back).await.unwrap();
    assert_eq!(g.global, 0);
    let g = a.lease(&redis, &plan(vec![5], 20, 0)).await.unwrap();
    assert_eq!(g.global, 20, "what B gave back went to A");
}
