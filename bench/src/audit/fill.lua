-- Writes the claim records of trade numbers T<from>..T<to> (GRANTED with a receipt,
-- amount 5, scene act/rain), record n in shard n % shards.
-- ARGV: shards, from, to, then per shard s (0-based) the record key of trade number
-- "T" in that shard, which the number n completes.
local shards, from, to = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
for n = from, to do
  local s = n % shards
  redis.call('SET', ARGV[4 + s] .. n,
    '5\nact/rain\nu' .. n .. '\ncash\nact\nGRANTED\n\n\n\ntx' .. n)
end
return to - from + 1
