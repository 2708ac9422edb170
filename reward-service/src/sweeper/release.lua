-- Releases a lease only when this instance still holds it.
-- KEYS: the lease.
-- ARGV: this instance's id.
-- Returns 1 when it deleted the lease, else 0.
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
