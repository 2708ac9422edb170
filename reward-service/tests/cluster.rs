//! Routing on the stack's Redis Cluster (3 primaries + 3 replicas, started here with
//! `REWARD_REDIS_TOPOLOGY=cluster ops/stack up`; fails, never skips).
//!
//! A call sent to a primary that does not own its key's slot is answered `MOVED`, and
//! the client then refetches the whole slot map before it resends: correct, but two
//! calls in three paying for a new connection and a `CLUSTER SLOTS` make `GrantBatch`
//! many times slower on the cluster than on one node
//! (docs/findings/benchmarks-history.md). These tests count the `MOVED` answers the
//! primaries gave (`INFO errorstats`) around a piece of work on a stable cluster and
//! want none. And `claims.replica_acks`: claims wait for a replica where one exists.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;

use fred::prelude::{Client, ClientLike, KeysInterface, Value};
use reward_runtime::keyspace;
use reward_runtime::script::Script;
use reward_service::claim::{Claim, ClaimConfig, ClaimError, Claims, Grant};
use reward_service::downstream::{Downstream, Ledger};
use reward_service::grant::{Granter, Outcome};

async fn client(url: &str) -> Client {
    let c = reward_runtime::redis::builder(url, std::time::Duration::from_secs(5))
        .unwrap()
        .build()
        .unwrap();
    c.init().await.unwrap();
    c
}

/// `MOVED` answers given by every primary since it started.
async fn moved(c: &Client) -> u64 {
    let mut total = 0;
    for node in keyspace::nodes(c).await.unwrap() {
        let info: String = keyspace::on_node(c, node.as_ref(), "INFO", vec!["errorstats"])
            .await
            .unwrap();
        total += info
            .lines()
            .find_map(|l| l.trim().strip_prefix("errorstat_MOVED:count="))
            .map_or(0, |n| n.parse::<u64>().unwrap());
    }
    total
}

/// Script calls sent as one pipeline each reach the primary of their first key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_script_calls_go_to_their_own_primary() {
    let url = reward_testkit::cluster_url();
    let c = client(&url).await;
    let script = Script::load(&c, "return redis.call('INCRBY', KEYS[1], ARGV[1])")
        .await
        .unwrap();
    let prefix = reward_testkit::unique("pipe-");
    let keys: Vec<String> = (0..300).map(|i| format!("{prefix}:{i}")).collect();
    let calls: Vec<Vec<Value>> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| vec![1.into(), k.as_str().into(), (i as i64 + 1).into()])
        .collect();
    let before = moved(&c).await;
    let replies: Vec<Result<i64, _>> = script.eval_pipeline(&c, &calls).await;
    let after = moved(&c).await;
    for (i, r) in replies.into_iter().enumerate() {
        assert_eq!(r.unwrap(), i as i64 + 1, "call {i}");
    }
    assert_eq!(
        after - before,
        0,
        "MOVED answers to one pipeline of 300 calls"
    );
    for k in &keys {
        let _: i64 = c.del(k).await.unwrap();
    }
}

/// A batch of grants to many users (claims, ledger credits, finishes) on the cluster:
/// every grant credited once, and no call sent to the wrong primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_grants_sends_nothing_to_the_wrong_primary() {
    let url = reward_testkit::cluster_url();
    let c = client(&url).await;
    let tag = reward_testkit::unique("");
    let claims = Claims::connect(
        &url,
        ClaimConfig {
            key_prefix: format!("cluster-claims-{tag}"),
            shards: 8,
            retention_secs: 3600,
            ..ClaimConfig::default()
        },
    )
    .await
    .unwrap();
    claims.set_budget("rain", 10_000).await.unwrap();
    let ledger = Ledger::connect(&url, &format!("cluster-ledger-{tag}"), &HashMap::new())
        .await
        .unwrap();
    let d: std::sync::Arc<dyn Downstream> = std::sync::Arc::new(ledger.clone());
    let archive = std::env::temp_dir().join(format!("cluster-archive-{tag}.jsonl"));
    let granter = Granter::new(
        claims.clone(),
        HashMap::from([("cash".to_string(), d)]),
        archive,
    );
    let grants: Vec<Grant> = (0..200)
        .map(|i| Grant {
            scene: "rain".into(),
            activity_id: "cny".into(),
            trade_no: format!("cluster:{tag}:{i}"),
            user_id: format!("u{i}"),
            reward_type: "cash".into(),
            amount: 3,
        })
        .collect();
    // The scripts' first calls on each primary load them there (NOSCRIPT, not MOVED).
    let before = moved(&c).await;
    let outcomes = granter.grant_many(&grants).await;
    let after = moved(&c).await;
    for (i, o) in outcomes.into_iter().enumerate() {
        assert!(matches!(o.unwrap(), Outcome::Granted { .. }), "grant {i}");
    }
    assert_eq!(claims.spent("rain").await.unwrap(), 600);
    for i in [0, 57, 199] {
        assert_eq!(ledger.balance(&format!("u{i}"), "cash").await.unwrap(), 3);
    }
    assert_eq!(after - before, 0, "MOVED answers to a batch of 200 grants");
}

/// `claims.replica_acks`: on a Redis whose primaries have fewer replicas than asked,
/// the claim store refuses to start (a typed error naming the node), so a single
/// Redis cannot be configured into refusing every grant; on the stack's Redis Cluster
/// (one replica per primary, started here: `REWARD_REDIS_TOPOLOGY=cluster ops/stack
/// up`) every claim waits for its replica and is used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_wait_for_a_replica_only_where_one_exists() {
    let cfg = |acks| ClaimConfig {
        key_prefix: format!("replica-{:08x}", rand::random::<u32>()),
        shards: 4,
        retention_secs: 3600,
        replica_acks: acks,
        replica_wait_ms: 2000,
        ..ClaimConfig::default()
    };
    let single = reward_testkit::StackEnv::from_env();
    if !single.redis_url.starts_with("redis-cluster://") {
        match Claims::connect(&single.redis_url, cfg(1)).await {
            Err(ClaimError::Replicas { have, wanted, .. }) => assert_eq!((have, wanted), (0, 1)),
            other => panic!("a Redis without replicas took replica_acks = 1: {other:?}"),
        }
    }
    let url = reward_testkit::cluster_url();
    assert!(
        Claims::connect(&url, cfg(2)).await.is_err(),
        "two replicas asked, one exists"
    );
    let claims = Claims::connect(&url, cfg(1)).await.unwrap();
    claims.set_budget("rain", 1_000).await.unwrap();
    for i in 0..20 {
        let g = common::grant(&format!("rain:replica:{i}"), 10);
        assert!(matches!(
            claims.claim(&g).await.unwrap(),
            Claim::Claimed { .. }
        ));
    }
    let many: Vec<_> = (20..60)
        .map(|i| common::grant(&format!("rain:replica:{i}"), 10))
        .collect();
    for r in claims.claim_many(&many).await {
        assert!(matches!(r.unwrap(), Claim::Claimed { .. }));
    }
    assert_eq!(claims.spent("rain").await.unwrap(), 600);
}
