//! Claiming a grant: the idempotency record and the budget, checked and changed by one
//! atomic Redis script.
//!
//! # Keys
//! A scene's budget is split over `shards` keys; a trade number belongs to shard
//! `crc32(trade number) % shards`. The trade number's record and its shard's budget
//! share one hash tag, `{scene:shard}`, so they live in one cluster slot and one
//! script can read and write both:
//!
//! ```text
//! {prefix}:{scene:3}:budget        hash  cap, spent
//! {prefix}:{scene:3}:t:{trade_no}  hash  user, type, amount, state, lease, owner, result
//! ```
//!
//! # States
//! `IN_PROGRESS` (with a lease and an owner, the claim id) → `GRANTED` (with the stored
//! result) or `FAILED` (permanent; the budget is given back). Every transition is a
//! compare-and-set inside a script: claiming checks that no record exists (or that its
//! lease has expired), finishing checks that the record is still `IN_PROGRESS` under
//! the caller's claim id. Lease times come from Redis's own clock (`TIME`), so workers'
//! clocks never matter. Records expire `retention_secs` after their last change.
//!
//! # The guarantee
//! - **No trade number is deducted twice**: the deduction happens only when the record
//!   is created, in the same script; a takeover after an expired lease does not deduct
//!   again, and a permanent failure refunds exactly once (only the owner can finish).
//! - **No shard spends past its cap**, whatever the concurrency, retries or crashes:
//!   check and deduct are one script. The scene's total cap is the sum of its shards'
//!   caps, so the scene never overspends either.
//! - **A shard that is full refuses** (`BudgetExhausted`) even while other shards have
//!   room: no request moves between shards, because that would break the one-slot
//!   atomicity. With trade numbers spread evenly by the hash, what is left unspent when
//!   the first shards fill is small; [`Claims::set_budget`] splits a total evenly (the
//!   remainder to the first shards).
//! - **No "last K trade numbers" list per shard** (the issue suggests one): the
//!   trade number's own record, in the same slot and kept `retention_secs` (30 days,
//!   longer than any retry), already refuses a second deduction. A K-list would only
//!   matter once a record is gone (expired or evicted), and then it could not tell
//!   whether the credit had happened either; Redis for this store must therefore run
//!   without eviction (`maxmemory-policy noeviction`), which the stack's Redis does.
//! - **Exactly-once crediting needs one more condition**: the lease must outlast the
//!   downstream call. A worker whose lease expired mid-credit finds on `finish` that
//!   another claim took over ([`Finish::LostLease`]); the downstream then sees the trade
//!   number twice, which is why downstream calls carry it as their idempotency key.

use std::sync::Arc;

use fred::prelude::*;

/// Settings of the claim store.
#[derive(Debug, Clone)]
pub struct ClaimConfig {
    /// Prefix of every key.
    pub key_prefix: String,
    /// Budget shards per scene.
    pub shards: u32,
    /// How long a claim is held before another worker may take it over.
    pub lease_ms: u64,
    /// How long a record is kept after its last change (default 30 days).
    pub retention_secs: u64,
    /// Redis connections in the pool.
    pub pool_size: usize,
}

impl Default for ClaimConfig {
    fn default() -> Self {
        Self {
            key_prefix: "rs".into(),
            shards: 16,
            lease_ms: 30_000,
            retention_secs: 30 * 24 * 3600,
            pool_size: 4,
        }
    }
}

/// One grant as the claim store sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// Budget scope (the service uses `activity/scene`, see [`crate::service`]).
    pub scene: String,
    /// The activity the reward was won in; not part of the record, used to find the
    /// user's token once credited.
    pub activity_id: String,
    /// The global idempotency key.
    pub trade_no: String,
    /// Who is credited.
    pub user_id: String,
    /// What is credited.
    pub reward_type: String,
    /// How much (in the reward type's smallest unit).
    pub amount: i64,
}

