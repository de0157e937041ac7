-- Deletes a fair lock whoever holds it, then hands it to the head of the
-- queue.
-- KEYS[1..7] as in the prelude; ARGV[1] wake-up channel prefix, ARGV[2]
-- fencing counter TTL ms, ARGV[3] claim ms (see hand_over)
local deleted = redis.call('DEL', KEYS[1])
redis.call('DEL', KEYS[7])
prune(now_ms())
hand_over(ARGV[1], ARGV[2], ARGV[3])
return deleted
