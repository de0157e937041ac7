//! The lock conformance suite on a real redis-server.

lock_tests::lock_suite!(lock_tests::redis_backend());
