-- Releases the lock if we hold it, or else leaves the queue (a waiter that
-- gave up or was cancelled); then, if the lock is free, hands it to the new
-- head.
-- KEYS[1..7] as in the prelude, KEYS[8] the key that remembers this token's release; ARGV[1] token,
-- ARGV[2] wake-up channel prefix, ARGV[3] fencing counter TTL ms, ARGV[4]
-- claim ms (see hand_over), ARGV[5] how long to remember the release (ms)
-- Returns 1 when the lock was ours and is released (now, or by this
-- token's earlier call: a retried release gets the same answer), else 0.
local released = 0
local holder = redis.call('GET', KEYS[1])
local holding = owned(holder)
if holding and redis.call('HDEL', KEYS[7], 'acq:' .. ARGV[1]) == 1 then
  redis.call('SET', KEYS[8], ARGV[1], 'PX', ARGV[5])
  released = 1
  -- Left besides acquisitions: 'holding', 'owner' and maybe 'fence'.
  local fixed = 2 + redis.call('HEXISTS', KEYS[7], 'fence')
  if redis.call('HLEN', KEYS[7]) > fixed then return 1 end
  redis.call('DEL', KEYS[1], KEYS[7])
elseif not holding and holder == ARGV[1] then
  redis.call('DEL', KEYS[1], KEYS[7])
  redis.call('SET', KEYS[8], ARGV[1], 'PX', ARGV[5])
  released = 1
elseif redis.call('ZREM', KEYS[3], ARGV[1]) == 1 then
  redis.call('LREM', KEYS[2], 0, ARGV[1])
  redis.call('HDEL', KEYS[4], ARGV[1])
elseif redis.call('GET', KEYS[8]) == ARGV[1] then
  released = 1
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  prune(now_ms())
  hand_over(ARGV[2], ARGV[3], ARGV[4])
end
return released
