-- Returns a holder's permits and wakes waiters; each release is
-- remembered, so a retried release gets the same answer.
-- KEYS[1] permits, KEYS[2] the key that remembers this token's release; ARGV[1] token, ARGV[2] wake-up
-- channel, ARGV[3] how long to remember it (ms), ARGV[4] permits held by
-- the token. Returns 1 when they were live.
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local members = {}
for i = 1, tonumber(ARGV[4]) do members[i] = ARGV[1] .. '#' .. i end
if redis.call('ZREM', KEYS[1], unpack(members)) > 0 then
  redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[3])
  redis.call('PUBLISH', ARGV[2], 'released')
  return 1
end
if redis.call('GET', KEYS[2]) == ARGV[1] then return 1 end
return 0
