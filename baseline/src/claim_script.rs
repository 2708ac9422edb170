//! The claim script's ceiling: `redis-benchmark` sending `EVALSHA` of the claim
//! script ([`reward_service::claim::CLAIM_LUA`], the one script a grant cannot do
//! without) with a random trade number per call, on the pipeline's Redis. The
//! service's `GrantBatch` rate is divided by it. `redis-benchmark` drives one node,
//! not a Redis Cluster.

use fred::prelude::*;
use reward_service::claim::{ClaimConfig, Claims};
use reward_stack::env::StackEnv;

/// How `redis-benchmark` drives the script.
#[derive(Debug, Clone, Copy)]
pub struct ScriptLoad {
    /// Calls asked for; at least 100 000 run.
    pub calls: u64,
    /// Connections.
    pub clients: u32,
    /// Calls per round trip.
    pub pipeline: u32,
}

/// What `redis-benchmark` measured.
#[derive(Debug, Clone)]
pub struct ScriptRate {
    /// `EVALSHA` calls per second.
    pub per_sec: f64,
    /// p99 latency, milliseconds.
    pub p99_ms: f64,
    /// The command line that ran.
    pub command: String,
    /// Calls it made.
    pub calls: u64,
}

/// Runs `redis-benchmark` on the claim script against `claims`' store on the
/// pipeline's Redis: one scene of its own (`redisbench-<tag>`, its budget shard
/// capped out of the way and removed afterwards), a record key per call; fails
/// unless the script deducted from the budget. The records it writes stay for the
/// caller to clean.
pub async fn redis_benchmark(
    env: &StackEnv,
    claims: &Claims,
    tag: &str,
    load: &ScriptLoad,
) -> anyhow::Result<ScriptRate> {
    let client = Builder::from_config(Config::from_url(&env.redis_url)?).build()?;
    client.init().await?;
    let script =
        reward_runtime::script::Script::load(&client, reward_service::claim::CLAIM_LUA).await?;
    let sha = script.sha();
    let scene = format!("redisbench-{tag}");
    let budget = claims.budget_key(&scene, 0);
    let _: () = client.hset(&budget, ("cap", i64::MAX / 4)).await?;
    let record = claims.record_key(0, "__rand_int__");
    let hostport = env.redis_host_port()?;
    let (host, port) = hostport
        .rsplit_once(':')
        .ok_or_else(|| anyhow::anyhow!("redis address {hostport} has no port"))?;
    let calls = load.calls.max(100_000);
    let n = calls.to_string();
    let clients = load.clients.to_string();
    let pipeline = load.pipeline.to_string();
    let args = [
        "-h",
        host,
        "-p",
        port,
        "-n",
        &n,
        "-c",
        &clients,
        "-P",
        &pipeline,
        "-r",
        "1000000000",
        "--csv",
        "EVALSHA",
        sha,
        "2",
        &record,
        &budget,
        "7",
        "cash",
        "1",
        "30000",
        "3600",
        "__rand_int__",
        &scene,
        "redisbench",
        // The tag every script call carries last (reward_runtime::script): the raw
        // script is the one the service runs, wrapper included.
        "0",
    ];
    let command = format!("redis-benchmark {}", args.join(" "));
    let out = tokio::process::Command::new("redis-benchmark")
        .args(args)
        .output()
        .await
        .map_err(|e| {
            anyhow::anyhow!("redis-benchmark (from redis-tools, `ops/stack up` installs it): {e}")
        })?;
    anyhow::ensure!(
        out.status.success(),
        "{command}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (per_sec, p99_ms) = parse_result(&text, &command)?;
    let spent: i64 = client.hget(&budget, "spent").await?;
    anyhow::ensure!(spent > 0, "{command}: the script deducted nothing");
    let _: i64 = client.del(&budget).await?;
    Ok(ScriptRate {
        per_sec,
        p99_ms,
        command,
        calls,
    })
}

/// The claim script's ceiling on this Redis: `redis-benchmark` running it by EVALSHA
/// (50 connections, 16 per round trip) on a store of prefix `ceiling-<tag>`, calls/s
/// and the command line. The replay's `--ceilings` puts it beside the end-to-end
/// rate. The caller holds `tag` live and removes its keys afterwards.
pub async fn script_ceiling(env: &StackEnv, tag: &str, n: u64) -> anyhow::Result<(f64, String)> {
    let claims = Claims::connect(
        &env.redis_url,
        ClaimConfig {
            key_prefix: format!("ceiling-{tag}"),
            ..ClaimConfig::default()
        },
    )
    .await?;
    let load = ScriptLoad {
        calls: n,
        clients: 50,
        pipeline: 16,
    };
    let rate = redis_benchmark(env, &claims, tag, &load).await?;
    Ok((rate.per_sec, rate.command))
}

/// The `EVALSHA` row of `redis-benchmark --csv`'s output `text`: calls/s and p99
/// latency (ms); fails, naming `command`, without a row or with no positive rate.
fn parse_result(text: &str, command: &str) -> anyhow::Result<(f64, f64)> {
    // `"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"`
    let row = text
        .lines()
        .find(|l| l.starts_with("\"EVALSHA"))
        .ok_or_else(|| anyhow::anyhow!("{command}: no result line in {text:?}"))?;
    let cols: Vec<f64> = row
        .split("\",\"")
        .skip(1)
        .map(|c| c.trim_matches('"').parse().unwrap_or(f64::NAN))
        .collect();
    let rps = cols.first().copied().unwrap_or(f64::NAN);
    let p99 = cols.get(5).copied().unwrap_or(f64::NAN);
    anyhow::ensure!(rps.is_finite() && rps > 0.0, "{command}: bad row {row}");
    Ok((rps, p99))
}
