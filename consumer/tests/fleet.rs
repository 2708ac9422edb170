//! The fleet-wide rate limit with consumers as separate processes (an e2e drill: three
//! `reward-consumer` processes, one killed with SIGKILL, about a minute of measuring):
//! coupon held to 50/s for the fleet, not per process, through the kill and a live
//! change to 100/s.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use fred::prelude::*;
use reward_testkit::perf_tier;
use reward_testkit::rates::ceiling;

/// A consumer as its own process (so it can be killed with SIGKILL), with its output
/// in the test's directory.
struct Member {
    child: std::process::Child,
}

impl Member {
    fn start(dir: &std::path::Path, name: &str, text: &str) -> Member {
        let config = dir.join(format!("{name}.toml"));
        std::fs::write(&config, text).unwrap();
        let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_reward-consumer"))
            .arg("--config")
            .arg(&config)
            .arg("--stats-file")
            .arg(dir.join(format!("{name}.json")))
            .arg("--stats-ms")
            .arg("100")
            .env("REWARD_SERVICE_TOKEN", CREDENTIAL)
            .env("RUST_LOG", "warn")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        Member { child }
    }

    /// Partitions assigned to the member (from its stats file; 0 before the first).
    fn assigned(dir: &std::path::Path, name: &str) -> u64 {
        std::fs::read(dir.join(format!("{name}.json")))
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| v["assigned"].as_u64())
            .unwrap_or(0)
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The test's topics (the events topic with six partitions, so each of three members
/// owns two) and a reward service; answers it and its gRPC URL.
async fn six_partitions_and_a_service(
    tag: &str,
    dir: &std::path::Path,
) -> (reward_service::server::Running, String) {
    reward_stack::topics::create_kafka_topics(&stack().kafka_brokers, &[&events_topic(tag)], 6)
        .await
        .unwrap();
    create_topics(tag).await;
    let svc = service(tag, dir).await;
    let grpc = format!("http://{}", svc.grpc_addr);
    (svc, grpc)
}

/// Waits until the three members `m0..m2` own two partitions each, and still do 3 s
/// later: a rebalance while coupons are in flight re-delivers them to the new owner,
/// and a permit spent on such a repeat credits nothing (the service answers it as
/// already granted), which would read as a limiter short of its rate.
async fn settle(dir: &std::path::Path) {
    let settled = || (0..3).all(|i| Member::assigned(dir, &format!("m{i}")) == 2);
    wait_for(120, "three members with two partitions each", || async {
        settled()
    })
    .await;
    // A later rebalance only lowers the rate (repeats credit nothing), never the
    // ceiling the correctness tiers assert; the perf tier wants a stable group.
    if perf_tier() {
        // The time is the subject: the assignment must hold still for 3 s.
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(settled(), "the group moved partitions again");
    }
}

/// Publishes `n` coupons of 1 for `user` and waits until more than `flowing` are
/// credited; answers the ledger to measure on.
async fn coupons_flowing(
    tag: &str,
    dir: &std::path::Path,
    user: &str,
    n: i64,
    flowing: i64,
) -> reward_service::downstream::Ledger {
    let events: Vec<_> = (0..n)
        .map(|i| event(&format!("{user}{i}"), user, "coupon", 1))
        .collect();
    publish(tag, dir, "massive", &events, &[]).await;
    let ledger = ledger(tag).await;
    wait_for(120, "coupons flowing", || async {
        ledger.balance(user, "coupon").await.unwrap() > flowing
    })
    .await;
    ledger
}

/// The fleet test of docs/design.md's fourth promise: three consumer processes in one
/// group, coupon limited to 50/s, measured from the ledger's credit times. The rate is
/// the fleet's, not each process's (per-process limiters would credit 150/s); it holds
/// when one member is killed with SIGKILL, and a live change to 100/s is in effect
/// within 1 s. Each window is held to the fleet's ceiling (per-process limiters
/// would break it threefold); reaching the rate (±5 %) is asserted in the perf tier.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_share_one_rate_through_a_kill_and_a_live_change() {
    let _alone = one_at_a_time().await;
    let tag = tag("f");
    let dir = dir(&tag);
    let (svc, grpc) = six_partitions_and_a_service(&tag, &dir).await;
    // The members join first and the group settles (two partitions each) before any
    // coupon is published: a rebalance while coupons are in flight re-delivers them to
    // the new owner, and a permit spent on such a repeat credits nothing (the service
    // answers it as already granted), which would read as a limiter short of its rate.
    let limits = "[limits.types.coupon]\nrate = 50\nburst = 5\n";
    let mut members: Vec<Member> = (0..3)
        .map(|i| {
            Member::start(
                &dir,
                &format!("m{i}"),
                &consumer_text(
                    &tag,
                    &dir,
                    &grpc,
                    "hold_ms = 5000\nconcurrency = 64",
                    limits,
                ),
            )
        })
        .collect();
    settle(&dir).await;
    let redis = redis().await;
    let live: i64 = redis.zcard(format!("{{fleet-{tag}}}:live")).await.unwrap();
    assert_eq!(live, 3, "members leasing");

