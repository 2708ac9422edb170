//! Claiming a grant: the idempotency record and the budget, checked and changed by one
//! atomic Redis script.
//!
//! # Keys
//! Every trade number has **one** record, whatever activity, scene or downstream it is
//! granted through: one trade number, one grant. Its slot depends on the trade number
//! only: shard `crc32(trade number) % shards`, hash tag `{prefix.shard}`. Each scene's
//! budget is split over the same shards, one budget key per (shard, scene) in that
//! shard's slot, so one script can check the record and deduct the budget atomically:
//!
//! ```text
//! {prefix}:meta                        hash  shards (fixed at first use)
//! {prefix}:{prefix.3}:b:{scene}        hash  cap, spent, hold, holder
//! {prefix}:{prefix.3}:t:{trade_no}     hash  scene, activity, user, type, amount, state,
//!                                            lease, owner, clean, result
//! {prefix}:{prefix.3}:doubt            zset  trade numbers held IN_DOUBT → since (ms)
//! ```
//!
//! **The shard count is fixed at first use.** It decides where every record and budget
//! lives; an instance configured with another count would look for records in the
//! wrong place and credit them again. [`Claims::connect`] stores the count in
//! `{prefix}:meta` the first time and refuses to start ([`ClaimError::ShardsChanged`])
//! when the configured count differs. To change it, use a new key prefix.
//!
//! # States ([`ClaimState`])
//! `IN_PROGRESS` (with a lease and an owner, the claim id) → `GRANTED` (with the stored
//! result) or `FAILED` (permanent; the budget is given back) or `IN_DOUBT` (the credit
//! may have happened; the deduction stands, see [`crate::grant`]). Every transition is
//! a compare-and-set inside a script. Lease times come from Redis's own clock (`TIME`),
//! so workers' clocks never matter. Records expire `retention_secs` after their last
//! change.
//!
//! A claim of a record that exists but whose lease is over says what the earlier
//! owner left behind ([`Prior`]): released cleanly (it knows nothing was credited), in
//! doubt, or nothing at all (it vanished mid-call). Only the first lets the new owner
//! credit without first resolving the earlier attempt.
//!
//! # The guarantee
//! - **No trade number is deducted twice**: the deduction happens only when the record
//!   is created, in the same script; a takeover does not deduct again, and a permanent
//!   failure refunds exactly once (only the owner can fail a grant).
//! - **No shard spends past its cap**, whatever the concurrency, retries or crashes:
//!   check and deduct are one script. The scene's total cap is the sum of its shards'
//!   caps, so the scene never overspends either.
//! - **A changed budget never lets a scene spend past the new total**:
//!   [`Claims::set_budget`] first holds every shard of the scene (claims of new trade
//!   numbers answer `RETRY` for at most [`BUDGET_HOLD_MS`]), reads what each has spent,
//!   and gives each shard its spending plus an even share of what is left. A total
//!   below what was spent is refused ([`ClaimError::BelowSpent`]). A start-up never
//!   overwrites a live budget ([`Claims::init_budget`] sets only shards with none).
//! - **Exact amounts**: amounts and budgets are at most [`MAX_AMOUNT`] (2^53 - 1), so
//!   the scripts' double-precision arithmetic compares them exactly.
//! - **No "last K trade numbers" list per shard**: the trade number's own record,
//!   kept `retention_secs`, already refuses a second deduction. Redis for this store
//!   must run without eviction (`maxmemory-policy noeviction`), which the stack's
//!   Redis does; tokens older than the retention are never credited
//!   ([`crate::service`]).
//! - **A finish after a credit is never lost to a takeover**: marking a grant
//!   `GRANTED` needs a receipt, not the lease, so a worker whose lease expired still
//!   records its credit; the next owner then finds `GRANTED`.

use std::sync::Arc;

use fred::prelude::*;
use reward_runtime::script::Script;

/// The largest amount or budget: every integer up to it is exact in the scripts'
/// double-precision numbers, and so is every comparison against it.
pub const MAX_AMOUNT: i64 = (1 << 53) - 1;

/// How long a budget change may hold a scene's shards (a crashed operator's hold
/// ends by itself after this).
pub const BUDGET_HOLD_MS: u64 = 5_000;

/// Settings of the claim store.
#[derive(Debug, Clone)]
pub struct ClaimConfig {
    /// Prefix of every key.
    pub key_prefix: String,
    /// Shards of the record and budget space (fixed at first use, module doc).
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
    /// The activity the reward was won in (kept in the record, used to find the
    /// user's token once credited).
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

/// A record's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClaimState {
    /// Claimed; a credit may be under way.
    InProgress,
    /// A credit's outcome is unknown; the deduction stands until it is resolved.
    InDoubt,
    /// Credited; the result is the receipt.
    Granted,
    /// Failed for good; refunded; the result is the reason.
    Failed,
}

