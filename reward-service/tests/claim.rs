//! The claim store against the real Redis of the local stack (`ops/stack up`; fails,
//! never skips): exactly one credit per trade number, never over budget.

// Helpers may unwrap: a failure here is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

mod common;

use common::{claims, grant, redis_url};
use reward_service::claim::{Claim, ClaimError, ClaimState, Finish, Grant, Prior};
use reward_service::downstream::{Credit, Downstream, ErrorCode, Ledger};

async fn ledger(capacity: &HashMap<String, NonZeroU32>) -> Ledger {
    let prefix = format!("ledger-test-{:08x}", rand::random::<u32>());
    Ledger::connect(&redis_url(), &prefix, capacity)
        .await
        .unwrap()
}

fn credit_of(g: &Grant) -> Credit {
    Credit::from(g)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_racers_a_thousand_times_credit_once() {
    let c = Arc::new(claims(4, 30_000).await);
    c.set_budget("rain", 1_000).await.unwrap();
    let ledger = ledger(&HashMap::new()).await;
    let credits = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (c, credits, ledger) = (c.clone(), credits.clone(), ledger.clone());
        tasks.push(tokio::spawn(async move {
            let g = grant("rain:1:u1", 88);
            for _ in 0..1_000 {
                match c.claim(&g).await.unwrap() {
                    Claim::Claimed { claim_id, .. } => {
                        credits.fetch_add(1, Ordering::SeqCst);
                        let receipt = ledger.credit(&credit_of(&g)).await.unwrap();
                        assert_eq!(
                            c.grant(&g, &claim_id, &receipt).await.unwrap(),
                            Finish::Done
                        );
                    }
                    Claim::Duplicate { result } => assert!(result.starts_with("ledger:")),
                    Claim::RetryLater { .. } => {}
                    other => panic!("unexpected {other:?}"),
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(credits.load(Ordering::SeqCst), 1, "exactly one credit");
    assert_eq!(
        ledger.balance("u1", "cash").await.unwrap(),
        88,
        "credited once"
    );
    assert_eq!(ledger.double_credits(), 0, "no double-credit incident");
    assert_eq!(c.spent("rain").await.unwrap(), 88, "budget counted once");
    // The same trade number with another amount, user or type is a conflict.
    for other in [
        grant("rain:1:u1", 89),
        Grant {
            user_id: "u2".into(),
            ..grant("rain:1:u1", 88)
        },
        Grant {
            reward_type: "coupon".into(),
            ..grant("rain:1:u1", 88)
        },
    ] {
        assert_eq!(c.claim(&other).await.unwrap(), Claim::Conflict, "{other:?}");
    }
    assert_eq!(c.spent("rain").await.unwrap(), 88);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_claim_is_taken_over_after_its_lease_and_counted_once() {
    let c = claims(2, 300).await;
    c.set_budget("rain", 100).await.unwrap();
    let g = grant("rain:2:u1", 10);
    // The first worker claims, then "crashes" between deduction and credit.
    let Claim::Claimed {
        claim_id: first,
        prior: Prior::Fresh,
    } = c.claim(&g).await.unwrap()
    else {
        panic!("first claim")
    };
    // While its lease lives, others are told to come back (never dropped).
    assert!(matches!(
        c.claim(&g).await.unwrap(),
        Claim::RetryLater { lease_left_ms } if lease_left_ms <= 300
    ));
    // The first owner vanished without a word: once its lease ends, the takeover must
    // resolve its attempt before crediting.
    let takeover = reward_testkit::eventually(
        Duration::from_secs(30),
        "the first claim's lease to end",
        async || match c.claim(&g).await.unwrap() {
            Claim::RetryLater { lease_left_ms } => Err(format!("{lease_left_ms} ms left")),
            other => Ok(other),
        },
    )
    .await;
    let Claim::Claimed {
        claim_id: second,
        prior: Prior::Unknown,
    } = takeover
    else {
        panic!("takeover: {takeover:?}")
    };
    assert_eq!(c.grant(&g, &second, "ok-2").await.unwrap(), Finish::Done);
    // The first owner wakes up late: the record is already GRANTED; its receipt
    // changes nothing, and it can no longer fail (refund) the grant.
    assert_eq!(c.grant(&g, &first, "late").await.unwrap(), Finish::Done);
    assert_eq!(
        c.fail(&g, &first, "late failure").await.unwrap(),
        Finish::LostLease
    );
    assert_eq!(
        c.claim(&g).await.unwrap(),
        Claim::Duplicate {
            result: "ok-2".into()
        }
    );
    assert_eq!(c.spent("rain").await.unwrap(), 10, "deducted once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_times_the_budget_spends_exactly_the_budget() {
    const B: i64 = 1_000;
    let c = Arc::new(claims(8, 30_000).await);
    c.set_budget("rain", B).await.unwrap();
    let claimed = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for t in 0..16u64 {
        let (c, claimed) = (c.clone(), claimed.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..(10 * B as u64 / 16) {
                let g = grant(&format!("rain:3:{t}:{i}"), 1);
                loop {
                    match c.claim(&g).await.unwrap() {
                        Claim::Claimed { claim_id, .. } => {
                            claimed.fetch_add(1, Ordering::SeqCst);
                            c.grant(&g, &claim_id, "ok").await.unwrap();
                        }
                        Claim::BudgetExhausted => {}
                        // Racers took what its borrows moved, three times: the scene
                        // still had room, so it is told to ask again, as a caller does.
                        Claim::BudgetHeld { hold_left_ms } => {
                            // Time is the subject: a caller's pause for the hold it was told.
                            tokio::time::sleep(Duration::from_millis(hold_left_ms)).await;
                            continue;
                        }
                        other => panic!("unexpected {other:?}"),
                    }
                    break;
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // 10 000 trade numbers over 8 shards: a shard that fills borrows the others'
    // room, so the scene spends its budget exactly, and never more.
    assert_eq!(c.spent("rain").await.unwrap(), B);
    assert_eq!(claimed.load(Ordering::SeqCst), B as u64);
    assert_eq!(c.budget("rain").await.unwrap(), B, "moves keep the total");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permanent_failure_gives_the_budget_back_once() {
    // One shard: the whole budget in one cap, so the refund lands where it was spent.
    let c = claims(1, 30_000).await;
    c.set_budget("rain", 50).await.unwrap();
    let g = grant("rain:4:u1", 50);
    let Claim::Claimed { claim_id, .. } = c.claim(&g).await.unwrap() else {
        panic!("claim")
    };
    assert_eq!(c.spent("rain").await.unwrap(), 50);
    assert_eq!(
        c.fail(&g, &claim_id, "account closed").await.unwrap(),
        Finish::Done
    );
    assert_eq!(
        c.fail(&g, &claim_id, "again").await.unwrap(),
        Finish::LostLease
    );
    assert_eq!(c.spent("rain").await.unwrap(), 0, "refunded exactly once");
    assert_eq!(
        c.claim(&g).await.unwrap(),
        Claim::FailedPermanent {
            result: "account closed".into()
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_grants_and_missing_budgets_are_told_apart() {
    let c = claims(2, 30_000).await;
    assert_eq!(
        c.claim(&grant("rain:5:u1", 1)).await.unwrap(),
        Claim::NoBudget
    );
    c.set_budget("rain", 10).await.unwrap();
    for bad in [
        grant("", 1),
        grant("rain:5:u1", 0),
        grant("rain:5:u1", -3),
        grant("a{b}", 1),
        Grant {
            scene: "{x".into(),
            ..grant("rain:5:u1", 1)
        },
        Grant {
            user_id: String::new(),
            ..grant("rain:5:u1", 1)
        },
    ] {
        assert!(
            matches!(c.claim(&bad).await, Err(ClaimError::Invalid(_))),
            "{bad:?}"
        );
    }
    assert_eq!(c.spent("rain").await.unwrap(), 0, "nothing deducted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ledger_itself_counts_a_second_credit_of_a_trade_number() {
    // Without the claim store in front, the ledger credits twice and says so: this is
    // what makes "zero incidents" above a real check.
    let l = ledger(&HashMap::new()).await;
    let c = credit_of(&grant("rain:6:u1", 5));
    l.credit(&c).await.unwrap();
    assert_eq!(l.double_credits(), 0);
    l.credit(&c).await.unwrap();
    assert_eq!(l.double_credits(), 1);
    assert_eq!(l.balance("u1", "cash").await.unwrap(), 10);
    // Another process (the load tester's reconciliation) sees the same in Redis.
    let a = l.account("u1").await.unwrap();
    assert_eq!(a.double_credits, 1);
    assert_eq!(a.balances.get("cash"), Some(&10));
    assert_eq!(a.credited.len(), 1);
    let at = a.credited["rain:6:u1"];
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    assert!(
        (now - 60_000..=now).contains(&at),
        "credit time {at} vs now {now}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_capacity_the_ledger_answers_rate_limited_which_is_retryable() {
    let cap = HashMap::from([("coupon".to_string(), NonZeroU32::new(5).unwrap())]);
    let l = ledger(&cap).await;
    let mut limited = 0;
    let start = std::time::Instant::now();
    for i in 0..20 {
        let c = Credit {
            reward_type: "coupon".into(),
            ..credit_of(&grant(&format!("rain:7:{i}"), 1))
        };
        match l.credit(&c).await {
            Ok(_) => {}
            Err(e) => {
                assert_eq!(e.code, ErrorCode::RateLimited, "{e}");
                assert!(e.code.retryable());
                limited += 1;
            }
        }
    }
    // 5/s with a burst of 5: at most 5 + 5 per elapsed second pass (plus one for the
    // partly elapsed second), however slow the machine; the rest are refused.
    let allowed = 5 + 5 * (start.elapsed().as_secs_f64().ceil() as i64);
    let passed = 20 - limited;
    assert!(
        passed <= allowed,
        "{passed} passed, at most {allowed} allowed"
    );
    assert!(limited > 0, "a burst of 20 against 5/s is refused in part");
    assert_eq!(l.balance("u1", "coupon").await.unwrap(), 20 - limited);
    // Other types are not limited; bad input is permanent.
    l.credit(&credit_of(&grant("rain:7:x", 1))).await.unwrap();
    let bad = l
        .credit(&credit_of(&grant("rain:7:y", 0)))
        .await
        .unwrap_err();
    assert_eq!(bad.code, ErrorCode::Invalid);
    assert!(!bad.code.retryable());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_credits_answers_each_in_order_as_single_credits_would() {
    // 300 credits in one `credit_many` (one pipeline): valid ones for three users,
    // a trade number twice (the second is an incident, as with single credits), a
    // bad amount and a braced user id (refused before Redis, each on its own), and
    // a capacity-limited type past its burst.
    let cap = HashMap::from([("coupon".to_string(), NonZeroU32::new(1).unwrap())]);
    let l = ledger(&cap).await;
    let mut batch: Vec<Credit> = (0..294)
        .map(|i| Credit {
            user_id: format!("b{}", i % 3),
            ..credit_of(&grant(&format!("rain:8:{i}"), 2))
        })
        .collect();
    batch.push(Credit {
        user_id: "b0".into(),
        ..credit_of(&grant("rain:8:0", 2))
    });
    batch.push(credit_of(&grant("rain:8:zero", 0)));
    batch.push(Credit {
        user_id: "{b1}".into(),
        ..credit_of(&grant("rain:8:brace", 2))
    });
    for i in 0..3 {
        batch.push(Credit {
            user_id: "b2".into(),
            reward_type: "coupon".into(),
            ..credit_of(&grant(&format!("rain:8:c{i}"), 1))
        });
    }
    let answers = l.credit_many(&batch).await;
    assert_eq!(answers.len(), 300);
    for (c, a) in batch.iter().zip(&answers).take(295) {
        // The receipt names the trade number only, so a repeat or a status query
        // answers the same receipt as the first credit.
        let receipt = a.as_ref().unwrap();
        assert_eq!(receipt, &format!("ledger:{}", c.trade_no));
    }
    assert_eq!(answers[295].as_ref().unwrap_err().code, ErrorCode::Invalid);
    assert_eq!(answers[296].as_ref().unwrap_err().code, ErrorCode::Invalid);
    let coupons: Vec<_> = answers[297..]
        .iter()
        .map(|a| a.as_ref().map_err(|e| e.code))
        .collect();
    assert!(coupons[0].is_ok(), "{coupons:?}");
    assert!(
        coupons[1..]
            .iter()
            .all(|c| *c == Err(ErrorCode::RateLimited)),
        "a burst of 1 lets one through: {coupons:?}"
    );
    // Balances and incidents are exactly those of single credits.
    assert_eq!(l.double_credits(), 1);
    assert_eq!(l.balance("b0", "cash").await.unwrap(), 98 * 2 + 2);
    assert_eq!(l.balance("b1", "cash").await.unwrap(), 98 * 2);
    assert_eq!(l.balance("b2", "cash").await.unwrap(), 98 * 2);
    assert_eq!(l.balance("b2", "coupon").await.unwrap(), 1);
    assert_eq!(l.account("b0").await.unwrap().double_credits, 1);
    // An empty batch is no call at all.
    assert!(l.credit_many(&[]).await.is_empty());
}

/// A ledger that honours the key decides repeats inside one call as it would across
/// calls: a repeat answers the first receipt and moves nothing, a reused key with other
/// fields is refused. A credit whose balance is a key of another type is refused alone,
/// known not credited (retryable, nothing of it written), and the others of the call go
/// through; the status query tells each truly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_call_decides_repeats_as_single_credits_and_refuses_a_broken_key_alone() {
    use fred::interfaces::KeysInterface;
    use reward_service::downstream::CreditStatus;
    let prefix = format!("ledger-test-{:08x}", rand::random::<u32>());
    let l = Ledger::connect(&redis_url(), &prefix, &HashMap::new())
        .await
        .unwrap()
        .honouring_key(true);
    let c = |user: &str, trade: &str, amount: i64| Credit {
        user_id: user.into(),
        ..credit_of(&grant(trade, amount))
    };
    let batch = [
        c("h1", "rain:9:a", 3),
        c("h1", "rain:9:a", 3),
        c("h1", "rain:9:a", 4),
        c("h2", "rain:9:b", 5),
    ];
    let answers = l.credit_many(&batch).await;
    assert_eq!(answers[0].as_deref(), Ok("ledger:rain:9:a"));
    assert_eq!(answers[1].as_deref(), Ok("ledger:rain:9:a"), "a repeat");
    assert_eq!(answers[2].as_ref().unwrap_err().code, ErrorCode::Invalid);
    assert_eq!(answers[3].as_deref(), Ok("ledger:rain:9:b"));
    assert_eq!(l.balance("h1", "cash").await.unwrap(), 3);
    let account = l.account("h1").await.unwrap();
    assert_eq!((account.repeats, account.double_credits), (1, 1));

    // h4's balance hash is a string: its credit alone is refused, known not credited
    // (nothing of it written); h3's beside it goes through.
    let redis = raw_redis().await;
    let before = l.balance("h3", "cash").await.unwrap();
    let balance_key = format!("{prefix}:ledger:{{h4}}:balance");
    let _: () = redis
        .set(&balance_key, "x", None, None, false)
        .await
        .unwrap();
    let failed = [
        c("h4", "rain:9:d", 7),
        c("h3", "rain:9:c", 7),
        c("h4", "rain:9:e", 7),
    ];
    let answers = l.credit_many(&failed).await;
    assert_eq!(answers[1].as_deref(), Ok("ledger:rain:9:c"));
    for a in [&answers[0], &answers[2]] {
        let e = a.as_ref().unwrap_err();
        assert!(e.code.retryable() && !e.in_doubt, "{e:?}");
    }
    assert_eq!(l.balance("h3", "cash").await.unwrap(), before + 7);
    assert!(matches!(
        l.status(&failed[1]).await.unwrap(),
        CreditStatus::Credited(_)
    ));
    assert_eq!(
        l.status(&failed[0]).await.unwrap(),
        CreditStatus::NotCredited
    );
    let _: () = redis.del(&balance_key).await.unwrap();
    // h5's credited hash is a string, on a ledger that does not honour the key (so no
    // repeat check reads that hash first): its balance moves and is put back in the
    // same call, so the refused credit leaves the balance as it was.
    let strict = Ledger::connect(&redis_url(), &prefix, &HashMap::new())
        .await
        .unwrap();
    strict.credit(&c("h5", "rain:9:f", 2)).await.unwrap();
    let credited_key = format!("{prefix}:ledger:{{h5}}:credited");
    let _: () = redis.del(&credited_key).await.unwrap();
    let _: () = redis
        .set(&credited_key, "x", None, None, false)
        .await
        .unwrap();
    let answers = strict
        .credit_many(&[c("h5", "rain:9:g", 9), c("h3", "rain:9:h", 1)])
        .await;
    assert!(!answers[0].as_ref().unwrap_err().in_doubt);
    assert!(answers[1].is_ok());
    assert_eq!(
        l.balance("h5", "cash").await.unwrap(),
        2,
        "the balance moved"
    );
    let _: () = redis.del(&credited_key).await.unwrap();
}

/// The shape of a claim, without its random claim id.
fn kind(c: &Result<Claim, ClaimError>) -> String {
    match c {
        Ok(Claim::Claimed { prior, .. }) => format!("claimed({prior:?})"),
        // The lease left depends on when it was asked.
        Ok(Claim::RetryLater { .. }) => "RetryLater".into(),
        Ok(other) => format!("{other:?}"),
        Err(e) => format!("error: {e}"),
    }
}

/// A batch claim answers exactly what one claim per grant, in the same order, would:
/// new trade numbers, repeats inside the batch, conflicts, duplicates of granted ones,
/// an invalid grant, a scene with no budget; and spends the same in each scene. On a
/// single Redis the whole batch (4 shards, 3 scenes) is one script call. (At a
/// budget's end a batch borrows for its refused grants after its script calls ran, so
/// which of two grants racing for the last units wins may differ from one-by-one
/// order; the budget tests below hold both to the scene's total.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_claim_decides_as_single_claims_in_order() {
    for round in 0..3u64 {
        let single = claims(4, 30_000).await;
        let batch = claims(4, 30_000).await;
        for c in [&single, &batch] {
            c.set_budget("rain", 100_000).await.unwrap();
            c.set_budget("snow", 100_000).await.unwrap();
        }
        // Round one grants some first, so the batch meets GRANTED records too.
        let mut seed = round * 7919 + 17;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            seed >> 33
        };
        let mut grants = Vec::new();
        for _ in 0..120 {
            let n = next() % 60; // repeats likely
            let mut g = grant(&format!("t{n}"), 1 + (n % 7) as i64);
            // Three scenes in one batch: two with budgets, one without.
            if n % 3 == 1 {
                (g.scene, g.activity_id) = ("snow".into(), "cny2".into());
            } else if n % 5 == 4 {
                g.scene = "none".into();
            }
            if next() % 10 == 0 {
                g.amount += 1; // a conflict when the trade number was seen
            }
            grants.push(g);
        }
        grants.push(grant("bad{brace}", 1));
        let pre: Vec<Grant> = grants.iter().take(10).cloned().collect();
        for c in [&single, &batch] {
            for g in &pre {
                if let Ok(Claim::Claimed { claim_id, .. }) = c.claim(g).await {
                    c.grant(g, &claim_id, "r").await.unwrap();
                }
            }
        }
        let mut one_by_one = Vec::new();
        for g in &grants {
            one_by_one.push(single.claim(g).await);
        }
        let together = batch.claim_many(&grants).await;
        let a: Vec<String> = one_by_one.iter().map(kind).collect();
        let b: Vec<String> = together.iter().map(kind).collect();
        assert_eq!(a, b, "round {round}");
        assert!(a.iter().any(|k| k.starts_with("claimed")), "{a:?}");
        assert!(a.iter().any(|k| k.contains("Conflict")), "{a:?}");
        assert!(a.iter().any(|k| k.contains("Duplicate")), "{a:?}");
        assert!(a.iter().any(|k| k.contains("RetryLater")), "{a:?}");
        assert!(a.iter().any(|k| k.contains("NoBudget")), "{a:?}");
        for scene in ["rain", "snow"] {
            let spent = single.spent(scene).await.unwrap();
            assert!(spent > 0, "{scene}");
            assert_eq!(spent, batch.spent(scene).await.unwrap(), "{scene}");
        }

        // Finishing the batch's claims in one go marks exactly those granted. A
        // receipt may hold line breaks (a downstream's, kept as it came): it goes
        // through the grant's packed fields and into the record as it was.
        let items: Vec<(Grant, String, String)> = grants
            .iter()
            .zip(&together)
            .filter_map(|(g, c)| match c {
                Ok(Claim::Claimed { claim_id, .. }) => Some((
                    g.clone(),
                    claim_id.clone(),
                    format!("ref-{}\nsecond line\n", g.trade_no),
                )),
                _ => None,
            })
            .collect();
        let finished = batch.grant_many(&items).await;
        assert!(finished.iter().all(|f| matches!(f, Ok(Finish::Done))));
        for (g, _, receipt) in &items {
            let rec = batch.record(&g.trade_no).await.unwrap().unwrap();
            assert_eq!(
                (rec.state, rec.result.as_str()),
                (ClaimState::Granted, receipt.as_str())
            );
        }
        // A granted record stays as it is: a second receipt changes nothing, and a
        // stale claim id cannot fail it.
        let (g0, id0, r0) = &items[0];
        assert_eq!(
            batch.claim_many(std::slice::from_ref(g0)).await[0]
                .as_ref()
                .unwrap(),
            &Claim::Duplicate { result: r0.clone() }
        );
        let again = batch
            .grant_many(&[(g0.clone(), id0.clone(), "other".into())])
            .await;
        assert!(matches!(again[0], Ok(Finish::Done)));
        assert_eq!(
            batch.record(&g0.trade_no).await.unwrap().unwrap().result,
            *r0
        );
        assert_eq!(batch.fail(g0, id0, "x").await.unwrap(), Finish::LostLease);
    }
}

/// One call mixing scenes runs one scene's budget out partway: every grant is answered
/// as by one claim each, in order (the small scene's later grants exhausted, the other
/// scene's still claimed), and each scene spends exactly what the single claims did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_mixing_scenes_runs_one_budget_out_as_single_claims_do() {
    let single = claims(1, 30_000).await;
    let batch = claims(1, 30_000).await;
    for c in [&single, &batch] {
        c.set_budget("rain", 1_000).await.unwrap();
        c.set_budget("snow", 10).await.unwrap();
    }
    let grants: Vec<Grant> = (0..10)
        .map(|i| {
            let mut g = grant(&format!("mix:{i}"), 3);
            if i % 2 == 1 {
                g.scene = "snow".into();
            }
            g
        })
        .collect();
    let mut one_by_one = Vec::new();
    for g in &grants {
        one_by_one.push(kind(&single.claim(g).await));
    }
    let together: Vec<String> = batch.claim_many(&grants).await.iter().map(kind).collect();
    assert_eq!(one_by_one, together);
    let exhausted: Vec<usize> = together
        .iter()
        .enumerate()
        .filter(|(_, k)| k.contains("Exhausted"))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(exhausted, vec![7, 9], "{together:?}");
    assert_eq!(batch.spent("snow").await.unwrap(), 9);
    assert_eq!(batch.spent("rain").await.unwrap(), 15);
    assert_eq!(single.spent("snow").await.unwrap(), 9);
}

/// A budget whose `spent` or `hold` is not a number (written by hand or by another
/// program) fails the whole call before any write: no record is created for the other
/// scene's grant in the same call, and no budget moves; a single claim is refused
/// before its record is written. (Without the checks the batch script stopped at the
/// broken budget with the first grant's record written and nothing deducted for it, and
/// a single claim wrote its record before its `HINCRBY` failed on a `spent` of 1.5.)
/// Each refused call is counted for the operator's alert (`BADBUDGET`, in
/// `reward_service_unreadable_records_total`). Runs on one thread: the test's own
/// recorder is that thread's.
#[tokio::test(flavor = "current_thread")]
async fn a_budget_that_is_not_numbers_fails_its_call_before_any_write() {
    use fred::interfaces::{HashesInterface, KeysInterface};
    let recorder = ThreadRecorder::new();
    let _local = recorder.install();
    let count = || recorder.unreadable_records();
    let c = claims(1, 30_000).await;
    c.set_budget("rain", 1_000).await.unwrap();
    c.set_budget("snow", 1_000).await.unwrap();
    let redis = raw_redis().await;
    let snow = c.budget_key("snow", 0);
    let mut counted = 0;
    // "007" reads as a number in Lua, but HINCRBY refuses it.
    for (field, bad) in [("hold", "abc"), ("spent", "1.5"), ("spent", "007")] {
        let before: Option<String> = redis.hget(&snow, field).await.unwrap();
        let _: () = redis.hset(&snow, (field, bad)).await.unwrap();
        let batch = [
            grant(&format!("nan:{field}:1"), 5),
            Grant {
                scene: "snow".into(),
                ..grant(&format!("nan:{field}:2"), 5)
            },
        ];
        let out = c.claim_many(&batch).await;
        assert!(out.iter().all(Result::is_err), "{field}: {out:?}");
        counted += 1;
        assert_eq!(
            count(),
            counted,
            "{field} {bad}: one refused call counts once"
        );
        for g in &batch {
            let n: i64 = redis.exists(c.record_key(0, &g.trade_no)).await.unwrap();
            assert_eq!(n, 0, "{field}: {} was created", g.trade_no);
        }
        assert_eq!(c.spent("rain").await.unwrap(), 0, "{field}");
        // Claimed alone, too: refused before its record is written.
        assert!(c.claim(&batch[1]).await.is_err(), "{field}");
        counted += 1;
        assert_eq!(count(), counted, "{field} {bad}");
        let n: i64 = redis
            .exists(c.record_key(0, &batch[1].trade_no))
            .await
            .unwrap();
        assert_eq!(n, 0, "{field}: a single claim created its record");
        match before {
            Some(v) => {
                let _: () = redis.hset(&snow, (field, v)).await.unwrap();
            }
            None => {
                let _: i64 = redis.hdel(&snow, field).await.unwrap();
            }
        }
    }
    // Mended, the same grants go through.
    let out = c.claim_many(&[grant("nan:ok", 5)]).await;
    assert!(matches!(out[0], Ok(Claim::Claimed { .. })), "{out:?}");
}

/// A finish within the lease keeps the TTL its claim set moments before (no `EXPIRE`
/// per grant); a finish of a record that was in doubt re-arms the full retention.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finish_rearms_the_ttl_only_for_a_record_in_doubt() {
    use fred::interfaces::{ClientLike, KeysInterface};
    let c = claims(4, 30_000).await;
    c.set_budget("rain", 1_000).await.unwrap();
    let redis =
        fred::prelude::Builder::from_config(fred::prelude::Config::from_url(&redis_url()).unwrap())
            .build()
            .unwrap();
    redis.init().await.unwrap();
    let ledger = ledger(&HashMap::new()).await;
    for (trade, in_doubt) in [("rain:ttl:a", false), ("rain:ttl:b", true)] {
        let g = grant(trade, 1);
        let key = c.record_key(c.shard_of(trade), trade);
        let Claim::Claimed { claim_id, .. } = c.claim(&g).await.unwrap() else {
            panic!("not claimed");
        };
        let claim_id = if in_doubt {
            assert_eq!(c.doubt(&g, &claim_id, 0).await.unwrap(), Finish::Done);
            match c.claim(&g).await.unwrap() {
                Claim::Claimed { claim_id, .. } => claim_id,
                other => panic!("{trade}: not taken over: {other:?}"),
            }
        } else {
            claim_id
        };
        // Shorten the TTL by hand, then finish.
        let _: () = redis.expire(&key, 500, None).await.unwrap();
        let receipt = ledger.credit(&credit_of(&g)).await.unwrap();
        assert_eq!(
            c.grant(&g, &claim_id, &receipt).await.unwrap(),
            Finish::Done
        );
        let ttl: i64 = redis.ttl(&key).await.unwrap();
        if in_doubt {
            assert!(ttl > 3000, "{trade}: in doubt, not re-armed: {ttl}");
        } else {
            assert!(
                ttl <= 500 && ttl > 0,
                "{trade}: re-armed within the lease: {ttl}"
            );
        }
    }
    let _ = redis.quit().await;
}

/// While a budget change holds a scene's shards, a new trade number's claim is told
/// so (`BudgetHeld`, the hold's time left), single and batched, and claims nothing;
/// once the hold ends it claims as usual. A lease on an existing record stays
/// `RetryLater`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_during_a_budget_change_is_told_the_budget_is_held() {
    let c = claims(2, 30_000).await;
    c.set_budget("rain", 100).await.unwrap();
    let redis = raw_redis().await;
    // A hold as `set_budget` takes it: on every shard, 3 s ahead.
    hold_shards(&redis, &c, 0..2).await;
    match c.claim(&grant("held:1", 5)).await.unwrap() {
        Claim::BudgetHeld { hold_left_ms } => {
            assert!((1..=3_000).contains(&hold_left_ms), "{hold_left_ms}")
        }
        other => panic!("a claim under a budget hold: {other:?}"),
    }
    let many = c
        .claim_many(&[grant("held:2", 1), grant("held:3", 1)])
        .await;
    for r in &many {
        assert!(matches!(r, Ok(Claim::BudgetHeld { .. })), "{many:?}");
    }
    assert_eq!(
        c.spent("rain").await.unwrap(),
        0,
        "a held claim takes nothing"
    );
    assert!(
        c.record("held:1").await.unwrap().is_none(),
        "nor records anything"
    );
    for shard in 0..2 {
        let _: i64 = fred::prelude::HashesInterface::hdel(
            &redis,
            c.budget_key("rain", shard),
            vec!["hold", "holder"],
        )
        .await
        .unwrap();
    }
    assert!(matches!(
        c.claim(&grant("held:1", 5)).await.unwrap(),
        Claim::Claimed { .. }
    ));
    assert_eq!(c.spent("rain").await.unwrap(), 5);
}

/// 16 shards, a budget of 5 000, 5 000 grants of 1 from three stores (three service
/// instances) in batches and one by one, the trade numbers landing unevenly: every
/// one is claimed, the 5 001st is refused, and the scene spent exactly its budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_is_spent_to_the_last_unit_across_shards_and_instances() {
    const B: i64 = 5_000;
    let first = claims(16, 30_000).await;
    first.set_budget("rain", B).await.unwrap();
    let mut instances = vec![Arc::new(first)];
    for _ in 0..2 {
        instances.push(Arc::new(
            reward_service::claim::Claims::connect(&redis_url(), instances[0].config().clone())
                .await
                .unwrap(),
        ));
    }
    let claimed = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for (k, c) in instances.iter().enumerate() {
        let (c, claimed) = (c.clone(), claimed.clone());
        tasks.push(tokio::spawn(async move {
            // Instance k takes trade numbers k, k+3, ...; batches of 40 but for the
            // last instance, which claims one by one.
            let mine: Vec<Grant> = (0..B as usize)
                .filter(|i| i % 3 == k)
                .map(|i| grant(&format!("last:{i}"), 1))
                .collect();
            for part in mine.chunks(if k == 2 { 1 } else { 40 }) {
                for r in c.claim_many(part).await {
                    match r.unwrap() {
                        Claim::Claimed { .. } => {
                            claimed.fetch_add(1, Ordering::SeqCst);
                        }
                        other => panic!("with the budget not yet spent: {other:?}"),
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let c = &instances[0];
    assert_eq!(claimed.load(Ordering::SeqCst), B as u64);
    assert_eq!(c.spent("rain").await.unwrap(), B);
    assert_eq!(c.budget("rain").await.unwrap(), B);
    assert_eq!(
        c.claim(&grant("last:one-more", 1)).await.unwrap(),
        Claim::BudgetExhausted
    );
}

/// One grant of a scene's whole budget, over 16 shards of a sixteenth each, is
/// accepted; one unit more is not, and neither is anything after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_grant_of_the_whole_budget_is_accepted() {
    let c = claims(16, 30_000).await;
    c.set_budget("rain", 1_000).await.unwrap();
    assert_eq!(
        c.claim(&grant("whole:over", 1_001)).await.unwrap(),
        Claim::BudgetExhausted
    );
    assert_eq!(
        c.budget("rain").await.unwrap(),
        1_000,
        "a failed borrow keeps the total"
    );
    assert!(matches!(
        c.claim(&grant("whole:all", 1_000)).await.unwrap(),
        Claim::Claimed { .. }
    ));
    assert_eq!(c.spent("rain").await.unwrap(), 1_000);
    assert_eq!(
        c.claim(&grant("whole:after", 1)).await.unwrap(),
        Claim::BudgetExhausted
    );
}

/// The scripts' unpacking helper (`FIELDS_LUA`) in the real Redis: exactly the strings
/// asked for pass; a missing argument, another count, a nil (what a field too long for
/// a header packs to) or a number among them is refused; bytes that are not
/// MessagePack are an error. The scripts call it before their first write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unpacking_helper_passes_exactly_the_strings_asked_for() {
    use fred::interfaces::{ClientLike, LuaInterface};
    use fred::types::Value;
    let redis =
        fred::prelude::Builder::from_config(fred::prelude::Config::from_url(&redis_url()).unwrap())
            .build()
            .unwrap();
    redis.init().await.unwrap();
    let script = format!(
        "{}\nif ARGV[1] == 'none' then return unpack_fields(nil, 2) and 1 or 0 end\n\
         return unpack_fields(ARGV[1], tonumber(ARGV[2])) and 1 or 0",
        reward_service::claim::FIELDS_LUA
    );
    let run = |arg: Vec<u8>, want: i64| {
        let (redis, script) = (redis.clone(), script.clone());
        async move {
            redis
                .eval::<i64, _, _, _>(
                    script,
                    Vec::<String>::new(),
                    vec![Value::Bytes(arg.into()), Value::from(want)],
                )
                .await
        }
    };
    let two = reward_service::claim::pack_fields(&["ab", ""]);
    assert_eq!(run(two.clone(), 2).await.unwrap(), 1);
    assert_eq!(run(two.clone(), 3).await.unwrap(), 0, "too few");
    assert_eq!(run(two, 1).await.unwrap(), 0, "too many");
    assert_eq!(run(b"none".to_vec(), 2).await.unwrap(), 0, "no argument");
    assert_eq!(run(Vec::new(), 2).await.unwrap(), 0, "empty argument");
    // "ab", nil, "x": a nil among the fields, as a field past 4 GiB packs.
    assert_eq!(
        run(vec![0xa2, b'a', b'b', 0xc0, 0xa1, b'x'], 3)
            .await
            .unwrap(),
        0
    );
    // "ab", then the number 1.
    assert_eq!(run(vec![0xa2, b'a', b'b', 0x01], 2).await.unwrap(), 0);
    // The strings asked for, then a nil and another string; then a trailing nil.
    assert_eq!(
        run(vec![0xa2, b'a', b'b', 0xa1, b'x', 0xc0, 0xa1, b'y'], 2)
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        run(vec![0xa2, b'a', b'b', 0xa1, b'x', 0xc0], 2)
            .await
            .unwrap(),
        0
    );
    // A header promising more bytes than there are.
    assert!(run(vec![0xa5, b'a'], 1).await.is_err());
    redis.quit().await.unwrap();
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: 48,
        ..proptest::prelude::ProptestConfig::default()
    })]
    /// What the batch scripts get as a grant's one argument (`pack_fields`) unpacks
    /// in the real Redis's Lua (`cmsgpack.unpack`) to exactly the fields packed, in
    /// order: any characters (line breaks, NUL, non-ASCII) and every header size
    /// (fixstr under 32 bytes, str 8 under 256, str 16, str 32 past 65 535).
    #[test]
    fn packed_fields_unpack_in_redis_to_the_same_fields(
        fields in proptest::collection::vec(
            proptest::prop_oneof![
                "\\PC{0,40}",
                "[a-z\n\\x00]{28,300}",
                proptest::strategy::Strategy::prop_map(
                    proptest::collection::vec(proptest::prelude::any::<char>(), 250..700),
                    |c| c.into_iter().collect::<String>(),
                ),
            ],
            0..12,
        ),
        big in proptest::prelude::any::<bool>(),
    ) {
        use fred::interfaces::{ClientLike, LuaInterface};
        let mut fields = fields;
        if big {
            fields.push("x".repeat(70_000));
        }
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let back: Vec<String> = rt.block_on(async {
            let redis = fred::prelude::Builder::from_config(
                fred::prelude::Config::from_url(&redis_url()).unwrap(),
            )
            .build()
            .unwrap();
            redis.init().await.unwrap();
            let refs: Vec<&str> = fields.iter().map(String::as_str).collect();
            let packed = reward_service::claim::pack_fields(&refs);
            let back: Vec<String> = redis
                .eval(
                    "return {cmsgpack.unpack(ARGV[1])}",
                    Vec::<String>::new(),
                    fred::types::Value::Bytes(packed.into()),
                )
                .await
                .unwrap();
            redis.quit().await.unwrap();
            back
        });
        proptest::prop_assert_eq!(back, fields);
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: 6,
        ..proptest::prelude::ProptestConfig::default()
    })]
    /// Concurrent grants of random sizes from two stores while an operator sets the
    /// budget (down, then up) never spend past the budget in force: after every
    /// schedule spent <= the last total, the caps sum to it at most, and spent is
    /// exactly the amounts answered Claimed.
    #[test]
    fn grants_and_budget_changes_at_once_never_overspend(
        amounts in proptest::collection::vec(1i64..60, 60..160),
        first_total in 200i64..2_000,
        second_total in 100i64..3_000,
        shards in 2u32..9,
    ) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let a = Arc::new(claims(shards, 30_000).await);
            a.set_budget("rain", first_total).await.unwrap();
            let b = Arc::new(
                reward_service::claim::Claims::connect(&redis_url(), a.config().clone())
                    .await
                    .unwrap(),
            );
            let claimed = Arc::new(AtomicU64::new(0));
            let mut tasks = Vec::new();
            for (k, c) in [a.clone(), b.clone()].into_iter().enumerate() {
                let (claimed, amounts) = (claimed.clone(), amounts.clone());
                tasks.push(tokio::spawn(async move {
                    let mine: Vec<Grant> = amounts
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| i % 2 == k)
                        .map(|(i, n)| grant(&format!("prop:{i}"), *n))
                        .collect();
                    for part in mine.chunks(1 + k * 7) {
                        for (g, r) in part.iter().zip(c.claim_many(part).await) {
                            match r.unwrap() {
                                Claim::Claimed { .. } => {
                                    claimed.fetch_add(u64::try_from(g.amount).unwrap(), Ordering::SeqCst);
                                }
                                Claim::BudgetExhausted | Claim::BudgetHeld { .. } => {}
                                other => panic!("{other:?}"),
                            }
                        }
                    }
                }));
            }
            // The operator, meanwhile: set it to the second total (refused below what
            // was spent), then the spent-or-more total, retrying a busy budget.
            let op = a.clone();
            let operator = tokio::spawn(async move {
                let mut last = first_total;
                for total in [second_total, second_total.max(first_total)] {
                    for _ in 0..50 {
                        match op.set_budget("rain", total).await {
                            Ok(_) => {
                                last = total;
                                break;
                            }
                            Err(ClaimError::BelowSpent { .. }) => break,
                            Err(ClaimError::BudgetBusy(_)) => {
                                // Time is the subject: the operator's pause before retrying.
                                tokio::time::sleep(Duration::from_millis(5)).await;
                            }
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
                last
            });
            for t in tasks {
                t.await.unwrap();
            }
            let total = operator.await.unwrap();
            let spent = a.spent("rain").await.unwrap();
            let caps = a.budget("rain").await.unwrap();
            assert!(spent <= total, "spent {spent} over the budget {total}");
            assert!(caps <= total, "caps {caps} over the budget {total}");
            assert_eq!(
                spent,
                i64::try_from(claimed.load(Ordering::SeqCst)).unwrap(),
                "spent is exactly what was claimed"
            );
        });
    }
}

/// A trade number of `c` that lands in budget shard `shard`.
fn trade_in_shard(c: &reward_service::claim::Claims, shard: u32, tag: &str) -> String {
    (0..10_000)
        .map(|i| format!("{tag}:{i}"))
        .find(|t| c.shard_of(t) == shard)
        .unwrap()
}

/// Holds `shards` of the test scene as `set_budget` does, 3 s ahead (Redis runs on
/// this machine's clock).
async fn hold_shards(
    redis: &fred::prelude::Client,
    c: &reward_service::claim::Claims,
    shards: std::ops::Range<u32>,
) {
    let now_ms = u64::try_from(reward_runtime::clock::now_ms()).unwrap();
    for shard in shards {
        let _: () = fred::prelude::HashesInterface::hset(
            redis,
            c.budget_key("rain", shard),
            [
                ("hold", (now_ms + 3_000).to_string()),
                ("holder", "test".to_string()),
            ],
        )
        .await
        .unwrap();
    }
}

async fn raw_redis() -> fred::prelude::Client {
    let redis =
        fred::prelude::Builder::from_config(fred::prelude::Config::from_url(&redis_url()).unwrap())
            .build()
            .unwrap();
    fred::prelude::ClientLike::init(&redis).await.unwrap();
    redis
}

/// A budget change that reached one shard and not the others (a hold that lapsed
/// mid-change) leaves two divisions of two totals: nothing moves between them, so
/// nothing is stranded by a refused half and nothing is counted twice. A claim that
/// needs a move across them is refused, and the scene's caps still sum to the total.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_budget_moves_between_shards_a_change_divided_differently() {
    let c = claims(4, 30_000).await;
    c.set_budget("rain", 100).await.unwrap();
    let redis = raw_redis().await;
    let _: () = fred::prelude::HashesInterface::hset(
        &redis,
        c.budget_key("rain", 0),
        [("set", "another-change")],
    )
    .await
    .unwrap();
    let t = trade_in_shard(&c, 0, "div");
    assert_eq!(
        c.claim(&grant(&t, 30)).await.unwrap(),
        Claim::BudgetExhausted
    );
    assert_eq!(c.budget("rain").await.unwrap(), 100, "nothing stranded");
    assert_eq!(c.spent("rain").await.unwrap(), 0);
    // A complete change divides afresh: moves work again.
    c.set_budget("rain", 100).await.unwrap();
    assert!(matches!(
        c.claim(&grant(&t, 30)).await.unwrap(),
        Claim::Claimed { .. }
    ));
    assert_eq!(c.budget("rain").await.unwrap(), 100);
}

/// A claim whose shard is short while a budget change holds the other shards is told
/// the budget is held (try again), never a false `BudgetExhausted` (which a consumer
/// would dead-letter for good).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_that_must_borrow_from_held_shards_is_told_held_not_exhausted() {
    let c = claims(4, 30_000).await;
    c.set_budget("rain", 100).await.unwrap();
    let redis = raw_redis().await;
    hold_shards(&redis, &c, 1..4).await;
    let t = trade_in_shard(&c, 0, "held");
    match c.claim(&grant(&t, 30)).await.unwrap() {
        Claim::BudgetHeld { hold_left_ms } => {
            assert!((1..=3_000).contains(&hold_left_ms), "{hold_left_ms}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(c.budget("rain").await.unwrap(), 100);
    // Within its own shard's room it is claimed at once, hold or not elsewhere.
    assert!(matches!(
        c.claim(&grant(&t, 25)).await.unwrap(),
        Claim::Claimed { .. }
    ));
}

/// A batch claim that meets a key of another type under one record's name (a hash
/// record an earlier build wrote, or someone else's key) changes nothing: the records
/// it had created are deleted, the ones it took over put back, the budget untouched,
/// and the error is answered for every grant of the call. Without the undo the created
/// records would stay, claimed with no deduction, and be credited after their lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_that_meets_a_foreign_key_writes_nothing() {
    use fred::interfaces::KeysInterface;
    let c = claims(1, 30_000).await;
    c.set_budget("rain", 1_000).await.unwrap();
    let redis = raw_redis().await;
    // A record taken over in the same call: released cleanly first.
    let held = grant("undo:held", 5);
    let Claim::Claimed { claim_id, .. } = c.claim(&held).await.unwrap() else {
        panic!("not claimed");
    };
    assert_eq!(c.release(&held, &claim_id).await.unwrap(), Finish::Done);
    let before: Option<String> = redis.get(c.record_key(0, "undo:held")).await.unwrap();
    let spent = c.spent("rain").await.unwrap();
    let foreign = c.record_key(0, "undo:foreign");
    let _: () = fred::prelude::HashesInterface::hset(&redis, &foreign, ("state", "GRANTED"))
        .await
        .unwrap();
    let batch = [
        grant("undo:new1", 7),
        held.clone(),
        grant("undo:new2", 9),
        grant("undo:foreign", 3),
    ];
    let out = c.claim_many(&batch).await;
    assert_eq!(out.len(), 4);
    assert!(out.iter().all(Result::is_err), "{out:?}");
    for t in ["undo:new1", "undo:new2"] {
        let n: i64 = redis.exists(c.record_key(0, t)).await.unwrap();
        assert_eq!(n, 0, "{t} was left created");
    }
    let after: Option<String> = redis.get(c.record_key(0, "undo:held")).await.unwrap();
    assert_eq!(after, before, "the taken-over record was not put back");
    assert_eq!(c.spent("rain").await.unwrap(), spent, "the budget moved");
    // The same grants without the foreign key go through, deducted once.
    let out = c.claim_many(&batch[..3]).await;
    assert!(
        out.iter().all(|r| matches!(r, Ok(Claim::Claimed { .. }))),
        "{out:?}"
    );
    assert_eq!(c.spent("rain").await.unwrap(), spent + 16);
}

/// A record the scripts cannot read (a value not in the record format, or a key of
/// another type) fails its claim, moves no budget, and is counted for the operator's
/// alert (`reward_service_unreadable_records_total`), whether claimed alone or in a
/// batch. Runs on one thread: the test's own recorder is that thread's.
#[tokio::test(flavor = "current_thread")]
async fn an_unreadable_record_is_counted_and_credits_nothing() {
    use fred::interfaces::KeysInterface;
    let recorder = ThreadRecorder::new();
    let _local = recorder.install();
    let count = || recorder.unreadable_records();
    let c = claims(1, 30_000).await;
    c.set_budget("rain", 1_000).await.unwrap();
    let redis = raw_redis().await;
    let _: () = redis
        .set(
            c.record_key(0, "bad:text"),
            "not a record",
            None,
            None,
            false,
        )
        .await
        .unwrap();
    let _: () = fred::prelude::HashesInterface::hset(
        &redis,
        c.record_key(0, "bad:hash"),
        ("state", "IN_PROGRESS"),
    )
    .await
    .unwrap();
    assert_eq!(count(), 0);
    assert!(c.claim(&grant("bad:text", 5)).await.is_err());
    assert_eq!(count(), 1);
    assert!(c.claim(&grant("bad:hash", 5)).await.is_err());
    assert_eq!(count(), 2);
    let out = c.claim_many(&[grant("bad:text", 5)]).await;
    assert!(out.iter().all(Result::is_err), "{out:?}");
    assert_eq!(count(), 3);
    let out = c
        .claim_many(&[grant("bad:ok", 5), grant("bad:hash", 5)])
        .await;
    assert!(out.iter().all(Result::is_err), "{out:?}");
    assert_eq!(count(), 4, "one failed call counts once");
    assert_eq!(c.spent("rain").await.unwrap(), 0, "the budget moved");
    // A readable claim counts nothing.
    assert!(matches!(
        c.claim(&grant("bad:ok", 5)).await.unwrap(),
        Claim::Claimed { .. }
    ));
    assert_eq!(count(), 4);
}

/// A finish may change only a live record of its own grant: one for another grant
/// (other amount), one finished already (another receipt) or another owner's (a
/// failure) is left exactly as it was, though the finish writes before it reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finish_that_may_not_change_a_record_leaves_it_as_it_was() {
    use fred::interfaces::KeysInterface;
    let c = claims(2, 30_000).await;
    c.set_budget("rain", 1_000).await.unwrap();
    let redis = raw_redis().await;
    let g = grant("fin:a", 5);
    let Claim::Claimed { claim_id, .. } = c.claim(&g).await.unwrap() else {
        panic!("not claimed");
    };
    let key = c.record_key(c.shard_of("fin:a"), "fin:a");
    let read = || async {
        let v: Option<String> = redis.get(key.as_str()).await.unwrap();
        v
    };
    let live = read().await;
    // Another grant's finish (same trade number, other amount): not this record's.
    assert_eq!(
        c.grant(&grant("fin:a", 6), &claim_id, "tx:other")
            .await
            .unwrap(),
        Finish::LostLease
    );
    assert_eq!(read().await, live);
    // Another owner's failure.
    assert_eq!(
        c.fail(&g, "not-the-owner", "nope").await.unwrap(),
        Finish::LostLease
    );
    assert_eq!(read().await, live);
    assert_eq!(c.spent("rain").await.unwrap(), 5);
    // The owner's grant, then a second grant with another receipt: done, unchanged.
    assert_eq!(c.grant(&g, &claim_id, "tx:1").await.unwrap(), Finish::Done);
    let granted = read().await;
    assert_eq!(c.grant(&g, &claim_id, "tx:2").await.unwrap(), Finish::Done);
    assert_eq!(read().await, granted);
    let rec = c.record("fin:a").await.unwrap().unwrap();
    assert_eq!(
        (rec.state, rec.result.as_str()),
        (ClaimState::Granted, "tx:1")
    );
    // A receipt may hold any byte, line breaks included.
    let h = grant("fin:b", 1);
    let Claim::Claimed { claim_id, .. } = c.claim(&h).await.unwrap() else {
        panic!("not claimed");
    };
    assert_eq!(
        c.grant(&h, &claim_id, "tx\nwith\nlines").await.unwrap(),
        Finish::Done
    );
    assert_eq!(
        c.record("fin:b").await.unwrap().unwrap().result,
        "tx\nwith\nlines"
    );
    assert_eq!(
        c.claim(&h).await.unwrap(),
        Claim::Duplicate {
            result: "tx\nwith\nlines".into()
        }
    );
    // An id with a line break is refused before anything is written.
    let mut bad = grant("fin:c", 1);
    bad.user_id = "u1\nGRANTED".into();
    assert!(matches!(c.claim(&bad).await, Err(ClaimError::Invalid(_))));
}

/// A one-shard store under a fresh prefix holding one claim record as a hash (as an
/// earlier build wrote them); answers the prefix and the store's config.
async fn hash_record_store(
    redis: &fred::prelude::Client,
) -> (String, reward_service::claim::ClaimConfig) {
    let prefix = format!("claim-test-{:08x}", rand::random::<u32>());
    // Every trade number is in shard 0 of one shard.
    let _: () = fred::prelude::HashesInterface::hset(
        redis,
        format!("{prefix}:{{{prefix}.0}}:t:old"),
        [("state", "GRANTED"), ("amount", "5")],
    )
    .await
    .unwrap();
    let cfg = reward_service::claim::ClaimConfig {
        key_prefix: prefix.clone(),
        shards: 1,
        retention_secs: 3600,
        ..reward_service::claim::ClaimConfig::default()
    };
    (prefix, cfg)
}

/// A store whose claim records an earlier build kept as hashes is refused at start
/// with the error that says so; one with none starts and names its format.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_of_hash_records_is_refused_at_start() {
    use reward_service::claim::Claims;
    let redis = raw_redis().await;
    // What an earlier build left: a hash record and its pin (no record format).
    let (prefix, cfg) = hash_record_store(&redis).await;
    let _: () =
        fred::prelude::HashesInterface::hset(&redis, format!("{prefix}:meta"), ("shards", 1))
            .await
            .unwrap();
    match Claims::connect(&redis_url(), cfg.clone()).await {
        Err(ClaimError::HashRecords(p)) => assert_eq!(p, prefix),
        other => panic!("started on hash records: {other:?}"),
    }
    // Without them it starts, and the pin names the format.
    let _: i64 =
        fred::prelude::KeysInterface::del(&redis, format!("{prefix}:{{{prefix}.0}}:t:old"))
            .await
            .unwrap();
    Claims::connect(&redis_url(), cfg).await.unwrap();
    let format: Option<String> =
        fred::prelude::HashesInterface::hget(&redis, format!("{prefix}:meta"), "records")
            .await
            .unwrap();
    assert_eq!(
        format.as_deref(),
        Some(reward_service::claim::RECORD_FORMAT)
    );
}

/// A store that lost its pin but holds hash records is refused as well: the pin is not
/// the only witness of the format.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_of_hash_records_without_its_pin_is_refused() {
    use reward_service::claim::Claims;
    let redis = raw_redis().await;
    let (prefix, cfg) = hash_record_store(&redis).await;
    match Claims::connect(&redis_url(), cfg).await {
        Err(ClaimError::HashRecords(p)) => assert_eq!(p, prefix),
        other => panic!("started on hash records without a pin: {other:?}"),
    }
    let pinned: i64 = fred::prelude::KeysInterface::exists(&redis, format!("{prefix}:meta"))
        .await
        .unwrap();
    assert_eq!(pinned, 0, "a refused start wrote the pin");
}

/// A metrics recorder for one test on one thread (`current_thread`), and what it has
/// counted of `reward_service_unreadable_records_total`.
struct ThreadRecorder(metrics_exporter_prometheus::PrometheusRecorder);

impl ThreadRecorder {
    fn new() -> Self {
        Self(metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder())
    }

    /// This thread's recorder until the guard drops.
    fn install(&self) -> metrics::LocalRecorderGuard<'_> {
        metrics::set_default_local_recorder(&self.0)
    }

    fn unreadable_records(&self) -> u64 {
        self.0
            .handle()
            .render()
            .lines()
            .find_map(|l| l.strip_prefix("reward_service_unreadable_records_total "))
            .map_or(0, |v| v.trim().parse::<u64>().unwrap())
    }
}
