-- Extends live permits. KEYS[1] permits; ARGV[1] token, ARGV[2] lease ms,
-- ARGV[3] permits held by the token
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZSCORE', KEYS[1], ARGV[1] .. '#1') then
  local lease = tonumber(ARGV[2])
  for i = 1, tonumber(ARGV[3]) do
    redis.call('ZADD', KEYS[1], now + lease, ARGV[1] .. '#' .. i)
  end
  if redis.call('PTTL', KEYS[1]) < lease then redis.call('PEXPIRE', KEYS[1], lease) end
  return 1
end
return 0
