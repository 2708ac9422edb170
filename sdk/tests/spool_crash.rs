//! Both brokers down → the spool; `kill -9` the process; start again with brokers
//! up → every spooled reward is delivered.
//!
//! The test re-runs its own binary as the child that spools (selected by an env
//! variable), so the kill is a real SIGKILL of a real process.

// Test code: a failed unwrap is a failed test, which is what we want (helpers too,
// which clippy's allow-unwrap-in-tests does not cover).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{stack, started, temp_dir, topics, unique};
use reward_stack::topics::{create_kafka_topics, create_rocketmq_topics};
use reward_testkit::readback::{read_kafka, read_rocketmq};
use sdk::Sdk;
use sdk::config::SdkConfig;
use sdk::request::{RedEnvelopeRain, User};
use sdk::token::KeyRing;

const CHILD_ENV: &str = "SDK_SPOOL_CRASH_CHILD";
const N: u64 = 5_000;

/// The child: both producers point at a closed port, so every event ends in the spool.
async fn child(dir: &str, activity: &str) {
    let s = stack();
    let text = reward_testkit::sdk_configs::brokers_down(
        &s.redis_url,
        "rt",
        "",
        std::path::Path::new(dir),
        "after_ms = 300\n[batch]\nsend_timeout_ms = 500\n[retry]\nbackoff_initial_ms = 20\nbackoff_max_ms = 100",
    );
    let cfg = SdkConfig::from_toml_str(&text).unwrap();
    let sdk = Sdk::builder(cfg)
        .key_ring(KeyRing::random(1))
        .start()
        .await
        .unwrap();
    let rain = RedEnvelopeRain::new(activity, "cash");
    for i in 0..N {
        sdk.send_reward(rain.grab(&User::new(i.to_string()), 1, 1))
            .await
            .unwrap();
    }
    reward_testkit::eventually(
        Duration::from_secs(60),
        "every reward spooled",
        async || {
            let s = sdk.stats();
            if s.spooled >= N {
                Ok(())
            } else {
                Err(format!("{s:?}"))
            }
        },
    )
    .await;
    println!("SPOOLED {}", sdk.stats().spooled);
    // Time is the subject: alive, holding its spool open, until the parent kills it.
    tokio::time::sleep(Duration::from_secs(600)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spooled_rewards_survive_kill_9_and_are_delivered() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        let activity = std::env::var("SDK_SPOOL_CRASH_ACTIVITY").unwrap();
        child(&dir, &activity).await;
        return;
    }
    let s = stack();
    let tag = unique("crash");
    let t = topics(&tag);
    let tr: Vec<&str> = t.iter().map(String::as_str).collect();
    create_kafka_topics(&s.kafka_brokers, &tr, 3).await.unwrap();
    create_rocketmq_topics(&s.rocketmq_namesrv, &tr)
        .await
        .unwrap();
    let spool = temp_dir("spool-crash");
    let activity = unique("act");

    // SIGKILL once it says its rewards are spooled.
    let (spool_env, activity_env) = (spool.display().to_string(), activity.clone());
    let line = tokio::task::spawn_blocking(move || {
        reward_testkit::kill_self_at(
            "spooled_rewards_survive_kill_9_and_are_delivered",
            &[
                (CHILD_ENV, spool_env.as_str()),
                ("SDK_SPOOL_CRASH_ACTIVITY", activity_env.as_str()),
            ],
            "SPOOLED",
        )
    })
    .await
    .unwrap();
    assert_eq!(
        line.as_deref(),
        Some(format!("SPOOLED {N}").as_str()),
        "the child did not spool everything"
    );

    // Restart with brokers up: the spool is replayed.
    let sdk = started(&s, &tag, &spool, "", "replay_every_ms = 200").await;
    assert!(sdk.spool_bytes() > 0);
    reward_testkit::eventually(
        Duration::from_secs(60),
        "every reward replayed",
        async || {
            let s = sdk.stats();
            if s.replayed >= N {
                Ok(())
            } else {
                Err(format!("{s:?}"))
            }
        },
    )
    .await;
    assert_eq!(sdk.stats().replayed, N);
    assert_eq!(sdk.spool_bytes(), 0);
    sdk.close(Duration::from_secs(10)).await;

    // Every one is on a broker (massive: Kafka first, RocketMQ as backup).
    let topic = format!("massive-{tag}");
    let (kafka, t2) = (s.kafka_brokers.clone(), topic.clone());
    let mut back = tokio::task::spawn_blocking(move || {
        read_kafka(&kafka, &t2, N as usize, Duration::from_secs(60))
    })
    .await
    .unwrap()
    .unwrap();
    if (back.seen.len() as u64) < N {
        back.merge(
            read_rocketmq(
                &s.rocketmq_namesrv,
                &topic,
                N as usize,
                Duration::from_secs(60),
            )
            .await
            .unwrap(),
        );
    }
    let rain = RedEnvelopeRain::new(&activity, "cash");
    let missing = (0..N)
        .filter(|i| {
            !back
                .seen
                .contains_key(&rain.grab(&User::new(i.to_string()), 1, 1).trade_no)
        })
        .count();
    assert_eq!(
        missing, 0,
        "{missing} spooled rewards never reached a broker"
    );
    std::fs::remove_dir_all(&spool).ok();
}
