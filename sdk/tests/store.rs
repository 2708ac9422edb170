//! The token store's two write modes against the real Redis of the local stack
//! (`ops/stack up`; fails, never skips): the same outcomes, the same counts.

// Helpers may unwrap: a failure here is a failed test (clippy's allow-unwrap-in-tests
// covers only the test functions themselves).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use sdk::config::{StoreConfig, WriteMode};
use sdk::store::{StoreError, TokenStore};

async fn store(mode: WriteMode, cap: u32) -> TokenStore {
    let s = common::stack();
    let cfg = StoreConfig {
        redis_url: s.redis_url,
        key_prefix: common::unique("store-test"),
        max_tokens_per_user: cap,
        write_mode: mode,
        timeout_ms: 10_000,
        ..StoreConfig::default()
    };
    TokenStore::connect(cfg).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_write_modes_store_cap_and_count_alike() {
    for mode in [WriteMode::Direct, WriteMode::Batched] {
        let st = store(mode, 3).await;
        for i in 0..3 {
            st.put("u1", "act", &format!("t{i}"), &format!("sealed{i}"))
                .await
                .unwrap_or_else(|e| panic!("{mode:?}: write {i}: {e}"));
        }
        // A fourth trade number is over the cap; re-writing a held one is not.
        let over = st.put("u1", "act", "t3", "sealed3").await;
        assert!(
            matches!(over, Err(StoreError::CapReached { cap: 3 })),
            "{mode:?}: {over:?}"
        );
        st.put("u1", "act", "t0", "sealed0-again").await.unwrap();
        let held = st.list("u1", "act").await.unwrap();
        assert_eq!(held.len(), 3, "{mode:?}: {held:?}");
        assert_eq!(held["t0"], "sealed0-again", "{mode:?}");
        assert_eq!(held["t2"], "sealed2", "{mode:?}");
        let stats = st.stats();
        let n = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(
            (n(&stats.written), n(&stats.capped), n(&stats.failed)),
            (4, 1, 0),
            "{mode:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_write_modes_keep_every_concurrent_write() {
    for mode in [WriteMode::Direct, WriteMode::Batched] {
        let st = std::sync::Arc::new(store(mode, 500).await);
        let mut calls = Vec::new();
        for i in 0..2_000u32 {
            let st = st.clone();
            calls.push(tokio::spawn(async move {
                let user = format!("u{}", i % 50);
                st.put(&user, "act", &format!("t{i}"), &format!("s{i}"))
                    .await
            }));
        }
        for c in calls {
            c.await.unwrap().unwrap_or_else(|e| panic!("{mode:?}: {e}"));
        }
        let mut total = 0;
        for u in 0..50 {
            let held = st.list(&format!("u{u}"), "act").await.unwrap();
            for (trade, sealed) in &held {
                assert_eq!(sealed, &format!("s{}", &trade[1..]), "{mode:?}");
            }
            total += held.len();
        }
        assert_eq!(total, 2_000, "{mode:?}: every write is in Redis once");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deferred_writes_land_and_their_refusals_are_counted() {
    let st = std::sync::Arc::new(store(WriteMode::Deferred, 40).await);
    // A key of another type makes the script fail (WRONGTYPE): a failed write.
    let wrong = st.key("u-wrong", "act");
    let _: () = fred::interfaces::KeysInterface::set(
        st.pool().next(),
        &wrong,
        "not a hash",
        None,
        None,
        false,
    )
    .await
    .unwrap();
    let mut calls = Vec::new();
    // 20 users x 50 trade numbers against a cap of 40: 200 refused by the cap.
    for i in 0..1_000u32 {
        let st = st.clone();
        calls.push(tokio::spawn(async move {
            let user = format!("u{}", i % 20);
            st.put_deferred(&user, "act", &format!("t{i}"), format!("s{i}"))
                .await
        }));
    }
    for c in calls {
        c.await.unwrap().unwrap();
    }
    for i in 0..3 {
        st.put_deferred("u-wrong", "act", &format!("w{i}"), "x".into())
            .await
            .unwrap();
    }
    assert_eq!(st.flush(std::time::Duration::from_secs(30)).await, 0);
    let n = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
    let stats = st.stats();
    assert_eq!(
        (
            n(&stats.written),
            n(&stats.capped),
            n(&stats.failed),
            n(&stats.deferred_failed),
            n(&stats.deferred_pending)
        ),
        (800, 200, 3, 203, 0)
    );
    let mut total = 0;
    for u in 0..20 {
        let held = st.list(&format!("u{u}"), "act").await.unwrap();
        assert_eq!(held.len(), 40, "u{u}: the cap bounds the hash");
        for (trade, sealed) in &held {
            assert_eq!(sealed, &format!("s{}", &trade[1..]));
        }
        total += held.len();
    }
    assert_eq!(total, 800);
    // A waiting write in the same store still hears the cap at once.
    let over = st.put("u0", "act", "t-new", "x").await;
    assert!(
        matches!(over, Err(StoreError::CapReached { cap: 40 })),
        "{over:?}"
    );
    // Nothing pending: flush returns at once.
    assert_eq!(st.flush(std::time::Duration::ZERO).await, 0);
}
