redis.call('ZADD', KEYS[2], 'NX', ARGV[5], ARGV[6])
