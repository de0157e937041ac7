-- Reentrant lock: a hash with the owner, its fencing token once one was
-- asked for, and one field per live acquisition, so the same owner can take
-- it again and each acquisition is released once.
-- KEYS[1] lock hash, KEYS[2] fencing counter
-- ARGV[1] acquisition token, ARGV[2] lease ms, ARGV[3] "1" for a fencing
-- token, ARGV[4] fencing counter TTL ms, ARGV[5] owner
-- Returns {1, fence or 0} when taken, {0, PTTL} when another owner holds it.
local owner = redis.call('HGET', KEYS[1], 'owner')
if owner and owner ~= ARGV[5] then
  return {0, redis.call('PTTL', KEYS[1])}
end
if not owner then redis.call('HSET', KEYS[1], 'owner', ARGV[5]) end
redis.call('HSET', KEYS[1], 'acq:' .. ARGV[1], 1)
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if ARGV[3] == '1' then
  -- One token per holding, not per acquisition.
  return {1, holding_fence(KEYS[1], KEYS[2], ARGV[4])}
end
return {1, 0}
