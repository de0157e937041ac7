-- Releases one acquisition; the last one deletes the lock and wakes waiters.
-- KEYS[1] lock hash; ARGV[1] acquisition token, ARGV[2] wake-up channel
if redis.call('HDEL', KEYS[1], 'acq:' .. ARGV[1]) == 1 then
  -- Left besides acquisitions: the owner, and its fencing token if any.
  local fixed = 1 + redis.call('HEXISTS', KEYS[1], 'fence')
  if redis.call('HLEN', KEYS[1]) <= fixed then
    redis.call('DEL', KEYS[1])
    redis.call('PUBLISH', ARGV[2], 'released')
  end
  return 1
end
return 0
