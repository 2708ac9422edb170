-- Reads a record (through a script, so the reply is proven to be this read's).
-- KEYS: record.
-- Returns the record's text, or nil.
return redis.call('GET', KEYS[1])
