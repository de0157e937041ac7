-- Fair lock: taken only when free and this waiter is first in line.
-- KEYS[1..3] as in the prelude, KEYS[4] fencing counter
-- ARGV[1] token, ARGV[2] lease ms, ARGV[3] "1" for a fencing token,
-- ARGV[4] fencing counter TTL ms, ARGV[5] slot ms (how long a place in line
-- is kept without a retry), ARGV[6] wake-up channel prefix
-- Returns {1, fence or 0} when taken, {0, PTTL of the holder or -1 when
-- queued behind others}.
local now = now_ms()
prune(now)
local token = ARGV[1]
local head = redis.call('LINDEX', KEYS[2], 0)
local free = redis.call('EXISTS', KEYS[1]) == 0
if free and (not head or head == token) then
  redis.call('SET', KEYS[1], token, 'PX', ARGV[2])
  if head == token then redis.call('LPOP', KEYS[2]) end
  redis.call('ZREM', KEYS[3], token)
  if ARGV[3] == '1' then return {1, next_fence(KEYS[4], ARGV[4])} end
  return {1, 0}
end
if not redis.call('ZSCORE', KEYS[3], token) then
  redis.call('RPUSH', KEYS[2], token)
end
local slot = tonumber(ARGV[5])
redis.call('ZADD', KEYS[3], now + slot, token)
redis.call('PEXPIRE', KEYS[2], 2 * slot)
redis.call('PEXPIRE', KEYS[3], 2 * slot)
if free then
  -- The head has not come for it yet: nudge it.
  wake_head(ARGV[6])
  return {0, -1}
end
return {0, redis.call('PTTL', KEYS[1])}
