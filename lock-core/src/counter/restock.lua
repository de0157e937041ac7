-- Adds ARGV[1] to the stock; returns the new stock, or -1 for an unknown item.
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
return redis.call('INCRBY', KEYS[1], ARGV[1])
