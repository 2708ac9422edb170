//! The token store's write modes against a real Redis: the stack's (`ops/stack up`;
//! fails, never skips), and for the outage tests a private `redis-server` of this
//! test's own, stopped with SIGSTOP (a hung server: connections stay open, nothing
//! answers) and resumed with SIGCONT, so no other test sees the outage.

// Helpers may unwrap: a failure here is a failed test (clippy's allow-unwrap-in-tests
// covers only the test functions themselves).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use reward_testkit::private_redis::PrivateRedis;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sdk::config::{StoreConfig, WriteMode};
use sdk::store::{StoreError, Submitted, TokenStore};

fn cfg(redis_url: String, mode: WriteMode, cap: u32) -> StoreConfig {
    StoreConfig {
        redis_url,
        key_prefix: common::unique("store-test"),
        max_tokens_per_user: cap,
        write_mode: mode,
        timeout_ms: 10_000,
        ..StoreConfig::default()
    }
}

async fn store(mode: WriteMode, cap: u32) -> TokenStore {
    TokenStore::connect(cfg(common::stack().redis_url, mode, cap))
        .await
        .unwrap()
}

/// A store with a short call timeout, started until it starts: its start-up calls can
/// time out on a busy machine (a private `redis-server` just spawned, other tests
/// beside it), which is not what the tests using it are about.
async fn start_store(config: StoreConfig) -> TokenStore {
    let what = format!(
        "a store with a {} ms call timeout started",
        config.timeout_ms
    );
    reward_testkit::eventually(Duration::from_secs(60), &what, move || {
        let config = config.clone();
        async move { TokenStore::connect(config).await.map_err(|e| e.to_string()) }
    })
    .await
}

