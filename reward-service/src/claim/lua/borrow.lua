-- Takes what lend.lua lent into the shard that ran out (the second half of a move):
-- raises the cap.
-- KEYS: budget.
-- ARGV: amount, the set both shards had.
-- Returns 1, or 0 (nothing changed) while a change holds the shard or when a change
-- gave it a cap since (its set differs).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local b = redis.call('HMGET', KEYS[1], 'cap', 'hold', 'set')
if not tonumber(b[1]) or tonumber(b[2] or '0') > now then return 0 end
if (b[3] or '') ~= ARGV[2] then return 0 end
redis.call('HINCRBY', KEYS[1], 'cap', ARGV[1])
return 1
