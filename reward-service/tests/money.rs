//! Money safety against the real Redis of the local stack (`ops/stack up`; fails,
//! never skips): a credit whose answer is lost is resolved, never sent as a second
//! effective credit; takeovers resolve the earlier owner first; one trade number is
//! one grant; budgets and shard counts cannot be reset by config.
//!
//! The ledger behind every test downstream here is strict (it does not honour the
//! idempotency key), so any second effective credit shows as a double-credit
//! incident and in the balance.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{after_hold, claims, grant, redis_url};
use reward_service::claim::{
    Claim, ClaimConfig, ClaimError, ClaimState, Claims, Grant, MAX_AMOUNT,
};
use reward_service::downstream::{
    Contract, Credit, CreditError, CreditFuture, Downstream, ErrorCode, Ledger, StatusFuture,
};
use reward_service::grant::{Granter, Outcome};

/// A downstream whose first `lose` answers are lost after the ledger credited:
/// the caller sees a timeout although the money moved.
#[derive(Debug)]
struct LosesAnswers {
    ledger: Ledger,
    lose: AtomicUsize,
    calls: AtomicUsize,
    contract: Contract,
}

impl LosesAnswers {
    async fn new(lose: usize, honours_key: bool, status: bool) -> (Arc<Self>, Ledger) {
        let strict = strict_ledger().await;
        let d = Arc::new(Self {
            ledger: strict.clone().honouring_key(honours_key),
            lose: AtomicUsize::new(lose),
            calls: AtomicUsize::new(0),
            contract: Contract {
                honours_key,
                status,
                max_call_ms: 100,
            },
        });
        (d, strict)
    }
}

impl Downstream for LosesAnswers {
    fn credit<'a>(&'a self, c: &'a Credit) -> CreditFuture<'a> {
        Box::pin(async move {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let receipt = self.ledger.credit(c).await?;
            let lost = self
                .lose
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            if lost {
                return Err(CreditError::new(
                    ErrorCode::Timeout,
                    "answer lost after the credit",
                ));
            }
            Ok(receipt)
        })
    }

    fn contract(&self) -> Contract {
        self.contract
    }

    fn status<'a>(&'a self, c: &'a Credit) -> StatusFuture<'a> {
        self.ledger.status(c)
    }
}

/// A strict ledger (it does not honour the key) under a fresh prefix.
async fn strict_ledger() -> Ledger {
    let prefix = format!("ledger-money-{:08x}", rand::random::<u32>());
    Ledger::connect(&redis_url(), &prefix, &HashMap::new())
        .await
        .unwrap()
}

fn archive() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("money-archive-{:08x}.jsonl", rand::random::<u32>()))
}

async fn granter_over(d: Arc<dyn Downstream>, c: Claims) -> Granter {
    Granter::new(c, HashMap::from([("cash".to_string(), d)]), archive())
}

/// A claim store (2 shards, 30 s lease) with a `rain` budget of 1 000 and a granter
/// crediting cash through `d`.
async fn rain(d: Arc<dyn Downstream>) -> (Claims, Granter) {
    let c = claims(2, 30_000).await;
    c.set_budget("rain", 1_000).await.unwrap();
    (c.clone(), granter_over(d, c).await)
}

