-- The holders of the mark KEYS[1] whose hold has not run out (by Redis's clock).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local h = redis.call('HGETALL', KEYS[1])
local out = {}
for i = 1, #h, 2 do
  local to = tonumber(h[i + 1])
  if to and to > now then out[#out + 1] = h[i] end
end
return out
