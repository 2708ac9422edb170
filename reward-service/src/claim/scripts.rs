//! The Lua scripts the claim store runs in Redis: claim, batch claim, finish,
//! release, doubt-index sweep, budget hold and budget moves between shards, and the
//! store's loaded handles to them.

use reward_runtime::script::Script;

/// The Lua helpers every record script starts with: a record is one string of ten
/// lines (`amount`, `scene`, `user`, `type`, `activity`, `state`, `lease`, `owner`,
/// `clean`, `result`; the module doc of [`super`] says why one string), `rec_parse`
/// splits one (nil when it is not a record), `rec_join` makes one, `bad_budget` tells
/// a budget the claim scripts must refuse before any write.
macro_rules! record_lua {
    () => {
        r"
local function rec_parse(v)
  if type(v) ~= 'string' then return nil end
  -- One pattern match splits the ten lines (a loop of finds cost more Redis CPU).
  local a, b, c, d, e, f, g, h, i, j = string.match(v,
    '^(%d+)\n([^\n]*)\n([^\n]*)\n([^\n]*)\n([^\n]*)\n([^\n]*)\n([^\n]*)\n([^\n]*)\n([^\n]*)\n(.*)$')
  if not a then return nil end
  return {a, b, c, d, e, f, g, h, i, j}
end
local function rec_join(r)
  return table.concat(r, '\n', 1, 10)
end
-- A redis.pcall answer that is an error (a status reply is a table too).
local function failed(r)
  return type(r) == 'table' and r.err ~= nil
end
-- Whether a budget's `spent` is not an integer HINCRBY takes (no leading zeros, no
-- -0, 17 characters at most) or its `hold` not a number (HMGET answers false for a
-- field that is not there).
local function bad_budget(spent, hold)
  if spent and spent ~= '0' and not (#spent <= 17 and string.match(spent, '^%-?[1-9]%d*$')) then
    return true
  end
  return hold and not tonumber(hold)
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"
    };
}

