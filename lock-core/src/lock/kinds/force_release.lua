-- Delete a lock whoever holds it (administrative unlock), then wake waiters.
-- KEYS[1] lock key; ARGV[1] wake-up channel
-- Returns 1 when a lock was deleted, 0 when it was free.
if redis.call('DEL', KEYS[1]) == 1 then
  redis.call('PUBLISH', ARGV[1], 'released')
  return 1
end
return 0
