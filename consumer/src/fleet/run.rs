//! The lease loop every consumer instance runs beside its pipeline.

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::store::LeaseStore;
use crate::limits::Limits;

/// Leases permits for `limits` from `store` every `period` until `stop` turns true;
/// before it returns, everything still held is given back and the instance leaves the
/// live set.
///
/// A lease that fails or takes longer than a period (at least 500 ms) is as good as
/// lost: the instance refills itself at `rate / live` for the time that really passed,
/// with the last live count it saw, so a fleet cut off from its store stays at its
/// rate instead of stopping or multiplying it. Meanwhile it gives nothing back: the
/// next lease follows at once after a timed-out one, before the dispatchers can spend
/// the refill, and a trim then would throw part of it away.
pub async fn run<S: LeaseStore>(
    store: S,
    period: Duration,
    limits: Limits,
    mut stop: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut live = 1u32;
    // Whether the last lease failed: the instance is refilling itself, and gives
    // nothing back until a lease answers again.
    let mut fallback = false;
    let mut last = Instant::now();
    limits.lease_on();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|s| *s) => break,
        }
        let elapsed = last.elapsed().clamp(period, Duration::from_secs(2));
        last = Instant::now();
        let plan = limits.lease_plan(period, live, !fallback);
        let answer =
            tokio::time::timeout(period.max(Duration::from_millis(500)), store.lease(&plan)).await;
        match answer {
            Ok(Ok(g)) => {
                live = g.live;
                fallback = false;
                limits.lease_granted(&plan, &g);
                metrics::gauge!("reward_consumer_fleet_live").set(f64::from(live));
                metrics::gauge!("reward_consumer_fleet_fallback").set(0.0);
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, live, "fleet lease failed; refilling at rate / live");
                limits.lease_fallback(&plan, elapsed, live);
                fallback = true;
                metrics::gauge!("reward_consumer_fleet_fallback").set(1.0);
            }
            Err(_) => {
                tracing::warn!(live, "fleet lease timed out; refilling at rate / live");
                limits.lease_fallback(&plan, elapsed, live);
                fallback = true;
                metrics::gauge!("reward_consumer_fleet_fallback").set(1.0);
            }
        }
    }
    // Leaving: hand back every permit held, and leave the live set quickly.
    let plan = limits.lease_release();
    let _ = tokio::time::timeout(period * 5, store.lease(&plan)).await;
    let _ = tokio::time::timeout(period * 5, store.leave()).await;
}
