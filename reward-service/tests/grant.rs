//! One grant end to end (claim, credit, finish, archive) against the real Redis
//! (`ops/stack up`; fails, never skips).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{after_hold, claims, grant, redis_url};
use reward_service::downstream::{
    Contract, Credit, CreditError, CreditFuture, Downstream, ErrorCode, Ledger,
};
use reward_service::grant::{Granter, Outcome};

/// A downstream that fails with the scripted codes first, then credits; it honours
/// the idempotency key (so an in-doubt credit is simply sent again).
#[derive(Debug, Default)]
struct Scripted {
    failures: Mutex<Vec<ErrorCode>>,
    calls: AtomicUsize,
}

impl Downstream for Scripted {
    fn credit<'a>(&'a self, c: &'a Credit) -> CreditFuture<'a> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let next = self.failures.lock().unwrap().pop();
        Box::pin(async move {
            match next {
                Some(code) => Err(CreditError::new(code, format!("scripted {code:?}"))),
                None => Ok(format!("receipt-{}", c.trade_no)),
            }
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

fn archive() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("grant-archive-{:08x}.jsonl", rand::random::<u32>()))
}

async fn granter(d: Arc<dyn Downstream>, archive: &std::path::Path) -> Granter {
    let c = claims(2, 30_000).await;
    c.set_budget("rain", 1_000).await.unwrap();
    Granter::new(
        c,
        HashMap::from([("cash".to_string(), d)]),
        archive.to_path_buf(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retryable_failures_come_back_and_the_retry_credits_once() {
    // Popped from the end: rate limited first, then a timeout, then success.
    let d = Arc::new(Scripted {
        failures: Mutex::new(vec![ErrorCode::Timeout, ErrorCode::RateLimited]),
        ..Scripted::default()
    });
    let g = granter(d.clone(), &archive()).await;
    let r = grant("rain:g1:u1", 30);
    for _ in 0..2 {
        assert!(matches!(
            g.grant(&r).await.unwrap(),
            Outcome::RetryLater { .. }
        ));
    }
    // The timeout left the grant in doubt, held for the downstream's longest call
    // plus the margin; after that the retry repeats the credit under the same key.
    let first = after_hold(&g, &r).await;
    assert_eq!(
        first,
        Outcome::Granted {
            receipt: "receipt-rain:g1:u1".into(),
            duplicate: false
        }
    );
    assert_eq!(
        g.grant(&r).await.unwrap(),
        Outcome::Granted {
            receipt: "receipt-rain:g1:u1".into(),
            duplicate: true
        }
    );
    assert_eq!(
        d.calls.load(Ordering::SeqCst),
        3,
        "two failures, one credit"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permanent_failure_is_refunded_and_archived_once() {
    let d = Arc::new(Scripted {
        failures: Mutex::new(vec![ErrorCode::AccountClosed]),
        ..Scripted::default()
    });
    let path = archive();
    let c = claims(1, 30_000).await;
    c.set_budget("rain", 100).await.unwrap();
    let g = Granter::new(
        c.clone(),
        HashMap::from([("cash".to_string(), d.clone() as Arc<dyn Downstream>)]),
        path.clone(),
    );
    let r = grant("rain:g2:u1", 40);
    assert!(matches!(
        g.grant(&r).await.unwrap(),
        Outcome::FailedPermanent { .. }
    ));
    assert!(matches!(
        g.grant(&r).await.unwrap(),
        Outcome::FailedPermanent { .. }
    ));
    assert_eq!(d.calls.load(Ordering::SeqCst), 1, "never sent again");
    assert_eq!(c.spent("rain").await.unwrap(), 0, "refunded");
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    let rec: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(rec["trade_no"], "rain:g2:u1");
    assert_eq!(rec["code"], "ACCOUNT_CLOSED");
    assert_eq!(rec["amount"], 40);
    let _ = std::fs::remove_file(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_type_without_downstream_fails_permanently_never_silently() {
    let path = archive();
    let g = granter(Arc::new(Scripted::default()), &path).await;
    let r = reward_service::claim::Grant {
        reward_type: "coin".into(),
        ..grant("rain:g3:u1", 5)
    };
    match g.grant(&r).await.unwrap() {
        Outcome::FailedPermanent { reason, .. } => {
            assert!(reason.contains("no downstream"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 1);
    let _ = std::fs::remove_file(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_grants_reach_the_ledger_once() {
    let prefix = format!("ledger-test-{:08x}", rand::random::<u32>());
    let ledger = Arc::new(
        Ledger::connect(&redis_url(), &prefix, &HashMap::new())
            .await
            .unwrap(),
    );
    let g = Arc::new(granter(ledger.clone(), &archive()).await);
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let g = g.clone();
        tasks.push(tokio::spawn(async move {
            let mut granted = 0;
            for _ in 0..100 {
                match g.grant(&grant("rain:g4:u1", 7)).await.unwrap() {
                    Outcome::Granted { .. } => granted += 1,
                    Outcome::RetryLater { .. } => {}
                    other => panic!("{other:?}"),
                }
            }
            granted
        }));
    }
    let mut granted = 0;
    for t in tasks {
        granted += t.await.unwrap();
    }
    assert!(granted >= 1);
    assert_eq!(
        ledger.balance("u1", "cash").await.unwrap(),
        7,
        "credited once"
    );
    assert_eq!(ledger.double_credits(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_moves_its_credited_and_duplicate_tokens_together() {
    use reward_service::tokens::{MOVE_CHUNK, Tokens};
    let store_cfg = sdk::config::StoreConfig {
        redis_url: redis_url(),
        key_prefix: format!("tok-test-{:08x}", rand::random::<u32>()),
        ttl_secs: 3600,
        ..sdk::config::StoreConfig::default()
    };
    let store = sdk::store::TokenStore::connect(store_cfg).await.unwrap();
    let tokens = Tokens::new(store.clone(), 3600).await.unwrap();
    // More grants than one move call takes, over 40 users; one trade has no stored
    // token, one fails for good (its token must stay pending).
    let n = MOVE_CHUNK + 44;
    let grants: Vec<_> = (0..n)
        .map(|i| {
            let mut g = grant(&format!("rain:mv:{i}"), 1);
            g.user_id = format!("mv{}", i % 40);
            if i == 7 {
                g.reward_type = "gem".into();
            }
            g
        })
        .collect();
    // What the SDK does for each reward: its token into the user's pending hash.
    let store_tokens = |some: Vec<reward_service::claim::Grant>| {
        let store = store.clone();
        async move {
            for g in some {
                let sealed = format!("sealed-{}", g.trade_no);
                store
                    .put(&g.user_id, &g.activity_id, &g.trade_no, &sealed)
                    .await
                    .unwrap();
            }
        }
    };
    store_tokens(
        grants
            .iter()
            .filter(|g| g.trade_no != "rain:mv:3")
            .cloned()
            .collect(),
    )
    .await;
    let g = granter(Arc::new(Scripted::default()), &archive())
        .await
        .with_tokens(tokens.clone());
    let outcomes: Vec<_> = g
        .grant_many(&grants)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let granted = outcomes
        .iter()
        .filter(|o| {
            matches!(
                o,
                Outcome::Granted {
                    duplicate: false,
                    ..
                }
            )
        })
        .count();
    assert_eq!(granted, n - 1);
    assert!(matches!(outcomes[7], Outcome::FailedPermanent { .. }));
    let (mut pending, mut credited) = (0, 0);
    for u in 0..40 {
        let held = tokens.held(&format!("mv{u}"), "cny").await.unwrap();
        pending += held.pending.len();
        credited += held.credited.len();
        for (trade, sealed) in &held.credited {
            assert_eq!(sealed, &format!("sealed-{trade}"));
        }
    }
    assert_eq!((pending, credited), (1, n - 2), "only the failed one stays");
    assert_eq!(tokens.move_failures(), 0);

    // The token of rain:mv:3 lands after its credit (a write retried through an
    // outage): it goes to the credited hash, never back to the pending one.
    let late = &grants[3];
    store
        .put(
            &late.user_id,
            &late.activity_id,
            &late.trade_no,
            "sealed-rain:mv:3",
        )
        .await
        .unwrap();
    let held = tokens.held(&late.user_id, "cny").await.unwrap();
    assert!(!held.pending.contains_key("rain:mv:3"), "{held:?}");
    assert_eq!(
        held.credited.get("rain:mv:3").map(String::as_str),
        Some("sealed-rain:mv:3")
    );

    // The client repeats some requests after their credit: the SDK stores those
    // tokens again, and the duplicate outcome moves them out again.
    store_tokens(grants[10..20].to_vec()).await;
    let again = g.grant_many(&grants[10..20]).await;
    assert!(again.iter().all(|o| matches!(
        o,
        Ok(Outcome::Granted {
            duplicate: true,
            ..
        })
    )));
    let pending: usize = futures_util::future::join_all((0..40).map(|u| {
        let tokens = tokens.clone();
        async move {
            tokens
                .held(&format!("mv{u}"), "cny")
                .await
                .unwrap()
                .pending
                .len()
        }
    }))
    .await
    .into_iter()
    .sum();
    assert_eq!(pending, 1);

    // Direct: one answer per token, in order; a token not held answers false.
    let moved = tokens
        .credited_many(&[
            ("mv7", "cny", "rain:mv:7"),
            ("mv3", "cny", "rain:mv:3"),
            ("mv7", "cny", "rain:mv:7"),
        ])
        .await;
    assert_eq!(moved, vec![true, false, false]);
}
