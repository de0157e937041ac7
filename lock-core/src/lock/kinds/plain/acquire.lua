-- Plain lock: SET NX PX with the owner's token as the whole value, so any
-- client following the SET NX PX + compare-and-delete convention on the same
-- key interoperates.
-- KEYS[1] lock, KEYS[2] fencing counter
-- ARGV[1] token, ARGV[2] lease ms, ARGV[3] "1" for a fencing token,
-- ARGV[4] fencing counter TTL ms
-- Returns {1, fence or 0} when taken, {0, PTTL of the holder} when busy.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if ARGV[3] == '1' then return {1, next_fence(KEYS[2], ARGV[4])} end
  return {1, 0}
end
return {0, redis.call('PTTL', KEYS[1])}
