-- Take a plain lock: SET NX PX with the owner's token as the whole value, so
-- any client following the SET NX PX + compare-and-delete convention on the
-- same key interoperates.
-- KEYS[1] lock key, KEYS[2] fencing counter key
-- ARGV[1] token, ARGV[2] lease in ms, ARGV[3] "1" to issue a fencing token,
-- ARGV[4] TTL of the fencing counter in ms
-- Returns {1, fence or 0} when taken, {0, PTTL of the holder} when busy.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if ARGV[3] ~= '1' then
    return {1, 0}
  end
  local fence
  if redis.call('EXISTS', KEYS[2]) == 1 then
    fence = redis.call('INCR', KEYS[2])
  else
    -- A counter that expired restarts from Redis time in microseconds, which
    -- is above anything it handed out before (one grant per microsecond is
    -- far beyond what one key sees), so tokens stay monotonic.
    local t = redis.call('TIME')
    fence = tonumber(t[1]) * 1000000 + tonumber(t[2])
    redis.call('SET', KEYS[2], string.format('%d', fence))
  end
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
  return {1, fence}
end
return {0, redis.call('PTTL', KEYS[1])}