fn n(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

/// One write the way `send_reward` makes it: a place, then the mode's submit.
async fn submit(
    st: &TokenStore,
    user: &str,
    trade: &str,
    sealed: &str,
) -> Result<Submitted, StoreError> {
    let held = st.hold(Duration::from_secs(10)).await?;
    st.submit(held, user, "act", trade, sealed.to_string())
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_write_modes_store_cap_and_count_alike() {
    for mode in [WriteMode::Direct, WriteMode::Batched] {
        let st = store(mode, 3).await;
        for i in 0..3 {
            let r = submit(&st, "u1", &format!("t{i}"), &format!("sealed{i}")).await;
            assert!(
                matches!(r, Ok(Submitted::Stored)),
                "{mode:?}: write {i}: {r:?}"
            );
        }
        // A fourth trade number is over the cap; re-writing a held one is not.
        let over = submit(&st, "u1", "t3", "sealed3").await;
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
        assert_eq!(
            (n(&stats.written), n(&stats.capped), n(&stats.failed)),
            (4, 1, 0),
            "{mode:?}"
        );
        // A refusal the caller heard is not an unstored token: its reward was refused.
        assert_eq!((n(&stats.unstored), n(&stats.pending)), (0, 0), "{mode:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_write_mode_keeps_every_concurrent_write() {
    for mode in [WriteMode::Direct, WriteMode::Batched, WriteMode::Deferred] {
        let st = Arc::new(store(mode, 500).await);
        let mut calls = Vec::new();
        for i in 0..2_000u32 {
            let st = st.clone();
            calls.push(tokio::spawn(async move {
                let user = format!("u{}", i % 50);
                submit(&st, &user, &format!("t{i}"), &format!("s{i}")).await
            }));
        }
        for c in calls {
            c.await.unwrap().unwrap_or_else(|e| panic!("{mode:?}: {e}"));
        }
        assert_eq!(st.flush(Duration::from_secs(30)).await, 0, "{mode:?}");
        let mut total = 0;
        for u in 0..50 {
            let held = st.list(&format!("u{u}"), "act").await.unwrap();
            for (trade, sealed) in &held {
                assert_eq!(sealed, &format!("s{}", &trade[1..]), "{mode:?}");
            }
            total += held.len();
        }
        assert_eq!(total, 2_000, "{mode:?}: every write is in Redis once");
        assert_eq!(n(&st.stats().written), 2_000, "{mode:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deferred_writes_land_and_their_refusals_are_counted() {
    let st = Arc::new(store(WriteMode::Deferred, 40).await);
    // A key of another type makes the script fail (WRONGTYPE): the same every time,
    // so it is given up at once, not retried.
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
    // 20 users x 50 trade numbers against a cap of 40: 200 refused by the cap. The
    // three writes to the wrong-typed key go among them, so they share the writer's
    // script calls with good writes: each fails alone.
    for i in 0..1_000u32 {
        let one = st.clone();
        calls.push(tokio::spawn(async move {
            let user = format!("u{}", i % 20);
            submit(&one, &user, &format!("t{i}"), &format!("s{i}")).await
        }));
        if i % 400 == 200 {
            let one = st.clone();
            calls.push(tokio::spawn(async move {
                submit(&one, "u-wrong", &format!("w{i}"), "x").await
            }));
        }
    }
    for c in calls {
        assert_eq!(c.await.unwrap().unwrap(), Submitted::Deferred);
    }
    submit(&st, "u-wrong", "w-last", "x").await.unwrap();
    assert_eq!(st.flush(Duration::from_secs(30)).await, 0);
    assert!(
        n(&st.stats().pipelines) < 1_003,
        "every write went alone: nothing tested the batched script"
    );
    let stats = st.stats();
    assert_eq!(
        (
            n(&stats.written),
            n(&stats.capped),
            n(&stats.failed),
            n(&stats.retried),
            n(&stats.unstored),
            n(&stats.pending)
        ),
        (800, 200, 3, 0, 203, 0)
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
    assert_eq!(st.flush(Duration::ZERO).await, 0);
}

/// A Redis that answers nothing for the store's first attempt (hung, then resumed
/// 1.2 s later) does not fail the store's start: it is asked again and the store
/// starts and writes. One that stays hung fails the start after its attempts, with a
/// Redis error (never a hang).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_slow_at_start_is_asked_again_and_one_that_stays_hung_fails_the_start() {
    let redis = PrivateRedis::start();
    let resume = redis.hang_for(Duration::from_millis(1_200));
    let st = TokenStore::connect(StoreConfig {
        timeout_ms: 500,
        ..cfg(redis.url.clone(), WriteMode::Direct, 500)
    })
    .await
    .expect("a store whose Redis answered on the second attempt must start");
    assert!(resume.join().unwrap(), "the resume was sent");
    let r = submit(&st, "u1", "t1", "s").await;
    assert!(matches!(r, Ok(Submitted::Stored)), "{r:?}");

    redis.signal("-STOP");
    let started = std::time::Instant::now();
    let e = TokenStore::connect(StoreConfig {
        timeout_ms: 300,
        ..cfg(redis.url.clone(), WriteMode::Direct, 500)
    })
    .await
    .unwrap_err();
    assert!(matches!(e, StoreError::Redis(_)), "{e:?}");
    // Three attempts of 0.3 s and pauses of 0.5 s and 1 s: it ends, never hangs.
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    redis.signal("-CONT");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_redis_delays_tokens_and_pushes_back_but_loses_none() {
    for mode in [WriteMode::Deferred, WriteMode::Batched] {
        let redis = PrivateRedis::start();
        let st = Arc::new(
            start_store(StoreConfig {
                timeout_ms: 300,
                max_pending: 100,
                ..cfg(redis.url.clone(), mode, 500)
            })
            .await,
        );
        // Redis hangs: every attempt times out and is retried in the background.
        redis.signal("-STOP");
        let mut calls = Vec::new();
        for i in 0..100u32 {
            let st = st.clone();
            calls.push(tokio::spawn(async move {
                submit(&st, &format!("u{}", i % 10), &format!("t{i}"), "s").await
            }));
        }
        for c in calls {
            let r = c.await.unwrap().unwrap();
            let want = if mode == WriteMode::Deferred {
                Submitted::Deferred
            } else {
                Submitted::Retrying
            };
            assert_eq!(r, want, "{mode:?}");
        }
        // All 100 places are taken: the 101st write is pushed back, not accepted.
        let refused = st.hold(Duration::from_millis(200)).await;
        assert!(
            matches!(refused, Err(StoreError::Backlog { pending: 100, .. })),
            "{mode:?}: {refused:?}"
        );
        reward_testkit::eventually(
            Duration::from_secs(30),
            &format!("{mode:?}: a retry while Redis hangs"),
            async || n(&st.stats().retried) > 0,
        )
        .await;
        assert!(
            n(&st.stats().retried) > 0,
            "{mode:?}: no retry while Redis hung"
        );
        // Redis is back: every token lands, late, none given up.
        redis.signal("-CONT");
        assert_eq!(st.flush(Duration::from_secs(30)).await, 0, "{mode:?}");
        let mut total = 0;
        for u in 0..10 {
            total += st.list(&format!("u{u}"), "act").await.unwrap().len();
        }
        assert_eq!(total, 100, "{mode:?}: every accepted token is stored");
        assert_eq!(n(&st.stats().unstored), 0, "{mode:?}");
        // And the places are free again.
        assert!(st.hold(Duration::ZERO).await.is_ok(), "{mode:?}");
    }
}

/// Direct mode answers only once the token is stored: a Redis hung for less than the
/// call's wait is waited out (every call `Stored`, every token listed); one hung for
/// longer refuses every call with a Redis error, none answered as if stored, and no
/// place stays taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_write_answers_only_once_stored_or_refuses() {
    let redis = PrivateRedis::start();
    let connect = |write_wait_ms: u64| {
        start_store(StoreConfig {
            timeout_ms: 200,
            write_wait_ms,
            max_pending: 100,
            ..cfg(redis.url.clone(), WriteMode::Direct, 500)
        })
    };
    let st = Arc::new(connect(3_000).await);
    // Hung for 0.8 s: within the wait.
    let resume = redis.hang_for(Duration::from_millis(800));
    let mut calls = Vec::new();
    for i in 0..20u32 {
        let st = st.clone();
        calls.push(tokio::spawn(async move {
            submit(&st, &format!("u{}", i % 4), &format!("t{i}"), "s").await
        }));
    }
    for c in calls {
        let r = c.await.unwrap();
        assert!(matches!(r, Ok(Submitted::Stored)), "{r:?}");
    }
    assert!(resume.join().unwrap(), "the resume was sent");
    let mut total = 0;
    for u in 0..4 {
        total += st.list(&format!("u{u}"), "act").await.unwrap().len();
    }
    assert_eq!(total, 20, "every answered call's token is stored");
    assert!(n(&st.stats().retried) > 0, "the calls tried again");

    // Hung for longer than the wait: refused, never answered as stored.
    let st = connect(600).await;
    redis.signal("-STOP");
    let started = std::time::Instant::now();
    let r = submit(&st, "u9", "late", "s").await;
    assert!(matches!(r, Err(StoreError::Redis(_))), "{r:?}");
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "refused before its wait: {:?}",
        started.elapsed()
    );
    redis.signal("-CONT");
    assert!(
        st.hold(Duration::ZERO).await.is_ok(),
        "the place is free again"
    );
}

/// Direct writes that wait together go as one call, each decided and answered as if
/// alone: 520 writers at once on one call slot, 20 users of 26 trade numbers under a
/// cap of 15 (the cap refuses inside the shared calls), one trade number whose credit
/// came first, a user whose hash is a key of another type, and a user whose due shard
/// is: every answer is the write's own, every cap exact, every stored token has its
/// due entry, and far fewer calls than writes went to Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_writes_waiting_together_share_a_call_and_keep_their_own_answers() {
    use fred::interfaces::{HashesInterface, KeysInterface, SortedSetsInterface};
    let st = TokenStore::connect(StoreConfig {
        pool_size: 1,
        ..cfg(common::stack().redis_url, WriteMode::Direct, 15)
    })
    .await
    .unwrap();
    let redis = st.pool().next().clone();
    let users: Vec<String> = (0..20).map(|u| format!("u{u}")).collect();
    let shards: std::collections::HashSet<u32> = users.iter().map(|u| st.due_shard(u)).collect();
    // A user whose due shard no other user here has: that shard holds a string.
    let lone = (0..10_000)
        .map(|i| format!("u-lone{i}"))
        .find(|u| !shards.contains(&st.due_shard(u)))
        .unwrap();
    let _: () = redis
        .set(
            st.due_key(st.due_shard(&lone)),
            "not a zset",
            None,
            None,
            false,
        )
        .await
        .unwrap();
    let _: () = redis
        .set(st.key("u-typed", "act"), "not a hash", None, None, false)
        .await
        .unwrap();
    // u0's t3 was credited before its write: a mark waits in its field.
    let _: () = redis.hset(st.key("u0", "act"), ("t3", "!")).await.unwrap();
    let mut writes: Vec<(String, String)> = Vec::new();
    for t in 0..26 {
        for u in &users {
            writes.push((u.clone(), format!("t{t}")));
        }
    }
    for t in 0..5 {
        writes.push((lone.clone(), format!("t{t}")));
        writes.push(("u-typed".to_string(), format!("t{t}")));
    }
    let answers =
        futures_util::future::join_all(writes.iter().map(|(u, t)| submit(&st, u, t, "sealed")))
            .await;
    let calls = n(&st.stats().direct_calls);
    assert!(
        calls * 4 < writes.len() as u64,
        "{calls} calls for {} writes",
        writes.len()
    );
    let mut stored: std::collections::HashMap<&str, usize> = Default::default();
    let mut capped: std::collections::HashMap<&str, usize> = Default::default();
    for ((u, t), r) in writes.iter().zip(&answers) {
        match r {
            Ok(Submitted::Stored) => *stored.entry(u).or_default() += 1,
            Err(StoreError::CapReached { cap: 15 }) => *capped.entry(u).or_default() += 1,
            Err(_) if u == "u-typed" || *u == lone => {}
            other => panic!("{u} {t}: {other:?}"),
        }
    }
    for u in &users {
        // u0's credited trade number is answered stored and holds no place.
        let (want_stored, want_capped) = if u == "u0" { (16, 10) } else { (15, 11) };
        assert_eq!(stored.get(u.as_str()), Some(&want_stored), "{u}");
        assert_eq!(capped.get(u.as_str()), Some(&want_capped), "{u}");
        let pending = st.list(u, "act").await.unwrap();
        assert_eq!(pending.len(), 15, "{u}: {pending:?}");
        for t in pending.keys() {
            let score: Option<f64> = redis
                .zscore(st.due_key(st.due_shard(u)), st.due_member(u, "act", t))
                .await
                .unwrap();
            assert!(score.is_some(), "{u} {t}: a token without its due entry");
        }
    }
    let credited: Option<String> = redis.hget(st.key("u0", "act"), "t3").await.unwrap();
    assert_eq!(
        credited.as_deref(),
        Some("!sealed"),
        "credited, never pending"
    );
    for u in [lone.as_str(), "u-typed"] {
        assert_eq!(
            stored.get(u),
            None,
            "{u}: stored past a key of another type"
        );
        assert_eq!(capped.get(u), None, "{u}");
    }
    assert!(
        st.list(&lone, "act").await.unwrap().is_empty(),
        "no token without its entry"
    );
    let _: () = redis.del(st.due_key(st.due_shard(&lone))).await.unwrap();
}

/// A caller whose deadline passes while its call carries other callers' writes does not
/// fail them: the call runs to its end on its own task. One call slot, Redis hung: X's
/// lone write holds the slot and X gives up; Z, next in line, takes itself and ten
/// more writers into one call and gives up too; when Redis resumes, the ten are
/// answered stored at their first attempt (none failed and retried), and every token is
/// there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_giving_up_never_fails_the_writes_its_call_carries() {
    let redis = PrivateRedis::start();
    let st = Arc::new(
        TokenStore::connect(StoreConfig {
            pool_size: 1,
            write_wait_ms: 20_000,
            ..cfg(redis.url.clone(), WriteMode::Direct, 500)
        })
        .await
        .unwrap(),
    );
    redis.signal("-STOP");
    let give_up = |trade: &'static str, after_ms: u64| {
        let st = st.clone();
        tokio::spawn(async move {
            tokio::time::timeout(
                Duration::from_millis(after_ms),
                submit(&st, "u-quick", trade, "s"),
            )
            .await
        })
    };
    let x = give_up("tx", 200);
    // X's call holds the one slot, then Z waits first in line for it.
    reward_testkit::eventually(
        Duration::from_secs(30),
        "X's write sent to the hung Redis",
        async || n(&st.stats().direct_calls) >= 1,
    )
    .await;
    let z = give_up("tz", 600);
    reward_testkit::eventually(
        Duration::from_secs(30),
        "Z's write waiting behind X's",
        async || n(&st.stats().pending) >= 2,
    )
    .await;
    let patient: Vec<_> = (0..10)
        .map(|i| {
            let st = st.clone();
            tokio::spawn(async move { submit(&st, &format!("u{i}"), &format!("t{i}"), "s").await })
        })
        .collect();
    assert!(x.await.unwrap().is_err(), "X gave up");
    assert!(z.await.unwrap().is_err(), "Z gave up");
    redis.signal("-CONT");
    for (i, p) in patient.into_iter().enumerate() {
        let r = p.await.unwrap();
        assert!(matches!(r, Ok(Submitted::Stored)), "writer {i}: {r:?}");
        assert_eq!(
            st.get(&format!("u{i}"), "act", &format!("t{i}"))
                .await
                .unwrap()
                .as_deref(),
            Some("s")
        );
    }
    assert_eq!(
        n(&st.stats().failed),
        0,
        "a carried write failed and was retried"
    );
    // X's and Z's writes were handed to the background when they gave up: they land.
    assert_eq!(st.flush(Duration::from_secs(30)).await, 0);
    assert_eq!(st.list("u-quick", "act").await.unwrap().len(), 2);
}

/// On a single Redis a direct write is one script call: its due entry and its token
/// land together, or (a due shard Redis refuses, here a key of another type) neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_write_stores_its_due_entry_with_its_token_or_neither() {
    use fred::interfaces::{KeysInterface, SortedSetsInterface};
    let st = TokenStore::connect(StoreConfig {
        write_wait_ms: 300,
        ..cfg(common::stack().redis_url, WriteMode::Direct, 500)
    })
    .await
    .unwrap();
    let r = submit(&st, "u-both", "t1", "s1").await;
    assert!(matches!(r, Ok(Submitted::Stored)), "{r:?}");
    let due = st.due_key(st.due_shard("u-both"));
    let score: Option<f64> = st
        .pool()
        .next()
        .zscore(&due, st.due_member("u-both", "act", "t1"))
        .await
        .unwrap();
    assert!(score.is_some(), "the due entry is there");
    assert_eq!(
        st.get("u-both", "act", "t1").await.unwrap().as_deref(),
        Some("s1")
    );

    // A user whose due shard holds a string: the entry cannot be added, so the token
    // is not stored either and the call is refused.
    let user = (0..1_000)
        .map(|i| format!("u-wrong{i}"))
        .find(|u| st.due_shard(u) != st.due_shard("u-both"))
        .unwrap();
    let wrong = st.due_key(st.due_shard(&user));
    let saved: Vec<(String, f64)> = st
        .pool()
        .next()
        .zrange(&wrong, 0, -1, None, false, None, true)
        .await
        .unwrap();
    let _: () = st.pool().next().del(&wrong).await.unwrap();
    let _: () = st
        .pool()
        .next()
        .set(&wrong, "not a zset", None, None, false)
        .await
        .unwrap();
    let r = submit(&st, &user, "t2", "s2").await;
    let _: () = st.pool().next().del(&wrong).await.unwrap();
    for (member, score) in saved {
        let _: () = st
            .pool()
            .next()
            .zadd(&wrong, None, None, false, false, (score, member))
            .await
            .unwrap();
    }
    assert!(r.is_err(), "refused: {r:?}");
    assert_eq!(
        st.get(&user, "act", "t2").await.unwrap(),
        None,
        "no token without its entry"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_are_given_up_after_retry_for_and_counted() {
    let redis = PrivateRedis::start();
    let st = start_store(StoreConfig {
        timeout_ms: 200,
        retry_for_ms: 1_000,
        ..cfg(redis.url.clone(), WriteMode::Deferred, 500)
    })
    .await;
    redis.signal("-STOP");
    for i in 0..20u32 {
        submit(&st, "u1", &format!("t{i}"), "s").await.unwrap();
    }
    // Every write's retries end within retry_for plus one last attempt.
    assert_eq!(st.flush(Duration::from_secs(20)).await, 0);
    redis.signal("-CONT");
    let stats = st.stats();
    assert_eq!((n(&stats.unstored), n(&stats.written)), (20, 0));
    assert!(n(&stats.retried) >= 20, "each was retried at least once");
    // Given up means "not confirmed", not "certainly absent": an attempt that timed
    // out was still in the socket, and the resumed server may run it. Whatever landed
    // is one of the writes sent, with its own value.
    for (trade, sealed) in st.list("u1", "act").await.unwrap() {
        let i: u32 = trade[1..].parse().unwrap();
        assert!(i < 20 && sealed == "s", "{trade} = {sealed}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_landing_after_its_credit_does_not_list_the_token_again() {
    for mode in [WriteMode::Direct, WriteMode::Deferred] {
        let st = store(mode, 500).await;
        submit(&st, "u1", "t1", "sealed1").await.unwrap();
        assert_eq!(st.flush(Duration::from_secs(30)).await, 0);
        // The reward service credits the reward and moves its token.
        let pool = st.pool().next();
        let hash = st.key("u1", "act");
        let _: () = fred::interfaces::HashesInterface::hset(pool, &hash, ("t1", "!sealed1"))
            .await
            .unwrap();
        // A retried or late write of the same token arrives afterwards.
        let r = submit(&st, "u1", "t1", "sealed1").await;
        assert!(r.is_ok(), "{mode:?}: {r:?}");
        assert_eq!(st.flush(Duration::from_secs(30)).await, 0);
        assert!(
            st.list("u1", "act").await.unwrap().is_empty(),
            "{mode:?}: a credited token is pending again"
        );
        let raw: Option<String> = fred::interfaces::HashesInterface::hget(pool, &hash, "t1")
            .await
            .unwrap();
        assert_eq!(
            raw.as_deref(),
            Some("!sealed1"),
            "{mode:?}: the credit was overwritten"
        );
        assert_eq!(n(&st.stats().unstored), 0, "{mode:?}");
    }
}

/// Every write that adds a token re-arms its hash's TTL (so no token expires sooner
/// than `ttl_secs` after its write, whatever else the hash holds); a retried write that
/// only replaces its token leaves the TTL alone. Both the single script (direct) and
/// the writer's batch script (deferred).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_added_token_rearms_its_hash_ttl_and_a_rewrite_does_not() {
    use fred::interfaces::KeysInterface;
    for mode in [WriteMode::Direct, WriteMode::Deferred] {
        let st = store(mode, 500).await;
        let pool = st.pool().next();
        let key = st.key("u1", "act");
        let full = i64::try_from(StoreConfig::default().ttl_secs).unwrap();
        let write = |trade: &'static str| {
            let st = &st;
            async move {
                submit(st, "u1", trade, "sealed").await.unwrap();
                assert_eq!(st.flush(Duration::from_secs(30)).await, 0);
            }
        };
        write("t0").await;
        let ttl: i64 = pool.ttl(&key).await.unwrap();
        assert!(ttl > full - 60, "{mode:?}: a new hash's TTL is {ttl}");
        // Shorten it by hand: a rewrite of t0 (a retry) leaves it short...
        let _: () = pool.expire(&key, 1000, None).await.unwrap();
        write("t0").await;
        let ttl: i64 = pool.ttl(&key).await.unwrap();
        assert!(
            ttl <= 1000 && ttl > 0,
            "{mode:?}: a rewrite re-armed the TTL: {ttl}"
        );
        // ...and a new token re-arms it, so t1 lives its full TTL.
        write("t1").await;
        let ttl: i64 = pool.ttl(&key).await.unwrap();
        assert!(
            ttl > full - 60,
            "{mode:?}: a new token did not re-arm the TTL: {ttl}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_due_shard_pin_is_proven_from_the_index_before_a_start() {
    use reward_runtime::keyspace::LayoutProof;
    let redis_url = common::stack().redis_url;
    let base = StoreConfig {
        due_shards: 8,
        ..cfg(redis_url.clone(), WriteMode::Direct, 100)
    };
    let st = TokenStore::connect(base.clone()).await.unwrap();
    // 60 users' rewards: their due entries spread over the 8 shards.
    for u in 0..60 {
        let r = submit(&st, &format!("u{u}"), &format!("t{u}"), "sealed").await;
        assert!(matches!(r, Ok(Submitted::Stored)), "{r:?}");
    }
    let client = st.pool().next().clone();
    let pin = sdk::store::keys::due_shards_pin_key(&base.key_prefix);
    let gone: i64 = fred::prelude::KeysInterface::del(&client, &pin)
        .await
        .unwrap();
    assert_eq!(gone, 1);
    // Another count is refused by the index itself (shards 4..7 do not exist at 4;
    // entries of 8 shards sit in the wrong shard at 16), and writes no pin.
    for other in [4, 16] {
        let again = StoreConfig {
            due_shards: other,
            ..base.clone()
        };
        match TokenStore::connect(again).await {
            Err(e @ StoreError::DueLayoutDiffers { .. }) => {
                let text = e.to_string();
                assert!(text.contains("lost its shard pin"), "{text}");
            }
            other => panic!("{other:?}"),
        }
        let pinned: Option<String> = fred::prelude::KeysInterface::get(&client, &pin)
            .await
            .unwrap();
        assert_eq!(pinned, None, "a refused start pins nothing");
    }
    // The index is read whole (every possible index key, by name): a complete answer
    // however many other keys the Redis holds.
    let proof = sdk::store::layout::prove(&client, &base.key_prefix, 8)
        .await
        .unwrap();
    assert!(
        matches!(proof, LayoutProof::Agrees { complete: true, samples } if samples >= 32),
        "{proof:?}"
    );
    let fresh = sdk::store::layout::prove(&client, &common::unique("fresh"), 8)
        .await
        .unwrap();
    assert_eq!(fresh, LayoutProof::Empty);
    // The index's own count starts, and pins it again.
    let back = TokenStore::connect(base.clone()).await.unwrap();
    let pinned: Option<String> = fred::prelude::KeysInterface::get(&client, &pin)
        .await
        .unwrap();
    assert_eq!(pinned.as_deref(), Some("8"));
    drop(back);
    // The operator's repair walks everything, refuses another count, pins the right one.
    let _: i64 = fred::prelude::KeysInterface::del(&client, &pin)
        .await
        .unwrap();
    let refused = sdk::store::layout::restore_pin(&client, &base.key_prefix, 16, |_| {})
        .await
        .unwrap();
    assert!(
        matches!(refused, LayoutProof::Differs { .. }),
        "{refused:?}"
    );
    let restored = sdk::store::layout::restore_pin(&client, &base.key_prefix, 8, |_| {})
        .await
        .unwrap();
    assert!(
        matches!(restored, LayoutProof::Agrees { complete: true, samples } if samples >= 32),
        "{restored:?}"
    );
    let pinned: Option<String> = fred::prelude::KeysInterface::get(&client, &pin)
        .await
        .unwrap();
    assert_eq!(pinned.as_deref(), Some("8"));
}

/// The service's move of credited tokens (`life::MOVE_MANY_LUA`), as the reward
/// service runs it, with its own TTL.
async fn move_tokens(st: &TokenStore, user: &str, trades: &[&str], ttl: i64) -> Vec<i64> {
    let client = st.pool().next();
    let script = reward_runtime::script::Script::load(client, sdk::store::life::MOVE_MANY_LUA)
        .await
        .unwrap();
    let key = st.key(user, "act");
    script
        .eval(client, || {
            let mut args = vec![fred::types::Value::from(ttl)];
            args.extend(trades.iter().map(|t| fred::types::Value::from(*t)));
            (vec![key.clone(); trades.len()], args)
        })
        .await
        .unwrap()
}

/// The cap counts tokens waiting for their credit: a credited token frees its place,
/// in both the single and the many-writes script, however many credited tokens the
/// hash holds past the cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credited_token_frees_its_place_under_the_cap() {
    for mode in [WriteMode::Direct, WriteMode::Batched] {
        let st = store(mode, 2).await;
        for round in 0..3 {
            let (a, b) = (format!("r{round}a"), format!("r{round}b"));
            submit(&st, "u1", &a, "s").await.unwrap();
            submit(&st, "u1", &b, "s").await.unwrap();
            let over = submit(&st, "u1", &format!("r{round}c"), "s").await;
            assert!(
                matches!(over, Err(StoreError::CapReached { cap: 2 })),
                "{mode:?} round {round}: {over:?}"
            );
            assert_eq!(move_tokens(&st, "u1", &[&a, &b], 3600).await, vec![1, 1]);
        }
        assert!(st.list("u1", "act").await.unwrap().is_empty(), "{mode:?}");
    }
}

/// A credit that comes before its token leaves a mark: on a new hash the mark gives it
/// a TTL (else the key would live for ever), and on a hash that has a longer one it
/// never shortens it (the service's TTL may be shorter than the SDK's, and the hash
/// holds tokens still waiting for their credit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mark_gives_a_new_hash_a_ttl_and_never_shortens_one() {
    use fred::interfaces::KeysInterface;
    let st = store(WriteMode::Direct, 10).await;
    let client = st.pool().next();
    assert_eq!(move_tokens(&st, "fresh", &["t1"], 3600).await, vec![0]);
    let ttl: i64 = client.ttl(st.key("fresh", "act")).await.unwrap();
    assert!(
        (3500..=3600).contains(&ttl),
        "a mark's new hash has TTL {ttl}"
    );
    // A pending token under the SDK's week-long TTL, then a mark with a 60 s TTL.
    submit(&st, "u2", "pending", "s").await.unwrap();
    assert_eq!(move_tokens(&st, "u2", &["early"], 60).await, vec![0]);
    let ttl: i64 = client.ttl(st.key("u2", "act")).await.unwrap();
    assert!(ttl > 3600, "the mark cut the hash's TTL to {ttl}");
    // The late write of the marked token lands credited, never pending.
    submit(&st, "u2", "early", "late").await.unwrap();
    assert_eq!(
        st.list("u2", "act")
            .await
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        vec!["pending"]
    );
}

/// A direct write that races its reward's event (what `send_reward` does once Redis
/// has not answered within `queue_after_ms`) is never given up when its wait passes:
/// it answers `Retrying` and goes on in the background until Redis answers, while a
/// plain direct write is refused. Without it, a reward answered from the queue could
/// keep no token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_racing_write_outlasting_its_wait_goes_on_until_it_lands() {
    let redis = PrivateRedis::start();
    let st = start_store(StoreConfig {
        timeout_ms: 200,
        write_wait_ms: 300,
        max_pending: 100,
        ..cfg(redis.url.clone(), WriteMode::Direct, 500)
    })
    .await;
    redis.signal("-STOP");
    let held = st.hold(Duration::from_secs(10)).await.unwrap();
    let r = st
        .submit_racing(held, "u1", "act", "t-race", "sealed".into())
        .await;
    assert!(matches!(r, Ok(Submitted::Retrying)), "{r:?}");
    let plain = submit(&st, "u1", "t-plain", "s").await;
    assert!(matches!(plain, Err(StoreError::Redis(_))), "{plain:?}");
    redis.signal("-CONT");
    reward_testkit::eventually(
        Duration::from_secs(60),
        "the racing write stored once Redis answers",
        async || {
            let held = st.list("u1", "act").await.map_err(|e| e.to_string())?;
            if held.iter().any(|(t, _)| t == "t-race") {
                Ok(())
            } else {
                Err(format!("{held:?}"))
            }
        },
    )
    .await;
    assert_eq!(n(&st.stats().unstored), 0, "nothing given up");
}