/// What a claim found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// This caller now owns the grant: credit downstream, then [`Claims::finish`].
    /// `took_over` is true when an earlier claim's lease had expired (its budget
    /// deduction stands; nothing was deducted again).
    Claimed {
        /// The owner id to finish with.
        claim_id: String,
        /// Whether an expired claim was taken over.
        took_over: bool,
    },
    /// Already granted: the stored result; nothing is credited again.
    Duplicate {
        /// What the first grant stored.
        result: String,
    },
    /// Failed permanently before: the stored reason.
    FailedPermanent {
        /// What the failure stored.
        result: String,
    },
    /// Another worker holds a live lease: try again later (never drop the request).
    RetryLater {
        /// Milliseconds left on that lease.
        lease_left_ms: u64,
    },
    /// The trade number is known with another user, type or amount: never credited.
    Conflict,
    /// This trade number's budget shard has no room for the amount.
    BudgetExhausted,
    /// The scene has no budget set.
    NoBudget,
}

/// A trade number's record as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// `IN_PROGRESS`, `GRANTED` or `FAILED`.
    pub state: String,
    /// The user it was claimed for.
    pub user_id: String,
    /// Its reward type.
    pub reward_type: String,
    /// Its amount.
    pub amount: i64,
    /// The stored result (receipt when granted, reason when failed).
    pub result: String,
}

/// What finishing a claim did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// The record moved to its final state.
    Done,
    /// The record is no longer this claim's (its lease expired and another claim took
    /// over, or it was already finished): nothing changed.
    LostLease,
}

/// Claim store failures.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClaimError {
    /// The grant cannot be stored as given.
    #[error("invalid grant: {0}")]
    Invalid(&'static str),
    /// Redis refused, timed out or is unreachable.
    #[error("claim store: {0}")]
    Redis(String),
    /// The script answered something this build does not know.
    #[error("claim store: unexpected reply {0:?}")]
    Reply(Vec<String>),
}

impl From<fred::error::Error> for ClaimError {
    fn from(e: fred::error::Error) -> Self {
        ClaimError::Redis(e.to_string())
    }
}

/// The claim script (public for benchmarks that run it bare, e.g. `redis-benchmark`).
/// KEYS: record, budget. ARGV: user, type, amount, lease ms, retention s, claim id.
pub const CLAIM_LUA: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rec = redis.call('HMGET', KEYS[1], 'user', 'type', 'amount', 'state', 'lease', 'result')
if rec[4] then
  if rec[1] ~= ARGV[1] or rec[2] ~= ARGV[2] or rec[3] ~= ARGV[3] then return {'CONFLICT', ''} end
  if rec[4] == 'GRANTED' then return {'DUPLICATE', rec[6] or ''} end
  if rec[4] == 'FAILED' then return {'FAILED', rec[6] or ''} end
  local lease = tonumber(rec[5]) or 0
  if lease > now then return {'RETRY', tostring(lease - now)} end
  redis.call('HSET', KEYS[1], 'lease', now + tonumber(ARGV[4]), 'owner', ARGV[6])
  redis.call('EXPIRE', KEYS[1], ARGV[5])
  return {'TAKEOVER', ''}
end
local b = redis.call('HMGET', KEYS[2], 'cap', 'spent')
local cap = tonumber(b[1])
if not cap then return {'NOBUDGET', ''} end
local spent = tonumber(b[2] or '0')
local amount = tonumber(ARGV[3])
if spent + amount > cap then return {'EXHAUSTED', ''} end
redis.call('HINCRBY', KEYS[2], 'spent', amount)
redis.call('HSET', KEYS[1], 'user', ARGV[1], 'type', ARGV[2], 'amount', ARGV[3],
  'state', 'IN_PROGRESS', 'lease', now + tonumber(ARGV[4]), 'owner', ARGV[6])
redis.call('EXPIRE', KEYS[1], ARGV[5])
return {'CLAIMED', ''}
";

/// KEYS: record, budget. ARGV: claim id, final state (GRANTED or FAILED), result,
/// retention s. A FAILED grant gives its amount back to the shard.
const FINISH_LUA: &str = r"
local rec = redis.call('HMGET', KEYS[1], 'state', 'owner', 'amount')
if rec[1] ~= 'IN_PROGRESS' or rec[2] ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'state', ARGV[2], 'result', ARGV[3])
redis.call('HDEL', KEYS[1], 'lease', 'owner')
if ARGV[2] == 'FAILED' then
  redis.call('HINCRBY', KEYS[2], 'spent', -tonumber(rec[3]))
end
redis.call('EXPIRE', KEYS[1], ARGV[4])
return 1
";

