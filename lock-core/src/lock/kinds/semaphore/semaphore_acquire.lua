-- Semaphore: a zset of permits scored by expiry (Redis time, ms), so a
-- crashed holder's permits come back when their lease ends. A holder of
-- several permits has one member per permit: `<token>#1` .. `<token>#n`.
-- KEYS[1] permits; ARGV[1] token, ARGV[2] lease ms, ARGV[3] permits,
-- ARGV[4] permits asked for (all or none)
-- Returns {1, 0} when they are taken, {0, ms until the first expiry}.
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local lease = tonumber(ARGV[2])
local count = tonumber(ARGV[4])
if redis.call('ZSCORE', KEYS[1], ARGV[1] .. '#1')
    or redis.call('ZCARD', KEYS[1]) + count <= tonumber(ARGV[3]) then
  for i = 1, count do
    redis.call('ZADD', KEYS[1], now + lease, ARGV[1] .. '#' .. i)
  end
  if redis.call('PTTL', KEYS[1]) < lease then redis.call('PEXPIRE', KEYS[1], lease) end
  return {1, 0}
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {0, tonumber(first[2]) - now}
