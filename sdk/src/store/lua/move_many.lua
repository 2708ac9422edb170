local ttl = tonumber(ARGV[1])
local out = {}
for i = 1, #KEYS do
  local h, f = KEYS[i], ARGV[i + 1]
  local v = redis.call('HGET', h, f)
  if not v then
    -- Not stored yet (its write still retrying): a mark, so the late write lands
    -- credited. The mark may be the hash's first field, so the hash gets a TTL; one it
    -- has already is only ever lengthened (this service's ttl may be shorter than the
    -- SDK's, and must not cut the life of tokens still waiting for their credit).
    redis.call('HSET', h, f, '!')
    if redis.call('TTL', h) < ttl then redis.call('EXPIRE', h, ttl) end
    out[i] = 0
  elseif string.sub(v, 1, 1) == '!' then
    out[i] = 0
  else
    redis.call('HSET', h, f, '!' .. v)
    out[i] = 1
  end
end
return out