    let ledger = coupons_flowing(&tag, &dir, "cp", 6000, 100).await;
    // The perf tier measures the rate over 20 s; the ceiling holds over any window.
    let three = rate(&ledger, "cp", if perf_tier() { 20.0 } else { 10.0 }).await;
    assert_fleet("three members at 50/s", &three, 50.0, 3.0, 0.05);

    members[0].kill();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let two = rate(&ledger, "cp", 10.0).await;
    assert_fleet("two members after a kill -9", &two, 50.0, 3.0, 0.05);

    let key = format!("cfg-{tag}");
    let _: i64 = redis
        .hset(key, ("limits.types.coupon.rate", "100"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let changed = rate(&ledger, "cp", 10.0).await;
    assert_fleet(
        "two members after the change to 100/s",
        &changed,
        100.0,
        2.0,
        0.05,
    );

    drop(members);
    credited_once(&ledger, &redis, &tag, "cp").await;
    svc.shutdown().await;
}

/// Each of `user`'s coupons (1 each) credited at most once, whatever the kills left
/// behind: the strict ledger counts a second credit of a trade as an incident, which
/// is exact however many credits are still landing (the service finishes the batches
/// the killed members sent); and once the credits stop, the balance is the number of
/// trades credited (two reads, so they are compared when they agree twice running).
async fn credited_once(
    ledger: &reward_service::downstream::Ledger,
    redis: &fred::prelude::Client,
    tag: &str,
    user: &str,
) {
    let account = ledger.account(user).await.unwrap();
    assert_eq!(account.double_credits, 0, "a coupon credited twice");
    let mut last = None;
    reward_testkit::eventually(Duration::from_secs(60), "the credits settled", async || {
        let now = (
            credited(redis, tag, user).await,
            ledger
                .balance(user, "coupon")
                .await
                .map_err(|e| e.to_string())?,
        );
        let settled = last == Some(now) && now.0 == now.1;
        last = Some(now);
        if settled {
            Ok(())
        } else {
            Err(format!("credited, balance: {now:?}"))
        }
    })
    .await;
}

/// The fleet's promise is a ceiling, and it holds on any machine: the credits stamped
/// in the window are at most the fleet rate over the window, plus the fleet bucket
/// (two 100 ms lease periods of the rate, above these tests' bursts), plus what each
/// member can hold leased (two lease periods of the fleet rate each), plus
/// [`reward_testkit::rates::STAMP_SLACK_SECS`] of the rate (the ledger stamps each credit after the gRPC hop,
/// so a stall bunches credits admitted just before the window into it). Per-process
/// limiters would credit `members` times the rate. How close the fleet came to its
/// rate is printed here and asserted (±`tolerance`) only in the perf tier.
fn assert_fleet(what: &str, got: &Rate, rate: f64, members: f64, tolerance: f64) {
    let secs = got.seconds.len() as f64;
    let credits = got.per_sec * secs;
    let ceiling = ceiling(rate, secs, (1.0 + members) * rate * 0.2);
    eprintln!(
        "{what}: {credits:.0} credits in {secs} s ({:.2}/s, {:+.1} % of {rate}/s; ceiling {ceiling:.0}); per second {:?}",
        got.per_sec,
        (got.per_sec / rate - 1.0) * 100.0,
        got.seconds
    );
    assert!(
        credits <= ceiling,
        "{what}: {credits:.0} credits in {secs} s, over the fleet's ceiling {ceiling:.0}; per second {:?}",
        got.seconds
    );
    if perf_tier() {
        assert!(
            (rate * (1.0 - tolerance)..=rate * (1.0 + tolerance)).contains(&got.per_sec),
            "{what}: {:.1}/s over the window (ledger credit times), want {rate}/s ±{:.0} %; per second: {:?}",
            got.per_sec,
            tolerance * 100.0,
            got.seconds
        );
    }
}

/// The fleet cut off from Redis (every member's connections to it blackholed for
/// about 9 s through a fault proxy: the lease script gets no answer) and back. While cut
/// off, each member refills itself at the rate divided by the members it last saw, so
/// the fleet stays at its rate. Every window is held to the fleet's ceiling; how near
/// the rate it came (±10 % cut off, ±5 % after) is asserted in the perf tier, and on
/// the paused clock by the fleet's unit test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_cut_off_from_redis_stays_near_its_rate_and_comes_back() {
    let _alone = one_at_a_time().await;
    let tag = tag("fb");
    let dir = dir(&tag);
    let redis_url = stack().redis_url;
    assert!(
        !redis_url.starts_with("redis-cluster://"),
        "this drill proxies the single Redis; a cluster's clients would go around the proxy"
    );
    let host_port = stack().redis_host_port().unwrap();
    let upstream = std::net::ToSocketAddrs::to_socket_addrs(host_port.as_str())
        .unwrap()
        .next()
        .unwrap();
    let proxy = faultproxy::Proxy::start(upstream).await.unwrap();
    let via = redis_url.replace(&host_port, &proxy.addr().to_string());
    assert_ne!(via, redis_url, "the member config names the proxy");
    let (svc, grpc) = six_partitions_and_a_service(&tag, &dir).await;
    let limits = "[limits.types.coupon]\nrate = 30\nburst = 5\n";
    let members: Vec<Member> = (0..3)
        .map(|i| {
            let text = consumer_text(
                &tag,
                &dir,
                &grpc,
                "hold_ms = 5000\nconcurrency = 64",
                limits,
            )
            .replace(&redis_url, &via);
            Member::start(&dir, &format!("m{i}"), &text)
        })
        .collect();
    settle(&dir).await;

    let ledger = coupons_flowing(&tag, &dir, "cq", 3000, 60).await;
    let before = rate(&ledger, "cq", 8.0).await;
    assert_fleet("three members at 30/s", &before, 30.0, 3.0, 0.05);

    proxy.set(faultproxy::Mode::Blackhole);
    // The leases in hand run out and the lease script times out: the fallback.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let cut = rate(&ledger, "cq", 8.0).await;
    proxy.set(faultproxy::Mode::Pass);
    assert_fleet("cut off from Redis", &cut, 30.0, 3.0, 0.10);
    assert!(proxy.stats().connections >= 3, "{:?}", proxy.stats());

    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = rate(&ledger, "cq", 8.0).await;
    assert_fleet("three members back on Redis", &after, 30.0, 3.0, 0.05);

    drop(members);
    let redis = redis().await;
    credited_once(&ledger, &redis, &tag, "cq").await;
    svc.shutdown().await;
}
