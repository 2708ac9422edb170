-- Lends a shard's unspent budget to another shard of its scene (the first half of a
-- move): lowers the cap by what it lends, at most the shard's headroom.
-- KEYS: budget.
-- ARGV: most to lend, the borrower's set.
-- Returns {lent, 0}; {0, ms} while a budget change holds it (ms left on the hold);
-- {0, -1} when its cap belongs to another set than the borrower's, or it has none.
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
