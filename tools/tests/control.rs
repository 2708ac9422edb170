//! `reward-ctl` against a consumer crediting while traffic flows: a rate change is
//! followed within about a second (from a second after it, the credits keep under the
//! new rate's ceiling); an invalid change is refused and nothing changes; the audit
//! trail says who changed what. How close the credits came to each rate depends on
//! the machine: printed here, asserted in the perf tier (`ops/test perf`). Needs the
//! local stack (`ops/stack up`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::process::Command;
use std::time::Duration;

use reward_baseline::parts::{produce_events, start_consumer, start_service};
use reward_stack::env::StackEnv;

fn ctl(key: &str, args: &[&str]) -> (i32, String) {
    let repo = reward_testkit::repo();
    reward_testkit::output(
        Command::new(env!("CARGO_BIN_EXE_reward-ctl"))
            .args(["--key", key, "--who", "control-test", "--audit-log"])
            .arg(std::env::temp_dir().join(format!("{key}.audit.jsonl")))
            .args(args)
            .current_dir(repo),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_change_is_followed_within_a_second_and_a_bad_one_changes_nothing() {
    let env = StackEnv::from_env();
    assert!(
        std::net::TcpStream::connect(env.redis_host_port().unwrap()).is_ok(),
        "Redis is not answering; start the local stack with `ops/stack up`"
    );
    let tag = format!("ctl{:08x}", rand::random::<u32>());
    let dir = std::env::temp_dir().join(format!("control-{tag}"));
    let (service, credential) = start_service(&env, &tag, &dir, 0, &env.wallet_redis_url)
        .await
        .unwrap();
    service
        .service()
        .granter()
        .claims()
        .set_budget("bench/rain", 1_000_000)
        .await
        .unwrap();
    let topic = format!("cb-{tag}");
    reward_stack::topics::create_kafka_topics(&env.kafka_brokers, &[&topic], 2)
        .await
        .unwrap();
    // A backlog the consumer drains at its cash rate: traffic flows all through.
    let users = 20u64;
    let proofs = service.service().sdk().codec().proofs();
    produce_events(&env, &topic, 4_000, users, proofs)
        .await
        .unwrap();
    let consumer = start_consumer(
        &env,
        &tag,
        &dir,
        &topic,
        &service.grpc_addr.to_string(),
        credential,
        &[],
        &[
            (
                "REWARD_CONSUMER__LIMITS__TYPES__CASH__RATE".into(),
                "200".into(),
            ),
            (
                "REWARD_CONSUMER__LIMITS__TYPES__CASH__BURST".into(),
                "10".into(),
            ),
        ],
    )
    .await
    .unwrap();
    let key = format!("cbcfg-{tag}");
    reward_testkit::eventually(
        Duration::from_secs(60),
        "the consumer crediting",
        async || consumer.stats().granted > 0,
    )
    .await;
    // Time is the subject: 3 s of credits at the old rate, the last 2 s of them measured.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let changed_at = reward_runtime::clock::now_ms();
    let (code, out) = ctl(&key, &["set", "limits.types.cash.rate", "50"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("limits.types.cash.rate: (file value) -> 50"),
        "{out}"
    );
    // Time is the subject: the 4 s measured at the new rate, from 1 s after the change.
    tokio::time::sleep(Duration::from_secs(5)).await;

    // Refused, with the reason, and nothing written: the consumer keeps 50/s.
    for (args, why) in [
        (
            vec!["set", "limits.types.cash.rate", "-5"],
            "must be a rate in credits/s above 0",
        ),
        (
            vec!["set", "limits.types.gold.rate", "10"],
            "unknown reward type \"gold\"",
        ),
        (vec!["set", "queues.massive.ratio", "101"], "0..=100"),
    ] {
        let (code, out) = ctl(&key, &args);
        assert_eq!(code, 2, "{args:?}: {out}");
        assert!(
            out.contains("refused") && out.contains(why),
            "{args:?}: {out}"
        );
    }
    let (_, shown) = ctl(&key, &["show"]);
    assert_eq!(shown.trim(), "limits.types.cash.rate = 50");
    assert_eq!(consumer.limits().limit_of("cash").rate, 50.0);
    let (_, audit) = ctl(&key, &["changes"]);
    let lines: Vec<&str> = audit.lines().collect();
    assert_eq!(lines.len(), 1, "{audit}");
    assert!(
        lines[0].contains("control-test limits.types.cash.rate: (file value) -> 50"),
        "{audit}"
    );

    let report = consumer.shutdown().await;
    service.shutdown().await;
    assert_eq!(report.unsettled, 0);

    // Credit times from the ledger: ~200/s before the change, ~50/s from one second
    // after it.
    let ledger = reward_service::downstream::Ledger::connect(
        &env.wallet_redis_url,
        &format!("gbl-{tag}"),
        &HashMap::new(),
    )
    .await
    .unwrap();
    let mut times = Vec::new();
    for u in 0..users {
        times.extend(
            ledger
                .account(&u.to_string())
                .await
                .unwrap()
                .credited
                .into_values(),
        );
    }
    let rate = |from: i64, to: i64| {
        times.iter().filter(|t| (from..to).contains(*t)).count() as f64 * 1000.0
            / (to - from) as f64
    };
    let before = rate(changed_at - 2_000, changed_at);
    let after = rate(changed_at + 1_000, changed_at + 5_000);
    // The new limit from a second after the change: 50/s over the 4 s, its bucket
    // (burst 10, or two 100 ms lease periods) and the consumer's leased pool, and what
    // the old rate's 200/s above it may bunch in, admitted before the change and
    // stamped late (`STAMP_SLACK_SECS`).
    let credits_after = after * 4.0;
    let most = reward_testkit::rates::ceiling(50.0, 4.0, 2.0 * 10.0)
        + (200.0 - 50.0) * reward_testkit::rates::STAMP_SLACK_SECS;
    eprintln!(
        "before the change: {before:.0}/s (limit 200); from 1 s after it: {after:.0}/s (limit 50; {credits_after:.0} credits, ceiling {most:.0}); {} credits in all; {:?}",
        times.len(),
        report.stats
    );
    assert!(
        credits_after <= most,
        "from 1 s after the change: {credits_after:.0} credits in 4 s, over the ceiling {most:.0} of 50/s; before {before:.0}/s"
    );
    if reward_testkit::perf_tier() {
        assert!(
            before > 120.0,
            "before the change: {before:.0}/s (limit 200)"
        );
        assert!(
            after < 75.0 && after > 25.0,
            "from 1 s after the change: {after:.0}/s (limit 50); before {before:.0}/s"
        );
    }
}
