//! Compensation from the token store against the local stack's Redis (`ops/stack up`;
//! fails, never skips): tokens stored whose events never came are granted once, by any
//! number of sweepers; a reward a consumer is crediting now is left to it; a write
//! that never landed is counted, not granted; a tampered token is refused.
//!
//! Each test builds a reward service (`server::build`) with the sweeper off and runs
//! passes itself, so nothing here waits on a timer it does not control.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::service_config;
use fred::prelude::*;
use proto::v1::RewardToken;
use reward_service::claim::{Claim, Grant};
use reward_service::downstream::Ledger;
use reward_service::service::Service;
use reward_service::sweeper::{SweepConfig, Sweeper};

/// Sweeper settings for tests: anything older than 1 ms is due; a write that has not
/// landed 400 ms after its index entry is taken as never stored.
fn quick() -> SweepConfig {
    SweepConfig {
        enabled: false,
        grace_ms: 1,
        interval_ms: 50,
        batch: 50,
        lease_ms: 5_000,
        retry_ms: 1,
        unstored_after_ms: 400,
    }
}

struct Setup {
    service: Service,
    ledger: Ledger,
    tag: String,
    _dir: std::path::PathBuf,
}

async fn setup() -> Setup {
    let tag = reward_testkit::unique("sw");
    let dir = reward_testkit::temp_dir("sweeper");
    let cfg = service_config(&tag, &dir, 1_000_000, "[sweeper]\nenabled = false\n");
    let service = reward_service::server::build(&cfg).await.unwrap();
    let ledger = Ledger::connect(
        &cfg.redis_url,
        &format!("ledger-{tag}"),
        &Default::default(),
    )
    .await
    .unwrap();
    Setup {
        service,
        ledger,
        tag,
        _dir: dir,
    }
}

fn token(trade: &str, user: &str, amount: i64) -> RewardToken {
    RewardToken {
        trade_no: trade.into(),
        user_id: user.into(),
        activity_id: "cny".into(),
        scene_id: "rain".into(),
        reward_type: "cash".into(),
        amount,
        grant_time_ms: reward_runtime::clock::now_ms(),
        ..Default::default()
    }
}

/// Stores a token as `send_reward` does (due index entry, then the token), with no
/// event anywhere: the reward a dead activity service left behind.
async fn store(s: &Setup, t: &RewardToken) {
    let sealed = s.service.sdk().codec().seal(t).unwrap();
    s.service
        .sdk()
        .store()
        .put(&t.user_id, &t.activity_id, &t.trade_no, &sealed)
        .await
        .unwrap();
}