/// Longer than the in-doubt hold of the test downstreams (100 ms call + 1 s margin).
const AFTER_HOLD: Duration = Duration::from_millis(1_400);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_lost_after_the_credit_is_resolved_by_status_never_credited_twice() {
    // Twenty grants in one batch; the first ten answers are lost after crediting.
    let (d, strict) = LosesAnswers::new(10, false, true).await;
    let c = claims(4, 30_000).await;
    c.set_budget("rain", 10_000).await.unwrap();
    let g = granter_over(d.clone(), c.clone()).await;
    let grants: Vec<_> = (0..20)
        .map(|i| {
            let mut x = grant(&format!("rain:lost:{i}"), 5);
            x.user_id = format!("lost{i}");
            x
        })
        .collect();
    let first = g.grant_many(&grants).await;
    let in_doubt = first
        .iter()
        .filter(|o| matches!(o, Ok(Outcome::RetryLater { .. })))
        .count();
    assert_eq!(in_doubt, 10, "{first:?}");
    assert_eq!(c.in_doubt_count().await.unwrap(), 10);
    // While the hold lasts, nobody resolves (the first call could still land).
    let held = g.grant_many(&grants).await;
    assert_eq!(
        held.iter()
            .filter(|o| matches!(o, Ok(Outcome::RetryLater { .. })))
            .count(),
        10
    );
    // Delivered again once the holds are over: each resolved by status, none sent again.
    let second = reward_testkit::eventually(
        Duration::from_secs(30),
        "the in-doubt holds to end",
        async || {
            let again = g.grant_many(&grants).await;
            let held = again
                .iter()
                .filter(|o| matches!(o, Ok(Outcome::RetryLater { code: None, .. })))
                .count();
            if held == 0 {
                Ok(again)
            } else {
                Err(format!("{held} still held"))
            }
        },
    )
    .await;
    assert!(
        second
            .iter()
            .all(|o| matches!(o, Ok(Outcome::Granted { .. }))),
        "{second:?}"
    );
    assert_eq!(d.calls.load(Ordering::SeqCst), 20, "no credit sent twice");
    for i in 0..20 {
        let account = strict.account(&format!("lost{i}")).await.unwrap();
        assert_eq!(account.balances.get("cash"), Some(&5), "lost{i}");
        assert_eq!(account.double_credits, 0);
        let rec = c.record(&format!("rain:lost:{i}")).await.unwrap().unwrap();
        assert_eq!(rec.state, ClaimState::Granted);
    }
    assert_eq!(c.in_doubt_count().await.unwrap(), 0);
    assert_eq!(c.spent("rain").await.unwrap(), 100, "deducted once each");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downstream_that_honours_the_key_gets_the_same_key_again() {
    let (d, strict) = LosesAnswers::new(1, true, false).await;
    let (_, g) = rain(d.clone()).await;
    let r = grant("rain:key:1", 7);
    assert!(matches!(
        g.grant(&r).await.unwrap(),
        Outcome::RetryLater {
            code: Some(ErrorCode::Timeout),
            ..
        }
    ));
    assert!(matches!(
        after_hold(&g, &r).await,
        Outcome::Granted {
            duplicate: false,
            ..
        }
    ));
    assert_eq!(d.calls.load(Ordering::SeqCst), 2, "sent again, same key");
    let account = strict.account("u1").await.unwrap();
    assert_eq!(account.balances.get("cash"), Some(&7), "credited once");
    assert_eq!(account.double_credits, 0);
    assert_eq!(account.repeats, 1, "the repeat was answered, not credited");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_key_or_status_an_in_doubt_grant_is_held_for_an_operator() {
    let (d, strict) = LosesAnswers::new(1, false, false).await;
    let (c, g) = rain(d.clone()).await;
    let r = grant("rain:held:1", 9);
    assert!(matches!(
        g.grant(&r).await.unwrap(),
        Outcome::InDoubt { .. }
    ));
    // Time is the subject: past the hold, a delivery still finds it held.
    tokio::time::sleep(AFTER_HOLD).await;
    // Delivered again: still held, never sent again.
    assert!(matches!(
        g.grant(&r).await.unwrap(),
        Outcome::InDoubt { .. }
    ));
    assert_eq!(d.calls.load(Ordering::SeqCst), 1);
    let listed = c.in_doubt().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].trade_no, "rain:held:1");
    let rec = listed[0].record.clone().unwrap();
    assert_eq!((rec.state, rec.amount), (ClaimState::InDoubt, 9));
    assert_eq!(c.spent("rain").await.unwrap(), 9, "the deduction stands");
    // The operator checked the wallet: it was credited.
    assert!(
        c.settle_doubt("rain:held:1", Some("wallet-tx-1"))
            .await
            .unwrap()
    );
    assert_eq!(
        g.grant(&r).await.unwrap(),
        Outcome::Granted {
            receipt: "wallet-tx-1".into(),
            duplicate: true
        }
    );
    assert_eq!(c.in_doubt_count().await.unwrap(), 0);
    let account = strict.account("u1").await.unwrap();
    assert_eq!(account.balances.get("cash"), Some(&9));
    assert_eq!(account.double_credits, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_who_finds_it_uncredited_lets_the_next_delivery_credit_it() {
    // The downstream failed before crediting, but said nothing useful: in doubt.
    #[derive(Debug)]
    struct Silent(AtomicUsize, Ledger);
    impl Downstream for Silent {
        fn credit<'a>(&'a self, c: &'a Credit) -> CreditFuture<'a> {
            Box::pin(async move {
                if self.0.fetch_add(1, Ordering::SeqCst) == 0 {
                    return Err(CreditError::new(ErrorCode::Unavailable, "502"));
                }
                self.1.credit(c).await
            })
        }
    }
    let ledger = strict_ledger().await;
    let c = claims(2, 30_000).await;
    c.set_budget("rain", 1_000).await.unwrap();
    let g = granter_over(
        Arc::new(Silent(AtomicUsize::new(0), ledger.clone())),
        c.clone(),
    )
    .await;
    let r = grant("rain:op:1", 4);
    assert!(matches!(
        g.grant(&r).await.unwrap(),
        Outcome::InDoubt { .. }
    ));
    // The operator's verdict is taken once the hold is over (refused while it lasts).
    let settled = reward_testkit::eventually(
        Duration::from_secs(30),
        "the in-doubt hold to end",
        async || c.settle_doubt("rain:op:1", None).await,
    )
    .await;
    assert!(settled);
    assert!(matches!(
        g.grant(&r).await.unwrap(),
        Outcome::Granted {
            duplicate: false,
            ..
        }
    ));
    assert_eq!(ledger.balance("u1", "cash").await.unwrap(), 4);
    assert_eq!(c.spent("rain").await.unwrap(), 4, "deducted once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vanished_owner_is_resolved_before_a_takeover_credits() {
    let ledger = strict_ledger().await;
    let c = claims(2, 300).await;
    c.set_budget("rain", 1_000).await.unwrap();
    let g = granter_over(Arc::new(ledger.clone()), c.clone()).await;
    let r = grant("rain:vanish:1", 6);
    // An owner claims and credits, then dies before marking the record.
    let Claim::Claimed { .. } = c.claim(&r).await.unwrap() else {
        panic!("claim")
    };
    ledger.credit(&Credit::from(&r)).await.unwrap();
    // Once the lease ends, the takeover asks the ledger first: credited, so it records,
    // never credits.
    assert_eq!(
        after_hold(&g, &r).await,
        Outcome::Granted {
            receipt: "ledger:rain:vanish:1".into(),
            duplicate: false
        }
    );
    let account = ledger.account("u1").await.unwrap();
    assert_eq!(account.balances.get("cash"), Some(&6));
    assert_eq!(account.double_credits, 0);
    // An owner that died before crediting: the takeover finds it uncredited and credits.
    let r2 = grant("rain:vanish:2", 3);
    let Claim::Claimed { .. } = c.claim(&r2).await.unwrap() else {
        panic!("claim")
    };
    assert!(matches!(
        after_hold(&g, &r2).await,
        Outcome::Granted {
            duplicate: false,
            ..
        }
    ));
    assert_eq!(ledger.balance("u1", "cash").await.unwrap(), 9);
    assert_eq!(c.spent("rain").await.unwrap(), 9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trade_number_is_one_grant_across_scenes_and_activities() {
    let ledger = strict_ledger().await;
    let c = claims(4, 30_000).await;
    for scene in ["cny/rain", "cny/cards", "other/rain"] {
        c.set_budget(scene, 1_000).await.unwrap();
    }
    let g = granter_over(Arc::new(ledger.clone()), c.clone()).await;
    let mut r = grant("shared:1", 50);
    r.scene = "cny/rain".into();
    assert!(matches!(
        g.grant(&r).await.unwrap(),
        Outcome::Granted { .. }
    ));
    for (scene, activity) in [("cny/cards", "cny"), ("other/rain", "other")] {
        let again = reward_service::claim::Grant {
            scene: scene.into(),
            activity_id: activity.into(),
            ..r.clone()
        };
        assert_eq!(g.grant(&again).await.unwrap(), Outcome::Conflict, "{scene}");
        assert_eq!(
            g.grant_many(&[again]).await[0].as_ref().unwrap(),
            &Outcome::Conflict
        );
        assert_eq!(c.spent(scene).await.unwrap(), 0, "{scene} spent nothing");
    }
    assert_eq!(ledger.balance("u1", "cash").await.unwrap(), 50);
    assert_eq!(ledger.double_credits(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shard_count_is_fixed_at_first_use() {
    let first = claims(4, 30_000).await;
    let cfg = |shards| ClaimConfig {
        shards,
        ..first.config().clone()
    };
    first.set_budget("rain", 100).await.unwrap();
    let r = grant("rain:fixed:1", 10);
    let Claim::Claimed { claim_id, .. } = first.claim(&r).await.unwrap() else {
        panic!()
    };
    first.grant(&r, &claim_id, "ok").await.unwrap();
    match Claims::connect(&redis_url(), cfg(8)).await {
        Err(e @ ClaimError::ShardsChanged { .. }) => {
            let text = e.to_string();
            assert!(text.contains("was created with 4"), "{text}");
        }
        other => panic!("{other:?}"),
    }
    // The same count connects and still knows the grant.
    let again = Claims::connect(&redis_url(), cfg(4)).await.unwrap();
    assert!(matches!(
        again.claim(&r).await.unwrap(),
        Claim::Duplicate { .. }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_shard_pin_is_proven_from_the_data_before_a_start() {
    use reward_runtime::keyspace::LayoutProof;
    let first = claims(4, 30_000).await;
    let cfg = |shards| ClaimConfig {
        shards,
        ..first.config().clone()
    };
    let prefix = first.config().key_prefix.clone();
    first.set_budget("rain", 1_000).await.unwrap();
    let granted: Vec<Grant> = (0..40)
        .map(|i| grant(&format!("rain:pin:{i}"), 1))
        .collect();
    for g in &granted {
        let Claim::Claimed { claim_id, .. } = first.claim(g).await.unwrap() else {
            panic!("claim {}", g.trade_no)
        };
        first.grant(g, &claim_id, "ok").await.unwrap();
    }
    let redis =
        fred::prelude::Builder::from_config(fred::prelude::Config::from_url(&redis_url()).unwrap())
            .build()
            .unwrap();
    fred::prelude::ClientLike::init(&redis).await.unwrap();
    let meta = format!("{prefix}:meta");
    let del = |key: String| {
        let redis = redis.clone();
        async move {
            let n: i64 = fred::prelude::KeysInterface::del(&redis, &key)
                .await
                .unwrap();
            n
        }
    };
    assert_eq!(del(meta.clone()).await, 1, "the pin existed");
    // With the pin gone, another count is refused: first by the shard pins every start
    // writes in each shard's slot...
    for other in [2, 5, 8] {
        match Claims::connect(&redis_url(), cfg(other)).await {
            Err(e @ ClaimError::LayoutDiffers { .. }) => {
                let text = e.to_string();
                assert!(text.contains("lost its shard pin"), "{text}");
                assert!(text.contains("says the store has 4 shards"), "{text}");
            }
            other => panic!("{other:?}"),
        }
        let exists: i64 = fred::prelude::KeysInterface::exists(&redis, &meta)
            .await
            .unwrap();
        assert_eq!(exists, 0, "a refused start pins nothing");
    }
    // ...and with every shard pin gone too, by the data: keys in shards a 2-shard store
    // lacks, records in the wrong shard for 5 or 8. (A start reads a bounded number of
    // pages; read them all here, whatever else the stack's Redis holds.)
    for n in 0..4 {
        assert_eq!(
            del(format!("{prefix}:{{{prefix}.{n}}}:pin")).await,
            1,
            "pin {n}"
        );
    }
    for other in [2, 5, 8] {
        let proof = reward_service::claim::layout::prove(&redis, &prefix, other, u64::MAX)
            .await
            .unwrap();
        assert!(
            matches!(proof, LayoutProof::Differs { .. }),
            "{other}: {proof:?}"
        );
    }
    let proof = reward_service::claim::layout::prove(&redis, &prefix, 4, u64::MAX)
        .await
        .unwrap();
    assert!(
        matches!(proof, LayoutProof::Agrees { samples, complete: true } if samples >= 40),
        "{proof:?}"
    );
    // A walk with no budget decides nothing; the start's error names the repair.
    let undecided = reward_service::claim::layout::prove(&redis, &prefix, 4, 0)
        .await
        .unwrap();
    assert_eq!(undecided, LayoutProof::Empty, "nothing seen: taken as new");
    let e = ClaimError::LayoutUnproven {
        prefix: prefix.clone(),
        configured: 4,
        keys: 3,
        samples: 3,
    };
    assert!(
        e.to_string().contains(&format!(
            "reward-ctl layout claims --prefix {prefix} --shards 4"
        )),
        "{e}"
    );
    // The operator's repair refuses a wrong count and restores the right one, pins
    // included.
    let refused = reward_service::claim::layout::restore_pin(&redis, &prefix, 8, |_| {})
        .await
        .unwrap();
    assert!(
        matches!(refused, LayoutProof::Differs { .. }),
        "{refused:?}"
    );
    let restored = reward_service::claim::layout::restore_pin(&redis, &prefix, 4, |_| {})
        .await
        .unwrap();
    // (SCAN may hand a key over twice while Redis rehashes: at least every record.)
    assert!(
        matches!(restored, LayoutProof::Agrees { samples, complete: true } if samples >= 40),
        "{restored:?}"
    );
    let pin0: Option<String> =
        fred::prelude::KeysInterface::get(&redis, format!("{prefix}:{{{prefix}.0}}:pin"))
            .await
            .unwrap();
    assert_eq!(
        pin0.as_deref(),
        Some("4"),
        "the repair writes the shard pins too"
    );
    assert_eq!(del(meta.clone()).await, 1);
    // The store's own count starts without help, re-pins, and still knows every grant:
    // a redelivered event is a duplicate, not a second credit.
    let again = Claims::connect(&redis_url(), cfg(4)).await.unwrap();
    let pinned: Option<String> = fred::prelude::HashesInterface::hget(&redis, &meta, "shards")
        .await
        .unwrap();
    assert_eq!(pinned.as_deref(), Some("4"));
    for g in &granted {
        assert!(
            matches!(again.claim(g).await.unwrap(), Claim::Duplicate { .. }),
            "{}",
            g.trade_no
        );
    }
    assert_eq!(again.spent("rain").await.unwrap(), 40);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lowered_budget_is_never_overspent_and_a_restart_keeps_a_live_budget() {
    let c = claims(4, 30_000).await;
    c.set_budget("rain", 4_000).await.unwrap();
    // Spend 500 in one shard only (the case an even re-split got wrong).
    let in_shard_0: Vec<String> = (0..100_000)
        .map(|i| format!("rain:low:{i}"))
        .filter(|t| c.shard_of(t) == 0)
        .take(200)
        .collect();
    for t in in_shard_0.iter().take(50) {
        let Claim::Claimed { .. } = c.claim(&grant(t, 10)).await.unwrap() else {
            panic!("claim {t}")
        };
    }
    assert_eq!(c.spent("rain").await.unwrap(), 500);
    // Lowered to 600: 100 left, shared over the shards.
    assert_eq!(c.set_budget("rain", 600).await.unwrap(), 500);
    assert_eq!(c.budget("rain").await.unwrap(), 600);
    for i in 0..400 {
        let _ = c
            .claim(&grant(&format!("rain:after:{i}"), 10))
            .await
            .unwrap();
    }
    for t in in_shard_0.iter().skip(50) {
        let _ = c.claim(&grant(t, 10)).await.unwrap();
    }
    let spent = c.spent("rain").await.unwrap();
    assert!((560..=600).contains(&spent), "spent {spent} of 600");
    // Below what was spent: refused, nothing changed.
    match c.set_budget("rain", 100).await {
        Err(ClaimError::BelowSpent { spent: s, .. }) => assert_eq!(s, spent),
        other => panic!("{other:?}"),
    }
    assert_eq!(c.budget("rain").await.unwrap(), 600);
    // A restart with the config's budget does not overwrite the live one.
    assert!(!c.init_budget("rain", 4_000).await.unwrap());
    assert_eq!(c.budget("rain").await.unwrap(), 600);
    assert!(c.init_budget("fresh", 40).await.unwrap());
    assert_eq!(c.budget("fresh").await.unwrap(), 40);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amounts_at_the_edge_of_exact_arithmetic_compare_exactly() {
    let c = claims(1, 30_000).await;
    assert!(matches!(
        c.set_budget("rain", MAX_AMOUNT + 1).await,
        Err(ClaimError::Invalid(_))
    ));
    c.set_budget("rain", MAX_AMOUNT).await.unwrap();
    assert!(matches!(
        c.claim(&grant("rain:big:0", MAX_AMOUNT + 1)).await,
        Err(ClaimError::Invalid(_))
    ));
    assert!(matches!(
        c.claim(&grant("rain:big:1", MAX_AMOUNT - 1)).await.unwrap(),
        Claim::Claimed { .. }
    ));
    // 2^53 - 1 would round to 2^53 in a careless sum; 2 must not fit, 1 must.
    assert_eq!(
        c.claim(&grant("rain:big:2", 2)).await.unwrap(),
        Claim::BudgetExhausted
    );
    assert!(matches!(
        c.claim(&grant("rain:big:3", 1)).await.unwrap(),
        Claim::Claimed { .. }
    ));
    assert_eq!(c.spent("rain").await.unwrap(), MAX_AMOUNT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ledger_that_honours_the_key_refuses_a_reused_key_with_other_fields() {
    let prefix = format!("ledger-money-{:08x}", rand::random::<u32>());
    let ledger = Ledger::connect(&redis_url(), &prefix, &HashMap::new())
        .await
        .unwrap()
        .honouring_key(true);
    let c = Credit {
        trade_no: "k:1".into(),
        user_id: "kk".into(),
        reward_type: "cash".into(),
        amount: 5,
    };
    let first = ledger.credit(&c).await.unwrap();
    assert_eq!(ledger.credit(&c).await.unwrap(), first);
    let other = Credit {
        amount: 6,
        ..c.clone()
    };
    let e = ledger.credit(&other).await.unwrap_err();
    assert_eq!((e.code, e.in_doubt), (ErrorCode::Invalid, false));
    let account = ledger.account("kk").await.unwrap();
    assert_eq!(account.balances.get("cash"), Some(&5));
    assert_eq!((account.repeats, account.double_credits), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permanent_refusal_of_a_repeat_holds_the_grant_never_refunds_it() {
    // The first answer is lost after crediting; the repeat (same key) is refused for
    // good (say the account closed since). The first credit may stand: never failed,
    // never refunded, held for an operator.
    #[derive(Debug)]
    struct ClosesAfterFirst(AtomicUsize, Ledger);
    impl Downstream for ClosesAfterFirst {
        fn credit<'a>(&'a self, c: &'a Credit) -> CreditFuture<'a> {
            Box::pin(async move {
                if self.0.fetch_add(1, Ordering::SeqCst) == 0 {
                    self.1.credit(c).await?;
                    return Err(CreditError::new(ErrorCode::Timeout, "lost"));
                }
                Err(CreditError::not_credited(
                    ErrorCode::AccountClosed,
                    "closed",
                ))
            })
        }
        fn contract(&self) -> Contract {
            Contract {
                honours_key: true,
                status: false,
                max_call_ms: 100,
            }
        }
    }
    let ledger = strict_ledger().await;
    let (c, g) = rain(Arc::new(ClosesAfterFirst(
        AtomicUsize::new(0),
        ledger.clone(),
    )))
    .await;
    let r = grant("rain:closed:1", 8);
    assert!(matches!(
        g.grant(&r).await.unwrap(),
        Outcome::RetryLater { .. }
    ));
    assert!(matches!(after_hold(&g, &r).await, Outcome::InDoubt { .. }));
    assert_eq!(c.spent("rain").await.unwrap(), 8, "not refunded");
    let rec = c.record("rain:closed:1").await.unwrap().unwrap();
    assert_eq!(rec.state, ClaimState::InDoubt);
    assert_eq!(ledger.balance("u1", "cash").await.unwrap(), 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_of_the_previous_layout_is_refused_not_forgotten() {
    let prefix = format!("claim-old-{:08x}", rand::random::<u32>());
    let redis =
        fred::prelude::Builder::from_config(fred::prelude::Config::from_url(&redis_url()).unwrap())
            .build()
            .unwrap();
    fred::prelude::ClientLike::init(&redis).await.unwrap();
    let old_budget = format!("{prefix}:{{rain:0}}:budget");
    let _: () = fred::prelude::HashesInterface::hset(&redis, &old_budget, ("cap", 10))
        .await
        .unwrap();
    let cfg = ClaimConfig {
        key_prefix: prefix,
        shards: 4,
        lease_ms: 30_000,
        retention_secs: 3600,
        ..ClaimConfig::default()
    };
    match Claims::connect(&redis_url(), cfg).await {
        Err(ClaimError::OldLayout(_)) => {}
        other => panic!("{other:?}"),
    }
    let _: i64 = fred::prelude::KeysInterface::del(&redis, &old_budget)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_status_says_not_credited_a_permanent_refusal_fails_and_refunds() {
    // An owner vanished; the takeover asks the status (never credited), then the
    // credit is refused for good: nothing can have been credited, so the grant fails
    // and its budget comes back, with no operator needed.
    #[derive(Debug)]
    struct Refuses(Ledger);
    impl Downstream for Refuses {
        fn credit<'a>(&'a self, _: &'a Credit) -> CreditFuture<'a> {
            Box::pin(async {
                Err(CreditError::not_credited(
                    ErrorCode::AccountClosed,
                    "closed",
                ))
            })
        }
        fn contract(&self) -> Contract {
            Contract {
                honours_key: false,
                status: true,
                max_call_ms: 100,
            }
        }
        fn status<'a>(&'a self, c: &'a Credit) -> StatusFuture<'a> {
            self.0.status(c)
        }
    }
    let ledger = strict_ledger().await;
    let c = claims(2, 300).await;
    c.set_budget("rain", 1_000).await.unwrap();
    let g = granter_over(Arc::new(Refuses(ledger)), c.clone()).await;
    let r = grant("rain:st:1", 5);
    let Claim::Claimed { .. } = c.claim(&r).await.unwrap() else {
        panic!("claim")
    };
    assert!(matches!(
        after_hold(&g, &r).await,
        Outcome::FailedPermanent { .. }
    ));
    assert_eq!(c.spent("rain").await.unwrap(), 0, "refunded");
    assert_eq!(
        c.record("rain:st:1").await.unwrap().unwrap().state,
        ClaimState::Failed
    );
}
