//! What a start checks of the store before it serves: a Redis new enough for the
//! scripts, the store's pin (`{prefix}:meta`: shard count and record format) and, when
//! the pin is gone, the store's own keys ([`layout`]); then it writes the pins.

use fred::prelude::*;
use reward_runtime::keyspace::LayoutProof;

use super::config::ClaimConfig;
use super::error::ClaimError;
use super::record::RECORD_FORMAT;
use super::{keys, layout};

/// Refuses a store this build must not serve (module doc of [`super`], "Records" and
/// "The shard count is fixed at first use"), else pins its shard count and record
/// format (first use) and writes the shard pins.
pub(super) async fn check_store(pool: &Pool, cfg: &ClaimConfig) -> Result<(), ClaimError> {
    check_version(pool.next()).await?;
    let meta = keys::meta_key(&cfg.key_prefix);
    let exists: i64 = pool.next().exists(&meta).await?;
    // A store an earlier build wrote (a pin without the record format, or no pin
    // and keys of its own): its records may be hashes, which this build neither
    // reads nor may overwrite (module doc, "Records").
    let hash_records = || async {
        let pattern = keys::record_pattern(&cfg.key_prefix);
        reward_runtime::keyspace::any_match_of(pool.next(), &pattern, Some("hash")).await
    };
    if exists == 0 {
        if old_layout(pool, &cfg.key_prefix).await? {
            return Err(ClaimError::OldLayout(cfg.key_prefix.clone()));
        }
        // No pin: a fresh store, or one whose pin was lost. Its own keys decide.
        let proof =
            layout::prove(pool.next(), &cfg.key_prefix, cfg.shards, layout::SCAN_PAGES).await?;
        if !matches!(proof, LayoutProof::Empty) && hash_records().await? {
            return Err(ClaimError::HashRecords(cfg.key_prefix.clone()));
        }
        check_layout(&cfg.key_prefix, cfg.shards, proof)?;
    }
    let records: Option<String> = pool.next().hget(&meta, "records").await?;
    if exists == 1 && records.is_none() && hash_records().await? {
        return Err(ClaimError::HashRecords(cfg.key_prefix.clone()));
    }
    if records.as_deref().is_some_and(|r| r != RECORD_FORMAT) {
        return Err(ClaimError::HashRecords(cfg.key_prefix.clone()));
    }
    let _: i64 = pool.next().hsetnx(&meta, "records", RECORD_FORMAT).await?;
    let _: i64 = pool.next().hsetnx(&meta, "shards", cfg.shards).await?;
    let stored: Option<String> = pool.next().hget(&meta, "shards").await?;
    let stored = stored.as_deref().map(str::parse::<u32>);
    match stored {
        Some(Ok(n)) if n == cfg.shards => {}
        Some(Ok(n)) => {
            return Err(ClaimError::ShardsChanged {
                prefix: cfg.key_prefix.clone(),
                configured: cfg.shards,
                stored: n,
            });
        }
        _ => {
            return Err(ClaimError::Reply(vec![format!(
                "{meta} holds no readable shard count"
            )]));
        }
    }
    layout::write_shard_pins(pool.next(), &cfg.key_prefix, cfg.shards).await?;
    Ok(())
}

/// Whether budget keys of the previous layout (`{prefix}:{scene:N}:budget`) exist:
/// one `SCAN` pass (per primary on a cluster), made only when the store has no `meta` yet (its first start
/// under this layout).
async fn old_layout(pool: &Pool, prefix: &str) -> Result<bool, ClaimError> {
    // Every primary of a cluster: a SCAN answers for its own node only.
    let pattern = keys::old_budget_pattern(prefix);
    Ok(reward_runtime::keyspace::any_match(pool.next(), &pattern).await?)
}

/// Refuses a Redis older than 7.0: the claim scripts use `SET ... NX GET`, which an
/// older one refuses on every claim of a new trade number.
async fn check_version(client: &Client) -> Result<(), ClaimError> {
    let info: String =
        reward_runtime::keyspace::on_node(client, None, "INFO", vec!["server"]).await?;
    let version = info
        .lines()
        .find_map(|l| l.trim().strip_prefix("redis_version:"))
        .unwrap_or("")
        .trim()
        .to_string();
    let major = version
        .split('.')
        .next()
        .and_then(|m| m.parse::<u32>().ok());
    match major {
        Some(m) if m >= 7 => Ok(()),
        _ => Err(ClaimError::RedisVersion(format!(
            "redis_version {version:?}"
        ))),
    }
}

/// Turns what the data says of the configured count into a start or a typed refusal.
fn check_layout(prefix: &str, shards: u32, proof: LayoutProof) -> Result<(), ClaimError> {
    match proof {
        LayoutProof::Empty => Ok(()),
        LayoutProof::Agrees { samples, complete } => {
            tracing::warn!(
                prefix,
                shards,
                records = samples,
                complete,
                "claim store shard pin was missing; its data agrees with claims.shards, pin restored"
            );
            Ok(())
        }
        LayoutProof::Differs { key, why } => Err(ClaimError::LayoutDiffers {
            prefix: prefix.to_string(),
            configured: shards,
            key,
            why,
        }),
        LayoutProof::Unproven { keys, samples } => Err(ClaimError::LayoutUnproven {
            prefix: prefix.to_string(),
            configured: shards,
            keys,
            samples,
        }),
    }
}