/// Index entries left in every shard.
async fn due_left(s: &Setup) -> u64 {
    let store = s.service.sdk().store();
    let mut n = 0;
    for shard in 0..store.due_shards() {
        let c: u64 = store
            .pool()
            .next()
            .zcard(store.due_key(shard))
            .await
            .unwrap();
        n += c;
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_tokens_without_events_are_granted_once_by_racing_sweepers() {
    let s = setup().await;
    let users: Vec<String> = (0..40).map(|i| format!("{}u{i}", s.tag)).collect();
    for (i, u) in users.iter().enumerate() {
        store(&s, &token(&format!("{}:t{i}", s.tag), u, 7)).await;
    }
    assert_eq!(due_left(&s).await, 40);
    // Time is the subject: the entries must be older than the sweeper's 1 ms grace.
    tokio::time::sleep(Duration::from_millis(5)).await;
    // Three sweepers race over the same shards: each shard is leased by one of them.
    let sweepers: Vec<Sweeper> = (0..3)
        .map(|_| Sweeper::new(s.service.clone(), quick()))
        .collect();
    let passes = futures_util::future::join_all(sweepers.iter().map(Sweeper::pass)).await;
    let granted: u64 = passes.iter().map(|p| p.get("granted")).sum();
    let again = sweepers[0].pass().await;
    assert_eq!(granted + again.get("granted"), 40, "{passes:?} {again:?}");
    for u in &users {
        assert_eq!(s.ledger.balance(u, "cash").await.unwrap(), 7, "{u}");
    }
    assert_eq!(s.ledger.double_credits(), 0);
    assert_eq!(due_left(&s).await, 0, "every entry ended");
    // Nothing left to do: a further pass grants nothing.
    let idle = sweepers[1].pass().await;
    assert_eq!(idle.get("granted") + idle.get("duplicate"), 0, "{idle:?}");
    // The tokens moved to the credited hashes like any credited reward's.
    let held = s.service.tokens().held(&users[0], "cny").await.unwrap();
    assert!(
        held.pending.is_empty() && held.credited.len() == 1,
        "{held:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reward_being_credited_now_is_left_to_its_owner() {
    let s = setup().await;
    let user = format!("{}busy", s.tag);
    let t = token(&format!("{}:busy", s.tag), &user, 5);
    store(&s, &t).await;
    // A consumer's grant holds the claim (live lease) but has not credited yet.
    let g = Grant {
        scene: "cny/rain".into(),
        activity_id: "cny".into(),
        trade_no: t.trade_no.clone(),
        user_id: user.clone(),
        reward_type: "cash".into(),
        amount: 5,
    };
    let claims = s.service.granter().claims();
    let claim_id = match claims.claim(&g).await.unwrap() {
        Claim::Claimed { claim_id, .. } => claim_id,
        other => panic!("{other:?}"),
    };
    // Time is the subject: the entries must be older than the sweeper's 1 ms grace.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let sweeper = Sweeper::new(s.service.clone(), quick());
    let p = sweeper.pass().await;
    assert_eq!(p.get("kept"), 1, "{p:?}");
    assert_eq!(s.ledger.balance(&user, "cash").await.unwrap(), 0);
    assert_eq!(due_left(&s).await, 1, "kept for a later pass");
    // The owner gives its claim back without crediting: the next pass credits.
    claims.release(&g, &claim_id).await.unwrap();
    // Time is the subject: the kept entry's 1 ms retry delay must pass.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let p = sweeper.pass().await;
    assert_eq!(p.get("granted"), 1, "{p:?}");
    assert_eq!(s.ledger.balance(&user, "cash").await.unwrap(), 5);
    assert_eq!(due_left(&s).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_never_landed_is_counted_and_a_tampered_token_refused() {
    let s = setup().await;
    let store_ = s.service.sdk().store();
    // An index entry whose token write never landed (the host died in between).
    let lost_user = format!("{}lost", s.tag);
    let member = store_.due_member(&lost_user, "cny", "lost-trade");
    let key = store_.due_key(store_.due_shard(&lost_user));
    let at = reward_runtime::clock::now_ms() as f64;
    let _: i64 = store_
        .pool()
        .next()
        .zadd(&key, None, None, false, false, (at, member.as_str()))
        .await
        .unwrap();
    // A stored token someone altered.
    let bad_user = format!("{}bad", s.tag);
    let sealed = s
        .service
        .sdk()
        .codec()
        .seal(&token(&format!("{}:bad", s.tag), &bad_user, 3))
        .unwrap();
    let mut tampered = sealed.into_bytes();
    let mid = tampered.len() / 2;
    tampered[mid] = if tampered[mid] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    store_
        .put(&bad_user, "cny", &format!("{}:bad", s.tag), &tampered)
        .await
        .unwrap();
    // Time is the subject: the entries must be older than the sweeper's 1 ms grace.
    tokio::time::sleep(Duration::from_millis(5)).await;
    // A wide `unstored_after_ms`, so the first pass sees the entry young however slow
    // a busy machine makes the set-up above.
    let sweeper = Sweeper::new(
        s.service.clone(),
        SweepConfig {
            unstored_after_ms: 60_000,
            ..quick()
        },
    );
    let first = sweeper.pass().await;
    assert_eq!(first.get("not_yet_stored"), 1, "{first:?}");
    assert_eq!(first.get("illegal"), 1, "{first:?}");
    assert_eq!(first.get("granted"), 0, "{first:?}");
    // Once first seen longer ago than `unstored_after_ms` (the sweeper keeps the
    // first sighting in the shard's `:seen` hash), the entry ends, counted.
    let long_ago = reward_runtime::clock::now_ms() - 61_000;
    let _: i64 = store_
        .pool()
        .next()
        .hset(format!("{key}:seen"), (member.as_str(), long_ago))
        .await
        .unwrap();
    let later = sweeper.pass().await;
    assert_eq!(later.get("never_stored"), 1, "{later:?}");
    assert_eq!(due_left(&s).await, 0);
    assert_eq!(s.ledger.balance(&bad_user, "cash").await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_token_is_never_credited_nor_listed_as_pending() {
    let s = setup().await;
    let user = format!("{}exp", s.tag);
    let now = reward_runtime::clock::now_ms();
    // Two stored tokens without events: one past its expiry, one still valid.
    let expired = RewardToken {
        expires_at_ms: now - 1_000,
        ..token(&format!("{}:exp", s.tag), &user, 7)
    };
    let live = RewardToken {
        expires_at_ms: now + 3_600_000,
        ..token(&format!("{}:live", s.tag), &user, 5)
    };
    store(&s, &expired).await;
    store(&s, &live).await;
    // The wallet lists the expired one as expired, never as pending money.
    let page = s.service.rewards(&user, "cny", &[]).await.unwrap();
    let pending: Vec<&str> = page.pending.iter().map(|t| t.trade_no.as_str()).collect();
    assert_eq!(pending, [live.trade_no.as_str()]);
    assert_eq!(
        page.expired_trade_nos,
        std::slice::from_ref(&expired.trade_no)
    );
    assert_eq!(page.balance["cash"], (5, 0));
    // Time is the subject: the entries must be older than the sweeper's 1 ms grace.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let sweeper = Sweeper::new(s.service.clone(), quick());
    let pass = sweeper.pass().await;
    assert_eq!(pass.get("expired"), 1, "{pass:?}");
    assert_eq!(pass.get("granted"), 1, "{pass:?}");
    assert_eq!(due_left(&s).await, 0, "both entries ended");
    assert_eq!(
        s.ledger.balance(&user, "cash").await.unwrap(),
        5,
        "only the live one"
    );
    // Nor does any other path credit it: a withdrawal answers it expired, and a grant
    // of its event is refused EXPIRED before any claim.
    let sealed = s.service.sdk().codec().seal(&expired).unwrap();
    let w = s.service.withdraw(&user, "cny", &[sealed]).await.unwrap();
    assert_eq!(w[0].0.validity, proto::v1::TokenValidity::Expired);
    assert!(w[0].1.is_none(), "{w:?}");
    let r = s
        .service
        .grant(&reward_service::service::event_of(&expired))
        .await;
    assert_eq!(
        (r.outcome, r.error_code.as_str()),
        (proto::v1::GrantOutcome::Invalid as i32, "EXPIRED"),
        "{r:?}"
    );
    assert_eq!(s.ledger.balance(&user, "cash").await.unwrap(), 5);
    assert!(
        s.service
            .granter()
            .claims()
            .record(&expired.trade_no)
            .await
            .unwrap()
            .is_none(),
        "no record: refused before the claim"
    );
}

const CHILD_ENV: &str = "SWEEPER_SDK_HOST_CHILD";
const HOST_REWARDS: u64 = 300;

/// The activity service's process: an SDK whose brokers are a closed port (and whose
/// spool would take over only after 10 minutes), so every event stays in its memory
/// while its tokens are stored. It says how many are stored, then waits to be killed.
async fn sdk_host(prefix: &str, keys: &str, activity: &str) {
    let s = reward_testkit::stack();
    let spool = std::env::temp_dir().join(reward_testkit::unique("host-spool-"));
    let text = reward_testkit::sdk_configs::brokers_down(
        &s.redis_url,
        prefix,
        "",
        &spool,
        "after_ms = 600000",
    );
    let cfg = sdk::config::SdkConfig::from_toml_str(&text).unwrap();
    let ring = sdk::token::KeyRing::from_file(std::path::Path::new(keys), None).unwrap();
    let sdk = sdk::Sdk::builder(cfg).key_ring(ring).start().await.unwrap();
    let rain = sdk::request::RedEnvelopeRain::new(activity, "cash");
    for i in 0..HOST_REWARDS {
        let user = sdk::request::User::new(format!("h{i}"));
        sdk.send_reward(rain.grab(&user, 1, 3)).await.unwrap();
    }
    assert_eq!(sdk.store().flush(Duration::from_secs(30)).await, 0);
    println!(
        "STORED {} DELIVERED {}",
        sdk.store()
            .stats()
            .written
            .load(std::sync::atomic::Ordering::Relaxed),
        sdk.stats().delivered
    );
    // Time is the subject: alive, holding its events, until the parent kills it.
    tokio::time::sleep(Duration::from_secs(600)).await;
}

/// The test of docs/design.md's first promise for a lost host: the process that
/// called `send_reward` is killed with SIGKILL while every event is still in its
/// memory. Its tokens are stored; once they are past the grace period the sweeper
/// credits each exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_sdk_host_loses_no_stored_reward() {
    if let Ok(args) = std::env::var(CHILD_ENV) {
        let mut parts = args.splitn(3, ' ');
        let (prefix, keys, activity) = (
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
        );
        sdk_host(prefix, keys, activity).await;
        return;
    }
    let s = setup().await;
    let store = s.service.sdk().store();
    let prefix = store.key("x", "y");
    let prefix = prefix.split(":{").next().unwrap().to_string();
    let keys = s._dir.join("keys");
    // The scene budgeted by the test service is cny/rain.
    let activity = "cny";
    // SIGKILL once it says its tokens are stored: the events in its memory are gone.
    let child_env = format!("{prefix} {} {activity}", keys.display());
    let line = tokio::task::spawn_blocking(move || {
        reward_testkit::kill_self_at(
            "a_killed_sdk_host_loses_no_stored_reward",
            &[(CHILD_ENV, child_env.as_str())],
            "STORED",
        )
    })
    .await
    .unwrap();
    assert_eq!(
        line.as_deref(),
        Some(format!("STORED {HOST_REWARDS} DELIVERED 0").as_str()),
        "the host did not store every token with every event still in memory"
    );

    // Sweepers with a 1 ms grace: passes until nothing is left (bounded).
    let sweeper = Sweeper::new(s.service.clone(), quick());
    let mut granted = 0;
    reward_testkit::eventually(
        Duration::from_secs(60),
        "every due entry ended by the sweeper",
        async || {
            let left = due_left(&s).await;
            if left == 0 {
                return Ok(());
            }
            granted += sweeper.pass().await.get("granted");
            Err(format!("{left} entries left, {granted} granted"))
        },
    )
    .await;
    assert_eq!(granted, HOST_REWARDS);
    for i in 0..HOST_REWARDS {
        let user = format!("h{i}");
        assert_eq!(s.ledger.balance(&user, "cash").await.unwrap(), 3, "{user}");
        let held = s.service.tokens().held(&user, activity).await.unwrap();
        assert!(held.pending.is_empty(), "{user}: {held:?}");
    }
    assert_eq!(s.ledger.double_credits(), 0);
}
