-- Claims many grants, of any scenes and shards, each decided as by claim.lua, in
-- order (after the record and fields preludes).
-- KEYS: per grant its record, then its budget.
-- ARGV: lease ms, retention s, then per grant one argument, its fields packed:
-- scene, activity, user, type, amount, claim id.
-- Returns code, detail per grant (the codes of claim.lua).
-- Every amount is checked and every budget read before any write; the record
-- commands go through redis.pcall, and a refused one undoes what this call wrote
-- before the error is answered: a call changes nothing or all it decided.
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
