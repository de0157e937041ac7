-- Semaphore: a zset of permit tokens scored by expiry (Redis time, ms), so
-- a crashed holder's permit comes back when its lease ends.
-- KEYS[1] permits; ARGV[1] token, ARGV[2] lease ms, ARGV[3] permits
-- Returns {1, 0} when a permit is taken, {0, ms until the first expiry}.
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local lease = tonumber(ARGV[2])
if redis.call('ZSCORE', KEYS[1], ARGV[1])
    or redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('ZADD', KEYS[1], now + lease, ARGV[1])
  if redis.call('PTTL', KEYS[1]) < lease then redis.call('PEXPIRE', KEYS[1], lease) end
  return {1, 0}
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {0, tonumber(first[2]) - now}
