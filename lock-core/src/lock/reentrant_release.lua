-- Releases one acquisition; the last one deletes the lock and wakes waiters.
-- KEYS[1] lock hash; ARGV[1] acquisition token, ARGV[2] wake-up channel
if redis.call('HDEL', KEYS[1], 'acq:' .. ARGV[1]) == 1 then
  if redis.call('HLEN', KEYS[1]) <= 1 then
    redis.call('DEL', KEYS[1])
    redis.call('PUBLISH', ARGV[2], 'released')
  end
  return 1
end
return 0
