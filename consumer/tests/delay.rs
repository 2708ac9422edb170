//! The Redis delay queue's lease: a claimed member is invisible to other movers for
//! one lease, comes back if it was not removed (its mover died before the SDK
//! confirmed it), and is gone once removed. Members wait until they are due.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use bytes::Bytes;
use reward_consumer::delay::DelayQueue;
use reward_runtime::clock::now_ms;

/// The first claim of up to `max` members of `coin` that finds any: a claim within the
/// lease of the members finds none and leases nothing.
async fn due_again(q: &DelayQueue, max: usize, what: &str) -> Vec<Bytes> {
    reward_testkit::eventually(Duration::from_secs(30), what, async || {
        let got = q.claim_due("coin", 0, now_ms(), max).await.unwrap();
        (!got.is_empty()).then_some(got)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_are_leased_removed_or_returned() {
    let s = common::stack();
    let prefix = format!("delay-test-{:08x}", rand::random::<u32>());
    let q = DelayQueue::connect(&s.redis_url, &prefix, 1, 400)
        .await
        .unwrap();
    let now = now_ms();
    for i in 0..10 {
        let m = Bytes::from(format!("due-{i}"));
        q.park("coin", &format!("t{i}"), m, now - 1).await.unwrap();
    }
    q.park("coin", "later", Bytes::from_static(b"later"), now + 60_000)
        .await
        .unwrap();
    assert_eq!(q.types().await.unwrap(), vec!["coin".to_string()]);
    assert_eq!(q.len("coin").await.unwrap(), 11);

    // One mover takes the 10 due members; the one due in a minute stays.
    let first = q.claim_due("coin", 0, now_ms(), 100).await.unwrap();
    assert_eq!(first.len(), 10);
    // Within the lease, another mover sees none of them.
    assert!(
        q.claim_due("coin", 0, now_ms(), 100)
            .await
            .unwrap()
            .is_empty()
    );
    // The first mover confirms and removes half, then "dies".
    q.remove("coin", 0, first[..5].to_vec()).await.unwrap();
    assert_eq!(q.len("coin").await.unwrap(), 6);
    // After the lease the other five come back (all at once: one claim leased them),
    // exactly those.
    let mut again = due_again(&q, 100, "the five unremoved members back after the lease").await;
    let mut rest = first[5..].to_vec();
    again.sort();
    rest.sort();
    assert_eq!(again, rest);
    // Claims respect `max`.
    let two = due_again(&q, 2, "the five members back after the second lease").await;
    assert_eq!(two.len(), 2);
    // Leave nothing behind in the stack's Redis.
    let all = q
        .claim_due("coin", 0, now_ms() + 120_000, 100)
        .await
        .unwrap();
    q.remove("coin", 0, all).await.unwrap();
    assert_eq!(q.len("coin").await.unwrap(), 0);
}
