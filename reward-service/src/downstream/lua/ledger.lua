-- The built-in ledger's credit script (after the packed fields' helper, fields.lua of
-- the claim store): credits one or many, each decided as if alone and in order.
-- KEYS: per credit its five keys: balance hash, credited hash, incident counter,
-- repeat counter, receipt hash (one user's, one hash tag).
-- ARGV: now (Unix ms), honour key (1/0), then per credit one argument, its fields
-- packed: reward type, amount, trade no, and user, type and amount as one string
-- (what a repeat must match).
-- Returns per credit {balance, again}: again = 0 credited now, 1 credited a second
-- time (incident), 2 a repeat answered with the first receipt, 3 a repeat with other
-- fields (refused, incident; balance 0 for both repeats), 4 refused by Redis (a key
-- of another type under its balance or credited hash: nothing of it written).
local now, honour = ARGV[1], ARGV[2]
local out = {}
local function refused(r) return type(r) == 'table' and r.err end
-- Each credit's packed fields, unpacked before the first write.
local C = {}
for i = 1, #KEYS / 5 do
  local c = unpack_fields(ARGV[2 + i], 4)
  if not c then return redis.error_reply('credit ' .. i .. ' does not unpack to four strings') end
  C[i] = c
end
for i = 1, #KEYS / 5 do
  local k, c = (i - 1) * 5, C[i]
  local typ, amount, trade, fields = c[1], c[2], c[3], c[4]
  local balance, again = 0, 0
  local seen = 0
  if honour == '1' then seen = redis.pcall('HEXISTS', KEYS[k + 2], trade) end
  if refused(seen) then
    again = 4
  elseif seen == 1 then
    local first = redis.call('HGET', KEYS[k + 5], trade)
    if first and first ~= fields then
      redis.call('INCR', KEYS[k + 3])
      again = 3
    else
      redis.call('INCR', KEYS[k + 4])
      again = 2
    end
  else
    -- The balance and the credited mark move together or not at all: a key of
    -- another type under either refuses this credit alone, with nothing written.
    balance = redis.pcall('HINCRBY', KEYS[k + 1], typ, amount)
    if refused(balance) then
      balance, again = 0, 4
    else
      local added = redis.pcall('HSET', KEYS[k + 2], trade, now)
      if refused(added) then
        redis.call('HINCRBY', KEYS[k + 1], typ, '-' .. amount)
        balance, again = 0, 4
      else
        if added == 0 then
          again = 1
          redis.call('INCR', KEYS[k + 3])
        end
        if honour == '1' then redis.call('HSET', KEYS[k + 5], trade, fields) end
      end
    end
  end
  out[#out + 1] = balance
  out[#out + 1] = again
end
return out
