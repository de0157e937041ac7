-- Compare-and-delete: release only if we still own the lock, then wake waiters.
-- KEYS[1] lock key; ARGV[1] token, ARGV[2] wake-up channel ('' wakes no one)
-- Returns 1 when released, 0 when the lock was not ours (expired or taken).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[2] ~= '' then
    redis.call('PUBLISH', ARGV[2], 'released')
  end
  return 1
end
return 0
