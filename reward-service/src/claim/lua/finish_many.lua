-- Finishes many grants (after the record and fields preludes): GRANTED (a receipt
-- proves the credit, so any IN_PROGRESS or IN_DOUBT record takes it) or FAILED (only
-- by the owner of a live claim; the amount goes back to the budget).
-- KEYS: per grant its record, its budget, its shard's doubt index.
-- ARGV: retention s, re-arm after ms, then per grant one argument, its fields
-- packed: claim id, final state, trade no, amount, scene, user, type, activity,
-- result.
-- Returns per grant 1 (done, or already GRANTED for a grant) or 0 (not this
-- claim's, or no record).
-- The usual finish is one command: SET XX GET KEEPTTL writes the final record and
-- answers the one it replaced; a record this finish may not change is put back as it
-- was in the same script.
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
