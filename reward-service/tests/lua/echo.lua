redis.call('HINCRBY', KEYS[1], 'n', 1) return ARGV[1]
