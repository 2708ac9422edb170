-- Holds a budget shard for a change.
-- KEYS: budget.
-- ARGV: hold ms, holder id.
-- Returns the shard's spent, or -1 when another holder's hold is live.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local b = redis.call('HMGET', KEYS[1], 'hold', 'holder', 'spent')
if tonumber(b[1] or '0') > now and b[2] ~= ARGV[2] then return -1 end
redis.call('HSET', KEYS[1], 'hold', now + tonumber(ARGV[1]), 'holder', ARGV[2])
return tonumber(b[3] or '0')
