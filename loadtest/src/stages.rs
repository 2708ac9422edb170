//! The pipeline's Redis work per reward, stage by stage (`loadtest stages`, and the
//! `--stages` part of a replay's cost lines).
//!
//! Redis counts every command, including those a script runs, but cannot say which
//! part of the pipeline sent them: a replay's totals mix token writes, claims, finishes,
//! token moves, sweeps and fleet leases. This probe drives `rewards` rewards through
//! each stage alone, with the same library calls the services make, against the
//! pipeline's own Redis (never the wallet's), and reads `INFO commandstats` and
//! `INFO cpu` of every primary before and after each stage:
//!
//! | stage | what runs | as in |
//! | --- | --- | --- |
//! | token write | `TokenStore::put` per reward (the SDK's direct write: due entry and token) | `send_reward` |
//! | claim | `Claims::claim_many`, batches of [`BATCH`] | `GrantBatch` |
//! | finish | `Claims::grant_many` with receipts | `GrantBatch` after the credits |
//! | token move | `Tokens::credited_many` (move and due-entry removal) | `GrantBatch` after the finish |
//!
//! Each reward is new (its own user and trade number), so the figures are the happy
//! path; the rest of a replay's figure (sweeper passes, fleet leases, the delay queue,
//! retries, takeovers, the probe's own `INFO`s) is what the replay's total leaves over
//! the sum of the stages. Keys go under bench families (`stg-`, `stgt-`) and are removed
//! afterwards. Redis's CPU includes whatever else ran meanwhile: run it on a quiet stack.

use std::collections::BTreeMap;
use std::time::Instant;

use futures_util::StreamExt as _;
use serde::Serialize;

use crate::redis_counters::{RedisReading, redis_readings};

/// Grants per claim, finish and move call (a consumer's `GrantBatch`).
pub const BATCH: usize = 200;
/// Calls in flight at once.
const IN_FLIGHT: usize = 16;

/// One stage's cost per reward.
#[derive(Debug, Clone, Serialize)]
pub struct StageCost {
    /// The stage.
    pub stage: String,
    /// Commands (those scripts run included).
    pub commands: f64,
    /// Of them, script calls.
    pub script_calls: f64,
    /// Redis server CPU, µs.
    pub redis_cpu_us: f64,
    /// Commands by name.
    pub by_command: BTreeMap<String, f64>,
}

/// The difference of two readings summed over the nodes, per reward.
fn per_reward(
    stage: &str,
    before: &BTreeMap<String, RedisReading>,
    after: &BTreeMap<String, RedisReading>,
    rewards: u64,
) -> StageCost {
    let n = rewards.max(1) as f64;
    let mut by: BTreeMap<String, u64> = BTreeMap::new();
    let mut cpu = 0.0;
    for (node, now) in after {
        let d = now.since(&before.get(node).cloned().unwrap_or_default());
        cpu += d.cpu_secs;
        for (name, c) in d.commands {
            // The probe's own connections and readings are not the stage's.
            if matches!(name.as_str(), "info" | "ping" | "quit" | "hello" | "select")
                || name.starts_with("client")
            {
                continue;
            }
            *by.entry(name).or_default() += c.calls;
        }
    }
    StageCost {
        stage: stage.to_string(),
        commands: by.values().sum::<u64>() as f64 / n,
        script_calls: by
            .iter()
            .filter(|(k, _)| k.starts_with("eval") || k.starts_with("fcall"))
            .map(|(_, c)| *c)
            .sum::<u64>() as f64
            / n,
        redis_cpu_us: cpu * 1e6 / n,
        by_command: by.into_iter().map(|(k, c)| (k, c as f64 / n)).collect(),
    }
}

/// Runs `work` between two readings of every primary of `redis_url`: its answer, and
/// what it cost per reward as stage `name`.
async fn stage<T>(
    redis_url: &str,
    name: &str,
    rewards: u64,
    work: impl std::future::Future<Output = T>,
) -> (T, StageCost) {
    let before = redis_readings(redis_url).await;
    let answer = work.await;
    let after = redis_readings(redis_url).await;
    (answer, per_reward(name, &before, &after, rewards))
}

