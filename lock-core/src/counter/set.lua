-- Sets the available stock to ARGV[1] (creating the item). Holds stay.
redis.call('SET', KEYS[1], ARGV[1])
return 1