impl ClaimState {
    /// The name stored in Redis.
    pub fn as_str(self) -> &'static str {
        match self {
            ClaimState::InProgress => "IN_PROGRESS",
            ClaimState::InDoubt => "IN_DOUBT",
            ClaimState::Granted => "GRANTED",
            ClaimState::Failed => "FAILED",
        }
    }

    /// The state a stored name stands for.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "IN_PROGRESS" => ClaimState::InProgress,
            "IN_DOUBT" => ClaimState::InDoubt,
            "GRANTED" => ClaimState::Granted,
            "FAILED" => ClaimState::Failed,
            _ => return None,
        })
    }
}

/// What an earlier owner of a claimed record left behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prior {
    /// A new record: nothing was ever sent.
    Fresh,
    /// Released by an owner that knew nothing was credited.
    Released,
    /// Held in doubt: a credit may have happened.
    InDoubt,
    /// The earlier owner's lease ran out with no word: it may have credited.
    Unknown,
}

impl Prior {
    /// Whether the earlier attempt must be resolved before crediting.
    pub fn needs_resolving(self) -> bool {
        matches!(self, Prior::InDoubt | Prior::Unknown)
    }
}

/// What a claim found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// This caller now owns the grant: credit downstream (after resolving `prior`
    /// when it asks for that), then finish.
    Claimed {
        /// The owner id to finish with.
        claim_id: String,
        /// What the earlier owner left, if the record existed.
        prior: Prior,
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
    /// Another worker holds a live lease, or the budget is being changed: try again
    /// later (never drop the request).
    RetryLater {
        /// Milliseconds left on that lease or hold.
        lease_left_ms: u64,
    },
    /// The trade number is known with another scene, user, type or amount: never
    /// credited.
    Conflict,
    /// This trade number's budget shard has no room for the amount.
    BudgetExhausted,
    /// The scene has no budget set.
    NoBudget,
}

/// A trade number's record as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Its state.
    pub state: ClaimState,
    /// Its budget scope.
    pub scene: String,
    /// Its activity.
    pub activity_id: String,
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
    /// The record moved to its final state (or was already `GRANTED`, for a grant).
    Done,
    /// The record is no longer this claim's (its lease expired and another claim took
    /// over, or it was already finished otherwise): nothing changed.
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
    /// The configured shard count differs from the one the store was created with.
    #[error(
        "claims.shards is {configured} but the claim store under prefix {prefix:?} was created with {stored}: records and budgets live by that count, so this instance would credit granted trade numbers again. Configure {stored}, or use a new key prefix"
    )]
    ShardsChanged {
        /// The key prefix.
        prefix: String,
        /// What the config says.
        configured: u32,
        /// What the store was created with.
        stored: u32,
    },
    /// A budget below what the scene has already spent.
    #[error("budget {total} for {scene} is below what it has spent ({spent}); nothing changed")]
    BelowSpent {
        /// The scene.
        scene: String,
        /// The total asked for.
        total: i64,
        /// What its shards had spent.
        spent: i64,
    },
    /// Another budget change of the same scene ran at the same time.
    #[error("budget of {0} is being changed by another operator; nothing changed, try again")]
    BudgetBusy(String),
    /// The change was cut short after some shards took their new caps (a hold lapsed
    /// or another operator took over). Every shard is still within a cap, but the
    /// total is a mix of old and new: run the change again.
    #[error(
        "budget change of {scene} interrupted after {done} of {shards} shards took their new caps; run it again"
    )]
    BudgetPartial {
        /// The scene.
        scene: String,
        /// Shards updated.
        done: u32,
        /// All shards.
        shards: u32,
    },
    /// Keys of the previous claim-store layout exist under this prefix.
    #[error(
        "the claim store under prefix {0:?} holds keys of the previous layout (records keyed per scene): starting on it would forget which trade numbers were granted. Use a new key prefix, or remove the old keys once their events and tokens have expired"
    )]
    OldLayout(String),
}

impl From<fred::error::Error> for ClaimError {
    fn from(e: fred::error::Error) -> Self {
        ClaimError::Redis(e.to_string())
    }
}

/// The claim script (public for benchmarks that run it bare, e.g. `redis-benchmark`).
/// KEYS: record, budget. ARGV: user, type, amount, lease ms, retention s, claim id,
/// scene, activity.
pub const CLAIM_LUA: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rec = redis.call('HMGET', KEYS[1], 'user', 'type', 'amount', 'state', 'lease', 'result', 'scene', 'clean')
if rec[4] then
  if rec[1] ~= ARGV[1] or rec[2] ~= ARGV[2] or rec[3] ~= ARGV[3] or rec[7] ~= ARGV[7] then return {'CONFLICT', ''} end
  if rec[4] == 'GRANTED' then return {'DUPLICATE', rec[6] or ''} end
  if rec[4] == 'FAILED' then return {'FAILED', rec[6] or ''} end
  local lease = tonumber(rec[5]) or 0
  if lease > now then return {'RETRY', tostring(lease - now)} end
  local code = 'TAKEOVER'
  if rec[4] == 'IN_DOUBT' then code = 'RESOLVE' elseif rec[8] == '1' then code = 'RESUME' end
  redis.call('HSET', KEYS[1], 'lease', now + tonumber(ARGV[4]), 'owner', ARGV[6], 'clean', '0')
  redis.call('EXPIRE', KEYS[1], ARGV[5])
  return {code, ''}
