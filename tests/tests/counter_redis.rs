//! The stock-counter conformance suite on a real redis-server.

lock_tests::counter_suite!(lock_tests::redis_backend());
