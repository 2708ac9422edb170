-- The fleet's lease: one call per instance per lease period, for every bucket at once.
-- KEYS: live set, global bucket, global demand, then one bucket per reward type.
-- ARGV: instance, live ttl ms, lease ms, type count, then per type (rate, cap, give,
-- want), then the global valve (rate, cap, give, want, used), class count, and the
-- waiting priorities, highest first.
-- Answers: the live count, the permits granted per type, the global permits granted.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local id = ARGV[1]
local ttl = tonumber(ARGV[2])
local lease = tonumber(ARGV[3])
redis.call('ZADD', KEYS[1], now, id)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - ttl)
redis.call('PEXPIRE', KEYS[1], ttl * 10)
local live = redis.call('ZCARD', KEYS[1])

local function refill(key, rate, cap, give)
  local s = redis.call('HMGET', key, 'tokens', 'at')
  local tokens = tonumber(s[1])
  local at = tonumber(s[2])
  if tokens == nil or at == nil then
    tokens = 0
    at = now
  end
  if now > at then
    tokens = tokens + (now - at) * rate / 1000
    at = now
  end
  tokens = math.min(tokens + give, cap)
  return tokens, at
end

local function store(key, tokens, at)
  redis.call('HSET', key, 'tokens', string.format('%.6f', tokens), 'at', at)
  redis.call('PEXPIRE', key, 60000)
end

local out = {live}
local n = tonumber(ARGV[4])
local a = 5
for i = 1, n do
  local key = KEYS[3 + i]
  local tokens, at = refill(key, tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]))
  local grant = math.max(0, math.floor(math.min(tonumber(ARGV[a + 3]), tokens)))
  store(key, tokens - grant, at)
  out[#out + 1] = grant
  a = a + 4
end

local gtokens, gat = refill(KEYS[2], tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]))
local want = tonumber(ARGV[a + 3])
local used = tonumber(ARGV[a + 4])
local classes = tonumber(ARGV[a + 5])
a = a + 6
-- Other instances' recorded demand; this instance's own old fields go.
local others = {}
local d = redis.call('HGETALL', KEYS[3])
for j = 1, #d, 2 do
  local p, who = string.match(d[j], '^(%d+)|(.*)$')
  local w, exp = string.match(d[j + 1], '^([%d%.]+)|(%d+)$')
  if p == nil or w == nil or tonumber(exp) < now or who == id then
    redis.call('HDEL', KEYS[3], d[j])
  else
    others[#others + 1] = {tonumber(p), tonumber(w)}
  end
end
local granted = 0
for c = 1, classes do
  local prio = tonumber(ARGV[a + c - 1])
  local reserve = 0
  for _, o in ipairs(others) do
    if o[1] > prio then reserve = reserve + o[2] end
  end
  local g = math.max(0, math.floor(math.min(want - granted, gtokens - reserve)))
  gtokens = gtokens - g
  granted = granted + g
end
store(KEYS[2], gtokens, gat)
if classes > 0 then
  local top = tonumber(ARGV[a])
  local demand = math.min(want, 2 * used + 1)
  redis.call('HSET', KEYS[3], top .. '|' .. id, demand .. '|' .. (now + 3 * lease))
  redis.call('PEXPIRE', KEYS[3], 60000)
end
out[#out + 1] = granted
return out
