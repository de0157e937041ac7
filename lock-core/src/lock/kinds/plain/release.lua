-- Compare-and-delete: release only if we still own the lock, then wake
-- waiters. Each released token is remembered for a while (a key of its own), so a
-- release retried after its answer was lost gets the same answer.
-- KEYS[1] lock key, KEYS[2] the key that remembers this token's release; ARGV[1] token, ARGV[2] wake-up
-- channel ('' wakes no one), ARGV[3] how long to remember it (ms; '0':
-- not at all, for Redlock's undo of an attempt that was never a grant)
-- Returns 1 when released (now or by this token's earlier call), 0 when
-- the lock was not ours (expired or taken).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[3] ~= '0' then redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[3]) end
  if ARGV[2] ~= '' then
    redis.call('PUBLISH', ARGV[2], 'released')
  end
  return 1
end
if redis.call('GET', KEYS[2]) == ARGV[1] then return 1 end
return 0
