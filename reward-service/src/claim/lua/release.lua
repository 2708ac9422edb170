-- Gives a claim up (after the record prelude).
-- KEYS: record, doubt index.
-- ARGV: claim id, mode ('clean' or 'doubt'), hold ms, trade no.
-- clean: nothing was credited; the next claim credits at once. doubt: the credit may
-- have happened; the record becomes IN_DOUBT, is listed in the doubt index and stays
-- leased for the hold. The deduction stands either way.
-- Returns 1, or 0 when the record is not this claim's live one.
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
