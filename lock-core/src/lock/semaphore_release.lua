-- Returns a permit and wakes waiters. KEYS[1] permits; ARGV[1] token,
-- ARGV[2] wake-up channel. Returns 1 when the permit was live.
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  redis.call('PUBLISH', ARGV[2], 'released')
  return 1
end
return 0