/// `call` on each [`BATCH`] of `items`, [`IN_FLIGHT`] calls at once; the answers in
/// the items' order.
async fn batched<'a, I, T, F, Fut>(items: &'a [I], call: F) -> Vec<T>
where
    F: Fn(&'a [I]) -> Fut,
    Fut: std::future::Future<Output = Vec<T>>,
{
    futures_util::stream::iter(items.chunks(BATCH).map(call))
        .buffered(IN_FLIGHT)
        .collect::<Vec<Vec<T>>>()
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// Runs the stages on `redis_url` with `rewards` rewards; removes its keys after.
pub async fn measure(redis_url: &str, rewards: u64) -> anyhow::Result<Vec<StageCost>> {
    let live = reward_tools::clean::LiveRun::start(&[redis_url]).await?;
    let tag = live.tag().to_string();
    let result = measure_under(redis_url, rewards, &tag).await;
    reward_tools::clean::bench_run(redis_url, &tag).await;
    live.end().await;
    result
}

async fn measure_under(redis_url: &str, rewards: u64, tag: &str) -> anyhow::Result<Vec<StageCost>> {
    use reward_service::claim::{Claim, ClaimConfig, Claims, Finish, Grant};
    let store_cfg = sdk::config::StoreConfig {
        redis_url: redis_url.to_string(),
        key_prefix: format!("stgt-{tag}"),
        ..sdk::config::StoreConfig::default()
    };
    let ttl = store_cfg.ttl_secs;
    let store = sdk::store::TokenStore::connect(store_cfg)
        .await
        .map_err(|e| anyhow::anyhow!("token store: {e}"))?;
    let tokens = reward_service::tokens::Tokens::new(store.clone(), ttl)
        .await
        .map_err(|e| anyhow::anyhow!("token moves: {e}"))?;
    let claims = Claims::connect(
        redis_url,
        ClaimConfig {
            key_prefix: format!("stg-{tag}"),
            ..ClaimConfig::default()
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("claim store: {e}"))?;
    let scene = "stg/rain";
    claims
        .set_budget(scene, i64::try_from(rewards * 10).unwrap_or(i64::MAX))
        .await
        .map_err(|e| anyhow::anyhow!("budget: {e}"))?;
    // A sealed token's size (base64 of header, nonce, ciphertext and tag).
    let token = "T".repeat(180);
    let grants: Vec<Grant> = (0..rewards)
        .map(|i| Grant {
            scene: scene.into(),
            activity_id: "stg".into(),
            trade_no: format!("stg:{tag}:{i}"),
            user_id: format!("u{i}"),
            reward_type: "coin".into(),
            amount: 5,
        })
        .collect();
    let mut out = Vec::new();

    let writes = futures_util::stream::iter(grants.iter().map(|g| {
        let (store, token) = (&store, &token);
        async move {
            store
                .put(&g.user_id, &g.activity_id, &g.trade_no, token)
                .await
        }
    }))
    .buffer_unordered(IN_FLIGHT * 8)
    .collect::<Vec<_>>();
    let (writes, cost) = stage(redis_url, "token write", rewards, writes).await;
    out.push(cost);
    let failed = writes.iter().filter(|r| r.is_err()).count();
    anyhow::ensure!(failed == 0, "{failed} token writes failed");

    let claiming = batched(&grants, |part| claims.claim_many(part));
    let (claimed, cost) = stage(redis_url, "claim", rewards, claiming).await;
    out.push(cost);
    let mut items = Vec::with_capacity(grants.len());
    for (g, c) in grants.iter().zip(claimed) {
        match c {
            Ok(Claim::Claimed { claim_id, .. }) => {
                items.push((g.clone(), claim_id, format!("tx:{}", g.trade_no)));
            }
            other => anyhow::bail!("{}: not claimed: {other:?}", g.trade_no),
        }
    }

    let finishing = batched(&items, |part| claims.grant_many(part));
    let (finished, cost) = stage(redis_url, "finish", rewards, finishing).await;
    out.push(cost);
    let not_done = finished
        .into_iter()
        .filter(|f| !matches!(f, Ok(Finish::Done)))
        .count();
    anyhow::ensure!(not_done == 0, "{not_done} finishes not done");

    let moves: Vec<(&str, &str, &str)> = grants
        .iter()
        .map(|g| {
            (
                g.user_id.as_str(),
                g.activity_id.as_str(),
                g.trade_no.as_str(),
            )
        })
        .collect();
    let moving = batched(&moves, |part| tokens.credited_many(part));
    let (moved, cost) = stage(redis_url, "token move", rewards, moving).await;
    out.push(cost);
    let unmoved = moved.into_iter().filter(|m| !m).count();
    anyhow::ensure!(unmoved == 0, "{unmoved} tokens not moved");
    Ok(out)
}

/// The table lines: one per stage, then their sum.
pub fn lines(stages: &[StageCost]) -> Vec<String> {
    let mut out = Vec::new();
    for s in stages {
        let top = s
            .by_command
            .iter()
            .map(|(k, v)| format!("{k} {v:.2}"))
            .collect::<Vec<_>>()
            .join(", ");
        out.push(format!(
            "    {:<12} {:>6.2} commands ({:.2} script calls), {:>5.1} us Redis CPU: {top}",
            s.stage, s.commands, s.script_calls, s.redis_cpu_us
        ));
    }
    out.push(format!(
        "    {:<12} {:>6.2} commands ({:.2} script calls), {:>5.1} us Redis CPU",
        "sum",
        stages.iter().map(|s| s.commands).sum::<f64>(),
        stages.iter().map(|s| s.script_calls).sum::<f64>(),
        stages.iter().map(|s| s.redis_cpu_us).sum::<f64>(),
    ));
    out
}

/// Times the probe (for the progress line).
pub async fn measure_timed(redis_url: &str, rewards: u64) -> anyhow::Result<Vec<StageCost>> {
    let t = Instant::now();
    let r = measure(redis_url, rewards).await;
    eprintln!(
        "stages: {rewards} rewards through each stage in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    r
}
