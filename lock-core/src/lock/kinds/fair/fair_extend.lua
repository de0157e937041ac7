-- Extends a fair lock if `token` still holds it. An owner's holding
-- (see the prelude's KEYS[7]) has one lease for all its acquisitions,
-- which an extend never shortens; any other holder's lease is set anew.
-- KEYS[1] lock key, KEYS[2] the holding; ARGV[1] token, ARGV[2] lease ms
-- Returns 1 when extended, 0 when the lock was not ours.
local holder = redis.call('GET', KEYS[1])
if not holder then return 0 end
local recorded = redis.call('HGET', KEYS[2], 'holding') == holder
if recorded and redis.call('HEXISTS', KEYS[2], 'owner') == 1 then
  if redis.call('HEXISTS', KEYS[2], 'acq:' .. ARGV[1]) == 0 then return 0 end
  for _, key in ipairs(KEYS) do
    if redis.call('PTTL', key) < tonumber(ARGV[2]) then redis.call('PEXPIRE', key, ARGV[2]) end
  end
  return 1
end
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  -- The record of its fencing token lives as long as the lock.
  if recorded then redis.call('PEXPIRE', KEYS[2], ARGV[2]) end
  return 1
end
return 0
