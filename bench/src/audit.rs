//! `reward-bench audit`: what the live audit (`reward-ctl audit`, `reward_tools::audit`)
//! costs on a large claim store: wall time and the Redis CPU it takes.
//!
//! It fills the single Redis with `claims` claim records in the claim store's layout
//! (state `GRANTED` with a receipt, amount 5, spread over the shards; written by a Lua
//! loop, 10 000 records a call) and each shard's budget with exactly what its records
//! spent, so the store is consistent; audits it at `keys_per_sec` (0: unpaced); reports
//! the records read, the wall time, Redis's CPU seconds (`INFO cpu`, before and after)
//! and both per record; fails unless the audit read every record and found nothing.
//! The keys (families `aud-`, `audt-`) are removed afterwards. A cluster is not filled
//! (one script may not write many slots): run it on the single node.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use fred::prelude::*;
use reward_service::claim::keys as claim_keys;
use reward_stack::cpu::redis_cpu;
use reward_stack::env::StackEnv;
use sdk::store::keys as token_keys;

/// What to measure.
#[derive(Debug, Clone)]
pub struct AuditBenchOptions {
    /// Claim records in the store.
    pub claims: u64,
    /// The claim store's shards.
    pub shards: u32,
    /// The audit's pace in Redis reads a second (see `reward_tools::audit`; 0: as
    /// fast as Redis answers).
    pub keys_per_sec: u64,
}

/// The figures.
#[derive(Debug, Clone)]
pub struct AuditBenchReport {
    /// Claim records the audit read.
    pub read: u64,
    /// Wall time of the audit.
    pub took: Duration,
    /// Redis CPU seconds the audit took (every client of that Redis counts: run it on
    /// a quiet stack).
    pub redis_cpu_secs: f64,
}

/// Records written per Lua call.
const FILL_CHUNK: u64 = 10_000;

/// Writes claim records `T<from>..T<to>` in their shards (see the script).
const FILL_LUA: &str = include_str!("audit/fill.lua");

/// Fills, audits, cleans.
pub async fn run(env: &StackEnv, opts: &AuditBenchOptions) -> anyhow::Result<AuditBenchReport> {
    if env.redis_url.starts_with("redis-cluster://") {
        anyhow::bail!(
            "the audit bench fills a single Redis (one script writes many slots); unset REDIS_URL's cluster"
        );
    }
    let client =
        reward_runtime::redis::builder(&env.redis_url, Duration::from_secs(30))?.build()?;
    client.init().await.context("redis")?;
    let live = reward_tools::clean::LiveRun::start(&[&env.redis_url]).await?;
    let tag = live.tag().to_string();
    let (claims_prefix, token_prefix) = (format!("aud-{tag}"), format!("audt-{tag}"));
    let result = measure(&client, opts, &claims_prefix, &token_prefix).await;
    reward_tools::clean::bench_run(&env.redis_url, &tag).await;
    live.end().await;
    result
}

async fn measure(
    client: &Client,
    opts: &AuditBenchOptions,
    claims_prefix: &str,
    token_prefix: &str,
) -> anyhow::Result<AuditBenchReport> {
    let shards = opts.shards.max(1);
    // Record `T<n>` of shard `s` is the record key of trade number `T` there with `n`
    // appended: the layout is the claim store's own (`reward_service::claim::keys`).
    let record_heads: Vec<String> = (0..shards)
        .map(|s| claim_keys::record_key(claims_prefix, s, "T"))
        .collect();
    let started = Instant::now();
    let mut from = 0u64;
    while from < opts.claims {
        let to = (from + FILL_CHUNK).min(opts.claims) - 1;
        let mut args = vec![shards.to_string(), from.to_string(), to.to_string()];
        args.extend(record_heads.iter().cloned());
        let _: i64 = client.eval(FILL_LUA, Vec::<String>::new(), args).await?;
        from = to + 1;
    }
    for s in 0..shards {
        let records = (0..opts.claims)
            .filter(|n| n % u64::from(shards) == u64::from(s))
            .count() as i64;
        let key = claim_keys::budget_key(claims_prefix, "act/rain", s);
        let _: () = client
            .hset(key, [("cap", i64::MAX / 4), ("spent", records * 5)])
            .await?;
    }
    eprintln!(
        "audit-bench: {} claim records written in {:.1} s",
        opts.claims,
        started.elapsed().as_secs_f64()
    );
    // The stores' shard pins, which the audit reads first.
    let _: () = client
        .hset(
            claim_keys::meta_key(claims_prefix),
            ("shards", i64::from(shards)),
        )
        .await?;
    let _: () = client
        .set(
            token_keys::due_shards_pin_key(token_prefix),
            16,
            None,
            None,
            false,
        )
        .await?;
    let mut cfg = reward_tools::audit::AuditConfig::new(claims_prefix, shards, token_prefix, 16);
    cfg.scenes = vec!["act/rain".into()];
    cfg.keys_per_sec = opts.keys_per_sec;
    let cpu_before = redis_cpu(client).await?;
    let t0 = Instant::now();
    let mut shown = 0u64;
    let report = reward_tools::audit::audit(client, client, &cfg, |n| {
        if n >= shown + 200_000 {
            shown = n;
            eprintln!("audit-bench: {n} read");
        }
    })
    .await?;
    let took = t0.elapsed();
    let redis_cpu_secs = redis_cpu(client).await? - cpu_before;
    if report.claims_read != opts.claims || !report.clean() {
        anyhow::bail!(
            "the audit read {} of {} records and found:\n{}",
            report.claims_read,
            opts.claims,
            report.table()
        );
    }
    Ok(AuditBenchReport {
        read: report.claims_read,
        took,
        redis_cpu_secs,
    })
}
