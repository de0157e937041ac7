-- Releases one acquisition; the last one deletes the lock and wakes
-- waiters. Each released acquisition is remembered, as for the plain
-- lock, so a retried release gets the same answer.
-- KEYS[1] lock hash, KEYS[2] the key that remembers this token's release; ARGV[1] acquisition token,
-- ARGV[2] wake-up channel, ARGV[3] how long to remember it (ms)
if redis.call('HDEL', KEYS[1], 'acq:' .. ARGV[1]) == 1 then
  redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[3])
  -- Left besides acquisitions: the owner, and its fencing token if any.
  local fixed = 1 + redis.call('HEXISTS', KEYS[1], 'fence')
  if redis.call('HLEN', KEYS[1]) <= fixed then
    redis.call('DEL', KEYS[1])
    redis.call('PUBLISH', ARGV[2], 'released')
  end
  return 1
end
if redis.call('GET', KEYS[2]) == ARGV[1] then return 1 end
return 0
