-- Drops a doubt-index entry whose record is no longer in doubt (settled, or
-- expired), in one step with the check (after the record prelude).
-- KEYS: doubt index, record.
-- ARGV: trade no.
-- Returns 1 if it dropped the entry, else 0.
local r = rec_parse(redis.call('GET', KEYS[2]))
if r and r[6] == 'IN_DOUBT' then return 0 end
return redis.call('ZREM', KEYS[1], ARGV[1])
