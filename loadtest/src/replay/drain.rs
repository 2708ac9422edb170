//! Draining after the schedule: the SDK hands every event to a broker, the budgets'
//! spent amounts reach what was sent, the ledger holds every trade number sent; each
//! wait gives up after a stretch without progress.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::setup::Setup;
use reward_stack::env::StackEnv;

use super::schedule::progress_bar;

/// Waits until the SDK holds no unsettled event and has replayed everything it
/// spooled (or `drain` passes without an event moving).
pub(super) async fn sdk_settled(sdk: &super::hosts::Side, drain: Duration) {
    let mut last = (0, 0);
    let mut moved = Instant::now();
    loop {
        let s = sdk.stats();
        if s.unsettled == 0 && s.spooled <= s.replayed {
            break;
        }
        if (s.delivered, s.replayed) != last {
            last = (s.delivered, s.replayed);
            moved = Instant::now();
        }
        if moved.elapsed() > drain {
            eprintln!(
                "replay: SDK still holds {} events, {} spooled not replayed; giving up the wait",
                s.unsettled,
                s.spooled - s.replayed
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the budgets' spent amounts, summed over the scopes sent to, reach
/// the amount sent (or `drain` passes without them moving).
pub(super) async fn budgets_spent(
    env: &StackEnv,
    setup: &Setup,
    sent_amount_by_scope: &BTreeMap<String, i64>,
    progress: bool,
    drain: Duration,
) -> anyhow::Result<()> {
    // Redis may still be coming back from a fault (restarting, loading its AOF):
    // an error is a wait without progress, like a stall.
    let started = Instant::now();
    let claims = loop {
        match reward_service::claim::Claims::connect(
            &env.redis_url,
            reward_service::claim::ClaimConfig {
                key_prefix: setup.manifest.claims_prefix.clone(),
                shards: setup.manifest.claims_shards,
                ..reward_service::claim::ClaimConfig::default()
            },
        )
        .await
        {
            Ok(c) => break c,
            Err(e) if started.elapsed() < drain => {
                tracing::debug!(error = %e, "drain: claim store not answering yet");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => anyhow::bail!("claim store: {e} (for {} s)", drain.as_secs()),
        }
    };
    let want: i64 = sent_amount_by_scope.values().sum();
    let bar = progress_bar(
        progress,
        u64::try_from(want).unwrap_or(0),
        "crediting (amount)",
    );
    let mut last_spent = -1;
    let mut moved = Instant::now();
    loop {
        let mut spent = 0;
        for scope in sent_amount_by_scope.keys() {
            // An error reads as no progress (the wait gives up after `drain`).
            spent += claims.spent(scope).await.unwrap_or(0);
        }
        bar.set_position(u64::try_from(spent).unwrap_or(0));
        if spent >= want {
            break;
        }
        if spent != last_spent {
            last_spent = spent;
            moved = Instant::now();
        }
        if moved.elapsed() > drain {
            eprintln!(
                "replay: credits stalled at {spent} of {want} for {} s; reconciling what is there",
                drain.as_secs()
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    bar.finish();
    Ok(())
}

/// Waits until the ledger holds every distinct trade number sent (or `drain` passes
/// without a new credit).
///
/// Rewards of a killed SDK host that are neither stored nor credited count as
/// arrived (lost with the host) only from `lost_settle_at`: before it, a spooled or
/// queued event of theirs can still come.
pub(super) async fn ledger_complete(
    dir: &Path,
    drain: Duration,
    lost_settle_at: Option<Instant>,
) -> anyhow::Result<()> {
    // A claim deducts the budget before the downstream call, so budgets can reach
    // the sent amount while the last credits are still on their way (and a retry
    // parked in the delay queue can sit behind them): wait until the ledger itself
    // holds every distinct trade number sent, reading it as reconciliation does.
    let mut last_credited = u64::MAX;
    let mut moved = Instant::now();
    loop {
        let r = match crate::reconcile::run(dir).await {
            Ok(r) => r,
            // Redis not answering (yet) is no progress; reconciliation proper
            // reports the error if it lasts.
            Err(e) if moved.elapsed() < drain => {
                tracing::debug!(error = %e, "drain: the ledger is not readable yet");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        if r.credited >= r.sent {
            break;
        }
        // Rewards lost with a killed SDK host (never stored) will never come.
        if r.credited + r.lost_with_host >= r.sent
            && lost_settle_at.is_none_or(|t| Instant::now() >= t)
        {
            break;
        }
        if r.credited != last_credited {
            last_credited = r.credited;
            moved = Instant::now();
        }
        if moved.elapsed() > drain {
            eprintln!(
                "replay: the ledger holds {} of {} trade numbers, no progress for {} s; reconciling what is there",
                r.credited,
                r.sent,
                drain.as_secs()
            );
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Ok(())
}
