//! The mover: hands parked messages that are due back to the virtual queue, paced by
//! each type's rate, and removes them from the delay queue once the brokers hold them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use bytes::Bytes;
use prost::Message as _;
use proto::v1::RewardEvent;
use sdk::Sdk;
use sdk::queue::Settled;
use tokio::sync::{Semaphore, watch};

use reward_runtime::clock::now_ms;

use crate::config::PipelineConfig;
use crate::delay::DelayQueue;
use crate::limits::Limits;

use super::settle::{queue_anywhere, requeue_key};
use super::stats::Stats;

/// Move batches waiting for their settlement at once.
const MOVES_IN_FLIGHT: usize = 64;

/// Moves due parked messages back to the virtual queue until `stop` turns true.
/// Fused types are skipped; a rate-limited type is released at about twice its rate
/// per mover, so the backlog comes back as fast as it can be credited, not faster.
/// Each tick claims and hands over; waiting for the brokers' acknowledgements (and
/// the removal that follows) runs beside the next ticks.
pub async fn mover(
    delay: Arc<DelayQueue>,
    sdk: Sdk,
    limits: Limits,
    cfg: PipelineConfig,
    poll: Duration,
    stats: Arc<Stats>,
    mut stop: watch::Receiver<bool>,
) {
    let moves = Arc::new(Semaphore::new(MOVES_IN_FLIGHT));
    let mut tick = tokio::time::interval(poll);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = Instant::now();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|s| *s) => break,
        }
        // The allowance follows the time really passed (a slow tick releases more).
        let elapsed = last.elapsed().clamp(poll, Duration::from_secs(1));
        last = Instant::now();
        let types = match delay.types().await {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(error = %e, "delay queue unreadable");
                continue;
            }
        };
        for t in types {
            if limits.is_fused(&t) {
                continue;
            }
            let allowance = limits.limit_of(&t).rate * elapsed.as_secs_f64() * 2.0;
            let per_shard = (allowance / f64::from(delay.shards()))
                .ceil()
                .clamp(1.0, 1000.0) as usize;
            for shard in 0..delay.shards() {
                let Ok(permit) = moves.clone().acquire_owned().await else {
                    return;
                };
                match hand_over(&delay, &sdk, &cfg, &t, shard, per_shard).await {
                    Ok(Some(handed)) => {
                        let (delay, stats, t) = (delay.clone(), stats.clone(), t.clone());
                        tokio::spawn(async move {
                            let _permit = permit;
                            if let Err(e) = handed.settle(&delay, &t, shard, &stats).await {
                                tracing::warn!(reward_type = %t, shard, error = %e,
                                    "removing moved messages failed; they come back after the lease");
                            }
                        });
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(reward_type = %t, shard, error = %e, "moving parked messages failed");
                    }
                }
            }
        }
    }
    // Let the hand-overs in flight finish their removals.
    let _ = moves
        .acquire_many(u32::try_from(MOVES_IN_FLIGHT).unwrap_or(u32::MAX))
        .await;
}

/// Members handed to the SDK, waiting for their settlement.
struct Handed {
    pending: Vec<(Bytes, tokio::sync::oneshot::Receiver<Settled>)>,
    done: Vec<Bytes>,
}

impl Handed {
    /// Waits for the brokers (or the spool), then removes what is safe to forget.
    async fn settle(
        mut self,
        delay: &DelayQueue,
        reward_type: &str,
        shard: u32,
        stats: &Stats,
    ) -> Result<(), fred::error::Error> {
        for (m, rx) in self.pending {
            if let Ok(Settled::Delivered | Settled::Spooled) = rx.await {
                self.done.push(m);
            }
        }
        let n = self.done.len() as u64;
        delay.remove(reward_type, shard, self.done).await?;
        stats.moved(n);
        Ok(())
    }
}

/// Claims a shard's due members and hands them to the virtual queue.
async fn hand_over(
    delay: &DelayQueue,
    sdk: &Sdk,
    cfg: &PipelineConfig,
    reward_type: &str,
    shard: u32,
    max: usize,
) -> Result<Option<Handed>, fred::error::Error> {
    let members = delay.claim_due(reward_type, shard, now_ms(), max).await?;
    if members.is_empty() {
        return Ok(None);
    }
    let mut handed = Handed {
        pending: Vec::with_capacity(members.len()),
        done: Vec::new(),
    };
    for m in members {
        let event = match RewardEvent::decode(m.as_ref()) {
            Ok(e) => e,
            Err(e) => {
                // Only this crate writes these sets; a member that does not decode is
                // logged in full and removed rather than retried forever.
                tracing::error!(error = %e, member_b64 = %base64::engine::general_purpose::STANDARD.encode(&m),
                    "undecodable member in the delay queue; removed");
                handed.done.push(m);
                continue;
            }
        };
        let user = event.user.as_ref().map_or("", |u| u.user_id.as_str());
        let key = requeue_key(&event);
        let first = sdk
            .enqueue_confirmed(None, Some(&event.reward_type), user, key.clone(), m.clone())
            .await;
        match first {
            Ok((_, rx)) => handed.pending.push((m, rx)),
            // The routed queue refused (closing, full): try the others, waiting.
            Err(_) => {
                if queue_anywhere(sdk, cfg, &event, user, &key, &m)
                    .await
                    .is_some()
                {
                    handed.done.push(m);
                }
            }
        }
    }
    Ok(Some(handed))
}
