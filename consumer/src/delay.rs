//! The delay queue: where requeued messages wait before they are handled again.
//!
//! A message that failed (or was over its type's rate, or of a fused type) must come
//! back later, not at once: a consumer that re-read it straight away would spin on it
//! and hammer the downstream that just failed. The brokers' own delay features differ
//! (RocketMQ has fixed delay levels, Kafka none), so the delay lives in Redis, as in
//! the source design's slotted delay queue:
//!
//! - one sorted set per reward type and shard, `{prefix}:z:{type}:{shard}`, score = the
//!   instant (Unix ms) the message is due, member = the encoded event (its retry count
//!   and due time make it unique); the shard is the trade number's CRC32 modulo
//!   `shards`, which spreads one type's backlog over several keys (and cluster slots);
//! - a set `{prefix}:types` lists the types that have a backlog, so the mover knows
//!   which keys to visit;
//! - **parking** is one `ZADD`: durable (Redis runs with AOF) before the consumer
//!   marks the message's offset done;
//! - the **mover** ([`crate::pipeline`]) claims due members with one script that also
//!   pushes their score a lease into the future, hands them to the SDK's virtual queue
//!   under a new partition key, waits until the SDK says each one is on a broker (or
//!   in its spool), and only then removes them. A mover that dies mid-way leaves its
//!   claimed members to come due again when the lease runs out: a message can be
//!   queued twice, never lost, and the reward service's idempotency absorbs the
//!   duplicate. Two movers never take the same member within one lease.
//! - A fused type's sets are not visited at all: its messages wait in Redis, costing
//!   no broker traffic, until the fuse is lifted.

use std::collections::HashSet;
use std::sync::Mutex;

use bytes::Bytes;
use fred::prelude::*;

/// Claims due members: pushes their score `lease` ahead and returns them. `KEYS[1]`
/// the sorted set; ARGV: now (ms), most members, the lease's end (ms).
const CLAIM_LUA: &str = include_str!("delay/claim.lua");

/// The Redis delay queue.
#[derive(Debug)]
pub struct DelayQueue {
    /// The claim script ([`CLAIM_LUA`]), called by SHA.
    claim: reward_runtime::script::Script,
    pool: Pool,
    prefix: String,
    shards: u32,
    lease_ms: i64,
    registered: Mutex<HashSet<String>>,
}

impl DelayQueue {
    /// Connects to Redis at `url`.
    pub async fn connect(
        url: &str,
        prefix: &str,
        shards: u32,
        lease_ms: u64,
    ) -> Result<Self, fred::error::Error> {
        let pool = reward_runtime::redis::builder(url, std::time::Duration::from_secs(5))?
            .build_pool(2)?;
        pool.init().await?;
        let claim = reward_runtime::script::Script::load(pool.next(), CLAIM_LUA).await?;
        Ok(DelayQueue {
            claim,
            pool,
            prefix: prefix.to_string(),
            shards: shards.max(1),
            lease_ms: i64::try_from(lease_ms).unwrap_or(i64::MAX),
            registered: Mutex::new(HashSet::new()),
        })
    }

    /// Sorted sets per type.
    pub fn shards(&self) -> u32 {
        self.shards
    }

    /// The sorted set of a type's shard.
    pub fn key(&self, reward_type: &str, shard: u32) -> String {
        format!("{}:z:{reward_type}:{shard}", self.prefix)
    }

    fn types_key(&self) -> String {
        format!("{}:types", self.prefix)
    }

    /// The shard of a trade number.
    pub fn shard_of(&self, trade_no: &str) -> u32 {
        crc32fast::hash(trade_no.as_bytes()) % self.shards
    }

    /// Parks an encoded event until `due_ms` (Unix ms). Returns once Redis has it.
    pub async fn park(
        &self,
        reward_type: &str,
        trade_no: &str,
        encoded: Bytes,
        due_ms: i64,
    ) -> Result<(), fred::error::Error> {
        let fresh = self
            .registered
            .lock()
            .map(|r| !r.contains(reward_type))
            .unwrap_or(true);
        if fresh {
            let _: i64 = self.pool.next().sadd(self.types_key(), reward_type).await?;
            if let Ok(mut r) = self.registered.lock() {
                r.insert(reward_type.to_string());
            }
        }
        let key = self.key(reward_type, self.shard_of(trade_no));
        let _: i64 = self
            .pool
            .next()
            .zadd(key, None, None, false, false, (due_ms as f64, encoded))
            .await?;
        Ok(())
    }

    /// The types that have (or had) parked messages.
    pub async fn types(&self) -> Result<Vec<String>, fred::error::Error> {
        self.pool.next().smembers(self.types_key()).await
    }

    /// Claims up to `max` members of a shard due at `now_ms`, for one lease.
    pub async fn claim_due(
        &self,
        reward_type: &str,
        shard: u32,
        now_ms: i64,
        max: usize,
    ) -> Result<Vec<Bytes>, fred::error::Error> {
        let key = self.key(reward_type, shard);
        let until = now_ms.saturating_add(self.lease_ms);
        // By SHA: the body is sent again only where a node answers NOSCRIPT.
        self.claim
            .eval(self.pool.next(), || {
                (
                    vec![key.clone()],
                    vec![
                        now_ms.to_string().into(),
                        max.to_string().into(),
                        until.to_string().into(),
                    ],
                )
            })
            .await
    }

    /// Removes members (once they are safely queued).
    pub async fn remove(
        &self,
        reward_type: &str,
        shard: u32,
        members: Vec<Bytes>,
    ) -> Result<(), fred::error::Error> {
        if members.is_empty() {
            return Ok(());
        }
        let _: i64 = self
            .pool
            .next()
            .zrem(self.key(reward_type, shard), members)
            .await?;
        Ok(())
    }

    /// Messages parked for a type, due or not.
    pub async fn len(&self, reward_type: &str) -> Result<u64, fred::error::Error> {
        let mut n = 0u64;
        for shard in 0..self.shards {
            let c: u64 = self.pool.next().zcard(self.key(reward_type, shard)).await?;
            n += c;
        }
        Ok(n)
    }
}
