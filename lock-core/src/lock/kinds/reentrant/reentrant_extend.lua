-- Extends the lock (never shortens it) if the acquisition is still live.
-- KEYS[1] lock hash; ARGV[1] acquisition token, ARGV[2] lease ms
if redis.call('HEXISTS', KEYS[1], 'acq:' .. ARGV[1]) == 1 then
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  return 1
end
return 0
