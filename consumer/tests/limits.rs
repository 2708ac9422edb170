//! Rate limits against the real stack: coupon held to 200/s (ledger-measured, ±5 %),
//! changed to 500/s live through the shared dynamic config (in effect within 1 s),
//! fused (no coupon credited while cash flows at its own rate), unfused (every held
//! coupon credited, each exactly once).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use fred::prelude::*;

/// Credits of `reward_type` to `user` per second over `secs`, measured on the ledger.
async fn rate(ledger: &reward_service::downstream::Ledger, user: &str, t: &str, secs: f64) -> f64 {
    let (b0, t0) = (ledger.balance(user, t).await.unwrap(), Instant::now());
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    let (b1, t1) = (ledger.balance(user, t).await.unwrap(), Instant::now());
    (b1 - b0) as f64 / (t1 - t0).as_secs_f64()
}

fn within(what: &str, got: f64, want: f64) {
    let lo = want * 0.95;
    let hi = want * 1.05;
    assert!(
        (lo..=hi).contains(&got),
        "{what}: {got:.1}/s, want {want}/s ±5 %"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn type_rates_change_live_and_a_fuse_holds_only_its_type() {
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
        rate(&ledger, "cp", "coupon", 10.0).await,
        200.0,
    );

    // Live change: in effect within 1 s (the watcher polls every 200 ms here).
    set("limits.types.coupon.rate", "500").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(consumer.limits().limit_of("coupon").rate, 500.0);
    within(
        "coupon at 500/s",
        rate(&ledger, "cp", "coupon", 5.0).await,
        500.0,
    );

    // Fuse coupon: none credited while cash keeps its rate.
    set("limits.types.coupon.fused", "true").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(consumer.limits().is_fused("coupon"));
    let held = ledger.balance("cp", "coupon").await.unwrap();
    let cash = rate(&ledger, "cs", "cash", 5.0).await;
    assert_eq!(
        ledger.balance("cp", "coupon").await.unwrap(),
        held,
        "coupon credited while fused"
    );
    within("cash while coupon is fused", cash, 100.0);
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
