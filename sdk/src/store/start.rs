//! The token store's start: connect, load the write scripts, check the due index's
//! shard count; asked again a few times while Redis does not answer.

use std::time::Duration;

use fred::prelude::*;
use reward_runtime::script::Script;

use super::answer::transient;
use super::error::StoreError;
use super::layout::check_pin;
use super::life::{INDEXED_WRITE_LUA, INDEXED_WRITE_MANY_LUA, WRITE_LUA, WRITE_MANY_LUA};
use crate::config::StoreConfig;

/// How often the store's start asks Redis before it gives up: a store that starts
/// beside a busy Redis (a loaded machine, an AOF rewrite's fork, a Redis still loading
/// its AOF) waits a little rather than failing its service's start on one slow
/// answer. What may succeed if sent again is what a token write retries too
/// ([`transient`]). A layout that refuses is an answer and is never asked again.
const START_ATTEMPTS: u32 = 3;
/// The pause before the second attempt (twice that before the third).
const START_PAUSE: Duration = Duration::from_millis(500);

/// The scripts a started store writes with.
pub(super) struct Loaded {
    /// One write ([`WRITE_LUA`]).
    pub(super) one: Script,
    /// Many writes ([`WRITE_MANY_LUA`]): the writer task's pipelines.
    pub(super) many: Script,
    /// On a single Redis (not a cluster): one and many writes with their due entries
    /// ([`INDEXED_WRITE_LUA`], [`INDEXED_WRITE_MANY_LUA`]).
    pub(super) indexed: Option<(Script, Script)>,
}

/// Connects a pool to `cfg.redis_url` and prepares it (the start's round trips),
/// asking again up to [`START_ATTEMPTS`] times while Redis does not answer.
pub(super) async fn start(cfg: &StoreConfig) -> Result<(Pool, Loaded), StoreError> {
    let timeout = Duration::from_millis(cfg.timeout_ms);
    let mut attempt = 1;
    loop {
        let pool =
            reward_runtime::redis::builder(&cfg.redis_url, timeout)?.build_pool(cfg.pool_size)?;
        match prepare(&pool, cfg).await {
            Ok(Ok(scripts)) => return Ok((pool, scripts)),
            Ok(Err(refused)) => return Err(refused),
            Err(e) if attempt < START_ATTEMPTS && transient(&e) => {
                tracing::warn!(error = %e, attempt, "token store: Redis did not answer at start; asking again");
                let _ = pool.quit().await;
                tokio::time::sleep(START_PAUSE * attempt).await;
                attempt += 1;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// The start's round trips: connect, load the scripts, check the due index's
/// layout. Outer error: Redis did not answer; inner: the layout refused.
async fn prepare(
    pool: &Pool,
    cfg: &StoreConfig,
) -> Result<Result<Loaded, StoreError>, fred::error::Error> {
    pool.init().await?;
    let one = Script::load(pool.next(), WRITE_LUA).await?;
    let many = Script::load(pool.next(), WRITE_MANY_LUA).await?;
    // A cluster puts the due shard and the user's hashes in different slots, which
    // one script may not touch: there the entry goes first, in its own call, and
    // each direct write is its own call (writes of one slot rarely meet).
    let indexed = if pool.next().client_config().server.is_clustered() {
        None
    } else {
        Some((
            Script::load(pool.next(), INDEXED_WRITE_LUA).await?,
            Script::load(pool.next(), INDEXED_WRITE_MANY_LUA).await?,
        ))
    };
    Ok(check_pin(pool.next(), &cfg.key_prefix, cfg.due_shards)
        .await?
        .map(|()| Loaded { one, many, indexed }))
}
