//! The rate-limit conformance suite on a real redis-server.

lock_tests::rate_suite!(lock_tests::redis_backend());
