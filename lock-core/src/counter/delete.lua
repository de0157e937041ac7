-- Deletes the item with its holds. Returns 1 when the item existed.
return redis.call('DEL', KEYS[1], KEYS[2], KEYS[3]) > 0 and 1 or 0
