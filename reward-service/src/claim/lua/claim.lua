-- Claims one grant (after the record prelude).
-- KEYS: record, budget.
-- ARGV: user, type, amount, lease ms, retention s, claim id, scene, activity.
-- Returns {code, detail}: CLAIMED, RESUME, RESOLVE or TAKEOVER (the caller owns the
-- grant), DUPLICATE or FAILED (with the stored result), RETRY (with the lease's ms
-- left), HELD (with the hold's ms left), CONFLICT, EXHAUSTED, NOBUDGET, BADRECORD.
-- A new trade number whose budget has room costs one command besides the budget's:
-- SET NX GET EX creates the record, or answers the one there.
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
