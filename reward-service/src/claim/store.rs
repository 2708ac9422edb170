//! The claim store itself: its connections, settings and loaded scripts, the start
//! that connects it, and the keys of its records, budgets and doubt indexes.

use std::sync::Arc;

use fred::prelude::*;

use super::config::{CLAIM_TIMEOUT, ClaimConfig};
use super::error::ClaimError;
use super::scripts::Scripts;
use super::{guard, keys};

/// The claim store.
#[derive(Clone)]
pub struct Claims {
    pub(super) pool: Pool,
    pub(super) cfg: Arc<ClaimConfig>,
    pub(super) scripts: Arc<Scripts>,
}

impl std::fmt::Debug for Claims {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Claims")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

/// Start-ups tried again after a redirection (200 ms apart).
const START_TRIES: u32 = 25;

impl Claims {
    /// Connects to Redis at `redis_url`, loads the scripts, and fixes the shard count
    /// at first use (or refuses a count other than the stored one).
    pub async fn connect(redis_url: &str, cfg: ClaimConfig) -> Result<Self, ClaimError> {
        cfg.check()?;
        // Start-up's reads and writes are single commands: on a cluster in the middle of
        // a reshard one may be redirected (not run, reward_runtime::redis); start again.
        let mut tries = 0;
        loop {
            match Self::connect_once(redis_url, &cfg).await {
                Err(ClaimError::Redis(e))
                    if e.contains(reward_runtime::redis::REDIRECTED) && tries < START_TRIES =>
                {
                    tries += 1;
                    tracing::warn!(error = %e, "claim store start-up redirected by a moving slot; starting again");
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                }
                other => return other,
            }
        }
    }

    async fn connect_once(redis_url: &str, cfg: &ClaimConfig) -> Result<Self, ClaimError> {
        let cfg = cfg.clone();
        let pool =
            reward_runtime::redis::builder(redis_url, CLAIM_TIMEOUT)?.build_pool(cfg.pool_size)?;
        pool.init().await?;
        Self::check_replicas(pool.next(), cfg.replica_acks).await?;
        let scripts = Arc::new(Scripts::load(&pool).await?);
        guard::check_store(&pool, &cfg).await?;
        Ok(Self {
            pool,
            cfg: Arc::new(cfg),
            scripts,
        })
    }

    /// The store's settings.
    pub fn config(&self) -> &ClaimConfig {
        &self.cfg
    }

    /// The store's connections (the change trail lives in the same Redis).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Whether Redis answers.
    pub async fn ping(&self) -> Result<(), ClaimError> {
        let _: String = self.pool.next().ping(None).await?;
        Ok(())
    }

    /// The shard a trade number belongs to ([`keys::shard_of`]).
    pub fn shard_of(&self, trade_no: &str) -> u32 {
        keys::shard_of(trade_no, self.cfg.shards)
    }

    /// The budget key of a scene's shard ([`keys::budget_key`]).
    pub fn budget_key(&self, scene: &str, shard: u32) -> String {
        keys::budget_key(&self.cfg.key_prefix, scene, shard)
    }

    /// The record key of a trade number in its shard `shard_of(trade_no)`
    /// ([`keys::record_key`]).
    pub fn record_key(&self, shard: u32, trade_no: &str) -> String {
        keys::record_key(&self.cfg.key_prefix, shard, trade_no)
    }

    /// The doubt index of a shard ([`keys::doubt_key`]).
    pub fn doubt_key(&self, shard: u32) -> String {
        keys::doubt_key(&self.cfg.key_prefix, shard)
    }
}
