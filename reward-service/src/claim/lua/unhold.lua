-- Ends a hold, setting the cap when one is given (and the holder id as the shard's
-- set: the division of the total the cap belongs to).
-- KEYS: budget.
-- ARGV: holder id, cap or ''.
-- Returns 1, or 0 when the hold is no longer this holder's or has lapsed.
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
