//! The fleet's rate on tokio's paused clock, through the in-memory fleet: the
//! arithmetic of the lease loop, the pools and the script, without Redis and without
//! the machine's speed. Time here is virtual; every figure is exact for the code.
//!
//! The Redis tests (`tests/fleet.rs`, `tests/limits.rs`) can only prove the ceiling
//! on a busy machine; the floor (a limiter that starves its downstream is a broken
//! promise too) is proved here: three instances credit at least 97 % of the fleet's
//! rate, through a kill of one of them, a cut-off from the store and the return.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::memory::MemoryFleet;
use super::run;
use crate::limits::{Limits, LimitsConfig, Verdict};

const RATE: f64 = 30.0;
const BURST: u32 = 5;
const PERIOD: Duration = Duration::from_millis(100);
const LIVE_TTL: Duration = Duration::from_secs(2);

/// One instance: its lease loop and a dispatcher that asks for a coupon permit every
/// 2 ms (far more often than the rate allows), counting what passed.
struct Member {
    passed: Arc<AtomicU64>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Member {
    fn start(fleet: &MemoryFleet, name: &str) -> Member {
        let text = format!("[limits.types.coupon]\nrate = {RATE}\nburst = {BURST}\n");
        let doc: toml::Table = text.parse().unwrap();
        let limits = Limits::new(LimitsConfig::from_document(&doc).unwrap());
        let (stop, stop_rx) = watch::channel(false);
        let store = fleet.instance(name, LIVE_TTL, PERIOD);
        let lease = tokio::spawn(run(store, PERIOD, limits.clone(), stop_rx.clone()));
        let passed = Arc::new(AtomicU64::new(0));
        let count = passed.clone();
        let dispatch = tokio::spawn(async move {
            while !*stop_rx.borrow() {
                if limits.check("coupon") == Verdict::Pass {
                    count.fetch_add(1, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        });
        Member {
            passed,
            stop,
            tasks: vec![lease, dispatch],
        }
    }

    /// Dies as `kill -9` would: nothing given back, the live entry left to expire.
    fn kill(self) {
        for t in &self.tasks {
            t.abort();
        }
    }

    async fn leave(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

fn total(members: &[Member]) -> u64 {
    members
        .iter()
        .map(|m| m.passed.load(Ordering::Relaxed))
        .sum()
}

/// Permits passed by `members` over the next `secs` of virtual time.
async fn over(members: &[Member], secs: u64) -> f64 {
    let before = total(members);
    tokio::time::sleep(Duration::from_secs(secs)).await;
    (total(members) - before) as f64
}

/// The fleet's ceiling over `secs`: the rate, the bucket (two lease periods of the rate,
/// above the burst) and what each of `members` can hold leased (two periods each).
fn ceiling(secs: u64, members: f64) -> f64 {
    let per_period = RATE * PERIOD.as_secs_f64();
    RATE * secs as f64 + 2.0 * per_period + members * 2.0 * per_period
}

#[tokio::test(start_paused = true)]
async fn three_instances_hold_the_fleet_rate_floor_and_ceiling_through_a_kill_and_a_cut_off() {
    let fleet = MemoryFleet::default();
    let mut members: Vec<Member> = (0..3)
        .map(|i| Member::start(&fleet, &format!("m{i}")))
        .collect();
    // The time is the subject here and below: virtual seconds of the paused clock.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let three = over(&members, 20).await;
    assert!(three <= ceiling(20, 3.0), "three members: {three} in 20 s");
    assert!(
        three >= 0.97 * RATE * 20.0,
        "three members starve: {three} in 20 s"
    );

    // One killed: its live entry expires after the live TTL; the two left share the
    // whole rate.
    members.remove(0).kill();
    tokio::time::sleep(LIVE_TTL + Duration::from_secs(1)).await;
    let two = over(&members, 10).await;
    assert!(two <= ceiling(10, 3.0), "after the kill: {two} in 10 s");
    assert!(two >= 0.97 * RATE * 10.0, "after the kill: {two} in 10 s");

    // Cut off from the store: each refills itself at rate / live (2) for the time that
    // really passed, so the fleet stays at its rate.
    fleet.cut_off(true);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let cut = over(&members, 10).await;
    assert!(cut <= ceiling(10, 2.0), "cut off: {cut} in 10 s");
    assert!(
        cut >= 0.97 * RATE * 10.0,
        "cut off, the fleet starves: {cut} in 10 s"
    );

    // Back: the leases take over again.
    fleet.cut_off(false);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let back = over(&members, 10).await;
    assert!(back <= ceiling(10, 2.0), "back: {back} in 10 s");
    assert!(back >= 0.97 * RATE * 10.0, "back: {back} in 10 s");

    for m in members {
        m.leave().await;
    }
}
