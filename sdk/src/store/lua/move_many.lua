local out = {}
for i = 1, #KEYS do
  local h, f = KEYS[i], ARGV[i + 1]
  local v = redis.call('HGET', h, f)
  if not v then
    -- Not stored yet (its write still retrying): a mark, so the late write lands
    -- credited. The mark may be the hash's first field, so the hash gets its TTL.
    redis.call('HSET', h, f, '!')
    redis.call('EXPIRE', h, ARGV[1])
    out[i] = 0
  elseif string.sub(v, 1, 1) == '!' then
    out[i] = 0
  else
    redis.call('HSET', h, f, '!' .. v)
    out[i] = 1
  end
end
return out
