//! Reentrant, fair, semaphore and fencing suite on a real redis-server.

lock_tests::kinds_suite!(lock_tests::redis_backend());
