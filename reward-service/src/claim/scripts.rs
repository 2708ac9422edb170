//! The Lua scripts the claim store runs in Redis: claim, batch claim, finish,
//! release, doubt-index sweep, budget hold and budget moves between shards, and the
//! store's loaded handles to them.

use reward_runtime::script::Script;

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
if hold > now then return {'HELD', tostring(hold - now)} end
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
pub(super) const CLAIM_MANY_LUA: &str = r"
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
  elseif hold > now then code = 'HELD'; detail = tostring(hold - now)
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
/// ARGV: retention s, re-arm after ms ([`REARM_AFTER_MS`]), then per grant: claim id,
/// final state, result, trade no.
/// Returns per grant 1 (done, or already GRANTED for a grant) or 0 (not this
/// claim's).
pub(super) const FINISH_MANY_LUA: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
local n = (#KEYS - 1) / 2
for i = 1, n do
  local rk, bk = KEYS[2 * i], KEYS[2 * i + 1]
  local a = 3 + (i - 1) * 4
  local id, state, result = ARGV[a], ARGV[a + 1], ARGV[a + 2]
  local rec = redis.call('HMGET', rk, 'state', 'owner', 'amount', 'lease')
  local live = rec[1] == 'IN_PROGRESS' or rec[1] == 'IN_DOUBT'
  local done = 0
  if state == 'GRANTED' and rec[1] == 'GRANTED' then done = 1
  elseif live and (state == 'GRANTED' or rec[2] == id) then
    redis.call('HSET', rk, 'state', state, 'result', result)
    redis.call('HDEL', rk, 'lease', 'owner', 'clean')
    if state == 'FAILED' then redis.call('HINCRBY', bk, 'spent', -tonumber(rec[3])) end
    -- The claim set the record's TTL; re-arm it only for a record in doubt or one
    -- whose lease ended over REARM_AFTER_MS ago (else the claim's TTL stands, at most
    -- a lease and that long older than this change).
    if rec[1] == 'IN_DOUBT' or (tonumber(rec[4]) or 0) + tonumber(ARGV[2]) < now then
      redis.call('EXPIRE', rk, ARGV[1])
    end
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
pub(super) const RELEASE_LUA: &str = r"
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
pub(super) const SWEEP_LUA: &str = r"
if redis.call('HGET', KEYS[2], 'state') == 'IN_DOUBT' then return 0 end
return redis.call('ZREM', KEYS[1], ARGV[1])
";

/// Holds a budget shard for a change. KEYS: budget. ARGV: hold ms, holder id.
/// Returns spent, or -1 when another holder's hold is live.
pub(super) const HOLD_LUA: &str = r"
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
/// A cap set records the holder id as the shard's `set`: which exact division of the
/// total the cap belongs to (ids are unique per set, so two shards carry the same one
/// only when the same set gave both their caps).
pub(super) const UNHOLD_LUA: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local b = redis.call('HMGET', KEYS[1], 'holder', 'hold')
if b[1] ~= ARGV[1] then return 0 end
if ARGV[2] ~= '' and tonumber(b[2] or '0') <= now then
  redis.call('HDEL', KEYS[1], 'hold', 'holder')
  return 0
end
if ARGV[2] ~= '' then redis.call('HSET', KEYS[1], 'cap', ARGV[2], 'set', ARGV[1]) end
redis.call('HDEL', KEYS[1], 'hold', 'holder')
return 1
";

/// Lends a shard's unspent budget to another shard of its scene (the first half of a
/// move, [`LEND_LUA`] then [`BORROW_LUA`]). KEYS: budget. ARGV: most to lend, the
/// borrower's `set`. Lowers the cap by what it lends (at most the shard's headroom)
/// and returns `{lent, 0}`; lends nothing and returns `{0, ms}` while a budget change
/// holds it (`ms` left on the hold), `{0, -1}` when its cap belongs to another set
/// than the borrower's (a change reached one and not the other: their caps are not
/// one division of one total, so nothing moves between them).
pub(super) const LEND_LUA: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local b = redis.call('HMGET', KEYS[1], 'cap', 'spent', 'hold', 'set')
local hold = tonumber(b[3] or '0')
if hold > now then return {0, hold - now} end
if (b[4] or '') ~= ARGV[2] then return {0, -1} end
local cap = tonumber(b[1])
if not cap then return {0, -1} end
local give = math.min(cap - tonumber(b[2] or '0'), tonumber(ARGV[1]))
if give <= 0 then return {0, 0} end
redis.call('HSET', KEYS[1], 'cap', cap - give)
return {give, 0}
";

/// Takes what [`LEND_LUA`] lent into the shard that ran out (the second half of a
/// move). KEYS: budget. ARGV: amount, the `set` both shards had. Raises the cap and
/// returns 1; returns 0 and changes nothing while a change holds the shard or when a
/// change gave it a cap since (its `set` differs): that change divided the total
/// afresh, counting the lent units among the lender's if it reached the lender, and
/// leaving them stranded (never spendable twice) until the next change if not.
pub(super) const BORROW_LUA: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local b = redis.call('HMGET', KEYS[1], 'cap', 'hold', 'set')
if not tonumber(b[1]) or tonumber(b[2] or '0') > now then return 0 end
if (b[3] or '') ~= ARGV[2] then return 0 end
redis.call('HINCRBY', KEYS[1], 'cap', ARGV[1])
return 1
";

/// A finish re-arms a record's TTL only when its lease ended longer ago than this
/// (or it was in doubt): a credit finished within its lease keeps the TTL its claim
/// set moments before, which saves an `EXPIRE` per grant.
pub(super) const REARM_AFTER_MS: u64 = 3_600_000;

/// The claim store's scripts, loaded once per store.
#[derive(Debug)]
pub(super) struct Scripts {
    pub(super) claim: Script,
    pub(super) release: Script,
    pub(super) claim_many: Script,
    pub(super) finish_many: Script,
    pub(super) hold: Script,
    pub(super) unhold: Script,
    pub(super) lend: Script,
    pub(super) borrow: Script,
    pub(super) sweep: Script,
    /// Reads that decide money ([`reward_runtime::script::HMGET_LUA`]).
    pub(super) hmget: Script,
}