/// The Lua helper of the scripts that take a grant's fields packed ([`pack_fields`]):
/// `unpack_fields(arg, want)` unpacks one argument and answers its fields when they are
/// exactly `want` strings, `nil` otherwise (a missing argument, bytes that are not
/// MessagePack, another count, or a value that is not a string, such as the nil a
/// field too long for a header packs to). `cmsgpack.unpack` raises a Lua error on bytes
/// it cannot read; the scripts call it before their first write, so that error too
/// leaves everything as it was.
macro_rules! fields_lua {
    () => {
        r"
local function counted(...)
  return select('#', ...), {...}
end
local function unpack_fields(arg, want)
  -- select('#') counts every value unpacked, nils too (a table's length does not).
  local n, g = counted(cmsgpack.unpack(arg or ''))
  if n ~= want then return nil end
  for j = 1, want do
    if type(g[j]) ~= 'string' then return nil end
  end
  return g
end
"
    };
}

/// [`fields_lua!`] as text, for the scripts outside this module that take packed
/// fields (the built-in ledger's).
pub const FIELDS_LUA: &str = fields_lua!();

/// The claim script (public for benchmarks that run it bare, e.g. `redis-benchmark`).
/// KEYS: record, budget. ARGV: user, type, amount, lease ms, retention s, claim id,
/// scene, activity. A new trade number whose budget has room costs one command besides
/// the budget's: `SET NX GET EX` creates the record, or answers the one there.
pub const CLAIM_LUA: &str = concat!(
    record_lua!(),
    r"
local user, typ, amount, id, scene = ARGV[1], ARGV[2], ARGV[3], ARGV[6], ARGV[7]
local n = tonumber(amount)
if not n then return redis.error_reply('amount ' .. tostring(amount) .. ' is not a number') end
local b = redis.call('HMGET', KEYS[2], 'cap', 'spent', 'hold')
-- Not numbers: refused before the record is written (HINCRBY would fail after it).
if bad_budget(b[2], b[3]) then
  return redis.error_reply('BADBUDGET ' .. KEYS[2] .. ' holds a spent or hold that is not a number')
end
local hold = tonumber(b[3] or '0')
local cap = tonumber(b[1])
local spent = tonumber(b[2] or '0')
local lease = now + tonumber(ARGV[4])
local old
if hold > now or not cap or spent + n > cap then
  old = redis.call('GET', KEYS[1])
  if not old then
    if hold > now then return {'HELD', tostring(hold - now)} end
    if not cap then return {'NOBUDGET', ''} end
    return {'EXHAUSTED', ''}
  end
else
  old = redis.call('SET', KEYS[1], table.concat({amount, scene, user, typ, ARGV[8], 'IN_PROGRESS', lease, id, '0', ''}, '\n'), 'NX', 'GET', 'EX', ARGV[5])
  if not old then
    redis.call('HINCRBY', KEYS[2], 'spent', n)
    return {'CLAIMED', ''}
  end
end
local r = rec_parse(old)
if not r then return {'BADRECORD', ''} end
if r[1] ~= amount or r[2] ~= scene or r[3] ~= user or r[4] ~= typ then return {'CONFLICT', ''} end
if r[6] == 'GRANTED' then return {'DUPLICATE', r[10]} end
if r[6] == 'FAILED' then return {'FAILED', r[10]} end
local l = tonumber(r[7]) or 0
if l > now then return {'RETRY', tostring(l - now)} end
local code = 'TAKEOVER'
if r[6] == 'IN_DOUBT' then code = 'RESOLVE' elseif r[9] == '1' then code = 'RESUME' end
r[7], r[8], r[9] = lease, id, '0'
redis.call('SET', KEYS[1], rec_join(r), 'EX', ARGV[5])
return {code, ''}
"
);

/// The claim script for many grants at once, of any scenes and shards (on a Redis
/// Cluster the caller keeps one call's keys in one slot, so one shard): each grant is
/// decided exactly as by [`CLAIM_LUA`], in order, and each budget's `spent` moves once.
/// KEYS: per grant its record, then its budget. ARGV: lease ms, retention s, then per
/// grant one argument, its fields [`pack_fields`]ed: scene, activity, user, type, amount,
/// claim id. Returns code, detail per grant.
///
/// A new trade number costs one command (`SET NX GET EX`: created, or the record there
/// comes back to be judged); only a grant the budget would refuse reads first (`GET`),
/// so a refusal writes nothing. Each budget is read once (`HMGET`) and moved once
/// (`HINCRBY`). Redis does not roll a script back when it fails midway: every amount is
/// checked and every budget read before any write (a wrong-typed budget, or one whose
/// `spent` is not an integer or `hold` not a number, fails the whole call there),
/// and the record commands go through `redis.pcall`, so a key of another type under a
/// record's name undoes what this call wrote (records it created deleted, records it
/// took over put back) before the error is answered: a call changes nothing or all it
/// decided.
pub(super) const CLAIM_MANY_LUA: &str = concat!(
    record_lua!(),
    fields_lua!(),
    r"
local lease = now + tonumber(ARGV[1])
local ttl = ARGV[2]
local n = #KEYS / 2
-- Each grant's packed fields, unpacked once (fields that do not unpack to six
-- strings, or an amount that is not a number, fail the call here, before any write).
local G = {}
for i = 1, n do
  local g = unpack_fields(ARGV[2 + i], 6)
  if not g then return redis.error_reply('grant ' .. i .. ' does not unpack to six strings') end
  if not tonumber(g[5]) then return redis.error_reply('amount ' .. tostring(g[5]) .. ' is not a number') end
  G[i] = g
end
-- Each budget once, by key, in the order first seen: cap, spent, hold, and what this
-- call adds.
local budgets, order = {}, {}
for i = 1, n do
  local bk = KEYS[2 * i]
  if not budgets[bk] then
    local b = redis.call('HMGET', bk, 'cap', 'spent', 'hold')
    -- A field that is not a number would stop the script midway (Lua error, no undo)
    -- or fail the final HINCRBY after the records were written: refuse the call now,
    -- before any write.
    if bad_budget(b[2], b[3]) then
      return redis.error_reply('BADBUDGET ' .. bk .. ' holds a spent or hold that is not a number')
    end
    budgets[bk] = {tonumber(b[1]), tonumber(b[2] or '0'), tonumber(b[3] or '0'), 0}
    order[#order + 1] = bk
  end
end
local out = {}
-- What this call wrote, by key: a later grant of the same trade number in the batch
-- sees it exactly as it would see the written record.
local planned = {}
-- How to undo each write, newest last: {key, value before (false: none)}.
local undo = {}
local function fail(err)
  for j = #undo, 1, -1 do
    local u = undo[j]
    if u[2] then redis.call('SET', u[1], u[2], 'KEEPTTL') else redis.call('DEL', u[1]) end
  end
  return redis.error_reply('record ' .. tostring(err))
end
for i = 1, n do
  local k, b = KEYS[2 * i - 1], budgets[KEYS[2 * i]]
  local cap, spent, hold = b[1], b[2], b[3]
  local g = G[i]
  local scene, activity, user, typ, amount, id = g[1], g[2], g[3], g[4], g[5], g[6]
  local amt = tonumber(amount)
  local code, detail = nil, ''
  local old = planned[k]
  if old == nil then
    if hold > now or not cap or spent + b[4] + amt > cap then
      old = redis.pcall('GET', k)
      if failed(old) then return fail(old.err) end
      if not old then
        if hold > now then code = 'HELD'; detail = tostring(hold - now)
        elseif not cap then code = 'NOBUDGET'
        else code = 'EXHAUSTED' end
      end
    else
      local v = table.concat({amount, scene, user, typ, activity, 'IN_PROGRESS', lease, id, '0', ''}, '\n')
      old = redis.pcall('SET', k, v, 'NX', 'GET', 'EX', ttl)
      if failed(old) then return fail(old.err) end
      if not old then
        undo[#undo + 1] = {k, false}
        planned[k] = v
        b[4] = b[4] + amt
        code = 'CLAIMED'
      end
    end
  end
  if not code then
    local r = rec_parse(old)
    if not r then code = 'BADRECORD'
    elseif r[1] ~= amount or r[2] ~= scene or r[3] ~= user or r[4] ~= typ then code = 'CONFLICT'
    elseif r[6] == 'GRANTED' then code = 'DUPLICATE'; detail = r[10]
    elseif r[6] == 'FAILED' then code = 'FAILED'; detail = r[10]
    else
      local l = tonumber(r[7]) or 0
      if l > now then code = 'RETRY'; detail = tostring(l - now)
      else
        code = 'TAKEOVER'
        if r[6] == 'IN_DOUBT' then code = 'RESOLVE' elseif r[9] == '1' then code = 'RESUME' end
        r[7], r[8], r[9] = lease, id, '0'
        local v = rec_join(r)
        local w = redis.pcall('SET', k, v, 'EX', ttl)
        if failed(w) then return fail(w.err) end
        undo[#undo + 1] = {k, old}
        planned[k] = v
      end
    end
  end
  out[#out + 1] = code
  out[#out + 1] = detail
end
for _, bk in ipairs(order) do
  local add = budgets[bk][4]
  if add > 0 then redis.call('HINCRBY', bk, 'spent', add) end
end
return out
"
);

/// Marks grants `GRANTED` (a receipt proves the credit, so no lease is needed: any
/// `IN_PROGRESS` or `IN_DOUBT` record takes it) or `FAILED` (only by the owner of a
/// live claim; refunded). KEYS: per grant its record, its budget and its shard's doubt
/// index (grants of any shards; on a Redis Cluster the caller keeps a call to one).
/// ARGV: retention s, re-arm after ms ([`REARM_AFTER_MS`]), then per grant one
/// argument, its fields [`pack_fields`]ed: claim id, final state, trade no, amount, scene,
/// user, type, activity, result.
/// Returns per grant 1 (done, or already GRANTED for a grant) or 0 (not this
/// claim's, or no record).
///
/// The usual finish is one command: `SET XX GET KEEPTTL` writes the final record and
/// answers the one it replaced, which is then judged; a record this finish may not
/// change (finished already, another owner's, another grant's) is put back as it was
/// in the same script, so nobody ever reads the replaced value.
pub(super) const FINISH_MANY_LUA: &str = concat!(
    record_lua!(),
    fields_lua!(),
    r"
local out = {}
local n = #KEYS / 3
-- Each grant's packed fields, unpacked once, all before the first write: a call
-- with a grant whose argument is not nine strings changes nothing.
local G = {}
for i = 1, n do
  local g = unpack_fields(ARGV[2 + i], 9)
  if not g then return redis.error_reply('grant ' .. i .. ' does not unpack to nine strings') end
  G[i] = g
end
for i = 1, n do
  local rk, bk, dk = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
  local g = G[i]
  local id, state, trade, amount, scene = g[1], g[2], g[3], g[4], g[5]
  local user, typ, activity, result = g[6], g[7], g[8], g[9]
  local v = table.concat({amount, scene, user, typ, activity, state, '', '', '', result}, '\n')
  local old = redis.pcall('SET', rk, v, 'XX', 'GET', 'KEEPTTL')
  local done = 0
  -- A key of another type (the SET was refused) or no record: nothing changed.
  if type(old) == 'string' then
    local r = rec_parse(old)
    local live = r and (r[6] == 'IN_PROGRESS' or r[6] == 'IN_DOUBT')
    local ours = r and r[1] == amount and r[2] == scene and r[3] == user and r[4] == typ
    if ours and state == 'GRANTED' and r[6] == 'GRANTED' then
      redis.call('SET', rk, old, 'KEEPTTL')
      done = 1
    elseif ours and live and (state == 'GRANTED' or r[8] == id) then
      if r[5] ~= activity then
        r[6], r[7], r[8], r[9], r[10] = state, '', '', '', result
        redis.call('SET', rk, rec_join(r), 'KEEPTTL')
      end
      if state == 'FAILED' then redis.call('HINCRBY', bk, 'spent', -tonumber(r[1])) end
      -- The claim set the record's TTL; re-arm it only for a record in doubt or one
      -- whose lease ended over REARM_AFTER_MS ago (else the claim's TTL stands, at most
      -- a lease and that long older than this change).
      if r[6] == 'IN_DOUBT' or (tonumber(r[7]) or 0) + tonumber(ARGV[2]) < now then
        redis.call('EXPIRE', rk, ARGV[1])
      end
      if r[6] == 'IN_DOUBT' then redis.call('ZREM', dk, trade) end
      done = 1
    else
      redis.call('SET', rk, old, 'KEEPTTL')
    end
  end
  out[#out + 1] = done
end
return out
"
);

/// Gives a claim up. KEYS: record, doubt index. ARGV: claim id, mode, hold ms,
/// trade no. Mode `clean`: nothing was credited; the next claim credits at once.
/// Mode `doubt`: the credit may have happened; the record becomes `IN_DOUBT`, is
/// listed in the doubt index, and stays leased for `hold` ms (so the earlier call
/// has settled before anyone resolves it). The deduction stands either way.
pub(super) const RELEASE_LUA: &str = concat!(
    record_lua!(),
    r"
local old = redis.call('GET', KEYS[1])
local r = rec_parse(old)
if not r or (r[6] ~= 'IN_PROGRESS' and r[6] ~= 'IN_DOUBT') or r[8] ~= ARGV[1] then return 0 end
if ARGV[2] == 'clean' then
  r[6], r[7], r[9] = 'IN_PROGRESS', '0', '1'
  redis.call('ZREM', KEYS[2], ARGV[4])
else
  r[6], r[7], r[9] = 'IN_DOUBT', now + tonumber(ARGV[3]), '0'
  if redis.call('ZSCORE', KEYS[2], ARGV[4]) == false then redis.call('ZADD', KEYS[2], now, ARGV[4]) end
end
r[8] = ''
redis.call('SET', KEYS[1], rec_join(r), 'KEEPTTL')
return 1
"
);

/// Drops a doubt-index entry whose record is no longer in doubt (settled, or
/// expired), in one step with the check, so a record put back in doubt meanwhile keeps
/// its entry. KEYS: doubt index, record. ARGV: trade no. Returns 1 if it dropped it.
pub(super) const SWEEP_LUA: &str = concat!(
    record_lua!(),
    r"
local r = rec_parse(redis.call('GET', KEYS[2]))
if r and r[6] == 'IN_DOUBT' then return 0 end
return redis.call('ZREM', KEYS[1], ARGV[1])
"
);

/// Reads a record (through a script, so the reply is proven to be this read's:
/// `reward_runtime::script`). KEYS: record.
pub(super) const GET_LUA: &str = "return redis.call('GET', KEYS[1])";

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

/// One grant's fields for the batch scripts, as one argument: a MessagePack string
/// object each, one after the other, which the script's `cmsgpack.unpack` (built into
/// Redis's Lua) turns back into the fields. [`CLAIM_MANY_LUA`] and [`FINISH_MANY_LUA`]
/// take a grant's fields this way, not one argument a field: the Redis client builds,
/// copies, encodes and frees every argument on its own, which made it half of a
/// `GrantBatch`'s CPU in the service's process. One argument a grant costs the client
/// one of each, and Redis unpacks it in C for no more than it spent on the separate
/// arguments (splitting lines with `string.match` cost Redis more;
/// `docs/findings/benchmarks-history.md`, "Arguments by the grant"). Any bytes go
/// through: the lengths are in the headers. A field too long for a header (4 GiB; Redis
/// takes no argument over 512 MiB anyway) goes as a MessagePack nil, never as a
/// short header over the whole field: the scripts refuse a grant whose fields are not
/// all strings ([`FIELDS_LUA`]) before their first write.
pub fn pack_fields(fields: &[&str]) -> Vec<u8> {
    let mut out = Vec::with_capacity(fields.iter().map(|f| f.len() + 5).sum());
    for f in fields {
        let n = f.len();
        // str formats: fixstr, str 8, str 16, str 32 (big-endian lengths).
        if n < 32 {
            out.push(0xa0 | n as u8);
        } else if let Ok(n) = u8::try_from(n) {
            out.extend_from_slice(&[0xd9, n]);
        } else if let Ok(n) = u16::try_from(n) {
            out.push(0xda);
            out.extend_from_slice(&n.to_be_bytes());
        } else if let Ok(n) = u32::try_from(n) {
            out.push(0xdb);
            out.extend_from_slice(&n.to_be_bytes());
        } else {
            out.push(0xc0);
            continue;
        }
        out.extend_from_slice(f.as_bytes());
    }
    out
}

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
    /// Reads of budgets that decide money ([`reward_runtime::script::HMGET_LUA`]).
    pub(super) hmget: Script,
    /// Reads of a record ([`GET_LUA`]).
    pub(super) get: Script,
}

#[cfg(test)]
mod tests {
    use super::pack_fields;

    #[test]
    fn each_field_gets_the_smallest_string_header() {
        assert_eq!(pack_fields(&[]), Vec::<u8>::new());
        assert_eq!(pack_fields(&["", "ab"]), vec![0xa0, 0xa2, b'a', b'b']);
        let f31 = "x".repeat(31);
        assert_eq!(pack_fields(&[&f31])[0], 0xbf);
        let f32 = "x".repeat(32);
        assert_eq!(pack_fields(&[&f32])[..2], [0xd9, 32]);
        let f255 = "x".repeat(255);
        assert_eq!(pack_fields(&[&f255])[..2], [0xd9, 255]);
        let f256 = "x".repeat(256);
        assert_eq!(pack_fields(&[&f256])[..3], [0xda, 1, 0]);
        let f65536 = "x".repeat(65_536);
        let p = pack_fields(&[&f65536]);
        assert_eq!(p[..5], [0xdb, 0, 1, 0, 0]);
        assert_eq!(p.len(), 5 + 65_536);
    }
}