end
local b = redis.call('HMGET', KEYS[2], 'cap', 'spent', 'hold')
local hold = tonumber(b[3] or '0')
if hold > now then return {'RETRY', tostring(hold - now)} end
local cap = tonumber(b[1])
if not cap then return {'NOBUDGET', ''} end
local spent = tonumber(b[2] or '0')
local amount = tonumber(ARGV[3])
if spent + amount > cap then return {'EXHAUSTED', ''} end
redis.call('HINCRBY', KEYS[2], 'spent', amount)
redis.call('HSET', KEYS[1], 'scene', ARGV[7], 'activity', ARGV[8], 'user', ARGV[1], 'type', ARGV[2],
  'amount', ARGV[3], 'state', 'IN_PROGRESS', 'lease', now + tonumber(ARGV[4]), 'owner', ARGV[6], 'clean', '0')
redis.call('EXPIRE', KEYS[1], ARGV[5])
return {'CLAIMED', ''}
";

/// The claim script for many grants of one shard and scene at once: each grant is
/// decided exactly as by [`CLAIM_LUA`], in order, and the budget's `spent` moves once.
/// KEYS: budget, then one record per grant. ARGV: lease ms, retention s, scene,
/// activity, then per grant: user, type, amount, claim id. Returns code, detail per
/// grant.
///
/// Redis does not roll a script back when it fails midway, so the script reads and
/// decides everything first (a wrong-typed key or a bad number fails there, before
/// any write) and only then writes: it either changes nothing or all it decided.
const CLAIM_MANY_LUA: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[1])
local scene = ARGV[3]
local b = redis.call('HMGET', KEYS[1], 'cap', 'spent', 'hold')
local cap = tonumber(b[1])
local spent = tonumber(b[2] or '0')
local hold = tonumber(b[3] or '0')
local add = 0
local out = {}
local writes = {}
-- What this call has decided to write, by key: a later grant of the same trade number
-- in the batch sees it exactly as it would see the written record.
local planned = {}
for i = 2, #KEYS do
  local a = 5 + (i - 2) * 4
  local user, typ, amount, id = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  local n = tonumber(amount)
  if not n then return redis.error_reply('amount ' .. tostring(amount) .. ' is not a number') end
  local rec = planned[KEYS[i]]
  if not rec then
    rec = redis.call('HMGET', KEYS[i], 'user', 'type', 'amount', 'state', 'lease', 'result', 'scene', 'clean')
  end
  local code, detail = 'CLAIMED', ''
  if rec[4] then
    if rec[1] ~= user or rec[2] ~= typ or rec[3] ~= amount or rec[7] ~= scene then code = 'CONFLICT'
    elseif rec[4] == 'GRANTED' then code = 'DUPLICATE'; detail = rec[6] or ''
    elseif rec[4] == 'FAILED' then code = 'FAILED'; detail = rec[6] or ''
    else
      local l = tonumber(rec[5]) or 0
      if l > now then code = 'RETRY'; detail = tostring(l - now)
      else
        writes[#writes + 1] = {KEYS[i], false, id}
        planned[KEYS[i]] = {rec[1], rec[2], rec[3], rec[4], tostring(now + lease), rec[6], rec[7], '0'}
        code = 'TAKEOVER'
        if rec[4] == 'IN_DOUBT' then code = 'RESOLVE' elseif rec[8] == '1' then code = 'RESUME' end
      end
    end
  elseif hold > now then code = 'RETRY'; detail = tostring(hold - now)
  elseif not cap then code = 'NOBUDGET'
  elseif spent + add + n > cap then code = 'EXHAUSTED'
  else
    add = add + n
    writes[#writes + 1] = {KEYS[i], true, id, user, typ, amount}
    planned[KEYS[i]] = {user, typ, amount, 'IN_PROGRESS', tostring(now + lease), false, scene, '0'}
  end
  out[#out + 1] = code
  out[#out + 1] = detail
end
for _, w in ipairs(writes) do
  if w[2] then
    redis.call('HSET', w[1], 'scene', scene, 'activity', ARGV[4], 'user', w[4], 'type', w[5],
      'amount', w[6], 'state', 'IN_PROGRESS', 'lease', now + lease, 'owner', w[3], 'clean', '0')
  else
    redis.call('HSET', w[1], 'lease', now + lease, 'owner', w[3], 'clean', '0')
  end
  redis.call('EXPIRE', w[1], ARGV[2])
end
if add > 0 then redis.call('HINCRBY', KEYS[1], 'spent', add) end
return out
";

/// Marks grants `GRANTED` (a receipt proves the credit, so no lease is needed: any
/// `IN_PROGRESS` or `IN_DOUBT` record takes it) or `FAILED` (only by the owner of a
/// live claim; refunded). KEYS: doubt index, then per grant its record and budget.
/// ARGV: retention s, then per grant: claim id, final state, result, trade no.
/// Returns per grant 1 (done, or already GRANTED for a grant) or 0 (not this
/// claim's).
const FINISH_MANY_LUA: &str = r"
local out = {}
local n = (#KEYS - 1) / 2
for i = 1, n do
  local rk, bk = KEYS[2 * i], KEYS[2 * i + 1]
  local a = 2 + (i - 1) * 4
  local id, state, result = ARGV[a], ARGV[a + 1], ARGV[a + 2]
  local rec = redis.call('HMGET', rk, 'state', 'owner', 'amount')
  local live = rec[1] == 'IN_PROGRESS' or rec[1] == 'IN_DOUBT'
  local done = 0
  if state == 'GRANTED' and rec[1] == 'GRANTED' then done = 1
  elseif live and (state == 'GRANTED' or rec[2] == id) then
    redis.call('HSET', rk, 'state', state, 'result', result)
    redis.call('HDEL', rk, 'lease', 'owner', 'clean')
    if state == 'FAILED' then redis.call('HINCRBY', bk, 'spent', -tonumber(rec[3])) end
    redis.call('EXPIRE', rk, ARGV[1])
    if rec[1] == 'IN_DOUBT' then redis.call('ZREM', KEYS[1], ARGV[a + 3]) end
    done = 1
  end
  out[#out + 1] = done
end
return out
";

/// Gives a claim up. KEYS: record, doubt index. ARGV: claim id, mode, hold ms,
/// trade no. Mode `clean`: nothing was credited; the next claim credits at once.
/// Mode `doubt`: the credit may have happened; the record becomes `IN_DOUBT`, is
/// listed in the doubt index, and stays leased for `hold` ms (so the earlier call
/// has settled before anyone resolves it). The deduction stands either way.
const RELEASE_LUA: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rec = redis.call('HMGET', KEYS[1], 'state', 'owner')
if (rec[1] ~= 'IN_PROGRESS' and rec[1] ~= 'IN_DOUBT') or rec[2] ~= ARGV[1] then return 0 end
if ARGV[2] == 'clean' then
  redis.call('HSET', KEYS[1], 'state', 'IN_PROGRESS', 'lease', 0, 'clean', '1')
  redis.call('ZREM', KEYS[2], ARGV[4])
else
  redis.call('HSET', KEYS[1], 'state', 'IN_DOUBT', 'lease', now + tonumber(ARGV[3]), 'clean', '0')
  if redis.call('ZSCORE', KEYS[2], ARGV[4]) == false then redis.call('ZADD', KEYS[2], now, ARGV[4]) end
end
redis.call('HDEL', KEYS[1], 'owner')
return 1
";

/// Drops a doubt-index entry whose record is no longer in doubt (settled, or
/// expired), in one step with the check, so a record put back in doubt meanwhile keeps
/// its entry. KEYS: doubt index, record. ARGV: trade no. Returns 1 if it dropped it.
const SWEEP_LUA: &str = r"
if redis.call('HGET', KEYS[2], 'state') == 'IN_DOUBT' then return 0 end
return redis.call('ZREM', KEYS[1], ARGV[1])
";

/// Holds a budget shard for a change. KEYS: budget. ARGV: hold ms, holder id.
/// Returns spent, or -1 when another holder's hold is live.
const HOLD_LUA: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local b = redis.call('HMGET', KEYS[1], 'hold', 'holder', 'spent')
if tonumber(b[1] or '0') > now and b[2] ~= ARGV[2] then return -1 end
redis.call('HSET', KEYS[1], 'hold', now + tonumber(ARGV[1]), 'holder', ARGV[2])
return tonumber(b[3] or '0')
";

/// Ends a hold, setting the cap when one is given. KEYS: budget. ARGV: holder id,
/// cap or ''. Returns 1, or 0 when the hold is no longer this holder's or has lapsed
/// (spending may have resumed, so a cap computed from the held spending is stale).
const UNHOLD_LUA: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local b = redis.call('HMGET', KEYS[1], 'holder', 'hold')
if b[1] ~= ARGV[1] then return 0 end
if ARGV[2] ~= '' and tonumber(b[2] or '0') <= now then
  redis.call('HDEL', KEYS[1], 'hold', 'holder')
  return 0
end
if ARGV[2] ~= '' then redis.call('HSET', KEYS[1], 'cap', ARGV[2]) end
redis.call('HDEL', KEYS[1], 'hold', 'holder')
return 1
";

/// Longest trade number accepted (it becomes part of a key).
const MAX_ID: usize = proto::ids::MAX_ID_LEN;
/// Longest scene: a budget scope `activity/scene` of two ids.
const MAX_SCENE: usize = 2 * proto::ids::MAX_ID_LEN + 1;

/// The claim store's scripts, loaded once per store.
#[derive(Debug)]
struct Scripts {
    claim: Script,
    release: Script,
    claim_many: Script,
    finish_many: Script,
    hold: Script,
    unhold: Script,
    sweep: Script,
}

/// The claim store.
#[derive(Clone)]
pub struct Claims {
    pool: Pool,
    cfg: Arc<ClaimConfig>,
    scripts: Arc<Scripts>,
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
    if g.amount <= 0 || g.amount > MAX_AMOUNT {
        return Err(ClaimError::Invalid("amount must be in 1..=2^53-1"));
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
    let max = if what == "scene" { MAX_SCENE } else { MAX_ID };
    if id.is_empty() || id.len() > max || id.contains(['{', '}']) {
        return Err(ClaimError::Invalid(what));
    }
    Ok(())
}

fn secs(v: u64) -> Value {
    Value::from(i64::try_from(v).unwrap_or(i64::MAX))
}

/// An in-doubt grant as the operator's list shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Doubt {
    /// The trade number.
    pub trade_no: String,
    /// Since when it is in doubt (Unix ms, Redis's clock).
    pub since_ms: i64,
    /// Its record, when it still has one.
    pub record: Option<Record>,
}

impl Claims {
    /// Connects to Redis at `redis_url`, loads the scripts, and fixes the shard count
    /// at first use (or refuses a count other than the stored one).
    pub async fn connect(redis_url: &str, cfg: ClaimConfig) -> Result<Self, ClaimError> {
        if cfg.shards == 0 || cfg.lease_ms == 0 || cfg.retention_secs == 0 || cfg.pool_size == 0 {
            return Err(ClaimError::Invalid(
                "shards, lease_ms, retention_secs and pool_size must be positive",
            ));
        }
        if cfg.key_prefix.is_empty() || cfg.key_prefix.contains(['{', '}']) {
            return Err(ClaimError::Invalid(
                "key prefix must be set, without braces",
            ));
        }
        let pool = Builder::from_config(Config::from_url(redis_url)?).build_pool(cfg.pool_size)?;
        pool.init().await?;
        let load = |script: &'static str| {
            let client = pool.next().clone();
            async move { Script::load(&client, script).await }
        };
        let (claim, release, claim_many, finish_many, hold, unhold, sweep) = tokio::try_join!(
            load(CLAIM_LUA),
            load(RELEASE_LUA),
            load(CLAIM_MANY_LUA),
            load(FINISH_MANY_LUA),
            load(HOLD_LUA),
            load(UNHOLD_LUA),
            load(SWEEP_LUA),
        )?;
        let scripts = Arc::new(Scripts {
            claim,
            release,
            claim_many,
            finish_many,
            hold,
            unhold,
            sweep,
        });
        let meta = format!("{}:meta", cfg.key_prefix);
        let exists: i64 = pool.next().exists(&meta).await?;
        if exists == 0 && Self::old_layout(&pool, &cfg.key_prefix).await? {
            return Err(ClaimError::OldLayout(cfg.key_prefix.clone()));
        }
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
        Ok(Self {
            pool,
            cfg: Arc::new(cfg),
            scripts,
        })
    }

    /// Whether budget keys of the previous layout (`{prefix}:{scene:N}:budget`) exist:
    /// one `SCAN` pass, made only when the store has no `meta` yet (its first start
    /// under this layout).
    async fn old_layout(pool: &Pool, prefix: &str) -> Result<bool, ClaimError> {
        let pattern = format!("{prefix}:{{*}}:budget");
        let client = pool.next();
        let mut cursor = "0".to_string();
        loop {
            let (next, keys): (String, Vec<String>) = client
                .custom(
                    fred::types::CustomCommand::new_static(
                        "SCAN",
                        fred::types::ClusterHash::Random,
                        false,
                    ),
                    vec![cursor.as_str(), "MATCH", pattern.as_str(), "COUNT", "1000"],
                )
                .await?;
            if !keys.is_empty() {
                return Ok(true);
            }
            if next == "0" {
                return Ok(false);
            }
            cursor = next;
        }
    }

    /// The store's settings.
    pub fn config(&self) -> &ClaimConfig {
        &self.cfg
    }

    /// The shard a trade number belongs to.
    pub fn shard_of(&self, trade_no: &str) -> u32 {
        crc32fast::hash(trade_no.as_bytes()) % self.cfg.shards
    }

    fn tag(&self, shard: u32) -> String {
        format!("{p}:{{{p}.{shard}}}", p = self.cfg.key_prefix)
    }

    /// The budget key of a scene's shard.
    pub fn budget_key(&self, scene: &str, shard: u32) -> String {
        format!("{}:b:{scene}", self.tag(shard))
    }

    /// The record key of a trade number (in its shard `shard_of(trade_no)`).
    pub fn record_key(&self, shard: u32, trade_no: &str) -> String {
        format!("{}:t:{trade_no}", self.tag(shard))
    }

    /// The doubt index of a shard.
    pub fn doubt_key(&self, shard: u32) -> String {
        format!("{}:doubt", self.tag(shard))
    }

    /// Sets a scene's total budget exactly (module doc): holds its shards, reads
    /// their spending, gives each its spending plus an even share of the rest.
    /// Refused below what the scene has spent. Returns what it had spent.
    pub async fn set_budget(&self, scene: &str, total: i64) -> Result<i64, ClaimError> {
        check_id("scene", scene)?;
        if !(0..=MAX_AMOUNT).contains(&total) {
            return Err(ClaimError::Invalid("budget must be in 0..=2^53-1"));
        }
        let holder = new_claim_id();
        let mut spent = Vec::with_capacity(self.cfg.shards as usize);
        let mut outcome = Ok(());
        for shard in 0..self.cfg.shards {
            let s: Result<i64, ClaimError> = self
                .scripts
                .hold
                .eval(self.pool.next(), || {
                    (
                        vec![self.budget_key(scene, shard)],
                        vec![secs(BUDGET_HOLD_MS), Value::from(holder.as_str())],
                    )
                })
                .await
                .map_err(Into::into);
            match s {
                Ok(-1) => {
                    outcome = Err(ClaimError::BudgetBusy(scene.to_string()));
                    break;
                }
                Ok(v) => spent.push(v),
                Err(e) => {
                    outcome = Err(e);
                    break;
                }
            }
        }
        let sum: i64 = spent.iter().sum();
        if outcome.is_ok() && total < sum {
            outcome = Err(ClaimError::BelowSpent {
                scene: scene.to_string(),
                total,
                spent: sum,
            });
        }
        let n = i64::from(self.cfg.shards);
        let left = total - sum;
        let mut done = 0u32;
        for shard in 0..self.cfg.shards {
            let cap = match (&outcome, spent.get(shard as usize)) {
                (Ok(()), Some(s)) => {
                    (s + left / n + i64::from(i64::from(shard) < left % n)).to_string()
                }
                _ => String::new(),
            };
            let unheld: Result<i64, fred::error::Error> = self
                .scripts
                .unhold
                .eval(self.pool.next(), || {
                    (
                        vec![self.budget_key(scene, shard)],
                        vec![Value::from(holder.as_str()), Value::from(cap.as_str())],
                    )
                })
                .await;
            match (&outcome, unheld) {
                (Ok(()), Ok(1)) => done += 1,
                (Ok(()), _) if done == 0 => {
                    outcome = Err(ClaimError::BudgetBusy(scene.to_string()));
                }
                (Ok(()), _) => {
                    outcome = Err(ClaimError::BudgetPartial {
                        scene: scene.to_string(),
                        done,
                        shards: self.cfg.shards,
                    });
                }
                _ => {}
            }
        }
        outcome.map(|()| sum)
    }

    /// Sets a scene's budget only if it has none yet (what a start-up does with its
    /// configured budgets: a live change is never overwritten). Returns whether it
    /// set it.
    pub async fn init_budget(&self, scene: &str, total: i64) -> Result<bool, ClaimError> {
        check_id("scene", scene)?;
        if !(0..=MAX_AMOUNT).contains(&total) {
            return Err(ClaimError::Invalid("budget must be in 0..=2^53-1"));
        }
        let n = i64::from(self.cfg.shards);
        let mut set = false;
        for shard in 0..self.cfg.shards {
            let cap = total / n + i64::from(i64::from(shard) < total % n);
            let fresh: i64 = self
                .pool
                .next()
                .hsetnx(self.budget_key(scene, shard), "cap", cap)
                .await?;
            set |= fresh == 1;
        }
        Ok(set)
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

    /// The record of `trade_no`, if there is one (whatever its scene).
    pub async fn record(&self, trade_no: &str) -> Result<Option<Record>, ClaimError> {
        check_id("trade number", trade_no)?;
        let key = self.record_key(self.shard_of(trade_no), trade_no);
        let v: Vec<Option<String>> = self
            .pool
            .next()
            .hmget(
                key,
                vec![
                    "state", "scene", "activity", "user", "type", "amount", "result",
                ],
            )
            .await?;
        let mut it = v.into_iter();
        let mut next = || it.next().flatten();
        let Some(state_text) = next() else {
            return Ok(None);
        };
        let state = ClaimState::parse(&state_text)
            .ok_or_else(|| ClaimError::Reply(vec![state_text.clone()]))?;
        let scene = next().unwrap_or_default();
        let activity_id = next().unwrap_or_default();
        let user_id = next().unwrap_or_default();
        let reward_type = next().unwrap_or_default();
        let amount_text = next().unwrap_or_default();
        let amount = amount_text
            .parse()
            .map_err(|_| ClaimError::Reply(vec![state_text, amount_text]))?;
        Ok(Some(Record {
            state,
            scene,
            activity_id,
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
        let reply: Vec<String> = self
            .scripts
            .claim
            .eval(self.pool.next(), || {
                (
                    vec![
                        self.record_key(shard, &g.trade_no),
                        self.budget_key(&g.scene, shard),
                    ],
                    vec![
                        Value::from(g.user_id.as_str()),
                        Value::from(g.reward_type.as_str()),
                        Value::from(g.amount.to_string()),
                        secs(self.cfg.lease_ms),
                        secs(self.cfg.retention_secs),
                        Value::from(claim_id.as_str()),
                        Value::from(g.scene.as_str()),
                        Value::from(g.activity_id.as_str()),
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
        let claimed = |prior| Claim::Claimed {
            claim_id: claim_id.clone(),
            prior,
        };
        Ok(match code {
            "CLAIMED" => claimed(Prior::Fresh),
            "RESUME" => claimed(Prior::Released),
            "RESOLVE" => claimed(Prior::InDoubt),
            "TAKEOVER" => claimed(Prior::Unknown),
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

    /// Groups items by (scene, shard): index lists.
    fn by_shard<'a>(&self, grants: impl Iterator<Item = (usize, &'a Grant)>) -> Vec<Vec<usize>> {
        let mut groups: std::collections::BTreeMap<(&str, &str, u32), Vec<usize>> =
            std::collections::BTreeMap::new();
        for (i, g) in grants {
            groups
                .entry((
                    g.scene.as_str(),
                    g.activity_id.as_str(),
                    self.shard_of(&g.trade_no),
                ))
                .or_default()
                .push(i);
        }
        groups.into_values().collect()
    }

    /// Claims many grants: exactly what [`Claims::claim`] would answer for each, in
    /// one script call per (scene, shard) instead of one per grant. Grants of one
    /// shard are decided in their order in `grants`; the answers come back in that
    /// order too.
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

    /// One (scene, shard)'s grants in one script call.
    async fn claim_shard(
        &self,
        part: &[Grant],
    ) -> Result<Vec<Result<Claim, ClaimError>>, ClaimError> {
        let Some(first) = part.first() else {
            return Ok(Vec::new());
        };
        let shard = self.shard_of(&first.trade_no);
        let ids: Vec<String> = part.iter().map(|_| new_claim_id()).collect();
        let reply: Vec<String> = self
            .scripts
            .claim_many
            .eval(self.pool.next(), || {
                let mut keys = vec![self.budget_key(&first.scene, shard)];
                let mut args = vec![
                    secs(self.cfg.lease_ms),
                    secs(self.cfg.retention_secs),
                    Value::from(first.scene.as_str()),
                    Value::from(first.activity_id.as_str()),
                ];
                for (g, id) in part.iter().zip(&ids) {
                    keys.push(self.record_key(shard, &g.trade_no));
                    args.push(Value::from(g.user_id.as_str()));
                    args.push(Value::from(g.reward_type.as_str()));
                    args.push(Value::from(g.amount.to_string()));
                    args.push(Value::from(id.as_str()));
                }
                (keys, args)
            })
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

    /// Marks many credited grants `GRANTED` with their receipts, one script call per
    /// shard. `items`: grant, claim id, receipt. A receipt proves the credit, so a
    /// record whose lease has passed to another owner is marked all the same.
    pub async fn grant_many(
        &self,
        items: &[(Grant, String, String)],
    ) -> Vec<Result<Finish, ClaimError>> {
        self.finish_many(items, ClaimState::Granted).await
    }

    async fn finish_many(
        &self,
        items: &[(Grant, String, String)],
        state: ClaimState,
    ) -> Vec<Result<Finish, ClaimError>> {
        let mut groups: std::collections::BTreeMap<u32, Vec<usize>> = Default::default();
        for (i, (g, _, _)) in items.iter().enumerate() {
            groups
                .entry(self.shard_of(&g.trade_no))
                .or_default()
                .push(i);
        }
        self.per_shard(
            items,
            groups.into_values().collect(),
            move |me, part| async move {
                Ok(me
                    .finish_shard(&part, state)
                    .await?
                    .into_iter()
                    .map(Ok)
                    .collect())
            },
        )
        .await
    }

    async fn finish_shard(
        &self,
        part: &[(Grant, String, String)],
        state: ClaimState,
    ) -> Result<Vec<Finish>, ClaimError> {
        let Some((first, _, _)) = part.first() else {
            return Ok(Vec::new());
        };
        for (g, _, _) in part {
            check_id("scene", &g.scene)?;
            check_id("trade number", &g.trade_no)?;
        }
        let shard = self.shard_of(&first.trade_no);
        let reply: Vec<i64> = self
            .scripts
            .finish_many
            .eval(self.pool.next(), || {
                let mut keys = vec![self.doubt_key(shard)];
                let mut args = vec![secs(self.cfg.retention_secs)];
                for (g, id, result) in part {
                    keys.push(self.record_key(shard, &g.trade_no));
                    keys.push(self.budget_key(&g.scene, shard));
                    args.push(Value::from(id.as_str()));
                    args.push(Value::from(state.as_str()));
                    args.push(Value::from(result.as_str()));
                    args.push(Value::from(g.trade_no.as_str()));
                }
                (keys, args)
            })
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

    async fn finish_one(
        &self,
        g: &Grant,
        claim_id: &str,
        state: ClaimState,
        result: &str,
    ) -> Result<Finish, ClaimError> {
        let item = [(g.clone(), claim_id.to_string(), result.to_string())];
        self.finish_many(&item, state)
            .await
            .pop()
            .unwrap_or_else(|| Err(ClaimError::Redis("no answer".into())))
    }

    /// Marks a credited grant `GRANTED`, storing `result` (the receipt) for
    /// duplicates to get back.
    pub async fn grant(
        &self,
        g: &Grant,
        claim_id: &str,
        result: &str,
    ) -> Result<Finish, ClaimError> {
        self.finish_one(g, claim_id, ClaimState::Granted, result)
            .await
    }

    /// Marks a claimed grant failed for good and gives its amount back to the budget
    /// (only the claim's owner can).
    pub async fn fail(
        &self,
        g: &Grant,
        claim_id: &str,
        reason: &str,
    ) -> Result<Finish, ClaimError> {
        self.finish_one(g, claim_id, ClaimState::Failed, reason)
            .await
    }

    async fn release_as(
        &self,
        g: &Grant,
        claim_id: &str,
        mode: &str,
        hold_ms: u64,
    ) -> Result<Finish, ClaimError> {
        check_id("trade number", &g.trade_no)?;
        let shard = self.shard_of(&g.trade_no);
        let done: i64 = self
            .scripts
            .release
            .eval(self.pool.next(), || {
                (
                    vec![self.record_key(shard, &g.trade_no), self.doubt_key(shard)],
                    vec![
                        Value::from(claim_id),
                        Value::from(mode),
                        secs(hold_ms),
                        Value::from(g.trade_no.as_str()),
                    ],
                )
            })
            .await?;
        Ok(if done == 1 {
            Finish::Done
        } else {
            Finish::LostLease
        })
    }

    /// Gives a claim up after a failure that credited nothing: the next claim of the
    /// trade number credits at once (no second deduction).
    pub async fn release(&self, g: &Grant, claim_id: &str) -> Result<Finish, ClaimError> {
        self.release_as(g, claim_id, "clean", 0).await
    }

    /// Gives a claim up after a credit whose outcome is unknown: the record becomes
    /// `IN_DOUBT` (listed for operators) and no one takes it over for `hold_ms`, so
    /// the earlier call has settled before it is resolved.
    pub async fn doubt(
        &self,
        g: &Grant,
        claim_id: &str,
        hold_ms: u64,
    ) -> Result<Finish, ClaimError> {
        self.release_as(g, claim_id, "doubt", hold_ms).await
    }

    /// Every grant held in doubt, oldest first, with its record (for operators).
    pub async fn in_doubt(&self) -> Result<Vec<Doubt>, ClaimError> {
        let mut out = Vec::new();
        for shard in 0..self.cfg.shards {
            let listed: Vec<(String, f64)> = self
                .pool
                .next()
                .zrange(self.doubt_key(shard), 0, -1, None, false, None, true)
                .await?;
            for (trade_no, since) in listed {
                let record = self.record(&trade_no).await?;
                // A record that expired (or was settled elsewhere) leaves the list,
                // unless it was put back in doubt meanwhile (checked in the script).
                if record
                    .as_ref()
                    .is_none_or(|r| r.state != ClaimState::InDoubt)
                {
                    let _: i64 = self
                        .scripts
                        .sweep
                        .eval(self.pool.next(), || {
                            (
                                vec![self.doubt_key(shard), self.record_key(shard, &trade_no)],
                                vec![Value::from(trade_no.as_str())],
                            )
                        })
                        .await?;
                    continue;
                }
                out.push(Doubt {
                    trade_no,
                    since_ms: since as i64,
                    record,
                });
            }
        }
        out.sort_by_key(|d| d.since_ms);
        Ok(out)
    }

    /// How many entries the doubt index holds (the `reward_service_in_doubt` gauge):
    /// one `ZCARD` per shard. Entries whose record is gone are dropped by
    /// [`Claims::in_doubt`] (what `reward-ctl in-doubt` lists).
    pub async fn in_doubt_count(&self) -> Result<u64, ClaimError> {
        let mut n = 0;
        for shard in 0..self.cfg.shards {
            let c: u64 = self.pool.next().zcard(self.doubt_key(shard)).await?;
            n += c;
        }
        Ok(n)
    }

    /// An operator's verdict on an in-doubt grant after checking the downstream:
    /// `Some(receipt)` marks it `GRANTED`; `None` (the downstream never credited it)
    /// releases it cleanly, so the next grant of the trade number credits it (a
    /// redelivery of its event, or a withdrawal of its token: the consumer already
    /// acknowledged the event it held in doubt). Returns whether the record was in
    /// doubt.
    pub async fn settle_doubt(
        &self,
        trade_no: &str,
        receipt: Option<&str>,
    ) -> Result<bool, ClaimError> {
        let Some(rec) = self.record(trade_no).await? else {
            return Ok(false);
        };
        if rec.state != ClaimState::InDoubt {
            return Ok(false);
        }
        let g = Grant {
            scene: rec.scene,
            activity_id: rec.activity_id,
            trade_no: trade_no.to_string(),
            user_id: rec.user_id,
            reward_type: rec.reward_type,
            amount: rec.amount,
        };
        // Take the record over as an owner would (its hold must be over), then finish.
        let claim_id = match self.claim(&g).await? {
            Claim::Claimed { claim_id, .. } => claim_id,
            Claim::RetryLater { lease_left_ms } => {
                return Err(ClaimError::Redis(format!(
                    "{trade_no} is held for {lease_left_ms} ms more; try again then"
                )));
            }
            _ => return Ok(false),
        };
        match receipt {
            Some(r) => {
                self.grant(&g, &claim_id, r).await?;
            }
            None => {
                self.release(&g, &claim_id).await?;
            }
        }
        Ok(true)
    }
}
