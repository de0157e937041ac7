-- Compare-and-pexpire: extend the lease only if we still own the lock.
-- KEYS[1] lock key; ARGV[1] token, ARGV[2] new lease in ms
-- Returns 1 when extended, 0 when the lock was not ours.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