/// The claim script for many grants of one budget shard at once: each grant is
/// decided exactly as by [`CLAIM_LUA`], in order, and the shard's `spent` moves once.
/// KEYS: budget, then one record per grant. ARGV: lease ms, retention s, then per
/// grant: user, type, amount, claim id. Returns code, detail per grant.
const CLAIM_MANY_LUA: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[1])
local b = redis.call('HMGET', KEYS[1], 'cap', 'spent')
local cap = tonumber(b[1])
local spent = tonumber(b[2] or '0')
local add = 0
local out = {}
for i = 2, #KEYS do
  local a = 3 + (i - 2) * 4
  local user, typ, amount, id = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  local rec = redis.call('HMGET', KEYS[i], 'user', 'type', 'amount', 'state', 'lease', 'result')
  local code, detail = 'CLAIMED', ''
  if rec[4] then
    if rec[1] ~= user or rec[2] ~= typ or rec[3] ~= amount then code = 'CONFLICT'
    elseif rec[4] == 'GRANTED' then code = 'DUPLICATE'; detail = rec[6] or ''
    elseif rec[4] == 'FAILED' then code = 'FAILED'; detail = rec[6] or ''
    else
      local l = tonumber(rec[5]) or 0
      if l > now then code = 'RETRY'; detail = tostring(l - now)
      else
        redis.call('HSET', KEYS[i], 'lease', now + lease, 'owner', id)
        redis.call('EXPIRE', KEYS[i], ARGV[2])
        code = 'TAKEOVER'
      end
    end
  elseif not cap then code = 'NOBUDGET'
  elseif spent + add + tonumber(amount) > cap then code = 'EXHAUSTED'
  else
    add = add + tonumber(amount)
    redis.call('HSET', KEYS[i], 'user', user, 'type', typ, 'amount', amount,
      'state', 'IN_PROGRESS', 'lease', now + lease, 'owner', id)
    redis.call('EXPIRE', KEYS[i], ARGV[2])
  end
  out[#out + 1] = code
  out[#out + 1] = detail
end
if add > 0 then redis.call('HINCRBY', KEYS[1], 'spent', add) end
return out
";

/// [`FINISH_LUA`] for many grants of one shard. KEYS: budget, then one record per
/// grant. ARGV: retention s, then per grant: claim id, final state, result. Returns
/// 1 or 0 per grant.
const FINISH_MANY_LUA: &str = r"
local refund = 0
local out = {}
for i = 2, #KEYS do
  local a = 2 + (i - 2) * 3
  local rec = redis.call('HMGET', KEYS[i], 'state', 'owner', 'amount')
  if rec[1] ~= 'IN_PROGRESS' or rec[2] ~= ARGV[a] then
    out[#out + 1] = 0
  else
    redis.call('HSET', KEYS[i], 'state', ARGV[a + 1], 'result', ARGV[a + 2])
    redis.call('HDEL', KEYS[i], 'lease', 'owner')
    if ARGV[a + 1] == 'FAILED' then refund = refund + tonumber(rec[3]) end
    redis.call('EXPIRE', KEYS[i], ARGV[1])
    out[#out + 1] = 1
  end
end
if refund > 0 then redis.call('HINCRBY', KEYS[1], 'spent', -refund) end
return out
";

/// KEYS: record, budget (unused). ARGV: claim id. Ends the owner's lease at once (the credit failed in
/// a way worth retrying), so the next claim takes over without waiting; the budget
/// deduction stands for that retry.
const RELEASE_LUA: &str = r"
local rec = redis.call('HMGET', KEYS[1], 'state', 'owner')
if rec[1] ~= 'IN_PROGRESS' or rec[2] ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'lease', 0)
redis.call('HDEL', KEYS[1], 'owner')
return 1
";

/// Longest scene or trade number accepted (they become parts of keys).
const MAX_ID: usize = 256;

/// The claim store.
#[derive(Clone)]
pub struct Claims {
    pool: Pool,
    cfg: Arc<ClaimConfig>,
    claim_sha: Arc<String>,
    finish_sha: Arc<String>,
    release_sha: Arc<String>,
    claim_many_sha: Arc<String>,
    finish_many_sha: Arc<String>,
}

impl std::fmt::Debug for Claims {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Claims")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

/// Checks what a claim writes into keys and records.
fn check_grant(g: &Grant) -> Result<(), ClaimError> {
    check_id("scene", &g.scene)?;
    check_id("trade number", &g.trade_no)?;
    if g.user_id.is_empty() || g.reward_type.is_empty() {
        return Err(ClaimError::Invalid("user id and reward type must be set"));
    }
    if g.amount <= 0 {
        return Err(ClaimError::Invalid("amount must be positive"));
    }
    Ok(())
}

fn new_claim_id() -> String {
    format!(
        "{:016x}{:016x}",
        rand::random::<u64>(),
        rand::random::<u64>()
    )
}

fn check_id(what: &'static str, id: &str) -> Result<(), ClaimError> {
    if id.is_empty() || id.len() > MAX_ID || id.contains(['{', '}']) {
        return Err(ClaimError::Invalid(what));
    }
    Ok(())
}

impl Claims {
    /// Connects to Redis at `redis_url` and loads the scripts.
    pub async fn connect(redis_url: &str, cfg: ClaimConfig) -> Result<Self, ClaimError> {
        if cfg.shards == 0 || cfg.lease_ms == 0 || cfg.retention_secs == 0 || cfg.pool_size == 0 {
            return Err(ClaimError::Invalid(
                "shards, lease_ms, retention_secs and pool_size must be positive",
            ));
        }
        let pool = Builder::from_config(Config::from_url(redis_url)?).build_pool(cfg.pool_size)?;
        pool.init().await?;
        let claim_sha: String = pool.next().script_load(CLAIM_LUA).await?;
        let finish_sha: String = pool.next().script_load(FINISH_LUA).await?;
        let release_sha: String = pool.next().script_load(RELEASE_LUA).await?;
        let claim_many_sha: String = pool.next().script_load(CLAIM_MANY_LUA).await?;
        let finish_many_sha: String = pool.next().script_load(FINISH_MANY_LUA).await?;
        Ok(Self {
            pool,
            cfg: Arc::new(cfg),
            claim_sha: Arc::new(claim_sha),
            finish_sha: Arc::new(finish_sha),
            release_sha: Arc::new(release_sha),
            claim_many_sha: Arc::new(claim_many_sha),
            finish_many_sha: Arc::new(finish_many_sha),
        })
    }

    /// The shard a trade number belongs to.
    pub fn shard_of(&self, trade_no: &str) -> u32 {
        crc32fast::hash(trade_no.as_bytes()) % self.cfg.shards
    }

    /// The budget key of a scene's shard.
    pub fn budget_key(&self, scene: &str, shard: u32) -> String {
        format!("{}:{{{scene}:{shard}}}:budget", self.cfg.key_prefix)
    }

    /// The record key of a trade number (in its shard `shard_of(trade_no)`).
    pub fn record_key(&self, scene: &str, shard: u32, trade_no: &str) -> String {
        format!("{}:{{{scene}:{shard}}}:t:{trade_no}", self.cfg.key_prefix)
    }

    /// The keys every script takes: `g`'s record, then its budget shard.
    fn keys(&self, g: &Grant, shard: u32) -> Vec<String> {
        vec![
            self.record_key(&g.scene, shard, &g.trade_no),
            self.budget_key(&g.scene, shard),
        ]
    }

    /// Sets a scene's total budget, split evenly over its shards (the remainder to the
    /// first ones). Spending so far is kept.
    pub async fn set_budget(&self, scene: &str, total: i64) -> Result<(), ClaimError> {
        check_id("scene", scene)?;
        if total < 0 {
            return Err(ClaimError::Invalid("budget must not be negative"));
        }
        let n = i64::from(self.cfg.shards);
        for shard in 0..self.cfg.shards {
            let cap = total / n + i64::from(i64::from(shard) < total % n);
            let _: () = self
                .pool
                .next()
                .hset(self.budget_key(scene, shard), ("cap", cap))
                .await?;
        }
        Ok(())
    }

    /// A scene's total budget (the sum of its shards' caps; 0 when never set).
    pub async fn budget(&self, scene: &str) -> Result<i64, ClaimError> {
        check_id("scene", scene)?;
        let mut sum = 0;
        for shard in 0..self.cfg.shards {
            let v: Option<i64> = self
                .pool
                .next()
                .hget(self.budget_key(scene, shard), "cap")
                .await?;
            sum += v.unwrap_or(0);
        }
        Ok(sum)
    }

    /// What a scene has spent, over all shards.
    pub async fn spent(&self, scene: &str) -> Result<i64, ClaimError> {
        let mut sum = 0;
        for shard in 0..self.cfg.shards {
            sum += self.shard_spent(scene, shard).await?;
        }
        Ok(sum)
    }

    /// What one shard has spent.
    pub async fn shard_spent(&self, scene: &str, shard: u32) -> Result<i64, ClaimError> {
        check_id("scene", scene)?;
        let v: Option<i64> = self
            .pool
            .next()
            .hget(self.budget_key(scene, shard), "spent")
            .await?;
        Ok(v.unwrap_or(0))
    }

    /// Whether Redis answers.
    pub async fn ping(&self) -> Result<(), ClaimError> {
        let _: String = self.pool.next().ping(None).await?;
        Ok(())
    }

    /// The record of `trade_no` in `scene`, if there is one.
    pub async fn record(&self, scene: &str, trade_no: &str) -> Result<Option<Record>, ClaimError> {
        check_id("scene", scene)?;
        check_id("trade number", trade_no)?;
        let key = self.record_key(scene, self.shard_of(trade_no), trade_no);
        let v: Vec<Option<String>> = self
            .pool
            .next()
            .hmget(key, vec!["state", "user", "type", "amount", "result"])
            .await?;
        let mut it = v.into_iter();
        let mut next = || it.next().flatten();
        let Some(state) = next() else {
            return Ok(None);
        };
        let user_id = next().unwrap_or_default();
        let reward_type = next().unwrap_or_default();
        let amount_text = next().unwrap_or_default();
        let amount = amount_text
            .parse()
            .map_err(|_| ClaimError::Reply(vec![state.clone(), amount_text]))?;
        Ok(Some(Record {
            state,
            user_id,
            reward_type,
            amount,
            result: next().unwrap_or_default(),
        }))
    }

    /// Claims `g`: checks its idempotency record and, for a new trade number, deducts
    /// its amount from its budget shard, in one atomic step.
    pub async fn claim(&self, g: &Grant) -> Result<Claim, ClaimError> {
        check_grant(g)?;
        let shard = self.shard_of(&g.trade_no);
        let claim_id = new_claim_id();
        let reply: Vec<String> =
            crate::eval_loaded(self.pool.next(), &self.claim_sha, CLAIM_LUA, || {
                (
                    self.keys(g, shard),
                    vec![
                        Value::from(g.user_id.as_str()),
                        Value::from(g.reward_type.as_str()),
                        Value::from(g.amount.to_string()),
                        Value::from(i64::try_from(self.cfg.lease_ms).unwrap_or(i64::MAX)),
                        Value::from(i64::try_from(self.cfg.retention_secs).unwrap_or(i64::MAX)),
                        Value::from(claim_id.as_str()),
                    ],
                )
            })
            .await?;
        match reply.as_slice() {
            [code, detail] => self.decode(code, detail.clone(), claim_id),
            _ => Err(ClaimError::Reply(reply)),
        }
    }

    /// A claim script's answer for one grant.
    fn decode(&self, code: &str, detail: String, claim_id: String) -> Result<Claim, ClaimError> {
        Ok(match code {
            "CLAIMED" => Claim::Claimed {
                claim_id,
                took_over: false,
            },
            "TAKEOVER" => Claim::Claimed {
                claim_id,
                took_over: true,
            },
            "DUPLICATE" => Claim::Duplicate { result: detail },
            "FAILED" => Claim::FailedPermanent { result: detail },
            "RETRY" => Claim::RetryLater {
                lease_left_ms: detail.parse().unwrap_or(self.cfg.lease_ms),
            },
            "CONFLICT" => Claim::Conflict,
            "EXHAUSTED" => Claim::BudgetExhausted,
            "NOBUDGET" => Claim::NoBudget,
            _ => return Err(ClaimError::Reply(vec![code.to_string(), detail])),
        })
    }

    /// Groups grants by budget shard (same slot): index lists per (scene, shard).
    fn by_shard<'a>(&self, grants: impl Iterator<Item = (usize, &'a Grant)>) -> Vec<Vec<usize>> {
        let mut groups: std::collections::BTreeMap<(&str, u32), Vec<usize>> =
            std::collections::BTreeMap::new();
        for (i, g) in grants {
            groups
                .entry((g.scene.as_str(), self.shard_of(&g.trade_no)))
                .or_default()
                .push(i);
        }
        groups.into_values().collect()
    }

    /// Claims many grants: exactly what [`Claims::claim`] would answer for each, in
    /// one script call per budget shard instead of one per grant (a batch of 200
    /// over 16 shards is about 16 calls). Grants of one shard are decided in their
    /// order in `grants`; the answers come back in that order too.
    pub async fn claim_many(&self, grants: &[Grant]) -> Vec<Result<Claim, ClaimError>> {
        let mut invalid = Vec::new();
        let valid = grants
            .iter()
            .enumerate()
            .filter(|(i, g)| match check_grant(g) {
                Ok(()) => true,
                Err(e) => {
                    invalid.push((*i, e));
                    false
                }
            });
        let groups = self.by_shard(valid.collect::<Vec<_>>().into_iter());
        let mut out = self
            .per_shard(grants, groups, |me, part| async move {
                me.claim_shard(&part).await
            })
            .await;
        for (i, e) in invalid {
            out[i] = Err(e);
        }
        out
    }

    /// Runs `run` once per group of `items` (indices from [`Claims::by_shard`]), all
    /// groups at once, and puts each answer back at its item's place. A group whose
    /// call failed answers its error for each of its items; an item in no group
    /// answers an error (its caller replaces it).
    async fn per_shard<T, R, F, Fut>(
        &self,
        items: &[T],
        groups: Vec<Vec<usize>>,
        run: F,
    ) -> Vec<Result<R, ClaimError>>
    where
        T: Clone + Send + 'static,
        R: Send + 'static,
        F: Fn(Claims, Vec<T>) -> Fut,
        Fut: std::future::Future<Output = Result<Vec<Result<R, ClaimError>>, ClaimError>>
            + Send
            + 'static,
    {
        let mut out: Vec<Option<Result<R, ClaimError>>> = (0..items.len()).map(|_| None).collect();
        let mut set = tokio::task::JoinSet::new();
        for idx in groups {
            let part: Vec<T> = idx.iter().map(|&i| items[i].clone()).collect();
            let call = run(self.clone(), part);
            set.spawn(async move { (idx, call.await) });
        }
        while let Some(joined) = set.join_next().await {
            let Ok((idx, r)) = joined else { continue };
            match r {
                Ok(answers) => {
                    for (i, a) in idx.into_iter().zip(answers) {
                        out[i] = Some(a);
                    }
                }
                Err(e) => {
                    for i in idx {
                        out[i] = Some(Err(e.clone()));
                    }
                }
            }
        }
        out.into_iter()
            .map(|o| o.unwrap_or_else(|| Err(ClaimError::Redis("shard task failed".into()))))
            .collect()
    }

    /// One shard's grants in one script call.
    async fn claim_shard(
        &self,
        part: &[Grant],
    ) -> Result<Vec<Result<Claim, ClaimError>>, ClaimError> {
        let Some(first) = part.first() else {
            return Ok(Vec::new());
        };
        let shard = self.shard_of(&first.trade_no);
        let ids: Vec<String> = part.iter().map(|_| new_claim_id()).collect();
        let reply: Vec<String> = crate::eval_loaded(
            self.pool.next(),
            &self.claim_many_sha,
            CLAIM_MANY_LUA,
            || {
                let mut keys = vec![self.budget_key(&first.scene, shard)];
                let mut args = vec![
                    Value::from(i64::try_from(self.cfg.lease_ms).unwrap_or(i64::MAX)),
                    Value::from(i64::try_from(self.cfg.retention_secs).unwrap_or(i64::MAX)),
                ];
                for (g, id) in part.iter().zip(&ids) {
                    keys.push(self.record_key(&g.scene, shard, &g.trade_no));
                    args.push(Value::from(g.user_id.as_str()));
                    args.push(Value::from(g.reward_type.as_str()));
                    args.push(Value::from(g.amount.to_string()));
                    args.push(Value::from(id.as_str()));
                }
                (keys, args)
            },
        )
        .await?;
        if reply.len() != part.len() * 2 {
            return Err(ClaimError::Reply(reply));
        }
        Ok(reply
            .chunks(2)
            .zip(ids)
            .map(|(pair, id)| self.decode(&pair[0], pair[1].clone(), id))
            .collect())
    }

    /// Marks many claimed grants credited (as [`Claims::grant`] for each), one script
    /// call per budget shard. `items`: grant, claim id, result.
    pub async fn grant_many(
        &self,
        items: &[(Grant, String, String)],
    ) -> Vec<Result<Finish, ClaimError>> {
        let groups = self.by_shard(items.iter().map(|x| &x.0).enumerate());
        self.per_shard(items, groups, |me, part| async move {
            Ok(me.finish_shard(&part).await?.into_iter().map(Ok).collect())
        })
        .await
    }

    async fn finish_shard(
        &self,
        part: &[(Grant, String, String)],
    ) -> Result<Vec<Finish>, ClaimError> {
        let Some((first, _, _)) = part.first() else {
            return Ok(Vec::new());
        };
        let shard = self.shard_of(&first.trade_no);
        let reply: Vec<i64> = crate::eval_loaded(
            self.pool.next(),
            &self.finish_many_sha,
            FINISH_MANY_LUA,
            || {
                let mut keys = vec![self.budget_key(&first.scene, shard)];
                let mut args = vec![Value::from(
                    i64::try_from(self.cfg.retention_secs).unwrap_or(i64::MAX),
                )];
                for (g, id, result) in part {
                    keys.push(self.record_key(&g.scene, shard, &g.trade_no));
                    args.push(Value::from(id.as_str()));
                    args.push(Value::from("GRANTED"));
                    args.push(Value::from(result.as_str()));
                }
                (keys, args)
            },
        )
        .await?;
        if reply.len() != part.len() {
            return Err(ClaimError::Reply(
                reply.iter().map(i64::to_string).collect(),
            ));
        }
        Ok(reply
            .into_iter()
            .map(|d| {
                if d == 1 {
                    Finish::Done
                } else {
                    Finish::LostLease
                }
            })
            .collect())
    }

    /// Runs a compare-and-set script on `g`'s record (and its budget shard, which the
    /// scripts take as their second key even when they leave it alone).
    async fn cas(
        &self,
        g: &Grant,
        sha: &str,
        script: &str,
        args: impl Fn() -> Vec<Value>,
    ) -> Result<Finish, ClaimError> {
        check_id("scene", &g.scene)?;
        check_id("trade number", &g.trade_no)?;
        let shard = self.shard_of(&g.trade_no);
        let done: i64 = crate::eval_loaded(self.pool.next(), sha, script, || {
            (self.keys(g, shard), args())
        })
        .await?;
        Ok(if done == 1 {
            Finish::Done
        } else {
            Finish::LostLease
        })
    }

    async fn finish(
        &self,
        g: &Grant,
        claim_id: &str,
        state: &str,
        result: &str,
    ) -> Result<Finish, ClaimError> {
        let retention = i64::try_from(self.cfg.retention_secs).unwrap_or(i64::MAX);
        let args = || {
            vec![
                Value::from(claim_id),
                Value::from(state),
                Value::from(result),
                Value::from(retention),
            ]
        };
        self.cas(g, &self.finish_sha, FINISH_LUA, args).await
    }

    /// Marks a claimed grant credited, storing `result` for duplicates to get back.
    pub async fn grant(
        &self,
        g: &Grant,
        claim_id: &str,
        result: &str,
    ) -> Result<Finish, ClaimError> {
        self.finish(g, claim_id, "GRANTED", result).await
    }

    /// Gives a claim up after a retryable failure: the next claim of the trade number
    /// takes over at once (no second deduction).
    pub async fn release(&self, g: &Grant, claim_id: &str) -> Result<Finish, ClaimError> {
        let args = || vec![Value::from(claim_id)];
        self.cas(g, &self.release_sha, RELEASE_LUA, args).await
    }

    /// Marks a claimed grant failed for good and gives its amount back to the budget.
    pub async fn fail(
        &self,
        g: &Grant,
        claim_id: &str,
        reason: &str,
    ) -> Result<Finish, ClaimError> {
        self.finish(g, claim_id, "FAILED", reason).await
    }
}
